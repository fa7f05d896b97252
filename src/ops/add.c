/* add.c — elementwise sum of two tensors of identical shape (residual add).
 * Backward hands d_out unchanged to both inputs (no copy where an input's
 * gradient is d_out's memory: graph/plan_grad_alias.h). */
#include "ops/op.h"
#include "ops/tangent.h"

#include "copy_par.inc"

#define MP_REF_TEMPLATE "add_ref.inc"
#include "instantiate_act.inc"

static mp_status add_forward(const mp_op_call *c) {
    MP_ACT_CALL(c->out.dtype, add_fwd, c->in[0].data, c->in[1].data, c->out.data,
                 mp_tensor_numel(&c->out));
    return MP_OK;
}

static mp_status add_backward(const mp_op_call *c) {
    size_t bytes = (size_t)mp_tensor_numel(&c->d_out) * mp_dtype_size(c->d_out.dtype);
    for (int i = 0; i < 2; i++)
        if (c->d_in[i].data && c->d_in[i].data != c->d_out.data) copy_par(c->d_in[i].data, c->d_out.data, bytes);
    return MP_OK;
}

/* Second derivatives (tangent.h): add is linear, t_out = t_a + t_b (a NULL
 * tangent is zero) and backward's tangent is backward on t_d_out. */
static mp_status add_forward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    const void *ta = c->t_in[0].data, *tb = c->t_in[1].data;
    if (!c->t_out.data) return MP_OK;
    if (ta && tb) MP_ACT_CALL(c->out.dtype, add_fwd, ta, tb, c->t_out.data, mp_tensor_numel(&c->out));
    else if (ta || tb)
        copy_par(c->t_out.data, ta ? ta : tb, (size_t)mp_tensor_numel(&c->out) * mp_dtype_size(c->out.dtype));
    else mp_tangent_zero(&c->t_out);
    return MP_OK;
}
static mp_status add_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, add_backward); }

const mp_op_vtable mp_op_add_vt = {
    .name = "add",
    .infer = mp_op_infer_same_shape2,
    .forward = add_forward,
    .backward = add_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = add_forward_tangent,
    .backward_tangent = add_backward_tangent,
    .layouts = mp_op_layouts_alike, /* inputs of one shape (no broadcasting) */
};
