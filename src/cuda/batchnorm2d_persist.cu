/* batchnorm2d_persist.cu — see batchnorm2d_persist.h. */
#include "cuda/batchnorm2d_persist.h"

#include <cooperative_groups.h>

#include "cuda/batchnorm2d_fast.cuh"
#include "cuda/batchnorm2d_finalize.cuh"

namespace cg = cooperative_groups;

/* The finalize phase: a block takes FIN_CH consecutive channels at a time
 * (coalesced loads), its threads FIN_SL slices of the partials each, summed
 * in a fixed tree (deterministic). One block per SM: at these sizes the
 * grid barriers' cost grows with the blocks, and the bytes are few. */
enum { FIN_CH = 8, FIN_SL = FAST_THREADS / FIN_CH, BLOCKS_PER_SM = 1 };

/* The statistics of the grid's G = gridDim.x chunks merged, FIN_CH channels per block at a time. */
__device__ __forceinline__ void finalize_forward(const float *pmean, const float *pm2, long long M, int C, long long R,
                                                 const mp_bn_fwd_out &out) {
    __shared__ double s[FIN_SL][FIN_CH];
    const int ch = threadIdx.x % FIN_CH, sl = threadIdx.x / FIN_CH, G = gridDim.x;
    for (int c0 = blockIdx.x * FIN_CH; c0 < C; c0 += G * FIN_CH) { /* uniform over the block */
        const int c = c0 + ch;
        double mean, m2;
        mp_bn_merge_stats<FIN_SL, FIN_CH>(pmean, pm2, C, G, M, R, c, C, ch, sl, s, &mean, &m2);
        if (c < C && sl == 0) mp_bn_fwd_out_channel(out, c, C, M, (float)mean, (float)m2);
    }
}

/* The backward sums merged, as finalize_forward. */
__device__ __forceinline__ void finalize_backward(const float *psdy, const float *psdyx, long long M, int C,
                                                  const mp_bn_bwd_out &out) {
    __shared__ float s_a[FIN_SL][FIN_CH], s_b[FIN_SL][FIN_CH];
    const int ch = threadIdx.x % FIN_CH, sl = threadIdx.x / FIN_CH, G = gridDim.x;
    for (int c0 = blockIdx.x * FIN_CH; c0 < C; c0 += G * FIN_CH) {
        const int c = c0 + ch;
        float sa, sb;
        mp_bn_merge_sums<FIN_SL, FIN_CH>(psdy, psdyx, C, G, c, C, ch, sl, s_a, s_b, &sa, &sb);
        if (c < C && sl == 0) mp_bn_bwd_out_channel(out, c, C, M, sa, sb);
    }
}

template <typename T, bool RELU, bool RESID, bool PIPE>
__global__ void __launch_bounds__(FAST_THREADS, 2)
    persist_forward_kernel(const T *x, const T *resid, T *y, long long M, int C, long long R, float *pmean,
                           float *pm2, mp_bn_fwd_out out) {
    const cg::grid_group grid = cg::this_grid();
    fast_stats_block<T, PIPE>(x, M, C, R, pmean, pm2);
    grid.sync();
    finalize_forward(pmean, pm2, M, C, R, out);
    if (!y) return; /* statistics and coefficients only (batchnorm2d_persist.h) */
    grid.sync();
    fast_apply_block<T, RELU, RESID, PIPE>(x, resid, y, M, C, R, out.coef, false);
}

template <typename T, int MASK, bool PIPE, bool POOLED>
__global__ void __launch_bounds__(FAST_THREADS, 2)
    persist_backward_kernel(const T *x, const T *dy, pooled_dy pd, const T *ym, const float *fwd_mu,
                            const float *fwd_scale, long long M, int C, long long R, float *psdy, float *psdyx,
                            mp_bn_bwd_out out, T *dx, bool dx_add, T *dr, bool dr_add) {
    const cg::grid_group grid = cg::this_grid();
    fast_bwd_reduce_block<T, MASK, PIPE, POOLED>(x, dy, pd, ym, fwd_mu, fwd_scale, out.save_mean, M, C, R, psdy,
                                                 psdyx);
    grid.sync();
    finalize_backward(psdy, psdyx, M, C, out);
    grid.sync();
    if (dx || dr)
        fast_dx_block<T, MASK, PIPE, POOLED>(x, dy, pd, ym, fwd_mu, fwd_scale, dx, dx_add, dr, dr_add, M, C, R,
                                             out.coef, false);
}

/* ---- host side ---------------------------------------------------------- */

bool mp_bn_persist_supported(void) {
    int dev = 0, coop = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) == cudaSuccess && coop;
}

/* Blocks of kernel k one SM holds at once, at most BLOCKS_PER_SM (0 where
 * the query fails; its error is cleared: not the next launch's). Asked
 * once per kernel and process (a process's GPUs are of one kind). */
template <typename K> static int blocks_per_sm(K k) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, FAST_THREADS, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n < BLOCKS_PER_SM ? n : BLOCKS_PER_SM;
}

/* Chunks of R rows for at most max_blocks blocks, per_sm on each of
 * sm_count SMs; G = 0 where none fit. */
static void persist_dims(int per_sm, int sm_count, long long M, int max_blocks, int *G, long long *R) {
    long long g = (long long)per_sm * (sm_count > 0 ? sm_count : 1);
    *G = 0;
    if (g > max_blocks) g = max_blocks;
    if (g > M) g = M;
    if (g < 1) return;
    *R = (M + g - 1) / g;
    *G = (int)((M + *R - 1) / *R); /* no empty chunk */
}

/* A refused launch (more blocks than fit) leaves its error behind; the
 * caller takes the three kernels then, whose launches must not find it. */
template <typename K, typename... Args> static cudaError_t launch_cooperative(K k, int G, cudaStream_t st, Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)G);
    cfg.blockDim = dim3(FAST_THREADS);
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, k, args...);
    if (e == cudaErrorCooperativeLaunchTooLarge) (void)cudaGetLastError();
    return e;
}

template <typename T, bool PIPE>
static cudaError_t forward_as(cudaStream_t st, int sm_count, const T *x, const T *resid, T *y, long long M, int C,
                              int max_blocks, float *pmean, float *pm2, const mp_bn_fwd_out &out, bool relu) {
    void (*const kernels[4])(const T *, const T *, T *, long long, int, long long, float *, float *, mp_bn_fwd_out) = {
        persist_forward_kernel<T, false, false, PIPE>, persist_forward_kernel<T, true, false, PIPE>,
        persist_forward_kernel<T, false, true, PIPE>, persist_forward_kernel<T, true, true, PIPE>};
    static const int per_sm[4] = {blocks_per_sm(kernels[0]), blocks_per_sm(kernels[1]), blocks_per_sm(kernels[2]),
                                  blocks_per_sm(kernels[3])};
    const int v = (resid ? 2 : 0) + (relu ? 1 : 0);
    int G;
    long long R;
    persist_dims(per_sm[v], sm_count, M, max_blocks, &G, &R);
    if (!G) return cudaErrorCooperativeLaunchTooLarge;
    return launch_cooperative(kernels[v], G, st, x, resid, y, M, C, R, pmean, pm2, out);
}

template <typename T, bool PIPE>
static cudaError_t backward_as(cudaStream_t st, int sm_count, const T *x, const T *dy, mp_bn_fast_mask mask,
                               long long M, int C, int max_blocks, float *psdy, float *psdyx,
                               const mp_bn_bwd_out &out, T *dx, bool dx_add, T *dr, bool dr_add) {
    void (*const kernels[4])(const T *, const T *, pooled_dy, const T *, const float *, const float *, long long, int,
                             long long, float *, float *, mp_bn_bwd_out, T *, bool, T *, bool) = {
        persist_backward_kernel<T, MASK_NONE, PIPE, false>, persist_backward_kernel<T, MASK_Y, PIPE, false>,
        persist_backward_kernel<T, MASK_RECOMPUTE, PIPE, false>, persist_backward_kernel<T, MASK_RECOMPUTE, PIPE, true>};
    static const int per_sm[4] = {blocks_per_sm(kernels[0]), blocks_per_sm(kernels[1]), blocks_per_sm(kernels[2]),
                                  blocks_per_sm(kernels[3])};
    const int v = mask.pooled ? 3 : mask.y_mask ? 1 : mask.fwd_mu ? 2 : 0;
    int G;
    long long R;
    persist_dims(per_sm[v], sm_count, M, max_blocks, &G, &R);
    if (!G) return cudaErrorCooperativeLaunchTooLarge;
    return launch_cooperative(kernels[v], G, st, x, mask.pooled ? NULL : dy, pooled_of(mask), (const T *)mask.y_mask,
                              mask.fwd_mu, mask.fwd_scale, M, C, R, psdy, psdyx, out, dx, dx_add, dr, dr_add);
}

cudaError_t mp_bn_persist_forward(cudaStream_t st, int sm_count, mp_dtype dt, const void *x, const void *resid,
                                  void *y, long long M, int C, int max_blocks, float *pmean, float *pm2,
                                  mp_bn_fwd_out out, bool relu) {
    if (!mp_bn_fast_rows_per_pass(dt, C)) return cudaErrorInvalidValue;
    FAST_DISPATCH(dt, PIPE_DISPATCH(return forward_as<T, PIPE>(st, sm_count, (const T *)x, (const T *)resid, (T *)y,
                                                               M, C, max_blocks, pmean, pm2, out, relu)));
    return cudaErrorInvalidValue;
}

cudaError_t mp_bn_persist_backward(cudaStream_t st, int sm_count, mp_dtype dt, const void *x, const void *dy,
                                   mp_bn_fast_mask mask, long long M, int C, int max_blocks, float *psdy,
                                   float *psdyx, mp_bn_bwd_out out, void *dx, bool dx_add, void *dr, bool dr_add) {
    if (!mp_bn_fast_rows_per_pass(dt, C) || !mp_bn_fast_mask_ok(dt, mask, M, C)) return cudaErrorInvalidValue;
    FAST_DISPATCH(dt, PIPE_DISPATCH(return backward_as<T, PIPE>(st, sm_count, (const T *)x, (const T *)dy, mask, M, C,
                                                                max_blocks, psdy, psdyx, out, (T *)dx, dx_add,
                                                                (T *)dr, dr_add)));
    return cudaErrorInvalidValue;
}
