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

#include "ops/batchnorm2d_cpu_math.h"
#include "ops/cpu_fast.h"
#include "ops/pool2d_cpu.h"

#define MP_REF_TEMPLATE "batchnorm2d_cpu_kernels.inc"
#include "instantiate_fast.inc"

/* Channels-last rows taken R at a time as one row of R * C values where C
 * is small (the kernels' loops run along a row, and a row of 16 or 24
 * channels left them at a third of the copy bandwidth): the least R whose
 * row holds at least 64 values and whole 16-float vectors, if that row is at
 * most 512 values (the kernels' tile), else enough rows for 64 values; 1
 * from 64 channels on (and for no channels). */
static inline int bnn_wide_rows(int C) {
    if (C <= 0 || C >= 64) return 1;
    for (int r = 1; r * C <= 512; r++)
        if (r * C >= 64 && r * C % 16 == 0) return r;
    return (64 + C - 1) / C;
}

/* Channels-last: the widest row the kernels take (C, or R * C values of R
 * rows, above) rounded up to a multiple of 16 (each workspace array 64-byte
 * aligned), and the threads the kernels run on (at most the workspace's,
 * see batchnorm2d_cpu.h). */
static inline int64_t bnn_cpad(int C) { return ((int64_t)C * bnn_wide_rows(C) + 15) / 16 * 16; }

static inline int bnn_threads(void) {
    const int t = omp_get_max_threads(), p = omp_get_num_procs(), n = t < p ? t : p;
    return n < MP_BN_NHWC_MAX_THREADS ? n : MP_BN_NHWC_MAX_THREADS;
}

/* The channels-last kernels' workspace: BNN_WS_FLOATS float arrays of Cp
 * (constants shared by the threads), then MP_BN_NHWC_MAX_THREADS threads'
 * two double arrays of Cp, from bnn_parts on, then two more for the sums of
 * the rows left over by the wide rows (bnn_tail); mp_bn_nhwc_workspace_bytes
 * sizes exactly that. */
#define BNN_WS_FLOATS 6
#define BNN_WS_DOUBLES (2 * MP_BN_NHWC_MAX_THREADS + 2)
static inline double *bnn_parts(void *ws, int64_t Cp) { return (double *)((float *)ws + BNN_WS_FLOATS * Cp); }
static inline double *bnn_tail(void *ws, int64_t Cp) { return bnn_parts(ws, Cp) + 2 * Cp * MP_BN_NHWC_MAX_THREADS; }

/* The backward's buffer of spread rows for a fused pool's gradient over an
 * input W wide: (W/2 + 1) rows of C, then (R > 1) one kernel row of R rows
 * gathered, in floats (room for either ACT), one per thread after the sums,
 * 64-byte aligned. */
static inline size_t bnn_spread_bytes(int C, int W) {
    const int R = bnn_wide_rows(C);
    return ((size_t)(W / 2 + 1 + (R > 1 ? R : 0)) * (size_t)C * 4 + 63) / 64 * 64;
}

static inline void *bnn_spread_buf(void *ws, int64_t Cp, int C, int W, int t) {
    return (char *)(bnn_parts(ws, Cp) + BNN_WS_DOUBLES * Cp) + (size_t)t * bnn_spread_bytes(C, W);
}

#define MP_REF_TEMPLATE "batchnorm2d_nhwc_kernels.inc"
#include "instantiate_fast.inc"

size_t mp_bn_nhwc_workspace_bytes(int C) {
    return (size_t)(bnn_cpad(C) * (BNN_WS_FLOATS * (int64_t)sizeof(float) + BNN_WS_DOUBLES * (int64_t)sizeof(double)));
}

size_t mp_bn_nhwc_pooled_workspace_bytes(int C, int W) {
    return mp_bn_nhwc_workspace_bytes(C) + MP_BN_NHWC_MAX_THREADS * bnn_spread_bytes(C, W);
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

void mp_bn_fwd_train_cpu_nhwc(mp_dtype dt, const void *x, const void *res, void *y, const float *gamma,
                              const float *beta, float *rmean, float *rvar, double *mean, double *invstd, float *scale,
                              float *shift, float *mu, int64_t M, int C, double eps, double mom, bool relu, bool store,
                              void *ws) {
    MP_FAST_CALL(dt, bnn_fwd_train, x, res, y, gamma, beta, rmean, rvar, mean, invstd, scale, shift, mu, M, C, eps, mom,
                 relu, store, ws);
}

void mp_bn_fwd_eval_cpu_nhwc(mp_dtype dt, const void *x, const void *res, void *y, const float *gamma,
                             const float *beta, const float *rmean, const float *rvar, int64_t M, int C, double eps,
                             bool relu) {
    MP_FAST_CALL(dt, bnn_fwd_eval, x, res, y, gamma, beta, rmean, rvar, M, C, eps, relu);
}

void mp_bn_bwd_cpu_nhwc(mp_dtype dt, const void *x, const void *y, const void *dy, const mp_bn_pooled_dy *pooled,
                        void *dx, const mp_bn_resid_grad *dres, const float *gamma, const float *beta, bool relu,
                        const float *scale, const float *shift, float *dgamma, float *dbeta, bool batch_stats,
                        const double *mean, const double *invstd, const float *rmean, const float *rvar, int64_t M,
                        int C, double eps, void *ws) {
    MP_ASSERT(!(dres && relu && !y)); /* a residual's mask is y's: x alone cannot give it */
    const void *pdy = pooled ? pooled->dy : NULL;
    const int H = pooled ? pooled->H : 0, W = pooled ? pooled->W : 0;
    MP_FAST_CALL(dt, bnn_bwd, x, y, dy, pdy, H, W, dx, dres ? dres->d : NULL, dres && dres->add, gamma, beta, relu,
                 scale, shift, dgamma, dbeta, batch_stats, mean, invstd, rmean, rvar, M, C, eps, ws);
}
