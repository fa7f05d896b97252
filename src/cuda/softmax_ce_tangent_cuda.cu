/* softmax_ce_tangent_cuda.cu — the tangents of softmax cross-entropy on the
 * GPU (softmax_ce_tangent_ref.inc's formulas), from the probabilities p
 * (f32, (N, K)) that forward kept in saved. With L = mean_i (lse(x_i) -
 * x_i[label_i]) and backward dx = g (p - onehot), g = seed / N:
 *   forward   t_L  = mean_i sum_j (p_ij - onehot_ij) t_x_ij
 *   backward  t_dx = g p (t_x - <p, t_x>) + t_g (p - onehot)
 * One warp per sample, sums in f32 in a fixed order (<p, t_x>) and the
 * per-sample loss tangents summed in double in a fixed order (workspace: N
 * doubles, what forward already asks for). A label outside [0, K) makes its
 * sample NaN, as forward does. */
#include <math.h>

#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

#define TWARP 32

__device__ __forceinline__ float tan_warp_sum(float v) { /* fixed order; every lane gets lane 0's sum */
    for (int o = TWARP / 2; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

/* tl[i] = sum_j (p_ij - onehot_ij) t_x_ij */
__global__ void softmax_ce_fwd_tangent_kernel(const float *prob, const int32_t *lab, const void *tx, mp_dtype txdt,
                                              int N, int K, double *tl) {
    const int lane = threadIdx.x % TWARP, warps = gridDim.x * (blockDim.x / TWARP);
    for (int i = blockIdx.x * (blockDim.x / TWARP) + threadIdx.x / TWARP; i < N; i += warps) {
        const long long row = (long long)i * K;
        const int l = lab[i];
        float s = 0.f;
        for (int j = lane; j < K; j += TWARP) s += (prob[row + j] - (j == l ? 1.f : 0.f)) * mp_ld(tx, txdt, row + j);
        s = tan_warp_sum(s);
        if (lane == 0) tl[i] = l >= 0 && l < K ? (double)s : (double)NAN;
    }
}

__global__ void softmax_ce_bwd_tangent_kernel(const float *prob, const int32_t *lab, const void *tx, mp_dtype txdt,
                                              int N, int K, const void *seed, mp_dtype seed_dt, const void *tseed,
                                              mp_dtype tseed_dt, void *tdx, mp_dtype tdxdt) {
    const float g = mp_ld(seed, seed_dt, 0) / (float)N;
    const float tg = tseed ? mp_ld(tseed, tseed_dt, 0) / (float)N : 0.f;
    const int lane = threadIdx.x % TWARP, warps = gridDim.x * (blockDim.x / TWARP);
    for (int i = blockIdx.x * (blockDim.x / TWARP) + threadIdx.x / TWARP; i < N; i += warps) {
        const long long row = (long long)i * K;
        const int l = lab[i];
        float pt = 0.f; /* <p_i, t_x_i> */
        if (tx)
            for (int j = lane; j < K; j += TWARP) pt += prob[row + j] * mp_ld(tx, txdt, row + j);
        pt = tan_warp_sum(pt);
        for (int j = lane; j < K; j += TWARP) {
            const float p = prob[row + j], t = tx ? mp_ld(tx, txdt, row + j) : 0.f;
            const float hot = l < 0 || l >= K ? NAN : (j == l ? 1.f : 0.f);
            mp_st(tdx, tdxdt, row + j, g * p * (t - pt) + tg * (p - hot));
        }
    }
}

static unsigned warp_grid(int N) {
    const int per_block = MP_CUDA_THREADS / TWARP;
    const unsigned g = (unsigned)((N + per_block - 1) / per_block);
    return g < 1 ? 1 : g < 65535 ? g : 65535;
}

extern "C" mp_status mp_cuda_softmax_ce_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    const mp_tensor *tl = &c->t_out, *tx = &c->t_in[0];
    if (!tl->data) return MP_OK;
    if (!tx->data) return mp_cuda_tangent_zero(ctx, c, tl, "forward_tangent");
    const int N = c->in[0].shape.dims[0], K = c->in[0].shape.dims[1];
    double *per_sample = (double *)c->workspace;
    softmax_ce_fwd_tangent_kernel<<<warp_grid(N), MP_CUDA_THREADS, 0, ctx->stream>>>(
        (const float *)c->saved, (const int32_t *)c->in[1].data, tx->data, tx->dtype, N, K, per_sample);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = mp_cuda_sum_to_scalar(ctx, per_sample, N, (double)N, tl->data, tl->dtype);
    return mp_cuda_op_status(c, "forward_tangent", e);
}

extern "C" mp_status mp_cuda_softmax_ce_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    const mp_tensor *tdx = &c->t_d_in[0];
    if (!tdx->data) return MP_OK;
    const int N = c->in[0].shape.dims[0], K = c->in[0].shape.dims[1];
    softmax_ce_bwd_tangent_kernel<<<warp_grid(N), MP_CUDA_THREADS, 0, ctx->stream>>>(
        (const float *)c->saved, (const int32_t *)c->in[1].data, c->t_in[0].data, c->t_in[0].dtype, N, K,
        c->d_out.data, c->d_out.dtype, c->t_d_out.data, c->t_d_out.dtype, tdx->data, tdx->dtype);
    return mp_cuda_op_status(c, "backward_tangent", cudaSuccess);
}
