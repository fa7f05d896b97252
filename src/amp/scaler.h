/* scaler.h — the backend-independent loss scaler: the union of PyTorch's
 * GradScaler, Apex's LossScaler and DeepSpeed's DynamicLossScaler, as one
 * plain state struct (mp_scaler) that the host and the device both hold and
 * update with the same rule (scaler_rule.h); the host's fused unscale +
 * inf/NaN check; the state saved with a checkpoint.
 *
 * One iteration, as the trainer drives it:
 *   forward; a non-finite loss raises found_inf to MP_FOUND_FORWARD (the step
 *   is skipped and the scale is NOT lowered); backward of loss * scale; the
 *   fused unscale/check of each optimizer group's gradients raises that
 *   group's flag and found_inf to MP_FOUND_GRADIENT; each optimizer steps
 *   unless its group's flag is set; one mp_scaler_update.
 *
 * Decisions beyond the three libraries:
 *   - The scale never collapses (seed 000: halved to 3.7e-40 = 2^-131 while
 *     the loss stays NaN). Without --min-loss-scale the floor is 2^-24; an
 *     explicit minimum must be a normal float, so 1/scale is always finite.
 *   - The unscaled values are checked, not the scaled ones: below a scale of 1
 *     a finite scaled gradient can overflow when unscaled, and that counts.
 *   - The default initial scale is clamped into [min, max] (Apex clamps its
 *     2^16 default to max_loss_scale); an explicit --loss-scale outside the
 *     range is an error. */
#ifndef MP_AMP_SCALER_H
#define MP_AMP_SCALER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mixprec.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend (C++) includes this header */
#endif

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
/* Optimizer groups with a found-inf flag of their own (= MP_MAX_GROUPS). */
#define MP_SCALER_GROUPS 4

/* found_inf values: a non-finite gradient, or a non-finite loss (a forward
 * overflow). The larger wins, also in a data-parallel max all-reduce. */
enum { MP_FOUND_GRADIENT = 1, MP_FOUND_FORWARD = 2 };

/* The scaler: rules and state in one plain struct, no pointers, the same
 * bytes on the host and the device (copied between them as a whole). */
typedef struct {
    mp_scaler_opts opts;         /* with defaults applied */
    float min_scale;             /* effective minimum: opts.min_scale or the 2^-24 floor */
    float max_scale;             /* effective maximum: opts.max_scale or +inf */
    float scale;
    int growth_tracker;          /* clean steps since the last overflow or growth */
    int hysteresis_left;         /* DeepSpeed's cur_hysteresis; 1 without hysteresis */
    long long last_overflow_step; /* step of the last gradient overflow, -1 for none */
    long long step;              /* gradient checks (updates without a forward overflow) */
    long long skipped_steps;     /* gradient and forward overflows */
    long long forward_overflows; /* total */
    int consecutive_forward_overflows;
    /* MP_FOUND_* of this iteration: the largest over everything (what the
     * update reads), and per optimizer group (what each optimizer skips on) */
    int found_inf;
    int group_found[MP_SCALER_GROUPS];
    /* bookkeeping for the host's overflow reports (a GPU's host reads it
     * without waiting): updates counted, the index of the last skipped one,
     * its MP_FOUND_* and the scale it ran with; the longest run of
     * consecutive forward overflows and the update that reached it */
    long long ends, last_skip_end, forward_peak_end;
    int last_found, forward_peak;
    float last_skip_scale;
    /* steps each optimizer group skipped on its own gradients' NaN/inf */
    long long group_skips[MP_SCALER_GROUPS];
} mp_scaler;

/* found_inf and the groups' flags are one block of ints: a data-parallel run
 * max-all-reduces them together. (Checked by the C compiler; the CUDA
 * sources see the same layout.) */
#ifndef __cplusplus
_Static_assert(offsetof(mp_scaler, group_found) == offsetof(mp_scaler, found_inf) + sizeof(int),
               "found_inf and group_found must be adjacent");
#endif

/* Validates the options, applies the defaults and starts the state. Errors
 * name the option: "--loss-scale-growth 1 must be > 1". On error *s is
 * zeroed. */
mp_status mp_scaler_init(mp_scaler *s, mp_scaler_opts o);

/* A static scale of 1 that only checks for NaN/inf: the state of a run
 * without loss scaling. */
void mp_scaler_init_check_only(mp_scaler *s);

/* The factor the loss is multiplied by before backward. */
float mp_scaler_scale(const mp_scaler *s);

/* Fused unscale + inf/NaN check of n fp32 gradient tensors in place: each
 * element becomes x * inv with inv = (float)(1.0 / (double)scale) as in
 * GradScaler.unscale_ (no multiply at all when the scale is 1), checked on
 * its bit pattern (safe under -ffast-math). Every tensor is unscaled, also
 * after a non-finite one. A non-finite value raises group `group`'s flag and
 * found_inf; returns the index of the first such tensor, or -1. Tensors of
 * MP_SCALER_PAR_MIN elements or more are split over OpenMP threads. */
int mp_scaler_unscale_check_group(mp_scaler *s, int group, float *const *grads, const int64_t *sizes, int n);
/* The same for group 0. */
int mp_scaler_unscale_check(mp_scaler *s, float *const *grads, const int64_t *sizes, int n);

/* Check only (forward provenance): index of the first non-finite element of
 * x, or -1. */
int64_t mp_first_nonfinite(const float *x, int64_t n); // x: (n)

bool mp_scaler_found_inf(const mp_scaler *s);

/* A non-finite loss in this iteration's forward: found_inf and every
 * group's flag become MP_FOUND_FORWARD. */
void mp_scaler_mark_forward(mp_scaler *s);

/* The one update per iteration (scaler_rule.h), after the optimizers stepped
 * or skipped. Returns true when the step was skipped; clears the flags. */
bool mp_scaler_update(mp_scaler *s);

/* Dynamic mode and the scale is at its minimum: an overflow can no longer
 * lower it. */
bool mp_scaler_at_floor(const mp_scaler *s);

/* A forward overflow handled on its own: mp_scaler_mark_forward then
 * mp_scaler_update (skipped_steps, forward_overflows and the consecutive
 * count rise; the scale stays). mp_scaler_forward_ok resets the count. */
void mp_scaler_forward_overflow(mp_scaler *s);
void mp_scaler_forward_ok(mp_scaler *s);
int mp_scaler_consecutive_forward_overflows(const mp_scaler *s);

/* Forget the report bookkeeping (after a checkpoint restore): no update
 * seen, the longest forward run = the current one. */
void mp_scaler_reset_bookkeeping(mp_scaler *s);

/* Checkpoint state as (name, value) pairs, in this order: "scale",
 * "growth_tracker", "hysteresis_left", "last_overflow_step", "step",
 * "skipped_steps", "forward_overflows", "consecutive_forward_overflows".
 * Writes min(max, MP_SCALER_STATE_COUNT) pairs (names or values may be NULL
 * when max is 0) and returns MP_SCALER_STATE_COUNT. */
int mp_scaler_state_get(const mp_scaler *s, const char **names, double *values, int max);
/* Restores one pair; an unknown name or a value out of range for the
 * configured options is MP_ERR_INVALID_ARG and leaves the state unchanged. */
mp_status mp_scaler_state_set(mp_scaler *s, const char *name, double value);

#ifdef __cplusplus
}
#endif
#endif
