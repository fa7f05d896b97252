/* ckpt_meta.h — checkpoint metadata read as user input: typed, ranged
 * getters over a safetensors file's string metadata. Errors name the file,
 * the key and the value ("run.safetensors: metadata 'mixprec.epoch' = '-5'
 * must be an integer in [0, 1000000]"). */
#ifndef MP_IO_CKPT_META_H
#define MP_IO_CKPT_META_H

#include "io/safetensors.h"

/* The value of key (present). */
mp_status mp_ckpt_meta_string(const mp_st_file *f, const char *path, const char *key, const char **out);
/* A whole decimal integer in [lo, hi]: no fraction, exponent, sign junk,
 * spaces or trailing characters. */
mp_status mp_ckpt_meta_int(const mp_st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                           int64_t *out);
/* A whole unsigned decimal integer (64 bits). */
mp_status mp_ckpt_meta_u64(const mp_st_file *f, const char *path, const char *key, uint64_t *out);
/* A finite number in [lo, hi]. */
mp_status mp_ckpt_meta_double(const mp_st_file *f, const char *path, const char *key, double lo, double hi,
                              double *out);

#endif
