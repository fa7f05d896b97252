/* args.c — see args.h. */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether text starts as a plain decimal integer: a digit, or (minus) '-'
 * and a digit. strtol and strtoull also skip leading spaces and take a '+'
 * (and strtoull a '-', " -1" read as 2^64 - 1): every integer option
 * refuses those alike. */
static bool plain_integer_start(const char *text, bool minus) {
    if (minus && *text == '-') text++;
    return *text >= '0' && *text <= '9';
}

/* The decimal integer text starts with (plain_integer_start), *end past it:
 * false when there is none or it does not fit a long. */
static bool scan_long(const char *text, bool minus, char **end, long *v) {
    if (!plain_integer_start(text, minus)) return false;
    errno = 0;
    *v = strtol(text, end, 10);
    return !errno && *end != text;
}

bool arg_int(const char *cmd, const char *opt, const char *text, int lo, int hi, int *out) {
    char *end;
    long v;
    /* a '-' is an integer's: a negative value is then out of range, not "not an integer" */
    if (!scan_long(text, true, &end, &v) || *end) {
        fprintf(stderr, "mixprec %s: %s '%s' is not an integer\n", cmd, opt, text);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "mixprec %s: %s %ld is out of range [%d, %d]\n", cmd, opt, v, lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

bool arg_u64(const char *cmd, const char *opt, const char *text, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || !plain_integer_start(text, false)) {
        fprintf(stderr, "mixprec %s: %s '%s' is not a non-negative integer\n", cmd, opt, text);
        return false;
    }
    *out = v;
    return true;
}

bool arg_monitor_interval(const char *cmd, const char *opt, const char *text, float *out) {
    if (!arg_float(cmd, opt, text, 0, 86400, out)) return false;
    if (*out > 0 && *out < 0.01f) { /* NVML's counters move every ~10 ms; faster sampling only costs */
        fprintf(stderr, "mixprec %s: %s %g is below 0.01 s (the GPU monitor samples at most every 10 ms; 0 turns it "
                        "off)\n", cmd, opt, (double)*out);
        return false;
    }
    return true;
}

bool arg_float(const char *cmd, const char *opt, const char *text, double lo, double hi, float *out) {
    double v;
    if (!arg_double(cmd, opt, text, lo, hi, &v)) return false;
    *out = (float)v;
    return true;
}

bool arg_double(const char *cmd, const char *opt, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v)) {
        fprintf(stderr, "mixprec %s: %s '%s' is not a finite number\n", cmd, opt, text);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "mixprec %s: %s %g is out of range [%g, %g]\n", cmd, opt, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool arg_dims(const char *cmd, const char *opt, const char *text, int n, int lo, int hi, const char *form, int *out) {
    int d[8];
    const char *p = text;
    bool ok = n >= 1 && n <= 8;
    for (int k = 0; ok && k < n; k++) {
        char *end;
        long v;
        ok = scan_long(p, false, &end, &v) && v >= lo && v <= hi && *end == (k + 1 < n ? 'x' : 0);
        if (ok) d[k] = (int)v, p = end + 1;
    }
    if (!ok) {
        fprintf(stderr, "mixprec %s: %s '%s' must be %s, each an integer in %d..%d\n", cmd, opt, text, form, lo, hi);
        return false;
    }
    memcpy(out, d, (size_t)n * sizeof *out);
    return true;
}

bool arg_shape3(const char *cmd, const char *opt, const char *text, int *c, int *h, int *w) {
    int d[3];
    if (!arg_dims(cmd, opt, text, 3, 1, 4096, "CxHxW (e.g. 3x32x32)", d)) return false;
    *c = d[0], *h = d[1], *w = d[2];
    return true;
}

int arg_option_value(const char *cmd, int argc, char **argv, int *i, const char *const *options, size_t n,
                     const char **value) {
    const char *a = argv[*i];
    bool known = false;
    for (size_t k = 0; k < n && !known; k++) known = !strcmp(a, options[k]);
    if (!known) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "mixprec %s: %s needs a value (see --help)\n", cmd, a);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}
