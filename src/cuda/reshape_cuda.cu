/* reshape_cuda.cu — per-sample reshape on the GPU with the CPU's meaning:
 * the logical element order is NCHW (reshape.c copies NCHW memory), while
 * 4-D activations here are NHWC. So flattening (N, C, H, W) -> (N, C*H*W)
 * is a per-sample transpose (HW, C) -> (C, HW), the reverse for 2-D -> 4-D,
 * a gather for 4-D -> 4-D, and a plain copy when both layouts already agree
 * (2-D, C == 1 or H*W == 1). Backward is the same move from d_out to d_in. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

/* NHWC memory order equals the logical NCHW order. */
static bool layout_is_logical(const mp_shape *s) {
    return s->ndim != 4 || s->dims[1] == 1 || (long long)s->dims[2] * s->dims[3] == 1;
}

/* dst (n, h', w', c') = src at the same per-sample NCHW index; both 4-D NHWC. */
__global__ void reshape_gather_kernel(const void *src, mp_dtype sdt, int C, int H, int W, void *dst, mp_dtype ddt,
                                      int C2, int H2, int W2, long long total) {
    const long long S = (long long)C * H * W;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const long long n = j / S, q = j % S;
        const long long c2 = q % C2, pix = q / C2, w2 = pix % W2, h2 = pix / W2;
        const long long f = (c2 * H2 + h2) * W2 + w2; /* logical index in the sample */
        const long long c = f / ((long long)H * W), rem = f % ((long long)H * W);
        mp_st(dst, ddt, j, mp_ld(src, sdt, n * S + rem * C + c));
    }
}

static cudaError_t reshape_move(mp_cuda_ctx *ctx, const mp_tensor *src, const mp_tensor *dst) {
    const mp_shape *a = &src->shape, *b = &dst->shape;
    const long long N = a->dims[0], n = mp_tensor_numel(dst);
    const bool la = layout_is_logical(a), lb = layout_is_logical(b);
    if (la && lb) return mp_cuda_copy_convert(ctx, src->data, src->dtype, dst->data, dst->dtype, n);
    if (!la && lb) /* (N, HW, C) -> (N, C, HW) */
        return mp_cuda_transpose(ctx, src->data, src->dtype, dst->data, dst->dtype, N,
                                 (long long)a->dims[2] * a->dims[3], a->dims[1]);
    if (la && !lb) /* (N, C, HW) -> (N, HW, C) */
        return mp_cuda_transpose(ctx, src->data, src->dtype, dst->data, dst->dtype, N, b->dims[1],
                                 (long long)b->dims[2] * b->dims[3]);
    reshape_gather_kernel<<<mp_cuda_grid(ctx, n), MP_CUDA_THREADS, 0, ctx->stream>>>(
        src->data, src->dtype, a->dims[1], a->dims[2], a->dims[3], dst->data, dst->dtype, b->dims[1], b->dims[2],
        b->dims[3], n);
    return cudaGetLastError();
}

static mp_status reshape_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                 const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                 size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes, (void)saved_bytes;
    *state = NULL;
    return mp_cuda_op_check_dtypes(d, info, cfg, -1);
}

static mp_status reshape_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_op_status(c, "forward", reshape_move(ctx, &c->in[0], &c->out));
}

static mp_status reshape_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    if (!c->d_in[0].data) return MP_OK;
    return mp_cuda_op_status(c, "backward", reshape_move(ctx, &c->d_out, &c->d_in[0]));
}

/* Tangents (cuda_op.h): moves, linear, so the tangents are the same moves. */
static mp_status reshape_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_forward_linear(ctx, c, reshape_forward, false);
}
static mp_status reshape_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_backward_linear(ctx, c, reshape_backward);
}

extern "C" const mp_cuda_op_vtable mp_cuda_reshape_vt = {"reshape",        reshape_prepare,         NULL,
                                                         reshape_forward,  reshape_backward,        reshape_forward_tangent,
                                                         reshape_backward_tangent, NULL};
