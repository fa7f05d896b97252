/* ckpt_meta.c — see ckpt_meta.h. */
#include "io/ckpt_meta.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/error.h"

mp_status mp_ckpt_meta_string(const mp_st_file *f, const char *path, const char *key, const char **out) {
    *out = mp_safetensors_meta(f, key);
    if (!*out) return mp_error(MP_ERR_FORMAT, "%s: not a mixprec checkpoint (metadata '%s' missing)", path, key);
    return MP_OK;
}

/* Digits only (after an optional '-' when negative is allowed). */
static bool all_digits(const char *s, bool negative) {
    if (negative && *s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

mp_status mp_ckpt_meta_int(const mp_st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                           int64_t *out) {
    const char *v;
    MP_TRY(mp_ckpt_meta_string(f, path, key, &v));
    errno = 0;
    char *end;
    long long x = all_digits(v, true) ? strtoll(v, &end, 10) : 0;
    if (!all_digits(v, true) || errno || x < lo || x > hi)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s' = '%.40s' must be an integer in [%lld, %lld]", path, key, v,
                        (long long)lo, (long long)hi);
    *out = x;
    return MP_OK;
}

mp_status mp_ckpt_meta_u64(const mp_st_file *f, const char *path, const char *key, uint64_t *out) {
    const char *v;
    MP_TRY(mp_ckpt_meta_string(f, path, key, &v));
    errno = 0;
    char *end;
    unsigned long long x = all_digits(v, false) ? strtoull(v, &end, 10) : 0;
    if (!all_digits(v, false) || errno)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s' = '%.40s' must be an unsigned 64-bit integer", path, key, v);
    *out = x;
    return MP_OK;
}

mp_status mp_ckpt_meta_double(const mp_st_file *f, const char *path, const char *key, double lo, double hi,
                              double *out) {
    const char *v;
    MP_TRY(mp_ckpt_meta_string(f, path, key, &v));
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi)
        return mp_error(MP_ERR_FORMAT, "%s: metadata '%s' = '%.40s' must be a finite number in [%g, %g]", path, key, v,
                        lo, hi);
    *out = x;
    return MP_OK;
}
