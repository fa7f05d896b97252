/* ckpt_meta.h — typed, ranged reads of a checkpoint's safetensors metadata.
 * Metadata values are strings a user can edit, so every number is parsed
 * strictly (the whole string, no fraction where an integer is meant, no
 * "nan", "inf" or out-of-range values cast without a check) and every error
 * is one line naming the file, the key and the bad value, e.g.
 *   run.safetensors: metadata 'mixprec.epoch' = '-5' must be an integer in [0, 100000]
 *
 * The text parsers underneath are exposed for tests and fuzzers. */
#ifndef MP_IO_CKPT_META_H
#define MP_IO_CKPT_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "mixprec.h"

/* A decimal integer: an optional '-' then 1..19 digits and nothing else
 * (no spaces, '+', fraction, exponent or trailing text), in [lo, hi]. */
bool mp_meta_parse_int(const char *text, int64_t lo, int64_t hi, int64_t *out);
/* As mp_meta_parse_int without the sign, up to 2^64 - 1. */
bool mp_meta_parse_u64(const char *text, uint64_t lo, uint64_t hi, uint64_t *out);
/* A finite decimal number ("0.5", "-1e-3", "65536"; not "nan", "inf",
 * hexadecimal or with surrounding spaces) in [lo, hi]. */
bool mp_meta_parse_double(const char *text, double lo, double hi, double *out);

/* `text` quoted for a one-line message in buf (cap >= 16 bytes), every byte
 * that is not printable ASCII written as \xNN, "..." when cut. */
void mp_meta_quote(const char *text, char *buf, size_t cap);

/* Each reads metadata `key` of `f` (read from `path`). Missing: MP_ERR_FORMAT
 * "<path>: not a mixprec checkpoint (metadata '<key>' missing)"; malformed or
 * out of range: MP_ERR_FORMAT "<path>: metadata '<key>' = '<value>' must be
 * <what> in [lo, hi]". *out is set only on success. */
mp_status mp_ckpt_meta_string(const mp_st_file *f, const char *path, const char *key, const char **out);
mp_status mp_ckpt_meta_int(const mp_st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                           int64_t *out);
mp_status mp_ckpt_meta_u64(const mp_st_file *f, const char *path, const char *key, uint64_t lo, uint64_t hi,
                           uint64_t *out);
mp_status mp_ckpt_meta_double(const mp_st_file *f, const char *path, const char *key, double lo, double hi,
                              double *out);

/* A comma-separated list of at most cap numbers as mp_meta_parse_double
 * reads them ("" is the empty list); *n receives the count. */
bool mp_meta_parse_floats(const char *text, double lo, double hi, float *out, int cap, int *n);

/* The run's input normalization (metadata 'mixprec.norm_mean' and
 * 'mixprec.norm_std', one value per channel, empty when the run did not
 * normalize): the channel count into *channels, -1 when both are absent (an
 * older checkpoint), and the first min(*channels, max) values into mean and
 * std. Malformed, non-positive std, or lists of different lengths:
 * MP_ERR_FORMAT naming the file and key. */
mp_status mp_ckpt_meta_norm_read(const mp_st_file *f, const char *path, int max, int *channels, float *mean,
                                 float *std);
/* The same into info's norm fields; nothing recorded (an older checkpoint),
 * or more than MP_CHECKPOINT_MAX_CHANNELS channels (which the fields cannot
 * hold): norm_recorded = false. */
mp_status mp_ckpt_meta_norm(const mp_st_file *f, const char *path, mp_checkpoint_info *info);

/* n values as the comma-separated text mp_meta_parse_floats reads back exactly (%.9g). */
void mp_ckpt_norm_text(const float *values, int n, char *buf, size_t cap);

#endif
