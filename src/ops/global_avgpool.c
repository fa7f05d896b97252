/* global_avgpool.c — global average pooling (N, C, H, W) -> (N, C), so a
 * linear layer can follow directly. A memory-bound reduction: the reference
 * kernels are the fast path for NCHW tensors; channels-last ones (a CPU
 * plan's, graph/plan_layout.h) run global_avgpool_cpu.c. */
#include <stdio.h>

#include "ops/cpu_fast.h"
#include "ops/global_avgpool_cpu.h"
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
    if (c->info->nhwc) { /* channels-last (graph/plan_layout.h): the vector kernels */
        if (!mp_fast_use(c, c->out.dtype)) return mp_op_layout_error(c, "the reference kernels");
        mp_global_avgpool_fwd_cpu_nhwc(c->out.dtype, c->in[0].data, c->out.data, x->dims[0], x->dims[1],
                                       (int64_t)x->dims[2] * x->dims[3]);
        return MP_OK;
    }
    MP_ACT_CALL(c->out.dtype, gap_fwd, c->in[0].data, c->out.data, (int64_t)x->dims[0] * x->dims[1],
                 (int64_t)x->dims[2] * x->dims[3]);
    return MP_OK;
}

static mp_status gap_backward(const mp_op_call *c) {
    const mp_shape *x = &c->in[0].shape;
    if (c->info->nhwc && c->d_in[0].data) {
        if (!mp_fast_use(c, c->out.dtype)) return mp_op_layout_error(c, "the reference kernels");
        mp_global_avgpool_bwd_cpu_nhwc(c->out.dtype, c->d_out.data, c->d_in[0].data, x->dims[0], x->dims[1],
                                       (int64_t)x->dims[2] * x->dims[3]);
        return MP_OK;
    }
    if (c->d_in[0].data)
        MP_ACT_CALL(c->out.dtype, gap_bwd, c->d_out.data, c->d_in[0].data, (int64_t)x->dims[0] * x->dims[1],
                     (int64_t)x->dims[2] * x->dims[3]);
    return MP_OK;
}

/* Second derivatives (tangent.h): linear, so forward and backward on the tangents. */
static mp_status gap_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_linear(c, gap_forward); }
static mp_status gap_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, gap_backward); }

static mp_layout_support gap_layouts(const mp_op_desc *d, const mp_op_info *info, const void *state) {
    (void)d, (void)info, (void)state;
    return mp_fast_isa_current() != MP_FAST_NONE ? MP_LAYOUT_ALIKE : MP_LAYOUT_NCHW_ONLY;
}

const mp_op_vtable mp_op_global_avgpool_vt = {
    .name = "global_avgpool",
    .infer = gap_infer,
    .forward = gap_forward,
    .backward = gap_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = gap_forward_tangent,
    .backward_tangent = gap_backward_tangent,
    .layouts = gap_layouts,
};
