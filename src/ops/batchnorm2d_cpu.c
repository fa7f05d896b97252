/* batchnorm2d_cpu.c — see batchnorm2d_cpu.h. */
#if defined(__GNUC__) && !defined(__clang__) /* see cpu_fast.h */
#pragma GCC optimize("no-trapping-math")
/* -O3's unroll-and-jam fuses pairs of rows of the channels-last sums
 * (batchnorm2d_nhwc_kernels.inc) into a scalar loop, 5x slower; it touches
 * no other loop here */
#pragma GCC optimize("no-loop-unroll-and-jam")
#endif
#include "ops/batchnorm2d_cpu.h"

#include <math.h>
#include <omp.h>

#include "ops/cpu_fast.h"

/* The normalized value before the ReLU, (x - muf) * gf + bf, as one fused
 * multiply-add in every kernel: the channels-last backward computes it again
 * for its ReLU mask and must get the forward's bits. */
#define BN_PRE(xv, muf, gf, bf) fmaf((xv) - (muf), (gf), (bf))

#define MP_REF_TEMPLATE "batchnorm2d_cpu_kernels.inc"
#include "instantiate_fast.inc"

/* Channels-last: C rounded up to a multiple of 16 (each workspace array
 * 64-byte aligned), and the threads the kernels run on (at most the
 * workspace's, see batchnorm2d_cpu.h). */
static inline int64_t bnn_cpad(int C) { return ((int64_t)C + 15) / 16 * 16; }

static inline int bnn_threads(void) {
    const int t = omp_get_max_threads(), p = omp_get_num_procs(), n = t < p ? t : p;
    return n < MP_BN_NHWC_MAX_THREADS ? n : MP_BN_NHWC_MAX_THREADS;
}

/* The channels-last kernels' workspace: BNN_WS_FLOATS float arrays of Cp
 * (constants shared by the threads), then MP_BN_NHWC_MAX_THREADS threads'
 * two double arrays of Cp, from bnn_parts on; mp_bn_nhwc_workspace_bytes
 * sizes exactly that. */
#define BNN_WS_FLOATS 6
static inline double *bnn_parts(void *ws, int64_t Cp) { return (double *)((float *)ws + BNN_WS_FLOATS * Cp); }

#define MP_REF_TEMPLATE "batchnorm2d_nhwc_kernels.inc"
#include "instantiate_fast.inc"

size_t mp_bn_nhwc_workspace_bytes(int C) {
    const int64_t slots = MP_BN_NHWC_MAX_THREADS;
    return (size_t)(bnn_cpad(C) * (BNN_WS_FLOATS * (int64_t)sizeof(float) + 2 * slots * (int64_t)sizeof(double)));
}

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

void mp_bn_fwd_train_cpu_nhwc(mp_dtype dt, const void *x, void *y, const float *gamma, const float *beta, float *rmean,
                              float *rvar, double *mean, double *invstd, float *scale, float *shift, int64_t M, int C,
                              double eps, double mom, bool relu, void *ws) {
    MP_FAST_CALL(dt, bnn_fwd_train, x, y, gamma, beta, rmean, rvar, mean, invstd, scale, shift, M, C, eps, mom, relu,
                 ws);
}

void mp_bn_fwd_eval_cpu_nhwc(mp_dtype dt, const void *x, void *y, const float *gamma, const float *beta,
                             const float *rmean, const float *rvar, int64_t M, int C, double eps, bool relu) {
    MP_FAST_CALL(dt, bnn_fwd_eval, x, y, gamma, beta, rmean, rvar, M, C, eps, relu);
}

void mp_bn_bwd_cpu_nhwc(mp_dtype dt, const void *x, const void *y, const void *dy, void *dx, const float *gamma,
                        const float *beta, bool relu, const float *scale, const float *shift, float *dgamma,
                        float *dbeta, bool batch_stats, const double *mean, const double *invstd, const float *rmean,
                        const float *rvar, int64_t M, int C, double eps, void *ws) {
    MP_FAST_CALL(dt, bnn_bwd, x, y, dy, dx, gamma, beta, relu, scale, shift, dgamma, dbeta, batch_stats, mean, invstd,
                 rmean, rvar, M, C, eps, ws);
}
