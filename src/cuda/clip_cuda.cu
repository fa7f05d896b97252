/* clip_cuda.cu — the global gradient norm and clipping on the device: a
 * multi-tensor pass writes one double sum of squares per block, one block
 * adds them in a fixed order and takes the root (and the clip coefficient,
 * as the CPU trainer computes it), a last pass scales or clamps. Nothing
 * leaves the device. */
#include "cuda/float_bits.cuh"
#include "cuda/grads_cuda.cuh"

#define FINISH_THREADS 256

/* Sum over the block, valid in thread 0; fixed order. */
static __device__ double block_sum(double x) {
    __shared__ double warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = x;
    __syncthreads();
    const int warps = (blockDim.x + 31) >> 5;
    x = threadIdx.x < warps ? warp_sums[threadIdx.x] : 0.0;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
    return x;
}

__global__ void __launch_bounds__(MP_MT_THREADS) sum_squares_kernel(mp_mt_table t, mp_norm_scratch *s) {
    double acc = 0.0;
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        const double g = mp_dev_load_any(ten.ptr[0], ten.flags & MP_MT_DTYPE_MASK, i);
        acc += g * g;
    });
    acc = block_sum(acc);
    if (threadIdx.x == 0) s->partials[blockIdx.x] = acc;
}

/* norm = sqrt(sum of partials); clip when norm > max_norm (max_norm 0: no
 * clip decision) with coef = (float)(max_norm / (norm + 1e-6)). */
__global__ void __launch_bounds__(FINISH_THREADS) norm_finish_kernel(mp_norm_scratch *s, int n_partials, float max_norm,
                                                                     double *norm_out) {
    double acc = 0.0;
    for (int j = threadIdx.x; j < n_partials; j += blockDim.x) acc += s->partials[j];
    acc = block_sum(acc);
    if (threadIdx.x != 0) return;
    const double norm = sqrt(acc);
    s->norm = norm;
    if (norm_out) *norm_out = norm;
    s->clip = max_norm > 0.0f && norm > (double)max_norm;
    s->coef = s->clip ? (float)((double)max_norm / (norm + 1e-6)) : 1.0f;
}

static mp_status norm_into_scratch(mp_cuda_ctx *ctx, mp_cuda_grads *g, float max_norm, double *norm_out) {
    if (g->table.grid > 0) {
        sum_squares_kernel<<<g->table.grid, MP_MT_THREADS, 0, ctx->stream>>>(g->table, g->scratch);
        MP_TRY(mp_mt_launched("sum_squares_kernel"));
    }
    norm_finish_kernel<<<1, FINISH_THREADS, 0, ctx->stream>>>(g->scratch, (int)g->table.grid, max_norm, norm_out);
    return mp_mt_launched("norm_finish_kernel");
}

mp_status mp_cuda_grad_norm(mp_cuda_ctx *ctx, mp_cuda_grads *g, double *norm_dev) {
    MP_ASSERT(ctx && g && norm_dev);
    return norm_into_scratch(ctx, g, 0.0f, norm_dev);
}

__global__ void __launch_bounds__(MP_MT_THREADS) scale_by_coef_kernel(mp_mt_table t, const mp_norm_scratch *s) {
    if (!s->clip) return;
    const float f = s->coef;
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        const int dt = ten.flags & MP_MT_DTYPE_MASK;
        mp_dev_store_any(ten.ptr[0], dt, i, MP_FMUL(mp_dev_load_any(ten.ptr[0], dt, i), f));
    });
}

mp_status mp_cuda_clip_by_norm(mp_cuda_ctx *ctx, mp_cuda_grads *g, float max_norm, double *norm_dev) {
    MP_ASSERT(ctx && g);
    if (!(max_norm > 0.0f))
        return mp_error(MP_ERR_INVALID_ARG, "cuda clip: --clip-norm %g must be > 0", (double)max_norm);
    MP_TRY(norm_into_scratch(ctx, g, max_norm, norm_dev));
    if (g->table.grid == 0) return MP_OK;
    scale_by_coef_kernel<<<g->table.grid, MP_MT_THREADS, 0, ctx->stream>>>(g->table, g->scratch);
    return mp_mt_launched("scale_by_coef_kernel");
}

__global__ void __launch_bounds__(MP_MT_THREADS) clamp_kernel(mp_mt_table t, float v) {
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        const int dt = ten.flags & MP_MT_DTYPE_MASK;
        mp_dev_store_any(ten.ptr[0], dt, i, fminf(fmaxf(mp_dev_load_any(ten.ptr[0], dt, i), -v), v));
    });
}

mp_status mp_cuda_clip_by_value(mp_cuda_ctx *ctx, const mp_cuda_grads *g, float clip_value) {
    MP_ASSERT(ctx && g);
    if (!(clip_value > 0.0f))
        return mp_error(MP_ERR_INVALID_ARG, "cuda clip: --clip-value %g must be > 0", (double)clip_value);
    if (g->table.grid == 0) return MP_OK;
    clamp_kernel<<<g->table.grid, MP_MT_THREADS, 0, ctx->stream>>>(g->table, clip_value);
    return mp_mt_launched("clamp_kernel");
}
