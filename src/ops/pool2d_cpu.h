/* pool2d_cpu.h — the CPU fast path of avgpool2d over 2x2 windows, stride 2,
 * no padding (f32 and bf16 activations, AVX-512 / AVX2): the reference's
 * results bit for bit, vectorized along output rows. pool2d.c calls it when
 * mp_pool_cpu_applies(c) (which checks mp_fast_use). */
#ifndef MP_OPS_POOL2D_CPU_H
#define MP_OPS_POOL2D_CPU_H

#include "ops/op.h"

bool mp_pool_cpu_applies(const mp_op_call *c);
void mp_pool_cpu_forward(const mp_op_call *c);
void mp_pool_cpu_backward(const mp_op_call *c); /* c->d_in[0].data non-NULL */

#endif
