// cuda_plan_kernels.cu — kernels the plan executor launches itself: gradient
// accumulation (dst += src in f32 arithmetic, one rounding to the storage
// dtype) and the per-step fp32 -> f16/bf16 weight casts (round to nearest
// even, as the CPU's mp_convert_f32_to_*). Grid-stride loops on ctx->stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cuda_plan_kernels.h"

namespace {

__device__ float load_as_float(const void *p, mp_dtype dt, long long i) {
    switch (dt) {
    case MP_DTYPE_F16: return __half2float(static_cast<const __half *>(p)[i]);
    case MP_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
    }
}

__device__ void store_from_float(void *p, mp_dtype dt, long long i, float v) {
    switch (dt) {
    case MP_DTYPE_F16: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    case MP_DTYPE_BF16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float *>(p)[i] = v;
    }
}

__global__ void accumulate_kernel(mp_dtype dt, void *dst, const void *src, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        store_from_float(dst, dt, i, load_as_float(dst, dt, i) + load_as_float(src, dt, i));
}

__global__ void cast_kernel(mp_dtype dt, void *dst, const float *src, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        store_from_float(dst, dt, i, src[i]);
}

} // namespace

extern "C" mp_status mp_cuda_accumulate(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, const void *src, int64_t n) {
    if (n <= 0) return MP_OK;
    accumulate_kernel<<<mp_cuda_blocks(ctx, n), 256, 0, ctx->stream>>>(dtype, dst, src, n);
    return mp_cuda_check(cudaGetLastError(), "accumulate_kernel", "gradient accumulation");
}

extern "C" mp_status mp_cuda_cast_from_f32(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, const float *src, int64_t n) {
    if (n <= 0) return MP_OK;
    cast_kernel<<<mp_cuda_blocks(ctx, n), 256, 0, ctx->stream>>>(dtype, dst, src, n);
    return mp_cuda_check(cudaGetLastError(), "cast_kernel", "weight cast");
}
