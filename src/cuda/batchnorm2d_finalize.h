/* batchnorm2d_finalize.h — where a batch-norm pass's per-channel results go
 * once its partial sums are merged: the forward's saved statistics, running
 * statistics and coefficients, the backward's parameter gradients and dx
 * coefficients; and the finalize kernels of the three-kernel passes that
 * merge them (batchnorm2d_finalize.cu, for batchnorm2d_cuda.cu). Those and
 * batchnorm2d_persist.h's one-kernel passes both write them through
 * batchnorm2d_finalize.cuh, so both write the same values. C-callable. */
#ifndef MP_CUDA_BATCHNORM2D_FINALIZE_H
#define MP_CUDA_BATCHNORM2D_FINALIZE_H

#include <cuda_runtime.h>
#include <stdbool.h>

#include "mixprec.h"

/* Training forward, per channel c of C: save_mean[c] = mean,
 * save_invstd[c] = 1/std and the applied scale and shift at
 * save_invstd[C + c], save_invstd[2C + c]; the running statistics moved by
 * momentum (unbiased variance); coef = (mu, scale, shift), C each. */
typedef struct {
    const void *gamma, *beta;
    mp_dtype gamma_dtype, beta_dtype;
    float *running_mean, *running_var;
    float eps, momentum;
    float *save_mean, *save_invstd;
    float *coef;
} mp_bn_fwd_out;

/* Backward, per channel c: dgamma[c] = sum(g * xhat), dbeta[c] = sum(g)
 * (each where non-NULL); coef = (mu, k, a, b) of dx = k * (g - a - (x -
 * mu) * b), from the batch statistics forward saved (batch_stats) or the
 * running ones. */
typedef struct {
    bool batch_stats;
    const float *save_mean, *save_invstd, *running_mean, *running_var;
    float eps;
    const void *gamma;
    mp_dtype gamma_dtype;
    void *dgamma, *dbeta;
    mp_dtype dgamma_dtype, dbeta_dtype;
    float *coef;
} mp_bn_bwd_out;

#ifdef __cplusplus
extern "C" {
#endif

/* Training forward's finalize over C channels: G partials (pmean, pm2 of
 * mp_bn_fast_stats or the general statistics kernel; partial p at
 * p * stride, chunks of R rows, M rows in all) merged per channel in a
 * fixed order and written to out. With `local` non-NULL: only the merged
 * mean and sum of squared deviations, to local[c] and local[C + c] (one
 * rank's share of synchronized batch norm, merged again over the ranks). */
cudaError_t mp_bn_finalize_forward(cudaStream_t st, const float *pmean, const float *pm2, long long stride, int G,
                                   long long M, long long R, int C, mp_bn_fwd_out out, float *local);

/* Backward's finalize: the G partial sums (psdy, psdyx; partial p at
 * p * stride) summed per channel in a fixed order; dgamma, dbeta and the
 * dx coefficients to out. With `local`: dgamma and dbeta (a rank's own)
 * and the sums to local[c], local[C + c] only. */
cudaError_t mp_bn_finalize_backward(cudaStream_t st, const float *psdy, const float *psdyx, long long stride, int G,
                                    long long M, int C, mp_bn_bwd_out out, float *local);

#ifdef __cplusplus
}
#endif

#endif
