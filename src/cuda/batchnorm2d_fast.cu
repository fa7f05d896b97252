/* batchnorm2d_fast.cu — see batchnorm2d_fast.h. */
#include "cuda/batchnorm2d_fast.h"

#include "cuda/batchnorm2d_fast.cuh"

/* ---- one pass per kernel ------------------------------------------------ */

/* Its loads unpipelined: at two blocks per SM the pipelined form measured
 * 5-9 % slower (bench/NOTES.md v0.37); the one-kernel forward, at one block
 * per SM, pipelines them (batchnorm2d_persist.cu). */
template <typename T>
__global__ void __launch_bounds__(FAST_THREADS) fast_stats_kernel(const T *x, long long M, int C, long long R, float *pmean,
                                                             float *pm2) {
    fast_stats_block<T, false>(x, M, C, R, pmean, pm2);
}

template <typename T, bool RELU, bool RESID, bool PIPE>
__global__ void __launch_bounds__(FAST_THREADS) fast_apply_kernel(const T *x, const T *resid, T *y, long long M, int C,
                                                             long long R, const float *coef) {
    fast_apply_block<T, RELU, RESID, PIPE>(x, resid, y, M, C, R, coef, true);
}

template <typename T, int MASK, bool PIPE, bool POOLED>
__global__ void __launch_bounds__(FAST_THREADS, 2)
    fast_bwd_reduce_kernel(const T *x, const T *dy, pooled_dy pd, const T *ym, const float *fwd_mu,
                           const float *fwd_scale, const float *mu, long long M, int C, long long R, float *psdy,
                           float *psdyx) {
    fast_bwd_reduce_block<T, MASK, PIPE, POOLED>(x, dy, pd, ym, fwd_mu, fwd_scale, mu, M, C, R, psdy, psdyx);
}

template <typename T, int MASK, bool PIPE, bool POOLED>
__global__ void __launch_bounds__(FAST_THREADS, 2)
    fast_dx_kernel(const T *x, const T *dy, pooled_dy pd, const T *ym, const float *fwd_mu, const float *fwd_scale,
                   T *dx, bool dx_add, T *dr, bool dr_add, long long M, int C, long long R, const float *coef) {
    fast_dx_block<T, MASK, PIPE, POOLED>(x, dy, pd, ym, fwd_mu, fwd_scale, dx, dx_add, dr, dr_add, M, C, R, coef,
                                         true);
}

/* ---- host side ---------------------------------------------------------- */

int mp_bn_fast_rows_per_pass(mp_dtype dt, int C) {
    const int v = vec_of(dt);
    if (!v || C <= 0 || C % v || C / v > FAST_THREADS) return 0;
    return FAST_THREADS / (C / v);
}

void mp_bn_row_chunks(long long M, long long min_rows, long long most, int *G, long long *R) {
    long long g = (M + min_rows - 1) / min_rows;
    if (g > most) g = most;
    if (g < 1) g = 1;
    *R = (M + g - 1) / g;
    *G = (int)((M + *R - 1) / *R); /* no empty chunk */
}

void mp_bn_fast_chunks(long long M, int rpp, int sm_count, int *G, long long *R) {
    mp_bn_row_chunks(M, 8LL * rpp, 2LL * (sm_count > 0 ? sm_count : 1), G, R);
}

cudaError_t mp_bn_fast_stats(cudaStream_t st, mp_dtype dt, const void *x, long long M, int C, int G, long long R,
                             float *pmean, float *pm2) {
    FAST_DISPATCH(dt, (fast_stats_kernel<T><<<G, FAST_THREADS, 0, st>>>((const T *)x, M, C, R, pmean, pm2)));
    return cudaGetLastError();
}

cudaError_t mp_bn_fast_apply(cudaStream_t st, mp_dtype dt, const void *x, const void *resid, void *y, long long M,
                             int C, int G, long long R, const float *coef, bool relu) {
    FAST_DISPATCH(dt, PIPE_DISPATCH({
        const T *xt = (const T *)x, *rt = (const T *)resid;
        T *yt = (T *)y;
        if (resid && relu)
            fast_apply_kernel<T, true, true, PIPE><<<G, FAST_THREADS, 0, st>>>(xt, rt, yt, M, C, R, coef);
        else if (resid)
            fast_apply_kernel<T, false, true, PIPE><<<G, FAST_THREADS, 0, st>>>(xt, rt, yt, M, C, R, coef);
        else if (relu)
            fast_apply_kernel<T, true, false, PIPE><<<G, FAST_THREADS, 0, st>>>(xt, rt, yt, M, C, R, coef);
        else
            fast_apply_kernel<T, false, false, PIPE><<<G, FAST_THREADS, 0, st>>>(xt, rt, yt, M, C, R, coef);
    }));
    return cudaGetLastError();
}

bool mp_bn_fast_pooled_ok(mp_dtype dt, long long N, int C, int H, int W, int k) {
    return mp_bn_fast_rows_per_pass(dt, C) && k >= 1 && H >= k && W >= k && N >= 1 &&
           N * H * W < (1LL << 31);
}

bool mp_bn_fast_mask_ok(mp_dtype dt, mp_bn_fast_mask mask, long long M, int C) {
    if (!mask.pooled) return true;
    const long long img = (long long)mask.H * mask.W;
    return mask.fwd_mu && !mask.y_mask && img > 0 && M % img == 0 &&
           mp_bn_fast_pooled_ok(dt, M / img, C, mask.H, mask.W, mask.k);
}

cudaError_t mp_bn_fast_bwd_reduce(cudaStream_t st, mp_dtype dt, const void *x, const void *dy, mp_bn_fast_mask mask,
                                  const float *mu, long long M, int C, int G, long long R, float *psdy,
                                  float *psdyx) {
    if (!mp_bn_fast_mask_ok(dt, mask, M, C)) return cudaErrorInvalidValue;
    const pooled_dy pd = pooled_of(mask);
    FAST_DISPATCH(dt, PIPE_DISPATCH({
        const T *xt = (const T *)x, *dyt = (const T *)dy, *ym = (const T *)mask.y_mask;
        if (mask.pooled)
            fast_bwd_reduce_kernel<T, MASK_RECOMPUTE, PIPE, true><<<G, FAST_THREADS, 0, st>>>(
                xt, NULL, pd, NULL, mask.fwd_mu, mask.fwd_scale, mu, M, C, R, psdy, psdyx);
        else if (ym)
            fast_bwd_reduce_kernel<T, MASK_Y, PIPE, false><<<G, FAST_THREADS, 0, st>>>(xt, dyt, pd, ym, NULL, NULL, mu,
                                                                                       M, C, R, psdy, psdyx);
        else if (mask.fwd_mu)
            fast_bwd_reduce_kernel<T, MASK_RECOMPUTE, PIPE, false><<<G, FAST_THREADS, 0, st>>>(
                xt, dyt, pd, NULL, mask.fwd_mu, mask.fwd_scale, mu, M, C, R, psdy, psdyx);
        else
            fast_bwd_reduce_kernel<T, MASK_NONE, PIPE, false><<<G, FAST_THREADS, 0, st>>>(xt, dyt, pd, NULL, NULL, NULL,
                                                                                          mu, M, C, R, psdy, psdyx);
    }));
    return cudaGetLastError();
}

cudaError_t mp_bn_fast_dx(cudaStream_t st, mp_dtype dt, const void *x, const void *dy, mp_bn_fast_mask mask,
                          void *dx, bool dx_add, void *dr, bool dr_add, long long M, int C, int G, long long R,
                          const float *coef) {
    if (!mp_bn_fast_mask_ok(dt, mask, M, C)) return cudaErrorInvalidValue;
    const pooled_dy pd = pooled_of(mask);
    FAST_DISPATCH(dt, PIPE_DISPATCH({
        const T *xt = (const T *)x, *dyt = (const T *)dy, *ym = (const T *)mask.y_mask;
        T *dxt = (T *)dx, *drt = (T *)dr;
        if (mask.pooled)
            fast_dx_kernel<T, MASK_RECOMPUTE, PIPE, true><<<G, FAST_THREADS, 0, st>>>(
                xt, NULL, pd, NULL, mask.fwd_mu, mask.fwd_scale, dxt, dx_add, drt, dr_add, M, C, R, coef);
        else if (ym)
            fast_dx_kernel<T, MASK_Y, PIPE, false><<<G, FAST_THREADS, 0, st>>>(xt, dyt, pd, ym, NULL, NULL, dxt, dx_add,
                                                                               drt, dr_add, M, C, R, coef);
        else if (mask.fwd_mu)
            fast_dx_kernel<T, MASK_RECOMPUTE, PIPE, false><<<G, FAST_THREADS, 0, st>>>(
                xt, dyt, pd, NULL, mask.fwd_mu, mask.fwd_scale, dxt, dx_add, drt, dr_add, M, C, R, coef);
        else
            fast_dx_kernel<T, MASK_NONE, PIPE, false><<<G, FAST_THREADS, 0, st>>>(xt, dyt, pd, NULL, NULL, NULL, dxt,
                                                                                  dx_add, drt, dr_add, M, C, R, coef);
    }));
    return cudaGetLastError();
}
