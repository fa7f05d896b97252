/* ckpt_meta.c — see ckpt_meta.h. */
#include "io/ckpt_meta.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* 1..max_digits decimal digits from text, then the end of the string. */
static bool all_digits(const char *text, size_t max_digits) {
    size_t n = 0;
    for (const char *p = text; *p; p++, n++)
        if (*p < '0' || *p > '9' || n >= max_digits) return false;
    return n > 0;
}

bool mp_meta_parse_u64(const char *text, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!text || !all_digits(text, 20)) return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = (uint64_t)v;
    return true;
}

bool mp_meta_parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out) {
    if (!text || !all_digits(text[0] == '-' ? text + 1 : text, 19)) return false;
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = (int64_t)v;
    return true;
}

bool mp_meta_parse_double(const char *text, double lo, double hi, double *out) {
    if (!text || !*text || strlen(text) > 64) return false;
    /* digits, sign, point and exponent only: no spaces, "nan", "inf", hex */
    if (strspn(text, "0123456789+-.eE") != strlen(text) || text[0] == '+') return false;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

void mp_meta_quote(const char *text, char *buf, size_t cap) {
    MP_ASSERT(cap >= 16);
    size_t k = 0;
    const unsigned char *p = (const unsigned char *)text;
    /* each byte takes at most 4; room stays for "..." and the NUL */
    for (; *p && k + 8 < cap; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '\'' && *p != '\\') buf[k++] = (char)*p;
        else k += (size_t)snprintf(buf + k, cap - k, "\\x%02x", *p);
    }
    if (*p) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
}

static const char *meta_get(const mp_st_file *f, const char *path, const char *key, mp_status *s) {
    const char *v = mp_safetensors_meta(f, key);
    *s = v ? MP_OK : mp_error(MP_ERR_FORMAT, "%s: not a mixprec checkpoint (metadata '%s' missing)", path, key);
    return v;
}

static mp_status meta_bad(const char *path, const char *key, const char *v, const char *what) {
    char q[96];
    mp_meta_quote(v, q, sizeof q);
    return mp_error(MP_ERR_FORMAT, "%s: metadata '%s' = '%s' must be %s", path, key, q, what);
}

mp_status mp_ckpt_meta_string(const mp_st_file *f, const char *path, const char *key, const char **out) {
    mp_status s;
    const char *v = meta_get(f, path, key, &s);
    if (v) *out = v;
    return s;
}

mp_status mp_ckpt_meta_int(const mp_st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
    mp_status s;
    const char *v = meta_get(f, path, key, &s);
    if (!v) return s;
    if (mp_meta_parse_int(v, lo, hi, out)) return MP_OK;
    char what[96];
    snprintf(what, sizeof what, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    return meta_bad(path, key, v, what);
}

mp_status mp_ckpt_meta_u64(const mp_st_file *f, const char *path, const char *key, uint64_t lo, uint64_t hi,
                           uint64_t *out) {
    mp_status s;
    const char *v = meta_get(f, path, key, &s);
    if (!v) return s;
    if (mp_meta_parse_u64(v, lo, hi, out)) return MP_OK;
    char what[96];
    snprintf(what, sizeof what, "an integer in [%llu, %llu]", (unsigned long long)lo, (unsigned long long)hi);
    return meta_bad(path, key, v, what);
}

mp_status mp_ckpt_meta_double(const mp_st_file *f, const char *path, const char *key, double lo, double hi,
                              double *out) {
    mp_status s;
    const char *v = meta_get(f, path, key, &s);
    if (!v) return s;
    if (mp_meta_parse_double(v, lo, hi, out)) return MP_OK;
    char what[96];
    snprintf(what, sizeof what, "a finite number in [%g, %g]", lo, hi);
    return meta_bad(path, key, v, what);
}

bool mp_meta_parse_floats(const char *text, double lo, double hi, float *out, int cap, int *n) {
    *n = 0;
    if (!text) return false;
    if (!*text) return true;
    char item[72];
    for (const char *p = text;; ) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        double v;
        if (len == 0 || len >= sizeof item || *n >= cap) return false;
        memcpy(item, p, len);
        item[len] = '\0';
        if (!mp_meta_parse_double(item, lo, hi, &v)) return false;
        out[(*n)++] = (float)v;
        if (!comma) return true;
        p = comma + 1;
    }
}

/* The items of a comma-separated list ("" has none). */
static int list_items(const char *text) {
    if (!*text) return 0;
    int n = 1;
    for (const char *p = text; *p; p++) n += *p == ',';
    return n;
}

/* One of the two statistics lists, n values (list_items) into out. */
static mp_status norm_list(const char *path, const char *key, const char *v, double lo, float *out, int n) {
    int got;
    if (mp_meta_parse_floats(v, lo, 1e30, out, n, &got) && got == n) return MP_OK;
    return meta_bad(path, key, v, lo > 0 ? "a comma-separated list of finite numbers > 0"
                                         : "a comma-separated list of finite numbers");
}

mp_status mp_ckpt_meta_norm_read(const mp_st_file *f, const char *path, int max, int *channels, float *mean,
                                 float *std) {
    const char *vm = mp_safetensors_meta(f, "mixprec.norm_mean"), *vs = mp_safetensors_meta(f, "mixprec.norm_std");
    const int nm = vm ? list_items(vm) : -1, ns = vs ? list_items(vs) : -1;
    if (nm != ns)
        return mp_error(MP_ERR_FORMAT, "%s: metadata 'mixprec.norm_mean' has %d values but 'mixprec.norm_std' %d: "
                        "one per channel each", path, nm < 0 ? 0 : nm, ns < 0 ? 0 : ns);
    if (nm > 0) { /* every value checked, those past max too */
        float *v = malloc(2 * (size_t)nm * sizeof *v);
        if (!v) return mp_error(MP_ERR_NOMEM, "%s: out of memory reading %d normalization channels", path, nm);
        mp_status s = norm_list(path, "mixprec.norm_mean", vm, -1e30, v, nm);
        if (s == MP_OK) s = norm_list(path, "mixprec.norm_std", vs, 1e-30, v + nm, nm);
        const int keep = nm < max ? nm : max;
        if (s == MP_OK && keep > 0) {
            memcpy(mean, v, (size_t)keep * sizeof *mean);
            memcpy(std, v + nm, (size_t)keep * sizeof *std);
        }
        free(v);
        MP_TRY(s);
    }
    *channels = nm;
    return MP_OK;
}

mp_status mp_ckpt_meta_norm(const mp_st_file *f, const char *path, mp_checkpoint_info *info) {
    float mean[MP_CHECKPOINT_MAX_CHANNELS], std[MP_CHECKPOINT_MAX_CHANNELS];
    int n;
    MP_TRY(mp_ckpt_meta_norm_read(f, path, MP_CHECKPOINT_MAX_CHANNELS, &n, mean, std));
    /* more channels than the arrays hold: as unknown as an older checkpoint's */
    info->norm_recorded = n >= 0 && n <= MP_CHECKPOINT_MAX_CHANNELS;
    info->norm_channels = info->norm_recorded ? n : 0;
    for (int i = 0; i < info->norm_channels; i++) info->norm_mean[i] = mean[i], info->norm_std[i] = std[i];
    return MP_OK;
}

void mp_ckpt_norm_text(const float *values, int n, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%.9g", i ? "," : "", (double)values[i]);
}
