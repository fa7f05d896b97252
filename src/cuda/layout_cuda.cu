/* layout_cuda.cu — layout and dtype conversions on the device: the
 * host-order NCHW f32 <-> NHWC (f32/f16/bf16) conversions of cuda_op.h, and
 * the two helpers the data-movement ops use: a dtype-converting copy and a
 * batched transpose through 32x32 shared-memory tiles (both RNE on store). */
#include <stdio.h>

#include "cuda/cuda_kernel_util.cuh"

#define TILE 32
#define TILE_ROWS 8 /* threads per tile column: each moves TILE / TILE_ROWS rows */

/* dst[b][s][r] = src[b][r][s]; tiles loop so any R, S and batch count fit the grid. */
__global__ void mp_transpose_kernel(const void *src, mp_dtype src_dt, void *dst, mp_dtype dst_dt, long long B,
                                    long long R, long long S) {
    __shared__ float tile[TILE][TILE + 1];
    const long long tiles_r = (R + TILE - 1) / TILE, tiles_s = (S + TILE - 1) / TILE;
    for (long long b = blockIdx.z; b < B; b += gridDim.z)
        for (long long tr = blockIdx.y; tr < tiles_r; tr += gridDim.y)
            for (long long ts = blockIdx.x; ts < tiles_s; ts += gridDim.x) {
                const long long r0 = tr * TILE, s0 = ts * TILE, base = b * R * S;
                for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
                    long long r = r0 + j, s = s0 + threadIdx.x;
                    if (r < R && s < S) tile[j][threadIdx.x] = mp_ld(src, src_dt, base + r * S + s);
                }
                __syncthreads();
                for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
                    long long s = s0 + j, r = r0 + threadIdx.x;
                    if (r < R && s < S) mp_st(dst, dst_dt, base + s * R + r, tile[threadIdx.x][j]);
                }
                __syncthreads();
            }
}

cudaError_t mp_cuda_transpose(mp_cuda_ctx *ctx, const void *src, mp_dtype src_dt, void *dst, mp_dtype dst_dt,
                              long long batches, long long R, long long S) {
    if (batches <= 0 || R <= 0 || S <= 0) return cudaSuccess;
    if (R == 1 || S == 1) return mp_cuda_copy_convert(ctx, src, src_dt, dst, dst_dt, batches * R * S);
    long long tiles_r = (R + TILE - 1) / TILE, tiles_s = (S + TILE - 1) / TILE;
    dim3 grid((unsigned)(tiles_s < 1024 ? tiles_s : 1024), (unsigned)(tiles_r < 1024 ? tiles_r : 1024),
              (unsigned)(batches < 65535 ? batches : 65535));
    mp_transpose_kernel<<<grid, dim3(TILE, TILE_ROWS), 0, ctx->stream>>>(src, src_dt, dst, dst_dt, batches, R, S);
    return cudaGetLastError();
}

struct mp_identity {
    __device__ float operator()(const float (&a)[1]) const { return a[0]; }
};

cudaError_t mp_cuda_copy_convert(mp_cuda_ctx *ctx, const void *src, mp_dtype src_dt, void *dst, mp_dtype dst_dt,
                                 long long n) {
    if (n <= 0 || (src == dst && src_dt == dst_dt)) return cudaSuccess;
    if (src_dt == dst_dt)
        return cudaMemcpyAsync(dst, src, (size_t)n * mp_dtype_size(src_dt), cudaMemcpyDeviceToDevice, ctx->stream);
    mp_ew_io<1> io = {{src}, {src_dt}, dst, dst_dt, n};
    return mp_ew_launch(ctx, io, mp_identity());
}

static mp_status layout_status(cudaError_t e, const char *dir, const mp_tensor *t) {
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) return MP_OK;
    char what[160], s[64];
    snprintf(what, sizeof what, "%s %s %s", dir, mp_shape_str(&t->shape, s, sizeof s), mp_dtype_name(t->dtype));
    return mp_cuda_check(e, "kernel launch", what);
}

static mp_status check_dtype(const mp_tensor *t, const char *dir) {
    if (mp_cuda_float_dtype(t->dtype)) return MP_OK;
    char s[64];
    return mp_error(MP_ERR_UNSUPPORTED, "%s %s: dtype %s (the device holds f32, f16 or bf16)", dir,
                    mp_shape_str(&t->shape, s, sizeof s), mp_dtype_name(t->dtype));
}

mp_status mp_cuda_nchw_f32_to_device(mp_cuda_ctx *ctx, const float *dev_nchw_f32, const mp_tensor *dst) {
    const char *dir = "NCHW f32 -> device";
    MP_TRY(check_dtype(dst, dir));
    const mp_shape *s = &dst->shape;
    cudaError_t e;
    if (s->ndim == 4)
        e = mp_cuda_transpose(ctx, dev_nchw_f32, MP_DTYPE_F32, dst->data, dst->dtype, s->dims[0], s->dims[1],
                              (long long)s->dims[2] * s->dims[3]);
    else
        e = mp_cuda_copy_convert(ctx, dev_nchw_f32, MP_DTYPE_F32, dst->data, dst->dtype, mp_tensor_numel(dst));
    return layout_status(e, dir, dst);
}

mp_status mp_cuda_device_to_nchw_f32(mp_cuda_ctx *ctx, const mp_tensor *src, float *dev_nchw_f32) {
    const char *dir = "device -> NCHW f32";
    MP_TRY(check_dtype(src, dir));
    const mp_shape *s = &src->shape;
    cudaError_t e;
    if (s->ndim == 4)
        e = mp_cuda_transpose(ctx, src->data, src->dtype, dev_nchw_f32, MP_DTYPE_F32, s->dims[0],
                              (long long)s->dims[2] * s->dims[3], s->dims[1]);
    else
        e = mp_cuda_copy_convert(ctx, src->data, src->dtype, dev_nchw_f32, MP_DTYPE_F32, mp_tensor_numel(src));
    return layout_status(e, dir, src);
}
