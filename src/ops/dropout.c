/* dropout.c — inverted dropout: in training each element is zeroed with
 * probability p and the kept ones are scaled by 1/(1-p); the 1-byte-per-element
 * mask is kept in saved for backward. In eval it is the identity. */
#include <math.h>
#include <stdio.h>

#include "core/rng.h"
#include "ops/op.h"
#include "ops/tangent.h"

#include "copy_par.inc"

#define MP_REF_TEMPLATE "dropout_ref.inc"
#include "instantiate_real.inc"

static mp_status dropout_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    float p = d->attr.p;
    if (!(p >= 0.0f && p < 1.0f))
        return mp_error(MP_ERR_INVALID_ARG, "dropout '%s': p = %g must be in [0, 1)",
                        d->name ? d->name : "?", (double)p);
    info->out = info->in[0];
    info->saved_bytes = (size_t)mp_shape_numel(&info->in[0]); /* the mask */
    return MP_OK;
}

/* 1/(1-p) rounded once to the dtype: kept values are exactly x * scale. */
static double dropout_scale(const mp_op_call *c) { return 1.0 / (1.0 - (double)c->desc->attr.p); }

static mp_status dropout_forward(const mp_op_call *c) {
    int64_t n = mp_tensor_numel(&c->out);
    if (!c->training) {
        copy_par(c->out.data, c->in[0].data, (size_t)n * mp_dtype_size(c->out.dtype));
        return MP_OK;
    }
    uint64_t thr = (uint64_t)ldexp((double)c->desc->attr.p, 53); /* exact: p has 24 bits */
    MP_REAL_CALL(c->out.dtype, dropout_fwd, c->in[0].data, c->out.data, c->saved, n, c->seed, thr,
                 dropout_scale(c));
    return MP_OK;
}

static mp_status dropout_backward(const mp_op_call *c) {
    if (!c->d_in[0].data) return MP_OK;
    int64_t n = mp_tensor_numel(&c->d_out);
    if (!c->training) {
        copy_par(c->d_in[0].data, c->d_out.data, (size_t)n * mp_dtype_size(c->d_out.dtype));
        return MP_OK;
    }
    MP_REAL_CALL(c->d_out.dtype, dropout_bwd, c->saved, c->d_out.data, c->d_in[0].data, n, dropout_scale(c));
    return MP_OK;
}

/* Second derivatives (tangent.h): with the mask saved by forward held fixed
 * dropout is a diagonal linear map, which backward applies: both tangents
 * are backward, on t_in and on t_d_out. */
static mp_status dropout_forward_tangent(const mp_op_call *c) {
    return mp_tangent_forward_by_backward(c, dropout_backward);
}
static mp_status dropout_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, dropout_backward); }

const mp_op_vtable mp_op_dropout_vt = {
    .name = "dropout",
    .infer = dropout_infer,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = dropout_forward_tangent,
    .backward_tangent = dropout_backward_tangent,
};
