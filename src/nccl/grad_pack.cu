/* grad_pack.cu — grad_pack.h: blockIdx.y picks the tensor, the x blocks
 * stride over its elements; one rounding (RNE) into the wire dtype. */
#include "cuda/cuda_kernel_util.cuh"
#include "nccl/grad_pack.h"

static __global__ void pack_kernel(const mp_grad_slot *slots, void *wire, mp_dtype dt, float factor) {
    const mp_grad_slot s = slots[blockIdx.y];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += (long long)gridDim.x * blockDim.x)
        mp_st(wire, dt, s.off + i, s.grad[i] * factor);
}

static __global__ void unpack_kernel(const mp_grad_slot *slots, const void *wire, mp_dtype dt) {
    const mp_grad_slot s = slots[blockIdx.y];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += (long long)gridDim.x * blockDim.x)
        s.grad[i] = mp_ld(wire, dt, s.off + i);
}

static dim3 grid_of(const mp_cuda_ctx *ctx, int count, long long longest) {
    long long x = (longest + 4LL * MP_CUDA_THREADS - 1) / (4LL * MP_CUDA_THREADS); /* ~4 elements per thread */
    long long cap = (long long)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    if (x > cap) x = cap;
    return dim3((unsigned)(x < 1 ? 1 : x), (unsigned)count);
}

mp_status mp_grad_pack(mp_cuda_ctx *ctx, const mp_grad_slot *slots_dev, int count, long long longest, void *wire,
                       mp_dtype dtype, float factor) {
    if (count <= 0) return MP_OK;
    pack_kernel<<<grid_of(ctx, count, longest), MP_CUDA_THREADS, 0, ctx->stream>>>(slots_dev, wire, dtype, factor);
    return mp_cuda_check(cudaGetLastError(), "pack_kernel", "gradient all-reduce (pack)");
}

mp_status mp_grad_unpack(mp_cuda_ctx *ctx, const mp_grad_slot *slots_dev, int count, long long longest,
                         const void *wire, mp_dtype dtype) {
    if (count <= 0) return MP_OK;
    unpack_kernel<<<grid_of(ctx, count, longest), MP_CUDA_THREADS, 0, ctx->stream>>>(slots_dev, wire, dtype);
    return mp_cuda_check(cudaGetLastError(), "unpack_kernel", "gradient all-reduce (unpack)");
}
