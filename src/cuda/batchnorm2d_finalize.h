/* batchnorm2d_finalize.h — where a batch-norm pass's per-channel results go
 * once its partial sums are merged: the forward's saved statistics, running
 * statistics and coefficients, the backward's parameter gradients and dx
 * coefficients. batchnorm2d_cuda.cu's finalize kernels and
 * batchnorm2d_persist.h's one-kernel passes both write them through
 * batchnorm2d_finalize.cuh, so both write the same values. C-callable. */
#ifndef MP_CUDA_BATCHNORM2D_FINALIZE_H
#define MP_CUDA_BATCHNORM2D_FINALIZE_H

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

#endif
