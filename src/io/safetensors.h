/* safetensors.h — checkpoint tensors in the safetensors format
 * (github.com/huggingface/safetensors): an 8-byte little-endian header
 * length N, N bytes of JSON (padded with spaces to a multiple of 8), then the
 * tensors' bytes, contiguous, little-endian, row-major.
 *
 * Writing is atomic (temporary file in the same directory, fsync, rename,
 * fsync of the directory); the header is built and printed with cJSON.
 * Reading parses the header with cJSON and validates it as strictly as the
 * reference implementation. */
#ifndef MP_IO_SAFETENSORS_H
#define MP_IO_SAFETENSORS_H

#include <stdint.h>

#include "mixprec.h"

#define MP_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    mp_dtype dtype;
    int ndim;                      /* 0 (a scalar) .. MP_ST_MAX_DIMS */
    int64_t dims[MP_ST_MAX_DIMS];  /* row-major shape; a 0 dimension means no elements */
    const void *data;              /* prod(dims) elements of dtype; NULL allowed when empty */
} mp_st_tensor;

/* Write `n` tensors and `n_meta` string key/value pairs (stored in
 * "__metadata__"; omitted when n_meta is 0) to `path`, atomically: the bytes
 * go to "<path>.tmp.<pid>" first, which is fsynced and renamed over `path`,
 * then the directory is fsynced. On any failure the temporary file is
 * removed and `path` is left as it was.
 *
 * Tensors are laid out as the reference writer does: by dtype alignment,
 * widest first (F64, F32, I32, BF16, F16), then by name (bytewise), so every
 * tensor is aligned to its element size; metadata keys are written sorted.
 * The output is byte-identical to the reference serializer's for the same
 * tensors and at most one metadata key.
 *
 * Names: non-empty UTF-8 without control characters, not "__metadata__",
 * unique. Metadata: non-empty UTF-8 keys (unique, no control characters),
 * UTF-8 values (escaped as JSON). Bad arguments: MP_ERR_INVALID_ARG, nothing
 * written; an I/O failure: MP_ERR_IO naming the path and the system error. */
mp_status mp_safetensors_write(const char *path, const mp_st_tensor *tensors, int n,
                               const char *const *meta_keys, const char *const *meta_values, int n_meta);

typedef struct mp_st_file mp_st_file;

/* Read and validate a whole file into memory. Any defect (short file, header
 * length absurd or past the end, header not UTF-8 / JSON / an object, an entry
 * missing or with a malformed dtype, shape or data_offsets, an unknown dtype,
 * offsets not matching shape x dtype, out of the buffer, overlapping, leaving
 * gaps, trailing bytes, duplicate names, non-string metadata) gives
 * MP_ERR_FORMAT with one message naming the file and the defect; a file that
 * cannot be opened or read gives MP_ERR_IO. *out is NULL on failure.
 *
 * Every dtype of the format is accepted at open (BOOL, U8, I8, I16, U16, U32,
 * I64, U64, F8_*, F4, F6_*, C64 too); only mixprec's five can be fetched. */
mp_status mp_safetensors_open(const char *path, mp_st_file **out);

/* The header alone (names, dtypes, shapes, metadata), validated as
 * mp_safetensors_open does, offsets against the file's size included, but the
 * tensors' bytes neither read nor held: for callers that want the metadata or
 * a shape of a checkpoint that may be large. mp_safetensors_get then gives
 * data NULL. */
mp_status mp_safetensors_open_header(const char *path, mp_st_file **out);

/* Tensors in file order (by data offset). */
int mp_safetensors_count(const mp_st_file *f);
const char *mp_safetensors_name(const mp_st_file *f, int i);

/* Look a tensor up by name. out->name and out->data point into `f` and stay
 * valid until mp_safetensors_close (data NULL for mp_safetensors_open_header); data is aligned to at least the element
 * size. Not found: MP_ERR_FORMAT naming the tensor and the file. A dtype
 * mixprec does not use (I64, U8, ...) or more than MP_ST_MAX_DIMS dimensions:
 * MP_ERR_UNSUPPORTED. */
mp_status mp_safetensors_get(const mp_st_file *f, const char *name, mp_st_tensor *out);

/* Metadata value for `key`, NULL if absent. */
const char *mp_safetensors_meta(const mp_st_file *f, const char *key);
/* Metadata entries in header order. */
int mp_safetensors_meta_count(const mp_st_file *f);
const char *mp_safetensors_meta_key(const mp_st_file *f, int i);

/* Free everything; NULL is fine. */
void mp_safetensors_close(mp_st_file *f);

#endif
