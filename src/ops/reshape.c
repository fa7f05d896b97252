/* reshape.c — per-sample reshape (flatten is reshape to (N, C*H*W)). The
 * target in attr.reshape counts the batch dim in ndim; dims[0] is ignored and
 * taken from the input. Forward and backward are copies. */
#include <stdio.h>

#include "ops/op.h"
#include "ops/tangent.h"

#include "copy_par.inc"

static mp_status reshape_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    const mp_shape *t = &d->attr.reshape;
    const char *name = d->name ? d->name : "?";
    if (t->ndim < 2 || t->ndim > MP_MAX_DIMS)
        return mp_error(MP_ERR_SHAPE, "reshape '%s': target ndim %d must be 2..%d (it counts the batch dim)",
                        name, t->ndim, MP_MAX_DIMS);
    mp_shape out = {t->ndim, {info->in[0].dims[0], 1, 1, 1}};
    for (int k = 1; k < t->ndim; k++) out.dims[k] = t->dims[k];
    char a[64], b[64];
    for (int k = 1; k < t->ndim; k++)
        if (out.dims[k] <= 0)
            return mp_error(MP_ERR_SHAPE, "reshape '%s': target shape %s has a non-positive dim %d", name,
                            mp_shape_str(&out, b, sizeof b), k);
    int64_t want = mp_shape_sample_numel(&out), have = mp_shape_sample_numel(&info->in[0]);
    if (want != have)
        return mp_error(MP_ERR_SHAPE,
                        "reshape '%s': input shape %s has %lld elements per sample, target shape %s has %lld",
                        name, mp_shape_str(&info->in[0], a, sizeof a), (long long)have,
                        mp_shape_str(&out, b, sizeof b), (long long)want);
    info->out = out;
    return MP_OK;
}

static mp_status reshape_forward(const mp_op_call *c) {
    copy_par(c->out.data, c->in[0].data, (size_t)mp_tensor_numel(&c->out) * mp_dtype_size(c->out.dtype));
    return MP_OK;
}

static mp_status reshape_backward(const mp_op_call *c) {
    if (c->d_in[0].data)
        copy_par(c->d_in[0].data, c->d_out.data,
                 (size_t)mp_tensor_numel(&c->d_out) * mp_dtype_size(c->d_out.dtype));
    return MP_OK;
}

/* Second derivatives (tangent.h): copies, linear, so the tangents are copies too. */
static mp_status reshape_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_linear(c, reshape_forward); }
static mp_status reshape_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, reshape_backward); }

const mp_op_vtable mp_op_reshape_vt = {
    .name = "reshape",
    .infer = reshape_infer,
    .forward = reshape_forward,
    .backward = reshape_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = reshape_forward_tangent,
    .backward_tangent = reshape_backward_tangent,
};
