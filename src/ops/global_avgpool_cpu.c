/* global_avgpool_cpu.c — see global_avgpool_cpu.h. */
#if defined(__GNUC__) && !defined(__clang__) /* see cpu_fast.h */
#pragma GCC optimize("no-trapping-math")
#endif
#include "ops/global_avgpool_cpu.h"

#include "ops/cpu_fast.h"

#define MP_REF_TEMPLATE "global_avgpool_nhwc_kernels.inc"
#include "instantiate_fast.inc"

void mp_global_avgpool_fwd_cpu_nhwc(mp_dtype dt, const void *x, void *y, int N, int C, int64_t HW) {
    MP_FAST_CALL(dt, gapn_fwd, x, y, N, C, HW);
}

void mp_global_avgpool_bwd_cpu_nhwc(mp_dtype dt, const void *dy, void *dx, int N, int C, int64_t HW) {
    MP_FAST_CALL(dt, gapn_bwd, dy, dx, N, C, HW);
}
