/* global_avgpool_cuda.cu — global average pooling NHWC (N, C, H, W) -> (N, C)
 * on the GPU (global_avgpool_ref.inc). Forward: a block per (sample, 32
 * channel groups) sums its H*W rows, threads striding over rows, then a
 * fixed-order tree (deterministic); f32 sums, one rounding on store.
 * Backward broadcasts dy / (H*W) to every pixel. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

typedef struct {
    int vec, bx, by;
    unsigned gx, gy;
} gap_launch;

static gap_launch launch_of(int C, int N, bool vec_ok) {
    gap_launch l;
    l.vec = vec_ok && C % 8 == 0 ? 8 : 1;
    int cg = C / l.vec;
    l.bx = 1;
    while (l.bx < cg && l.bx < 32) l.bx <<= 1;
    l.by = MP_CUDA_THREADS / l.bx;
    l.gx = (unsigned)((cg + l.bx - 1) / l.bx);
    l.gy = (unsigned)(N < 65535 ? N : 65535);
    return l;
}

template <int VEC>
__global__ void gap_fwd_kernel(const void *x, mp_dtype xdt, void *y, mp_dtype ydt, int N, int HW, int C) {
    __shared__ float s_acc[MP_CUDA_THREADS * VEC];
    const int g = blockIdx.x * blockDim.x + threadIdx.x, t = threadIdx.y * blockDim.x + threadIdx.x;
    const float inv = 1.f / (float)HW;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.f;
        if (g < C / VEC)
            for (int r = threadIdx.y; r < HW; r += blockDim.y) {
                float v[VEC];
                mp_ldv<VEC>(x, xdt, ((long long)n * HW + r) * C + (long long)g * VEC, v);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += v[k];
            }
#pragma unroll
        for (int k = 0; k < VEC; k++) s_acc[t * VEC + k] = acc[k];
        __syncthreads();
        for (int s = blockDim.y / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.y < s)
#pragma unroll
                for (int k = 0; k < VEC; k++) s_acc[t * VEC + k] += s_acc[(t + s * blockDim.x) * VEC + k];
            __syncthreads();
        }
        if (threadIdx.y == 0 && g < C / VEC) {
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] = s_acc[t * VEC + k] * inv;
            mp_stv<VEC>(y, ydt, (long long)n * C + (long long)g * VEC, acc);
        }
        __syncthreads(); /* s_acc is reused by the next sample */
    }
}

template <int VEC>
__global__ void gap_bwd_kernel(const void *dy, mp_dtype dydt, void *dx, mp_dtype dxdt, int N, int HW, int C) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / VEC) return;
    const float inv = 1.f / (float)HW;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        float v[VEC];
        mp_ldv<VEC>(dy, dydt, (long long)n * C + (long long)g * VEC, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] *= inv;
        for (int r = threadIdx.y; r < HW; r += blockDim.y)
            mp_stv<VEC>(dx, dxdt, ((long long)n * HW + r) * C + (long long)g * VEC, v);
    }
}

static mp_status gap_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                             const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                             size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes, (void)saved_bytes;
    *state = NULL;
    return mp_cuda_op_check_dtypes(d, info, cfg, -1);
}

static mp_status gap_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_shape *s = &c->in[0].shape;
    const int N = s->dims[0], C = s->dims[1], HW = s->dims[2] * s->dims[3];
    const void *x = c->in[0].data;
    void *y = c->out.data;
    const gap_launch l = launch_of(C, N, mp_cuda_aligned16(x) && mp_cuda_aligned16(y));
    const dim3 grid(l.gx, l.gy), block(l.bx, l.by);
    if (l.vec == 8)
        gap_fwd_kernel<8><<<grid, block, 0, ctx->stream>>>(x, c->in[0].dtype, y, c->out.dtype, N, HW, C);
    else
        gap_fwd_kernel<1><<<grid, block, 0, ctx->stream>>>(x, c->in[0].dtype, y, c->out.dtype, N, HW, C);
    return mp_cuda_op_status(c, "forward", cudaSuccess);
}

static mp_status gap_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_tensor *dy = &c->d_out, *dx = &c->d_in[0];
    if (!dx->data) return MP_OK;
    const mp_shape *s = &c->in[0].shape;
    const int N = s->dims[0], C = s->dims[1], HW = s->dims[2] * s->dims[3];
    const gap_launch l = launch_of(C, N, mp_cuda_aligned16(dy->data) && mp_cuda_aligned16(dx->data));
    const dim3 grid(l.gx, l.gy), block(l.bx, l.by);
    if (l.vec == 8)
        gap_bwd_kernel<8><<<grid, block, 0, ctx->stream>>>(dy->data, dy->dtype, dx->data, dx->dtype, N, HW, C);
    else
        gap_bwd_kernel<1><<<grid, block, 0, ctx->stream>>>(dy->data, dy->dtype, dx->data, dx->dtype, N, HW, C);
    return mp_cuda_op_status(c, "backward", cudaSuccess);
}

/* Tangents (cuda_op.h): linear, so forward and backward on the tangents. */
static mp_status gap_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_forward_linear(ctx, c, gap_forward, false);
}
static mp_status gap_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_backward_linear(ctx, c, gap_backward);
}

extern "C" const mp_cuda_op_vtable mp_cuda_global_avgpool_vt = {"global_avgpool",    gap_prepare,  NULL,
                                                                gap_forward,         gap_backward, gap_forward_tangent,
                                                                gap_backward_tangent, NULL};
