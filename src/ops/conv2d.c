/* conv2d.c — 2-D convolution with PyTorch's semantics: shape rules, parameter
 * specs and dispatch between the reference kernels (conv2d_ref.inc, f32 and
 * f64) and the oneDNN f32 fast path (conv_onednn.c).
 * input (N, Cin, H, W), weight (Cout, Cin/groups, K, K), bias (Cout),
 * output (N, Cout, Ho, Wo), Ho = (H + 2 pad - dil (K - 1) - 1) / stride + 1. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ops/conv_onednn.h"
#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "conv2d_ref.inc"
#include "instantiate_real.inc"

#define CONV_FAIL(...)                                    \
    do {                                                  \
        char conv_msg_[192];                              \
        snprintf(conv_msg_, sizeof conv_msg_, __VA_ARGS__); \
        return mp_op_shape_error(d, info, conv_msg_);     \
    } while (0)

static mp_status conv2d_infer(const mp_op_desc *d, mp_op_info *info) {
    const mp_conv_opts *o = &d->attr.conv;
    if (info->n_in != 1) CONV_FAIL("takes exactly one input, got %d", info->n_in);
    const mp_shape *in = &info->in[0];
    if (in->ndim != 4) CONV_FAIL("expects a 4-D input (N, C, H, W), got %d-D", in->ndim);
    for (int i = 0; i < 4; i++)
        if (in->dims[i] < 1) CONV_FAIL("input has an empty dimension %d", i);
    const int n = in->dims[0], cin = in->dims[1], h = in->dims[2], w = in->dims[3];
    const int cout = o->out_channels, k = o->kernel, g = o->groups;
    if (cout < 1) CONV_FAIL("out_channels %d must be >= 1", cout);
    if (k < 1) CONV_FAIL("kernel %d must be >= 1", k);
    if (o->stride < 1) CONV_FAIL("stride %d must be >= 1", o->stride);
    if (o->dilation < 1) CONV_FAIL("dilation %d must be >= 1", o->dilation);
    if (o->padding < 0) CONV_FAIL("padding %d must be >= 0", o->padding);
    if (g < 1) CONV_FAIL("groups %d must be >= 1", g);
    if (o->output_padding != 0)
        CONV_FAIL("output_padding %d is only valid for conv_transpose2d", o->output_padding);
    if (cin % g) CONV_FAIL("in_channels %d not divisible by groups %d", cin, g);
    if (cout % g) CONV_FAIL("out_channels %d not divisible by groups %d", cout, g);
    const int64_t span = (int64_t)o->dilation * (k - 1) + 1; /* receptive field of the kernel */
    const int64_t hn = (int64_t)h + 2 * (int64_t)o->padding - span;
    const int64_t wn = (int64_t)w + 2 * (int64_t)o->padding - span;
    if (hn < 0 || wn < 0)
        CONV_FAIL("kernel %d with dilation %d spans %lld, more than the padded input %lldx%lld "
                  "(padding %d): output size would be < 1",
                  k, o->dilation, (long long)span, (long long)h + 2 * o->padding,
                  (long long)w + 2 * o->padding, o->padding);
    const int64_t ho = hn / o->stride + 1, wo = wn / o->stride + 1;
    if (ho > INT_MAX || wo > INT_MAX || (int64_t)cin / g * k * k > INT_MAX)
        CONV_FAIL("output %lldx%lld or kernel %d too large", (long long)ho, (long long)wo, k);
    info->out = mp_shape4(n, cout, (int)ho, (int)wo);
    const int fan_in = cin / g * k * k;
    info->n_params = o->bias ? 2 : 1;
    info->params[0] = (mp_param_spec){"weight", mp_shape4(cout, cin / g, k, k), true, MP_INIT_HE_NORMAL, fan_in};
    if (o->bias)
        info->params[1] = (mp_param_spec){"bias", mp_shape1(cout), true, MP_INIT_UNIFORM_FAN_IN, fan_in};
    info->saved_bytes = 0;
    info->workspace_bytes = 0;
    /* the second term, then room for a zero bias / a discarded bias gradient (oneDNN tangent kernels) */
    info->tangent_workspace_bytes = mp_tangent_affine_workspace(info) + MP_ALIGN64((size_t)cout * sizeof(double));
    return MP_OK;
}

/* prepare() and release() are mp_conv_prepare / mp_conv_release
 * (conv_onednn.h), shared with conv_transpose2d. */

static mp_status conv2d_forward(const mp_op_call *c) {
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c)) return mp_conv_onednn_forward(c->state, c);
#endif
    if (c->info->nhwc) return mp_op_layout_error(c, "the reference convolution kernels");
    const mp_conv_geom g = mp_conv_geom_of(c->desc, &c->in[0].shape, &c->out.shape);
    const void *b = c->desc->attr.conv.bias ? c->param[1].data : NULL;
    MP_REAL_CALL(c->out.dtype, conv_fwd, &g, c->in[0].data, c->param[0].data, b, c->out.data);
    return MP_OK;
}

static mp_status conv2d_backward(const mp_op_call *c) {
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c) && mp_conv_onednn_has_backward(c->state)) return mp_conv_onednn_backward(c->state, c);
#endif
    if (c->info->nhwc) return mp_op_layout_error(c, "the reference convolution kernels");
    const mp_conv_geom g = mp_conv_geom_of(c->desc, &c->in[0].shape, &c->out.shape);
    const mp_dtype dt = c->out.dtype;
    if (c->d_in[0].data) MP_REAL_CALL(dt, conv_bwd_data, &g, c->d_out.data, c->param[0].data, NULL, c->d_in[0].data);
    if (c->d_param[0].data) MP_REAL_CALL(dt, conv_bwd_weights, &g, c->in[0].data, c->d_out.data, c->d_param[0].data);
    if (c->desc->attr.conv.bias && c->d_param[1].data)
        MP_REAL_CALL(dt, channel_sum, c->d_out.data, g.n, g.cy, (int64_t)g.hy * g.wy, c->d_param[1].data);
    return MP_OK;
}

/* Second derivatives (tangent.h): kernels bilinear in their two operands,
 * in the conv view of either op. conv_transpose2d's passes are conv2d's
 * exchanged (conv_transpose2d_ref.inc), so its kernels are here too. A conv2d
 * node with oneDNN primitives runs them (the bias a zero vector in, the bias
 * gradient discarded, both in the tangent scratch's extra room); else, and
 * if oneDNN fails, the reference kernels. */
#define CONV_GEOM(c) mp_conv_geom_of(c->desc, &c->in[0].shape, &c->out.shape)
#ifdef MP_HAVE_ONEDNN
/* A copy of c for one oneDNN pass of a tangent: no gradients asked, the bias
 * pointing at `bias` (zeroed first when zero). */
static mp_op_call dnnl_call(const mp_op_call *c, bool zero) {
    mp_op_call s = *c;
    for (int k = 0; k < MP_MAX_INPUTS; k++) s.d_in[k].data = NULL;
    for (int k = 0; k < MP_MAX_PARAMS; k++) s.d_param[k].data = NULL;
    if (c->desc->attr.conv.bias) {
        s.param[1].data = mp_tangent_affine_extra(c);
        if (zero) memset(s.param[1].data, 0, (size_t)mp_tensor_numel(&c->param[1]) * mp_dtype_size(c->out.dtype));
    }
    return s;
}
static bool dnnl_tangent(const mp_op_call *c) { return c->desc->kind == MP_OP_CONV2D && mp_onednn_use(c); }
#endif
static void conv_fwd_k(const mp_op_call *c, const void *x, const void *w, void *y) {
#ifdef MP_HAVE_ONEDNN
    if (dnnl_tangent(c)) {
        mp_op_call s = dnnl_call(c, true);
        s.in[0].data = (void *)x, s.param[0].data = (void *)w, s.out.data = y;
        if (mp_conv_onednn_forward(c->state, &s) == MP_OK) return;
    }
#endif
    const mp_conv_geom g = CONV_GEOM(c);
    MP_REAL_CALL(c->out.dtype, conv_fwd, &g, x, w, NULL, y);
}
static void conv_bwd_data_k(const mp_op_call *c, const void *dy, const void *w, void *dx) {
#ifdef MP_HAVE_ONEDNN
    if (dnnl_tangent(c) && mp_conv_onednn_has_backward(c->state)) {
        mp_op_call s = dnnl_call(c, false);
        s.d_out.data = (void *)dy, s.param[0].data = (void *)w, s.d_in[0].data = dx;
        if (mp_conv_onednn_backward(c->state, &s) == MP_OK) return;
    }
#endif
    const mp_conv_geom g = CONV_GEOM(c);
    MP_REAL_CALL(c->out.dtype, conv_bwd_data, &g, dy, w, NULL, dx);
}
static void conv_bwd_weights_k(const mp_op_call *c, const void *x, const void *dy, void *dw) {
#ifdef MP_HAVE_ONEDNN
    if (dnnl_tangent(c) && mp_conv_onednn_has_backward(c->state)) {
        mp_op_call s = dnnl_call(c, false);
        s.in[0].data = (void *)x, s.d_out.data = (void *)dy, s.d_param[0].data = dw;
        if (c->desc->attr.conv.bias) s.d_param[1].data = mp_tangent_affine_extra(c);
        if (mp_conv_onednn_backward(c->state, &s) == MP_OK) return;
    }
#endif
    const mp_conv_geom g = CONV_GEOM(c);
    MP_REAL_CALL(c->out.dtype, conv_bwd_weights, &g, x, dy, dw);
}
#undef CONV_GEOM
/* conv_transpose2d's weight gradient: conv_bwd_weights with x = d_out, dy = in */
static void convt_bwd_weights_k(const mp_op_call *c, const void *in, const void *d_out, void *dw) {
    conv_bwd_weights_k(c, d_out, in, dw);
}

const mp_tangent_affine mp_conv2d_tangent_kernels = {conv_fwd_k, conv_bwd_data_k, conv_bwd_weights_k};
const mp_tangent_affine mp_conv_transpose2d_tangent_kernels = {conv_bwd_data_k, conv_fwd_k, convt_bwd_weights_k};

static mp_status conv2d_forward_tangent(const mp_op_call *c) {
    return mp_tangent_affine_forward(c, &mp_conv2d_tangent_kernels);
}
static mp_status conv2d_backward_tangent(const mp_op_call *c) {
    return mp_tangent_affine_backward(c, &mp_conv2d_tangent_kernels);
}

const mp_op_vtable mp_op_conv2d_vt = {
    .name = "conv2d",
    .infer = conv2d_infer,
    .prepare = mp_conv_prepare,
    .release = mp_conv_release,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
    .forward_tangent = conv2d_forward_tangent,
    .backward_tangent = conv2d_backward_tangent,
    .layouts = mp_conv_layouts,
};
