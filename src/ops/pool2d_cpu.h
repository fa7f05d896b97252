/* pool2d_cpu.h — the CPU fast path of avgpool2d over 2x2 windows, stride 2,
 * no padding (f32 and bf16 activations, AVX-512 / AVX2): the reference's
 * results bit for bit, vectorized along output rows. pool2d.c calls it when
 * mp_pool_cpu_applies(c) (which checks mp_fast_use). */
#ifndef MP_OPS_POOL2D_CPU_H
#define MP_OPS_POOL2D_CPU_H

#include "ops/op.h"

/* What each input of a 2x2 window gets of the window's output gradient v (a
 * float), before its store: 0 + v / 4, as the reference adds it to a zeroed
 * gradient. The batch norm whose backward reads a fused pool's output
 * gradient (batchnorm2d_nhwc_kernels.inc) spreads it the same way. */
#define MP_AVGPOOL2_SPREAD(v) (0.0f + (float)((double)(v) * 0.25))

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
/* The forward with a training batch norm + ReLU fused in (graph/plan_fuse.h):
 * bn_x is the batch norm's input (N, H, W, C), mu, scale, shift its float
 * mean, scale and shift of this step (per channel); each value is what the
 * batch norm would have stored (batchnorm2d_cpu_math.h), so y is what the
 * unfused pair gives, bit for bit. */
void mp_avgpool2_bn_fwd_cpu_nhwc(mp_dtype dt, const void *bn_x, void *y, const float *mu, const float *scale,
                                 const float *shift, int N, int C, int H, int W);

#endif
