/* op_table_cuda.c — the CUDA op table: op kind -> its GPU vtable (cuda_op.h).
 * Sources (input, labels, targets) need none and map to NULL. */
#include "cuda/cuda_op.h"

const mp_cuda_op_vtable *mp_cuda_op_lookup(mp_op_kind k) {
    switch (k) {
    case MP_OP_INPUT:
    case MP_OP_LABELS:
    case MP_OP_TARGETS: return NULL;
    case MP_OP_CONV2D: return &mp_cuda_conv2d_vt;
    case MP_OP_CONV_TRANSPOSE2D: return &mp_cuda_conv_transpose2d_vt;
    case MP_OP_BATCHNORM2D: return &mp_cuda_batchnorm2d_vt;
    case MP_OP_RELU: return &mp_cuda_relu_vt;
    case MP_OP_LEAKY_RELU: return &mp_cuda_leaky_relu_vt;
    case MP_OP_TANH: return &mp_cuda_tanh_vt;
    case MP_OP_SIGMOID: return &mp_cuda_sigmoid_vt;
    case MP_OP_MAXPOOL2D: return &mp_cuda_maxpool2d_vt;
    case MP_OP_AVGPOOL2D: return &mp_cuda_avgpool2d_vt;
    case MP_OP_GLOBAL_AVGPOOL: return &mp_cuda_global_avgpool_vt;
    case MP_OP_LINEAR: return &mp_cuda_linear_vt;
    case MP_OP_ADD: return &mp_cuda_add_vt;
    case MP_OP_MUL: return &mp_cuda_mul_vt;
    case MP_OP_CONCAT: return &mp_cuda_concat_vt;
    case MP_OP_RESHAPE: return &mp_cuda_reshape_vt;
    case MP_OP_DROPOUT: return &mp_cuda_dropout_vt;
    case MP_OP_SOFTMAX_CE: return &mp_cuda_softmax_ce_vt;
    case MP_OP_BCE_LOGITS: return &mp_cuda_bce_logits_vt;
    case MP_OP_COUNT: break;
    }
    return NULL;
}
