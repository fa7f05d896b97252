/* activation_tangent_cuda.cu — the backward tangents of tanh and sigmoid on
 * the GPU (activation_tangent_ref.inc's formulas): backward dx = dy f'(y)
 * with f' a function of the output y moves with dy and with y, so along
 * (t_dy, t_y):
 *   tanh     t_dx = t_dy (1 - y^2) - 2 y t_y dy
 *   sigmoid  t_dx = t_dy y (1 - y) + (1 - 2y) t_y dy
 * t_y (the forward tangent, t_out) or t_dy may be NULL: a zero direction.
 * Any float dtypes, f32 math, one rounding on store. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

__global__ void smooth_bwd_tangent_kernel(const void *y, mp_dtype ydt, const void *ty, mp_dtype tydt, const void *dy,
                                          mp_dtype dydt, const void *tdy, mp_dtype tdydt, void *tdx, mp_dtype tdxdt,
                                          long long n, bool is_tanh) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float v = mp_ld(y, ydt, i);
        const float t = ty ? mp_ld(ty, tydt, i) : 0.f, g = tdy ? mp_ld(tdy, tdydt, i) : 0.f;
        const float d = ty ? mp_ld(dy, dydt, i) : 0.f;
        const float r = is_tanh ? g * (1.f - v * v) - 2.f * v * t * d : g * v * (1.f - v) + (1.f - 2.f * v) * t * d;
        mp_st(tdx, tdxdt, i, r);
    }
}

extern "C" mp_status mp_cuda_smooth_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    const mp_tensor *tdx = &c->t_d_in[0];
    if (!tdx->data) return MP_OK;
    if (!c->t_out.data && !c->t_d_out.data) return mp_cuda_tangent_zero(ctx, c, tdx, "backward_tangent");
    const long long n = mp_tensor_numel(tdx);
    smooth_bwd_tangent_kernel<<<mp_cuda_grid(ctx, n), MP_CUDA_THREADS, 0, ctx->stream>>>(
        c->out.data, c->out.dtype, c->t_out.data, c->t_out.dtype, c->d_out.data, c->d_out.dtype, c->t_d_out.data,
        c->t_d_out.dtype, tdx->data, tdx->dtype, n, c->desc->kind == MP_OP_TANH);
    return mp_cuda_op_status(c, "backward_tangent", cudaSuccess);
}
