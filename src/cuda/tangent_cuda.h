/* tangent_cuda.h — what the GPU ops' forward_tangent / backward_tangent
 * (cuda_op.h) share: the dtype check, and the GPU forms of ops/tangent.h's
 * helpers that express a tangent through the op's own forward or backward
 * (linear ops, and pointwise ops whose backward applies their Jacobian).
 * The per-op tangents are declared here too; each lives in its op's
 * *_tangent_cuda.cu. Everything runs on ctx->stream, never synchronizes and
 * never allocates. */
#ifndef MP_CUDA_TANGENT_CUDA_H
#define MP_CUDA_TANGENT_CUDA_H

#include "cuda/cuda_op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef mp_status (*mp_cuda_op_fn)(mp_cuda_ctx *ctx, const mp_op_call *c);

/* MP_OK when c can run a GPU tangent: every given tangent in f32, f16 or
 * bf16, no fused residual add. The error names the op, the node, `which`
 * ("forward_tangent", "backward_tangent") and the tensor. */
mp_status mp_cuda_tangent_check(const mp_op_call *c, const char *which);

/* t = 0 (nothing for NULL data); zero bits are 0 in every float dtype. */
mp_status mp_cuda_tangent_zero(mp_cuda_ctx *ctx, const mp_op_call *c, const mp_tensor *t, const char *which);

/* out = a + b elementwise (n elements, each operand in its own dtype; f32
 * sum, one rounding). out may be a or b. */
mp_status mp_cuda_tangent_add(mp_cuda_ctx *ctx, const mp_op_call *c, const void *a, mp_dtype adt, const void *b,
                              mp_dtype bdt, void *out, mp_dtype odt, long long n, const char *which);

/* Ops linear in their inputs, without parameters: forward on in = t_in,
 * out = t_out; every t_in NULL: t_out = 0. fwd must skip NULL inputs after
 * t_out was zeroed (zero_first: the helper zeroes t_out first when some
 * t_in is NULL). */
mp_status mp_cuda_tangent_forward_linear(mp_cuda_ctx *ctx, const mp_op_call *c, mp_cuda_op_fn fwd, bool zero_first);
/* Ops whose backward is linear in d_out and reads nothing the direction
 * moves: backward on d_out = t_d_out, d_in = t_d_in (no parameter
 * gradients). t_d_out NULL: every wanted t_d_in = 0. */
mp_status mp_cuda_tangent_backward_linear(mp_cuda_ctx *ctx, const mp_op_call *c, mp_cuda_op_fn bwd);
/* Pointwise ops whose backward applies their diagonal Jacobian: t_out =
 * backward on d_out = t_in[0], d_in[0] = t_out. */
mp_status mp_cuda_tangent_forward_by_backward(mp_cuda_ctx *ctx, const mp_op_call *c, mp_cuda_op_fn bwd);

/* The ops' tangents (one *_tangent_cuda.cu each). */
mp_status mp_cuda_linear_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_linear_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_conv_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c); /* conv2d, conv_transpose2d */
mp_status mp_cuda_conv_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_smooth_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c); /* tanh, sigmoid */
size_t mp_cuda_bce_tangent_workspace(long long n); /* bytes, for prepare() */
mp_status mp_cuda_bce_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_bce_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_softmax_ce_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_softmax_ce_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_maxpool_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_mul_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
mp_status mp_cuda_mul_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c);
/* batchnorm2d: forward_tangent (backward false) or backward_tangent, with
 * the fused ReLU's mask read from the stored output when relu. */
mp_status mp_cuda_bn_tangent(mp_cuda_ctx *ctx, const mp_op_call *c, bool relu, bool backward);
size_t mp_cuda_bn_tangent_workspace(const mp_cuda_ctx *ctx, const mp_op_info *info); /* bytes, for prepare() */

#ifdef __cplusplus
}
#endif
#endif
