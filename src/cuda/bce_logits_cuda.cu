/* bce_logits_cuda.cu — binary cross-entropy with logits on the GPU
 * (bce_logits_ref.inc): logits and targets of one shape (any float dtypes)
 * -> the mean over all elements of max(x,0) - x*t + log(1 + exp(-|x|)), an
 * f32 scalar. Terms in f32, sums in double: a fixed grid (a function of the
 * element count only) gives per-block partials in a fixed order, then one
 * block sums them, so the loss does not depend on scheduling. Backward:
 * dx = g*(sigmoid(x) - t), dt = -g*x with g = d_out[0] / numel read on the
 * device. Logits and targets share a layout, so NHWC needs no care. */
#include <math.h>

#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

#define BCE_ITEMS_PER_BLOCK 4096
#define BCE_MAX_BLOCKS 1024

static int bce_blocks(long long n) {
    long long b = (n + BCE_ITEMS_PER_BLOCK - 1) / BCE_ITEMS_PER_BLOCK;
    return (int)(b < 1 ? 1 : b > BCE_MAX_BLOCKS ? BCE_MAX_BLOCKS : b);
}

__global__ void bce_partial_kernel(const void *x, mp_dtype xdt, const void *t, mp_dtype tdt, long long n,
                                   double *partial) {
    __shared__ double s[MP_CUDA_THREADS];
    double acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = mp_ld(x, xdt, i), tt = mp_ld(t, tdt, i);
        acc += (double)(fmaxf(v, 0.f) - v * tt + log1pf(expf(-fabsf(v))));
    }
    mp_dev_block_sum(s, acc, &partial[blockIdx.x]);
}

__global__ void bce_bwd_kernel(const void *x, mp_dtype xdt, const void *t, mp_dtype tdt, long long n,
                               const void *seed, mp_dtype seed_dt, void *dx, mp_dtype dxdt, void *dt,
                               mp_dtype dtdt) {
    const float g = (float)((double)mp_ld(seed, seed_dt, 0) / (double)n);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = mp_ld(x, xdt, i);
        if (dx) {
            mp_st(dx, dxdt, i, g * (mp_dev_sigmoid(v) - mp_ld(t, tdt, i)));
        }
        if (dt) mp_st(dt, dtdt, i, -g * v);
    }
}

static mp_status bce_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                             const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                             size_t *saved_bytes) {
    (void)ctx, (void)saved_bytes;
    *state = NULL;
    MP_TRY(mp_cuda_op_check_dtypes(d, info, cfg, -1));
    mp_cuda_raise(workspace_bytes, (size_t)bce_blocks(mp_shape_numel(&info->in[0])) * sizeof(double));
    if (cfg->tangents) mp_cuda_raise(workspace_bytes, mp_cuda_bce_tangent_workspace(mp_shape_numel(&info->in[0])));
    return MP_OK;
}

static mp_status bce_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const long long n = mp_tensor_numel(&c->in[0]);
    const int blocks = bce_blocks(n);
    double *partial = (double *)c->workspace;
    bce_partial_kernel<<<blocks, MP_CUDA_THREADS, 0, ctx->stream>>>(c->in[0].data, c->in[0].dtype, c->in[1].data,
                                                                     c->in[1].dtype, n, partial);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = mp_cuda_sum_to_scalar(ctx, partial, blocks, (double)n, c->out.data, c->out.dtype);
    return mp_cuda_op_status(c, "forward", e);
}

static mp_status bce_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_tensor *dx = &c->d_in[0], *dt = &c->d_in[1];
    if (!dx->data && !dt->data) return MP_OK;
    const long long n = mp_tensor_numel(&c->in[0]);
    bce_bwd_kernel<<<mp_cuda_grid(ctx, n), MP_CUDA_THREADS, 0, ctx->stream>>>(
        c->in[0].data, c->in[0].dtype, c->in[1].data, c->in[1].dtype, n, c->d_out.data, c->d_out.dtype, dx->data,
        dx->dtype, dt->data, dt->dtype);
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents: bce_logits_tangent_cuda.cu. */
extern "C" const mp_cuda_op_vtable mp_cuda_bce_logits_vt = {"bce_with_logits", bce_prepare,
                                                            NULL,              bce_forward,
                                                            bce_backward,      mp_cuda_bce_forward_tangent,
                                                            mp_cuda_bce_backward_tangent, NULL};
