/* grad_pack.h — the copies around a gradient bucket's all-reduce
 * (grad_pack.cu), one launch per bucket for all its tensors: the fp32
 * gradients into the bucket in the wire dtype, scaled by 1/world (the
 * average; dividing first keeps f16 sums in range), and the reduced bucket
 * back into the fp32 gradients. On ctx->stream. */
#ifndef MP_NCCL_GRAD_PACK_H
#define MP_NCCL_GRAD_PACK_H

#include "cuda/cuda_ctx.h"
#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of a bucket: n fp32 gradients at grad, at element `off` of the wire buffer. */
typedef struct {
    float *grad;
    long long n, off;
} mp_grad_slot;

/* slots_dev: `count` slots in device memory (set up once); longest: the
 * largest n among them (sizes the launch). */
mp_status mp_grad_pack(mp_cuda_ctx *ctx, const mp_grad_slot *slots_dev, int count, long long longest, void *wire,
                       mp_dtype dtype, float factor);
mp_status mp_grad_unpack(mp_cuda_ctx *ctx, const mp_grad_slot *slots_dev, int count, long long longest,
                         const void *wire, mp_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
