/* tangent.h — second derivatives, and the helpers that the ops'
 * forward_tangent / backward_tangent (op.h) share.
 *
 * Second derivatives are forward-over-reverse: a direction (a tangent) is
 * pushed through every op's forward (t_out = J (t_in, t_param)) and then
 * through its backward (the directional derivative of d_in and d_param along
 * t_in, t_param and t_d_out). The tangents of the parameter gradients are
 * then Hessian-vector products H v. A gradient penalty P(g) of a gradient g
 * needs exactly that: dP/dtheta = (dg/dtheta)^T dP/dg, the Hessian applied
 * to the direction dP/dg (R1, WGAN-GP: g the input gradient; the L2 penalty
 * of seed 003: g the parameter gradients).
 *
 * Why not reverse-over-reverse (backward nodes that are themselves
 * differentiable graph nodes):
 *  - a tangent reuses the op's own kernels: most tangents are the op's
 *    forward or backward applied to tangents by linearity; the others
 *    (tanh, sigmoid, batchnorm, the losses) are a few lines beside them;
 *  - a tangent lives exactly as long as the primal tensor it belongs to and
 *    has its shape and dtype, so the planner places tangents like the
 *    activations and gradients they shadow, and the precision pass needs
 *    nothing new;
 *  - reverse-over-reverse would need every backward written as a graph of
 *    differentiable nodes, a second autodiff over that graph and buffers for
 *    all of its intermediates.
 *
 * Tangent calls run in f32 or f64 (their kernels are the reference ones,
 * accumulating in double); any other dtype is an error naming the op and
 * node. A NULL tangent input is a zero direction; a NULL tangent output is
 * not wanted. Tangent calls never touch running statistics or saved. */
#ifndef MP_OPS_TANGENT_H
#define MP_OPS_TANGENT_H

#include "ops/op.h"

/* MP_OK when c can run a tangent: every real tensor F32 or F64, each given
 * tangent of the primal's dtype, no fused residual add (GPU plans only).
 * which: "forward_tangent" or "backward_tangent", for the message. */
mp_status mp_tangent_check(const mp_op_call *c, const char *which);

/* The value of a one-element tensor (a loss seed) in double; 0 for NULL data. */
double mp_tangent_scalar(const mp_tensor *t);

/* t[0] = v in t's dtype (a loss's tangent). */
void mp_tangent_set_scalar(const mp_tensor *t, double v);

/* t = 0 (nothing for NULL data). */
void mp_tangent_zero(const mp_tensor *t);

/* y (outer, C, inner) += b (C); y's dtype. */
void mp_tangent_add_bias(const mp_tensor *y, const void *b, int64_t outer, int64_t C, int64_t inner);

/* db (C) = the sums of dy (outer, C, inner) over outer and inner; dy NULL: db = 0. */
void mp_tangent_channel_sum(const mp_tensor *db, const void *dy, int64_t outer, int64_t C, int64_t inner);

/* A kernel bilinear in (a, b) at the call's shapes and dtype: out = K(a, b). */
typedef void (*mp_bilinear_fn)(const mp_op_call *c, const void *a, const void *b, void *out);

/* The tangent scratch of a call: c->workspace after the op's own scratch
 * (op.h), which the op's kernels use when a tangent runs them. */
void *mp_tangent_scratch(const mp_op_call *c);

/* out = K(ta, b) + K(a, tb), the tangent of K(a, b) along (ta, tb). A NULL
 * ta or tb drops its term; none left: out = 0. With both, the second term
 * goes through the tangent scratch (out's bytes). out NULL: nothing. */
void mp_tangent_bilinear(const mp_op_call *c, mp_bilinear_fn k, const mp_tensor *out, const void *a, const void *ta,
                         const void *b, const void *tb);

/* The ops y = K(x, W) + b (linear, conv2d, conv_transpose2d): their three
 * kernels, each bilinear. param[0] is W; param[1], when the op has it, the
 * bias over dim 1 of y. */
typedef struct {
    mp_bilinear_fn fwd;         /* (x, W) -> y */
    mp_bilinear_fn bwd_data;    /* (dy, W) -> dx */
    mp_bilinear_fn bwd_weights; /* (x, dy) -> dW */
} mp_tangent_affine;
/* Their tangent_workspace_bytes (set in infer, after out and params[0]):
 * the largest of y, x and W, for the second kernel term of a tangent (an
 * op may add room after it, mp_tangent_affine_extra). */
size_t mp_tangent_affine_workspace(const mp_op_info *info);
/* Where that room starts in a call's tangent scratch. */
void *mp_tangent_affine_extra(const mp_op_call *c);
/* t_y = K(t_x, W) + K(x, t_W) + t_b. */
mp_status mp_tangent_affine_forward(const mp_op_call *c, const mp_tangent_affine *k);
/* t_dx = bwd_data(t_dy, W) + bwd_data(dy, t_W), t_dW = bwd_weights(t_x, dy) +
 * bwd_weights(x, t_dy), t_db = sums of t_dy. */
mp_status mp_tangent_affine_backward(const mp_op_call *c, const mp_tangent_affine *k);

/* Ops whose forward is linear in the inputs and has no parameters (avg and
 * global pooling, reshape, concat): forward on in = t_in, out = t_out. All
 * t_in NULL: t_out = 0; fwd must take a NULL input as zeros when the op has
 * several inputs. */
mp_status mp_tangent_forward_linear(const mp_op_call *c, mp_status (*fwd)(const mp_op_call *));
/* Ops whose backward is linear in d_out and reads nothing that the direction
 * moves (no parameters; masks, argmax, shapes only): backward on
 * d_out = t_d_out, d_in = t_d_in. t_d_out NULL: every wanted t_d_in = 0. */
mp_status mp_tangent_backward_linear(const mp_op_call *c, mp_status (*bwd)(const mp_op_call *));
/* Pointwise ops with a diagonal Jacobian that backward applies (relu, leaky
 * relu, tanh, sigmoid, dropout): t_out = backward on d_out = t_in[0],
 * d_in[0] = t_out. */
mp_status mp_tangent_forward_by_backward(const mp_op_call *c, mp_status (*bwd)(const mp_op_call *));

/* Bytes for n elements of the widest real dtype a tangent call may use. */
static inline size_t mp_tangent_bytes(int64_t n) { return (size_t)n * sizeof(double); }

#endif
