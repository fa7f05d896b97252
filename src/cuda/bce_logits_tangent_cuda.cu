/* bce_logits_tangent_cuda.cu — the tangents of binary cross-entropy with
 * logits on the GPU (bce_logits_tangent_ref.inc's formulas). With
 * s = sigmoid(x), backward dx = g (s - t), dt = -g x, g = seed / numel;
 * along (t_x, t_t, t_g), NULL pointers a zero direction:
 *   forward   t_L  = mean of (s - t) t_x - x t_t
 *   backward  t_dx = g (s (1 - s) t_x - t_t) + t_g (s - t)
 *             t_dt = -g t_x - t_g x
 * Terms in f32; the forward sum in double over a fixed grid (per-block
 * partials in the workspace, then one block in a fixed order), so it does
 * not depend on scheduling. g and t_g are read on the device. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

#define BCE_T_ITEMS_PER_BLOCK 4096
#define BCE_T_MAX_BLOCKS 1024

static int tan_blocks(long long n) {
    long long b = (n + BCE_T_ITEMS_PER_BLOCK - 1) / BCE_T_ITEMS_PER_BLOCK;
    return (int)(b < 1 ? 1 : b > BCE_T_MAX_BLOCKS ? BCE_T_MAX_BLOCKS : b);
}

extern "C" size_t mp_cuda_bce_tangent_workspace(long long n) { return (size_t)tan_blocks(n) * sizeof(double); }

__global__ void bce_fwd_tangent_kernel(const void *x, mp_dtype xdt, const void *t, mp_dtype tdt, const void *tx,
                                       mp_dtype txdt, const void *tt, mp_dtype ttdt, long long n, double *partial) {
    __shared__ double s[MP_CUDA_THREADS];
    double acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = mp_ld(x, xdt, i);
        float r = 0.f;
        if (tx) r += (mp_dev_sigmoid(v) - mp_ld(t, tdt, i)) * mp_ld(tx, txdt, i);
        if (tt) r -= v * mp_ld(tt, ttdt, i);
        acc += (double)r;
    }
    mp_dev_block_sum(s, acc, &partial[blockIdx.x]);
}

__global__ void bce_bwd_tangent_kernel(const void *x, mp_dtype xdt, const void *t, mp_dtype tdt, const void *tx,
                                       mp_dtype txdt, const void *tt, mp_dtype ttdt, long long n, const void *seed,
                                       mp_dtype seed_dt, const void *tseed, mp_dtype tseed_dt, void *tdx,
                                       mp_dtype tdxdt, void *tdtg, mp_dtype tdtgdt) {
    const float g = (float)((double)mp_ld(seed, seed_dt, 0) / (double)n);
    const float tg = tseed ? (float)((double)mp_ld(tseed, tseed_dt, 0) / (double)n) : 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = mp_ld(x, xdt, i), txv = tx ? mp_ld(tx, txdt, i) : 0.f;
        if (tdx) {
            const float sg = mp_dev_sigmoid(v), ttv = tt ? mp_ld(tt, ttdt, i) : 0.f;
            mp_st(tdx, tdxdt, i, g * (sg * (1.f - sg) * txv - ttv) + tg * (sg - mp_ld(t, tdt, i)));
        }
        if (tdtg) mp_st(tdtg, tdtgdt, i, -g * txv - tg * v);
    }
}

extern "C" mp_status mp_cuda_bce_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    const mp_tensor *tl = &c->t_out, *tx = &c->t_in[0], *tt = &c->t_in[1];
    if (!tl->data) return MP_OK;
    if (!tx->data && !tt->data) return mp_cuda_tangent_zero(ctx, c, tl, "forward_tangent");
    const long long n = mp_tensor_numel(&c->in[0]);
    const int blocks = tan_blocks(n);
    double *partial = (double *)c->workspace;
    bce_fwd_tangent_kernel<<<blocks, MP_CUDA_THREADS, 0, ctx->stream>>>(c->in[0].data, c->in[0].dtype, c->in[1].data,
                                                                        c->in[1].dtype, tx->data, tx->dtype, tt->data,
                                                                        tt->dtype, n, partial);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = mp_cuda_sum_to_scalar(ctx, partial, blocks, (double)n, tl->data, tl->dtype);
    return mp_cuda_op_status(c, "forward_tangent", e);
}

extern "C" mp_status mp_cuda_bce_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    const mp_tensor *tdx = &c->t_d_in[0], *tdt = &c->t_d_in[1];
    if (!tdx->data && !tdt->data) return MP_OK;
    const long long n = mp_tensor_numel(&c->in[0]);
    bce_bwd_tangent_kernel<<<mp_cuda_grid(ctx, n), MP_CUDA_THREADS, 0, ctx->stream>>>(
        c->in[0].data, c->in[0].dtype, c->in[1].data, c->in[1].dtype, c->t_in[0].data, c->t_in[0].dtype,
        c->t_in[1].data, c->t_in[1].dtype, n, c->d_out.data, c->d_out.dtype, c->t_d_out.data, c->t_d_out.dtype,
        tdx->data, tdx->dtype, tdt->data, tdt->dtype);
    return mp_cuda_op_status(c, "backward_tangent", cudaSuccess);
}
