/* grads_cuda.cuh — the inside of mp_cuda_grads (cuda_optim.h): the table
 * of gradient tensors (slot 0) and the device scratch of the norm. */
#ifndef MP_CUDA_GRADS_CUDA_CUH
#define MP_CUDA_GRADS_CUDA_CUH

#include "cuda/multi_tensor.cuh"

typedef struct {
    double partials[MP_MT_MAX_BLOCKS]; /* per-block sums of squares */
    double norm;
    float coef;                        /* clip-by-norm factor */
    int clip;                          /* norm > max_norm */
} mp_norm_scratch;

struct mp_cuda_grads {
    mp_mt_table table;
    mp_norm_scratch *scratch; /* device */
};

#endif
