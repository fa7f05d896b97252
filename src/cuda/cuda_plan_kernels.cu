// cuda_plan_kernels.cu — the device operations the plan executor needs
// itself: gradient accumulation (dst += src, the residual add's elementwise
// sum in place; also across dtypes), a fill (a seed on every element) and the per-step fp32 -> f16/bf16 weight casts (the layout
// code's converting copy, RNE) on the kernels the ops already use, and two
// one-thread kernels (a micro-batch's seed, the tests' overflow injection).
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/cuda_plan_kernels.h"

extern "C" mp_status mp_cuda_accumulate(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, const void *src, int64_t n) {
    mp_ew_io<2> io = {{dst, src}, {dtype, dtype}, dst, dtype, (long long)n};
    return mp_cuda_check(mp_ew_launch(ctx, io, mp_sum2()), "mp_ew_launch", "gradient accumulation");
}

extern "C" mp_status mp_cuda_cast_from_f32(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, const float *src, int64_t n) {
    return mp_cuda_check(mp_cuda_copy_convert(ctx, src, MP_DTYPE_F32, dst, dtype, (long long)n), "mp_cuda_copy_convert",
                         "weight cast");
}

extern "C" mp_status mp_cuda_add_into(mp_cuda_ctx *ctx, void *dst, mp_dtype dst_dtype, const void *src, mp_dtype src_dtype,
                                      int64_t n) {
    mp_ew_io<2> io = {{dst, src}, {dst_dtype, src_dtype}, dst, dst_dtype, (long long)n};
    return mp_cuda_check(mp_ew_launch(ctx, io, mp_sum2()), "mp_ew_launch", "add into");
}

static __global__ void fill_kernel(void *dst, mp_dtype dtype, long long n, float value, const float *scale,
                                   double divisor) {
    const float v = scale ? (float)((double)*scale / divisor) : value;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) mp_st(dst, dtype, i, v);
}

extern "C" mp_status mp_cuda_fill(mp_cuda_ctx *ctx, mp_dtype dtype, void *dst, int64_t n, float value,
                                  const float *scale_dev, double divisor) {
    if (n <= 0) return MP_OK;
    fill_kernel<<<mp_cuda_grid(ctx, n), MP_CUDA_THREADS, 0, ctx->stream>>>(dst, dtype, (long long)n, value, scale_dev,
                                                                         divisor);
    return mp_cuda_check(cudaGetLastError(), "fill_kernel", "fill");
}

static __global__ void scale_scalar_kernel(float *dst, const float *src, float factor) { *dst = *src * factor; }

extern "C" mp_status mp_cuda_scale_scalar(mp_cuda_ctx *ctx, float *dst, const float *src, float factor) {
    scale_scalar_kernel<<<1, 1, 0, ctx->stream>>>(dst, src, factor);
    return mp_cuda_check(cudaGetLastError(), "scale_scalar_kernel", "micro-batch seed");
}

// Fault injection for tests of the overflow path: one thread, armed by a
// device flag that it clears, so a captured graph injects exactly once.
static __global__ void inject_inf_kernel(int *armed, void *dst, mp_dtype dtype) {
    if (*armed) {
        switch (dtype) {
        case MP_DTYPE_F32: *(float *)dst = __int_as_float(0x7f800000); break;
        case MP_DTYPE_F16: *(unsigned short *)dst = 0x7C00; break;
        case MP_DTYPE_BF16: *(unsigned short *)dst = 0x7F80; break;
        case MP_DTYPE_F64:
        case MP_DTYPE_I32:
        case MP_DTYPE_COUNT: __trap();
        }
        *armed = 0;
    }
}

extern "C" mp_status mp_cuda_inject_inf(mp_cuda_ctx *ctx, int *armed, void *dst, mp_dtype dtype) {
    inject_inf_kernel<<<1, 1, 0, ctx->stream>>>(armed, dst, dtype);
    return mp_cuda_check(cudaGetLastError(), "inject_inf_kernel", "fault injection");
}
