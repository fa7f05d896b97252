/* mul.c — elementwise product of two tensors of identical shape (the AC-GAN's
 * noise times class embedding). Backward: d_a = d_out * b, d_b = d_out * a,
 * so it reads both inputs and not its output. */
#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "mul_ref.inc"
#include "instantiate_act.inc"

static mp_status mul_forward(const mp_op_call *c) {
    MP_ACT_CALL(c->out.dtype, mul_fwd, c->in[0].data, c->in[1].data, c->out.data, mp_tensor_numel(&c->out));
    return MP_OK;
}

static mp_status mul_backward(const mp_op_call *c) {
    int64_t n = mp_tensor_numel(&c->d_out);
    for (int i = 0; i < 2; i++) /* d_in[i] = d_out * the other input */
        if (c->d_in[i].data) MP_ACT_CALL(c->d_out.dtype, mul_fwd, c->d_out.data, c->in[1 - i].data, c->d_in[i].data, n);
    return MP_OK;
}

static mp_status mul_infer(const mp_op_desc *d, mp_op_info *info) {
    MP_TRY(mp_op_infer_same_shape2(d, info));
    info->tangent_workspace_bytes = mp_tangent_bytes(mp_shape_numel(&info->out)); /* a second product */
    return MP_OK;
}

/* Second derivatives (tangent.h): the product is bilinear, so
 *   t_out  = t_a b + a t_b
 *   t_d_a  = t_d_out b + d_out t_b,  t_d_b = t_d_out a + d_out t_a. */
static void mul_k(const mp_op_call *c, const void *a, const void *b, void *y) {
    MP_ACT_CALL(c->out.dtype, mul_fwd, a, b, y, mp_tensor_numel(&c->out));
}
static mp_status mul_forward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    mp_tangent_bilinear(c, mul_k, &c->t_out, c->in[0].data, c->t_in[0].data, c->in[1].data, c->t_in[1].data);
    return MP_OK;
}
static mp_status mul_backward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    for (int i = 0; i < 2; i++)
        mp_tangent_bilinear(c, mul_k, &c->t_d_in[i], c->d_out.data, c->t_d_out.data, c->in[1 - i].data,
                            c->t_in[1 - i].data);
    return MP_OK;
}

const mp_op_vtable mp_op_mul_vt = {
    .name = "mul",
    .infer = mul_infer,
    .forward = mul_forward,
    .backward = mul_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
    .forward_tangent = mul_forward_tangent,
    .backward_tangent = mul_backward_tangent,
    .layouts = mp_op_layouts_alike,
};
