/* multi_tensor.cuh — multi-tensor apply (as Apex's multi_tensor_apply): one
 * kernel launch covers many tensors. A table built once, outside the training
 * step, lives in device memory: per tensor up to MP_MT_SLOTS arrays of the
 * same length (e.g. param, grad, m, v, low-precision copy) plus flags, and a
 * list of chunks (tensor, start, len) of at most MP_MT_CHUNK elements. Block
 * b of a launch walks chunks b, b + gridDim.x, ...; nothing is copied from
 * the host per launch, so launches are cheap and can be captured into CUDA
 * graphs. The grid is capped at MP_MT_MAX_BLOCKS so per-block partial
 * results (the gradient norm) fit a fixed buffer and sum in a fixed order. */
#ifndef MP_CUDA_MULTI_TENSOR_CUH
#define MP_CUDA_MULTI_TENSOR_CUH

#include "cuda/cuda_optim.h"

#define MP_MT_SLOTS 5
#define MP_MT_CHUNK 16384
#define MP_MT_THREADS 512
#define MP_MT_MAX_BLOCKS 1024

/* Slot use by the optimizers; gradient lists use slot 0, casts 0 -> 1. */
enum { MP_MT_PARAM = 0, MP_MT_GRAD = 1, MP_MT_BUF0 = 2, MP_MT_BUF1 = 3, MP_MT_LOW = 4 };

/* flags: the low-precision dtype in the low byte (MP_DTYPE_F32: none; in a
 * gradient list, the gradient's own dtype), MP_MT_DECAY when the tensor
 * takes weight decay, MP_MT_NO_MASTER when the optimizer leaves the f32
 * weight at its low-precision value (policies without master weights),
 * MP_MT_STATE_LOW when BUF0 holds the low dtype of the low byte instead of
 * f32 (SGD momentum of a weight without master), MP_MT_GRAD_LOW when the
 * optimizer's gradient slot holds that low dtype (a plan's low_grads). */
#define MP_MT_DTYPE_MASK 0xff
#define MP_MT_DECAY 0x100
#define MP_MT_NO_MASTER 0x200
#define MP_MT_STATE_LOW 0x400
#define MP_MT_GRAD_LOW 0x800

typedef struct {
    void *ptr[MP_MT_SLOTS];
    long long numel;
    int flags;
    int pad_;
} mp_mt_tensor;

typedef struct {
    int tensor;      /* index into the tensor table */
    int len;         /* 1..MP_MT_CHUNK elements */
    long long start; /* first element in the tensor */
} mp_mt_chunk;

/* Passed to kernels by value; the arrays are device memory. */
typedef struct {
    const mp_mt_tensor *tensors; // (n_tensors)
    const mp_mt_chunk *chunks;   // (n_chunks)
    int n_tensors, n_chunks;
    unsigned grid;               /* min(n_chunks, MP_MT_MAX_BLOCKS); 0: nothing to launch */
    void *block;                 /* the one allocation holding both arrays */
} mp_mt_table;

/* Copies the n host tensor records (numel >= 0; zero-length tensors get no
 * chunk) and their chunk list to the device; synchronizes ctx->stream (setup
 * time only). what names the owner in errors. */
mp_status mp_mt_table_build(mp_cuda_ctx *ctx, const mp_mt_tensor *tensors, int n, const char *what, mp_mt_table *out);

/* The grid of an elementwise pass over n_chunks chunks when the device holds
 * `resident` of its blocks at once: no more blocks than that, and each block
 * k or k - 1 chunks (k = ceil(n_chunks / resident)), so that no wave of late
 * blocks is left running on a few SMs at the end; 0 for no chunks.
 * Reductions, whose per-block partials are summed in a fixed order, keep the
 * table's `grid` (independent of the device). Elementwise results do not
 * depend on the grid. */
#ifdef __cplusplus
extern "C"
#endif
    unsigned
    mp_mt_pass_grid(long long n_chunks, long long resident);
void mp_mt_table_free(mp_mt_table *t);

/* The launch error of the kernel just launched, as one mp_error line. */
static inline mp_status mp_mt_launched(const char *kernel) {
    return mp_cuda_check(cudaGetLastError(), kernel, "multi-tensor launch");
}

#ifdef __CUDACC__
/* mp_mt_pass_grid for kernel (MP_MT_THREADS a block, no dynamic shared
 * memory) over t on ctx's device, with the blocks per SM the occupancy API
 * gives for it (its registers decide: 2 to 4); 1 a SM where it cannot tell. */
static inline unsigned mp_mt_kernel_grid(const mp_cuda_ctx *ctx, const mp_mt_table &t, const void *kernel) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, MP_MT_THREADS, 0) != cudaSuccess) {
        cudaGetLastError(); /* not the next launch's error */
        per_sm = 1;
    }
    return mp_mt_pass_grid(t.n_chunks, (long long)(ctx->sm_count > 0 ? ctx->sm_count : 1) * (per_sm > 0 ? per_sm : 1));
}

/* Calls f(tensor, start, len) for each chunk of this block (chunks
 * blockIdx.x, + gridDim.x, ...); f spreads the chunk over the block's
 * threads itself (the four-wide paths of sgd_cuda.cu and grads_cuda.cu). */
template <class F>
__device__ __forceinline__ void mp_mt_for_each_chunk(const mp_mt_table &t, F &&f) {
    for (int c = blockIdx.x; c < t.n_chunks; c += gridDim.x) {
        const mp_mt_chunk ch = t.chunks[c];
        const mp_mt_tensor ten = t.tensors[ch.tensor]; /* a copy: f's stores cannot make it reload */
        f(ten, ch.start, ch.len);
    }
}

/* Whether p + start elements of size bytes is aligned to `to` bytes. */
__device__ __forceinline__ bool mp_mt_aligned(const void *p, long long start, int size, int to) {
    return ((unsigned long long)p + (unsigned long long)(start * size)) % to == 0;
}

/* Calls f(tensor, i) for each element i this thread owns: every chunk of
 * this block, elements threadIdx.x + k * blockDim.x of the chunk. */
template <class F>
__device__ __forceinline__ void mp_mt_for_each(const mp_mt_table &t, F &&f) {
    for (int c = blockIdx.x; c < t.n_chunks; c += gridDim.x) {
        const mp_mt_chunk ch = t.chunks[c];
        const mp_mt_tensor ten = t.tensors[ch.tensor];
        const long long end = ch.start + ch.len;
        for (long long i = ch.start + threadIdx.x; i < end; i += blockDim.x) f(ten, i);
    }
}
#endif

#endif
