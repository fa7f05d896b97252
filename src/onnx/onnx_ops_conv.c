/* onnx_ops_conv.c — importing Conv, ConvTranspose, BatchNormalization and the
 * pools. mixprec's windows are square with one padding on every side, so
 * non-square kernels, strides or dilations and asymmetric pads are errors
 * naming the attribute. */
#include <float.h>
#include <string.h>

#include "onnx/onnx_import.h"

typedef struct {
    int k, stride, pad, dil;
} spatial;

/* The pair attribute `name` (default def) as one value, or an error when its
 * two values differ. */
static mp_status square_attr(onnx_ctx *c, const char *name, int64_t def, int64_t lo, int64_t *out) {
    int64_t v[8];
    int n;
    MP_TRY(onnx_attr_ints(c, name, v, 8, &n));
    if (n < 0) {
        *out = def;
        return MP_OK;
    }
    if (n != 2) return onnx_fail(c, MP_ERR_UNSUPPORTED, "%s has %d values: mixprec's ops are 2-D", name, n);
    if (v[0] != v[1])
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "%s [%lld, %lld] is not square: mixprec's convolutions and pools take "
                                                "one value for height and width", name, (long long)v[0], (long long)v[1]);
    if (v[0] < lo || v[0] > 4096)
        return onnx_fail(c, MP_ERR_FORMAT, "%s %lld is out of range", name, (long long)v[0]);
    *out = v[0];
    return MP_OK;
}

/* kernel_shape (or the weight's kh x kw), strides, dilations, pads and
 * auto_pad of a node reading the 4-D activation x. */
static mp_status spatial_attrs(onnx_ctx *c, const onnx_value *x, int64_t kh, int64_t kw, bool transposed,
                               spatial *out) {
    int64_t k = 0, s = 1, d = 1, pads[8];
    int np;
    if (kh >= 0 && kh != kw)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "the weight's kernel %lldx%lld is not square: mixprec's convolutions "
                                                "take square kernels", (long long)kh, (long long)kw);
    MP_TRY(square_attr(c, "kernel_shape", kh, 1, &k));
    if (k < 1) return onnx_fail(c, MP_ERR_FORMAT, "kernel_shape is missing");
    if (kh >= 0 && k != kh)
        return onnx_fail(c, MP_ERR_FORMAT, "kernel_shape %lld differs from the weight's %lld", (long long)k,
                         (long long)kh);
    MP_TRY(square_attr(c, "strides", 1, 1, &s));
    MP_TRY(square_attr(c, "dilations", 1, 1, &d));
    MP_TRY(onnx_attr_ints(c, "pads", pads, 8, &np));
    const char *auto_pad;
    MP_TRY(onnx_attr_string(c, "auto_pad", "NOTSET", &auto_pad));
    int64_t pad = 0;
    if (!strcmp(auto_pad, "NOTSET") || !auto_pad[0]) {
        if (np >= 0 && np != 4) return onnx_fail(c, MP_ERR_UNSUPPORTED, "pads has %d values: mixprec's ops are 2-D", np);
        if (np == 4) {
            if (pads[0] < 0 || pads[0] > 4096)
                return onnx_fail(c, MP_ERR_FORMAT, "pads %lld out of range", (long long)pads[0]);
            if (pads[0] != pads[1] || pads[0] != pads[2] || pads[0] != pads[3])
                return onnx_fail(c, MP_ERR_UNSUPPORTED,
                                 "pads [%lld, %lld, %lld, %lld] are not symmetric: mixprec pads all four sides alike",
                                 (long long)pads[0], (long long)pads[1], (long long)pads[2], (long long)pads[3]);
            pad = pads[0];
        }
    } else if (!strcmp(auto_pad, "VALID")) {
        pad = 0;
    } else if (!transposed && (!strcmp(auto_pad, "SAME_UPPER") || !strcmp(auto_pad, "SAME_LOWER"))) {
        int64_t total[2];
        for (int i = 0; i < 2; i++) {
            const int64_t in = x->dims[2 + i], outn = (in + s - 1) / s;
            total[i] = (outn - 1) * s + (k - 1) * d + 1 - in;
            if (total[i] < 0) total[i] = 0;
        }
        if (total[0] != total[1] || total[0] % 2)
            return onnx_fail(c, MP_ERR_UNSUPPORTED, "auto_pad %s needs padding %lld x %lld, not the same on every "
                                                    "side: give symmetric pads", auto_pad, (long long)total[0],
                             (long long)total[1]);
        pad = total[0] / 2;
    } else {
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "auto_pad %s is not supported", auto_pad);
    }
    if (pad < 0 || pad > 4096) return onnx_fail(c, MP_ERR_FORMAT, "pads %lld out of range", (long long)pad);
    *out = (spatial){(int)k, (int)s, (int)pad, (int)d};
    return MP_OK;
}

static mp_status need4d(onnx_ctx *c, const onnx_value *x) {
    char b[96];
    if (x->ndim != 4)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "input '%s' has shape %s: mixprec's %s takes (N, C, H, W)", x->name,
                         onnx_dims_str(x->ndim, x->dims, b, sizeof b), c->node->op_type);
    return MP_OK;
}

static mp_status float_const(onnx_ctx *c, const onnx_value *v, int ndim, int64_t numel) {
    if (v->is_int) return onnx_fail(c, MP_ERR_FORMAT, "'%s' is an integer tensor", v->name);
    if ((ndim >= 0 && v->ndim != ndim) || (numel >= 0 && v->numel != numel)) {
        char b[96];
        return onnx_fail(c, MP_ERR_SHAPE, "'%s' has shape %s, expected %d dims%s", v->name,
                         onnx_dims_str(v->ndim, v->dims, b, sizeof b), ndim, numel >= 0 ? " of one value per channel" : "");
    }
    return MP_OK;
}

static mp_status emit_conv(onnx_ctx *c, const char *name, bool transposed) {
    onnx_value *x, *w, *b;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(onnx_const(c, 1, &w));
    MP_TRY(onnx_input(c, 2, &b));
    MP_TRY(need4d(c, x));
    MP_TRY(float_const(c, w, 4, -1));
    int64_t group, opad = 0;
    MP_TRY(onnx_attr_int(c, "group", 1, &group));
    if (group < 1 || group > x->dims[1]) return onnx_fail(c, MP_ERR_FORMAT, "group %lld", (long long)group);
    spatial sp = {0};
    MP_TRY(spatial_attrs(c, x, w->dims[2], w->dims[3], transposed, &sp));
    const int64_t cin = transposed ? w->dims[0] : w->dims[1] * group;
    const int64_t cout = transposed ? w->dims[1] * group : w->dims[0];
    if (x->dims[1] != cin) {
        char bx[96], bw[96];
        return onnx_fail(c, MP_ERR_SHAPE, "input '%s' %s has %lld channels; weight '%s' %s with group %lld takes %lld",
                         x->name, onnx_dims_str(x->ndim, x->dims, bx, sizeof bx), (long long)x->dims[1], w->name,
                         onnx_dims_str(w->ndim, w->dims, bw, sizeof bw), (long long)group, (long long)cin);
    }
    if (b) {
        if (b->kind != ONNX_V_CONST) return onnx_fail(c, MP_ERR_UNSUPPORTED, "bias '%s' is not a constant", b->name);
        MP_TRY(float_const(c, b, 1, cout));
    }
    if (transposed) {
        if (onnx_attr(c, "output_shape"))
            return onnx_fail(c, MP_ERR_UNSUPPORTED, "output_shape is not supported: give pads and output_padding");
        MP_TRY(square_attr(c, "output_padding", 0, 0, &opad));
    }
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    mp_conv_opts o = {.out_channels = (int)cout, .kernel = sp.k, .stride = sp.stride, .padding = sp.pad,
                      .dilation = sp.dil, .groups = (int)group, .output_padding = (int)opad, .bias = b != NULL};
    mp_node y = transposed ? mp_conv_transpose2d(c->g, name, xin, o) : mp_conv2d(c->g, name, xin, o);
    MP_TRY(onnx_built(c, y));
    MP_TRY(onnx_set_param(c, name, "weight", w, w->f, w->numel));
    if (b) MP_TRY(onnx_set_param(c, name, "bias", b, b->f, b->numel));
    return onnx_output_node(c, y);
}

mp_status onnx_emit_conv(onnx_ctx *c, const char *name) { return emit_conv(c, name, false); }
mp_status onnx_emit_conv_transpose(onnx_ctx *c, const char *name) { return emit_conv(c, name, true); }

mp_status onnx_emit_batchnorm(onnx_ctx *c, const char *name) {
    onnx_value *x, *p[4];
    MP_TRY(onnx_act(c, 0, &x));
    for (int k = 0; k < 4; k++) MP_TRY(onnx_const(c, 1 + k, &p[k]));
    if (x->ndim != 4 && x->ndim != 2)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "BatchNormalization of a %d-D input (mixprec: (N, C, H, W) or (N, C))",
                         x->ndim);
    const int64_t ch = x->dims[1];
    for (int k = 0; k < 4; k++) MP_TRY(float_const(c, p[k], 1, ch));
    float eps, mom;
    int64_t training;
    MP_TRY(onnx_attr_float(c, "epsilon", 1e-5f, &eps));
    MP_TRY(onnx_attr_float(c, "momentum", 0.9f, &mom));
    MP_TRY(onnx_attr_int(c, "training_mode", 0, &training));
    if (training)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "training_mode=1: export the model in inference (eval) mode");
    if (!(eps > 0) || !(mom >= 0 && mom <= 1))
        return onnx_fail(c, MP_ERR_FORMAT, "epsilon %g / momentum %g out of range", eps, mom);
    for (int64_t k = 0; k < ch; k++)
        if (p[3]->f[k] < 0) return onnx_fail(c, MP_ERR_FORMAT, "variance '%s' has a negative value", p[3]->name);
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    if (x->ndim == 2) {
        char rn[MP_NAME_MAX];
        const int64_t d4[4] = {ONNX_BATCH, ch, 1, 1};
        onnx_derived_name(c, name, "_4d", rn);
        MP_TRY(onnx_reshape_node(c, rn, xin, 4, d4, &xin));
    }
    /* ONNX: running = momentum * running + (1 - momentum) * batch; mixprec
     * weighs the batch by its momentum, as PyTorch (and 0 means the default) */
    const float m = 1 - mom > 0 ? 1 - mom : FLT_MIN;
    mp_node y = mp_batchnorm2d(c->g, name, xin, (mp_batchnorm_opts){.momentum = m, .eps = eps});
    MP_TRY(onnx_built(c, y));
    static const char *const names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; k++) MP_TRY(onnx_set_param(c, name, names[k], p[k], p[k]->f, p[k]->numel));
    if (x->ndim == 2) {
        const int64_t d2[2] = {ONNX_BATCH, ch};
        return onnx_output(c, y, 2, d2);
    }
    return onnx_output_node(c, y);
}

static mp_status emit_pool(onnx_ctx *c, const char *name, bool max) {
    onnx_value *x;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(need4d(c, x));
    spatial sp = {0};
    MP_TRY(spatial_attrs(c, x, -1, -1, false, &sp));
    if (sp.dil != 1) return onnx_fail(c, MP_ERR_UNSUPPORTED, "dilations %d: mixprec's pools are not dilated", sp.dil);
    int64_t ceil_mode, include_pad;
    MP_TRY(onnx_attr_int(c, "ceil_mode", 0, &ceil_mode));
    MP_TRY(onnx_attr_int(c, "count_include_pad", 0, &include_pad));
    if (ceil_mode) /* the same as floor when the windows fit exactly */
        for (int i = 2; i < 4; i++)
            if ((x->dims[i] + 2 * sp.pad - sp.k) % sp.stride)
                return onnx_fail(c, MP_ERR_UNSUPPORTED, "ceil_mode=1 with input %lld, kernel %d, stride %d, pads %d: "
                                                        "mixprec's pools round the output size down",
                                 (long long)x->dims[i], sp.k, sp.stride, sp.pad);
    if (!max && sp.pad > 0 && !include_pad)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "count_include_pad=0 with pads %d: mixprec's average pooling counts "
                                                "the padding (count_include_pad=1)", sp.pad);
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    mp_pool_opts o = {.kernel = sp.k, .stride = sp.stride, .padding = sp.pad};
    return onnx_output_node(c, max ? mp_maxpool2d(c->g, name, xin, o) : mp_avgpool2d(c->g, name, xin, o));
}

mp_status onnx_emit_maxpool(onnx_ctx *c, const char *name) {
    int64_t order;
    MP_TRY(onnx_attr_int(c, "storage_order", 0, &order)); /* only affects the Indices output, refused below */
    return emit_pool(c, name, true);
}

mp_status onnx_emit_avgpool(onnx_ctx *c, const char *name) { return emit_pool(c, name, false); }

mp_status onnx_emit_global_avgpool(onnx_ctx *c, const char *name) {
    onnx_value *x;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(need4d(c, x));
    const int64_t dims[4] = {ONNX_BATCH, x->dims[1], 1, 1};
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    mp_node y = mp_global_avgpool(c->g, name, xin); /* (N, C): its readers reshape when they need 4-D */
    MP_TRY(onnx_built(c, y));
    return onnx_output(c, y, 4, dims);
}
