/* conv_depthwise.cu — see conv_depthwise.h. A thread owns one 16-byte
 * vector of channels (cv) of a strip of TW outputs along the width: it loads
 * each input vector of the strip's 3 x ((TW - 1) * S + 3) window once and
 * applies it to every output of the strip that uses it. Consecutive threads
 * take consecutive channel vectors of the same pixel, so a warp's loads are
 * contiguous. The filter is read into shared memory as floats, one row of C
 * per tap. */
#include "cuda/conv_depthwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>

#include "cuda/choice_cache.h" /* mp_median_ms */
#include "cuda/vec16.cuh"

enum { DW_THREADS = 256, DW_K = 3, DW_TAPS = 9, DW_MAX_C = 1024, DW_SUM_GROUPS = 8 };

/* The two activations of a pass: `in` is read, `out` written. */
typedef struct {
    int n, c;
    int hi, wi, ho, wo;
    int pad; /* out (oh, ow) reads in (oh * S - pad + r, ow * S - pad + s) */
} dw_shape;

template <typename T> __device__ __forceinline__ void load_vec(const T *p, float (&v)[fast_vec<T>::N]) {
    fast_vec<T>::widen(ld16(p), v);
}

/* The filter (C, 3, 3) as floats in shared memory, tap-major: wsm[tap * C + c]; flipped: tap 8 - tap. */
template <typename T, bool FLIP> __device__ void filter_to_shared(const T *w, int c_count, float *wsm) {
    for (int i = threadIdx.x; i < DW_TAPS * c_count; i += blockDim.x) {
        const int tap = i / c_count, c = i - tap * c_count;
        wsm[i] = to_f32(w[c * DW_TAPS + (FLIP ? DW_TAPS - 1 - tap : tap)]);
    }
    __syncthreads();
}

/* The 3 x COLS window of 16-byte vectors at rows ih0.., columns iw0.. of
 * image `img` (its channel vector's first element), all loads issued before
 * any is used; outside the image: zeros (the load reads the image's first
 * vector instead, so no address leaves it). */
template <typename T, int COLS>
__device__ __forceinline__ void load_window(const T *img, int ih0, int iw0, int h, int w, int c,
                                            uint4 (&win)[DW_K][COLS]) {
#pragma unroll
    for (int r = 0; r < DW_K; r++)
#pragma unroll
        for (int j = 0; j < COLS; j++) {
            const int ih = ih0 + r, iw = iw0 + j;
            const bool in = (unsigned)ih < (unsigned)h && (unsigned)iw < (unsigned)w;
            const uint4 u = ld16(img + (in ? ih * w + iw : 0) * c);
            win[r][j] = in ? u : make_uint4(0, 0, 0, 0);
        }
}

/* out = in (*) w as a 3x3 cross-correlation with stride S (forward), or
 * with the filter flipped (FLIP; stride 1: backward-data, in = dy, out =
 * dx, pad = 2 - the forward's). add: out += the result. Indices fit in int
 * (mp_dw_applies). */
template <typename T, int S, int TW, bool FLIP>
__global__ void __launch_bounds__(DW_THREADS) dw_correlate(const T *in, const T *w, T *out, dw_shape sh, bool add) {
    using V = fast_vec<T>;
    constexpr int VN = V::N, COLS = (TW - 1) * S + DW_K;
    extern __shared__ float wsm[];
    filter_to_shared<T, FLIP>(w, sh.c, wsm);
    const int cvs = sh.c / VN, strips = (sh.wo + TW - 1) / TW;
    const int total = sh.n * sh.ho * strips * cvs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cv = i % cvs, q = i / cvs;
        const int strip = q % strips, oh = q / strips % sh.ho, n = q / strips / sh.ho;
        const int ow0 = strip * TW, c0 = cv * VN;
        uint4 win[DW_K][COLS];
        load_window<T, COLS>(in + n * sh.hi * sh.wi * sh.c + c0, oh * S - sh.pad, ow0 * S - sh.pad, sh.hi, sh.wi,
                             sh.c, win);
        float acc[TW][VN] = {};
#pragma unroll
        for (int r = 0; r < DW_K; r++) {
            float wr[DW_K][VN];
#pragma unroll
            for (int s = 0; s < DW_K; s++)
#pragma unroll
                for (int v = 0; v < VN; v += 4) {
                    const float4 f = *reinterpret_cast<const float4 *>(&wsm[(r * DW_K + s) * sh.c + c0 + v]);
                    wr[s][v] = f.x, wr[s][v + 1] = f.y, wr[s][v + 2] = f.z, wr[s][v + 3] = f.w;
                }
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                float xv[VN];
                V::widen(win[r][j], xv);
#pragma unroll
                for (int t = 0; t < TW; t++) {
                    const int s = j - t * S;
                    if (s < 0 || s >= DW_K) continue;
#pragma unroll
                    for (int v = 0; v < VN; v++) acc[t][v] = fmaf(xv[v], wr[s][v], acc[t][v]);
                }
            }
        }
        T *o = out + ((n * sh.ho + oh) * sh.wo + ow0) * sh.c + c0;
#pragma unroll
        for (int t = 0; t < TW; t++) {
            if (ow0 + t >= sh.wo) break;
            if (add) {
                float prev[VN];
                load_vec(o + t * sh.c, prev);
#pragma unroll
                for (int v = 0; v < VN; v++) acc[t][v] += prev[v];
            }
            st16(o + t * sh.c, V::narrow(acc[t]));
        }
    }
}

/* Backward-data of a strided convolution, one output vector per thread: dx
 * (out: the forward input's ho x wo here) at (y, x) gathers dy (in) at
 * ((y + pad - r) / S, (x + pad - s) / S) wherever both divide. */
template <typename T, int S>
__global__ void __launch_bounds__(DW_THREADS) dw_gather_strided(const T *dy, const T *w, T *dx, dw_shape sh,
                                                                 bool add) {
    using V = fast_vec<T>;
    constexpr int VN = V::N;
    extern __shared__ float wsm[];
    filter_to_shared<T, false>(w, sh.c, wsm);
    const int cvs = sh.c / VN;
    const int total = sh.n * sh.ho * sh.wo * cvs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cv = i % cvs, q = i / cvs;
        const int x = q % sh.wo, y = q / sh.wo % sh.ho, n = q / sh.wo / sh.ho;
        const int c0 = cv * VN;
        float acc[VN] = {};
#pragma unroll
        for (int r = 0; r < DW_K; r++) {
            const int ty = y + sh.pad - r;
            if (ty < 0 || ty % S || ty / S >= sh.hi) continue;
#pragma unroll
            for (int s = 0; s < DW_K; s++) {
                const int tx = x + sh.pad - s;
                if (tx < 0 || tx % S || tx / S >= sh.wi) continue;
                float d[VN];
                load_vec(dy + ((n * sh.hi + ty / S) * sh.wi + tx / S) * sh.c + c0, d);
#pragma unroll
                for (int v = 0; v < VN; v++) acc[v] = fmaf(d[v], wsm[(r * DW_K + s) * sh.c + c0 + v], acc[v]);
            }
        }
        T *o = dx + ((n * sh.ho + y) * sh.wo + x) * sh.c + c0;
        if (add) {
            float prev[VN];
            load_vec(o, prev);
#pragma unroll
            for (int v = 0; v < VN; v++) acc[v] += prev[v];
        }
        st16(o, V::narrow(acc));
    }
}

/* Backward-filter, first kernel: block b's sums of x * dy over its strips,
 * part[(b * 9 + tap) * C + c]. Threads are lanes x channel vectors (lane =
 * t / cvs; threads past lanes * cvs only help reduce); lane l of block b
 * takes strips b * lanes + l, then every gridDim.x * lanes further. Here sh
 * is the forward's: in = x, out = dy. */
template <typename T, int S, int TW>
__global__ void __launch_bounds__(DW_THREADS, 2) dw_filter_partial(const T *x, const T *dy, float *part, dw_shape sh) {
    using V = fast_vec<T>;
    constexpr int VN = V::N, COLS = (TW - 1) * S + DW_K;
    __shared__ float red[DW_THREADS * 8];
    const int cvs = sh.c / VN, lanes = DW_THREADS / cvs;
    const int lane = threadIdx.x / cvs, cv = threadIdx.x - lane * cvs, c0 = cv * VN;
    float acc[DW_TAPS][VN] = {};
    const int strips = (sh.wo + TW - 1) / TW, total = sh.n * sh.ho * strips;
    if (lane < lanes)
        for (int q = blockIdx.x * lanes + lane; q < total; q += gridDim.x * lanes) {
            const int strip = q % strips, oh = q / strips % sh.ho, n = q / strips / sh.ho;
            const int ow0 = strip * TW;
            uint4 win[DW_K][COLS], dv[TW];
            const T *drow = dy + ((n * sh.ho + oh) * sh.wo + ow0) * sh.c + c0;
#pragma unroll
            for (int t = 0; t < TW; t++) {
                const uint4 u = ld16(drow + (ow0 + t < sh.wo ? t : 0) * sh.c);
                dv[t] = ow0 + t < sh.wo ? u : make_uint4(0, 0, 0, 0);
            }
            load_window<T, COLS>(x + n * sh.hi * sh.wi * sh.c + c0, oh * S - sh.pad, ow0 * S - sh.pad, sh.hi, sh.wi,
                                 sh.c, win);
#pragma unroll
            for (int t = 0; t < TW; t++) {
                float d[VN];
                V::widen(dv[t], d);
#pragma unroll
                for (int r = 0; r < DW_K; r++)
#pragma unroll
                    for (int s = 0; s < DW_K; s++) {
                        float xv[VN];
                        V::widen(win[r][t * S + s], xv);
#pragma unroll
                        for (int v = 0; v < VN; v++) acc[r * DW_K + s][v] = fmaf(xv[v], d[v], acc[r * DW_K + s][v]);
                    }
            }
        }
    /* the block's lanes summed per tap in lane order: red[lane * C + c] */
#pragma unroll
    for (int tap = 0; tap < DW_TAPS; tap++) {
        if (lane < lanes)
#pragma unroll
            for (int v = 0; v < VN; v++) red[threadIdx.x * VN + v] = acc[tap][v];
        __syncthreads();
        for (int c = threadIdx.x; c < sh.c; c += blockDim.x) {
            float s = 0.f;
            for (int l = 0; l < lanes; l++) s += red[l * sh.c + c];
            part[(blockIdx.x * DW_TAPS + tap) * sh.c + c] = s;
        }
        __syncthreads();
    }
}

/* Backward-filter, second kernel: dw[c * 9 + tap] = the blocks' partial sums
 * in a fixed order (group g of DW_SUM_GROUPS sums blocks g, g + 8, ...; the
 * groups are added in order), rounded once. A block covers 32 (tap, c). */
template <typename T> __global__ void dw_filter_sum(const float *part, int blocks, int c_count, T *dw) {
    __shared__ float red[DW_SUM_GROUPS][32];
    const int k = blockIdx.x * 32 + threadIdx.x % 32, g = threadIdx.x / 32;
    const bool live = k < DW_TAPS * c_count;
    float s = 0.f;
    if (live)
        for (int b = g; b < blocks; b += DW_SUM_GROUPS) s += part[b * DW_TAPS * c_count + k];
    red[g][threadIdx.x % 32] = s;
    __syncthreads();
    if (g == 0 && live) {
        for (int i = 1; i < DW_SUM_GROUPS; i++) s += red[i][threadIdx.x];
        const int tap = k / c_count, c = k - tap * c_count;
        dw[c * DW_TAPS + tap] = from_f32<T>(s);
    }
}

/* ---- host side -------------------------------------------------------------- */

static int vec_width(mp_dtype cd) { return cd == MP_DTYPE_F32 ? 4 : 8; }

bool mp_dw_applies(const mp_conv_geom *g, mp_dtype cd) {
    const bool dtype_ok = cd == MP_DTYPE_F32 || cd == MP_DTYPE_F16 || cd == MP_DTYPE_BF16;
    return dtype_ok && g->groups == g->cx && g->cx == g->cy && g->cx <= DW_MAX_C && g->cx % vec_width(cd) == 0 &&
           g->k == DW_K && (g->stride == 1 || g->stride == 2) && g->dil == 1 && g->pad >= 0 && g->pad < DW_K &&
           (long long)g->n * g->cx * (g->hx * g->wx > g->hy * g->wy ? g->hx * g->wx : g->hy * g->wy) < INT_MAX / 2;
}

static dw_shape forward_shape(const mp_conv_geom *g) {
    return (dw_shape){g->n, g->cx, g->hx, g->wx, g->hy, g->wy, g->pad};
}

/* Blocks of the backward-filter's first kernel: two per SM (its 256 threads
 * hold 9 x 8 sums each), no more than there are lanes' strips. */
static int filter_blocks(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, int tw) {
    const int lanes = DW_THREADS / (g->cx / vec_width(cd));
    const long long strips = (long long)g->n * g->hy * ((g->wy + tw - 1) / tw);
    const long long need = (strips + lanes - 1) / lanes;
    const int most = 2 * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    return need < most ? (int)(need > 0 ? need : 1) : most;
}

enum { FILTER_TW = 1, FORWARD_TW = 2 };

size_t mp_dw_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass) {
    if (pass != MP_CONV_BWD_FILTER || !mp_dw_applies(g, cd)) return 0;
    return (size_t)filter_blocks(ctx, g, cd, FILTER_TW) * DW_TAPS * g->cx * sizeof(float);
}

/* Blocks for a grid-stride loop over `items` threads' work: at most 8 per SM
 * (each block reads the filter once). */
static unsigned stride_blocks(const mp_cuda_ctx *ctx, long long items) {
    const long long need = (items + DW_THREADS - 1) / DW_THREADS, most = 8LL * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    return (unsigned)(need < 1 ? 1 : need < most ? need : most);
}

/* The filter as floats in shared memory (filter_to_shared). */
static size_t filter_smem_bytes(const mp_conv_geom *g) { return (size_t)DW_TAPS * g->cx * sizeof(float); }

static mp_status refuse(const mp_conv_geom *g, mp_dtype cd, const char *what) {
    return mp_error(MP_ERR_INTERNAL,
                    "%s: the depthwise kernels do not take this convolution (groups %d, %d -> %d channels, kernel %d "
                    "stride %d dilation %d padding %d, %s)",
                    what, g->groups, g->cx, g->cy, g->k, g->stride, g->dil, g->pad, mp_dtype_name(cd));
}

static mp_status aligned(const void *a, const void *b, const char *what) {
    if (((uintptr_t)a | (uintptr_t)b) % 16)
        return mp_error(MP_ERR_INTERNAL, "%s: a depthwise kernel's tensors must be 16-byte aligned", what);
    return MP_OK;
}

mp_status mp_dw_forward(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const void *w, void *y,
                        const char *what) {
    if (!mp_dw_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(x, y, what));
    const dw_shape sh = forward_shape(g);
    const long long items = (long long)g->n * g->hy * ((g->wy + FORWARD_TW - 1) / FORWARD_TW) * (g->cx / vec_width(cd));
    const size_t smem = filter_smem_bytes(g);
    const unsigned blocks = stride_blocks(ctx, items);
    (void)with_type(cd, [&](auto t) { /* cd is f32, f16 or bf16 (mp_dw_applies) */
        using T = decltype(t);
        if (g->stride == 1)
            dw_correlate<T, 1, FORWARD_TW, false>
                <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)x, (const T *)w, (T *)y, sh, false);
        else
            dw_correlate<T, 2, FORWARD_TW, false>
                <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)x, (const T *)w, (T *)y, sh, false);
    });
    return mp_cuda_check(cudaGetLastError(), "dw_correlate", what);
}

mp_status mp_dw_backward_data(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *dy, const void *w,
                              void *dx, bool add, const char *what) {
    if (!mp_dw_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(dy, dx, what));
    const size_t smem = filter_smem_bytes(g);
    const int cvs = g->cx / vec_width(cd);
    if (g->stride == 1) { /* dx = dy (*) w flipped, padded by 2 - pad */
        const dw_shape sh = {g->n, g->cx, g->hy, g->wy, g->hx, g->wx, DW_K - 1 - g->pad};
        const long long items = (long long)g->n * g->hx * ((g->wx + FORWARD_TW - 1) / FORWARD_TW) * cvs;
        const unsigned blocks = stride_blocks(ctx, items);
        (void)with_type(cd, [&](auto t) {
            using T = decltype(t);
            dw_correlate<T, 1, FORWARD_TW, true>
                <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)dy, (const T *)w, (T *)dx, sh, add);
        });
        return mp_cuda_check(cudaGetLastError(), "dw_correlate (flipped)", what);
    }
    const dw_shape sh = {g->n, g->cx, g->hy, g->wy, g->hx, g->wx, g->pad};
    const unsigned blocks = stride_blocks(ctx, (long long)g->n * g->hx * g->wx * cvs);
    (void)with_type(cd, [&](auto t) {
        using T = decltype(t);
        dw_gather_strided<T, 2>
            <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)dy, (const T *)w, (T *)dx, sh, add);
    });
    return mp_cuda_check(cudaGetLastError(), "dw_gather_strided", what);
}

mp_status mp_dw_backward_filter(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const void *dy,
                                void *dw, void *ws, size_t ws_bytes, const char *what) {
    if (!mp_dw_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(x, dy, what));
    const int blocks = filter_blocks(ctx, g, cd, FILTER_TW);
    if (!ws || ws_bytes < mp_dw_workspace(ctx, g, cd, MP_CONV_BWD_FILTER))
        return mp_error(MP_ERR_INTERNAL, "%s: the depthwise backward-filter's workspace is short (%zu bytes)", what,
                        ws_bytes);
    const dw_shape sh = forward_shape(g);
    float *part = (float *)ws;
    const unsigned sum_blocks = (unsigned)((DW_TAPS * g->cx + 31) / 32);
    (void)with_type(cd, [&](auto t) {
        using T = decltype(t);
        const T *xt = (const T *)x, *dyt = (const T *)dy;
        if (g->stride == 1)
            dw_filter_partial<T, 1, FILTER_TW><<<blocks, DW_THREADS, 0, ctx->stream>>>(xt, dyt, part, sh);
        else
            dw_filter_partial<T, 2, FILTER_TW><<<blocks, DW_THREADS, 0, ctx->stream>>>(xt, dyt, part, sh);
        dw_filter_sum<T><<<sum_blocks, 32 * DW_SUM_GROUPS, 0, ctx->stream>>>(part, blocks, g->cx, (T *)dw);
    });
    return mp_cuda_check(cudaGetLastError(), "dw_filter_partial / dw_filter_sum", what);
}

static mp_status run_pass(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass, void *x, void *w,
                          void *y, void *ws, size_t ws_bytes, const char *what) {
    if (pass == MP_CONV_FWD) return mp_dw_forward(ctx, g, cd, x, w, y, what);
    if (pass == MP_CONV_BWD_DATA) return mp_dw_backward_data(ctx, g, cd, y, w, x, false, what);
    return mp_dw_backward_filter(ctx, g, cd, x, y, w, ws, ws_bytes, what);
}

mp_status mp_dw_time(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass, void *x, void *w,
                     void *y, void *ws, size_t ws_bytes, float *ms, const char *what) {
    enum { TRIALS = 3, RUNS = 4 };
    cudaEvent_t ev[2] = {NULL, NULL};
    MP_CUDA_TRY(cudaEventCreate(&ev[0]), what);
    mp_status s = mp_cuda_check(cudaEventCreate(&ev[1]), "cudaEventCreate", what);
    float t[TRIALS];
    if (s == MP_OK) s = run_pass(ctx, g, cd, pass, x, w, y, ws, ws_bytes, what); /* warm-up */
    for (int k = 0; k < TRIALS && s == MP_OK; k++) {
        s = mp_cuda_check(cudaEventRecord(ev[0], ctx->stream), "cudaEventRecord", what);
        for (int r = 0; r < RUNS && s == MP_OK; r++) s = run_pass(ctx, g, cd, pass, x, w, y, ws, ws_bytes, what);
        if (s == MP_OK) s = mp_cuda_check(cudaEventRecord(ev[1], ctx->stream), "cudaEventRecord", what);
        if (s == MP_OK) s = mp_cuda_check(cudaEventSynchronize(ev[1]), "cudaEventSynchronize", what);
        if (s == MP_OK) s = mp_cuda_check(cudaEventElapsedTime(&t[k], ev[0], ev[1]), "cudaEventElapsedTime", what);
        t[k] /= RUNS;
    }
    if (s == MP_OK) *ms = mp_median_ms(t, TRIALS);
    cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    return s;
}
