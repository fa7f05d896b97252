/* add.c — elementwise sum of two tensors of identical shape (residual add).
 * Backward hands d_out unchanged to both inputs. */
#include "ops/op.h"

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
        if (c->d_in[i].data) copy_par(c->d_in[i].data, c->d_out.data, bytes);
    return MP_OK;
}

const mp_op_vtable mp_op_add_vt = {
    .name = "add",
    .infer = mp_op_infer_same_shape2,
    .forward = add_forward,
    .backward = add_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
};
