/* global_avgpool.c — global average pooling (N, C, H, W) -> (N, C), so a
 * linear layer can follow directly. A memory-bound reduction: the reference
 * kernels are the fast path. */
#include <stdio.h>

#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "global_avgpool_ref.inc"
#include "instantiate_act.inc"

static mp_status gap_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    const mp_shape *x = &info->in[0];
    if (x->ndim != 4) {
        char msg[96];
        snprintf(msg, sizeof msg, "expects an (N, C, H, W) input, got %d-D", x->ndim);
        return mp_op_shape_error(d, info, msg);
    }
    info->out = mp_shape2(x->dims[0], x->dims[1]);
    info->n_params = 0;
    info->saved_bytes = 0;
    info->workspace_bytes = 0;
    return MP_OK;
}

static mp_status gap_forward(const mp_op_call *c) {
    const mp_shape *x = &c->in[0].shape;
    MP_ACT_CALL(c->out.dtype, gap_fwd, c->in[0].data, c->out.data, (int64_t)x->dims[0] * x->dims[1],
                 (int64_t)x->dims[2] * x->dims[3]);
    return MP_OK;
}

static mp_status gap_backward(const mp_op_call *c) {
    const mp_shape *x = &c->in[0].shape;
    if (c->d_in[0].data)
        MP_ACT_CALL(c->out.dtype, gap_bwd, c->d_out.data, c->d_in[0].data, (int64_t)x->dims[0] * x->dims[1],
                     (int64_t)x->dims[2] * x->dims[3]);
    return MP_OK;
}

/* Second derivatives (tangent.h): linear, so forward and backward on the tangents. */
static mp_status gap_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_linear(c, gap_forward); }
static mp_status gap_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, gap_backward); }

const mp_op_vtable mp_op_global_avgpool_vt = {
    .name = "global_avgpool",
    .infer = gap_infer,
    .forward = gap_forward,
    .backward = gap_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = gap_forward_tangent,
    .backward_tangent = gap_backward_tangent,
};
