/* scaler.h — the backend-independent loss scaler: the union of PyTorch's
 * GradScaler, Apex's LossScaler and DeepSpeed's DynamicLossScaler (DESIGN.md,
 * "Loss scaling"), the fused unscale + inf/NaN check over the gradients, the
 * forward-overflow counter, and the state saved with a checkpoint.
 *
 * One iteration, as the trainer drives it:
 *   forward; non-finite loss/activation -> mp_scaler_forward_overflow (the
 *   step is skipped, the scale is NOT lowered: lowering it cannot fix a
 *   forward overflow) and nothing else this iteration; otherwise
 *   mp_scaler_forward_ok, backward of loss * mp_scaler_scale(),
 *   mp_scaler_unscale_check over the gradients (one or several calls; found_inf
 *   accumulates), optimizer step unless mp_scaler_found_inf, mp_scaler_update.
 *
 * Update rules (scale factors in double, result stored as float, exactly as
 * torch's _amp_update_scale_ does with its fp32 scale tensor):
 *   hysteresis 0 or 1 (GradScaler, Apex):
 *     overflow: scale = max(min, scale * backoff), growth_tracker = 0;
 *     clean:    growth_tracker += 1; when it reaches growth_interval:
 *               next = min(max, scale * growth), kept only if finite
 *               (GradScaler never grows to inf), growth_tracker = 0.
 *   hysteresis N > 1 (DeepSpeed's delayed_shift, followed literally):
 *     overflow: if hysteresis_left == 1: scale = max(min, scale * backoff)
 *               else hysteresis_left -= 1; last_overflow_step = step;
 *     clean:    if consecutive_hysteresis: hysteresis_left = N;
 *               if (step - last_overflow_step) % growth_interval == 0:
 *                 if !consecutive_hysteresis: hysteresis_left = N;
 *                 grow as above;
 *     DeepSpeed decides growth by the distance to the last overflow where
 *     GradScaler counts clean steps; both give the same growth steps (an
 *     absorbed overflow still restarts the count), and the literal rule is
 *     what is implemented. growth_tracker is kept up to date in both modes.
 *   step += 1 in every mode. A step with non-finite gradients is always
 *   skipped, also when hysteresis absorbs the overflow and in static mode.
 *
 * Decisions beyond the three libraries:
 *   - The scale never collapses (seed 000: halved to 3.7e-40 = 2^-131 while
 *     the loss stays NaN). Without --min-loss-scale the floor is 2^-24
 *     (MP_SCALER_DEFAULT_MIN); an explicit minimum must be a normal float, so
 *     1/scale is always finite. mp_scaler_at_floor reports a scale that cannot
 *     be lowered further, so the trainer can stop with an error.
 *   - The unscaled values are checked, not the scaled ones: below a scale of 1
 *     a finite scaled gradient can overflow when unscaled, and that counts.
 *   - The default initial scale is clamped into [min, max] (Apex clamps its
 *     2^16 default to max_loss_scale); an explicit --loss-scale outside the
 *     range is an error.
 *   - Forward overflows are not counted by the growth logic (no update call):
 *     they neither advance step nor reset growth_tracker. */
#ifndef MP_AMP_SCALER_H
#define MP_AMP_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "mixprec.h"

#define MP_SCALER_DEFAULT_INIT 65536.0f
#define MP_SCALER_DEFAULT_GROWTH 2.0f
#define MP_SCALER_DEFAULT_BACKOFF 0.5f
#define MP_SCALER_DEFAULT_INTERVAL 2000
/* The floor used when no minimum is given: 2^-24. */
#define MP_SCALER_DEFAULT_MIN 0x1.0p-24f
/* Tensors with at least this many elements are split over OpenMP threads. */
#define MP_SCALER_PAR_MIN ((int64_t)1 << 16)
/* Number of (name, value) pairs in the checkpoint state. */
#define MP_SCALER_STATE_COUNT 8

/* A zero field takes the default noted beside it; every field has the CLI
 * option named in its error messages. (mp_scaler_opts){.dynamic = true} is
 * GradScaler's default configuration. */
typedef struct {
    bool dynamic;         /* false: static scale (init_scale forever) */
    float init_scale;     /* --loss-scale; dynamic: 0 -> 65536; static: must be > 0 (0 is an
                             error, never a silent 65536) */
    float growth_factor;  /* --loss-scale-growth, 0 -> 2, > 1 */
    float backoff_factor; /* --loss-scale-backoff, 0 -> 0.5, in (0, 1) */
    int growth_interval;  /* --loss-scale-window, 0 -> 2000, clean steps per growth */
    float min_scale;      /* --min-loss-scale, 0 -> none (floor 2^-24) */
    float max_scale;      /* --max-loss-scale, 0 -> none (Apex uses 2^24) */
    int hysteresis;       /* --loss-scale-hysteresis, 0/1 -> none; N: absorb N-1 overflows */
    bool consecutive_hysteresis; /* --consecutive-hysteresis: restore hysteresis on every clean
                                    step, not only at growth (no effect without hysteresis) */
} mp_scaler_opts;

/* Plain state, no allocation: embed it anywhere. Read it through the
 * functions below; the fields are public for logging. */
typedef struct {
    mp_scaler_opts opts; /* with defaults applied */
    float min_scale;     /* effective minimum: opts.min_scale or the 2^-24 floor */
    float max_scale;     /* effective maximum: opts.max_scale or +inf */
    float scale;
    int growth_tracker;          /* clean steps since the last overflow or growth */
    int hysteresis_left;         /* DeepSpeed's cur_hysteresis; 1 without hysteresis */
    int64_t last_overflow_step;  /* step of the last gradient overflow, -1 for none */
    int64_t step;                /* number of mp_scaler_update calls */
    int64_t skipped_steps;       /* gradient and forward overflows */
    int64_t forward_overflows;   /* total */
    int consecutive_forward_overflows;
    bool found_inf;              /* since the last update */
} mp_scaler;

/* Validates the options, applies the defaults and starts the state. Errors
 * name the option: "--loss-scale-growth 1 must be > 1". On error *s is
 * zeroed. */
mp_status mp_scaler_init(mp_scaler *s, mp_scaler_opts o);

/* The factor the loss is multiplied by before backward. */
float mp_scaler_scale(const mp_scaler *s);

/* Fused unscale + inf/NaN check of n fp32 gradient tensors in place: each
 * element becomes x * inv with inv = (float)(1.0 / (double)scale) as in
 * GradScaler.unscale_ (no multiply at all when the scale is 1), and the
 * result is checked for inf/NaN on its bit pattern (safe under -ffast-math).
 * Every tensor is unscaled, also after a non-finite one. Sets found_inf when
 * any value is non-finite and returns the index of the first such tensor in
 * the given order, or -1. Tensors of MP_SCALER_PAR_MIN elements or more are
 * split over OpenMP threads. */
int mp_scaler_unscale_check(mp_scaler *s, float *const *grads, const int64_t *sizes, int n);

/* Check only (forward provenance): index of the first non-finite element of
 * x, or -1. */
int64_t mp_first_nonfinite(const float *x, int64_t n); // x: (n)

bool mp_scaler_found_inf(const mp_scaler *s);

/* The one update per iteration, after the optimizer step was taken or
 * skipped. Returns true when the step had to be skipped (found_inf), then
 * clears found_inf. */
bool mp_scaler_update(mp_scaler *s);

/* Dynamic mode and the scale is at its minimum: an overflow can no longer
 * lower it. */
bool mp_scaler_at_floor(const mp_scaler *s);

/* A non-finite loss or activation in the forward pass: the step is skipped
 * (skipped_steps, forward_overflows and the consecutive counter increase,
 * found_inf is cleared), the scale is unchanged. mp_scaler_forward_ok, called
 * after every finite forward, resets the consecutive counter. */
void mp_scaler_forward_overflow(mp_scaler *s);
void mp_scaler_forward_ok(mp_scaler *s);
int mp_scaler_consecutive_forward_overflows(const mp_scaler *s);

/* Checkpoint state as (name, value) pairs, in this order: "scale",
 * "growth_tracker", "hysteresis_left", "last_overflow_step", "step",
 * "skipped_steps", "forward_overflows", "consecutive_forward_overflows".
 * Writes min(max, MP_SCALER_STATE_COUNT) pairs (names or values may be NULL
 * when max is 0) and returns MP_SCALER_STATE_COUNT. */
int mp_scaler_state_get(const mp_scaler *s, const char **names, double *values, int max);
/* Restores one pair; an unknown name or a value out of range for the
 * configured options is MP_ERR_INVALID_ARG and leaves the state unchanged. */
mp_status mp_scaler_state_set(mp_scaler *s, const char *name, double value);

#endif
