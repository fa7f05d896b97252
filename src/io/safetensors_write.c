/* safetensors_write.c — the atomic safetensors checkpoint writer: checks the
 * tensors and metadata, lays them out as the reference writer does, builds
 * the JSON header with cJSON, then writes a temporary file, fsyncs it and
 * renames it into place. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/json_write.h"
#include "io/output_path.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

/* ---- names and dtypes ---------------------------------------------------- */

/* Index into mp_st_dtypes of a mixprec dtype. */
static int st_dtype_of_mp(mp_dtype t) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (mp_st_dtypes[i].mp == (int)t) return i;
    return -1;
}

/* A name or metadata key: non-empty UTF-8 without control characters.
 * Returns NULL if fine, else what is wrong. */
static const char *st_name_problem(const char *s) {
    size_t n = strlen(s);
    if (n == 0) return "is empty";
    if (mp_st_utf8_valid_prefix((const unsigned char *)s, n) != n) return "is not valid UTF-8";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return "contains a control character";
    }
    return NULL;
}

/* ---- writer -------------------------------------------------------------- */

typedef struct {
    const char *name;
    int rank; /* index in mp_st_dtypes */
    int idx;  /* index in the caller's array */
} st_order;

/* Widest dtype first, then by name (bytewise), as the reference writer. */
static int st_order_cmp(const void *a, const void *b) {
    const st_order *x = a, *y = b;
    if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int st_order_by_name(const void *a, const void *b) {
    return strcmp(((const st_order *)a)->name, ((const st_order *)b)->name);
}

static const mp_st_file_ops system_ops = {.write = write, .fsync = fsync, .rename = rename};
static const mp_st_file_ops *ops = &system_ops;

void mp_st_set_file_ops(const mp_st_file_ops *o) { ops = o ? o : &system_ops; }

static int st_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t k = ops->write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Checks the arguments; returns the byte size of each tensor in nbytes. */
static mp_status st_check_args(const char *path, const mp_st_tensor *tensors, int n,
                               const char *const *meta_keys, const char *const *meta_values, int n_meta,
                               uint64_t *nbytes) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const mp_st_tensor *t = &tensors[i];
        if (!t->name) return mp_error(MP_ERR_INVALID_ARG, "%s: tensor %d has no name", path, i);
        const char *why = st_name_problem(t->name);
        if (why) return mp_error(MP_ERR_INVALID_ARG, "%s: tensor %d: the name %s", path, i, why);
        if (strcmp(t->name, "__metadata__") == 0)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor %d: '__metadata__' is reserved by the format", path, i);
        if ((unsigned)t->dtype >= (unsigned)MP_DTYPE_COUNT)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': unknown dtype %d", path, t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > MP_ST_MAX_DIMS)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': %d dimensions (0 to %d allowed)", path, t->name,
                            t->ndim, MP_ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->dims[d] < 0)
                return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': dimension %d is %" PRId64, path, t->name, d,
                                t->dims[d]);
            if (__builtin_mul_overflow(numel, (uint64_t)t->dims[d], &numel) || numel > MP_JSON_INT_MAX)
                return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': too many elements", path, t->name);
            if (t->dims[d] > MP_JSON_INT_MAX) /* beside a 0 dimension */
                return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': dimension %d is %" PRId64 " (the most written "
                                "is 10^15 - 1)", path, t->name, d, t->dims[d]);
        }
        nbytes[i] = numel * mp_dtype_size(t->dtype);
        total += nbytes[i];
        /* every offset, a number in the header, must print exactly (json_write.h) */
        if (nbytes[i] > MP_JSON_INT_MAX || total > MP_JSON_INT_MAX)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': the tensors exceed 10^15 - 1 bytes", path, t->name);
        if (nbytes[i] > 0 && !t->data)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor '%s': data is NULL for %" PRIu64 " bytes", path,
                            t->name, nbytes[i]);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i])
            return mp_error(MP_ERR_INVALID_ARG, "%s: metadata entry %d has a NULL key or value", path, i);
        const char *why = st_name_problem(meta_keys[i]);
        if (why) return mp_error(MP_ERR_INVALID_ARG, "%s: metadata key %d: the key %s", path, i, why);
        size_t len = strlen(meta_values[i]);
        if (mp_st_utf8_valid_prefix((const unsigned char *)meta_values[i], len) != len)
            return mp_error(MP_ERR_INVALID_ARG, "%s: metadata '%s': value is not valid UTF-8", path, meta_keys[i]);
    }
    return MP_OK;
}

/* Sorted copies of the names (tensors: widest dtype first, then name;
 * metadata: by key); fails on a name given twice. */
static mp_status st_plan(const char *path, const mp_st_tensor *tensors, int n, const char *const *meta_keys,
                         int n_meta, st_order *tord, st_order *mord) {
    for (int i = 0; i < n; i++)
        tord[i] = (st_order){tensors[i].name, st_dtype_of_mp(tensors[i].dtype), i};
    qsort(tord, (size_t)n, sizeof *tord, st_order_by_name);
    for (int i = 1; i < n; i++)
        if (strcmp(tord[i - 1].name, tord[i].name) == 0)
            return mp_error(MP_ERR_INVALID_ARG, "%s: tensor name '%s' appears twice", path, tord[i].name);
    qsort(tord, (size_t)n, sizeof *tord, st_order_cmp);
    for (int i = 0; i < n_meta; i++) mord[i] = (st_order){meta_keys[i], 0, i};
    qsort(mord, (size_t)n_meta, sizeof *mord, st_order_by_name);
    for (int i = 1; i < n_meta; i++)
        if (strcmp(mord[i - 1].name, mord[i].name) == 0)
            return mp_error(MP_ERR_INVALID_ARG, "%s: metadata key '%s' appears twice", path, mord[i].name);
    return MP_OK;
}

/* The header JSON, compact, padded with spaces to a multiple of 8 bytes (its
 * length in *len); NULL when out of memory. cJSON escapes strings as
 * serde_json does (\" \\ \b \f \n \r \t, other controls as \u00xx, UTF-8
 * as is) and keeps the insertion order, so the bytes equal the reference
 * writer's. */
static char *st_header(const mp_st_tensor *tensors, int n, const char *const *meta_values, int n_meta,
                       const st_order *tord, const st_order *mord, const uint64_t *nbytes, size_t *len) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++)
            ok = ok && mp_json_add(meta, mord[i].name, mp_json_str(meta_values[mord[i].idx]));
    }
    uint64_t offset = 0; /* at most MP_JSON_INT_MAX (st_check_args) */
    for (int i = 0; ok && i < n; i++) {
        const mp_st_tensor *t = &tensors[tord[i].idx];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        ok = mp_json_add(e, "dtype", mp_json_str(mp_st_dtypes[tord[i].rank].name));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) ok = ok && mp_json_push(shape, mp_json_int(t->dims[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        ok = ok && shape && mp_json_push(offs, mp_json_int((int64_t)offset));
        offset += nbytes[tord[i].idx];
        ok = ok && mp_json_push(offs, mp_json_int((int64_t)offset));
    }
    char *text = mp_json_print(root, ok, false);
    if (!text) return NULL;
    size_t n0 = strlen(text), padded = (n0 + 7) / 8 * 8;
    char *h = malloc(padded + 1);
    if (h) {
        memcpy(h, text, n0);
        memset(h + n0, ' ', padded - n0);
        h[padded] = '\0';
        *len = padded;
    }
    cJSON_free(text);
    return h;
}

/* Write the file bytes to `tmp` and move it over `path`. On failure the
 * temporary file is gone and mp_last_error() says what failed. */
static mp_status st_commit(const char *path, const char *tmp, const char *hdr, size_t hdr_len,
                           const mp_st_tensor *tensors, int n,
                           const st_order *tord, const uint64_t *nbytes) {
    const char *what = "creating";
    unlink(tmp); /* a leftover of an earlier process with this pid (maybe not a regular file) */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) goto fail;
    what = "writing";
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)hdr_len >> (8 * k));
    if (st_write_all(fd, len8, 8) != 0 || st_write_all(fd, hdr, hdr_len) != 0) goto fail;
    for (int i = 0; i < n; i++) {
        const mp_st_tensor *t = &tensors[tord[i].idx];
        if (nbytes[tord[i].idx] > 0 && st_write_all(fd, t->data, (size_t)nbytes[tord[i].idx]) != 0) goto fail;
    }
    what = "syncing";
    if (ops->fsync(fd) != 0) goto fail;
    what = "closing";
    int r = close(fd);
    fd = -1;
    if (r != 0) goto fail;
    what = "renaming";
    if (ops->rename(tmp, path) != 0) goto fail;
    if (mp_output_sync_parent_dir(path) != 0)
        return mp_error(MP_ERR_IO, "%s: written, but syncing its directory failed: %s", path, strerror(errno));
    return MP_OK;

fail:;
    int err = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    return mp_error(MP_ERR_IO, "%s: cannot write the checkpoint (%s temporary file %s): %s", path, what, tmp,
                    strerror(err));
}

mp_status mp_safetensors_write(const char *path, const mp_st_tensor *tensors, int n,
                               const char *const *meta_keys, const char *const *meta_values, int n_meta) {
    if (!path || !*path) return mp_error(MP_ERR_INVALID_ARG, "safetensors: empty output path");
    if (n < 0 || (n > 0 && !tensors))
        return mp_error(MP_ERR_INVALID_ARG, "%s: bad tensor list (n = %d, tensors = %p)", path, n,
                        (const void *)tensors);
    if (n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values)))
        return mp_error(MP_ERR_INVALID_ARG, "%s: bad metadata list (n_meta = %d)", path, n_meta);
    /* Only a regular file or a new path is replaced: renaming over a device
     * node or a FIFO would replace it. */
    MP_TRY(mp_output_path_check(path, NULL));
    mp_output_remove_stale_tmp(path);

    uint64_t *nbytes = calloc((size_t)n + 1, sizeof *nbytes);
    st_order *tord = calloc((size_t)n + 1, sizeof *tord);
    st_order *mord = calloc((size_t)n_meta + 1, sizeof *mord);
    char *hdr = NULL;
    size_t hdr_len = 0;
    char *tmp = malloc(strlen(path) + 32);
    mp_status s;
    if (!nbytes || !tord || !mord || !tmp) {
        s = mp_error(MP_ERR_NOMEM, "%s: out of memory preparing the checkpoint", path);
        goto done;
    }
    s = st_check_args(path, tensors, n, meta_keys, meta_values, n_meta, nbytes);
    if (s == MP_OK) s = st_plan(path, tensors, n, meta_keys, n_meta, tord, mord);
    if (s != MP_OK) goto done;
    hdr = st_header(tensors, n, meta_values, n_meta, tord, mord, nbytes, &hdr_len);
    if (!hdr || hdr_len > ST_MAX_HEADER) {
        s = !hdr ? mp_error(MP_ERR_NOMEM, "%s: out of memory building the header", path)
                 : mp_error(MP_ERR_INVALID_ARG, "%s: header of %zu bytes exceeds the format's %llu-byte limit",
                            path, hdr_len, ST_MAX_HEADER);
        goto done;
    }
    sprintf(tmp, "%s.tmp.%ld", path, (long)getpid());
    s = st_commit(path, tmp, hdr, hdr_len, tensors, n, tord, nbytes);

done:
    free(hdr);
    free(tmp);
    free(mord);
    free(tord);
    free(nbytes);
    return s;
}
