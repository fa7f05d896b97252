/* linear.c — fully connected layer y = x W^T + b on (N, F) inputs: shape
 * rules, parameters and dispatch between the reference kernels and the
 * oneDNN inner_product fast path (f32). */
#include <stdio.h>

#include "ops/linear_onednn.h"
#include "ops/onednn_dispatch.h"
#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "linear_ref.inc"
#include "instantiate_real.inc"

static mp_status linear_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    const mp_shape *x = &info->in[0];
    if (x->ndim != 2) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "expects a 2-D (N, features) input, got %d-D%s", x->ndim,
                 x->ndim == 4 ? "; flatten it first (mp_flatten) or use global average pooling" : "");
        return mp_op_shape_error(d, info, msg);
    }
    int F = x->dims[1], O = d->attr.linear.out_features;
    if (O < 1)
        return mp_error(MP_ERR_INVALID_ARG, "linear '%s': out_features must be >= 1 (got %d)",
                        d->name ? d->name : "?", O);
    info->out = mp_shape2(x->dims[0], O);
    info->n_params = 0;
    info->params[info->n_params++] = (mp_param_spec){
        .name = "weight", .shape = mp_shape2(O, F), .trainable = true, .init = MP_INIT_HE_NORMAL, .fan_in = F};
    if (d->attr.linear.bias)
        info->params[info->n_params++] = (mp_param_spec){
            .name = "bias", .shape = mp_shape1(O), .trainable = true, .init = MP_INIT_UNIFORM_FAN_IN, .fan_in = F};
    info->saved_bytes = 0;
    info->workspace_bytes = 0;
    info->tangent_workspace_bytes = mp_tangent_affine_workspace(info);
    return MP_OK;
}

static mp_status linear_prepare(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, mp_impl impl,
                                bool training, void **state) {
    *state = NULL;
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_wanted(dt, impl)) {
        mp_linear_dnnl *s = NULL;
        MP_TRY(mp_linear_dnnl_create(d, info, training, &s));
        *state = s;
    }
#else
    (void)d, (void)info, (void)dt, (void)impl, (void)training;
#endif
    return MP_OK;
}

static void linear_release(void *state) {
#ifdef MP_HAVE_ONEDNN
    mp_linear_dnnl_destroy(state);
#else
    (void)state;
#endif
}

static mp_status linear_forward(const mp_op_call *c) {
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c)) return mp_linear_dnnl_forward(c->state, c);
#endif
    const mp_shape *xs = &c->in[0].shape;
    int N = xs->dims[0], F = xs->dims[1], O = c->out.shape.dims[1];
    const void *b = c->desc->attr.linear.bias ? c->param[1].data : NULL;
    MP_REAL_CALL(c->out.dtype, linear_fwd, c->in[0].data, c->param[0].data, b, c->out.data, N, F, O);
    return MP_OK;
}

static mp_status linear_backward(const mp_op_call *c) {
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c) && mp_linear_dnnl_has_backward(c->state)) return mp_linear_dnnl_backward(c->state, c);
#endif
    const mp_shape *xs = &c->in[0].shape;
    int N = xs->dims[0], F = xs->dims[1], O = c->out.shape.dims[1];
    void *db = c->desc->attr.linear.bias ? c->d_param[1].data : NULL;
    if (c->d_in[0].data)
        MP_REAL_CALL(c->out.dtype, linear_bwd_data, c->d_out.data, c->param[0].data, c->d_in[0].data, N, F, O);
    if (c->d_param[0].data || db)
        MP_REAL_CALL(c->out.dtype, linear_bwd_weights, c->in[0].data, c->d_out.data, c->d_param[0].data, db,
                     N, F, O);
    return MP_OK;
}

/* Second derivatives (tangent.h): the kernels above, bilinear in their two
 * operands, at the call's (N, F, O). */
#define LINEAR_DIMS(c) c->in[0].shape.dims[0], c->in[0].shape.dims[1], c->out.shape.dims[1]
static void lin_fwd_k(const mp_op_call *c, const void *x, const void *w, void *y) {
    MP_REAL_CALL(c->out.dtype, linear_fwd, x, w, NULL, y, LINEAR_DIMS(c));
}
static void lin_bwd_data_k(const mp_op_call *c, const void *dy, const void *w, void *dx) {
    MP_REAL_CALL(c->out.dtype, linear_bwd_data, dy, w, dx, LINEAR_DIMS(c));
}
static void lin_bwd_weights_k(const mp_op_call *c, const void *x, const void *dy, void *dw) {
    MP_REAL_CALL(c->out.dtype, linear_bwd_weights, x, dy, dw, NULL, LINEAR_DIMS(c));
}
#undef LINEAR_DIMS

static const mp_tangent_affine linear_kernels = {lin_fwd_k, lin_bwd_data_k, lin_bwd_weights_k};
static mp_status linear_forward_tangent(const mp_op_call *c) { return mp_tangent_affine_forward(c, &linear_kernels); }
static mp_status linear_backward_tangent(const mp_op_call *c) { return mp_tangent_affine_backward(c, &linear_kernels); }

const mp_op_vtable mp_op_linear_vt = {
    .name = "linear",
    .infer = linear_infer,
    .prepare = linear_prepare,
    .release = linear_release,
    .forward = linear_forward,
    .backward = linear_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
    .forward_tangent = linear_forward_tangent,
    .backward_tangent = linear_backward_tangent,
};
