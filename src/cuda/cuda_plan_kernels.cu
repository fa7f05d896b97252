// cuda_plan_kernels.cu — the two device operations the plan executor needs
// itself, on the kernels the ops already use: gradient accumulation
// (dst += src, the residual add's elementwise sum in place) and the per-step
// fp32 -> f16/bf16 weight casts (the layout code's converting copy, RNE).
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
