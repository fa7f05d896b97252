/* test_scaler.c — the loss scaler against PyTorch's GradScaler
 * (_amp_update_scale_), Apex's LossScaler.update_scale and DeepSpeed's
 * DynamicLossScaler.update_scale, each written out again here in double, on
 * 10,000-step bursty overflow patterns and hand patterns (every scale value
 * and every skip decision equal); the fused unscale + inf/NaN check (exact
 * products, +inf/-inf/NaN at every kind of position, OpenMP-split tensors);
 * the seed-000 collapse (forward NaN every step, gradient overflow every
 * step); static mode; option errors; the checkpoint state. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler.h"
#include "check.h"
#include "core/error.h"
#include "core/rng.h"

#define PATTERN_LEN 10000

/* ---- overflow patterns ---------------------------------------------------- */

/* Clean steps with bursts: each step starts a burst of 1..max_burst
 * overflows with probability p_start. */
static void bursty_pattern(bool *pat, int n, uint64_t seed, double p_start, int max_burst) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    int i = 0;
    while (i < n) {
        if (mp_rng_uniform(&r) < p_start) {
            int len = 1 + (int)mp_rng_below(&r, (uint64_t)max_burst);
            for (int k = 0; k < len && i < n; k++) pat[i++] = true;
        } else {
            pat[i++] = false;
        }
    }
}

/* '1' = overflow, '0' = clean, repeated to fill n. */
static void hand_pattern(bool *pat, int n, const char *s) {
    size_t len = strlen(s);
    for (int i = 0; i < n; i++) pat[i] = s[(size_t)i % len] == '1';
}

/* Overflows that depend on the scale, as in fp16 training: the step
 * overflows when scale * max|gradient| passes fp16's 65504, with log2 of
 * max|gradient| uniform in [log2_lo, log2_hi]; plus bursts of 1..max_burst
 * overflows started with probability p_burst. Mean-reverting, so a long run
 * stays inside the fp32 range without a minimum or maximum. */
typedef struct {
    mp_rng rng;
    double log2_lo, log2_hi, p_burst;
    int max_burst, burst_left;
} grad_model;

static grad_model make_model(uint64_t seed, double log2_lo, double log2_hi, double p_burst, int max_burst) {
    grad_model m = {.log2_lo = log2_lo, .log2_hi = log2_hi, .p_burst = p_burst, .max_burst = max_burst};
    mp_rng_seed(&m.rng, seed);
    return m;
}

static bool model_next(grad_model *m, double scale) {
    if (m->burst_left > 0) {
        m->burst_left--;
        return true;
    }
    if (mp_rng_uniform(&m->rng) < m->p_burst) {
        m->burst_left = (int)mp_rng_below(&m->rng, (uint64_t)m->max_burst);
        return true;
    }
    double g = exp2(m->log2_lo + (m->log2_hi - m->log2_lo) * mp_rng_uniform(&m->rng));
    return scale * g > 65504.0;
}

/* One iteration of our scaler: a two-tensor gradient, the second holding a
 * non-finite value (cycling +inf, -inf, NaN) on overflow steps, unscaled and
 * checked, then the update. Returns the skip decision. */
static bool drive(mp_scaler *s, bool overflow, int step) {
    static const float bad[3] = {INFINITY, -INFINITY, NAN};
    float g0[3] = {0.5f, -2.0f, 8.0f}, g1[2] = {1.0f, overflow ? bad[step % 3] : 4.0f};
    float *grads[2] = {g0, g1};
    const int64_t sizes[2] = {3, 2};
    int first = mp_scaler_unscale_check(s, grads, sizes, 2);
    CHECK(first == (overflow ? 1 : -1), "drive step %d: first non-finite tensor %d", step, first);
    CHECK(mp_scaler_found_inf(s) == overflow, "drive step %d: found_inf %d", step, mp_scaler_found_inf(s));
    return mp_scaler_update(s);
}

/* ---- the references, in double, line by line ------------------------------ */

/* torch/csrc: _amp_update_scale_ on an fp32 scale tensor and an int32
 * growth tracker; the factors are Python floats (double). */
typedef struct {
    float scale; /* torch.full((), init_scale, dtype=torch.float32) */
    int growth_tracker;
} ref_torch;

static bool ref_torch_update(ref_torch *r, bool found_inf, double growth_factor, double backoff_factor,
                             int growth_interval) {
    if (found_inf) {
        r->scale = (float)((double)r->scale * backoff_factor);
        r->growth_tracker = 0;
    } else {
        // Entering this branch means we just carried out a successful step,
        // so growth_tracker is incremented before comparing to growth_interval.
        int successful = r->growth_tracker + 1;
        if (successful == growth_interval) {
            float new_scale = (float)((double)r->scale * growth_factor);
            // Do not grow the scale past fp32 bounds to inf.
            if (isfinite(new_scale)) r->scale = new_scale;
            r->growth_tracker = 0;
        } else {
            r->growth_tracker = successful;
        }
    }
    return found_inf; /* GradScaler.step skips optimizer.step when found_inf */
}

/* apex/amp/scaler.py: LossScaler (a Python float scale; min_loss_scale 0
 * stands for None). */
typedef struct {
    bool dynamic;
    double loss_scale, max_loss_scale, min_loss_scale;
    int scale_seq_len, unskipped;
    bool has_overflow;
} ref_apex;

static void ref_apex_init(ref_apex *r, bool dynamic, double loss_scale, double init_scale, int scale_window,
                          double min_loss_scale, double max_loss_scale) {
    if (dynamic) {
        r->dynamic = true;
        r->loss_scale = fmin(max_loss_scale, init_scale);
    } else {
        r->dynamic = false;
        r->loss_scale = loss_scale;
    }
    r->max_loss_scale = max_loss_scale;
    r->min_loss_scale = min_loss_scale;
    r->scale_seq_len = scale_window;
    r->unskipped = 0;
    r->has_overflow = false;
}

static bool ref_apex_update_scale(ref_apex *r) {
    bool should_skip;
    if (r->has_overflow && r->dynamic) {
        should_skip = true;
        if (r->min_loss_scale != 0.0) r->loss_scale = fmax(r->min_loss_scale, r->loss_scale / 2.);
        else r->loss_scale = r->loss_scale / 2.;
        r->unskipped = 0;
    } else {
        should_skip = false;
        r->unskipped += 1;
    }
    if (r->unskipped == r->scale_seq_len && r->dynamic) {
        r->loss_scale = fmin(r->max_loss_scale, r->loss_scale * 2.);
        r->unskipped = 0;
    }
    return should_skip;
}

/* deepspeed/runtime/fp16/loss_scaler.py: DynamicLossScaler with
 * raise_error_at_min_scale=False (min_scale 0 stands for no minimum). */
typedef struct {
    double cur_scale;
    int64_t cur_iter, last_overflow_iter;
    double scale_factor;
    int scale_window;
    double min_scale;
    int delayed_shift, cur_hysteresis;
    bool consecutive_hysteresis;
} ref_ds;

static void ref_ds_init(ref_ds *r, double init_scale, double scale_factor, int scale_window, double min_scale,
                        int delayed_shift, bool consecutive_hysteresis) {
    r->cur_scale = init_scale;
    r->cur_iter = 0;
    r->last_overflow_iter = -1;
    r->scale_factor = scale_factor;
    r->scale_window = scale_window;
    r->min_scale = min_scale;
    r->delayed_shift = delayed_shift;
    r->cur_hysteresis = delayed_shift;
    r->consecutive_hysteresis = consecutive_hysteresis;
}

static bool ref_ds_update_scale(ref_ds *r, bool overflow) {
    if (overflow) {
        if (r->delayed_shift == 1 || r->cur_hysteresis == 1) {
            double next_scale = fmax(r->cur_scale / r->scale_factor, r->min_scale);
            r->cur_scale = next_scale;
        } else {
            r->cur_hysteresis -= 1;
        }
        r->last_overflow_iter = r->cur_iter;
    } else {
        if (r->consecutive_hysteresis) r->cur_hysteresis = r->delayed_shift;
        if ((r->cur_iter - r->last_overflow_iter) % r->scale_window == 0) {
            if (!r->consecutive_hysteresis) r->cur_hysteresis = r->delayed_shift;
            r->cur_scale *= r->scale_factor;
        }
    }
    r->cur_iter += 1;
    return overflow; /* FP16_Optimizer.step returns early on overflow */
}

/* ---- our scaler vs a reference -------------------------------------------- */

typedef enum { REF_TORCH, REF_APEX, REF_DS } ref_kind;

typedef struct {
    ref_kind kind;
    /* torch */
    double init_scale, growth_factor, backoff_factor;
    int growth_interval;
    /* apex: init_scale, growth_interval (scale_window), min, max */
    /* deepspeed: init_scale, growth_factor (scale_factor), growth_interval, min, delayed_shift */
    double min_scale, max_scale;
    int delayed_shift;
    bool consecutive;
} ref_cfg;

typedef struct {
    int growths, backoffs, held_on_overflow, overflows;
    double lowest, highest;
} seq_stats;

static double ref_scale(ref_kind k, const ref_torch *t, const ref_apex *a, const ref_ds *d) {
    return k == REF_TORCH ? (double)t->scale : k == REF_APEX ? a->loss_scale : d->cur_scale;
}

/* Runs our scaler (options o) and the reference (cfg) over pat, or over the
 * overflows model draws from the reference's scale when pat is NULL; every scale
 * and skip decision must be equal, and the bookkeeping that has a
 * counterpart (GradScaler's growth tracker, DeepSpeed's cur_hysteresis and
 * last_overflow_iter) too. */
static seq_stats compare_sequence(const char *label, mp_scaler_opts o, ref_cfg c, const bool *pat, grad_model *model,
                                  int n) {
    seq_stats st = {0, 0, 0, 0, INFINITY, 0.0};
    mp_scaler s;
    mp_status status = mp_scaler_init(&s, o);
    CHECK(status == MP_OK, "%s: init: %s", label, mp_last_error());
    if (status != MP_OK) return st;
    ref_torch t = {(float)c.init_scale, 0};
    ref_apex a;
    ref_apex_init(&a, true, 0.0, c.init_scale, c.growth_interval, c.min_scale, c.max_scale);
    ref_ds d;
    ref_ds_init(&d, c.init_scale, c.growth_factor, c.growth_interval, c.min_scale, c.delayed_shift, c.consecutive);

    double r0 = ref_scale(c.kind, &t, &a, &d);
    CHECK((double)mp_scaler_scale(&s) == r0, "%s: initial scale %.9g, reference %.9g", label,
          (double)mp_scaler_scale(&s), r0);
    st.lowest = st.highest = r0;
    int mismatches = 0;
    for (int i = 0; i < n; i++) {
        double before = ref_scale(c.kind, &t, &a, &d);
        const bool overflow = pat ? pat[i] : model_next(model, before);
        bool ref_skip;
        if (c.kind == REF_TORCH) {
            ref_skip = ref_torch_update(&t, overflow, c.growth_factor, c.backoff_factor, c.growth_interval);
        } else if (c.kind == REF_APEX) {
            a.has_overflow = overflow;
            ref_skip = ref_apex_update_scale(&a);
        } else {
            ref_skip = ref_ds_update_scale(&d, overflow);
        }
        bool skip = drive(&s, overflow, i);
        double after = ref_scale(c.kind, &t, &a, &d);
        bool ok = skip == ref_skip && (double)mp_scaler_scale(&s) == after;
        if (c.kind == REF_TORCH) ok = ok && s.growth_tracker == t.growth_tracker;
        if (c.kind == REF_DS)
            ok = ok && s.hysteresis_left == d.cur_hysteresis && s.last_overflow_step == d.last_overflow_iter &&
                 s.step == d.cur_iter;
        if (!ok && mismatches++ == 0)
            CHECK(ok, "%s: step %d (overflow %d): ours scale %.9g skip %d tracker %d hyst %d last %lld; "
                      "reference scale %.9g skip %d tracker %d hyst %d last %lld",
                  label, i, overflow, (double)mp_scaler_scale(&s), skip, s.growth_tracker, s.hysteresis_left,
                  (long long)s.last_overflow_step, after, ref_skip, t.growth_tracker, d.cur_hysteresis,
                  (long long)d.last_overflow_iter);
        st.overflows += overflow;
        if (after > before) st.growths++;
        if (after < before) st.backoffs++;
        if (overflow && after == before) st.held_on_overflow++;
        if (after < st.lowest) st.lowest = after;
        if (after > st.highest) st.highest = after;
    }
    CHECK(mismatches == 0, "%s: %d of %d steps differ from the reference", label, mismatches, n);
    CHECK(s.step == n && s.skipped_steps == st.overflows, "%s: step %lld skipped %lld, want %d and %d", label,
          (long long)s.step, (long long)s.skipped_steps, n, st.overflows);
    return st;
}

/* The references have no floor and (DeepSpeed) no fp32 ceiling: a case is
 * only a valid comparison if it stays within [2^-24, FLT_MAX]; and it must
 * exercise the rules. */
static void check_exercised(const char *label, seq_stats st, int min_growths, int min_backoffs, int min_held) {
    CHECK(st.lowest >= (double)MP_SCALER_DEFAULT_MIN && st.highest <= (double)FLT_MAX,
          "%s: the pattern leaves [2^-24, FLT_MAX]: %g .. %g", label, st.lowest, st.highest);
    CHECK(st.growths >= min_growths && st.backoffs >= min_backoffs && st.held_on_overflow >= min_held,
          "%s: too tame: %d growths, %d backoffs, %d overflows without backoff (want >= %d, %d, %d)", label,
          st.growths, st.backoffs, st.held_on_overflow, min_growths, min_backoffs, min_held);
}

static void test_gradscaler(void) {
    bool *pat = malloc(PATTERN_LEN * sizeof(bool));
    ref_cfg torch_default = {.kind = REF_TORCH, .init_scale = 65536., .growth_factor = 2., .backoff_factor = 0.5,
                             .growth_interval = 2000};
    seq_stats st;

    /* Defaults: rare overflows, so 2000-step clean runs happen. */
    bursty_pattern(pat, PATTERN_LEN, 11, 0.0004, 3);
    st = compare_sequence("torch default", (mp_scaler_opts){0}, torch_default, pat, NULL, PATTERN_LEN);
    check_exercised("torch default", st, 2, 2, 0);

    ref_cfg c = torch_default;
    c.growth_interval = 3;
    bursty_pattern(pat, PATTERN_LEN, 12, 0.08, 4);
    st = compare_sequence("torch interval 3", (mp_scaler_opts){.growth_interval = 3}, c, pat, NULL,
                          PATTERN_LEN);
    check_exercised("torch interval 3", st, 500, 500, 0);

    c.growth_interval = 5;
    bursty_pattern(pat, PATTERN_LEN, 13, 0.03, 8);
    st = compare_sequence("torch interval 5", (mp_scaler_opts){.growth_interval = 5}, c, pat, NULL,
                          PATTERN_LEN);
    check_exercised("torch interval 5", st, 500, 500, 0);

    /* Factors that are not powers of two: the fp32 rounding of every update
     * matters. The reference gets the same fp32 option values, widened. */
    c = (ref_cfg){.kind = REF_TORCH, .init_scale = 1000., .growth_factor = (double)3.0f,
                  .backoff_factor = (double)0.3f, .growth_interval = 4};
    bursty_pattern(pat, PATTERN_LEN, 14, 0.05, 3);
    st = compare_sequence("torch growth 3 backoff 0.3",
                          (mp_scaler_opts){.init_scale = 1000.0f, .growth_factor = 3.0f,
                                           .backoff_factor = 0.3f, .growth_interval = 4},
                          c, pat, NULL, PATTERN_LEN);
    check_exercised("torch growth 3 backoff 0.3", st, 500, 500, 0);

    /* Scale-dependent overflows with the default interval and with 3. */
    grad_model m = make_model(15, -6, 0, 0.0002, 3);
    st = compare_sequence("torch default, scale-dependent", (mp_scaler_opts){0}, torch_default, NULL,
                          &m, PATTERN_LEN);
    check_exercised("torch default, scale-dependent", st, 4, 4, 0);
    c = torch_default;
    c.growth_interval = 3;
    m = make_model(16, -10, -2, 0.02, 6);
    st = compare_sequence("torch interval 3, scale-dependent", (mp_scaler_opts){.growth_interval = 3},
                          c, NULL, &m, PATTERN_LEN);
    check_exercised("torch interval 3, scale-dependent", st, 500, 500, 0);

    /* Never grow to inf: clean steps with interval 1 stop at 2^127. */
    c = torch_default;
    c.growth_interval = 1;
    hand_pattern(pat, 400, "0");
    st = compare_sequence("torch to the fp32 limit", (mp_scaler_opts){.growth_interval = 1}, c,
                          pat, NULL, 400);
    CHECK(st.highest == 0x1.0p127 && st.growths == 127 - 16, "torch to the fp32 limit: highest %g after %d growths",
          st.highest, st.growths);

    /* Hand patterns: an overflow right at the growth step, alternation,
     * bursts back to back. */
    const char *hands[] = {"0010", "1", "01", "0011100000000", "1111100000000000111010101000"};
    for (int k = 0; k < 5; k++) {
        for (int interval = 1; interval <= 4; interval++) {
            char label[64];
            snprintf(label, sizeof label, "torch hand '%s' interval %d", hands[k], interval);
            hand_pattern(pat, 80, hands[k]);
            c = torch_default;
            c.growth_interval = interval;
            compare_sequence(label, (mp_scaler_opts){.growth_interval = interval}, c, pat, NULL,
                             k == 1 ? 40 : 80); /* at most 40 overflows: 2^16 -> 2^-24, no further */
        }
    }
    free(pat);
}

static void test_apex(void) {
    bool *pat = malloc(PATTERN_LEN * sizeof(bool));
    seq_stats st;
    const double two24 = 16777216.0;

    /* Apex defaults (max 2^24, no min), a short window: the cap is hit. */
    ref_cfg c = {.kind = REF_APEX, .init_scale = 65536., .growth_interval = 5, .max_scale = two24};
    bursty_pattern(pat, PATTERN_LEN, 21, 0.02, 5);
    st = compare_sequence("apex max 2^24",
                          (mp_scaler_opts){.growth_interval = 5, .max_scale = 16777216.0f}, c, pat, NULL,
                          PATTERN_LEN);
    check_exercised("apex max 2^24", st, 100, 100, 0);
    CHECK(st.highest == two24, "apex max 2^24: highest %g", st.highest);

    /* Heavy overflow with min_loss_scale 1: the floor is hit often. */
    c = (ref_cfg){.kind = REF_APEX, .init_scale = 65536., .growth_interval = 3, .min_scale = 1., .max_scale = two24};
    bursty_pattern(pat, PATTERN_LEN, 22, 0.3, 10);
    st = compare_sequence("apex min 1",
                          (mp_scaler_opts){.growth_interval = 3, .min_scale = 1.0f,
                                           .max_scale = 16777216.0f},
                          c, pat, NULL, PATTERN_LEN);
    check_exercised("apex min 1", st, 100, 100, 100);
    CHECK(st.lowest == 1.0, "apex min 1: lowest %g", st.lowest);

    /* Default init clamped to max 2^10 (Apex: min(max_loss_scale, init)), a
     * min that is no power of two (0.75), window 2. */
    c = (ref_cfg){.kind = REF_APEX, .init_scale = 65536., .growth_interval = 2, .min_scale = 0.75, .max_scale = 1024.};
    bursty_pattern(pat, PATTERN_LEN, 23, 0.2, 12);
    st = compare_sequence("apex min 0.75 max 1024",
                          (mp_scaler_opts){.growth_interval = 2, .min_scale = 0.75f,
                                           .max_scale = 1024.0f},
                          c, pat, NULL, PATTERN_LEN);
    check_exercised("apex min 0.75 max 1024", st, 100, 100, 100);
    CHECK(st.lowest == 0.75 && st.highest == 1024.0, "apex min 0.75 max 1024: range %g .. %g", st.lowest,
          st.highest);

    /* No minimum, scale-dependent overflows. */
    c = (ref_cfg){.kind = REF_APEX, .init_scale = 65536., .growth_interval = 4, .max_scale = two24};
    grad_model m = make_model(25, -4, 2, 0.01, 5);
    st = compare_sequence("apex no min, scale-dependent",
                          (mp_scaler_opts){.growth_interval = 4, .max_scale = 16777216.0f}, c, NULL,
                          &m, PATTERN_LEN);
    check_exercised("apex no min, scale-dependent", st, 300, 300, 0);

    /* Apex's default scale_window 2000. */
    c = (ref_cfg){.kind = REF_APEX, .init_scale = 65536., .growth_interval = 2000, .max_scale = two24};
    bursty_pattern(pat, PATTERN_LEN, 24, 0.0006, 2);
    st = compare_sequence("apex window 2000", (mp_scaler_opts){.max_scale = 16777216.0f}, c, pat, NULL,
                          PATTERN_LEN);
    check_exercised("apex window 2000", st, 2, 1, 0);
    free(pat);
}

static void test_deepspeed(void) {
    bool *pat = malloc(PATTERN_LEN * sizeof(bool));
    seq_stats st;
    /* Scale-dependent overflows (DeepSpeed has neither a ceiling nor, with
     * min 0, a floor); the cases with min 1 see gradients so large that the
     * scale settles near 1 and the minimum holds it. */
    struct {
        const char *label;
        int hyst, window;
        bool consecutive;
        float min;
        double log2_lo, log2_hi, p_burst;
        int burst;
        uint64_t seed;
        int min_growths, min_backoffs, min_held;
    } cases[] = {
        {"deepspeed hysteresis 2", 2, 5, false, 0.0f, -6, 0, 0.01, 4, 31, 300, 300, 100},
        {"deepspeed hysteresis 2 min 1", 2, 5, false, 1.0f, 13, 17, 0.01, 4, 32, 100, 100, 100},
        {"deepspeed hysteresis 2 consecutive", 2, 3, true, 0.0f, -6, 0, 0.02, 3, 33, 300, 300, 100},
        {"deepspeed hysteresis 3", 3, 4, false, 0.0f, -8, -2, 0.01, 5, 34, 300, 300, 100},
        {"deepspeed hysteresis 3 consecutive min 1", 3, 4, true, 1.0f, 13, 17, 0.02, 6, 35, 100, 100, 100},
        {"deepspeed hysteresis 3 window 2000", 3, 2000, true, 0.0f, -6, 0, 0.0005, 6, 36, 2, 2, 2},
        {"deepspeed hysteresis 5 window 1", 5, 1, false, 0.0f, -6, 0, 0.05, 8, 37, 300, 300, 100},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ref_cfg c = {.kind = REF_DS, .init_scale = 65536., .growth_factor = 2., .growth_interval = cases[k].window,
                     .min_scale = cases[k].min, .delayed_shift = cases[k].hyst,
                     .consecutive = cases[k].consecutive};
        mp_scaler_opts o = {.growth_interval = cases[k].window, .min_scale = cases[k].min,
                            .hysteresis = cases[k].hyst, .consecutive_hysteresis = cases[k].consecutive};
        grad_model m = make_model(cases[k].seed, cases[k].log2_lo, cases[k].log2_hi, cases[k].p_burst, cases[k].burst);
        st = compare_sequence(cases[k].label, o, c, NULL, &m, PATTERN_LEN);
        check_exercised(cases[k].label, st, cases[k].min_growths, cases[k].min_backoffs, cases[k].min_held);
        if (cases[k].min > 0.0f)
            CHECK(st.lowest == 1.0, "%s: the minimum was not reached (%g)", cases[k].label, st.lowest);
    }

    /* DeepSpeed with delayed_shift 1 is GradScaler; ours takes the plain path
     * for hysteresis 0 and 1. */
    for (int h = 0; h <= 1; h++) {
        ref_cfg c = {.kind = REF_DS, .init_scale = 65536., .growth_factor = 2., .growth_interval = 3,
                     .delayed_shift = 1};
        grad_model m = make_model(38, -6, 0, 0.02, 4);
        st = compare_sequence(h ? "deepspeed delayed_shift 1 vs hysteresis 1" : "deepspeed delayed_shift 1 vs 0",
                              (mp_scaler_opts){.growth_interval = 3, .hysteresis = h}, c, NULL, &m,
                              PATTERN_LEN);
        check_exercised("deepspeed delayed_shift 1", st, 300, 300, 0);
    }

    /* Hand patterns, plus the values worked out by hand. Alternating
     * overflow/clean with hysteresis 2: consecutive hysteresis absorbs every
     * overflow (the clean step restores it), so the scale never moves (the
     * window of 3 is never reached); without it every second overflow backs
     * off. */
    hand_pattern(pat, 40, "10");
    ref_cfg c = {.kind = REF_DS, .init_scale = 65536., .growth_factor = 2., .growth_interval = 3, .delayed_shift = 2,
                 .consecutive = true};
    mp_scaler_opts o = {.growth_interval = 3, .hysteresis = 2, .consecutive_hysteresis = true};
    st = compare_sequence("deepspeed hand 10 consecutive", o, c, pat, NULL, 40);
    CHECK(st.lowest == 65536.0 && st.highest == 65536.0 && st.held_on_overflow == 20,
          "deepspeed hand 10 consecutive: %g .. %g, %d held", st.lowest, st.highest, st.held_on_overflow);
    c.consecutive = o.consecutive_hysteresis = false;
    st = compare_sequence("deepspeed hand 10", o, c, pat, NULL, 40);
    CHECK(st.lowest == 0x1.0p-3 && st.backoffs == 19 && st.held_on_overflow == 1,
          "deepspeed hand 10: lowest %g, %d backoffs, %d held", st.lowest, st.backoffs, st.held_on_overflow);
    const char *hands[] = {"110000000", "1110000", "0000000001", "1101100000"};
    for (int k = 0; k < 4; k++) {
        for (int h = 2; h <= 3; h++) {
            for (int cons = 0; cons <= 1; cons++) {
                char label[96];
                snprintf(label, sizeof label, "deepspeed hand '%s' hysteresis %d consecutive %d", hands[k], h, cons);
                hand_pattern(pat, 500, hands[k]);
                c = (ref_cfg){.kind = REF_DS, .init_scale = 65536., .growth_factor = 2., .growth_interval = 4,
                              .min_scale = 1., .delayed_shift = h, .consecutive = cons};
                o = (mp_scaler_opts){.growth_interval = 4, .min_scale = 1.0f, .hysteresis = h,
                                     .consecutive_hysteresis = cons};
                compare_sequence(label, o, c, pat, NULL, 500);
            }
        }
    }
    free(pat);
}

/* ---- unscale and check ---------------------------------------------------- */

#define N_GRADS 5
static const int64_t grad_n[N_GRADS] = {1, 7, 4099, MP_SCALER_PAR_MIN + 3, ((int64_t)1 << 20) + 12345};

typedef struct {
    float *g[N_GRADS], *orig[N_GRADS];
} grads_fixture;

static void grads_init(grads_fixture *f, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int t = 0; t < N_GRADS; t++) {
        f->g[t] = malloc((size_t)grad_n[t] * sizeof(float));
        f->orig[t] = malloc((size_t)grad_n[t] * sizeof(float));
        for (int64_t i = 0; i < grad_n[t]; i++) /* magnitudes 2^-20 .. 2^20, both signs */
            f->orig[t][i] = (float)(ldexp(1.0 + mp_rng_uniform(&r), (int)mp_rng_below(&r, 41) - 20) *
                                    (mp_rng_below(&r, 2) ? 1.0 : -1.0));
        f->orig[t][grad_n[t] - 1] = t % 2 ? FLT_MAX : -FLT_MAX; /* finite: must not count */
    }
    f->orig[2][5] = -0.0f;
    f->orig[2][6] = FLT_MIN / 8; /* subnormal input */
}

static void grads_reset(grads_fixture *f) {
    for (int t = 0; t < N_GRADS; t++) memcpy(f->g[t], f->orig[t], (size_t)grad_n[t] * sizeof(float));
}

static void grads_free(grads_fixture *f) {
    for (int t = 0; t < N_GRADS; t++) {
        free(f->g[t]);
        free(f->orig[t]);
    }
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Every element equals orig * inv (bit for bit; NaN stays NaN), except at the
 * injected position where the poison value went in. Returns the number of
 * wrong elements. */
static int64_t count_wrong(const grads_fixture *f, float inv, bool mul, int bad_t, int64_t bad_i, float poison) {
    int64_t wrong = 0;
    for (int t = 0; t < N_GRADS; t++) {
        for (int64_t i = 0; i < grad_n[t]; i++) {
            float in = (t == bad_t && i == bad_i) ? poison : f->orig[t][i];
            float want = mul ? in * inv : in;
            float got = f->g[t][i];
            bool ok = isnan(want) ? isnan(got) : same_bits(got, want);
            if (!mul) ok = same_bits(got, in);
            wrong += !ok;
        }
    }
    return wrong;
}

static void test_unscale_exact(void) {
    grads_fixture f;
    grads_init(&f, 5);
    const float scales[] = {65536.0f, 0x1.0p-20f, 1024.0f, 1000.0f, 1.0f};
    for (int k = 0; k < 5; k++) {
        mp_scaler s;
        mp_status st = mp_scaler_init(&s, (mp_scaler_opts){.static_scale = true, .init_scale = scales[k]});
        CHECK(st == MP_OK, "unscale scale %g: init: %s", (double)scales[k], mp_last_error());
        grads_reset(&f);
        /* 2^-20 turns FLT_MAX into inf: give it finite ends for this one. */
        if (scales[k] < 1.0f)
            for (int t = 0; t < N_GRADS; t++) f.g[t][grad_n[t] - 1] = f.orig[t][grad_n[t] - 1] = 1.0f;
        int first = mp_scaler_unscale_check(&s, f.g, grad_n, N_GRADS);
        CHECK(first == -1 && !mp_scaler_found_inf(&s), "unscale scale %g: clean gradients flagged (%d)",
              (double)scales[k], first);
        const float inv = (float)(1.0 / (double)scales[k]);
        int64_t wrong = count_wrong(&f, inv, scales[k] != 1.0f, -1, -1, 0.0f);
        CHECK(wrong == 0, "unscale scale %g: %lld elements are not x * (1/scale)", (double)scales[k],
              (long long)wrong);
        /* Power-of-two scales: the product is the exact quotient (normal range). */
        if (scales[k] != 1000.0f) {
            int64_t inexact = 0;
            for (int t = 0; t < N_GRADS; t++)
                for (int64_t i = 0; i < grad_n[t]; i++)
                    if (fabsf(f.orig[t][i]) >= FLT_MIN)
                        inexact += (double)f.g[t][i] != (double)f.orig[t][i] / (double)scales[k];
            CHECK(inexact == 0, "unscale scale %g: %lld inexact quotients", (double)scales[k], (long long)inexact);
        }
        if (scales[k] < 1.0f)
            for (int t = 0; t < N_GRADS; t++) f.orig[t][grad_n[t] - 1] = t % 2 ? FLT_MAX : -FLT_MAX;
    }
    /* Scale 1: nothing is multiplied, so a signalling NaN keeps its bits (a
     * multiply by 1 would quiet it). */
    {
        mp_scaler s;
        mp_scaler_init(&s, (mp_scaler_opts){.static_scale = true, .init_scale = 1.0f});
        union { uint32_t u; float f; } nan_payload = {.u = 0x7fa01234u};
        float x[4] = {-0.0f, FLT_MIN / 4, 3.0f, nan_payload.f};
        float *p = x;
        const int64_t n = 4;
        CHECK(mp_scaler_unscale_check(&s, &p, &n, 1) == 0, "scale 1: the NaN is not reported");
        CHECK(same_bits(x[0], -0.0f) && same_bits(x[1], FLT_MIN / 4) && x[2] == 3.0f &&
                  same_bits(x[3], nan_payload.f),
              "scale 1: values were modified");
    }
    /* A finite scaled gradient that overflows when unscaled (scale < 1) is an
     * overflow too. */
    {
        mp_scaler s;
        mp_scaler_init(&s, (mp_scaler_opts){.static_scale = true, .init_scale = 0.5f});
        float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {1.0f, 2e38f, 3.0f};
        float *p[2] = {a, b};
        const int64_t n[2] = {3, 3};
        int first = mp_scaler_unscale_check(&s, p, n, 2);
        CHECK(first == 1 && mp_scaler_found_inf(&s) && isinf(b[1]) && a[2] == 6.0f,
              "unscale overflow: first %d, found %d, b[1] %g", first, mp_scaler_found_inf(&s), (double)b[1]);
    }
    /* found_inf accumulates over several calls (parameter groups) until the
     * update; zero tensors and empty lists are fine. */
    {
        mp_scaler s;
        mp_scaler_init(&s, (mp_scaler_opts){0});
        float a[2] = {1.0f, INFINITY}, b[2] = {1.0f, 2.0f};
        float *pa = a, *pb = b;
        const int64_t n2 = 2, n0 = 0;
        float *none = NULL;
        CHECK(mp_scaler_unscale_check(&s, &none, &n0, 1) == -1 && mp_scaler_unscale_check(&s, NULL, NULL, 0) == -1 &&
                  !mp_scaler_found_inf(&s),
              "empty tensors flagged");
        CHECK(mp_scaler_unscale_check(&s, &pa, &n2, 1) == 0, "group 1 overflow not found");
        CHECK(mp_scaler_unscale_check(&s, &pb, &n2, 1) == -1 && mp_scaler_found_inf(&s),
              "found_inf was cleared by a clean group");
        CHECK(mp_scaler_update(&s) && !mp_scaler_found_inf(&s) && mp_scaler_scale(&s) == 32768.0f,
              "update after a group overflow: scale %g", (double)mp_scaler_scale(&s));
    }
    grads_free(&f);
}

/* Poison positions: the ends of every tensor, the middle, and both sides of
 * every OpenMP chunk boundary for 2, 3 and 4 threads in the big tensors. */
static int poison_positions(int t, int64_t *pos) {
    int64_t n = grad_n[t];
    int k = 0;
    pos[k++] = 0;
    pos[k++] = n / 2;
    pos[k++] = n - 1;
    if (n >= MP_SCALER_PAR_MIN) {
        for (int threads = 2; threads <= 4; threads++) {
            for (int c = 1; c < threads; c++) {
                int64_t b = n * c / threads;
                for (int64_t d = -17; d <= 16; d += 11) pos[k++] = b + d;
            }
        }
    }
    return k;
}

static void test_unscale_poison(void) {
    grads_fixture f;
    grads_init(&f, 6);
    const float poisons[3] = {INFINITY, -INFINITY, NAN};
    const int saved_threads = omp_get_max_threads();
    mp_scaler s;
    mp_scaler_init(&s, (mp_scaler_opts){0});
    const float inv = 1.0f / 65536.0f;
    int64_t pos[64];
    int cases = 0, failures = 0;
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        for (int t = 0; t < N_GRADS; t++) {
            int np = poison_positions(t, pos);
            for (int p = 0; p < np; p++) {
                float poison = poisons[(p + t + threads) % 3];
                grads_reset(&f);
                f.g[t][pos[p]] = poison;
                int first = mp_scaler_unscale_check(&s, f.g, grad_n, N_GRADS);
                bool found = mp_scaler_found_inf(&s);
                int64_t wrong = count_wrong(&f, inv, true, t, pos[p], poison);
                bool ok = first == t && found && wrong == 0 && mp_scaler_scale(&s) == 65536.0f;
                if (!ok && failures++ < 5)
                    CHECK(ok, "poison %g in tensor %d at %lld (%d threads): first %d found %d, %lld wrong",
                          (double)poison, t, (long long)pos[p], threads, first, found, (long long)wrong);
                /* A second poison in a later tensor: still the first one. */
                if (t < N_GRADS - 1) {
                    grads_reset(&f);
                    f.g[t][pos[p]] = poison;
                    f.g[N_GRADS - 1][grad_n[N_GRADS - 1] - 1] = NAN;
                    first = mp_scaler_unscale_check(&s, f.g, grad_n, N_GRADS);
                    if (first != t && failures++ < 5)
                        CHECK(first == t, "two poisons (tensor %d, last): first %d", t, first);
                }
                s.found_inf = false; /* next case, same scale */
                cases++;
            }
        }
    }
    omp_set_num_threads(saved_threads);
    CHECK(failures == 0, "unscale poison: %d of %d cases failed", failures, cases);
    CHECK(cases > 100, "unscale poison: only %d cases", cases);
    grads_free(&f);
}

static void test_first_nonfinite(void) {
    const int64_t n = ((int64_t)3 << 20) + 7;
    float *x = malloc((size_t)n * sizeof(float));
    mp_rng r;
    mp_rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++) x[i] = (float)mp_rng_normal(&r);
    x[10] = FLT_MAX;
    x[11] = -FLT_MAX;
    x[12] = FLT_MIN / 2;
    x[13] = -0.0f;
    const int saved_threads = omp_get_max_threads();
    int failures = 0;
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        CHECK(mp_first_nonfinite(x, n) == -1, "first_nonfinite: clean array flagged (%d threads)", threads);
        int64_t pos[] = {0, 1, 4095, 4096, 4097, n / 3 - 1, n / 3, n / 2, n / 2 + 1, 2 * n / 3, n - 2, n - 1};
        const float poisons[3] = {NAN, INFINITY, -INFINITY};
        for (size_t a = 0; a < sizeof pos / sizeof pos[0]; a++) {
            float keep = x[pos[a]];
            x[pos[a]] = poisons[a % 3];
            int64_t got = mp_first_nonfinite(x, n);
            if (got != pos[a] && failures++ < 5)
                CHECK(got == pos[a], "first_nonfinite (%d threads): %lld, want %lld", threads, (long long)got,
                      (long long)pos[a]);
            /* A second one later on: still the first. */
            for (size_t b = a + 1; b < sizeof pos / sizeof pos[0]; b++) {
                float keep_b = x[pos[b]];
                x[pos[b]] = poisons[b % 3];
                got = mp_first_nonfinite(x, n);
                if (got != pos[a] && failures++ < 5)
                    CHECK(got == pos[a], "first_nonfinite pair (%d threads): %lld, want %lld", threads,
                          (long long)got, (long long)pos[a]);
                x[pos[b]] = keep_b;
            }
            x[pos[a]] = keep;
        }
    }
    omp_set_num_threads(saved_threads);
    CHECK(failures == 0, "first_nonfinite: %d failures", failures);
    CHECK(mp_first_nonfinite(x, 0) == -1 && mp_first_nonfinite(NULL, 0) == -1, "first_nonfinite of nothing");
    float small[3] = {1.0f, 2.0f, NAN};
    CHECK(mp_first_nonfinite(small, 3) == 2 && mp_first_nonfinite(small, 2) == -1, "first_nonfinite small");
    free(x);
}

/* ---- the seed-000 collapse ------------------------------------------------ */

static void test_collapse(void) {
    /* A NaN forward every step: the scale is not lowered (PyTorch and Apex
     * would halve it each time), the steps are skipped and counted. */
    mp_scaler s;
    mp_scaler_init(&s, (mp_scaler_opts){0});
    for (int i = 0; i < 200; i++) {
        mp_scaler_forward_overflow(&s);
        CHECK(mp_scaler_scale(&s) == 65536.0f, "forward overflow %d: scale %g", i, (double)mp_scaler_scale(&s));
    }
    CHECK(mp_scaler_consecutive_forward_overflows(&s) == 200 && s.skipped_steps == 200 && s.forward_overflows == 200,
          "forward overflows: consecutive %d, skipped %lld", mp_scaler_consecutive_forward_overflows(&s),
          (long long)s.skipped_steps);
    CHECK(s.step == 0 && s.growth_tracker == 0 && !mp_scaler_at_floor(&s),
          "forward overflows touched the growth logic: step %lld tracker %d", (long long)s.step, s.growth_tracker);
    mp_scaler_forward_ok(&s);
    CHECK(mp_scaler_consecutive_forward_overflows(&s) == 0 && s.forward_overflows == 200,
          "forward_ok: consecutive %d total %lld", mp_scaler_consecutive_forward_overflows(&s),
          (long long)s.forward_overflows);
    /* A forward overflow ends the iteration: a stale found_inf is dropped. */
    s.found_inf = true;
    mp_scaler_forward_overflow(&s);
    CHECK(!mp_scaler_found_inf(&s) && !mp_scaler_update(&s) && mp_scaler_scale(&s) == 65536.0f,
          "forward overflow left found_inf set");

    /* A gradient overflow every step: GradScaler reaches seed 000's 3.7e-40
     * (2^-131) after 147 halvings; ours stops at 2^-24 and says so. */
    ref_torch t = {65536.0f, 0};
    for (int i = 0; i < 147; i++) ref_torch_update(&t, true, 2.0, 0.5, 2000);
    CHECK(t.scale == 0x1.0p-131f && t.scale < 3.7e-40f, "reference collapse: %g", (double)t.scale);
    mp_scaler_init(&s, (mp_scaler_opts){0});
    int reached = -1;
    for (int i = 0; i < 200; i++) {
        CHECK(drive(&s, true, i), "gradient overflow %d not skipped", i);
        float sc = mp_scaler_scale(&s);
        CHECK(sc >= FLT_MIN && sc == fmaxf(0x1.0p16f * ldexpf(1.0f, -(i + 1)), 0x1.0p-24f),
              "gradient overflow %d: scale %g", i, (double)sc);
        CHECK(mp_scaler_at_floor(&s) == (i >= 39), "gradient overflow %d: at_floor %d", i, mp_scaler_at_floor(&s));
        if (reached < 0 && mp_scaler_at_floor(&s)) reached = i;
    }
    CHECK(reached == 39 && mp_scaler_scale(&s) == MP_SCALER_DEFAULT_MIN && s.skipped_steps == 200,
          "floor reached at %d, scale %g", reached, (double)mp_scaler_scale(&s));
    /* Clean steps lift it off the floor again. */
    mp_scaler_init(&s, (mp_scaler_opts){.growth_interval = 2});
    for (int i = 0; i < 60; i++) drive(&s, true, i);
    drive(&s, false, 60);
    drive(&s, false, 61);
    CHECK(!mp_scaler_at_floor(&s) && mp_scaler_scale(&s) == 0x1.0p-23f, "after the floor: %g",
          (double)mp_scaler_scale(&s));

    /* The same with an explicit minimum and with hysteresis 3. */
    mp_scaler_init(&s, (mp_scaler_opts){.min_scale = 1.0f});
    for (int i = 0; i < 30; i++) drive(&s, true, i);
    CHECK(mp_scaler_scale(&s) == 1.0f && mp_scaler_at_floor(&s), "min 1: scale %g", (double)mp_scaler_scale(&s));
    mp_scaler_init(&s, (mp_scaler_opts){.hysteresis = 3});
    for (int i = 0; i < 200; i++) drive(&s, true, i);
    CHECK(mp_scaler_scale(&s) == MP_SCALER_DEFAULT_MIN && mp_scaler_at_floor(&s) && s.skipped_steps == 200,
          "hysteresis 3: scale %g", (double)mp_scaler_scale(&s));
    /* Static mode is never "at the floor": it does not move. */
    mp_scaler_init(&s, (mp_scaler_opts){.static_scale = true, .init_scale = 0x1.0p-30f});
    CHECK(!mp_scaler_at_floor(&s), "static at floor");
}

/* ---- static mode ---------------------------------------------------------- */

static void test_static(void) {
    bool pat[3000];
    bursty_pattern(pat, 3000, 41, 0.02, 5);
    const float inits[2] = {65536.0f, 128.0f};
    for (int k = 0; k < 2; k++) {
        mp_scaler s;
        mp_status st = mp_scaler_init(&s, (mp_scaler_opts){.static_scale = true, .init_scale = inits[k], .growth_interval = 1,
                                                             .hysteresis = 2});
        CHECK(st == MP_OK, "static: init: %s", mp_last_error());
        const float want = inits[k];
        /* Apex's static loss scale: the scale never moves (Apex would not
         * skip either; we skip every step with non-finite gradients). */
        ref_apex a;
        ref_apex_init(&a, false, want, 65536.0, 2000, 0.0, 16777216.0);
        int wrong = 0, overflows = 0;
        for (int i = 0; i < 3000; i++) {
            a.has_overflow = pat[i];
            ref_apex_update_scale(&a);
            bool skip = drive(&s, pat[i], i);
            wrong += skip != pat[i] || mp_scaler_scale(&s) != want || (double)mp_scaler_scale(&s) != a.loss_scale;
            overflows += pat[i];
        }
        CHECK(wrong == 0, "static %g: %d wrong steps", (double)want, wrong);
        CHECK(overflows > 50 && s.skipped_steps == overflows && s.step == 3000 && s.growth_tracker == 0 &&
                  !mp_scaler_at_floor(&s),
              "static %g: %d overflows, skipped %lld", (double)want, overflows, (long long)s.skipped_steps);
    }
}

/* ---- options -------------------------------------------------------------- */

static void test_options(void) {
    struct {
        mp_scaler_opts o;
        const char *msg;
    } bad[] = {
        {{.growth_factor = 1.0f}, "--loss-scale-growth 1 must be > 1"},
        {{.growth_factor = 0.5f}, "--loss-scale-growth 0.5 must be > 1"},
        {{.growth_factor = -2.0f}, "--loss-scale-growth -2 must be > 1"},
        {{.growth_factor = NAN}, "--loss-scale-growth nan must be > 1"},
        {{.growth_factor = INFINITY}, "--loss-scale-growth inf must be finite"},
        {{.backoff_factor = 1.5f}, "--loss-scale-backoff 1.5 must be in (0, 1)"},
        {{.backoff_factor = 1.0f}, "--loss-scale-backoff 1 must be in (0, 1)"},
        {{.backoff_factor = -0.5f}, "--loss-scale-backoff -0.5 must be in (0, 1)"},
        {{.backoff_factor = NAN}, "--loss-scale-backoff nan must be in (0, 1)"},
        {{.min_scale = 100.0f, .max_scale = 10.0f},
         "--min-loss-scale 100 is larger than --max-loss-scale 10"},
        {{.init_scale = -1.0f}, "--loss-scale -1 must be a finite number > 0"},
        /* a static scale of 0 is an error, never the dynamic default 65536 */
        {{.static_scale = true, .init_scale = 0.0f}, "--loss-scale 0: a static loss scale must be a finite number > 0"},
        {{.static_scale = true, .init_scale = -0.0f, .growth_interval = 1}, "--loss-scale 0: a static loss scale must be"},
        {{.init_scale = INFINITY}, "--loss-scale inf must be a finite number > 0"},
        {{.init_scale = NAN}, "--loss-scale nan must be a finite number > 0"},
        {{.init_scale = 0x1.0p-130f}, "--loss-scale 7.34684e-40 is below the smallest normal float 1.17549e-38"},
        {{.growth_interval = -3}, "--loss-scale-window -3 must be >= 1"},
        {{.hysteresis = -1}, "--loss-scale-hysteresis -1 must be >= 0"},
        {{.min_scale = -1.0f}, "--min-loss-scale -1 must be a finite number > 0"},
        {{.min_scale = 0x1.0p-127f}, "--min-loss-scale 5.87747e-39 is below the smallest normal float"},
        {{.max_scale = INFINITY}, "--max-loss-scale inf must be a finite number > 0"},
        {{.max_scale = 1e-9f}, "--max-loss-scale 1e-09 is below the default minimum loss scale"},
        {{.init_scale = 1e6f, .max_scale = 1000.0f},
         "--loss-scale 1e+06 is larger than --max-loss-scale 1000"},
        {{.init_scale = 0.5f, .min_scale = 1.0f}, "--loss-scale 0.5 is smaller than --min-loss-scale 1"},
        {{.init_scale = 1e-9f}, "--loss-scale 1e-09 is below the default minimum loss scale"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        mp_scaler s;
        memset(&s, 0x5a, sizeof s);
        mp_status st = mp_scaler_init(&s, bad[k].o);
        CHECK(st == MP_ERR_INVALID_ARG && strstr(mp_last_error(), bad[k].msg) != NULL && s.scale == 0.0f,
              "bad options %zu: status %d, message '%s', want '%s'", k, (int)st, mp_last_error(), bad[k].msg);
    }

    /* Good ones: the defaults, and the default init clamped into [min, max]. */
    mp_scaler s;
    CHECK(mp_scaler_init(&s, (mp_scaler_opts){0}) == MP_OK && s.scale == 65536.0f &&
              s.opts.growth_factor == 2.0f && s.opts.backoff_factor == 0.5f && s.opts.growth_interval == 2000 &&
              s.min_scale == 0x1.0p-24f && isinf(s.max_scale) && s.hysteresis_left == 1 &&
              s.last_overflow_step == -1 && !s.found_inf,
          "defaults: %s", mp_last_error());
    CHECK(mp_scaler_init(&s, (mp_scaler_opts){.max_scale = 1000.0f}) == MP_OK && s.scale == 1000.0f,
          "default init under max 1000: %g", (double)s.scale);
    CHECK(mp_scaler_init(&s, (mp_scaler_opts){.min_scale = 1e5f}) == MP_OK && s.scale == 1e5f,
          "default init over min 1e5: %g", (double)s.scale);
    CHECK(mp_scaler_init(&s, (mp_scaler_opts){.init_scale = 1e-30f, .min_scale = 1e-35f}) == MP_OK &&
              s.scale == 1e-30f,
          "a small explicit minimum allows a small init: %s", mp_last_error());
    CHECK(mp_scaler_init(&s, (mp_scaler_opts){.hysteresis = 4}) == MP_OK && s.hysteresis_left == 4,
          "hysteresis 4: left %d", s.hysteresis_left);
    CHECK(mp_scaler_init(&s, (mp_scaler_opts){.static_scale = true, .init_scale = 1e-9f}) == MP_OK && s.scale == 1e-9f,
          "static 1e-9: %s", mp_last_error());
}

/* ---- checkpoint state ----------------------------------------------------- */

/* Field by field (a struct compare would also compare padding). */
static bool same_state(const mp_scaler *a, const mp_scaler *b) {
    return a->scale == b->scale && a->growth_tracker == b->growth_tracker &&
           a->hysteresis_left == b->hysteresis_left && a->last_overflow_step == b->last_overflow_step &&
           a->step == b->step && a->skipped_steps == b->skipped_steps && a->forward_overflows == b->forward_overflows &&
           a->consecutive_forward_overflows == b->consecutive_forward_overflows && a->found_inf == b->found_inf &&
           a->min_scale == b->min_scale && a->max_scale == b->max_scale;
}

static void test_state(void) {
    mp_scaler_opts cfgs[2] = {
        {.growth_interval = 3, .min_scale = 0.5f},
        {.growth_interval = 4, .hysteresis = 3},
    };
    bool pat[4000];
    bursty_pattern(pat, 4000, 51, 0.08, 5);
    for (int k = 0; k < 2; k++) {
        mp_scaler a, b;
        mp_scaler_init(&a, cfgs[k]);
        for (int i = 0; i < 1777; i++) drive(&a, pat[i], i);
        mp_scaler_forward_overflow(&a);
        mp_scaler_forward_overflow(&a);
        const char *names[MP_SCALER_STATE_COUNT + 2];
        double values[MP_SCALER_STATE_COUNT + 2];
        int count = mp_scaler_state_get(&a, names, values, MP_SCALER_STATE_COUNT + 2);
        CHECK(count == MP_SCALER_STATE_COUNT && mp_scaler_state_get(&a, NULL, NULL, 0) == count,
              "state count %d", count);
        CHECK(strcmp(names[0], "scale") == 0 && values[0] == (double)a.scale &&
                  strcmp(names[1], "growth_tracker") == 0 && values[1] == a.growth_tracker &&
                  strcmp(names[2], "hysteresis_left") == 0 && values[2] == a.hysteresis_left &&
                  strcmp(names[3], "last_overflow_step") == 0 && values[3] == (double)a.last_overflow_step &&
                  strcmp(names[4], "step") == 0 && values[4] == 1777.0 && strcmp(names[5], "skipped_steps") == 0 &&
                  values[5] == (double)a.skipped_steps && strcmp(names[6], "forward_overflows") == 0 &&
                  values[6] == 2.0 && strcmp(names[7], "consecutive_forward_overflows") == 0 && values[7] == 2.0,
              "state %d: names/values out of order", k);
        CHECK(k == 0 || a.hysteresis_left < 3 || a.growth_tracker > 0, "state %d: an uninteresting cut", k);
        /* Restore into a fresh scaler; both continue identically. */
        mp_scaler_init(&b, cfgs[k]);
        for (int i = 0; i < count; i++) {
            mp_status st = mp_scaler_state_set(&b, names[i], values[i]);
            CHECK(st == MP_OK, "state %d: set %s = %g: %s", k, names[i], values[i], mp_last_error());
        }
        CHECK(same_state(&a, &b), "state %d: restored scaler differs", k);
        mp_scaler_forward_ok(&a);
        mp_scaler_forward_ok(&b);
        int diffs = 0;
        for (int i = 1777; i < 4000; i++) {
            bool sa = drive(&a, pat[i], i), sb = drive(&b, pat[i], i);
            diffs += sa != sb || a.scale != b.scale || a.hysteresis_left != b.hysteresis_left;
        }
        CHECK(diffs == 0, "state %d: resumed run differs in %d steps", k, diffs);
        /* A short list gets the first entries. */
        const char *n2[2];
        double v2[2];
        CHECK(mp_scaler_state_get(&a, n2, v2, 2) == MP_SCALER_STATE_COUNT && strcmp(n2[1], "growth_tracker") == 0,
              "state_get with max 2");
    }
    /* Bad entries: an error naming the entry, nothing changes. */
    mp_scaler s, before;
    mp_scaler_init(&s, (mp_scaler_opts){.growth_interval = 3, .max_scale = 1e6f, .hysteresis = 2});
    before = s;
    struct {
        const char *name;
        double v;
        const char *msg;
    } bad[] = {
        {"scales", 1.0, "unknown entry 'scales'"},
        {"scale", 0.0, "'scale' = 0 must be a positive normal float"},
        {"scale", NAN, "'scale' = nan"},
        {"scale", 1e-45, "'scale' = 1e-45"},
        {"scale", 1e300, "'scale' = 1e+300"},
        {"scale", 0.1, "'scale' = 0.1 must be a positive normal float"}, /* not a float */
        {"scale", 2e6, "'scale' = 2e+06 is outside"},
        {"growth_tracker", 3.0, "'growth_tracker' = 3 must be an integer in [0, 2]"},
        {"growth_tracker", 1.5, "'growth_tracker' = 1.5 must be an integer"},
        {"hysteresis_left", 0.0, "'hysteresis_left' = 0 must be an integer in [1, 2]"},
        {"last_overflow_step", -2.0, "'last_overflow_step' = -2"},
        {"step", -1.0, "'step' = -1"},
        {"skipped_steps", INFINITY, "'skipped_steps' = inf"},
        {"forward_overflows", 0.5, "'forward_overflows' = 0.5"},
        {"consecutive_forward_overflows", 3e9, "'consecutive_forward_overflows' = 3e+09"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        mp_status st = mp_scaler_state_set(&s, bad[k].name, bad[k].v);
        CHECK(st == MP_ERR_INVALID_ARG && strstr(mp_last_error(), bad[k].msg) != NULL &&
                  same_state(&s, &before),
              "bad state %zu: status %d, '%s', want '%s'", k, (int)st, mp_last_error(), bad[k].msg);
    }
    CHECK(mp_scaler_state_set(&s, "scale", 0.75) == MP_OK && s.scale == 0.75f, "set scale 0.75");
}

int main(void) {
    test_gradscaler();
    test_apex();
    test_deepspeed();
    test_unscale_exact();
    test_unscale_poison();
    test_first_nonfinite();
    test_collapse();
    test_static();
    test_options();
    test_state();
    return test_summary("test_scaler");
}
