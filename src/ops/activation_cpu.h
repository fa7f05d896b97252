/* activation_cpu.h — the CPU fast path of relu and leaky relu (f32 and bf16
 * activations, AVX-512 / AVX2): the reference kernels vectorized, bit for bit
 * their results. Callers check mp_fast_use(c, c->out.dtype) first. */
#ifndef MP_OPS_ACTIVATION_CPU_H
#define MP_OPS_ACTIVATION_CPU_H

#include "ops/op.h"

void mp_relu_cpu_forward(const mp_op_call *c);
void mp_relu_cpu_backward(const mp_op_call *c); /* c->d_in[0].data non-NULL */
void mp_leaky_relu_cpu_forward(const mp_op_call *c);
void mp_leaky_relu_cpu_backward(const mp_op_call *c);

#endif
