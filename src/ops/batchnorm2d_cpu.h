/* batchnorm2d_cpu.h — the CPU fast path of batchnorm2d (f32 and bf16
 * activations, AVX-512 / AVX2), with the ReLU that reads it fused in (relu;
 * the (N, C, HW) backward masks with y): the reference kernels' arguments
 * and results (batchnorm2d_ref.inc), within the op tests' 1e-5, from float
 * arithmetic on centred values. The (N, C, HW) kernels
 * (batchnorm2d_cpu_kernels.inc) run one OpenMP task per channel, whose slice
 * stays in cache across a kernel's passes; the channels-last ones below
 * split rows. batchnorm2d.c calls them when mp_fast_use(c, activation
 * dtype). */
#ifndef MP_OPS_BATCHNORM2D_CPU_H
#define MP_OPS_BATCHNORM2D_CPU_H

#include "ops/op.h"

/* dt: the activations' dtype (F32 or BF16); x, y, dy, dx: (N, C, HW). */
void mp_bn_fwd_train_cpu(mp_dtype dt, const void *x, void *y, const float *gamma, const float *beta, float *rmean,
                         float *rvar, double *mean, double *invstd, int N, int C, int64_t HW, double eps, double mom,
                         bool relu);
void mp_bn_fwd_eval_cpu(mp_dtype dt, const void *x, void *y, const float *gamma, const float *beta,
                        const float *rmean, const float *rvar, int N, int C, int64_t HW, double eps, bool relu);
void mp_bn_bwd_cpu(mp_dtype dt, const void *x, const void *y, const void *dy, void *dx, const float *gamma,
                   float *dgamma, float *dbeta, bool batch_stats, const double *mean, const double *invstd,
                   const float *rmean, const float *rvar, int N, int C, int64_t HW, double eps);

/* Channels-last (batchnorm2d_nhwc_kernels.inc): x, y, dy, dx are (M, C)
 * row-major (an NHWC tensor, M = N*H*W); the results and tolerance of the
 * (N, C, HW) functions above, with the arguments below. Rows are split among
 * the OpenMP threads, each summing every channel; their sums are added in
 * thread order, so results repeat for a given thread count. ws: scratch of
 * mp_bn_nhwc_workspace_bytes(C) bytes, 64-byte aligned, for per-channel
 * constants and those per-thread sums: it holds MP_BN_NHWC_MAX_THREADS
 * threads' sums, and the kernels run
 * on at most that many threads (fewer: min(omp_get_max_threads(),
 * omp_get_num_procs())), so a workspace sized when a plan is made stays
 * large enough whatever the thread count is later. */
#define MP_BN_NHWC_MAX_THREADS 64
size_t mp_bn_nhwc_workspace_bytes(int C);
/* The workspace of a backward that reads a fused pool's gradient (pooled
 * below) over an input W wide: the above and each thread's rows of spread
 * values. */
size_t mp_bn_nhwc_pooled_workspace_bytes(int C, int W);
/* scale, shift, mu (C floats each): the training forward keeps the float
 * scale and shift it applied, y = (x - mu) * scale + shift with mu the mean
 * rounded to float, for its backward's ReLU mask and for an average pool the
 * batch norm is fused into (which applies it as it loads x); store false:
 * y is not written (that pool's case). res non-NULL (both forwards): a
 * residual add fused in (graph/plan_fuse.h), res (M, C) like x: y =
 * relu(bn(x) + res), the batch norm's value rounded to dt before the add and
 * the sum rounded to dt, the bits of the three ops apart; its backward then
 * reads the mask from y. */
void mp_bn_fwd_train_cpu_nhwc(mp_dtype dt, const void *x, const void *res, void *y, const float *gamma,
                              const float *beta, float *rmean, float *rvar, double *mean, double *invstd, float *scale,
                              float *shift, float *mu, int64_t M, int C, double eps, double mom, bool relu, bool store,
                              void *ws);
void mp_bn_fwd_eval_cpu_nhwc(mp_dtype dt, const void *x, const void *res, void *y, const float *gamma,
                             const float *beta, const float *rmean, const float *rvar, int64_t M, int C, double eps,
                             bool relu);
/* The output gradient of a 2x2 average pool (stride 2, no padding) that the
 * batch norm + ReLU is fused into (graph/plan_fuse.h): dy (N, H/2, W/2, C)
 * for the batch norm's (N, H, W, C). */
typedef struct {
    const void *dy;
    int H, W;
} mp_bn_pooled_dy;
/* The gradient of a fused residual add's other input (the forward's res):
 * dy masked by the ReLU (if any), written to d, or added to what d holds
 * (add: another consumer of res wrote it first), rounded to dt. */
typedef struct {
    void *d;
    bool add;
} mp_bn_resid_grad;
/* relu: dy masked where the forward's fused ReLU gave 0. y NULL: that mask
 * computed again from x with the forward's constants, bit for bit what y
 * holds when the kernel of this dt stored it: scale/shift from a training
 * forward, or NULL to compute them from gamma, beta and the statistics used
 * (mean/invstd with batch_stats, rmean/rvar without: an inference forward,
 * which changes none of them). y non-NULL: the mask read from y, for a y
 * rounded after the kernel to another type than dt (a staged call).
 * pooled non-NULL: dy is not read; each row of it is what the pool's
 * backward would have written from pooled->dy (the same bits); ws then
 * holds mp_bn_nhwc_pooled_workspace_bytes(C, pooled->W). dres non-NULL
 * (a residual add fused in, see above; y must be given where relu): the
 * add's gradient of res too, in the dx pass; dx may then be NULL. */
void mp_bn_bwd_cpu_nhwc(mp_dtype dt, const void *x, const void *y, const void *dy, const mp_bn_pooled_dy *pooled,
                        void *dx, const mp_bn_resid_grad *dres, const float *gamma, const float *beta, bool relu,
                        const float *scale, const float *shift, float *dgamma, float *dbeta, bool batch_stats,
                        const double *mean, const double *invstd, const float *rmean, const float *rvar, int64_t M,
                        int C, double eps, void *ws);

#endif
