/** @file mixprec/optim.h
 * Optimizers (SGD, Adam, AdamW with torch.optim semantics over fp32 master
 * weights), learning-rate schedules, and the loss scaler's options (the union
 * of PyTorch's GradScaler, Apex's and DeepSpeed's rules). */
#ifndef MIXPREC_OPTIM_H
#define MIXPREC_OPTIM_H

#include "mixprec/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Optimizer algorithms. */
typedef enum { MP_OPTIM_SGD = 0, MP_OPTIM_ADAM, MP_OPTIM_ADAMW } mp_optim_kind;

/** Optimizer hyper-parameters; zero fields take the defaults beside them
 * (beta1 and beta2 only while betas_as_given is false). */
typedef struct {
    mp_optim_kind kind; /**< SGD, Adam or AdamW */
    float momentum;     /**< SGD only, [0, 1); dampening is always 0 */
    bool nesterov;      /**< SGD only, needs momentum > 0 */
    float weight_decay; /**< >= 0, on conv/linear weights only; L2 for SGD/Adam, decoupled for AdamW */
    float beta1;        /**< Adam/AdamW, [0, 1); 0 -> 0.9 */
    float beta2;        /**< Adam/AdamW, [0, 1); 0 -> 0.999 */
    float eps;          /**< Adam/AdamW, > 0; 0 -> 1e-8 */
    /** Adam/AdamW: beta1 and beta2 are taken as given, 0 included (beta1 = 0:
     * no momentum, as WGAN-GP's Adam(0, 0.9)); false: a 0 takes its default. */
    bool betas_as_given;
} mp_optim_opts;

/** "sgd", "adam", "adamw" -> the kind; errors name --optimizer. */
MP_API mp_status mp_optim_kind_parse(const char *name, mp_optim_kind *out);
/** "sgd", "adam", "adamw". */
MP_API const char *mp_optim_kind_name(mp_optim_kind k);

/** Learning-rate schedule shapes. */
typedef enum { MP_LR_CONSTANT = 0, MP_LR_STEP, MP_LR_COSINE } mp_lr_kind;

/** A learning rate as a function of the optimizer step k (0-based).
 * Warm-up: for k < warmup_steps, lr = base_lr * (k + 1) / warmup_steps. After
 * it, with t = k - warmup_steps: constant: base_lr; step: base_lr *
 * gamma^floor(t / step_size) (torch StepLR); cosine: min_lr + (base_lr -
 * min_lr) * (1 + cos(pi t / T)) / 2, T = total_steps - warmup_steps, and
 * min_lr from t = T on (torch's CosineAnnealingLR rises again there). */
typedef struct {
    mp_lr_kind kind;  /**< constant, step or cosine */
    float base_lr;    /**< the rate after warm-up */
    int warmup_steps; /**< >= 0 */
    int step_size;    /**< step: > 0 */
    float gamma;      /**< step: in (0, 1] */
    int total_steps;  /**< cosine: > warmup_steps */
    float min_lr;     /**< cosine: in [0, base_lr] */
} mp_lr_schedule;

/** The rate of optimizer step k (0-based; a negative k is step 0); NaN for
 * a schedule mp_lr_schedule_check refuses. */
MP_API float mp_lr_at(const mp_lr_schedule *s, int64_t step);
/** Parse "constant", "step:STEP_SIZE:GAMMA", "cosine" or "cosine:MIN_LR",
 * optionally followed by ",warmup:N"; base_lr is the rate, total_steps the
 * run's optimizer steps (cosine only). Errors name --lr-schedule. */
MP_API mp_status mp_lr_schedule_parse(const char *spec, float base_lr, int total_steps, mp_lr_schedule *out);
/** Check a schedule's fields (the rules above). */
MP_API mp_status mp_lr_schedule_check(const mp_lr_schedule *s);
/** "constant", "step", "cosine". */
MP_API const char *mp_lr_kind_name(mp_lr_kind k);

/** An optimizer over some of a graph's trainable parameters (opaque). Its
 * state (momentum buffers, Adam moments, step count) lives here on the CPU
 * and on the device of the trainer that steps it. */
typedef struct mp_optimizer mp_optimizer;

/** Optimizer options. */
typedef struct {
    mp_optim_opts optim; /**< the algorithm and its hyper-parameters */
    mp_lr_schedule lr;   /**< the learning rate; lr.base_lr >= 0 (a zero kind is constant) */
    /** The parameters it updates: every trainable parameter whose name starts
     * with this prefix ("g_" for a GAN's generator); NULL or "": all. */
    const char *params;
} mp_optimizer_opts;

/** An optimizer over g's trainable parameters selected by o->params.
 * Weights without an fp32 master keep SGD momentum in their dtype: the
 * dtypes of the policy applied when a trainer is made with it (before or
 * after this call). Errors name the bad option. */
MP_API mp_status mp_optimizer_create(mp_graph *g, const mp_optimizer_opts *o, mp_optimizer **out);
/** Frees the optimizer (NULL is fine); a trainer using it must be destroyed first. */
MP_API void mp_optimizer_destroy(mp_optimizer *o);
/** Optimizer steps taken (skipped steps do not count); a GPU trainer's
 * count is read from the device (synchronizes). */
MP_API int64_t mp_optimizer_steps(const mp_optimizer *o);
/** Parameter tensors it updates. */
MP_API int mp_optimizer_param_count(const mp_optimizer *o);
/** The options, defaults applied (all zero for a NULL optimizer). */
MP_API mp_optimizer_opts mp_optimizer_options(const mp_optimizer *o);

/** Loss-scaler options; zero fields take the defaults beside them, so
 * (mp_scaler_opts){0} is GradScaler's default dynamic scaling. */
typedef struct {
    bool static_scale;    /**< a static scale (init_scale forever) instead of dynamic scaling */
    float init_scale;     /**< --loss-scale, 0 -> 65536; must be > 0 and finite */
    float growth_factor;  /**< --loss-scale-growth, 0 -> 2, > 1 */
    float backoff_factor; /**< --loss-scale-backoff, 0 -> 0.5, in (0, 1) */
    int growth_interval;  /**< --loss-scale-window, 0 -> 2000 clean steps per growth */
    float min_scale;      /**< --min-loss-scale, 0 -> none (the scale never falls below 2^-24) */
    float max_scale;      /**< --max-loss-scale, 0 -> none (Apex uses 2^24) */
    int hysteresis;       /**< --loss-scale-hysteresis, 0/1 -> none; N: absorb N-1 overflows (DeepSpeed) */
    bool consecutive_hysteresis; /**< restore hysteresis on every clean step, not only at growth */
} mp_scaler_opts;

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_OPTIM_H */
