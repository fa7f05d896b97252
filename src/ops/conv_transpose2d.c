/* conv_transpose2d.c — 2-D transposed convolution with PyTorch's semantics:
 * shape rules, parameter specs and dispatch between the reference kernels
 * (conv_transpose2d_ref.inc) and the oneDNN f32 fast path (deconvolution
 * primitives, conv_onednn.c).
 * input (N, Cin, H, W), weight (Cin, Cout/groups, K, K), bias (Cout),
 * output (N, Cout, Ho, Wo),
 * Ho = (H - 1) stride - 2 pad + dil (K - 1) + output_padding + 1.
 * Initialization follows PyTorch, whose fan_in for this weight layout is
 * weight.size(1) * K * K = Cout/groups * K * K (for the weight and the bias). */
#include <limits.h>
#include <stdio.h>

#include "ops/conv_onednn.h"
#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "conv_transpose2d_ref.inc"
#include "instantiate_real.inc"

#define CONVT_FAIL(...)                                     \
    do {                                                    \
        char convt_msg_[192];                               \
        snprintf(convt_msg_, sizeof convt_msg_, __VA_ARGS__); \
        return mp_op_shape_error(d, info, convt_msg_);      \
    } while (0)

static mp_status convt_infer(const mp_op_desc *d, mp_op_info *info) {
    const mp_conv_opts *o = &d->attr.conv;
    if (info->n_in != 1) CONVT_FAIL("takes exactly one input, got %d", info->n_in);
    const mp_shape *in = &info->in[0];
    if (in->ndim != 4) CONVT_FAIL("expects a 4-D input (N, C, H, W), got %d-D", in->ndim);
    for (int i = 0; i < 4; i++)
        if (in->dims[i] < 1) CONVT_FAIL("input has an empty dimension %d", i);
    const int n = in->dims[0], cin = in->dims[1], h = in->dims[2], w = in->dims[3];
    const int cout = o->out_channels, k = o->kernel, g = o->groups, op = o->output_padding;
    if (cout < 1) CONVT_FAIL("out_channels %d must be >= 1", cout);
    if (k < 1) CONVT_FAIL("kernel %d must be >= 1", k);
    if (o->stride < 1) CONVT_FAIL("stride %d must be >= 1", o->stride);
    if (o->dilation < 1) CONVT_FAIL("dilation %d must be >= 1", o->dilation);
    if (o->padding < 0) CONVT_FAIL("padding %d must be >= 0", o->padding);
    if (g < 1) CONVT_FAIL("groups %d must be >= 1", g);
    if (op < 0) CONVT_FAIL("output_padding %d must be >= 0", op);
    if (op >= o->stride && op >= o->dilation)
        CONVT_FAIL("output_padding %d must be smaller than stride %d or dilation %d", op, o->stride,
                   o->dilation);
    if (cin % g) CONVT_FAIL("in_channels %d not divisible by groups %d", cin, g);
    if (cout % g) CONVT_FAIL("out_channels %d not divisible by groups %d", cout, g);
    const int64_t span = (int64_t)o->dilation * (k - 1) + 1;
    const int64_t ho = ((int64_t)h - 1) * o->stride - 2 * (int64_t)o->padding + span + op;
    const int64_t wo = ((int64_t)w - 1) * o->stride - 2 * (int64_t)o->padding + span + op;
    if (ho < 1 || wo < 1)
        CONVT_FAIL("output size would be %lldx%lld (< 1): padding %d too large for input %dx%d, "
                   "kernel %d, stride %d, dilation %d",
                   (long long)ho, (long long)wo, o->padding, h, w, k, o->stride, o->dilation);
    if (ho > INT_MAX || wo > INT_MAX || (int64_t)cout / g * k * k > INT_MAX)
        CONVT_FAIL("output %lldx%lld or kernel %d too large", (long long)ho, (long long)wo, k);
    info->out = mp_shape4(n, cout, (int)ho, (int)wo);
    const int fan_in = cout / g * k * k;
    info->n_params = o->bias ? 2 : 1;
    info->params[0] = (mp_param_spec){"weight", mp_shape4(cin, cout / g, k, k), true, MP_INIT_HE_NORMAL, fan_in};
    if (o->bias)
        info->params[1] = (mp_param_spec){"bias", mp_shape1(cout), true, MP_INIT_UNIFORM_FAN_IN, fan_in};
    info->saved_bytes = 0;
    info->workspace_bytes = 0;
    info->tangent_workspace_bytes = mp_tangent_affine_workspace(info);
    return MP_OK;
}

/* prepare() and release() are mp_conv_prepare / mp_conv_release
 * (conv_onednn.h), shared with conv2d. */

static mp_status convt_forward(const mp_op_call *c) {
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c)) return mp_conv_onednn_forward(c->state, c);
#endif
    if (c->info->nhwc) return mp_op_layout_error(c, "the reference convolution kernels");
    const mp_conv_geom g = mp_conv_geom_of(c->desc, &c->in[0].shape, &c->out.shape);
    const void *b = c->desc->attr.conv.bias ? c->param[1].data : NULL;
    MP_REAL_CALL(c->out.dtype, convt_fwd, &g, c->in[0].data, c->param[0].data, b, c->out.data);
    return MP_OK;
}

static mp_status convt_backward(const mp_op_call *c) {
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c) && mp_conv_onednn_has_backward(c->state)) return mp_conv_onednn_backward(c->state, c);
#endif
    if (c->info->nhwc) return mp_op_layout_error(c, "the reference convolution kernels");
    const mp_conv_geom g = mp_conv_geom_of(c->desc, &c->in[0].shape, &c->out.shape);
    const mp_dtype dt = c->out.dtype;
    if (c->d_in[0].data) MP_REAL_CALL(dt, convt_bwd_data, &g, c->d_out.data, c->param[0].data, c->d_in[0].data);
    if (c->d_param[0].data) MP_REAL_CALL(dt, convt_bwd_weights, &g, c->in[0].data, c->d_out.data, c->d_param[0].data);
    if (c->desc->attr.conv.bias && c->d_param[1].data)
        MP_REAL_CALL(dt, convt_bwd_bias, &g, c->d_out.data, c->d_param[1].data);
    return MP_OK;
}

/* Second derivatives (tangent.h), with conv2d's kernels exchanged
 * (mp_conv_transpose2d_tangent_kernels, conv2d.c). */
static mp_status convt_forward_tangent(const mp_op_call *c) {
    return mp_tangent_affine_forward(c, &mp_conv_transpose2d_tangent_kernels);
}
static mp_status convt_backward_tangent(const mp_op_call *c) {
    return mp_tangent_affine_backward(c, &mp_conv_transpose2d_tangent_kernels);
}

const mp_op_vtable mp_op_conv_transpose2d_vt = {
    .name = "conv_transpose2d",
    .infer = convt_infer,
    .prepare = mp_conv_prepare,
    .release = mp_conv_release,
    .forward = convt_forward,
    .backward = convt_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
    .forward_tangent = convt_forward_tangent,
    .backward_tangent = convt_backward_tangent,
    .layouts = mp_conv_layouts,
};
