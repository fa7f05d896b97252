/* batchnorm2d_finalize.cu — the three-kernel batch norm's finalize kernels
 * (batchnorm2d_finalize.h): one thread per channel and slice of the
 * partials, FIN_BX channels by FIN_BY slices per block, merged as
 * batchnorm2d_finalize.cuh says (the one-kernel passes' finalize phase runs
 * the same merge, so it writes the same bits). */
#include "cuda/batchnorm2d_finalize.cuh"

enum {
    FIN_BX = 32, /* channels per block */
    FIN_BY = 32  /* slices of the partials per channel, summed in parallel */
};

/* Per channel: the G partials merged (two fixed-order f64 sums); then mean
 * and 1/std saved, the running statistics moved, the coefficients (mu,
 * scale, shift) written; or, with `local`, the merged (mean, m2) only. */
__global__ void __launch_bounds__(FIN_BX * FIN_BY)
    finalize_forward_kernel(const float *pmean, const float *pm2, long long stride, int G, long long M, long long R,
                            int C, mp_bn_fwd_out out, float *local) {
    __shared__ double s_sum[FIN_BY][FIN_BX];
    const int c = blockIdx.x * FIN_BX + threadIdx.x, tx = threadIdx.x, ty = threadIdx.y;
    double mean_d, m2_d;
    mp_bn_merge_stats<FIN_BY, FIN_BX>(pmean, pm2, stride, G, M, R, c, C, tx, ty, s_sum, &mean_d, &m2_d);
    if (ty != 0 || c >= C) return;
    const float mean = (float)mean_d, m2 = (float)m2_d;
    if (local) {
        local[c] = mean, local[C + c] = m2;
        return;
    }
    mp_bn_fwd_out_channel(out, c, C, M, mean, m2);
}

/* Per channel: the G partial sums summed (fixed order); dgamma = sum(dy *
 * xhat), dbeta = sum(dy), the coefficients (mu, k, a, b) of dx = k * (dy -
 * a - (x - mu) * b), k = gamma / std, and with batch statistics a =
 * mean(dy), b = mean(dy * (x - mu)) / var (else a = b = 0); or, with
 * `local`, dgamma and dbeta (a rank's own: data parallelism averages them)
 * and the sums, which synchronized batch norm then sums over the ranks. */
__global__ void __launch_bounds__(FIN_BX * FIN_BY)
    finalize_backward_kernel(const float *psdy, const float *psdyx, long long stride, int G, long long M, int C,
                             mp_bn_bwd_out out, float *local) {
    __shared__ float s_a[FIN_BY][FIN_BX], s_b[FIN_BY][FIN_BX];
    const int c = blockIdx.x * FIN_BX + threadIdx.x, tx = threadIdx.x, ty = threadIdx.y;
    float sa, sb;
    mp_bn_merge_sums<FIN_BY, FIN_BX>(psdy, psdyx, stride, G, c, C, tx, ty, s_a, s_b, &sa, &sb);
    if (ty != 0 || c >= C) return;
    if (local) {
        mp_bn_bwd_param_grads(out, c, sa, sb);
        local[c] = sa, local[C + c] = sb;
        return;
    }
    mp_bn_bwd_out_channel(out, c, C, M, sa, sb);
}

cudaError_t mp_bn_finalize_forward(cudaStream_t st, const float *pmean, const float *pm2, long long stride, int G,
                                   long long M, long long R, int C, mp_bn_fwd_out out, float *local) {
    if (C < 1) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((C + FIN_BX - 1) / FIN_BX)), block(FIN_BX, FIN_BY);
    finalize_forward_kernel<<<grid, block, 0, st>>>(pmean, pm2, stride, G, M, R, C, out, local);
    return cudaGetLastError();
}

cudaError_t mp_bn_finalize_backward(cudaStream_t st, const float *psdy, const float *psdyx, long long stride, int G,
                                    long long M, int C, mp_bn_bwd_out out, float *local) {
    if (C < 1) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((C + FIN_BX - 1) / FIN_BX)), block(FIN_BX, FIN_BY);
    finalize_backward_kernel<<<grid, block, 0, st>>>(psdy, psdyx, stride, G, M, C, out, local);
    return cudaGetLastError();
}
