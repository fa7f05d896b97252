/* grad_pack.cu — grad_pack.h: elementwise kernels of cuda_kernel_util.cuh. */
#include "cuda/cuda_kernel_util.cuh"
#include "nccl/grad_pack.h"

namespace {
struct scale_by {
    float f;
    __device__ float operator()(const float (&a)[1]) const { return a[0] * f; }
};
} // namespace

mp_status mp_grad_pack(mp_cuda_ctx *ctx, const float *src, void *dst, mp_dtype dtype, long long n, float factor) {
    mp_ew_io<1> io = {{src}, {MP_DTYPE_F32}, dst, dtype, n};
    return mp_cuda_check(mp_ew_launch(ctx, io, scale_by{factor}), "mp_grad_pack", "gradient all-reduce (pack)");
}

mp_status mp_grad_unpack(mp_cuda_ctx *ctx, const void *src, mp_dtype dtype, float *dst, long long n) {
    return mp_cuda_check(mp_cuda_copy_convert(ctx, src, dtype, dst, MP_DTYPE_F32, n), "mp_cuda_copy_convert",
                         "gradient all-reduce (unpack)");
}
