/* pool2d_tangent_cuda.cu — max pooling's forward tangent on the GPU: each
 * output's tangent is the tangent of its window's argmax input, the index
 * h*W + w that forward kept per output element in saved (NHWC order, one
 * per channel). NHWC: output j = ((n*OH + oh)*OW + ow)*C + c reads input
 * ((n*H*W) + arg[j])*C + c. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

__global__ void maxpool_gather_kernel(const void *tx, mp_dtype txdt, const int32_t *arg, void *ty, mp_dtype tydt,
                                      int C, long long in_plane, long long out_plane, long long total) {
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const long long c = j % C, n = j / (out_plane * C);
        mp_st(ty, tydt, j, mp_ld(tx, txdt, (n * in_plane + arg[j]) * C + c));
    }
}

extern "C" mp_status mp_cuda_maxpool_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    const mp_tensor *tx = &c->t_in[0], *ty = &c->t_out;
    if (!ty->data) return MP_OK;
    if (!tx->data) return mp_cuda_tangent_zero(ctx, c, ty, "forward_tangent");
    const mp_shape *x = &c->in[0].shape, *y = &c->out.shape;
    const long long total = mp_tensor_numel(ty);
    maxpool_gather_kernel<<<mp_cuda_grid(ctx, total), MP_CUDA_THREADS, 0, ctx->stream>>>(
        tx->data, tx->dtype, (const int32_t *)c->saved, ty->data, ty->dtype, x->dims[1],
        (long long)x->dims[2] * x->dims[3], (long long)y->dims[2] * y->dims[3], total);
    return mp_cuda_op_status(c, "forward_tangent", cudaSuccess);
}
