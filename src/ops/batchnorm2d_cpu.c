/* batchnorm2d_cpu.c — see batchnorm2d_cpu.h. */
#if defined(__GNUC__) && !defined(__clang__) /* see cpu_fast.h */
#pragma GCC optimize("no-trapping-math")
#endif
#include "ops/batchnorm2d_cpu.h"

#include <math.h>

#include "ops/cpu_fast.h"

#define MP_REF_TEMPLATE "batchnorm2d_cpu_kernels.inc"
#include "instantiate_fast.inc"

void mp_bn_fwd_train_cpu(mp_dtype dt, const void *x, void *y, const float *gamma, const float *beta, float *rmean,
                         float *rvar, double *mean, double *invstd, int N, int C, int64_t HW, double eps, double mom,
                         bool relu) {
    MP_FAST_CALL(dt, bnf_fwd_train, x, y, gamma, beta, rmean, rvar, mean, invstd, N, C, HW, eps, mom, relu);
}

void mp_bn_fwd_eval_cpu(mp_dtype dt, const void *x, void *y, const float *gamma, const float *beta,
                        const float *rmean, const float *rvar, int N, int C, int64_t HW, double eps, bool relu) {
    MP_FAST_CALL(dt, bnf_fwd_eval, x, y, gamma, beta, rmean, rvar, N, C, HW, eps, relu);
}

void mp_bn_bwd_cpu(mp_dtype dt, const void *x, const void *y, const void *dy, void *dx, const float *gamma,
                   float *dgamma, float *dbeta, bool batch_stats, const double *mean, const double *invstd,
                   const float *rmean, const float *rvar, int N, int C, int64_t HW, double eps) {
    MP_FAST_CALL(dt, bnf_bwd, x, y, dy, dx, gamma, dgamma, dbeta, batch_stats, mean, invstd, rmean, rvar, N, C, HW,
                 eps);
}
