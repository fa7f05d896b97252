/* batchnorm2d_finalize.cuh — a batch norm pass's finalize: the per-chunk
 * partials merged per channel (in a fixed order: the same bits every run,
 * whichever kernel's block layout runs it), and what batchnorm2d_finalize.h's
 * structs say goes where. CUDA only. */
#ifndef MP_CUDA_BATCHNORM2D_FINALIZE_CUH
#define MP_CUDA_BATCHNORM2D_FINALIZE_CUH

#include "cuda/batchnorm2d_finalize.h"
#include "cuda/cuda_dtype.cuh"

/* v summed down each column of a (ROWS, COLS) shared tile, row r taking row
 * r + ROWS/2, then r + ROWS/4, ... (a fixed tree: the same bits every run);
 * every thread gets its column's total. All the block's threads call it. */
template <int ROWS, int COLS, typename F>
__device__ __forceinline__ F mp_bn_column_sum(F (*s)[COLS], F v, int col, int row) {
    s[row][col] = v;
    __syncthreads();
#pragma unroll
    for (int k = ROWS / 2; k > 0; k >>= 1) {
        if (row < k) s[row][col] += s[row + k][col];
        __syncthreads();
    }
    const F total = s[0][col];
    __syncthreads(); /* s is reused */
    return total;
}

/* Rows of chunk p when M rows are cut into chunks of R (the last may be shorter). */
__device__ __forceinline__ long long mp_bn_chunk_rows(int p, long long M, long long R) {
    return (p + 1LL) * R < M ? R : M - p * R;
}

/* Channel c's mean and sum of squared deviations over M rows from G
 * partials (partial p at p * stride, of mp_bn_chunk_rows(p, M, R) rows):
 * Chan et al.'s merge of all partials at once as two double sums, the mean
 * = sum(n_p mean_p) / M, then m2 = sum(m2_p + n_p (mean_p - mean)^2), each
 * down column `col` of a (ROWS, COLS) tile (row `row` takes partials row,
 * row + ROWS, ...). Every thread of the block calls it; c >= C adds 0. */
template <int ROWS, int COLS>
__device__ __forceinline__ void mp_bn_merge_stats(const float *pmean, const float *pm2, long long stride, int G,
                                                  long long M, long long R, int c, int C, int col, int row,
                                                  double (*s)[COLS], double *mean, double *m2) {
    double a = 0.0, b = 0.0;
    if (c < C)
#pragma unroll 4
        for (int p = row; p < G; p += ROWS) a += (double)mp_bn_chunk_rows(p, M, R) * __ldcg(pmean + p * stride + c);
    *mean = mp_bn_column_sum<ROWS, COLS>(s, a, col, row) / (double)M;
    if (c < C)
#pragma unroll 4
        for (int p = row; p < G; p += ROWS) {
            const double d = __ldcg(pmean + p * stride + c) - *mean;
            b += __ldcg(pm2 + p * stride + c) + (double)mp_bn_chunk_rows(p, M, R) * d * d;
        }
    *m2 = mp_bn_column_sum<ROWS, COLS>(s, b, col, row);
}

/* Channel c's backward sums sa = sum(g), sb = sum(g * (x - mu)) from G
 * partials, laid out and ordered as mp_bn_merge_stats's (f32 sums). */
template <int ROWS, int COLS>
__device__ __forceinline__ void mp_bn_merge_sums(const float *psdy, const float *psdyx, long long stride, int G, int c,
                                                 int C, int col, int row, float (*s_a)[COLS], float (*s_b)[COLS],
                                                 float *sa, float *sb) {
    float a = 0.f, b = 0.f;
    if (c < C)
#pragma unroll 4
        for (int p = row; p < G; p += ROWS) a += __ldcg(psdy + p * stride + c), b += __ldcg(psdyx + p * stride + c);
    *sa = mp_bn_column_sum<ROWS, COLS>(s_a, a, col, row);
    *sb = mp_bn_column_sum<ROWS, COLS>(s_b, b, col, row);
}

/* Channel c's mean and sum of squared deviations over M rows. */
__device__ __forceinline__ void mp_bn_fwd_out_channel(const mp_bn_fwd_out &o, int c, int C, long long M, float mean,
                                                      float m2) {
    const float invstd = 1.f / sqrtf(m2 / (float)M + o.eps), mom = o.momentum;
    o.save_mean[c] = mean;
    o.save_invstd[c] = invstd;
    o.running_mean[c] = (1.f - mom) * o.running_mean[c] + mom * mean;
    o.running_var[c] = (1.f - mom) * o.running_var[c] + mom * (m2 / (float)(M - 1));
    const float scale = mp_ld(o.gamma, o.gamma_dtype, c) * invstd, shift = mp_ld(o.beta, o.beta_dtype, c);
    o.coef[c] = mean;
    o.coef[C + c] = scale;
    o.coef[2 * C + c] = shift;
    o.save_invstd[C + c] = scale;
    o.save_invstd[2 * C + c] = shift;
}

__device__ __forceinline__ float mp_bn_bwd_invstd(const mp_bn_bwd_out &o, int c) {
    return o.batch_stats ? o.save_invstd[c] : 1.f / sqrtf(o.running_var[c] + o.eps);
}

/* dgamma and dbeta of channel c from its sums sa = sum(g), sb = sum(g * (x - mu)). */
__device__ __forceinline__ void mp_bn_bwd_param_grads(const mp_bn_bwd_out &o, int c, float sa, float sb) {
    if (o.dgamma) mp_st(o.dgamma, o.dgamma_dtype, c, sb * mp_bn_bwd_invstd(o, c));
    if (o.dbeta) mp_st(o.dbeta, o.dbeta_dtype, c, sa);
}

/* Channel c's parameter gradients and dx coefficients from its sums over M rows. */
__device__ __forceinline__ void mp_bn_bwd_out_channel(const mp_bn_bwd_out &o, int c, int C, long long M, float sa,
                                                      float sb) {
    const float mu = o.batch_stats ? o.save_mean[c] : o.running_mean[c], is = mp_bn_bwd_invstd(o, c);
    mp_bn_bwd_param_grads(o, c, sa, sb);
    o.coef[c] = mu;
    o.coef[C + c] = mp_ld(o.gamma, o.gamma_dtype, c) * is;
    o.coef[2 * C + c] = o.batch_stats ? sa / (float)M : 0.f;
    o.coef[3 * C + c] = o.batch_stats ? sb * is * is / (float)M : 0.f;
}

#endif
