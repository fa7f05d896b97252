/* penalty_cuda.h — a trainer's gradient penalty (mixprec/penalty.h) on the
 * GPU: its value and direction computed on the device from the loss-scaled
 * gradient it reads, with every decision (overflow, forward overflow, a
 * step already skipped) taken there, so the penalized step is captured into
 * one CUDA graph like any other (penalty_cuda.cu), and the step primitive
 * that runs it (penalty_step_cuda.c). The rules are train/penalty.c's:
 *   L2:      P = w ||g||, direction w g / ||g|| on the group's parameters;
 *   R1:      P = w/2 mean_i ||g_i||^2, direction (times N) w g_i;
 *   WGAN-GP: P = w mean_i (||g_i|| - 1)^2, direction 2 w (||g_i|| - 1) g_i / ||g_i||;
 * g unscaled in f32, sums in f64 in a fixed order. A NaN/inf in g is a
 * gradient overflow of the group; a NaN/inf P from finite g is a forward
 * overflow of the penalty. */
#ifndef MP_CUDA_PENALTY_CUDA_H
#define MP_CUDA_PENALTY_CUDA_H

#include "amp/scaler.h"
#include "core/tensor.h"
#include "cuda/cuda_optim.h"
#include "mixprec/penalty.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the last penalized step found (status: MP_PEN_*). */
enum { MP_PEN_OK = 0, MP_PEN_NOT_RUN = 1, MP_PEN_GRAD_OVERFLOW = 2, MP_PEN_FORWARD_OVERFLOW = 3 };
typedef struct {
    float value; /* the penalty, unscaled and weighted; NaN when not computed */
    int status;
} mp_cuda_penalty_out;

typedef struct {
    mp_penalty_kind kind;
    float weight;
    int group;               /* the optimizer group whose flag an overflow raises */
    int batch;
    long long per_sample;    /* R1 / WGAN-GP: elements per sample of the input node */
    /* the group's trainable parameters: gradient (its dtype), the tangent
     * direction and the tangent of its gradient (f32), element count */
    int n;
    void *const *grads;
    const mp_dtype *grad_dtypes;
    float *const *t_param;
    float *const *t_dparam;
    const int64_t *numel;
} mp_cuda_penalty_spec;

typedef struct mp_cuda_penalty mp_cuda_penalty;

/* Device state and tables for spec (synchronizes: set-up time only). */
mp_status mp_cuda_penalty_create(mp_cuda_ctx *ctx, const mp_cuda_penalty_spec *spec, mp_cuda_penalty **out);
void mp_cuda_penalty_destroy(mp_cuda_penalty *p);

/* R1 / WGAN-GP: from the loss-scaled input gradient `grad` (the input
 * node's, any float dtype, seeded with scale / N): P, the unscaled gradient
 * (mp_cuda_penalty_grad) and the direction `dir` (f32, grad's layout), zero
 * where the step is skipped or the penalty overflowed. */
mp_status mp_cuda_penalty_input(mp_cuda_ctx *ctx, mp_cuda_penalty *p, mp_scaler *s, const mp_tensor *grad, float *dir);
/* L2: from the group's loss-scaled gradients (grads: their table): P and
 * the direction in every t_param. */
mp_status mp_cuda_penalty_l2(mp_cuda_ctx *ctx, mp_cuda_penalty *p, mp_scaler *s, mp_cuda_grads *grads);
/* Each gradient += its t_dparam (the penalty's loss-scaled gradient). */
mp_status mp_cuda_penalty_add(mp_cuda_ctx *ctx, mp_cuda_penalty *p);
/* Device addresses: the last step's outcome, and R1 / WGAN-GP's unscaled
 * input gradient (f32, the input's device layout). */
mp_cuda_penalty_out *mp_cuda_penalty_result(mp_cuda_penalty *p);
float *mp_cuda_penalty_grad(mp_cuda_penalty *p);

/* The step primitive (train/step_backend.h `penalty`) on the GPU: seeds and
 * runs the input-gradient backward (R1 / WGAN-GP), computes the penalty,
 * runs the plan's tangent passes and adds their gradients to group g's. */
mp_status mp_cuda_step_penalty(mp_trainer *t, int g, mp_cuda_ctx *ctx, mp_scaler *scaler_dev, mp_cuda_grads *grads,
                               mp_cuda_penalty *pen);

#ifdef __cplusplus
}
#endif
#endif
