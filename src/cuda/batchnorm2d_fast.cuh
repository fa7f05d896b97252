/* batchnorm2d_fast.cuh — the device code of batchnorm2d_fast.h's passes,
 * one block's share of each (its chunk of rows), so that the kernels of
 * batchnorm2d_fast.cu (one pass each) and of batchnorm2d_persist.cu (a
 * whole forward or backward in one cooperative kernel) run the same code.
 * A block has FAST_THREADS threads; block b of a grid of G works on chunk b of
 * the G chunks of R rows (a fused pool's dx pass: of the pool's windows,
 * fast_dx_windows). CUDA only. */
#ifndef MP_CUDA_BATCHNORM2D_FAST_CUH
#define MP_CUDA_BATCHNORM2D_FAST_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/batchnorm2d_fast.h"
#include "cuda/batchnorm2d_math.cuh"
#include "cuda/fast_div.cuh"
#include "cuda/vec16.cuh"
#include "mixprec.h"

enum { FAST_THREADS = 256, FAST_UNROLL = 4 };

/* ---- where a thread works ----------------------------------------------- */

/* A block's FAST_THREADS cover rpp whole rows of cg 16-byte groups per pass;
 * thread t has group g of row slot rr (threads past rpp * cg idle). A
 * second pass (backwards) takes the chunks from the last: the blocks of the
 * first pass's last wave read those last. */
struct fast_lane {
    int cg, rpp, rr, g;
    long long r0, r1; /* the block's chunk of rows */
};

template <typename T>
__device__ __forceinline__ fast_lane lane_of(long long M, int C, long long R, bool backwards) {
    fast_lane l;
    l.cg = C / fast_vec<T>::N;
    l.rpp = FAST_THREADS / l.cg;
    l.rr = (int)threadIdx.x / l.cg;
    l.g = (int)threadIdx.x - l.rr * l.cg;
    l.r0 = (long long)(backwards ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * R;
    l.r1 = l.r0 + R < M ? l.r0 + R : M;
    return l;
}

/* ---- walking a thread's rows --------------------------------------------- */

/* Rows r, r + d, r + 2d, ... while they lie in [r0, r1) (d = +rpp or -rpp),
 * U at a time: load(row) gives a row's loads, use(loads, row) consumes them,
 * each row once and in this order (so the arithmetic, and its bits, do not
 * depend on PIPE); the rows left over (fewer than U) one at a time. PIPE: the
 * next U rows' loads are issued before the current U are used, so a thread
 * keeps loads in flight while it computes and stores; without it every U
 * rows' loads wait for the previous U to be used (the same rows in the same
 * order as the passes' loops before v0.37, loads not issued ahead;
 * MIXPREC_BN_PIPELINE=0 runs it, for comparisons). */
template <int U, bool PIPE, typename Load, typename Use>
__device__ __forceinline__ void walk_rows(long long r, long long d, long long r0, long long r1, Load load, Use use) {
    typedef decltype(load(r)) V;
    auto inside = [&](long long q) { return q >= r0 && q < r1; };
    if (PIPE && inside(r + (U - 1) * d)) {
        V cur[U];
#pragma unroll
        for (int j = 0; j < U; j++) cur[j] = load(r + j * d);
        for (;;) {
            const long long rn = r + U * d;
            const bool more = inside(rn + (U - 1) * d);
            V next[U] = {};
            if (more) {
#pragma unroll
                for (int j = 0; j < U; j++) next[j] = load(rn + j * d);
            }
#pragma unroll
            for (int j = 0; j < U; j++) use(cur[j], r + j * d);
            r = rn;
            if (!more) break;
#pragma unroll
            for (int j = 0; j < U; j++) cur[j] = next[j];
        }
    }
    for (; !PIPE && inside(r + (U - 1) * d); r += U * d) {
        V cur[U];
#pragma unroll
        for (int j = 0; j < U; j++) cur[j] = load(r + j * d);
#pragma unroll
        for (int j = 0; j < U; j++) use(cur[j], r + j * d);
    }
    for (; inside(r); r += d) use(load(r), r);
}

/* A row's 16-byte groups: x and the residual (the apply), x, dy and the
 * output y (the backward's passes; resid and y are {} where not read). */
struct row_x_resid {
    uint4 x, resid;
};
struct row_x_dy_y {
    uint4 x, dy, y;
};

/* ---- per-channel values -------------------------------------------------- */

/* The per-channel values of a thread's group, p[c0 .. c0 + N - 1]. Plain
 * loads (the block's threads share them through L1; a one-kernel pass
 * reads what other blocks wrote before its grid barrier, which makes them
 * visible; __ldcg here sent every thread to L2 and doubled small layers'
 * times). */
template <int N>
__device__ __forceinline__ void load_coef(const float *p, int c0, float (&v)[N]) {
#pragma unroll
    for (int k = 0; k < N; k++) v[k] = p[c0 + k];
}

/* ---- forward ------------------------------------------------------------ */

template <typename T>
__device__ __forceinline__ void welford_row(const float (&v)[fast_vec<T>::N], float &n, float (&mean)[fast_vec<T>::N],
                                            float (&m2)[fast_vec<T>::N]) {
    n += 1.f;
    const float inv = __frcp_rn(n); /* 1 / n, as rounded as the division */
#pragma unroll
    for (int k = 0; k < fast_vec<T>::N; k++) {
        const float d = v[k] - mean[k];
        mean[k] += d * inv;
        m2[k] += d * (v[k] - mean[k]);
    }
}

template <typename T, bool PIPE>
__device__ __forceinline__ void fast_stats_block(const T *x, long long M, int C, long long R, float *pmean,
                                                 float *pm2) {
    constexpr int N = fast_vec<T>::N;
    __shared__ float s_n[FAST_THREADS], s_mean[FAST_THREADS * N], s_m2[FAST_THREADS * N];
    const fast_lane l = lane_of<T>(M, C, R, false);
    const bool active = l.rr < l.rpp;
    const int t = threadIdx.x;
    float n = 0.f, mean[N], m2[N];
#pragma unroll
    for (int k = 0; k < N; k++) mean[k] = m2[k] = 0.f;
    if (active) {
        const T *p = x + l.g * N;
        walk_rows<FAST_UNROLL, PIPE>(
            l.r0 + l.rr, l.rpp, l.r0, l.r1, [&](long long r) { return ld16(p + r * C); },
            [&](uint4 u, long long) {
                float v[N];
                fast_vec<T>::widen(u, v);
                welford_row<T>(v, n, mean, m2);
            });
    }
    s_n[t] = n;
#pragma unroll
    for (int k = 0; k < N; k++) s_mean[t * N + k] = mean[k], s_m2[t * N + k] = m2[k];
    __syncthreads();
    for (int s = 1; s < l.rpp; s <<= 1) { /* slot rr takes slot rr + s: a fixed tree */
        if (active && (l.rr & (2 * s - 1)) == 0 && l.rr + s < l.rpp) {
            const int o = t + s * l.cg;
            const float na = s_n[t];
#pragma unroll
            for (int k = 0; k < N; k++) {
                float nk = na;
                mp_bn_chan_merge(nk, s_mean[t * N + k], s_m2[t * N + k], s_n[o], s_mean[o * N + k], s_m2[o * N + k]);
            }
            s_n[t] = na + s_n[o];
        }
        __syncthreads();
    }
    if (active && l.rr == 0) {
        const long long at = (long long)blockIdx.x * C + l.g * N;
#pragma unroll
        for (int k = 0; k < N; k++) pmean[at + k] = s_mean[t * N + k], pm2[at + k] = s_m2[t * N + k];
    }
}

/* One row's group: x (and the residual) in, y out. */
template <typename T, bool RELU, bool RESID>
__device__ __forceinline__ uint4 apply_group(uint4 ux, uint4 ur, const float (&mu)[fast_vec<T>::N],
                                             const float (&sc)[fast_vec<T>::N], const float (&sh)[fast_vec<T>::N]) {
    constexpr int N = fast_vec<T>::N;
    float v[N];
    fast_vec<T>::widen(ux, v);
    float rv[N];
    if (RESID) fast_vec<T>::widen(ur, rv);
#pragma unroll
    for (int k = 0; k < N; k++) {
        float b = mp_bn_affine(v[k], mu[k], sc[k], sh[k]);
        if (RESID) b = fast_vec<T>::round(b) + rv[k];
        v[k] = RELU && b < 0.f ? 0.f : b; /* NaN passes */
    }
    return fast_vec<T>::narrow(v);
}

/* The chunk's rows from its last: the statistics pass read them last, so
 * the L2 may still hold them. mirror: block b takes chunk G - 1 - b (the
 * chunks a statistics kernel's last wave read). */
template <typename T, bool RELU, bool RESID, bool PIPE>
__device__ __forceinline__ void fast_apply_block(const T *x, const T *resid, T *y, long long M, int C, long long R,
                                                 const float *coef, bool mirror) {
    constexpr int N = fast_vec<T>::N;
    const fast_lane l = lane_of<T>(M, C, R, mirror);
    if (l.rr >= l.rpp) return;
    float mu[N], sc[N], sh[N];
    load_coef<N>(coef, l.g * N, mu);
    load_coef<N>(coef + C, l.g * N, sc);
    load_coef<N>(coef + 2 * C, l.g * N, sh);
    const long long c0 = l.g * N;
    walk_rows<FAST_UNROLL, PIPE>(
        l.r1 - 1 - l.rr, -(long long)l.rpp, l.r0, l.r1,
        [&](long long r) {
            row_x_resid v;
            v.x = ld16(x + r * C + c0);
            v.resid = RESID ? ld16(resid + r * C + c0) : uint4{};
            return v;
        },
        [&](const row_x_resid &v, long long r) {
            st16(y + r * C + c0, apply_group<T, RELU, RESID>(v.x, v.resid, mu, sc, sh));
        });
}

/* ---- backward ----------------------------------------------------------- */

enum { MASK_NONE, MASK_Y, MASK_RECOMPUTE };

/* The forward's coefficients a recomputed mask needs (MASK_RECOMPUTE). */
template <int N> struct fwd_coefs {
    float mu[N], sc[N], sh[N];
};

/* g = dy masked: where the output y > 0 (MASK_Y), or where round(bn(x)) > 0
 * (MASK_RECOMPUTE); NaN passes. */
template <typename T, int MASK>
__device__ __forceinline__ void masked_dy(uint4 udy, uint4 uy, const float (&xv)[fast_vec<T>::N],
                                          const fwd_coefs<fast_vec<T>::N> &f, float (&g)[fast_vec<T>::N]) {
    constexpr int N = fast_vec<T>::N;
    fast_vec<T>::widen(udy, g);
    if (MASK == MASK_Y) {
        float yv[N];
        fast_vec<T>::widen(uy, yv);
#pragma unroll
        for (int k = 0; k < N; k++) g[k] = yv[k] <= 0.f ? 0.f : g[k];
    } else if (MASK == MASK_RECOMPUTE) {
#pragma unroll
        for (int k = 0; k < N; k++)
            g[k] = fast_vec<T>::round(mp_bn_affine(xv[k], f.mu[k], f.sc[k], f.sh[k])) <= 0.f ? 0.f : g[k];
    }
}

template <typename T, int MASK>
__device__ __forceinline__ void load_fwd(const float *fwd_mu, const float *fwd_scale, int C, int c0,
                                         fwd_coefs<fast_vec<T>::N> &f) {
    if (MASK != MASK_RECOMPUTE) return;
    load_coef<fast_vec<T>::N>(fwd_mu, c0, f.mu);
    load_coef<fast_vec<T>::N>(fwd_scale, c0, f.sc);
    load_coef<fast_vec<T>::N>(fwd_scale + C, c0, f.sh);
}

/* A fused average pool's output gradient read as the batch norm's dy
 * (mp_bn_fast_mask.pooled): row r = (n, h, w) of the H x W image takes row
 * (n, h / k, w / k) of the pooled OH x OW one (OH = H / k, OW = W / k) times
 * 1 / k^2, rounded to T as the pool's backward stores it (one fused
 * multiply-add onto 0, as its sum of one window); rows past the last
 * window take 0. Rows are 31-bit here (mp_bn_fast_mask_ok). */
struct pooled_dy {
    const void *dp;
    fast_div W, H, k;
    fast_div OH, OW; /* values (.d) and divisors: a pooled row's (n, oh, ow) */
    float inv;
    bool windows;      /* the dx pass walks the pool's windows (fast_dx_windows), not x's rows */
};

/* A pooled row's gradient as the batch norm's dy of each row under its
 * window: 1 / k^2 of it, rounded to T as the pool's backward stores it. */
template <typename T>
__device__ __forceinline__ uint4 spread_dy(uint4 pooled, float inv) {
    constexpr int N = fast_vec<T>::N;
    float g[N];
    fast_vec<T>::widen(pooled, g);
#pragma unroll
    for (int k = 0; k < N; k++) g[k] = __fmaf_rn(g[k], inv, 0.f);
    return fast_vec<T>::narrow(g);
}

template <typename T, bool POOLED>
__device__ __forceinline__ uint4 load_dy(const T *dy, const pooled_dy &pd, long long r, int C, long long c0) {
    if (!POOLED) return ld16(dy + r * C + c0);
    constexpr int N = fast_vec<T>::N;
    const unsigned q = div_by((unsigned)r, pd.W), w = (unsigned)r - q * pd.W.d;
    const unsigned n = div_by(q, pd.H), h = q - n * pd.H.d;
    const unsigned oh = div_by(h, pd.k), ow = div_by(w, pd.k);
    float g[N];
#pragma unroll
    for (int k = 0; k < N; k++) g[k] = 0.f;
    if (oh < pd.OH.d && ow < pd.OW.d) {
        const long long pr = ((long long)n * pd.OH.d + oh) * pd.OW.d + ow;
        return spread_dy<T>(ld16(static_cast<const T *>(pd.dp) + pr * C + c0), pd.inv);
    }
    return fast_vec<T>::narrow(g);
}

/* A row's groups for the backward's passes: y only where the mask reads it. */
template <typename T, int MASK, bool POOLED>
__device__ __forceinline__ row_x_dy_y load_bwd_row(const T *x, const T *dy, const T *ym, const pooled_dy &pd,
                                                   long long r, int C, long long c0) {
    const long long at = r * C + c0;
    row_x_dy_y v;
    v.x = ld16(x + at);
    v.dy = load_dy<T, POOLED>(dy, pd, r, C, c0);
    v.y = MASK == MASK_Y ? ld16(ym + at) : uint4{};
    return v;
}

template <typename T, int MASK, bool PIPE, bool POOLED>
__device__ __forceinline__ void fast_bwd_reduce_block(const T *x, const T *dy, const pooled_dy &pd, const T *ym,
                                                      const float *fwd_mu, const float *fwd_scale, const float *mu,
                                                      long long M, int C, long long R, float *psdy, float *psdyx) {
    constexpr int N = fast_vec<T>::N;
    __shared__ float s_a[FAST_THREADS * N], s_b[FAST_THREADS * N];
    const fast_lane l = lane_of<T>(M, C, R, false);
    const bool active = l.rr < l.rpp;
    const int t = threadIdx.x;
    float sa[N], sb[N], m[N];
#pragma unroll
    for (int k = 0; k < N; k++) sa[k] = sb[k] = m[k] = 0.f;
    if (active) {
        load_coef<N>(mu, l.g * N, m);
        fwd_coefs<N> f;
        load_fwd<T, MASK>(fwd_mu, fwd_scale, C, l.g * N, f);
        const long long c0 = l.g * N;
        walk_rows<FAST_UNROLL, PIPE>(
            l.r0 + l.rr, l.rpp, l.r0, l.r1,
            [&](long long r) { return load_bwd_row<T, MASK, POOLED>(x, dy, ym, pd, r, C, c0); },
            [&](const row_x_dy_y &v, long long) {
                float xv[N], g[N];
                fast_vec<T>::widen(v.x, xv);
                masked_dy<T, MASK>(v.dy, v.y, xv, f, g);
#pragma unroll
                for (int k = 0; k < N; k++) sa[k] += g[k], sb[k] += g[k] * (xv[k] - m[k]);
            });
    }
#pragma unroll
    for (int k = 0; k < N; k++) s_a[t * N + k] = sa[k], s_b[t * N + k] = sb[k];
    __syncthreads();
    for (int s = 1; s < l.rpp; s <<= 1) {
        if (active && (l.rr & (2 * s - 1)) == 0 && l.rr + s < l.rpp) {
            const int o = t + s * l.cg;
#pragma unroll
            for (int k = 0; k < N; k++) s_a[t * N + k] += s_a[o * N + k], s_b[t * N + k] += s_b[o * N + k];
        }
        __syncthreads();
    }
    if (active && l.rr == 0) {
        const long long at = (long long)blockIdx.x * C + l.g * N;
#pragma unroll
        for (int k = 0; k < N; k++) psdy[at + k] = s_a[t * N + k], psdyx[at + k] = s_b[t * N + k];
    }
}

/* A thread's channel group's coefficients for the dx pass: coef's (mu, k,
 * a, b) and the forward's where the mask is recomputed. */
template <int N> struct dx_coefs {
    float mu[N], kk[N], a[N], b[N];
    fwd_coefs<N> f;
};

template <typename T, int MASK>
__device__ __forceinline__ void load_dx_coefs(const float *coef, const float *fwd_mu, const float *fwd_scale, int C,
                                              int c0, dx_coefs<fast_vec<T>::N> &k) {
    constexpr int N = fast_vec<T>::N;
    load_coef<N>(coef, c0, k.mu);
    load_coef<N>(coef + C, c0, k.kk);
    load_coef<N>(coef + 2 * C, c0, k.a);
    load_coef<N>(coef + 3 * C, c0, k.b);
    load_fwd<T, MASK>(fwd_mu, fwd_scale, C, c0, k.f);
}

/* One row's group of the dx pass (element at: its first value): dr and dx
 * from x, dy and y (v) as fast_dx_block describes. */
template <typename T, int MASK>
__device__ __forceinline__ void dx_group(const row_x_dy_y &v, long long at, const dx_coefs<fast_vec<T>::N> &k,
                                         T *dx, bool dx_add, T *dr, bool dr_add) {
    constexpr int N = fast_vec<T>::N;
    float xv[N], g[N];
    fast_vec<T>::widen(v.x, xv);
    masked_dy<T, MASK>(v.dy, v.y, xv, k.f, g);
    if (dr) {
        float o[N];
        if (dr_add) {
            fast_vec<T>::widen(ld16(dr + at), o);
#pragma unroll
            for (int j = 0; j < N; j++) o[j] += g[j];
        } else {
#pragma unroll
            for (int j = 0; j < N; j++) o[j] = g[j];
        }
        st16(dr + at, fast_vec<T>::narrow(o));
    }
    if (dx) {
#pragma unroll
        for (int j = 0; j < N; j++) g[j] = k.kk[j] * (g[j] - k.a[j] - (xv[j] - k.mu[j]) * k.b[j]);
        if (dx_add) {
            float o[N];
            fast_vec<T>::widen(ld16(dx + at), o);
#pragma unroll
            for (int j = 0; j < N; j++) g[j] += o[j];
        }
        st16(dx + at, fast_vec<T>::narrow(g));
    }
}

/* A 2 x 2 window's loads: its pooled gradient spread as dy, and x of its
 * four rows. */
struct window2_rows {
    uint4 dy, x[4];
    long long r0; /* x's row of the window's top-left value */
};

/* The dx pass of a pooled dy (pd.windows) by the pool's windows: the
 * block's chunk of pooled rows (G chunks of all N * OH * OW; mirror as for
 * the rows) from its last, each thread loading a window's pooled gradient
 * once and the k x k rows under it, with one division pair per window where
 * fast_dx_block's rows take four each; then, where H or W is not a multiple
 * of k, the rows no window reaches (dy 0) of the block's chunk of rows. The
 * same values per element as fast_dx_block's walk. A pooled dy comes with
 * the recomputed mask only (mp_bn_fast_mask_ok): no y to load. */
template <typename T>
__device__ __forceinline__ void fast_dx_windows(const T *x, const pooled_dy &pd, const dx_coefs<fast_vec<T>::N> &k,
                                                T *dx, bool dx_add, T *dr, bool dr_add, long long M, int C,
                                                const fast_lane &l, bool mirror) {
    constexpr int MASK = MASK_RECOMPUTE;
    const uint4 no_y = {};
    const unsigned K = pd.k.d, H = pd.H.d, W = pd.W.d;
    const long long P = M / ((long long)H * W) * pd.OH.d * pd.OW.d, G = gridDim.x, Rp = (P + G - 1) / G;
    const long long b = mirror ? G - 1 - blockIdx.x : blockIdx.x;
    const long long p0 = b * Rp < P ? b * Rp : P, p1 = p0 + Rp < P ? p0 + Rp : P;
    const long long c0 = l.g * fast_vec<T>::N;
    const T *pooled = static_cast<const T *>(pd.dp);
    /* x's row of window p's top-left value */
    auto corner = [&](long long p) {
        const unsigned q = div_by((unsigned)p, pd.OW), ow = (unsigned)p - q * pd.OW.d;
        const unsigned n = div_by(q, pd.OH), oh = q - n * pd.OH.d;
        return ((long long)n * H + (long long)oh * K) * W + (long long)ow * K;
    };
    if (K == 2) {
        /* a window's five loads in flight (with the next window's too, PIPE, registers spill) */
        walk_rows<1, false>(
            p1 - 1 - l.rr, -(long long)l.rpp, p0, p1,
            [&](long long p) {
                window2_rows v;
                const long long r0 = v.r0 = corner(p);
                v.dy = spread_dy<T>(ld16(pooled + p * C + c0), pd.inv);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const long long at = (r0 + (j >> 1) * (long long)W + (j & 1)) * C + c0;
                    v.x[j] = ld16(x + at);
                }
                return v;
            },
            [&](const window2_rows &v, long long) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const long long at = (v.r0 + (j >> 1) * (long long)W + (j & 1)) * C + c0;
                    dx_group<T, MASK>(row_x_dy_y{v.x[j], v.dy, no_y}, at, k, dx, dx_add, dr, dr_add);
                }
            });
    } else {
        for (long long p = p1 - 1 - l.rr; p >= p0; p -= l.rpp) {
            const long long r0 = corner(p);
            const uint4 gdy = spread_dy<T>(ld16(pooled + p * C + c0), pd.inv);
            for (unsigned i = 0; i < K; i++)
                for (unsigned j = 0; j < K; j++) {
                    const long long at = (r0 + (long long)i * W + j) * C + c0;
                    dx_group<T, MASK>(row_x_dy_y{ld16(x + at), gdy, no_y}, at, k, dx, dx_add, dr, dr_add);
                }
        }
    }
    if (H % K == 0 && W % K == 0) return;
    float zero[fast_vec<T>::N] = {};
    const uint4 gz = fast_vec<T>::narrow(zero); /* load_dy's value past the last window */
    for (long long r = l.r1 - 1 - l.rr; r >= l.r0; r -= l.rpp) {
        const unsigned q = div_by((unsigned)r, pd.W), w = (unsigned)r - q * W, h = q - div_by(q, pd.H) * H;
        if (h < K * pd.OH.d && w < K * pd.OW.d) continue; /* under a window: done above */
        const long long at = r * C + c0;
        dx_group<T, MASK>(row_x_dy_y{ld16(x + at), gz, no_y}, at, k, dx, dx_add, dr, dr_add);
    }
}

/* Rows from the chunk's last, as the apply: the reduction read them last
 * (mirror as for the apply); a pooled dy with pd.windows by its windows
 * (fast_dx_windows). */
template <typename T, int MASK, bool PIPE, bool POOLED>
__device__ __forceinline__ void fast_dx_block(const T *x, const T *dy, const pooled_dy &pd, const T *ym,
                                              const float *fwd_mu, const float *fwd_scale, T *dx, bool dx_add, T *dr,
                                              bool dr_add, long long M, int C, long long R, const float *coef,
                                              bool mirror) {
    constexpr int U = 2;
    const fast_lane l = lane_of<T>(M, C, R, mirror);
    if (l.rr >= l.rpp) return;
    dx_coefs<fast_vec<T>::N> k;
    load_dx_coefs<T, MASK>(coef, fwd_mu, fwd_scale, C, l.g * fast_vec<T>::N, k);
    if constexpr (POOLED) {
        static_assert(MASK == MASK_RECOMPUTE, "a pooled dy comes with the recomputed mask");
        if (pd.windows) {
            fast_dx_windows<T>(x, pd, k, dx, dx_add, dr, dr_add, M, C, l, mirror);
            return;
        }
    }
    const long long c0 = l.g * fast_vec<T>::N;
    walk_rows<U, PIPE>(
        l.r1 - 1 - l.rr, -(long long)l.rpp, l.r0, l.r1,
        [&](long long r) { return load_bwd_row<T, MASK, POOLED>(x, dy, ym, pd, r, C, c0); },
        [&](const row_x_dy_y &v, long long r) { dx_group<T, MASK>(v, r * C + c0, k, dx, dx_add, dr, dr_add); });
}

/* ---- host side: the dtype as T ----------------------------------------- */

static inline int vec_of(mp_dtype dt) {
    return dt == MP_DTYPE_F32 ? 4 : dt == MP_DTYPE_F16 || dt == MP_DTYPE_BF16 ? 8 : 0;
}

/* The statements that follow dt with T the dtype's type; any other dtype
 * is the caller's error (mp_bn_fast_rows_per_pass said 0 for it). */
#define FAST_DISPATCH(dt, ...)                                                                                        \
    do {                                                                                                              \
        if (!vec_of(dt)) return cudaErrorInvalidValue;                                                                \
        if ((dt) == MP_DTYPE_F32) { typedef float T; __VA_ARGS__; }                                                   \
        else if ((dt) == MP_DTYPE_F16) { typedef __half T; __VA_ARGS__; }                                             \
        else { typedef __nv_bfloat16 T; __VA_ARGS__; }                                                                \
    } while (0)

/* The pooled gradient mp_bn_fast_mask names, as the kernels take it (dp NULL: none). */
static inline pooled_dy pooled_of(const mp_bn_fast_mask &m) {
    pooled_dy p = {};
    if (!m.pooled) return p;
    p.dp = m.pooled;
    p.W = fast_div_of((unsigned)m.W), p.H = fast_div_of((unsigned)m.H), p.k = fast_div_of((unsigned)m.k);
    p.OH = fast_div_of((unsigned)(m.H / m.k)), p.OW = fast_div_of((unsigned)(m.W / m.k));
    p.inv = 1.f / (float)(m.k * m.k); /* as the pool's backward computes it */
    p.windows = !mp_env_get()->no_bn_pooled_windows;
    return p;
}

/* The statements that follow with PIPE (walk_rows) true, or false under
 * MIXPREC_BN_PIPELINE=0. */
#define PIPE_DISPATCH(...)                                                                                            \
    do {                                                                                                              \
        if (!mp_env_get()->no_bn_pipeline) { constexpr bool PIPE = true; __VA_ARGS__; }                               \
        else { constexpr bool PIPE = false; __VA_ARGS__; }                                                            \
    } while (0)

#endif
