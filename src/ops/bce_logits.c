/* bce_logits.c — binary cross-entropy with logits: logits and targets of the
 * same shape (N, F), targets in [0, 1] -> mean over all elements of
 * max(x,0) - x*t + log(1 + exp(-|x|)), shape (1). Stable for any |x|. */
#include <math.h>
#include <stdio.h>

#include "ops/op.h"
#include "ops/tangent.h"

#define BCE_BLOCK 8192 /* elements per partial sum */

/* sigmoid, split by sign so exp never overflows */
static inline double bce_sigmoid(double v) { return v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v)); }

#define MP_REF_TEMPLATE "bce_logits_ref.inc"
#include "instantiate_real.inc"
#define MP_REF_TEMPLATE "bce_logits_tangent_ref.inc"
#include "instantiate_real.inc"

static mp_status bce_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 2) return mp_op_shape_error(d, info, "takes logits (N, F) and targets (N, F)");
    if (!mp_shape_equal(&info->in[0], &info->in[1])) {
        char a[64], b[64];
        return mp_error(MP_ERR_SHAPE, "bce_with_logits '%s': logits %s and targets %s must have the same shape",
                        d->name ? d->name : "?", mp_shape_str(&info->in[0], a, sizeof a),
                        mp_shape_str(&info->in[1], b, sizeof b));
    }
    if (info->in[0].ndim < 1 || mp_shape_numel(&info->in[0]) < 1)
        return mp_op_shape_error(d, info, "logits are empty");
    if (info->in_dtype[0] == MP_DTYPE_I32 || info->in_dtype[1] == MP_DTYPE_I32)
        return mp_error(MP_ERR_INVALID_ARG, "bce_with_logits '%s': logits and targets must be floating point",
                        d->name ? d->name : "?");
    info->out = mp_shape1(1);
    int64_t nb = (mp_shape_numel(&info->in[0]) + BCE_BLOCK - 1) / BCE_BLOCK;
    info->workspace_bytes = (size_t)nb * sizeof(double);
    return MP_OK;
}

static mp_status bce_forward(const mp_op_call *c) {
    int64_t n = mp_tensor_numel(&c->in[0]);
    double *partial = c->workspace;
    MP_REAL_CALL(c->out.dtype, bce_fwd, c->in[0].data, c->in[1].data, n, partial);
    double sum = 0;
    for (int64_t b = 0; b < (n + BCE_BLOCK - 1) / BCE_BLOCK; b++) sum += partial[b];
    if (c->out.dtype == MP_DTYPE_F64) ((double *)c->out.data)[0] = sum / (double)n;
    else ((float *)c->out.data)[0] = (float)(sum / (double)n);
    return MP_OK;
}

static mp_status bce_backward(const mp_op_call *c) {
    int64_t n = mp_tensor_numel(&c->in[0]);
    double seed = c->d_out.dtype == MP_DTYPE_F64 ? ((const double *)c->d_out.data)[0]
                                                 : (double)((const float *)c->d_out.data)[0];
    MP_REAL_CALL(c->d_out.dtype, bce_bwd, c->in[0].data, c->in[1].data, n, seed / (double)n,
                 c->d_in[0].data, c->d_in[1].data);
    return MP_OK;
}

/* Second derivatives (tangent.h, bce_logits_tangent_ref.inc); the forward
 * tangent's block sums go through the workspace like forward's. */
static mp_status bce_forward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    int64_t n = mp_tensor_numel(&c->in[0]);
    double *partial = c->workspace, sum = 0;
    MP_REAL_CALL(c->out.dtype, bce_fwd_tangent, c->in[0].data, c->in[1].data, c->t_in[0].data, c->t_in[1].data, n,
                 partial);
    for (int64_t b = 0; b < (n + BCE_BLOCK - 1) / BCE_BLOCK; b++) sum += partial[b];
    mp_tangent_set_scalar(&c->t_out, sum / (double)n);
    return MP_OK;
}

static mp_status bce_backward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    if (!c->t_d_in[0].data && !c->t_d_in[1].data) return MP_OK;
    int64_t n = mp_tensor_numel(&c->in[0]);
    MP_REAL_CALL(c->out.dtype, bce_bwd_tangent, c->in[0].data, c->in[1].data, c->t_in[0].data, c->t_in[1].data, n,
                 mp_tangent_scalar(&c->d_out) / (double)n, mp_tangent_scalar(&c->t_d_out) / (double)n,
                 c->t_d_in[0].data, c->t_d_in[1].data);
    return MP_OK;
}

const mp_op_vtable mp_op_bce_logits_vt = {
    .name = "bce_with_logits",
    .infer = bce_infer,
    .forward = bce_forward,
    .backward = bce_backward,
    .forward_tangent = bce_forward_tangent,
    .backward_tangent = bce_backward_tangent,
};
