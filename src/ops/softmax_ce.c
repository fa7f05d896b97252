/* softmax_ce.c — softmax cross-entropy loss: logits (N, K) and int32 labels
 * (N) -> mean over the batch of -log softmax(logits)[label], shape (1).
 * Computed stably (max-subtraction, log-sum-exp) with double sums; forward
 * keeps the probabilities in saved for backward. */
#include <math.h>
#include <stdio.h>

#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "softmax_ce_ref.inc"
#include "instantiate_real.inc"
#define MP_REF_TEMPLATE "softmax_ce_tangent_ref.inc"
#include "instantiate_real.inc"

static mp_status softmax_ce_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 2) return mp_op_shape_error(d, info, "takes logits (N, K) and labels (N)");
    const mp_shape *x = &info->in[0], *l = &info->in[1];
    if (x->ndim != 2 || x->dims[1] < 1) return mp_op_shape_error(d, info, "logits must be 2-D (N, K)");
    if (l->ndim != 1 || l->dims[0] != x->dims[0])
        return mp_op_shape_error(d, info, "labels must have shape (N) with the logits' N");
    if (info->in_dtype[1] != MP_DTYPE_I32)
        return mp_error(MP_ERR_INVALID_ARG, "softmax_cross_entropy '%s': labels must be int32, got %s",
                        d->name ? d->name : "?", mp_dtype_name(info->in_dtype[1]));
    if (info->in_dtype[0] == MP_DTYPE_I32)
        return mp_error(MP_ERR_INVALID_ARG, "softmax_cross_entropy '%s': logits must be floating point",
                        d->name ? d->name : "?");
    info->out = mp_shape1(1);
    /* probabilities, sized for the widest real dtype the call may use */
    info->saved_bytes = (size_t)mp_shape_numel(x) * sizeof(double);
    info->workspace_bytes = (size_t)x->dims[0] * sizeof(double); /* per-sample losses */
    return MP_OK;
}

static mp_status softmax_ce_forward(const mp_op_call *c) {
    int64_t n = c->in[0].shape.dims[0], k = c->in[0].shape.dims[1];
    const int32_t *lab = c->in[1].data;
    for (int64_t i = 0; i < n; i++)
        if (lab[i] < 0 || lab[i] >= k)
            return mp_error(MP_ERR_INVALID_ARG,
                            "softmax_cross_entropy '%s': sample %lld has label %d, outside [0, %lld)",
                            c->desc->name ? c->desc->name : "?", (long long)i, (int)lab[i], (long long)k);
    double *loss = c->workspace;
    MP_REAL_CALL(c->out.dtype, softmax_ce_fwd, c->in[0].data, lab, n, k, c->saved, loss);
    double sum = 0; /* serial, so the result does not depend on the thread count */
    for (int64_t i = 0; i < n; i++) sum += loss[i];
    if (c->out.dtype == MP_DTYPE_F64) ((double *)c->out.data)[0] = sum / (double)n;
    else ((float *)c->out.data)[0] = (float)(sum / (double)n);
    return MP_OK;
}

static mp_status softmax_ce_backward(const mp_op_call *c) {
    if (!c->d_in[0].data) return MP_OK;
    int64_t n = c->in[0].shape.dims[0], k = c->in[0].shape.dims[1];
    double seed = c->d_out.dtype == MP_DTYPE_F64 ? ((const double *)c->d_out.data)[0]
                                                 : (double)((const float *)c->d_out.data)[0];
    MP_REAL_CALL(c->d_out.dtype, softmax_ce_bwd, c->saved, c->in[1].data, n, k, seed / (double)n,
                 c->d_in[0].data);
    return MP_OK;
}

/* Second derivatives (tangent.h, softmax_ce_tangent_ref.inc), from the saved
 * probabilities; the per-sample tangents go through the workspace (the
 * per-sample losses' bytes) and are summed serially, as forward does. */
static mp_status softmax_ce_forward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    int64_t n = c->in[0].shape.dims[0], k = c->in[0].shape.dims[1];
    double sum = 0;
    if (c->t_in[0].data) {
        double *tl = c->workspace;
        MP_REAL_CALL(c->out.dtype, softmax_ce_fwd_tangent, c->saved, c->in[1].data, c->t_in[0].data, n, k, tl);
        for (int64_t i = 0; i < n; i++) sum += tl[i];
    }
    mp_tangent_set_scalar(&c->t_out, sum / (double)n);
    return MP_OK;
}

static mp_status softmax_ce_backward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    if (!c->t_d_in[0].data) return MP_OK;
    int64_t n = c->in[0].shape.dims[0], k = c->in[0].shape.dims[1];
    MP_REAL_CALL(c->out.dtype, softmax_ce_bwd_tangent, c->saved, c->in[1].data, c->t_in[0].data, n, k,
                 mp_tangent_scalar(&c->d_out) / (double)n, mp_tangent_scalar(&c->t_d_out) / (double)n,
                 c->t_d_in[0].data);
    return MP_OK;
}

const mp_op_vtable mp_op_softmax_ce_vt = {
    .name = "softmax_cross_entropy",
    .infer = softmax_ce_infer,
    .forward = softmax_ce_forward,
    .backward = softmax_ce_backward,
    .forward_tangent = softmax_ce_forward_tangent,
    .backward_tangent = softmax_ce_backward_tangent,
};
