/* op_table.c — kind -> vtable, and helpers shared by op files. */
#include <stdio.h>

#include "ops/op.h"


const mp_op_vtable *mp_op_lookup(mp_op_kind k) {
    switch (k) {
    case MP_OP_INPUT: return &mp_op_input_vt;
    case MP_OP_LABELS: return &mp_op_labels_vt;
    case MP_OP_TARGETS: return &mp_op_targets_vt;
    case MP_OP_CONV2D: return &mp_op_conv2d_vt;
    case MP_OP_CONV_TRANSPOSE2D: return &mp_op_conv_transpose2d_vt;
    case MP_OP_BATCHNORM2D: return &mp_op_batchnorm2d_vt;
    case MP_OP_RELU: return &mp_op_relu_vt;
    case MP_OP_LEAKY_RELU: return &mp_op_leaky_relu_vt;
    case MP_OP_TANH: return &mp_op_tanh_vt;
    case MP_OP_SIGMOID: return &mp_op_sigmoid_vt;
    case MP_OP_MAXPOOL2D: return &mp_op_maxpool2d_vt;
    case MP_OP_AVGPOOL2D: return &mp_op_avgpool2d_vt;
    case MP_OP_GLOBAL_AVGPOOL: return &mp_op_global_avgpool_vt;
    case MP_OP_LINEAR: return &mp_op_linear_vt;
    case MP_OP_ADD: return &mp_op_add_vt;
    case MP_OP_MUL: return &mp_op_mul_vt;
    case MP_OP_CONCAT: return &mp_op_concat_vt;
    case MP_OP_RESHAPE: return &mp_op_reshape_vt;
    case MP_OP_DROPOUT: return &mp_op_dropout_vt;
    case MP_OP_SOFTMAX_CE: return &mp_op_softmax_ce_vt;
    case MP_OP_BCE_LOGITS: return &mp_op_bce_logits_vt;
    case MP_OP_COUNT: break;
    }
    return NULL;
}

mp_status mp_op_shape_error(const mp_op_desc *d, const mp_op_info *info, const char *what) {
    char buf[256];
    size_t k = 0;
    for (int i = 0; i < info->n_in && k < sizeof buf; i++) {
        char s[64];
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "",
                              mp_shape_str(&info->in[i], s, sizeof s));
    }
    if (info->n_in == 0) snprintf(buf, sizeof buf, "none");
    return mp_error(MP_ERR_SHAPE, "%s '%s': %s (input shapes %s)", mp_op_lookup(d->kind)->name,
                    d->name ? d->name : "?", what, buf);
}

mp_layout_support mp_op_layouts_alike(const mp_op_desc *d, const mp_op_info *info, const void *state) {
    (void)d, (void)info, (void)state;
    return MP_LAYOUT_ALIKE;
}

mp_status mp_op_layout_error(const mp_op_call *c, const char *kernels) {
    return mp_error(MP_ERR_INTERNAL, "%s '%s': its tensors are stored channels-last, which %s do not read",
                    mp_op_lookup(c->desc->kind)->name, c->desc->name ? c->desc->name : "?", kernels);
}

mp_status mp_op_infer_same_shape2(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 2) return mp_op_shape_error(d, info, "takes exactly two inputs");
    if (!mp_shape_equal(&info->in[0], &info->in[1])) {
        const char *op = mp_op_lookup(d->kind)->name;
        char a[64], b[64];
        return mp_error(MP_ERR_SHAPE, "%s '%s': input shapes %s and %s differ (%s needs identical shapes)", op,
                        d->name ? d->name : "?", mp_shape_str(&info->in[0], a, sizeof a),
                        mp_shape_str(&info->in[1], b, sizeof b), op);
    }
    info->out = info->in[0];
    return MP_OK;
}

bool mp_onednn_available(void) {
#ifdef MP_HAVE_ONEDNN
    return true;
#else
    return false;
#endif
}
