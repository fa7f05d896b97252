/* add_cuda.cu — residual add on the GPU (add_ref.inc): y = a + b over
 * same-shaped tensors, each input in its own dtype, the sum in f32 and one
 * rounding on store. Backward hands d_out to both inputs (converted when an
 * input's gradient has another dtype). */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

static mp_status add_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_op_status(c, "forward", mp_ew2(ctx, &c->in[0], &c->in[1], &c->out, mp_sum2()));
}

/* d_in = d_out for both inputs: a copy each, none where the plan made an
 * input's gradient d_out's memory (mp_cuda_copy_convert skips a copy onto
 * itself; graph/plan_grad_alias.h). */
static mp_status add_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        if (c->d_in[i].data)
            e = mp_cuda_copy_convert(ctx, c->d_out.data, c->d_out.dtype, c->d_in[i].data, c->d_in[i].dtype,
                                     mp_tensor_numel(&c->d_out));
    return mp_cuda_op_status(c, "backward", e);
}

/* Tangents (cuda_op.h): add is linear, t_out = t_a + t_b (a NULL tangent is
 * zero) and backward's tangent is backward on t_d_out. */
static mp_status add_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    const mp_tensor *a = &c->t_in[0], *b = &c->t_in[1], *y = &c->t_out;
    if (!y->data) return MP_OK;
    const long long n = mp_tensor_numel(y);
    if (a->data && b->data)
        return mp_cuda_tangent_add(ctx, c, a->data, a->dtype, b->data, b->dtype, y->data, y->dtype, n,
                                   "forward_tangent");
    if (!a->data && !b->data) return mp_cuda_tangent_zero(ctx, c, y, "forward_tangent");
    const mp_tensor *one = a->data ? a : b;
    return mp_cuda_op_status(c, "forward_tangent",
                             mp_cuda_copy_convert(ctx, one->data, one->dtype, y->data, y->dtype, n));
}

static mp_status add_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    return mp_cuda_tangent_backward_linear(ctx, c, add_backward);
}

extern "C" const mp_cuda_op_vtable mp_cuda_add_vt = {"add",       mp_cuda_prepare_stateless, NULL,
                                                     add_forward, add_backward,              add_forward_tangent,
                                                     add_backward_tangent, NULL};
