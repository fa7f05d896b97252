/* mul_tangent_cuda.cu — the tangents of the elementwise product on the GPU
 * (mul.c's): the product is bilinear, so along (t_a, t_b, t_dy)
 *   t_y   = t_a b + a t_b
 *   t_d_a = t_dy b + dy t_b,   t_d_b = t_dy a + dy t_a,
 * each one kernel over any float dtypes, f32 math, one rounding on store. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

struct tan_prod1 { /* p q */
    __device__ float operator()(const float (&a)[2]) const { return a[0] * a[1]; }
};
struct tan_prod2 { /* tp q + p tq, operands (tp, q, p, tq) */
    __device__ float operator()(const float (&a)[4]) const { return a[0] * a[1] + a[2] * a[3]; }
};

/* out = K(tp, q) + K(p, tq) with K the product; a NULL tp or tq drops its
 * term; none left: out = 0. */
static mp_status tan_bilinear(mp_cuda_ctx *ctx, const mp_op_call *c, const mp_tensor *out, const mp_tensor *p,
                              const mp_tensor *tp, const mp_tensor *q, const mp_tensor *tq, const char *which) {
    if (!out->data) return MP_OK;
    const long long n = mp_tensor_numel(out);
    cudaError_t e;
    if (tp->data && tq->data) {
        mp_ew_io<4> io = {{tp->data, q->data, p->data, tq->data}, {tp->dtype, q->dtype, p->dtype, tq->dtype},
                          out->data, out->dtype, n};
        e = mp_ew_launch(ctx, io, tan_prod2());
    } else if (tp->data) {
        e = mp_ew2(ctx, tp, q, out, tan_prod1());
    } else if (tq->data) {
        e = mp_ew2(ctx, p, tq, out, tan_prod1());
    } else {
        return mp_cuda_tangent_zero(ctx, c, out, which);
    }
    return mp_cuda_op_status(c, which, e);
}

extern "C" mp_status mp_cuda_mul_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    return tan_bilinear(ctx, c, &c->t_out, &c->in[0], &c->t_in[0], &c->in[1], &c->t_in[1], "forward_tangent");
}

extern "C" mp_status mp_cuda_mul_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    for (int i = 0; i < 2; i++)
        MP_TRY(tan_bilinear(ctx, c, &c->t_d_in[i], &c->d_out, &c->t_d_out, &c->in[1 - i], &c->t_in[1 - i],
                            "backward_tangent"));
    return MP_OK;
}
