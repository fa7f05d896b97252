/* conv_stem.cu — see conv_stem.h. 256 threads (8 warps) per block, tiles of
 * 128 output pixels (16 per warp in the forward); warp-level tensor-core
 * products (nvcuda::wmma, 16 x 16 x 16, f32 accumulators). A thread loads
 * half of one pixel's im2col row (16 taps) with scalar loads of x (x is
 * small beside y and its 9 reads per value hit the caches), and its part of
 * dy's tile, a tile ahead: the next tile's loads fly while the block
 * multiplies this one. */
#include "cuda/conv_stem.h"
#include "cuda/conv_own.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <mma.h>

#include <type_traits>

#include "cuda/fast_div.cuh"
#include "cuda/vec16.cuh"

using namespace nvcuda;

enum { STEM_THREADS = 256, STEM_WARPS = 8, STEM_TILE = 128, STEM_TAPS = 32, STEM_MAX_CX = 4, STEM_MAX_CY = 128 };

/* Row strides in shared memory, padded so that a warp's accesses spread
 * over the banks (4- to 16-way conflicts unpadded): 16-bit rows of 32 taps
 * take 40 values (80 bytes: 8 consecutive rows start on 8 different 4-bank
 * groups); f32 rows of 16 take 20; rows of cy channels take cy + 8 (a
 * 16-byte shift a row). Each is an odd multiple of 16 bytes, so the 16-byte
 * accesses of a quarter warp that walks 8 consecutive rows at one column
 * (the stage's reads, the rows' stores) fall on 8 different bank groups. */
enum { STEM_LDA = STEM_TAPS + 8, STEM_LDS = 16 + 4, STEM_PAD_CY = 8 };

/* The pass's shape, and each tap t's place: tap[t] = off << 5 | rs, where
 * off is its offset in x from the window's top-left value, ((r * wx + s) *
 * dil) * cx + c, and rs = r * k + s its window position (31 for the taps
 * past the filter's, which no window mask has). Pixels and offsets fit 31
 * and 26 bits (mp_stem_applies). */
struct stem_shape {
    int n, cx, hx, wx, cy, hy, wy, stride, pad, k, dil, taps;
    int pixels; /* n * hy * wy */
    fast_div hw_div, wy_div, vec_div; /* by hy * wy, wy, and cy / 8 (16-byte vectors a row of y) */
    int tap[STEM_TAPS];
};

static stem_shape shape_of(const mp_conv_geom *g) {
    stem_shape s = {};
    s.n = g->n, s.cx = g->cx, s.hx = g->hx, s.wx = g->wx, s.cy = g->cy, s.hy = g->hy, s.wy = g->wy;
    s.stride = g->stride, s.pad = g->pad, s.k = g->k, s.dil = g->dil, s.taps = g->k * g->k * g->cx;
    s.pixels = g->n * g->hy * g->wy;
    s.hw_div = fast_div_of((unsigned)(g->hy * g->wy)), s.wy_div = fast_div_of((unsigned)g->wy);
    s.vec_div = fast_div_of((unsigned)(g->cy / 8));
    for (int t = 0; t < STEM_TAPS; t++) { /* KRSC: c fastest, then s, then r */
        const int c = t % g->cx, rs = t / g->cx, r = rs / g->k, q = rs % g->k;
        s.tap[t] = t < s.taps ? ((r * g->wx + q) * g->dil * g->cx + c) << 5 | rs : 31;
    }
    return s;
}

/* A thread's half of one im2col row of a tile: half h = threadIdx.x / 128
 * (taps 16h .. 16h + 15) of row threadIdx.x % 128, as the 16-bit values of
 * x (0 for taps past the filter's, pixels past the last and taps outside
 * the image). Loaded into registers (load_im2col) a tile ahead of their
 * store into shared memory (store_im2col), so that their loads are in
 * flight while the block multiplies the tile before. */
struct im2col_half {
    unsigned short v[16];
};

/* Bit r * k + s set where window position (r, s) of output pixel (oh, ow)
 * lies inside the image. */
__device__ __forceinline__ unsigned window_mask(const stem_shape &s, int oh, int ow) {
    const int ih0 = oh * s.stride - s.pad, iw0 = ow * s.stride - s.pad;
    unsigned cols = 0, mask = 0;
    for (int q = 0; q < s.k; q++) cols |= (unsigned)((unsigned)(iw0 + q * s.dil) < (unsigned)s.wx) << q;
    for (int r = 0; r < s.k; r++)
        if ((unsigned)(ih0 + r * s.dil) < (unsigned)s.hx) mask |= cols << (r * s.k);
    return mask;
}

template <typename T>
__device__ __forceinline__ void load_im2col(const T *__restrict__ x, const stem_shape &s, int p0, im2col_half &r) {
    const int i = threadIdx.x % STEM_TILE, h = threadIdx.x / STEM_TILE;
    const int p = p0 + i;
    const unsigned short *xs = reinterpret_cast<const unsigned short *>(x);
#pragma unroll
    for (int j = 0; j < 16; j++) r.v[j] = 0;
    if (p >= s.pixels) return;
    const int n = (int)div_by((unsigned)p, s.hw_div), rem = p - n * (int)s.hw_div.d;
    const int oh = (int)div_by((unsigned)rem, s.wy_div), ow = rem - oh * (int)s.wy_div.d;
    const unsigned mask = window_mask(s, oh, ow);
    /* the window's top-left value; negative where it starts in the padding, read only at offsets inside */
    const int corner = ((n * s.hx + oh * s.stride - s.pad) * s.wx + ow * s.stride - s.pad) * s.cx;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int e = s.tap[16 * h + j];
        if (mask >> (e & 31) & 1) r.v[j] = __ldg(xs + (corner + (e >> 5)));
    }
}

/* r into a[128][STEM_LDA] (T's 16-bit values, little-endian pairs; taps 0-31 of each row). */
__device__ __forceinline__ void store_im2col(const im2col_half &r, void *a) {
    const int i = threadIdx.x % STEM_TILE, h = threadIdx.x / STEM_TILE;
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] = (uint32_t)r.v[2 * k] | (uint32_t)r.v[2 * k + 1] << 16;
    uint4 *row = reinterpret_cast<uint4 *>(static_cast<unsigned short *>(a) + i * STEM_LDA + 16 * h);
    row[0] = make_uint4(w[0], w[1], w[2], w[3]);
    row[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* The filter as B[32][cy] stored column by column, b[k * STEM_LDA + t]
 * (the KRSC filter's rows padded to 32 taps with 0), in b. */
template <typename T> __device__ __forceinline__ void fill_filter(const T *__restrict__ w, const stem_shape &s, T *b) {
    for (int e = threadIdx.x; e < STEM_TAPS * s.cy; e += STEM_THREADS) {
        const int k = e / STEM_TAPS, t = e % STEM_TAPS;
        b[k * STEM_LDA + t] = t < s.taps ? w[k * s.taps + t] : from_f32<T>(0.f);
    }
}

/* The forward's dynamic shared memory: the tile's im2col a[128][STEM_LDA],
 * the filter b, each warp's f32 16 x 16 stage (rows of STEM_LDS) and its 16
 * rows of y (rows of cy + STEM_PAD_CY values of T) before they are stored. */
static size_t forward_smem(int cy) {
    return (size_t)STEM_TILE * STEM_LDA * 2 + (size_t)STEM_LDA * cy * 2 + STEM_WARPS * 16 * STEM_LDS * sizeof(float) +
           (size_t)STEM_WARPS * 16 * (cy + STEM_PAD_CY) * 2;
}

/* Forward: each block takes tiles blockIdx.x, + gridDim.x, ...; warp w the
 * tile's rows 16w .. 16w + 15, one 16 x 16 block of y at a time through
 * its f32 stage into its rows' stage, which it then stores as one
 * contiguous run of 16 * cy values (16-byte vectors, 512 bytes a warp
 * store). The next tile's im2col loads are in flight meanwhile. */
template <typename T> __global__ void __launch_bounds__(STEM_THREADS) stem_forward(const T *__restrict__ x,
                                                                                  const T *__restrict__ w,
                                                                                  T *__restrict__ y, stem_shape s) {
    extern __shared__ __align__(128) unsigned char smem[];
    T *a = reinterpret_cast<T *>(smem);
    T *b = a + STEM_TILE * STEM_LDA;
    float *stage = reinterpret_cast<float *>(b + STEM_LDA * s.cy);
    const int ldr = s.cy + STEM_PAD_CY; /* rows' stride */
    T *rows = reinterpret_cast<T *>(stage + STEM_WARPS * 16 * STEM_LDS);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *my_stage = stage + warp * 16 * STEM_LDS;
    T *my_rows = rows + warp * 16 * ldr;
    fill_filter(w, s, b);
    const int tiles = (s.pixels + STEM_TILE - 1) / STEM_TILE, per_row = s.cy / 8; /* 16-byte vectors a row */
    im2col_half r;
    if ((int)blockIdx.x < tiles) load_im2col(x, s, blockIdx.x * STEM_TILE, r);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int p0 = tile * STEM_TILE;
        __syncthreads(); /* the previous tile's a is read */
        store_im2col(r, a);
        __syncthreads();
        if (tile + (int)gridDim.x < tiles) load_im2col(x, s, (tile + gridDim.x) * STEM_TILE, r);
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a0, a1;
        wmma::load_matrix_sync(a0, a + warp * 16 * STEM_LDA, STEM_LDA);
        wmma::load_matrix_sync(a1, a + warp * 16 * STEM_LDA + 16, STEM_LDA);
        for (int nb = 0; nb < s.cy / 16; nb++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b0, b1;
            wmma::load_matrix_sync(b0, b + nb * 16 * STEM_LDA, STEM_LDA);
            wmma::load_matrix_sync(b1, b + nb * 16 * STEM_LDA + 16, STEM_LDA);
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
            wmma::mma_sync(acc, a0, b0, acc);
            wmma::mma_sync(acc, a1, b1, acc);
            wmma::store_matrix_sync(my_stage, acc, STEM_LDS, wmma::mem_row_major);
            __syncwarp();
            const int row = lane % 16, half = lane / 16; /* a quarter warp: 8 rows, one half each */
            const float4 *v4 = reinterpret_cast<const float4 *>(my_stage + row * STEM_LDS + half * 8);
            const float4 lo = v4[0], hi = v4[1];
            const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            *reinterpret_cast<uint4 *>(my_rows + row * ldr + nb * 16 + half * 8) = fast_vec<T>::narrow(v);
            __syncwarp(); /* the stage is read before the next block overwrites it */
        }
        const int row0 = p0 + warp * 16, rows_here = min(16, s.pixels - row0);
        uint4 *dst = reinterpret_cast<uint4 *>(y + (long long)row0 * s.cy);
        for (int v = lane; v < rows_here * per_row; v += 32) {
            const int row = (int)div_by((unsigned)v, s.vec_div);
            dst[v] = *reinterpret_cast<const uint4 *>(my_rows + row * ldr + (v - row * per_row) * 8);
        }
        __syncwarp(); /* the rows are stored before the next tile's overwrite them */
    }
}

/* A thread's part of a tile of dy: vectors threadIdx.x + 256 k (k < V) of
 * its 128 x cy values (V = 4 up to 64 channels, 8 up to 128), 0 past the
 * last pixel; loaded a tile ahead, as im2col_half. */
template <int V> struct dy_part {
    uint4 v[V];
};

template <typename T, int V>
__device__ __forceinline__ void load_dy(const T *__restrict__ dy, const stem_shape &s, int p0, dy_part<V> &r) {
    const int vecs = min(STEM_TILE, s.pixels - p0) * (s.cy / 8);
    const uint4 *src = reinterpret_cast<const uint4 *>(dy + (long long)p0 * s.cy);
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int v = threadIdx.x + k * STEM_THREADS;
        r.v[k] = v < vecs ? ld16(src + v) : make_uint4(0, 0, 0, 0);
    }
}

/* r into g[128][cy + STEM_PAD_CY] (16-bit values). */
template <int V> __device__ __forceinline__ void store_dy(const dy_part<V> &r, const stem_shape &s, void *g) {
    const int per_row = s.cy / 8, vecs = STEM_TILE * per_row, ldg = s.cy + STEM_PAD_CY;
#pragma unroll
    for (int k = 0; k < V; k++) {
        const int v = threadIdx.x + k * STEM_THREADS;
        if (v < vecs) {
            const int row = (int)div_by((unsigned)v, s.vec_div);
            *reinterpret_cast<uint4 *>(static_cast<unsigned short *>(g) + row * ldg + (v - row * per_row) * 8) = r.v[k];
        }
    }
}

/* Backward-filter: D[cy][32] = dy^T . im2col over the block's tiles, as
 * cy / 16 x 2 blocks of 16 x 16 (f = 2 * row block + column block). With 8
 * or more of them warp w keeps blocks w and w + 8 over each tile's 128
 * pixels; with F < 8, warp w keeps block w % F over the tile's 16-pixel
 * steps w / F, + 8 / F, ... (slices: warps past F * (8 / F) idle). The
 * block's sums go to ws[block][slice][cy][32]. The next tile's loads are
 * in flight while the block multiplies this one. */
__host__ __device__ static inline int filter_blocks_of(int cy) { return cy / 16 * 2; }
__host__ __device__ static inline int slices_of(int cy) {
    const int f = filter_blocks_of(cy);
    return f >= STEM_WARPS ? 1 : STEM_WARPS / f;
}

template <typename T, int V>
__global__ void __launch_bounds__(STEM_THREADS) stem_filter_sums(const T *__restrict__ x, const T *__restrict__ dy,
                                                                float *__restrict__ ws, stem_shape s) {
    __shared__ __align__(128) T a[STEM_TILE * STEM_LDA];
    __shared__ __align__(128) T g[STEM_TILE * (16 * V + STEM_PAD_CY)]; /* 128 rows of cy + STEM_PAD_CY, cy <= 16 V */
    const int ldg = s.cy + STEM_PAD_CY;
    const int warp = threadIdx.x / 32, F = filter_blocks_of(s.cy), slices = slices_of(s.cy);
    const int mine = F >= STEM_WARPS ? (F + STEM_WARPS - 1 - warp) / STEM_WARPS : warp < F * slices ? 1 : 0;
    const int slice = F >= STEM_WARPS ? 0 : warp / F;
    auto block_of = [&](int m) { return F >= STEM_WARPS ? warp + m * STEM_WARPS : warp % F; }; /* its m-th f */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
    wmma::fill_fragment(acc[0], 0.f);
    wmma::fill_fragment(acc[1], 0.f);
    const int tiles = (s.pixels + STEM_TILE - 1) / STEM_TILE;
    im2col_half r;
    dy_part<V> d;
    if ((int)blockIdx.x < tiles) {
        load_im2col(x, s, blockIdx.x * STEM_TILE, r);
        load_dy(dy, s, blockIdx.x * STEM_TILE, d);
    }
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        __syncthreads();
        store_im2col(r, a);
        store_dy(d, s, g);
        __syncthreads();
        if (tile + (int)gridDim.x < tiles) {
            load_im2col(x, s, (tile + gridDim.x) * STEM_TILE, r);
            load_dy(dy, s, (tile + gridDim.x) * STEM_TILE, d);
        }
#pragma unroll
        for (int m = 0; m < 2; m++) { /* acc[m] with m known: in registers */
            if (m >= mine) break;
            const int f = block_of(m), rb = f / 2, cb = f % 2;
            for (int step = slice; step < STEM_TILE / 16; step += slices) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> ga;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> xb;
                wmma::load_matrix_sync(ga, g + step * 16 * ldg + rb * 16, ldg);
                wmma::load_matrix_sync(xb, a + step * 16 * STEM_LDA + cb * 16, STEM_LDA);
                wmma::mma_sync(acc[m], ga, xb, acc[m]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
        if (m >= mine) break;
        const int f = block_of(m), rb = f / 2, cb = f % 2;
        float *out = ws + (((long long)blockIdx.x * slices + slice) * s.cy + rb * 16) * STEM_TAPS + cb * 16;
        wmma::store_matrix_sync(out, acc[m], STEM_TAPS, wmma::mem_row_major);
    }
}

/* dw[k][t] = the blocks' and slices' sums of D[k][t], rounded once to T:
 * block k of the grid, its warp q summing partials q, q + 8, ... in order,
 * then the 8 warps' sums in order (the same bits every run). */
template <typename T>
__global__ void __launch_bounds__(STEM_THREADS) stem_filter_total(const float *__restrict__ ws, int partials,
                                                                 stem_shape s, T *__restrict__ dw) {
    __shared__ float part[STEM_WARPS][STEM_TAPS];
    const int k = blockIdx.x, t = threadIdx.x % 32, q = threadIdx.x / 32;
    float sum = 0.f;
#pragma unroll 8
    for (int b = q; b < partials; b += STEM_WARPS) sum += ws[((long long)b * s.cy + k) * STEM_TAPS + t];
    part[q][t] = sum;
    __syncthreads();
    if (q || t >= s.taps) return;
    for (int i = 1; i < STEM_WARPS; i++) sum += part[i][t];
    dw[k * s.taps + t] = from_f32<T>(sum);
}

/* ---- host side -------------------------------------------------------------- */

bool mp_stem_applies(const mp_conv_geom *g, mp_dtype cd) {
    if (cd != MP_DTYPE_F16 && cd != MP_DTYPE_BF16) return false;
    if (g->groups != 1 || g->cx < 1 || g->cx > STEM_MAX_CX || g->k < 1 || g->k * g->k * g->cx > STEM_TAPS) return false;
    if (g->cy < 16 || g->cy > STEM_MAX_CY || g->cy % 16) return false;
    if (g->stride < 1 || g->dil < 1 || g->pad < 0 || g->dil * (g->k - 1) > 127) return false;
    const long long xs = (long long)g->n * g->hx * g->wx * g->cx, ys = (long long)g->n * g->hy * g->wy * g->cy;
    const long long window = ((long long)(g->k - 1) * g->dil * (g->wx + 1) + 1) * g->cx; /* shape_of's offsets */
    return g->n >= 1 && g->hy >= 1 && g->wy >= 1 && xs < INT_MAX && ys < INT_MAX && window < (1 << 26);
}

/* Blocks of a pass: per_sm on each SM (the forward: 4 where its shared
 * memory lets them stay resident; the backward-filter: 2, as many as its
 * registers let, 76-110 a thread on sm_90), each keeping a tile's loads in
 * flight; no more than there are tiles. */
enum { STEM_FWD_PER_SM = 4, STEM_FILTER_PER_SM = 2 };
static int blocks_of(const mp_cuda_ctx *ctx, const mp_conv_geom *g, int per_sm) {
    const long long tiles = ((long long)g->n * g->hy * g->wy + STEM_TILE - 1) / STEM_TILE;
    const long long most = (long long)per_sm * (ctx->sm_count > 0 ? ctx->sm_count : 1);
    return (int)(tiles < most ? (tiles > 0 ? tiles : 1) : most);
}

size_t mp_stem_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass) {
    if (pass != MP_CONV_BWD_FILTER || !mp_stem_applies(g, cd)) return 0;
    return (size_t)blocks_of(ctx, g, STEM_FILTER_PER_SM) * slices_of(g->cy) * g->cy * STEM_TAPS * sizeof(float);
}

static mp_status refuse(const mp_conv_geom *g, mp_dtype cd, const char *what) {
    return mp_own_refuse(g, cd, "stem", what);
}

static mp_status aligned(const void *a, const void *b, const char *what) {
    return mp_own_aligned(a, b, "stem", what);
}

mp_status mp_stem_forward(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const void *w, void *y,
                          const char *what) {
    if (!mp_stem_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(y, y, what));
    const stem_shape s = shape_of(g);
    const size_t smem = forward_smem(g->cy);
    mp_status st = MP_OK;
    (void)with_type(cd, [&](auto t) {
        using T = decltype(t);
        if constexpr (!std::is_same_v<T, float>) {
            /* over the 48 KB a launch gets unasked from 80 output channels on: allowed before the launch, but
               not while a graph is captured (the search's timing ran the pass before any capture) */
            cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
            st = mp_cuda_check(cudaStreamIsCapturing(ctx->stream, &cap), "cudaStreamIsCapturing", what);
            if (st == MP_OK && smem > 48 * 1024 && cap == cudaStreamCaptureStatusNone)
                st = mp_cuda_check(cudaFuncSetAttribute(stem_forward<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        (int)smem),
                                   "cudaFuncSetAttribute", what);
            int resident = 0; /* 3 a SM at 128 channels on sm_90; 0 over 48 KB until the attribute is set */
            if (st == MP_OK)
                st = mp_cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, stem_forward<T>,
                                                                                 STEM_THREADS, smem),
                                   "cudaOccupancyMaxActiveBlocksPerMultiprocessor", what);
            if (st == MP_OK && resident < 1)
                st = mp_error(MP_ERR_INTERNAL,
                              "%s: the stem forward's %zu bytes of shared memory fit no SM (over 48 KB they are "
                              "allowed at its first launch outside a captured graph)",
                              what, smem);
            if (st == MP_OK)
                stem_forward<T><<<blocks_of(ctx, g, resident < STEM_FWD_PER_SM ? resident : STEM_FWD_PER_SM),
                                  STEM_THREADS, smem, ctx->stream>>>((const T *)x, (const T *)w, (T *)y, s);
        }
    });
    MP_TRY(st);
    MP_CUDA_TRY(cudaGetLastError(), what);
    return MP_OK;
}

mp_status mp_stem_backward_filter(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const void *dy,
                                  void *dw, void *ws, size_t ws_bytes, const char *what) {
    if (!mp_stem_applies(g, cd)) return refuse(g, cd, what);
    MP_TRY(aligned(dy, ws, what));
    if (!ws || ws_bytes < mp_stem_workspace(ctx, g, cd, MP_CONV_BWD_FILTER))
        return mp_error(MP_ERR_INTERNAL, "%s: the stem backward-filter's workspace is too small", what);
    const stem_shape s = shape_of(g);
    const int blocks = blocks_of(ctx, g, STEM_FILTER_PER_SM);
    (void)with_type(cd, [&](auto t) {
        using T = decltype(t);
        if constexpr (!std::is_same_v<T, float>) {
            if (s.cy <= 64)
                stem_filter_sums<T, 4><<<blocks, STEM_THREADS, 0, ctx->stream>>>((const T *)x, (const T *)dy,
                                                                                (float *)ws, s);
            else
                stem_filter_sums<T, 8><<<blocks, STEM_THREADS, 0, ctx->stream>>>((const T *)x, (const T *)dy,
                                                                                (float *)ws, s);
            stem_filter_total<T><<<s.cy, STEM_THREADS, 0, ctx->stream>>>(
                (const float *)ws, blocks * slices_of(s.cy), s, (T *)dw);
        }
    });
    MP_CUDA_TRY(cudaGetLastError(), what);
    return MP_OK;
}
