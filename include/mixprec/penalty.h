/** @file mixprec/penalty.h
 * Gradient penalties (issue 22, seed 003): a loss that contains a gradient,
 * such as R1 on real images, WGAN-GP on interpolates or the L2 norm of the
 * parameter gradients, so that training it needs second derivatives.
 *
 * How (forward-over-reverse): a plan compiled with opts.second_order keeps
 * every activation and gradient of a step and has tangent buffers beside
 * them. For a penalty P(g) on g = dF/dz (z an input node, or the
 * parameters), grad_theta P = (dg/dtheta)^T v with v = dP/dg held fixed:
 * the direction v is put on z and pushed through every op's forward
 * (mp_plan_forward_tangent) and then through every op's backward
 * (mp_plan_backward_tangent); the tangents of the parameter gradients are
 * then the Hessian-vector products the penalty's gradient is made of.
 *
 * Most programs set mp_trainer_opts.penalty and let the trainer do it; the
 * plan functions below are the level beneath, for a penalty of one's own.
 *
 * Precision of a penalized step (CPU): forward and both backward passes run
 * in the policy's dtypes (fp16/bf16 storage emulated as everywhere on the
 * CPU, gradients loss-scaled); the gradient the penalty reads is unscaled in
 * f32 and the penalty and its direction are computed with f64 sums; the
 * tangent pass runs in f32 (tangent buffers are f32, each low-precision
 * activation, weight cast and gradient is widened to f32 for the tangent
 * kernels), its output is in the same loss-scaled units as the gradients and
 * is added to them before the unscale/overflow check, so the scaler's skip
 * and growth rules are unchanged.
 *
 * On a GPU the same holds with two differences: the tangent kernels read
 * the primal tensors as stored (f16/bf16 activations, weight casts and
 * gradients, library calls in the node's compute dtype with f32
 * accumulation) instead of widened copies, and a trainer computes the
 * penalty and its direction on the device inside the step's CUDA graph, so
 * mp_trainer_penalty_value may report the step before the last until
 * mp_trainer_wait (as the loss scale does). */
#ifndef MIXPREC_PENALTY_H
#define MIXPREC_PENALTY_H

#include "mixprec/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The penalty a trainer adds to one optimizer group's objective. */
typedef enum {
    MP_PENALTY_NONE = 0,
    /** weight * ||dJ/dtheta||_2 over the group's trainable parameters (seed
     * 003's example: the norm, not its square), J the group's weighted
     * objective: the sum of its losses times their weights. The group has
     * one loss L of weight w > 0, so J = w L and the penalty is
     * weight * w * ||dL/dtheta||. */
    MP_PENALTY_L2_GRAD,
    /** R1: weight/2 * mean_i ||d(sum of output)/d(input)_i||^2, the gradient
     * of the discriminator's real logits with respect to the real images. */
    MP_PENALTY_R1,
    /** WGAN-GP: weight * mean_i (||d(sum of output)/d(input)_i|| - 1)^2 on
     * the interpolates node (random mixes of real and generated images). */
    MP_PENALTY_WGAN_GP,
} mp_penalty_kind;

/** A gradient penalty (zero: none). */
typedef struct {
    mp_penalty_kind kind; /**< which penalty (MP_PENALTY_NONE: none) */
    float weight;      /**< lambda or gamma: finite and >= 0 */
    int group;         /**< the optimizer group whose gradients receive it (0: the first) */
    /** R1 / WGAN-GP: the node whose outputs' sum is differentiated (a
     * discriminator's logits, or a loss) and the node it is differentiated
     * with respect to (the images, or the interpolates): its output
     * gradient, per sample, is what the penalty reads. */
    mp_node output;
    mp_node input;     /**< see output */
} mp_penalty;

/** "l2", "r1", "wgan-gp" ("none" for MP_PENALTY_NONE). */
MP_API const char *mp_penalty_kind_name(mp_penalty_kind k);

/* ---- plans (opts.second_order) -------------------------------------------- */

/** Bytes a second-order plan holds beyond its arena: the tangent buffers
 * (one f32 tangent of each activation and of its gradient, two of each
 * trainable parameter) and their f32 staging; 0 for other plans. */
MP_API size_t mp_plan_tangent_bytes(const mp_plan *p);

/** After mp_plan_forward: backward from opts.input_grad_of with every element
 * of its output gradient set to seed (the gradient of seed * the sum of its
 * outputs; a loss node's one value), down to opts.input_grad_wrt, whose
 * output gradient it leaves readable. Parameter gradients are not touched. */
MP_API mp_status mp_plan_backward_input_grad(mp_plan *p, float seed);
/** opts.input_grad_wrt's output gradient from the last
 * mp_plan_backward_input_grad, as f32 (n: its element count; dst not NULL). */
MP_API mp_status mp_plan_read_input_grad(const mp_plan *p, float *dst, size_t n);

/** The direction of the next tangent pass on opts.input_grad_wrt (n: its
 * element count; NULL: zero). A NaN/inf element is an error naming it. */
MP_API mp_status mp_plan_set_tangent_input(mp_plan *p, const float *v, size_t n);
/** The direction on trainable parameter `name` (n: its element count; NULL:
 * zero). Every parameter's direction is zero until set. A NaN/inf element is
 * an error naming it. */
MP_API mp_status mp_plan_set_tangent_param(mp_plan *p, const char *name, const float *v, size_t n);
/** Set every direction (inputs and parameters) back to zero. */
MP_API void mp_plan_clear_tangents(mp_plan *p);
/** After a forward: the forward's derivative along the directions set. */
MP_API mp_status mp_plan_forward_tangent(mp_plan *p);
/** After mp_plan_forward_tangent and a backward from `root` (a loss of the
 * plan through mp_plan_backward_from, or opts.input_grad_of through
 * mp_plan_backward_input_grad, which must be the last backward run): the
 * derivative of that backward along the directions. An op without a tangent
 * is an error naming it. */
MP_API mp_status mp_plan_backward_tangent(mp_plan *p, mp_node root);
/** The tangent of trainable parameter `name`'s gradient from the last
 * mp_plan_backward_tangent (a Hessian-vector product times that backward's
 * seed), as f32 into dst (not NULL); zero for a parameter that backward did
 * not reach. An error when no mp_plan_backward_tangent completed since the
 * last forward. */
MP_API mp_status mp_plan_read_tangent_grad(const mp_plan *p, const char *name, float *dst, size_t n);

/* ---- trainers (mp_trainer_opts.penalty) ----------------------------------- */

/** A trainer (mixprec/train.h). */
typedef struct mp_trainer mp_trainer;

/** The penalty's value (unscaled, weight included) in the last step; an
 * error before the first step or without a penalty. NaN when the step was
 * skipped: the gradient it reads overflowed, or the forward did (the penalty
 * was not computed). On a GPU: of the last step the host has seen, which may
 * be the one before the last until mp_trainer_wait. */
MP_API mp_status mp_trainer_penalty_value(const mp_trainer *t, float *value);
/** R1 / WGAN-GP: the gradient (unscaled, f32) of the penalty's output sum
 * with respect to its input node in the last step; n is that node's element
 * count. After a step skipped because the network's forward overflowed, both
 * this gradient (every element) and the value are NaN; when the penalty itself
 * overflowed (a value or a weight x gradient past f32), the value is NaN and
 * this gradient is still the step's. On a GPU it waits for the queued steps
 * and copies it back. */
MP_API mp_status mp_trainer_penalty_input_grad(const mp_trainer *t, float *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_PENALTY_H */
