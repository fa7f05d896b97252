/* scaler.c — the loss scaler on the host: option checks, the update (the
 * rule of scaler_rule.h, shared with the device), the fused unscale +
 * inf/NaN check and the checkpoint state (decisions in scaler.h).
 * Non-finite tests look at the exponent bits, so no compiler flag can fold
 * them away; the unscale is one memory-bound pass per tensor, split over
 * OpenMP threads when large. */
#include "amp/scaler.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "amp/scaler_rule.h"
#include "core/error.h"

/* Elements scanned per chunk by mp_first_nonfinite. */
#define FIRST_BLOCK 4096

static inline uint32_t nonfinite_bit(float x) { return mp_scaler_nonfinite(x); }

static inline bool is_finite(float x) { return !mp_scaler_nonfinite(x); }

/* Bit tests for the option checks too, so that -ffast-math cannot make a NaN
 * option look like 0 ("not given") or pass a range test. */
static inline bool is_zero(float x) {
    union { float f; uint32_t u; } v = {.f = x};
    return (v.u & 0x7fffffffu) == 0;
}

static inline bool is_nan(float x) {
    union { float f; uint32_t u; } v = {.f = x};
    return (v.u & 0x7fffffffu) > 0x7f800000u;
}

/* ---- options -------------------------------------------------------------- */

/* A size option: finite and > 0, a normal float, or 0 for "not given". */
static mp_status check_bound(const char *opt, float v) {
    if (is_zero(v)) return MP_OK;
    if (!is_finite(v) || !(v > 0.0f))
        return mp_error(MP_ERR_INVALID_ARG, "%s %g must be a finite number > 0 (0: none)", opt, (double)v);
    if (v < FLT_MIN)
        return mp_error(MP_ERR_INVALID_ARG, "%s %g is below the smallest normal float %g", opt, (double)v,
                        (double)FLT_MIN);
    return MP_OK;
}

mp_status mp_scaler_init(mp_scaler *s, mp_scaler_opts o) {
    MP_ASSERT(s != NULL);
    memset(s, 0, sizeof *s);
    mp_scaler_opts d = o;
    const bool init_given = !is_zero(o.init_scale);

    /* 0 means "the default 2^16" only for a dynamic scaler, which moves away
     * from it; a static scale is used as given, so it must be given. */
    if (!init_given && o.static_scale)
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale 0: a static loss scale must be a finite number > 0 "
                                            "(or use a dynamic scale)");
    if (!init_given) d.init_scale = MP_SCALER_DEFAULT_INIT;
    if (!is_finite(d.init_scale) || !(d.init_scale > 0.0f))
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale %g must be a finite number > 0", (double)o.init_scale);
    if (d.init_scale < FLT_MIN)
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale %g is below the smallest normal float %g",
                        (double)o.init_scale, (double)FLT_MIN);

    if (is_zero(d.growth_factor)) d.growth_factor = MP_SCALER_DEFAULT_GROWTH;
    if (is_nan(d.growth_factor) || !(d.growth_factor > 1.0f))
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale-growth %g must be > 1", (double)o.growth_factor);
    if (!is_finite(d.growth_factor))
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale-growth %g must be finite", (double)o.growth_factor);

    if (is_zero(d.backoff_factor)) d.backoff_factor = MP_SCALER_DEFAULT_BACKOFF;
    if (is_nan(d.backoff_factor) || !(d.backoff_factor > 0.0f && d.backoff_factor < 1.0f))
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale-backoff %g must be in (0, 1)", (double)o.backoff_factor);

    if (d.growth_interval == 0) d.growth_interval = MP_SCALER_DEFAULT_INTERVAL;
    if (d.growth_interval < 1)
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale-window %d must be >= 1", o.growth_interval);

    MP_TRY(check_bound("--min-loss-scale", o.min_scale));
    MP_TRY(check_bound("--max-loss-scale", o.max_scale));
    if (!is_zero(o.min_scale) && !is_zero(o.max_scale) && o.min_scale > o.max_scale)
        return mp_error(MP_ERR_INVALID_ARG, "--min-loss-scale %g is larger than --max-loss-scale %g",
                        (double)o.min_scale, (double)o.max_scale);
    const float lo = is_zero(o.min_scale) ? MP_SCALER_DEFAULT_MIN : o.min_scale;
    const float hi = is_zero(o.max_scale) ? INFINITY : o.max_scale;
    if (is_zero(o.min_scale) && hi < lo)
        return mp_error(MP_ERR_INVALID_ARG,
                        "--max-loss-scale %g is below the default minimum loss scale 2^-24 = %g; "
                        "give --min-loss-scale too",
                        (double)o.max_scale, (double)lo);

    if (d.hysteresis < 0)
        return mp_error(MP_ERR_INVALID_ARG, "--loss-scale-hysteresis %d must be >= 0", o.hysteresis);

    if (!d.static_scale) {
        if (init_given && d.init_scale > hi)
            return mp_error(MP_ERR_INVALID_ARG, "--loss-scale %g is larger than --max-loss-scale %g",
                            (double)d.init_scale, (double)hi);
        if (init_given && d.init_scale < lo) {
            if (!is_zero(o.min_scale))
                return mp_error(MP_ERR_INVALID_ARG, "--loss-scale %g is smaller than --min-loss-scale %g",
                                (double)d.init_scale, (double)lo);
            return mp_error(MP_ERR_INVALID_ARG,
                            "--loss-scale %g is below the default minimum loss scale 2^-24 = %g; "
                            "give --min-loss-scale to go lower",
                            (double)d.init_scale, (double)lo);
        }
        /* The default 2^16 is clamped into the range, as Apex clamps it to
         * max_loss_scale. */
        if (d.init_scale > hi) d.init_scale = hi;
        if (d.init_scale < lo) d.init_scale = lo;
    }

    s->opts = d;
    s->min_scale = lo;
    s->max_scale = hi;
    s->scale = d.init_scale;
    s->growth_tracker = 0;
    s->hysteresis_left = d.hysteresis > 1 ? d.hysteresis : 1;
    s->last_overflow_step = -1;
    mp_scaler_reset_bookkeeping(s);
    return MP_OK;
}

void mp_scaler_init_check_only(mp_scaler *s) {
    mp_status st = mp_scaler_init(s, (mp_scaler_opts){.static_scale = true, .init_scale = 1});
    MP_ASSERT(st == MP_OK);
}

void mp_scaler_reset_bookkeeping(mp_scaler *s) {
    s->ends = 0;
    s->last_skip_end = -1;
    s->forward_peak_end = -1;
    s->last_found = 0;
    s->forward_peak = s->consecutive_forward_overflows;
    s->last_skip_scale = s->scale;
}

float mp_scaler_scale(const mp_scaler *s) { return s->scale; }
bool mp_scaler_found_inf(const mp_scaler *s) { return s->found_inf != 0; }
bool mp_scaler_at_floor(const mp_scaler *s) { return !s->opts.static_scale && s->scale <= s->min_scale; }

/* ---- unscale and check ---------------------------------------------------- */

/* x *= inv in place (mul) or just a scan; true when any result is non-finite. */
static bool unscale_one(float *x, int64_t n, float inv, bool mul) { // x: (n)
    uint32_t bad = 0;
    if (mul) {
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= MP_SCALER_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float y = x[i] * inv;
            x[i] = y;
            bad |= nonfinite_bit(y);
        }
    } else {
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= MP_SCALER_PAR_MIN)
        for (int64_t i = 0; i < n; i++) bad |= nonfinite_bit(x[i]);
    }
    return bad != 0;
}

int mp_scaler_unscale_check_group(mp_scaler *s, int group, float *const *grads, const int64_t *sizes, int n) {
    MP_ASSERT(s != NULL && n >= 0 && (n == 0 || (grads != NULL && sizes != NULL)));
    MP_ASSERT(group >= 0 && group < MP_SCALER_GROUPS);
    const float inv = mp_scaler_inverse(s->scale);
    const bool mul = s->scale != 1.0f;
    int first = -1;
    for (int t = 0; t < n; t++) {
        MP_ASSERT(sizes[t] >= 0 && (sizes[t] == 0 || grads[t] != NULL));
        if (unscale_one(grads[t], sizes[t], inv, mul) && first < 0) first = t;
    }
    if (first >= 0) {
        if (s->group_found[group] < MP_FOUND_GRADIENT) s->group_found[group] = MP_FOUND_GRADIENT;
        if (s->found_inf < MP_FOUND_GRADIENT) s->found_inf = MP_FOUND_GRADIENT;
    }
    return first;
}

int mp_scaler_unscale_check(mp_scaler *s, float *const *grads, const int64_t *sizes, int n) {
    return mp_scaler_unscale_check_group(s, 0, grads, sizes, n);
}

int64_t mp_first_nonfinite(const float *x, int64_t n) { // x: (n)
    MP_ASSERT(n >= 0 && (n == 0 || x != NULL));
    const int64_t blocks = (n + FIRST_BLOCK - 1) / FIRST_BLOCK;
    int64_t first = n;
    /* Static schedule: each thread's blocks ascend, so after its first hit it
     * can skip the rest. */
#pragma omp parallel for schedule(static) reduction(min : first) if (n >= MP_SCALER_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t lo = b * FIRST_BLOCK, hi = lo + FIRST_BLOCK < n ? lo + FIRST_BLOCK : n;
        if (lo >= first) continue;
        uint32_t bad = 0;
        for (int64_t i = lo; i < hi; i++) bad |= nonfinite_bit(x[i]);
        if (!bad) continue;
        for (int64_t i = lo; i < hi; i++) {
            if (nonfinite_bit(x[i])) {
                if (i < first) first = i;
                break;
            }
        }
    }
    return first == n ? -1 : first;
}

/* ---- update (scaler_rule.h) ---------------------------------------------- */

void mp_scaler_mark_forward(mp_scaler *s) {
    s->found_inf = MP_FOUND_FORWARD;
    for (int g = 0; g < MP_SCALER_GROUPS; g++) s->group_found[g] = MP_FOUND_FORWARD;
}

bool mp_scaler_update(mp_scaler *s) { return mp_scaler_rule_update(s); }

void mp_scaler_forward_overflow(mp_scaler *s) {
    mp_scaler_mark_forward(s);
    mp_scaler_rule_update(s);
}

void mp_scaler_forward_ok(mp_scaler *s) { s->consecutive_forward_overflows = 0; }

int mp_scaler_consecutive_forward_overflows(const mp_scaler *s) { return s->consecutive_forward_overflows; }

/* ---- checkpoint state ----------------------------------------------------- */

static const char *const state_names[MP_SCALER_STATE_COUNT] = {
    "scale", "growth_tracker", "hysteresis_left", "last_overflow_step",
    "step", "skipped_steps", "forward_overflows", "consecutive_forward_overflows",
};

int mp_scaler_state_get(const mp_scaler *s, const char **names, double *values, int max) {
    const double v[MP_SCALER_STATE_COUNT] = {
        (double)s->scale, (double)s->growth_tracker, (double)s->hysteresis_left,
        (double)s->last_overflow_step, (double)s->step, (double)s->skipped_steps,
        (double)s->forward_overflows, (double)s->consecutive_forward_overflows,
    };
    for (int i = 0; i < max && i < MP_SCALER_STATE_COUNT; i++) {
        if (names) names[i] = state_names[i];
        if (values) values[i] = v[i];
    }
    return MP_SCALER_STATE_COUNT;
}

static bool is_finite_d(double x) {
    union { double d; uint64_t u; } v = {.d = x};
    return (v.u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

/* An integer-valued state entry in [lo, hi]. */
static mp_status check_int(const char *name, double v, double lo, double hi) {
    if (!is_finite_d(v) || !(v >= lo && v <= hi) || v != floor(v))
        return mp_error(MP_ERR_INVALID_ARG, "loss scaler state '%s' = %g must be an integer in [%.0f, %.0f]", name,
                        v, lo, hi);
    return MP_OK;
}

mp_status mp_scaler_state_set(mp_scaler *s, const char *name, double value) {
    MP_ASSERT(s != NULL && name != NULL);
    const double big = 9007199254740992.0; /* 2^53: exact in a double */
    if (strcmp(name, "scale") == 0) {
        if (!is_finite_d(value) || !(value >= FLT_MIN && value <= FLT_MAX) || (double)(float)value != value)
            return mp_error(MP_ERR_INVALID_ARG, "loss scaler state 'scale' = %g must be a positive normal float", value);
        const float f = (float)value;
        if (!s->opts.static_scale && (f < s->min_scale || f > s->max_scale))
            return mp_error(MP_ERR_INVALID_ARG,
                            "loss scaler state 'scale' = %g is outside [%g, %g] given by --min-loss-scale and "
                            "--max-loss-scale",
                            value, (double)s->min_scale, (double)s->max_scale);
        s->scale = f;
    } else if (strcmp(name, "growth_tracker") == 0) {
        MP_TRY(check_int(name, value, 0, s->opts.growth_interval - 1));
        s->growth_tracker = (int)value;
    } else if (strcmp(name, "hysteresis_left") == 0) {
        MP_TRY(check_int(name, value, 1, s->opts.hysteresis > 1 ? s->opts.hysteresis : 1));
        s->hysteresis_left = (int)value;
    } else if (strcmp(name, "last_overflow_step") == 0) {
        MP_TRY(check_int(name, value, -1, big));
        s->last_overflow_step = (int64_t)value;
    } else if (strcmp(name, "step") == 0) {
        MP_TRY(check_int(name, value, 0, big));
        s->step = (int64_t)value;
    } else if (strcmp(name, "skipped_steps") == 0) {
        MP_TRY(check_int(name, value, 0, big));
        s->skipped_steps = (int64_t)value;
    } else if (strcmp(name, "forward_overflows") == 0) {
        MP_TRY(check_int(name, value, 0, big));
        s->forward_overflows = (int64_t)value;
    } else if (strcmp(name, "consecutive_forward_overflows") == 0) {
        MP_TRY(check_int(name, value, 0, INT32_MAX));
        s->consecutive_forward_overflows = (int)value;
    } else {
        return mp_error(MP_ERR_INVALID_ARG, "loss scaler state: unknown entry '%s'", name);
    }
    return MP_OK;
}
