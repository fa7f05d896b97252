/* npy.h — the NumPy .npy reader underneath mp_dataset_open_npy: a strict
 * header parser (exposed for tests and the fuzzer) and a chunked reader
 * that hands the values to a sink as doubles. Only little-endian, C-order
 * arrays of plain numeric dtypes are read. */
#ifndef MP_DATA_NPY_H
#define MP_DATA_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mixprec.h"

#define MP_NPY_MAX_DIMS 8

typedef enum {
    MP_NPY_U8, MP_NPY_BOOL, MP_NPY_I8, MP_NPY_I16, MP_NPY_U16, MP_NPY_I32, MP_NPY_U32,
    MP_NPY_I64, MP_NPY_U64, MP_NPY_F16, MP_NPY_F32, MP_NPY_F64,
} mp_npy_dtype;

typedef struct {
    mp_npy_dtype dtype;
    int esize;                      /* bytes per element */
    bool fortran_order;
    int ndim;
    int64_t dims[MP_NPY_MAX_DIMS];
    size_t count;                   /* product of dims */
    size_t data_offset;             /* where the array starts in the file */
} mp_npy_header;

/* "uint8", "float32", ... */
const char *mp_npy_dtype_name(mp_npy_dtype t);

/* Parse the preamble and header dict at the start of a file (buf, len: the
 * first len bytes). Errors (MP_ERR_FORMAT) name `path` and say what is
 * wrong: bad magic, version, truncated, header parse error, unsupported or
 * big-endian dtype, fortran_order, absurd shape. */
mp_status mp_npy_parse_header(const char *path, const unsigned char *buf, size_t len, mp_npy_header *h);

/* Values [at, at + n) of the array, converted to double. */
typedef mp_status (*mp_npy_sink)(void *arg, size_t at, const double *values, size_t n);

/* Called once the header is parsed and the file size checked, before any
 * value: check the dtype and shape, allocate. */
typedef mp_status (*mp_npy_begin)(void *arg, const mp_npy_header *h);

/* Open `path` (a regular file; never blocks on a FIFO), parse its header
 * into *h, check the file holds exactly the declared data, call begin, then
 * feed every value to sink in order; an error of either stops the read. */
mp_status mp_npy_read(const char *path, mp_npy_header *h, mp_npy_begin begin, mp_npy_sink sink, void *arg);

#endif
