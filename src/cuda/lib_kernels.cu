/* lib_kernels.cu — see lib_kernels.h. Kernels are templates over the element
 * types (float, __half, __nv_bfloat16), dispatched from the mp_dtype of each
 * operand; grid-stride loops sized by mp_cuda_blocks. */
#include "cuda/lib_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/vec16.cuh" /* with_type, to_f32, from_f32 */

/* f(S{}, D{}) with the C types of two float dtypes; false when either is
 * none of f32, f16, bf16. */
template <typename F> static bool with_types(mp_dtype a, mp_dtype b, F f) {
    bool found = false;
    with_type(a, [&](auto s) {
        with_type(b, [&](auto d) {
            f(s, d);
            found = true;
        });
    });
    return found;
}

static mp_status bad_dtype(const char *what, const char *kernel, mp_dtype a, mp_dtype b) {
    return mp_error(MP_ERR_UNSUPPORTED, "%s: %s: dtypes %s -> %s not supported on the GPU", what ? what : "cuda", kernel,
                    mp_dtype_name(a), mp_dtype_name(b));
}

static mp_status launched(const char *kernel, const char *what) {
    return mp_cuda_check(cudaGetLastError(), kernel, what);
}

/* ---- cast and bias ------------------------------------------------------ */

template <typename S, typename D>
__global__ void cast_kernel(const S *src, D *dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = from_f32<D>(to_f32(src[i]));
}

mp_status mp_cuda_lib_cast(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt, long long n,
                           const char *what) {
    if (n <= 0 || (src == dst && sdt == ddt)) return MP_OK;
    if (sdt == ddt)
        return mp_cuda_check(cudaMemcpyAsync(dst, src, (size_t)n * mp_dtype_size(sdt), cudaMemcpyDeviceToDevice,
                                             ctx->stream),
                             "cudaMemcpyAsync", what);
    if (!with_types(sdt, ddt, [&](auto s, auto d) {
            using S = decltype(s);
            using D = decltype(d);
            cast_kernel<S, D><<<mp_cuda_blocks(ctx, n), 256, 0, ctx->stream>>>((const S *)src, (D *)dst, n);
        }))
        return bad_dtype(what, "cast", sdt, ddt);
    return launched("cast_kernel", what);
}

template <typename S, typename D, typename B>
__global__ void bias_kernel(const S *src, D *dst, const B *bias, long long n, int cols) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = to_f32(src[i]);
        if (bias) v += to_f32(bias[i % cols]);
        dst[i] = from_f32<D>(v);
    }
}

mp_status mp_cuda_lib_add_bias(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt,
                               const void *bias, mp_dtype bdt, long long rows, int cols, const char *what) {
    const long long n = rows * cols;
    if (!bias) return mp_cuda_lib_cast(ctx, src, sdt, dst, ddt, n, what);
    if (n <= 0) return MP_OK;
    int found = 0;
    with_type(sdt, [&](auto s) {
        with_type(ddt, [&](auto d) {
            with_type(bdt, [&](auto b) {
                using S = decltype(s);
                using D = decltype(d);
                using Bt = decltype(b);
                bias_kernel<S, D, Bt><<<mp_cuda_blocks(ctx, n), 256, 0, ctx->stream>>>((const S *)src, (D *)dst,
                                                                                        (const Bt *)bias, n, cols);
                found = 1;
            });
        });
    });
    if (!found) return bad_dtype(what, "bias add", sdt, ddt);
    return launched("bias_kernel", what);
}

/* ---- filter layouts ----------------------------------------------------- */

/* (K, C, RS) -> (K, RS, C): one thread per destination element. */
template <typename S, typename D>
__global__ void to_krsc_kernel(const S *src, D *dst, int k, int c, int rs) {
    const long long n = (long long)k * c * rs;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int ci = (int)(i % c);
        const long long t = i / c;
        const int r = (int)(t % rs), ki = (int)(t / rs);
        dst[i] = from_f32<D>(to_f32(src[((long long)ki * c + ci) * rs + r]));
    }
}

/* (K, RS, C) -> (K, C, RS). */
template <typename S, typename D>
__global__ void from_krsc_kernel(const S *src, D *dst, int k, int c, int rs) {
    const long long n = (long long)k * c * rs;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i % rs);
        const long long t = i / rs;
        const int ci = (int)(t % c), ki = (int)(t / c);
        dst[i] = from_f32<D>(to_f32(src[((long long)ki * rs + r) * c + ci]));
    }
}

mp_status mp_cuda_lib_filter_to_krsc(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt, int k,
                                     int c, int rs, const char *what) {
    const long long n = (long long)k * c * rs;
    if (!with_types(sdt, ddt, [&](auto s, auto d) {
            using S = decltype(s);
            using D = decltype(d);
            to_krsc_kernel<S, D><<<mp_cuda_blocks(ctx, n), 256, 0, ctx->stream>>>((const S *)src, (D *)dst, k, c, rs);
        }))
        return bad_dtype(what, "filter to KRSC", sdt, ddt);
    return launched("to_krsc_kernel", what);
}

mp_status mp_cuda_lib_filter_from_krsc(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt, int k,
                                       int c, int rs, const char *what) {
    const long long n = (long long)k * c * rs;
    if (!with_types(sdt, ddt, [&](auto s, auto d) {
            using S = decltype(s);
            using D = decltype(d);
            from_krsc_kernel<S, D><<<mp_cuda_blocks(ctx, n), 256, 0, ctx->stream>>>((const S *)src, (D *)dst, k, c, rs);
        }))
        return bad_dtype(what, "filter gradient from KRSC", sdt, ddt);
    return launched("from_krsc_kernel", what);
}

/* ---- column sums -------------------------------------------------------- */

#define COLSUM_TILE 32      /* columns per block (one warp wide) */
#define COLSUM_ROWS 8       /* rows per block iteration (blockDim.y) */
#define COLSUM_MAX_BLOCKS 512

static int colsum_row_blocks(long long rows) {
    long long b = (rows + 63) / 64;
    if (b > COLSUM_MAX_BLOCKS) b = COLSUM_MAX_BLOCKS;
    return b < 1 ? 1 : (int)b;
}

size_t mp_cuda_lib_colsum_workspace(long long rows, int cols) {
    return mp_cuda_lib_bytes(MP_DTYPE_F32, (long long)colsum_row_blocks(rows) * cols);
}

/* partial[by][c] = sum of the rows by*8 + ty + j*gridDim.y*8 of column c. */
template <typename T>
__global__ void colsum_partial_kernel(const T *x, long long rows, int cols, float *partial) {
    __shared__ float sh[COLSUM_ROWS][COLSUM_TILE + 1];
    const int c = blockIdx.x * COLSUM_TILE + threadIdx.x;
    float acc = 0.f;
    if (c < cols)
        for (long long r = (long long)blockIdx.y * COLSUM_ROWS + threadIdx.y; r < rows;
             r += (long long)gridDim.y * COLSUM_ROWS)
            acc += to_f32(x[r * cols + c]);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float s = 0.f;
        for (int i = 0; i < COLSUM_ROWS; i++) s += sh[i][threadIdx.x];
        partial[(long long)blockIdx.y * cols + c] = s;
    }
}

__global__ void colsum_final_kernel(const float *partial, int row_blocks, int cols, float *out) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int j = 0; j < row_blocks; j++) s += partial[(long long)j * cols + c];
        out[c] = s;
    }
}

mp_status mp_cuda_lib_colsum(mp_cuda_ctx *ctx, const void *x, mp_dtype xdt, long long rows, int cols, float *out,
                             void *workspace, const char *what) {
    if (cols <= 0) return MP_OK;
    const int rb = colsum_row_blocks(rows);
    float *partial = (float *)workspace;
    dim3 grid((unsigned)((cols + COLSUM_TILE - 1) / COLSUM_TILE), (unsigned)rb), block(COLSUM_TILE, COLSUM_ROWS);
    bool ok = with_type(xdt, [&](auto t) {
        using T = decltype(t);
        colsum_partial_kernel<T><<<grid, block, 0, ctx->stream>>>((const T *)x, rows, cols, partial);
    });
    if (!ok) return bad_dtype(what, "column sum", xdt, MP_DTYPE_F32);
    MP_TRY(launched("colsum_partial_kernel", what));
    colsum_final_kernel<<<(unsigned)((cols + 255) / 256), 256, 0, ctx->stream>>>(partial, rb, cols, out);
    return launched("colsum_final_kernel", what);
}
