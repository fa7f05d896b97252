/* lr_schedule.h — learning-rate schedules: constant, step decay and cosine
 * annealing, each with an optional linear warm-up, as a pure function of the
 * step index, plus the parser of the CLI's --lr-schedule strings. */
#ifndef MP_OPTIM_LR_SCHEDULE_H
#define MP_OPTIM_LR_SCHEDULE_H

#include <stdint.h>

#include "mixprec.h"

typedef enum { MP_LR_CONSTANT, MP_LR_STEP, MP_LR_COSINE } mp_lr_kind;

/* Steps are 0-based: mp_lr_at(s, k) is the rate of the (k+1)-th optimizer
 * step, i.e. of mp_optim_step when mp_optim_step_count() == k.
 *
 * Warm-up: for k < warmup_steps, lr = base_lr * (k + 1) / warmup_steps, a
 * linear ramp whose last warm-up step reaches base_lr. After it, with
 * t = k - warmup_steps:
 *   constant: base_lr
 *   step:     base_lr * gamma^floor(t / step_size)       (torch StepLR)
 *   cosine:   min_lr + (base_lr - min_lr) * (1 + cos(pi * t / T)) / 2 with
 *             T = total_steps - warmup_steps (torch CosineAnnealingLR with
 *             T_max = T); min_lr from t >= T on (no restart). */
typedef struct {
    mp_lr_kind kind;
    float base_lr;
    int warmup_steps; /* >= 0 */
    int step_size;    /* step: > 0 */
    float gamma;      /* step: in (0, 1] */
    int total_steps;  /* cosine: > warmup_steps */
    float min_lr;     /* cosine: in [0, base_lr] */
} mp_lr_schedule;

float mp_lr_at(const mp_lr_schedule *s, int64_t step);

/* Parses "constant", "step:STEP_SIZE:GAMMA", "cosine" or "cosine:MIN_LR",
 * optionally followed by ",warmup:N" (e.g. "cosine,warmup:200"). base_lr is
 * --lr (finite, >= 0); total_steps is the run's number of optimizer steps
 * (needed by cosine only). Errors name --lr-schedule and the bad part. */
mp_status mp_lr_schedule_parse(const char *spec, float base_lr, int total_steps, mp_lr_schedule *out);

/* "constant", "step", "cosine". */
const char *mp_lr_kind_name(mp_lr_kind k);

#endif
