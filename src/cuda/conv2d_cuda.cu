/* conv2d_cuda.cu — conv2d on the GPU with cuDNN: NHWC activations, KRSC
 * filters, algorithms searched once per shape (conv_cudnn.h explains
 * layouts, dtypes and math types). Passes: forward = FWD; backward:
 * d_in = BWD_DATA, dW = BWD_FILTER, db = column sums of d_out. */
#include "cuda/conv_cudnn.h"
#include "cuda/tangent_cuda.h"

static mp_status conv2d_cuda_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                     const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                     size_t *saved_bytes) {
    (void)saved_bytes; /* nothing kept from forward to backward: backward reads the input and filter again */
    const bool need[MP_CONV_NPASS] = {true, cfg->training, cfg->training}; /* FWD, BWD_DATA, BWD_FILTER */
    mp_conv_cudnn *st = NULL;
    MP_TRY(mp_conv_cudnn_prepare(ctx, d, info, cfg, need, &st, workspace_bytes));
    if (cfg->tangents) {
        const size_t t = mp_conv_tangent_workspace(st, info);
        if (t > st->ws_total) st->ws_total = t;
        if (*workspace_bytes < t) *workspace_bytes = t;
    }
    *state = st;
    return MP_OK;
}

/* Tangents: conv_tangent_cuda.cu (the same passes on tangents). */
extern "C" const mp_cuda_op_vtable mp_cuda_conv2d_vt = {"conv2d",
                                                        conv2d_cuda_prepare,
                                                        mp_conv_cudnn_release,
                                                        mp_conv_cudnn_forward,
                                                        mp_conv_cudnn_backward,
                                                        mp_cuda_conv_forward_tangent,
                                                        mp_cuda_conv_backward_tangent,
                                                        mp_conv_cudnn_adds_input_grad};
