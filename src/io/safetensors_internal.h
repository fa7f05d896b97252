/* safetensors_internal.h — what the safetensors writer (safetensors_write.c)
 * and reader (safetensors_read.c) share; not public API: the format's limits,
 * its dtype table and the UTF-8 check. */
#ifndef MP_IO_SAFETENSORS_INTERNAL_H
#define MP_IO_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <sys/types.h>

#include "io/safetensors.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian and is copied as is: a big-endian host needs byte swaps");

#define ST_MAX_HEADER 100000000ull    /* the reference implementation's limit */
#define ST_MAX_INT (1ull << 53)       /* shape and offset values must be below (exact in a double) */

typedef struct {
    const char *name;
    int bits; /* per element */
    int mp;   /* mp_dtype, or -1 if mixprec has no such dtype */
} st_dtype_info;

/* The format's dtypes, in the reference implementation's enum order (its
 * writer sorts by it, widest first, which keeps every tensor aligned). */
#define ST_NDTYPES 20
extern const st_dtype_info mp_st_dtypes[];

/* The system calls the writer commits a file with. Tests replace them (a
 * disk that fills up, an fsync or rename that fails) to check that a failed
 * write leaves the old file intact and no temporary file behind. */
typedef struct {
    ssize_t (*write)(int fd, const void *buf, size_t n);
    int (*fsync)(int fd);
    int (*rename)(const char *from, const char *to);
} mp_st_file_ops;

/* The writer's calls from now on; NULL: the system's. Not thread-safe: for
 * tests only. */
void mp_st_set_file_ops(const mp_st_file_ops *ops);

/* Length of the valid UTF-8 prefix of s[0, n) (n when all of it is valid):
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
size_t mp_st_utf8_valid_prefix(const unsigned char *s, size_t n);

#endif
