/* lr_schedule.c — learning rate as a function of the step (warm-up ramp, then
 * constant, step decay or cosine annealing, computed in double) and the
 * parser of --lr-schedule strings. */
#include "optim/lr_schedule.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

const char *mp_lr_kind_name(mp_lr_kind k) {
    switch (k) {
    case MP_LR_CONSTANT: return "constant";
    case MP_LR_STEP: return "step";
    case MP_LR_COSINE: return "cosine";
    }
    return "unknown";
}

/* Whether s is a schedule mp_lr_at can evaluate (mp_lr_schedule_check's
 * rules, without recording an error). */
static bool valid(const mp_lr_schedule *s) {
    if (!s || !(s->base_lr >= 0.0f) || !isfinite(s->base_lr) || s->warmup_steps < 0) return false;
    switch (s->kind) {
    case MP_LR_CONSTANT: return true;
    case MP_LR_STEP: return s->step_size > 0 && s->gamma > 0.0f && s->gamma <= 1.0f;
    case MP_LR_COSINE: return s->total_steps > s->warmup_steps && s->min_lr >= 0.0f && s->min_lr <= s->base_lr;
    }
    return false;
}

float mp_lr_at(const mp_lr_schedule *s, int64_t step) {
    if (!valid(s)) return NAN;
    if (step < 0) step = 0; /* before the first step: the first step's rate */
    double base = s->base_lr;
    if (step < s->warmup_steps) return (float)(base * (double)(step + 1) / (double)s->warmup_steps);
    int64_t t = step - s->warmup_steps;
    switch (s->kind) {
    case MP_LR_CONSTANT: return s->base_lr;
    case MP_LR_STEP: return (float)(base * pow((double)s->gamma, (double)(t / s->step_size)));
    case MP_LR_COSINE: {
        int64_t T = (int64_t)s->total_steps - s->warmup_steps;
        if (t >= T) return s->min_lr;
        double lo = s->min_lr;
        return (float)(lo + (base - lo) * 0.5 * (1.0 + cos(M_PI * (double)t / (double)T)));
    }
    }
    return NAN;
}

/* ---- parsing ------------------------------------------------------------ */

#define SCHED_HELP "want constant, step:STEP_SIZE:GAMMA, cosine or cosine:MIN_LR, optionally followed by ,warmup:N"

/* A whole-string non-negative decimal integer that fits an int. */
static bool parse_int(const char *s, int *out) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v > INT_MAX) return false;
    *out = (int)v;
    return true;
}

/* A whole-string finite number. */
static bool parse_float(const char *s, float *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || fabs(v) > 3.0e38) return false;
    *out = (float)v;
    return true;
}

/* Split s at the first c: returns the rest (after c) or NULL, cutting s. */
static char *cut(char *s, char c) {
    char *p = strchr(s, c);
    if (!p) return NULL;
    *p = '\0';
    return p + 1;
}

mp_status mp_lr_schedule_parse(const char *spec, float base_lr, int total_steps, mp_lr_schedule *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': no schedule to fill (NULL)", spec ? spec : "");
    if (!spec) spec = "";
    if (!(base_lr >= 0.0f && isfinite(base_lr)))
        return mp_error(MP_ERR_INVALID_ARG, "--lr %g must be a finite number >= 0", base_lr);
    if (total_steps < 0)
        return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': the total number of steps %d is negative", spec,
                        total_steps);
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule: the spec is too long (%zu characters)", strlen(spec));
    strcpy(buf, spec);

    mp_lr_schedule s = {.kind = MP_LR_CONSTANT, .base_lr = base_lr, .gamma = 1.0f, .total_steps = total_steps};

    /* Suffixes: ",warmup:N" (once). */
    char *rest = cut(buf, ',');
    bool have_warmup = false;
    while (rest) {
        char *part = rest;
        rest = cut(part, ',');
        char *val = cut(part, ':');
        if (strcmp(part, "warmup") != 0)
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': unknown part '%s%s%s' (%s)", spec, part,
                            val ? ":" : "", val ? val : "", SCHED_HELP);
        if (have_warmup)
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': warmup is given twice", spec);
        if (!parse_int(val, &s.warmup_steps))
            return mp_error(MP_ERR_INVALID_ARG,
                            "--lr-schedule '%s': warmup '%s' must be a non-negative integer (warmup:N)", spec,
                            val ? val : "");
        have_warmup = true;
    }

    char *args = cut(buf, ':');
    if (strcmp(buf, "constant") == 0) {
        s.kind = MP_LR_CONSTANT;
        if (args)
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': constant takes no arguments (got ':%s')", spec,
                            args);
    } else if (strcmp(buf, "step") == 0) {
        s.kind = MP_LR_STEP;
        char *gamma = args ? cut(args, ':') : NULL;
        if (!args || !gamma || strchr(gamma, ':'))
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': want step:STEP_SIZE:GAMMA, e.g. step:30:0.1",
                            spec);
        if (!parse_int(args, &s.step_size) || s.step_size == 0)
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': step size '%s' must be a positive integer",
                            spec, args);
        if (!parse_float(gamma, &s.gamma) || !(s.gamma > 0.0f && s.gamma <= 1.0f))
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': gamma '%s' must be a number in (0, 1]", spec,
                            gamma);
    } else if (strcmp(buf, "cosine") == 0) {
        s.kind = MP_LR_COSINE;
        if (args && (!parse_float(args, &s.min_lr) || !(s.min_lr >= 0.0f && s.min_lr <= base_lr)))
            return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': min lr '%s' must be a number in [0, --lr %g]",
                            spec, args, base_lr);
        if (total_steps <= s.warmup_steps)
            return mp_error(MP_ERR_INVALID_ARG,
                            "--lr-schedule '%s': cosine needs more total steps (%d) than warm-up steps (%d)", spec,
                            total_steps, s.warmup_steps);
    } else {
        return mp_error(MP_ERR_INVALID_ARG, "--lr-schedule '%s': unknown schedule '%s' (%s)", spec, buf,
                        SCHED_HELP);
    }
    *out = s;
    return MP_OK;
}

mp_status mp_lr_schedule_check(const mp_lr_schedule *s) {
    if (!s) return mp_error(MP_ERR_INVALID_ARG, "lr schedule: null");
    if (!(s->base_lr >= 0.0f) || !isfinite(s->base_lr))
        return mp_error(MP_ERR_INVALID_ARG, "lr schedule: the learning rate %g must be a finite number >= 0",
                        (double)s->base_lr);
    if (s->warmup_steps < 0)
        return mp_error(MP_ERR_INVALID_ARG, "lr schedule: warm-up steps %d must be >= 0", s->warmup_steps);
    switch (s->kind) {
    case MP_LR_CONSTANT: return MP_OK;
    case MP_LR_STEP:
        if (s->step_size <= 0 || !(s->gamma > 0.0f && s->gamma <= 1.0f))
            return mp_error(MP_ERR_INVALID_ARG, "lr schedule: step needs step_size > 0 (%d) and gamma in (0, 1] (%g)",
                            s->step_size, (double)s->gamma);
        return MP_OK;
    case MP_LR_COSINE:
        if (s->total_steps <= s->warmup_steps || !(s->min_lr >= 0.0f && s->min_lr <= s->base_lr))
            return mp_error(MP_ERR_INVALID_ARG,
                            "lr schedule: cosine needs total_steps (%d) > warmup_steps (%d) and min_lr (%g) in [0, %g]",
                            s->total_steps, s->warmup_steps, (double)s->min_lr, (double)s->base_lr);
        return MP_OK;
    }
    return mp_error(MP_ERR_INVALID_ARG, "lr schedule: unknown kind %d", (int)s->kind);
}
