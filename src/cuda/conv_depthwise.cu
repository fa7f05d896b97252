/* conv_depthwise.cu — see conv_depthwise.h. A thread owns one 16-byte
 * vector of channels (cv) of a band of output rows: TW outputs along the
 * width (forward, backward-data) or one (backward-filter); at stride 1 in
 * f16/bf16 the forward and backward-data take 4 channels (a quad, 8 bytes)
 * per thread instead, with the filter taps in registers. The 3 input rows
 * its window needs roll down the band, so each input vector is loaded
 * about once per band row instead of three times. Consecutive threads take
 * consecutive channel vectors of the same pixel, so a warp's loads are
 * contiguous. The filter is read into shared memory as floats, one row of
 * C per tap. */
#include "cuda/conv_depthwise.h"
#include "cuda/conv_own.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>

#include <type_traits>

#include "cuda/batchnorm2d_fast.cuh" /* apply_group, load_coef */
#include "cuda/vec16.cuh"

enum { DW_THREADS = 256, DW_K = 3, DW_TAPS = 9, DW_MAX_C = 1024, DW_SUM_GROUPS = 8, DW_QUAD_TW = 4 };

/* The two activations of a pass: `in` is read, `out` written. */
typedef struct {
    int n, c;
    int hi, wi, ho, wo;
    int pad;  /* out (oh, ow) reads in (oh * S - pad + r, ow * S - pad + s) */
    int band; /* output rows per thread (the last band of an image may have fewer) */
} dw_shape;

template <typename T> __device__ __forceinline__ void load_vec(const T *p, float (&v)[fast_vec<T>::N]) {
    fast_vec<T>::widen(ld16(p), v);
}

/* The filter (C, 3, 3) as floats in shared memory, tap-major (flipped: tap
 * 8 - tap). A thread reads its channel vector's VN / 4 float4s per tap, so
 * each tap's row of C holds first every vector's float4 0, then every
 * vector's float4 1 (f16, bf16; f32 vectors are one float4): float4 q of
 * vector cv is at filter_offset(tap, C, cv, q) (filter_quad). With the vectors of 8
 * kept whole, neighbouring threads' float4s were 32 bytes apart and every
 * such read took twice the shared-memory wavefronts (bank conflicts), the
 * bulk of the forward's L1 traffic (bench/NOTES.md v0.31); split, they are
 * 16 bytes apart (except where a quarter-warp wraps from the last vector
 * to the first). */
template <int VN> __device__ __forceinline__ int filter_offset(int tap, int c_count, int cv, int q) {
    constexpr int Q = VN / 4; /* float4s per vector */
    return tap * c_count + q * (c_count / Q) + cv * 4;
}

template <typename T> __device__ __forceinline__ const float4 *filter_quad(const float *wsm, int tap, int c_count,
                                                                         int cv, int q) {
    return reinterpret_cast<const float4 *>(wsm + filter_offset<fast_vec<T>::N>(tap, c_count, cv, q));
}

/* VN: channels per thread (a quad kernel's 4: each tap's row is plain C). */
template <typename T, bool FLIP, int VN = fast_vec<T>::N>
__device__ void filter_to_shared(const T *w, int c_count, float *wsm) {
    for (int i = threadIdx.x; i < DW_TAPS * c_count; i += blockDim.x) {
        const int tap = i / c_count, c = i - tap * c_count;
        wsm[filter_offset<VN>(tap, c_count, c / VN, c % VN / 4) + c % 4] =
            to_f32(w[c * DW_TAPS + (FLIP ? DW_TAPS - 1 - tap : tap)]);
    }
    __syncthreads();
}

/* A thread's channel vector of mp_dw_bn_relu's coefficients (BN: a batch
 * norm + ReLU applied to the input as it is loaded), or nothing. */
template <typename T, bool BN> struct dw_bn {
    __device__ __forceinline__ void load(const mp_dw_bn_relu &, int) {}
    template <typename R> __device__ __forceinline__ R apply(R u) const { return u; }
};
template <typename T> struct dw_bn<T, true> {
    static constexpr int N = fast_vec<T>::N;
    float mu[N], sc[N], sh[N];
    __device__ __forceinline__ void load(const mp_dw_bn_relu &b, int c0) {
        load_coef<N>(b.mu, c0, mu);
        load_coef<N>(b.scale, c0, sc);
        load_coef<N>(b.shift, c0, sh);
    }
    /* the batch norm's own apply (batchnorm2d_fast.cuh): the same bits as the output it would store */
    __device__ __forceinline__ uint4 apply(uint4 u) const {
        return apply_group<T, true, false>(u, uint4{}, mu, sc, sh);
    }
};

/* The same coefficients read from shared memory at each use (k: mu, scale,
 * shift of C channels each, from the thread's first channel): for a kernel
 * whose registers are taken by its sums. */
template <typename T> struct dw_bn_shared {
    static constexpr int N = fast_vec<T>::N;
    const float *k;
    int c;
    __device__ __forceinline__ uint4 apply(uint4 u) const {
        float mu[N], sc[N], sh[N];
        load_coef<N>(k, 0, mu);
        load_coef<N>(k + c, 0, sc);
        load_coef<N>(k + 2 * c, 0, sh);
        return apply_group<T, true, false>(u, uint4{}, mu, sc, sh);
    }
};

/* bn_relu's coefficients into shared memory (mu, scale, shift: C each). */
__device__ __forceinline__ void bn_to_shared(const mp_dw_bn_relu &b, int c_count, float *sm) {
    for (int i = threadIdx.x; i < c_count; i += blockDim.x)
        sm[i] = b.mu[i], sm[c_count + i] = b.scale[i], sm[2 * c_count + i] = b.shift[i];
    __syncthreads();
}

/* Row ih of a window: COLS vectors (R: 16 bytes, or a quad's 8) from
 * column iw0 of image `img` (its channel vector's first element), all loads
 * issued before any is used; outside the image: zeros (the load reads the
 * image's first vector instead, so no address leaves it), inside: bn
 * applied. Read-only loads: the passes never read what they write. */
template <typename T, int COLS, typename B = dw_bn<T, false>, typename R = uint4>
__device__ __forceinline__ void load_row(const T *img, int ih, int iw0, int h, int w, int c, R (&row)[COLS],
                                         const B &bn = B{}) {
#pragma unroll
    for (int j = 0; j < COLS; j++) {
        const int iw = iw0 + j;
        const bool in = (unsigned)ih < (unsigned)h && (unsigned)iw < (unsigned)w;
        const R u = __ldg(reinterpret_cast<const R *>(img + (in ? ih * w + iw : 0) * c));
        row[j] = in ? bn.apply(u) : R{};
    }
}

/* Four channels of f16 or bf16 as one 8-byte load (a quad). */
template <typename T> struct quad_of {
    using R = uint2;
    using P = typename fast_pair<T>::P;
    static __device__ __forceinline__ void widen(R u, float (&v)[4]) {
        const float2 a = fast_pair<T>::widen(*reinterpret_cast<const P *>(&u.x));
        const float2 b = fast_pair<T>::widen(*reinterpret_cast<const P *>(&u.y));
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    }
    static __device__ __forceinline__ R narrow(const float (&v)[4]) {
        const P a = fast_pair<T>::narrow(v[0], v[1]), b = fast_pair<T>::narrow(v[2], v[3]);
        return make_uint2(*reinterpret_cast<const uint32_t *>(&a), *reinterpret_cast<const uint32_t *>(&b));
    }
};

/* out = in (*) w as a 3x3 cross-correlation with stride S (forward), or
 * with the filter flipped (FLIP; stride 1: backward-data, in = dy, out =
 * dx, pad = 2 - the forward's). add: out += the result. A thread owns a
 * band of sh.band output rows of a strip of TW outputs: the window's 3
 * input rows roll down the band (S new rows per output row, loaded one
 * output row ahead), so at stride 1 each input vector is loaded about
 * (band + 2) / band times per strip instead of 3. Indices fit in int
 * (mp_dw_applies). BN: in is a batch norm's input, bn_relu applied as it
 * is loaded (forward only). */
template <typename T, int S, int TW, bool FLIP, bool BN>
__global__ void __launch_bounds__(DW_THREADS, 2)
    dw_correlate(const T *__restrict__ in, const T *__restrict__ w, T *__restrict__ out, dw_shape sh, bool add,
                 mp_dw_bn_relu bn_relu) {
    using V = fast_vec<T>;
    constexpr int VN = V::N, COLS = (TW - 1) * S + DW_K, KEEP = DW_K - S;
    extern __shared__ float wsm[];
    filter_to_shared<T, FLIP>(w, sh.c, wsm);
    const int cvs = sh.c / VN, strips = (sh.wo + TW - 1) / TW, bands = (sh.ho + sh.band - 1) / sh.band;
    const int total = sh.n * bands * strips * cvs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cv = i % cvs, q = i / cvs;
        const int strip = q % strips, band = q / strips % bands, n = q / strips / bands;
        const int ow0 = strip * TW, oh0 = band * sh.band, c0 = cv * VN;
        const int rows = min(sh.band, sh.ho - oh0);
        const int iw0 = ow0 * S - sh.pad, ih0 = oh0 * S - sh.pad;
        const T *img = in + n * sh.hi * sh.wi * sh.c + c0;
        using B = dw_bn<T, BN>;
        B bn;
        bn.load(bn_relu, c0);
        uint4 win[DW_K][COLS], next[S][COLS];
#pragma unroll
        for (int r = 0; r < KEEP; r++) load_row<T, COLS, B>(img, ih0 + r, iw0, sh.hi, sh.wi, sh.c, win[r], bn);
#pragma unroll
        for (int r = 0; r < S; r++) load_row<T, COLS, B>(img, ih0 + KEEP + r, iw0, sh.hi, sh.wi, sh.c, next[r], bn);
        for (int t = 0; t < rows; t++) {
            /* output row oh0 + t reads input rows ih0 + t * S + 0..2 */
#pragma unroll
            for (int r = 0; r < S; r++)
#pragma unroll
                for (int j = 0; j < COLS; j++) win[KEEP + r][j] = next[r][j];
            if (t + 1 < rows)
#pragma unroll
                for (int r = 0; r < S; r++)
                    load_row<T, COLS, B>(img, ih0 + (t + 1) * S + KEEP + r, iw0, sh.hi, sh.wi, sh.c, next[r], bn);
            float acc[TW][VN] = {};
#pragma unroll
            for (int r = 0; r < DW_K; r++) {
                float wr[DW_K][VN];
#pragma unroll
                for (int s = 0; s < DW_K; s++)
#pragma unroll
                    for (int v = 0; v < VN; v += 4) {
                        const float4 f = *filter_quad<T>(wsm, r * DW_K + s, sh.c, cv, v / 4);
                        wr[s][v] = f.x, wr[s][v + 1] = f.y, wr[s][v + 2] = f.z, wr[s][v + 3] = f.w;
                    }
#pragma unroll
                for (int j = 0; j < COLS; j++) {
                    float xv[VN];
                    V::widen(win[r][j], xv);
#pragma unroll
                    for (int u = 0; u < TW; u++) {
                        const int s = j - u * S;
                        if (s < 0 || s >= DW_K) continue;
#pragma unroll
                        for (int v = 0; v < VN; v++) acc[u][v] = fmaf(xv[v], wr[s][v], acc[u][v]);
                    }
                }
            }
            T *o = out + ((n * sh.ho + oh0 + t) * sh.wo + ow0) * sh.c + c0;
#pragma unroll
            for (int u = 0; u < TW; u++) {
                if (ow0 + u >= sh.wo) break;
                if (add) {
                    float prev[VN];
                    load_vec(o + u * sh.c, prev);
#pragma unroll
                    for (int v = 0; v < VN; v++) acc[u][v] += prev[v];
                }
                st16(o + u * sh.c, V::narrow(acc[u]));
            }
#pragma unroll
            for (int r = 0; r < KEEP; r++)
#pragma unroll
                for (int j = 0; j < COLS; j++) win[r][j] = win[r + S][j];
        }
    }
}

/* dw_correlate at stride 1 without BN, f16 or bf16, with 4 channels per
 * thread (a quad, 8-byte loads) and a strip of DW_QUAD_TW outputs: the
 * thread's 9 x 4 filter taps stay in registers for its band (9 shared-memory
 * reads per band instead of 18 per output row: those reads kept
 * dw_correlate's L1 pipe 70 % busy, bench/NOTES.md v0.31), the window stays
 * raw, and the next output row's input row is loaded while this one is
 * summed (118 registers in bf16, 114 in f16). Same sums in the same order
 * per output as dw_correlate, so the same bits. */
template <typename T, bool FLIP>
__global__ void __launch_bounds__(DW_THREADS, 2)
    dw_correlate_quad(const T *__restrict__ in, const T *__restrict__ w, T *__restrict__ out, dw_shape sh, bool add) {
    constexpr int TW = DW_QUAD_TW;
    using Q = quad_of<T>;
    using R = typename Q::R;
    using B = dw_bn<T, false>;
    constexpr int COLS = TW + DW_K - 1;
    extern __shared__ float wsm[];
    filter_to_shared<T, FLIP, 4>(w, sh.c, wsm);
    const int cqs = sh.c / 4, strips = (sh.wo + TW - 1) / TW, bands = (sh.ho + sh.band - 1) / sh.band;
    const int total = sh.n * bands * strips * cqs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cq = i % cqs, q = i / cqs;
        const int strip = q % strips, band = q / strips % bands, n = q / strips / bands;
        const int ow0 = strip * TW, oh0 = band * sh.band, c0 = cq * 4;
        const int rows = min(sh.band, sh.ho - oh0);
        const int iw0 = ow0 - sh.pad, ih0 = oh0 - sh.pad;
        const T *img = in + n * sh.hi * sh.wi * sh.c + c0;
        R win[DW_K][COLS], next[COLS];
        load_row<T, COLS, B, R>(img, ih0, iw0, sh.hi, sh.wi, sh.c, win[0]);
        load_row<T, COLS, B, R>(img, ih0 + 1, iw0, sh.hi, sh.wi, sh.c, win[1]);
        load_row<T, COLS, B, R>(img, ih0 + 2, iw0, sh.hi, sh.wi, sh.c, next);
        float f[DW_TAPS][4];
#pragma unroll
        for (int tap = 0; tap < DW_TAPS; tap++) {
            const float4 k = *reinterpret_cast<const float4 *>(wsm + filter_offset<4>(tap, sh.c, cq, 0));
            f[tap][0] = k.x, f[tap][1] = k.y, f[tap][2] = k.z, f[tap][3] = k.w;
        }
        T *o = out + ((n * sh.ho + oh0) * sh.wo + ow0) * sh.c + c0;
        for (int t = 0; t < rows; t++, o += sh.wo * sh.c) {
#pragma unroll
            for (int j = 0; j < COLS; j++) win[2][j] = next[j];
            if (t + 1 < rows) load_row<T, COLS, B, R>(img, ih0 + t + 3, iw0, sh.hi, sh.wi, sh.c, next);
            float acc[TW][4] = {};
#pragma unroll
            for (int r = 0; r < DW_K; r++)
#pragma unroll
                for (int j = 0; j < COLS; j++) {
                    float xv[4];
                    Q::widen(win[r][j], xv);
#pragma unroll
                    for (int u = 0; u < TW; u++) {
                        const int s = j - u;
                        if (s < 0 || s >= DW_K) continue;
#pragma unroll
                        for (int v = 0; v < 4; v++) acc[u][v] = fmaf(xv[v], f[r * DW_K + s][v], acc[u][v]);
                    }
                }
#pragma unroll
            for (int u = 0; u < TW; u++) {
                if (ow0 + u >= sh.wo) break;
                R *at = reinterpret_cast<R *>(o + u * sh.c);
                if (add) {
                    float prev[4];
                    Q::widen(*at, prev);
#pragma unroll
                    for (int v = 0; v < 4; v++) acc[u][v] += prev[v];
                }
                *at = Q::narrow(acc[u]);
            }
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < COLS; j++) win[r][j] = win[r + 1][j];
        }
    }
}

/* Backward-data of a stride-2 convolution with padding P: dx (out, the
 * forward input's ho x wo here) at (y, x) gathers dy (in) at ((y + P - r)
 * / 2, (x + P - s) / 2) wherever both divide. A thread owns a 2 x 2 block
 * of dx, rows 2a + e and columns 2b + f (e, f = 0, 1), which reads dy rows
 * a - 1 .. a + 1 and columns b - 1 .. b + 1 (offset (e + P - r) / 2), each
 * tap in exactly one of the four outputs; a band of sh.band such row pairs
 * rolls the 3 x 3 dy window down by one row each (3 loads per 4 outputs). */
template <typename T, int P>
__global__ void __launch_bounds__(DW_THREADS, 2) dw_dgrad_stride2(const T *__restrict__ dy, const T *__restrict__ w,
                                                                  T *__restrict__ dx, dw_shape sh, bool add) {
    using V = fast_vec<T>;
    constexpr int VN = V::N;
    extern __shared__ float wsm[];
    filter_to_shared<T, false>(w, sh.c, wsm);
    const int cvs = sh.c / VN, pairs_w = (sh.wo + 1) / 2, pairs_h = (sh.ho + 1) / 2;
    const int bands = (pairs_h + sh.band - 1) / sh.band;
    const int total = sh.n * bands * pairs_w * cvs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cv = i % cvs, q = i / cvs;
        const int b = q % pairs_w, band = q / pairs_w % bands, n = q / pairs_w / bands;
        const int a0 = band * sh.band, c0 = cv * VN;
        const int rows = min(sh.band, pairs_h - a0);
        const T *img = dy + n * sh.hi * sh.wi * sh.c + c0;
        uint4 win[DW_K][DW_K], next[DW_K];
        load_row<T, DW_K>(img, a0 - 1, b - 1, sh.hi, sh.wi, sh.c, win[0]);
        load_row<T, DW_K>(img, a0, b - 1, sh.hi, sh.wi, sh.c, win[1]);
        load_row<T, DW_K>(img, a0 + 1, b - 1, sh.hi, sh.wi, sh.c, next);
        for (int t = 0; t < rows; t++) {
            const int a = a0 + t;
#pragma unroll
            for (int j = 0; j < DW_K; j++) win[2][j] = next[j];
            if (t + 1 < rows) load_row<T, DW_K>(img, a + 2, b - 1, sh.hi, sh.wi, sh.c, next);
            float acc[2][2][VN] = {};
#pragma unroll
            for (int r = 0; r < DW_K; r++) {
                const int e = (P - r) & 1, dr = (e + P - r) / 2; /* the output row pair member tap r feeds */
#pragma unroll
                for (int s = 0; s < DW_K; s++) {
                    const int f = (P - s) & 1, ds = (f + P - s) / 2;
                    float d[VN];
                    V::widen(win[1 + dr][1 + ds], d);
#pragma unroll
                    for (int v = 0; v < VN; v += 4) {
                        const float4 k = *filter_quad<T>(wsm, r * DW_K + s, sh.c, cv, v / 4);
                        acc[e][f][v] = fmaf(d[v], k.x, acc[e][f][v]);
                        acc[e][f][v + 1] = fmaf(d[v + 1], k.y, acc[e][f][v + 1]);
                        acc[e][f][v + 2] = fmaf(d[v + 2], k.z, acc[e][f][v + 2]);
                        acc[e][f][v + 3] = fmaf(d[v + 3], k.w, acc[e][f][v + 3]);
                    }
                }
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int y = 2 * a + e;
                if (y >= sh.ho) break;
#pragma unroll
                for (int f = 0; f < 2; f++) {
                    const int x = 2 * b + f;
                    if (x >= sh.wo) break;
                    T *o = dx + ((n * sh.ho + y) * sh.wo + x) * sh.c + c0;
                    if (add) {
                        float prev[VN];
                        load_vec(o, prev);
#pragma unroll
                        for (int v = 0; v < VN; v++) acc[e][f][v] += prev[v];
                    }
                    st16(o, V::narrow(acc[e][f]));
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < DW_K; j++) win[r][j] = win[r + 1][j];
        }
    }
}

/* Backward-filter, first kernel: block b's sums of x * dy over its items,
 * part[(b * 9 + tap) * C + c]. An item is a band of sh.band output rows of one
 * output column; the window's 3 x 3 input vectors roll down the band as in
 * dw_correlate. Threads are lanes x channel vectors (lane = t / cvs;
 * threads past lanes * cvs only help reduce); lane l of block b takes items
 * b * lanes + l, then every gridDim.x * lanes further. Here sh is the
 * forward's: in = x, out = dy. BN: x is a batch norm's input, bn_relu
 * applied as it is loaded (its coefficients in shared memory: the sums
 * take the registers). */
template <typename T, int S, bool BN>
__global__ void __launch_bounds__(DW_THREADS, 2)
    dw_filter_partial(const T *__restrict__ x, const T *__restrict__ dy, float *__restrict__ part, dw_shape sh,
                      mp_dw_bn_relu bn_relu) {
    using V = fast_vec<T>;
    using B = std::conditional_t<BN, dw_bn_shared<T>, dw_bn<T, false>>;
    constexpr int VN = V::N, KEEP = DW_K - S;
    __shared__ float red[DW_THREADS * 8];
    extern __shared__ float coef_sm[]; /* BN: 3 * C floats */
    const int cvs = sh.c / VN, lanes = DW_THREADS / cvs;
    const int lane = threadIdx.x / cvs, cv = threadIdx.x - lane * cvs, c0 = cv * VN;
    float acc[DW_TAPS][VN] = {};
    B bn{};
    if constexpr (BN) {
        bn_to_shared(bn_relu, sh.c, coef_sm);
        bn = B{coef_sm + c0, sh.c};
    }
    const int bands = (sh.ho + sh.band - 1) / sh.band, total = sh.n * bands * sh.wo;
    if (lane < lanes)
        for (int q = blockIdx.x * lanes + lane; q < total; q += gridDim.x * lanes) {
            const int ow = q % sh.wo, band = q / sh.wo % bands, n = q / sh.wo / bands;
            const int oh0 = band * sh.band, iw0 = ow * S - sh.pad, ih0 = oh0 * S - sh.pad;
            const int rows = min(sh.band, sh.ho - oh0);
            const T *img = x + n * sh.hi * sh.wi * sh.c + c0;
            const T *dcol = dy + (n * sh.ho * sh.wo + ow) * sh.c + c0;
            uint4 win[DW_K][DW_K];
#pragma unroll
            for (int r = 0; r < KEEP; r++) load_row<T, DW_K, B>(img, ih0 + r, iw0, sh.hi, sh.wi, sh.c, win[r], bn);
#pragma unroll 1
            for (int t = 0; t < rows; t++) {
#pragma unroll
                for (int r = KEEP; r < DW_K; r++)
                    load_row<T, DW_K, B>(img, ih0 + t * S + r, iw0, sh.hi, sh.wi, sh.c, win[r], bn);
                float d[VN];
                V::widen(__ldg(reinterpret_cast<const uint4 *>(dcol + (oh0 + t) * sh.wo * sh.c)), d);
#pragma unroll
                for (int r = 0; r < DW_K; r++)
#pragma unroll
                    for (int s = 0; s < DW_K; s++) {
                        float xv[VN];
                        V::widen(win[r][s], xv);
#pragma unroll
                        for (int v = 0; v < VN; v++) acc[r * DW_K + s][v] = fmaf(xv[v], d[v], acc[r * DW_K + s][v]);
                    }
#pragma unroll
                for (int r = 0; r < KEEP; r++)
#pragma unroll
                    for (int j = 0; j < DW_K; j++) win[r][j] = win[r + S][j];
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

/* Output rows per thread (dw_shape.band): 8, fewer for smaller images. */
static int band_rows(int ho) { return ho >= 8 ? 8 : ho > 0 ? ho : 1; }

/* The shape of a pass that reads `in` (hi x wi) and writes `out` (ho x wo). */
static dw_shape pass_shape(const mp_conv_geom *g, int hi, int wi, int ho, int wo, int pad) {
    return (dw_shape){g->n, g->cx, hi, wi, ho, wo, pad, band_rows(ho)};
}

static dw_shape forward_shape(const mp_conv_geom *g) { return pass_shape(g, g->hx, g->wx, g->hy, g->wy, g->pad); }

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Output rows per item of the backward-filter: bands of band_rows at stride
 * 1; one at stride 2, where a band's window keeps only one of its three rows
 * and bands measured slower than single rows (mobilenetv2's block3 0.084 ->
 * 0.109 ms, bench/NOTES.md v0.28). */
static int filter_band(const mp_conv_geom *g) { return g->stride == 2 ? 1 : band_rows(g->hy); }

/* Blocks of the backward-filter's first kernel: two per SM (its 256 threads
 * hold 9 x 8 sums each), no more than there are lanes' items (bands of one
 * output column). */
static int filter_blocks(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd) {
    const int lanes = DW_THREADS / (g->cx / vec_width(cd));
    const long long items = (long long)g->n * ceil_div(g->hy, filter_band(g)) * g->wy;
    const long long need = (items + lanes - 1) / lanes;
    const int most = 2 * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    return need < most ? (int)(need > 0 ? need : 1) : most;
}

/* Outputs along the width per thread in dw_correlate: 2 at stride 1, 1 at
 * stride 2 (whose window and next rows would take 100 registers at 2). */
static constexpr int correlate_tw(int stride) { return stride == 1 ? 2 : 1; }

size_t mp_dw_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass) {
    if (pass != MP_CONV_BWD_FILTER || !mp_dw_applies(g, cd)) return 0;
    return (size_t)filter_blocks(ctx, g, cd) * DW_TAPS * g->cx * sizeof(float);
}

/* Blocks for a grid-stride loop over `items` threads' work: at most 8 per SM
 * (each block reads the filter once). */
static unsigned stride_blocks(const mp_cuda_ctx *ctx, long long items) {
    const long long need = (items + DW_THREADS - 1) / DW_THREADS, most = 8LL * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    return (unsigned)(need < 1 ? 1 : need < most ? need : most);
}

/* Whether a pass runs dw_correlate_quad: stride 1, f16 or bf16, no batch
 * norm fused in, unless MIXPREC_DW_QUAD=0. Measured 1-8 % faster than
 * dw_correlate on every stride-1 shape of mobilenetv2 in both passes
 * (bench/NOTES.md v0.32), where 2 outputs per thread and a 4-channel
 * backward-filter were slower. */
static bool use_quad(const mp_conv_geom *g, mp_dtype cd, bool bn) {
    return g->stride == 1 && cd != MP_DTYPE_F32 && !bn && !mp_env_get()->no_dw_quad;
}

/* Threads of a dw_correlate pass (quad: of dw_correlate_quad): bands x
 * strips x channel vectors (quads). */
static long long correlate_items(const dw_shape *sh, int stride, mp_dtype cd, bool quad) {
    const int tw = quad ? DW_QUAD_TW : correlate_tw(stride), per_thread = quad ? 4 : vec_width(cd);
    return (long long)sh->n * ceil_div(sh->ho, band_rows(sh->ho)) * ceil_div(sh->wo, tw) * (sh->c / per_thread);
}

/* The filter as floats in shared memory (filter_to_shared). */
static size_t filter_smem_bytes(const mp_conv_geom *g) { return (size_t)DW_TAPS * g->cx * sizeof(float); }

static mp_status refuse(const mp_conv_geom *g, mp_dtype cd, const char *what) {
    return mp_own_refuse(g, cd, "depthwise", what);
}

static mp_status aligned(const void *a, const void *b, const char *what) {
    return mp_own_aligned(a, b, "depthwise", what);
}

/* f(std::integral_constant<bool, bn != NULL>{}): a kernel template's BN argument from the call's. */
template <typename F> static void with_bn(const mp_dw_bn_relu *bn, F f) {
    if (bn) f(std::integral_constant<bool, true>{});
    else f(std::integral_constant<bool, false>{});
}

static mp_status bn_given(const mp_dw_bn_relu *bn, const char *what) {
    if (bn && (!bn->mu || !bn->scale || !bn->shift))
        return mp_error(MP_ERR_INTERNAL, "%s: the fused batch norm's coefficients are missing", what);
    return MP_OK;
}

mp_status mp_dw_forward(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const mp_dw_bn_relu *bn,
                        const void *w, void *y, const char *what) {
    if (!mp_dw_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(x, y, what));
    MP_TRY(bn_given(bn, what));
    const dw_shape sh = forward_shape(g);
    const size_t smem = filter_smem_bytes(g);
    const bool quad = use_quad(g, cd, bn != NULL);
    const unsigned blocks = stride_blocks(ctx, correlate_items(&sh, g->stride, cd, quad));
    const mp_dw_bn_relu coef = bn ? *bn : mp_dw_bn_relu{NULL, NULL, NULL};
    (void)with_type(cd, [&](auto t) { /* cd is f32, f16 or bf16 (mp_dw_applies) */
        using T = decltype(t);
        with_bn(bn, [&](auto on) {
            constexpr bool BN = decltype(on)::value;
            if constexpr (!std::is_same_v<T, float> && !BN)
                if (quad) {
                    dw_correlate_quad<T, false>
                        <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)x, (const T *)w, (T *)y, sh, false);
                    return;
                }
            if (g->stride == 1)
                dw_correlate<T, 1, correlate_tw(1), false, BN>
                    <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)x, (const T *)w, (T *)y, sh, false, coef);
            else
                dw_correlate<T, 2, correlate_tw(2), false, BN>
                    <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)x, (const T *)w, (T *)y, sh, false, coef);
        });
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
        const dw_shape sh = pass_shape(g, g->hy, g->wy, g->hx, g->wx, DW_K - 1 - g->pad);
        const bool quad = use_quad(g, cd, false);
        const unsigned blocks = stride_blocks(ctx, correlate_items(&sh, 1, cd, quad));
        (void)with_type(cd, [&](auto t) {
            using T = decltype(t);
            if constexpr (!std::is_same_v<T, float>)
                if (quad) {
                    dw_correlate_quad<T, true>
                        <<<blocks, DW_THREADS, smem, ctx->stream>>>((const T *)dy, (const T *)w, (T *)dx, sh, add);
                    return;
                }
            dw_correlate<T, 1, correlate_tw(1), true, false><<<blocks, DW_THREADS, smem, ctx->stream>>>(
                (const T *)dy, (const T *)w, (T *)dx, sh, add, mp_dw_bn_relu{NULL, NULL, NULL});
        });
        return mp_cuda_check(cudaGetLastError(), "dw_correlate (flipped)", what);
    }
    /* stride 2: bands of row pairs of dx, 2 x 2 outputs per thread */
    dw_shape sh = pass_shape(g, g->hy, g->wy, g->hx, g->wx, g->pad);
    sh.band = band_rows((g->hx + 1) / 2);
    const long long items =
        (long long)g->n * ceil_div((g->hx + 1) / 2, sh.band) * ((g->wx + 1) / 2) * cvs;
    const unsigned blocks = stride_blocks(ctx, items);
    (void)with_type(cd, [&](auto t) {
        using T = decltype(t);
        const T *dyt = (const T *)dy, *wt = (const T *)w;
        T *dxt = (T *)dx;
        if (g->pad == 0)
            dw_dgrad_stride2<T, 0><<<blocks, DW_THREADS, smem, ctx->stream>>>(dyt, wt, dxt, sh, add);
        else if (g->pad == 1)
            dw_dgrad_stride2<T, 1><<<blocks, DW_THREADS, smem, ctx->stream>>>(dyt, wt, dxt, sh, add);
        else
            dw_dgrad_stride2<T, 2><<<blocks, DW_THREADS, smem, ctx->stream>>>(dyt, wt, dxt, sh, add);
    });
    return mp_cuda_check(cudaGetLastError(), "dw_dgrad_stride2", what);
}

mp_status mp_dw_backward_filter(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x,
                                const mp_dw_bn_relu *bn, const void *dy, void *dw, void *ws, size_t ws_bytes,
                                const char *what) {
    if (!mp_dw_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(x, dy, what));
    MP_TRY(bn_given(bn, what));
    const int blocks = filter_blocks(ctx, g, cd);
    if (!ws || ws_bytes < mp_dw_workspace(ctx, g, cd, MP_CONV_BWD_FILTER))
        return mp_error(MP_ERR_INTERNAL, "%s: the depthwise backward-filter's workspace is short (%zu bytes)", what,
                        ws_bytes);
    dw_shape sh = forward_shape(g);
    sh.band = filter_band(g);
    float *part = (float *)ws;
    const unsigned sum_blocks = (unsigned)((DW_TAPS * g->cx + 31) / 32);
    const mp_dw_bn_relu coef = bn ? *bn : mp_dw_bn_relu{NULL, NULL, NULL};
    (void)with_type(cd, [&](auto t) {
        using T = decltype(t);
        const T *xt = (const T *)x, *dyt = (const T *)dy;
        with_bn(bn, [&](auto on) {
            constexpr bool BN = decltype(on)::value;
            const size_t smem = BN ? 3 * (size_t)g->cx * sizeof(float) : 0;
            if (g->stride == 1)
                dw_filter_partial<T, 1, BN><<<blocks, DW_THREADS, smem, ctx->stream>>>(xt, dyt, part, sh, coef);
            else
                dw_filter_partial<T, 2, BN><<<blocks, DW_THREADS, smem, ctx->stream>>>(xt, dyt, part, sh, coef);
        });
        dw_filter_sum<T><<<sum_blocks, 32 * DW_SUM_GROUPS, 0, ctx->stream>>>(part, blocks, g->cx, (T *)dw);
    });
    return mp_cuda_check(cudaGetLastError(), "dw_filter_partial / dw_filter_sum", what);
}
