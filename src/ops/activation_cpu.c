/* activation_cpu.c — see activation_cpu.h. The scalar reference jumps on
 * every element's sign (a mispredicted branch half the time: ~9 ms for one
 * 128x64x28x28 bf16 ReLU backward on 2 cores); the vector instances select
 * with masks and stream at memory speed. */
#if defined(__GNUC__) && !defined(__clang__) /* see cpu_fast.h */
#pragma GCC optimize("no-trapping-math")
#endif
#include "ops/activation_cpu.h"

#include <math.h>

#include "ops/cpu_fast.h"

#define MP_REF_TEMPLATE "activation_ref.inc"
#include "instantiate_fast.inc"

#define N_OF(c) mp_tensor_numel(&(c)->out)

void mp_relu_cpu_forward(const mp_op_call *c) {
    MP_FAST_CALL(c->out.dtype, relu_fwd, c->in[0].data, c->out.data, N_OF(c));
}

void mp_relu_cpu_backward(const mp_op_call *c) {
    MP_FAST_CALL(c->out.dtype, relu_bwd, c->out.data, c->d_out.data, c->d_in[0].data, N_OF(c));
}

void mp_leaky_relu_cpu_forward(const mp_op_call *c) {
    MP_FAST_CALL(c->out.dtype, leaky_relu_fwd, c->in[0].data, c->out.data, N_OF(c), c->desc->attr.slope);
}

void mp_leaky_relu_cpu_backward(const mp_op_call *c) {
    MP_FAST_CALL(c->out.dtype, leaky_relu_bwd, c->in[0].data, c->d_out.data, c->d_in[0].data, N_OF(c),
                 c->desc->attr.slope);
}
