/* grad_pack.h — the copies around a gradient bucket's all-reduce
 * (grad_pack.cu): fp32 gradient -> bucket slot in the wire dtype, scaled by
 * 1/world (the average; dividing first keeps f16 sums in range), and the
 * reduced slot back into the fp32 gradient. On ctx->stream. */
#ifndef MP_NCCL_GRAD_PACK_H
#define MP_NCCL_GRAD_PACK_H

#include "cuda/cuda_ctx.h"
#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst (dtype) = src * factor, rounded to nearest even. */
mp_status mp_grad_pack(mp_cuda_ctx *ctx, const float *src, void *dst, mp_dtype dtype, long long n, float factor);
/* dst (f32) = src (dtype). */
mp_status mp_grad_unpack(mp_cuda_ctx *ctx, const void *src, mp_dtype dtype, float *dst, long long n);

#ifdef __cplusplus
}
#endif
#endif
