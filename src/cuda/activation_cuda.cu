/* activation_cuda.cu — relu, leaky relu, tanh and sigmoid on the GPU: one
 * elementwise kernel each way (mp_ew_kernel), any input/output dtypes, f32
 * math, one rounding on store. Same formulas as activation_ref.inc: NaN
 * propagates, relu/tanh/sigmoid backward read the output, leaky relu reads
 * the input. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

struct relu_fwd {
    __device__ float operator()(const float (&a)[1]) const { return a[0] < 0.f ? 0.f : a[0]; }
};
struct relu_bwd { /* (y, dy): y > 0 exactly where x > 0; a NaN y passes dy */
    __device__ float operator()(const float (&a)[2]) const { return a[0] <= 0.f ? 0.f : a[1]; }
};
struct leaky_fwd {
    float slope;
    __device__ float operator()(const float (&a)[1]) const { return a[0] > 0.f ? a[0] : slope * a[0]; }
};
struct leaky_bwd { /* (x, dy) */
    float slope;
    __device__ float operator()(const float (&a)[2]) const { return a[0] <= 0.f ? slope * a[1] : a[1]; }
};
struct tanh_fwd {
    __device__ float operator()(const float (&a)[1]) const { return tanhf(a[0]); }
};
struct tanh_bwd { /* (y, dy) */
    __device__ float operator()(const float (&a)[2]) const { return a[1] * (1.f - a[0] * a[0]); }
};
struct sigmoid_fwd { /* split by sign so exp never overflows */
    __device__ float operator()(const float (&a)[1]) const { return mp_dev_sigmoid(a[0]); }
};
struct sigmoid_bwd { /* (y, dy) */
    __device__ float operator()(const float (&a)[2]) const { return a[1] * a[0] * (1.f - a[0]); }
};

static mp_status act_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                             const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                             size_t *saved_bytes) {
    (void)ctx, (void)workspace_bytes, (void)saved_bytes;
    *state = NULL;
    return mp_cuda_op_check_dtypes(d, info, cfg, -1);
}

/* Tangents (cuda_op.h, ops/tangent.h): every Jacobian here is diagonal and
 * backward applies it, so forward_tangent is backward on t_in; relu's and
 * leaky relu's backward_tangent is backward on t_d_out, tanh's and
 * sigmoid's move with the output too (activation_tangent_cuda.cu). */
#define MP_ACT_VT(name, label, FWD, BWD, BWD_SRC, BWD_TANGENT, ...)                                      \
    static mp_status name##_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {                             \
        return mp_cuda_op_status(c, "forward", mp_ew1(ctx, &c->in[0], &c->out, FWD{__VA_ARGS__}));       \
    }                                                                                                    \
    static mp_status name##_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {                            \
        if (!c->d_in[0].data) return MP_OK;                                                              \
        return mp_cuda_op_status(c, "backward",                                                          \
                                 mp_ew2(ctx, &c->BWD_SRC, &c->d_out, &c->d_in[0], BWD{__VA_ARGS__}));    \
    }                                                                                                    \
    static mp_status name##_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {                     \
        return mp_cuda_tangent_forward_by_backward(ctx, c, name##_backward);                             \
    }                                                                                                    \
    static mp_status name##_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {                    \
        return BWD_TANGENT;                                                                              \
    }                                                                                                    \
    extern "C" const mp_cuda_op_vtable mp_cuda_##name##_vt = {label, act_prepare, NULL, name##_forward, \
                                                              name##_backward, name##_forward_tangent,  \
                                                              name##_backward_tangent, NULL};

MP_ACT_VT(relu, "relu", relu_fwd, relu_bwd, out, mp_cuda_tangent_backward_linear(ctx, c, relu_backward))
MP_ACT_VT(tanh, "tanh", tanh_fwd, tanh_bwd, out, mp_cuda_smooth_backward_tangent(ctx, c))
MP_ACT_VT(sigmoid, "sigmoid", sigmoid_fwd, sigmoid_bwd, out, mp_cuda_smooth_backward_tangent(ctx, c))
MP_ACT_VT(leaky_relu, "leaky_relu", leaky_fwd, leaky_bwd, in[0],
          mp_cuda_tangent_backward_linear(ctx, c, leaky_relu_backward), c->desc->attr.slope)
