/* pool2d_cpu.h — the CPU fast path of avgpool2d over 2x2 windows, stride 2,
 * no padding (f32 and bf16 activations, AVX-512 / AVX2): the reference's
 * results bit for bit, vectorized along output rows. pool2d.c calls it when
 * mp_pool_cpu_applies(c) (which checks mp_fast_use). */
#ifndef MP_OPS_POOL2D_CPU_H
#define MP_OPS_POOL2D_CPU_H

#include "ops/op.h"

/* The window the fast path computes: average pooling, 2x2, stride 2, no padding. */
bool mp_pool_cpu_window(const mp_op_desc *d);
bool mp_pool_cpu_applies(const mp_op_call *c);
void mp_pool_cpu_forward(const mp_op_call *c);
void mp_pool_cpu_backward(const mp_op_call *c); /* c->d_in[0].data non-NULL */

/* Channels-last 2x2 / stride 2 / no padding (pool2d_nhwc_kernels.inc):
 * x (N, H, W, C), y (N, H/2, W/2, C); the NCHW kernels' values bit for bit.
 * dt F32 or BF16; callers check mp_fast_isa_current() != MP_FAST_NONE. */
void mp_avgpool2_fwd_cpu_nhwc(mp_dtype dt, const void *x, void *y, int N, int C, int H, int W);
/* backward: an odd last row or column (in no window) gets 0 */
void mp_avgpool2_bwd_cpu_nhwc(mp_dtype dt, const void *dy, void *dx, int N, int C, int H, int W);

#endif
