/* lib_kernels.h — the small kernels around the library calls of conv2d,
 * conv_transpose2d (cuDNN) and linear (cuBLASLt): dtype casts, the bias add,
 * the filter permutation (K, C, R, S) <-> (K, R, S, C) that cuDNN wants
 * beside NHWC activations, and deterministic column sums (bias gradients).
 * Element types: F32, F16, BF16; arithmetic in f32, one rounding per store.
 * All run on ctx->stream, never synchronize and never allocate (they are
 * captured into CUDA graphs); `what` names the op for errors. */
#ifndef MP_CUDA_LIB_KERNELS_H
#define MP_CUDA_LIB_KERNELS_H

#include "cuda/cuda_ctx.h"
#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst (n elements of ddt) = src (sdt). A no-op when src == dst and sdt == ddt. */
mp_status mp_cuda_lib_cast(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt, long long n,
                           const char *what);

/* Row-major (rows, cols): dst[r][c] = src[r][c] + bias[c] (bias NULL: a plain
 * cast). src may be dst (in place) when sdt == ddt. NHWC activations are
 * (N*H*W, C); linear outputs (N, O). */
mp_status mp_cuda_lib_add_bias(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt,
                               const void *bias, mp_dtype bdt, long long rows, int cols, const char *what);

/* Filter (K, C, RS) in sdt -> (K, RS, C) in ddt. */
mp_status mp_cuda_lib_filter_to_krsc(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt, int k,
                                     int c, int rs, const char *what);
/* Filter gradient (K, RS, C) in sdt -> (K, C, RS) in ddt (f32, or the
 * compute dtype for a low_grads plan's weight gradient). */
mp_status mp_cuda_lib_filter_from_krsc(mp_cuda_ctx *ctx, const void *src, mp_dtype sdt, void *dst, mp_dtype ddt, int k,
                                       int c, int rs, const char *what);

/* out[c] = sum over r of x[r][c] (row-major (rows, cols) in xdt), f32
 * accumulation in a fixed order (deterministic), through a workspace of
 * mp_cuda_lib_colsum_workspace(rows, cols) bytes. */
size_t mp_cuda_lib_colsum_workspace(long long rows, int cols);
mp_status mp_cuda_lib_colsum(mp_cuda_ctx *ctx, const void *x, mp_dtype xdt, long long rows, int cols, float *out,
                             void *workspace, const char *what);

/* Bytes of n elements of dt rounded up to 256 (cuBLASLt/cuDNN alignment). */
static inline size_t mp_cuda_lib_bytes(mp_dtype dt, long long n) {
    return ((size_t)n * mp_dtype_size(dt) + 255) & ~(size_t)255;
}

/* A bump allocator over the shared workspace: slices aligned to 256. */
typedef struct {
    char *cur;
    char *end;
} mp_cuda_ws;
static inline mp_cuda_ws mp_cuda_ws_begin(void *workspace, size_t bytes) {
    char *p = (char *)workspace;
    char *aligned = (char *)(((uintptr_t)p + 255) & ~(uintptr_t)255);
    mp_cuda_ws w = {aligned, p + bytes};
    return w;
}
/* NULL when the workspace is too small (a bug in the op's prepare). */
static inline void *mp_cuda_ws_take(mp_cuda_ws *w, size_t bytes) {
    bytes = (bytes + 255) & ~(size_t)255;
    if (w->cur > w->end || (size_t)(w->end - w->cur) < bytes) return NULL;
    void *p = w->cur;
    w->cur += bytes;
    return p;
}
/* Slack that mp_cuda_ws_begin may lose aligning a 64-byte-aligned base. */
#define MP_CUDA_WS_SLACK 256

#ifdef __cplusplus
}
#endif
#endif
