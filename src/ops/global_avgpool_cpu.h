/* global_avgpool_cpu.h — the CPU fast path of global average pooling on
 * channels-last activations (f32 and bf16, AVX-512 / AVX2;
 * global_avgpool_nhwc_kernels.inc): the reference kernels' values
 * (global_avgpool_ref.inc: double sums, the same scaling) from (N, HW, C)
 * data. Callers check mp_fast_isa_current() != MP_FAST_NONE. */
#ifndef MP_OPS_GLOBAL_AVGPOOL_CPU_H
#define MP_OPS_GLOBAL_AVGPOOL_CPU_H

#include "ops/op.h"

/* x (N, HW, C) channels-last -> y (N, C) */
void mp_global_avgpool_fwd_cpu_nhwc(mp_dtype dt, const void *x, void *y, int N, int C, int64_t HW);
/* dx[n][i][c] = dy[n][c] / HW, as the reference computes it */
void mp_global_avgpool_bwd_cpu_nhwc(mp_dtype dt, const void *dy, void *dx, int N, int C, int64_t HW);

#endif
