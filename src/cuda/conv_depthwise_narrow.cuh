/* conv_depthwise_narrow.cuh — the depthwise 3x3 kernels with four channels
 * per thread: the correlation (forward, and backward-data at stride 1) and
 * the backward-filter's partial sums. Included by conv_depthwise.cu only,
 * after its dw_shape, DW_* constants, filter_to_shared and bn_to_shared.
 *
 * Why a second form: the 8-channel kernel (dw_correlate) has no registers
 * left for its filter, so it reads 9 taps x 8 floats from shared memory for
 * every output row (18 16-byte loads per 2 outputs, the shared-memory pipe
 * as busy as the FMAs), and widens each input vector again for each of the
 * 3 output rows that use it. With 4 channels a thread keeps its 36 filter
 * taps in registers for its whole band and its window widened to floats
 * once: per output row only the new input row is loaded and widened. The
 * band loop is unrolled (DW_NARROW_BAND rows at most) so that the window's
 * rows rotate by renaming, not by moves. Same sums in the same order per
 * output as dw_correlate (f32, taps row by row, column by column), so the
 * two agree bit for bit. The backward-filter gains the same way (9 x 4
 * sums instead of 9 x 8, so its window fits as floats too); its lanes
 * split the items differently from dw_filter_partial's, so its sums are
 * grouped differently (deterministic all the same). */
#ifndef MP_CUDA_CONV_DEPTHWISE_NARROW_CUH
#define MP_CUDA_CONV_DEPTHWISE_NARROW_CUH

#include "cuda/vec16.cuh"

enum { DW_NARROW_BAND = 8 };

/* Four values of T as one load: 16 bytes of f32, 8 of f16 or bf16. */
template <typename T> struct quad4;
template <> struct quad4<float> {
    using R = uint4;
    static __device__ __forceinline__ void widen(R u, float (&v)[4]) { fast_vec<float>::widen(u, v); }
    static __device__ __forceinline__ R narrow(const float (&v)[4]) { return fast_vec<float>::narrow(v); }
};
template <typename T> struct quad4_16 {
    using R = uint2;
    using pair = fast_pair<T>;
    using P = typename pair::P;
    static __device__ __forceinline__ void widen(R u, float (&v)[4]) {
        const float2 a = pair::widen(*reinterpret_cast<const P *>(&u.x));
        const float2 b = pair::widen(*reinterpret_cast<const P *>(&u.y));
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    }
    static __device__ __forceinline__ R narrow(const float (&v)[4]) {
        const P a = pair::narrow(v[0], v[1]), b = pair::narrow(v[2], v[3]);
        return make_uint2(*reinterpret_cast<const uint32_t *>(&a), *reinterpret_cast<const uint32_t *>(&b));
    }
};
template <> struct quad4<__half> : quad4_16<__half> {};
template <> struct quad4<__nv_bfloat16> : quad4_16<__nv_bfloat16> {};

/* mp_dw_bn_relu applied to 4 widened values of x (BN), or nothing: the
 * batch norm's own arithmetic and rounding to T (apply_group), from its
 * coefficients in shared memory (k: mu, scale, shift of C channels each,
 * from the thread's first channel). */
template <typename T, bool BN> struct bn_relu4 {
    const float *k;
    int c;
    __device__ __forceinline__ void apply(float (&)[4]) const {}
};
template <typename T> struct bn_relu4<T, true> {
    const float *k;
    int c;
    __device__ __forceinline__ void apply(float (&x)[4]) const {
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const float b = mp_bn_affine(x[v], k[v], k[c + v], k[2 * c + v]);
            x[v] = fast_vec<T>::round(b < 0.f ? 0.f : b); /* NaN passes */
        }
    }
};

/* Row ih of a window, raw: COLS loads of 4 channels from column iw0 of
 * image `img` (its first channel of the four); zeros outside the image (the
 * load then reads the image's first pixel, so no address leaves it). */
template <typename T, int COLS>
__device__ __forceinline__ void load_row4(const T *img, int ih, int iw0, int h, int w, int c,
                                          typename quad4<T>::R (&row)[COLS]) {
    using R = typename quad4<T>::R;
#pragma unroll
    for (int j = 0; j < COLS; j++) {
        const int iw = iw0 + j;
        const bool in = (unsigned)ih < (unsigned)h && (unsigned)iw < (unsigned)w;
        const R u = __ldg(reinterpret_cast<const R *>(img + (in ? ih * w + iw : 0) * c));
        row[j] = in ? u : R{};
    }
}

/* raw widened into row, bn applied inside the image (padding stays zero) */
template <typename T, int COLS, typename B>
__device__ __forceinline__ void widen_row4(const typename quad4<T>::R (&raw)[COLS], float (&row)[COLS][4], int ih,
                                           int iw0, int h, int w, const B &bn) {
#pragma unroll
    for (int j = 0; j < COLS; j++) {
        quad4<T>::widen(raw[j], row[j]);
        if ((unsigned)ih < (unsigned)h && (unsigned)(iw0 + j) < (unsigned)w) bn.apply(row[j]);
    }
}

/* Input row ih of a window, loaded and widened (bn applied). */
template <typename T, int COLS, typename B>
__device__ __forceinline__ void read_row4(const T *img, int ih, int iw0, int h, int w, int c, float (&row)[COLS][4],
                                          const B &bn) {
    typename quad4<T>::R raw[COLS];
    load_row4<T, COLS>(img, ih, iw0, h, w, c, raw);
    widen_row4<T, COLS>(raw, row, ih, iw0, h, w, bn);
}

/* out = in (*) w, as dw_correlate (BN: bn_relu applied to in as it is
 * loaded, its coefficients in shared memory after the filter): a thread
 * owns 4 channels of a band of sh.band <= DW_NARROW_BAND output rows of a
 * strip of TW outputs. Input row k of the band (k = 0 at ih0) lives in
 * window slot k % 3 as floats; the S rows the next output row adds are
 * loaded one output row ahead. */
template <typename T, int S, int TW, bool FLIP, bool BN>
__global__ void __launch_bounds__(DW_THREADS, 2)
    dw_correlate_narrow(const T *__restrict__ in, const T *__restrict__ w, T *__restrict__ out, dw_shape sh, bool add,
                        mp_dw_bn_relu bn_relu) {
    using Q = quad4<T>;
    constexpr int COLS = (TW - 1) * S + DW_K, KEEP = DW_K - S;
    extern __shared__ float wsm[];
    if constexpr (BN) bn_to_shared(bn_relu, sh.c, wsm + DW_TAPS * sh.c);
    filter_to_shared<T, FLIP>(w, sh.c, wsm);
    const int cqs = sh.c / 4, strips = (sh.wo + TW - 1) / TW, bands = (sh.ho + sh.band - 1) / sh.band;
    const int total = sh.n * bands * strips * cqs;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cq = i % cqs, q = i / cqs;
        const int strip = q % strips, band = q / strips % bands, n = q / strips / bands;
        const int ow0 = strip * TW, oh0 = band * sh.band, c0 = cq * 4;
        const int rows = min(sh.band, sh.ho - oh0);
        const int iw0 = ow0 * S - sh.pad, ih0 = oh0 * S - sh.pad;
        const T *img = in + n * sh.hi * sh.wi * sh.c + c0;
        const bn_relu4<T, BN> bn{wsm + DW_TAPS * sh.c + c0, sh.c};
        float k[DW_TAPS][4];
#pragma unroll
        for (int tap = 0; tap < DW_TAPS; tap++) {
            const float4 f = *reinterpret_cast<const float4 *>(&wsm[tap * sh.c + c0]);
            k[tap][0] = f.x, k[tap][1] = f.y, k[tap][2] = f.z, k[tap][3] = f.w;
        }
        float win[DW_K][COLS][4];
#pragma unroll
        for (int r = 0; r < DW_K; r++) read_row4<T, COLS>(img, ih0 + r, iw0, sh.hi, sh.wi, sh.c, win[r], bn);
        T *o = out + ((n * sh.ho + oh0) * sh.wo + ow0) * sh.c + c0;
#pragma unroll
        for (int t = 0; t < DW_NARROW_BAND; t++) {
            if (t >= rows) break;
            const bool more = t + 1 < rows;
            float acc[TW][4] = {};
#pragma unroll
            for (int r = 0; r < DW_K; r++) {
                const int slot = (t * S + r) % DW_K;
#pragma unroll
                for (int j = 0; j < COLS; j++)
#pragma unroll
                    for (int u = 0; u < TW; u++) {
                        const int s = j - u * S;
                        if (s < 0 || s >= DW_K) continue;
#pragma unroll
                        for (int v = 0; v < 4; v++) acc[u][v] = fmaf(win[slot][j][v], k[r * DW_K + s][v], acc[u][v]);
                    }
            }
#pragma unroll
            for (int u = 0; u < TW; u++) {
                if (ow0 + u >= sh.wo) break;
                typename Q::R *p = reinterpret_cast<typename Q::R *>(o + (t * sh.wo + u) * sh.c);
                if (add) {
                    float prev[4];
                    Q::widen(*p, prev);
#pragma unroll
                    for (int v = 0; v < 4; v++) acc[u][v] += prev[v];
                }
                *p = Q::narrow(acc[u]);
            }
            if (more)
#pragma unroll
                for (int r = 0; r < S; r++) {
                    const int k_in = (t + 1) * S + KEEP + r; /* the band's input row */
                    read_row4<T, COLS>(img, ih0 + k_in, iw0, sh.hi, sh.wi, sh.c, win[k_in % DW_K], bn);
                }
        }
    }
}

/* Backward-filter, first kernel, as dw_filter_partial with 4 channels per
 * thread: block b's sums of x * dy over its items (bands of sh.band <=
 * DW_NARROW_BAND output rows of one output column), part[(b * 9 + tap) * C
 * + c]; lanes x 4-channel groups per block. BN as dw_correlate_narrow's
 * (coefficients in shared memory). */
template <typename T, int S, bool BN>
__global__ void __launch_bounds__(DW_THREADS, 2)
    dw_filter_partial_narrow(const T *__restrict__ x, const T *__restrict__ dy, float *__restrict__ part,
                             dw_shape sh, mp_dw_bn_relu bn_relu) {
    using Q = quad4<T>;
    constexpr int KEEP = DW_K - S;
    __shared__ float red[DW_THREADS * 4];
    extern __shared__ float coef_sm[]; /* BN: 3 * C floats */
    const int cqs = sh.c / 4, lanes = DW_THREADS / cqs;
    const int lane = threadIdx.x / cqs, cq = threadIdx.x - lane * cqs, c0 = cq * 4;
    if constexpr (BN) bn_to_shared(bn_relu, sh.c, coef_sm);
    const bn_relu4<T, BN> bn{coef_sm + c0, sh.c};
    float acc[DW_TAPS][4] = {};
    const int bands = (sh.ho + sh.band - 1) / sh.band, total = sh.n * bands * sh.wo;
    if (lane < lanes)
        for (int q = blockIdx.x * lanes + lane; q < total; q += gridDim.x * lanes) {
            const int ow = q % sh.wo, band = q / sh.wo % bands, n = q / sh.wo / bands;
            const int oh0 = band * sh.band, iw0 = ow * S - sh.pad, ih0 = oh0 * S - sh.pad;
            const int rows = min(sh.band, sh.ho - oh0);
            const T *img = x + n * sh.hi * sh.wi * sh.c + c0;
            const T *dcol = dy + (n * sh.ho * sh.wo + ow) * sh.c + c0;
            float win[DW_K][DW_K][4];
#pragma unroll
            for (int r = 0; r < DW_K; r++) read_row4<T, DW_K>(img, ih0 + r, iw0, sh.hi, sh.wi, sh.c, win[r], bn);
#pragma unroll
            for (int t = 0; t < DW_NARROW_BAND; t++) {
                if (t >= rows) break;
                float d[4];
                Q::widen(__ldg(reinterpret_cast<const typename Q::R *>(dcol + (oh0 + t) * sh.wo * sh.c)), d);
#pragma unroll
                for (int r = 0; r < DW_K; r++)
#pragma unroll
                    for (int s = 0; s < DW_K; s++)
#pragma unroll
                        for (int v = 0; v < 4; v++)
                            acc[r * DW_K + s][v] = fmaf(win[(t * S + r) % DW_K][s][v], d[v], acc[r * DW_K + s][v]);
                if (t + 1 < rows)
#pragma unroll
                    for (int r = 0; r < S; r++) {
                        const int k_in = (t + 1) * S + KEEP + r;
                        read_row4<T, DW_K>(img, ih0 + k_in, iw0, sh.hi, sh.wi, sh.c, win[k_in % DW_K], bn);
                    }
            }
        }
    /* the block's lanes summed per tap in lane order: red[lane * C + c] */
#pragma unroll
    for (int tap = 0; tap < DW_TAPS; tap++) {
        if (lane < lanes)
#pragma unroll
            for (int v = 0; v < 4; v++) red[threadIdx.x * 4 + v] = acc[tap][v];
        __syncthreads();
        for (int c = threadIdx.x; c < sh.c; c += blockDim.x) {
            float s = 0.f;
            for (int l = 0; l < lanes; l++) s += red[l * sh.c + c];
            part[(blockIdx.x * DW_TAPS + tap) * sh.c + c] = s;
        }
        __syncthreads();
    }
}

#endif
