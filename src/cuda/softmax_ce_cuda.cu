/* softmax_ce_cuda.cu — softmax cross-entropy on the GPU (softmax_ce_ref.inc):
 * logits (N, K) (f32 under every policy; any float dtype is read) and int32
 * labels (N) -> the batch mean of log-sum-exp(x_i) - x_i[label_i], an f32
 * scalar. One warp per sample: max-subtraction, exp sums reduced in a fixed
 * order, probabilities (f32) kept in saved for backward, per-sample losses
 * summed in double in a fixed order (deterministic). A label outside [0, K)
 * cannot be reported without a host sync: it makes that sample's loss and
 * gradient NaN, which the scaler's non-finite check names. */
#include <math.h>

#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

#define WARP 32

__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return __shfl_sync(0xffffffffu, v, 0);
}

__device__ __forceinline__ float warp_sum(float v) { /* fixed order; every lane gets lane 0's sum */
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

__global__ void softmax_ce_fwd_kernel(const void *x, mp_dtype xdt, const int32_t *lab, int N, int K, float *prob,
                                      double *loss) {
    const int lane = threadIdx.x % WARP;
    const int warps = gridDim.x * (blockDim.x / WARP);
    for (int i = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; i < N; i += warps) {
        const long long row = (long long)i * K;
        float m = -INFINITY;
        for (int j = lane; j < K; j += WARP) m = fmaxf(m, mp_ld(x, xdt, row + j));
        m = warp_max(m);
        float s = 0.f;
        for (int j = lane; j < K; j += WARP) s += expf(mp_ld(x, xdt, row + j) - m);
        const float lse = logf(warp_sum(s));
        for (int j = lane; j < K; j += WARP) prob[row + j] = expf(mp_ld(x, xdt, row + j) - m - lse);
        if (lane == 0) {
            const int l = lab[i];
            loss[i] = l >= 0 && l < K ? (double)m + (double)lse - (double)mp_ld(x, xdt, row + l) : (double)NAN;
        }
    }
}

/* dx = g * (prob - onehot(label)), g = d_out[0] / N read on the device. */
__global__ void softmax_ce_bwd_kernel(const float *prob, const int32_t *lab, int N, int K, const void *seed,
                                      mp_dtype seed_dt, void *dx, mp_dtype dxdt) {
    const float g = mp_ld(seed, seed_dt, 0) / (float)N;
    const long long total = (long long)N * K;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const int i = (int)(t / K), j = (int)(t % K), l = lab[i];
        const float hot = l < 0 || l >= K ? NAN : (j == l ? 1.f : 0.f);
        mp_st(dx, dxdt, t, g * (prob[t] - hot));
    }
}

static mp_status softmax_ce_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                    const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                    size_t *saved_bytes) {
    (void)ctx;
    *state = NULL;
    MP_TRY(mp_cuda_op_check_dtypes(d, info, cfg, 1));
    mp_cuda_raise(saved_bytes, (size_t)mp_shape_numel(&info->in[0]) * sizeof(float));
    mp_cuda_raise(workspace_bytes, (size_t)info->in[0].dims[0] * sizeof(double));
    return MP_OK;
}

static mp_status softmax_ce_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const int N = c->in[0].shape.dims[0], K = c->in[0].shape.dims[1];
    double *loss = (double *)c->workspace;
    const int warps_per_block = MP_CUDA_THREADS / WARP;
    const unsigned grid = (unsigned)((N + warps_per_block - 1) / warps_per_block);
    softmax_ce_fwd_kernel<<<grid < 65535 ? grid : 65535, MP_CUDA_THREADS, 0, ctx->stream>>>(
        c->in[0].data, c->in[0].dtype, (const int32_t *)c->in[1].data, N, K, (float *)c->saved, loss);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = mp_cuda_sum_to_scalar(ctx, loss, N, (double)N, c->out.data, c->out.dtype);
    return mp_cuda_op_status(c, "forward", e);
}

static mp_status softmax_ce_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_tensor *dx = &c->d_in[0];
    if (!dx->data) return MP_OK;
    const int N = c->in[0].shape.dims[0], K = c->in[0].shape.dims[1];
    softmax_ce_bwd_kernel<<<mp_cuda_grid(ctx, (long long)N * K), MP_CUDA_THREADS, 0, ctx->stream>>>(
        (const float *)c->saved, (const int32_t *)c->in[1].data, N, K, c->d_out.data, c->d_out.dtype, dx->data,
        dx->dtype);
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents: softmax_ce_tangent_cuda.cu (its forward tangent's per-sample
 * sums use the N doubles of workspace asked for above). */
extern "C" const mp_cuda_op_vtable mp_cuda_softmax_ce_vt = {"softmax_cross_entropy",
                                                            softmax_ce_prepare,
                                                            NULL,
                                                            softmax_ce_forward,
                                                            softmax_ce_backward,
                                                            mp_cuda_softmax_ce_forward_tangent,
                                                            mp_cuda_softmax_ce_backward_tangent, NULL};
