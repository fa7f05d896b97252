/* optim.h — fp32 optimizers with torch.optim semantics: SGD (momentum,
 * Nesterov, L2 weight decay), Adam (L2 weight decay) and AdamW (decoupled
 * weight decay). All state is allocated in mp_optim_create; a step allocates
 * nothing. The per-tensor update kernels are exposed so that a caller holding
 * fp32 master weights can update a tensor and then re-cast its low-precision
 * copy, and so that a step skipped on overflow simply does not call them (the
 * step count, momentum buffers and moments are then left untouched).
 * A weight without an fp32 master (fp16/bf16 policies) may keep its SGD
 * momentum in its own dtype, as torch.optim.SGD does for a `.half()` model:
 * the buffer then holds f16/bf16 values (stored here as f32, rounded; on the
 * GPU stored in that dtype). Adam/AdamW moments are always f32: v = g^2
 * underflows (and overflows) f16. */
#ifndef MP_OPTIM_OPTIM_H
#define MP_OPTIM_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "mixprec.h"

/* mp_optim_kind and mp_optim_opts are public (mixprec/optim.h). */

/* One trainable tensor: param is updated in place from grad, both fp32 with
 * n elements. The optimizer keeps the pointers (not the data) for its
 * lifetime; name is copied. */
typedef struct {
    float *param;      // (n)
    const float *grad; // (n)
    int64_t n;
    bool decay;        /* apply weight decay (the trainer passes false for biases and BN) */
    const char *name;  /* for messages and checkpoints; may be NULL */
    /* The dtype of the SGD momentum buffer's values: MP_DTYPE_F32 (0, the
     * default), or MP_DTYPE_F16 / _BF16 for a weight without an fp32 master
     * (the trainer passes mp_graph_param_low_only): b = mu*b + g is computed
     * in f32 and rounded to nearest even to that dtype, and the rounded b
     * updates the weight. Ignored by Adam/AdamW (f32 moments). */
    mp_dtype state_dtype;
} mp_param_ref;

typedef struct mp_optim mp_optim;

/* Validates the options (errors name the CLI option, e.g. "--momentum") and
 * the parameter list, applies the Adam defaults and allocates every state
 * buffer, zeroed. On error *out is NULL. */
mp_status mp_optim_create(mp_optim_opts o, const mp_param_ref *params, int n_params, mp_optim **out);
void mp_optim_destroy(mp_optim *o);

/* One update of every parameter from its gradient with learning rate lr
 * (finite, >= 0); increments the step count. */
void mp_optim_step(mp_optim *o, float lr);

/* Number of steps taken (Adam's bias correction uses step count + 1 for the
 * next step). */
int64_t mp_optim_step_count(const mp_optim *o);
/* For checkpoint restore, together with the state buffers below: a count
 * outside [0, 2^53) is MP_ERR_INVALID_ARG and leaves the count unchanged. */
mp_status mp_optim_set_step_count(mp_optim *o, int64_t steps);

/* The options after defaults were applied. */
mp_optim_opts mp_optim_options(const mp_optim *o);
int mp_optim_param_count(const mp_optim *o);
/* The stored reference of parameter i (its name is the optimizer's copy). */
const mp_param_ref *mp_optim_param(const mp_optim *o, int i);
/* Parameter i's state_dtype from the next step on (F32, F16 or BF16): e.g.
 * F32 once --auto-fallback moved its layer to fp32. The buffer's values are
 * kept (f16/bf16 values are f32 values). */
void mp_optim_set_state_dtype(mp_optim *o, int i, mp_dtype dt);

/* State of parameter i for checkpoints: stores up to 2 pointers in bufs (may
 * be NULL to only count), each to params[i].n floats, and returns how many:
 * SGD 0 (no momentum) or 1 (momentum buffer); Adam/AdamW 2 (m, then v).
 * Always f32 arrays; an SGD buffer of state_dtype F16/BF16 holds values of
 * that dtype (a checkpoint stores them as f32, exactly). */
int mp_optim_state_tensors(const mp_optim *o, int param_index, float **bufs);

/* ---- per-tensor update kernels (sgd.c, adam.c) ------------------------- */

/* Tensors at or above this many elements are updated by all OpenMP threads. */
#define MP_OPTIM_PAR_MIN ((int64_t)1 << 16)

typedef struct {
    float lr;
    float momentum;     /* 0: plain SGD, buf unused (may be NULL) */
    float weight_decay; /* L2, already 0 for a tensor with decay = false */
    bool nesterov;
    mp_dtype state_dtype; /* F32, or F16 / BF16: b is rounded to it (mp_param_ref.state_dtype) */
} mp_sgd_hyper;

/* g = grad + wd*p; b = mu*b + g (b starts at 0, so b = g after the first
 * step), in f32, then with state_dtype F16/BF16 rounded to nearest even to
 * it; buf = b; g = nesterov ? g + mu*b : b (the stored, rounded b); p -= lr*g. */
void mp_sgd_update(float *param, const float *grad, float *buf, int64_t n, const mp_sgd_hyper *h);
// param, grad, buf: (n)

typedef struct {
    float beta1, beta2, eps;
    float l2;        /* Adam: g = grad + l2*p */
    float decay_mul; /* AdamW: p *= decay_mul (1 - lr*wd) first; 1 for none */
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
} mp_adam_hyper;

/* The hyper-parameters of step t (1-based) of an Adam/AdamW optimizer with
 * options o (defaults applied) for a tensor that does (decay) or does not
 * take weight decay. */
mp_adam_hyper mp_adam_hyper_at(const mp_optim_opts *o, float lr, int64_t t, bool decay);

/* p *= decay_mul; g = grad + l2*p; m = m + (1-b1)*(g-m); v = b2*v + (1-b2)*g*g;
 * p -= step_size * m / (sqrt(v)/bc2_sqrt + eps). */
void mp_adam_update(float *param, const float *grad, float *m, float *v, int64_t n, const mp_adam_hyper *h);
// param, grad, m, v: (n)

#endif
