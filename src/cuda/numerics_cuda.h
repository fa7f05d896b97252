/* numerics_cuda.h — numerics statistics (mixprec/numerics.h) on the GPU:
 * device slots that one kernel per observed tensor accumulates into (every
 * count by atomics, amax/amin by atomic max on f32 bits), cleared before a
 * collecting launch and copied to pinned host memory after it, where the
 * host reads them once an event says the copy is done: the step is never
 * waited for. Classification is numerics_bounds.h's, as on the CPU. */
#ifndef MP_CUDA_NUMERICS_CUDA_H
#define MP_CUDA_NUMERICS_CUDA_H

#include <stdbool.h>

#include "cuda/cuda_ctx.h"
#include "mixprec/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_cuda_numerics mp_cuda_numerics;

/* Room for `slots` tensors per collection. */
mp_status mp_cuda_numerics_create(mp_cuda_ctx *ctx, int slots, mp_cuda_numerics **out);
void mp_cuda_numerics_destroy(mp_cuda_numerics *n);
/* Queue: zero every slot (before a collecting launch). */
mp_status mp_cuda_numerics_clear(mp_cuda_numerics *n);
/* Queue (or capture): the statistics of numel values of dtype dt (f32, f16,
 * bf16) at device address x into slot. */
mp_status mp_cuda_numerics_tensor(mp_cuda_numerics *n, int slot, const void *x, mp_dtype dt, int64_t numel);
/* Queue: copy slots [0, count) to the host and mark the copy's end. */
mp_status mp_cuda_numerics_readback(mp_cuda_numerics *n, int count);
/* Whether the last readback finished (waiting for it when wait). */
mp_status mp_cuda_numerics_ready(mp_cuda_numerics *n, bool wait, bool *ready);
/* Slot's statistics from the finished readback, for a tensor of numel values. */
void mp_cuda_numerics_get(const mp_cuda_numerics *n, int slot, int64_t numel, mp_tensor_stats *out);

#ifdef __cplusplus
}
#endif
#endif
