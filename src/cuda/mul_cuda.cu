/* mul_cuda.cu — elementwise product on the GPU (mul_ref.inc): y = a * b over
 * same-shaped tensors, each input in its own dtype, the product in f32 and
 * one rounding on store. Backward: d_a = d_out * b, d_b = d_out * a, each
 * written in its input gradient's dtype. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

/* a * b in f32. */
struct prod2 {
    __device__ float operator()(const float (&a)[2]) const { return a[0] * a[1]; }
};

static mp_status mul_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_op_status(c, "forward", mp_ew2(ctx, &c->in[0], &c->in[1], &c->out, prod2()));
}

static mp_status mul_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        if (c->d_in[i].data) e = mp_ew2(ctx, &c->d_out, &c->in[1 - i], &c->d_in[i], prod2());
    return mp_cuda_op_status(c, "backward", e);
}

/* Tangents: mul_tangent_cuda.cu. */
extern "C" const mp_cuda_op_vtable mp_cuda_mul_vt = {"mul",       mp_cuda_prepare_stateless,     NULL,
                                                     mul_forward, mul_backward,                  mp_cuda_mul_forward_tangent,
                                                     mp_cuda_mul_backward_tangent, NULL};
