/* cuda_plan_kernels.h — the few kernels the plan executor itself launches
 * (cuda_plan_kernels.cu): gradient accumulation in any float dtype and the
 * per-step fp32 -> f16/bf16 weight casts (RNE), the backward seed of a
 * micro-batch, and the tests' overflow injection. */
#ifndef MP_CUDA_CUDA_PLAN_KERNELS_H
#define MP_CUDA_CUDA_PLAN_KERNELS_H

#include "cuda/cuda_ctx.h"
#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst += src (n elements of dtype; f32 arithmetic, one rounding). */
mp_status mp_cuda_accumulate(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, const void *src, int64_t n);
/* dst += src with each in its own dtype (f32 arithmetic, one rounding). */
mp_status mp_cuda_add_into(mp_cuda_ctx *ctx, void *dst, mp_dtype dst_dtype, const void *src, mp_dtype src_dtype,
                           int64_t n);
/* Every element of dst (n of dtype) = value, or with scale_dev (device) *scale_dev / divisor (f64
 * division, one rounding: the host's seed of a batch mean, scale / N). */
mp_status mp_cuda_fill(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, int64_t n, float value, const float *scale_dev,
                       double divisor);
/* dst (dtype) = src (f32), rounded to nearest even. */
mp_status mp_cuda_cast_from_f32(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, const float *src, int64_t n);

/* *dst = *src * factor (one thread; the seed of a micro-batch, loss scale / k). */
mp_status mp_cuda_scale_scalar(mp_cuda_ctx *ctx, float *dst, const float *src, float factor);

/* When *armed: *dst (f32, f16 or bf16) = +inf and *armed = 0 (tests: a
 * forced overflow). */
mp_status mp_cuda_inject_inf(mp_cuda_ctx *ctx, int *armed, void *dst, mp_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
