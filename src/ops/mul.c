/* mul.c — elementwise product of two tensors of identical shape (the AC-GAN's
 * noise times class embedding). Backward: d_a = d_out * b, d_b = d_out * a,
 * so it reads both inputs and not its output. */
#include "ops/op.h"

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

const mp_op_vtable mp_op_mul_vt = {
    .name = "mul",
    .infer = mp_op_infer_same_shape2,
    .forward = mul_forward,
    .backward = mul_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
};
