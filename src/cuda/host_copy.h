/* host_copy.h — tensors copied between host f32 arrays (CPU layout) and
 * device memory as the GPU keeps them: f32, f16 or bf16, and conv2d filters
 * in KRSC order (K, R, S, C). Parameters and gradients
 * (cuda_plan.c) and optimizer state (optim_state_cuda.cu) cross this way
 * for host copies and checkpoints. */
#ifndef MP_CUDA_HOST_COPY_H
#define MP_CUDA_HOST_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_cuda_ctx mp_cuda_ctx;

/* One tensor of n values. */
typedef struct {
    float *host;     /* n f32 values in the CPU layout */
    void *dev;       /* n values of dt on the device */
    mp_dtype dt;     /* MP_DTYPE_F32, F16 or BF16; f16/bf16 are rounded to nearest even on the way there */
    int64_t n;
    int filter[3];   /* (k, c, rs) with rs > 0: a filter the device holds in (k, rs, c) order (k * c * rs == n),
                        as mp_cuda_param_ref.filter; all 0: the CPU layout */
    const char *name; /* the tensor, for errors (may be NULL) */
} mp_host_copy;

/* Every copy one way on ctx's stream, then waits for the stream: a host copy
 * is complete (to_host) or its host array free to change (to the device)
 * when this returns. Converted or permuted tensors go through one host
 * staging buffer; what names the transfer in errors. */
mp_status mp_cuda_host_copies(mp_cuda_ctx *ctx, const mp_host_copy *x, int count, bool to_host, const char *what);

#ifdef __cplusplus
}
#endif
#endif
