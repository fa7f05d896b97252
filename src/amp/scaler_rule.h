/* scaler_rule.h — the loss scaler's update rule, written once and compiled
 * for the host (amp/scaler.c, the CPU trainer) and the device (the GPU's
 * one-thread update kernel) over the one plain state struct, mp_scaler.
 *
 * Scale factors are products in double stored as float, exactly as torch's
 * _amp_update_scale_ does with its fp32 scale tensor:
 *   hysteresis 0 or 1 (GradScaler, Apex):
 *     overflow: scale = max(min, scale * backoff), growth_tracker = 0;
 *     clean:    growth_tracker += 1; when it reaches growth_interval:
 *               next = min(max, scale * growth), kept only if finite,
 *               growth_tracker = 0.
 *   hysteresis N > 1 (DeepSpeed's delayed_shift, followed literally):
 *     overflow: if hysteresis_left == 1: back off, else hysteresis_left -= 1;
 *     clean:    if consecutive_hysteresis: hysteresis_left = N;
 *               if (step - last_overflow_step) % growth_interval == 0:
 *                 if !consecutive_hysteresis: hysteresis_left = N; grow.
 *   step += 1 after every gradient check, skipped or not.
 * A forward overflow (found_inf >= MP_FOUND_FORWARD: a NaN/inf loss) is
 * counted (skipped, forward_overflows, consecutive_forward_overflows) and
 * leaves the scale, the step count and the growth tracker alone: lowering
 * the scale cannot fix it. */
#ifndef MP_AMP_SCALER_RULE_H
#define MP_AMP_SCALER_RULE_H

#include "amp/scaler.h"
#include "core/hostdev.h"

MP_HD static inline bool mp_scaler_nonfinite(float x) {
    union { float f; uint32_t u; } v = {.f = x};
    return (v.u & 0x7f800000u) == 0x7f800000u;
}

/* The factor gradients are multiplied by to unscale them, as
 * GradScaler.unscale_: (float)(1 / (double)scale). */
MP_HD static inline float mp_scaler_inverse(float scale) { return (float)(1.0 / (double)scale); }

MP_HD static inline void mp_scaler_back_off(mp_scaler *s) {
    float next = (float)((double)s->scale * (double)s->opts.backoff_factor);
    if (!(next >= s->min_scale)) next = s->min_scale;
    s->scale = next;
}

MP_HD static inline void mp_scaler_grow(mp_scaler *s) {
    float next = (float)((double)s->scale * (double)s->opts.growth_factor);
    if (next > s->max_scale) next = s->max_scale;
    if (!mp_scaler_nonfinite(next)) s->scale = next;
}

MP_HD static inline void mp_scaler_update_plain(mp_scaler *s, bool overflow) {
    if (overflow) {
        mp_scaler_back_off(s);
        s->growth_tracker = 0;
        return;
    }
    const int successful = s->growth_tracker + 1;
    if (successful == s->opts.growth_interval) {
        mp_scaler_grow(s);
        s->growth_tracker = 0;
    } else {
        s->growth_tracker = successful;
    }
}

MP_HD static inline void mp_scaler_update_hysteresis(mp_scaler *s, bool overflow) {
    const int h = s->opts.hysteresis;
    if (overflow) {
        if (s->hysteresis_left == 1) mp_scaler_back_off(s);
        else s->hysteresis_left -= 1;
        s->growth_tracker = 0;
        return;
    }
    if (s->opts.consecutive_hysteresis) s->hysteresis_left = h;
    s->growth_tracker += 1;
    if ((s->step - s->last_overflow_step) % s->opts.growth_interval == 0) {
        if (!s->opts.consecutive_hysteresis) s->hysteresis_left = h;
        mp_scaler_grow(s);
        s->growth_tracker = 0;
    }
}

/* The one update per iteration: reads and clears found_inf (and every
 * group's flag), applies the rules above and keeps the bookkeeping the
 * host's overflow reports read. Returns whether the step was skipped. */
MP_HD static inline bool mp_scaler_rule_update(mp_scaler *s) {
    const int found = s->found_inf;
    const long long end = s->ends++;
    s->found_inf = 0;
    for (int g = 0; g < MP_SCALER_GROUPS; g++) {
        if (found < MP_FOUND_FORWARD && s->group_found[g]) s->group_skips[g]++;
        s->group_found[g] = 0;
    }
    if (found) {
        s->last_skip_end = end;
        s->last_found = found;
        s->last_skip_scale = s->scale;
    }
    if (found >= MP_FOUND_FORWARD) {
        s->skipped_steps++;
        s->forward_overflows++;
        if (s->consecutive_forward_overflows < 0x7fffffff) s->consecutive_forward_overflows++;
        if (s->consecutive_forward_overflows > s->forward_peak) {
            s->forward_peak = s->consecutive_forward_overflows;
            s->forward_peak_end = end;
        }
        return true;
    }
    s->consecutive_forward_overflows = 0;
    const bool skip = found != 0;
    if (!s->opts.static_scale) {
        if (s->opts.hysteresis > 1) mp_scaler_update_hysteresis(s, skip);
        else mp_scaler_update_plain(s, skip);
    }
    if (skip) {
        s->skipped_steps++;
        s->last_overflow_step = s->step;
    }
    s->step++;
    return skip;
}

#endif
