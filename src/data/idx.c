/* idx.c — IDX files (the MNIST format: magic 00 00 <type> <ndim>, big-endian
 * u32 dims, big-endian elements), read through zlib so .gz and plain files
 * both work; and the Fashion-MNIST directory layout on top of it. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "data/dataset.h"
#include "io/input_file.h"

/* A header may claim at most this many values (16 GiB as floats), and one
 * image at most MAX_SAMPLE; beyond that it is corrupt, not big. */
#define IDX_MAX_VALUES (1ull << 32)
#define IDX_MAX_SAMPLE (1ull << 26)
#define IDX_CHUNK (1u << 20) /* bytes read per gzread */

enum { IDX_U8 = 0x08, IDX_S8 = 0x09, IDX_I16 = 0x0B, IDX_I32 = 0x0C, IDX_F32 = 0x0D, IDX_F64 = 0x0E };

typedef struct {
    gzFile f;
    const char *path;
    const char *what; /* "images" or "labels", for messages */
    const char *unit; /* "image" or "label" */
    int type, esize, ndim;
    uint32_t dims[3];
    size_t count; /* product of dims */
} idx_reader;

static const char *idx_type_name(int t) {
    switch (t) {
    case IDX_U8: return "ubyte";
    case IDX_S8: return "sbyte";
    case IDX_I16: return "short";
    case IDX_I32: return "int";
    case IDX_F32: return "float";
    case IDX_F64: return "double";
    }
    return NULL;
}

static int idx_type_size(int t) {
    switch (t) {
    case IDX_U8: case IDX_S8: return 1;
    case IDX_I16: return 2;
    case IDX_I32: case IDX_F32: return 4;
    case IDX_F64: return 8;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read up to len bytes; *got = bytes read. Returns false on a zlib/read error. */
static bool idx_read_raw(idx_reader *r, void *buf, size_t len, size_t *got) {
    *got = 0;
    while (*got < len) {
        size_t want = len - *got < IDX_CHUNK ? len - *got : IDX_CHUNK;
        int k = gzread(r->f, (char *)buf + *got, (unsigned)want);
        if (k < 0) return false;
        if (k == 0) break;
        *got += (size_t)k;
    }
    return true;
}

/* zlib's message for r->f without the "<path>: " or "<fd:N>: " it puts in front. */
static const char *idx_zmsg(idx_reader *r, int *zerr) {
    const char *m = gzerror(r->f, zerr);
    size_t len = strlen(r->path);
    if (strncmp(m, r->path, len) == 0 && strncmp(m + len, ": ", 2) == 0) m += len + 2;
    else if (!strncmp(m, "<fd:", 4) && strstr(m, ">: ")) m = strstr(m, ">: ") + 3; /* gzdopen names it <fd:N> */
    return m;
}

/* The message for a read that came up short: a clean end of file or a gzip
 * stream cut short is "truncated", other zlib errors "corrupt", a system
 * error MP_ERR_IO. */
static mp_status idx_short(idx_reader *r, const char *part, size_t expected, size_t got) {
    int zerr = Z_OK;
    const char *zmsg = idx_zmsg(r, &zerr);
    if (zerr == Z_ERRNO)
        return mp_error(MP_ERR_IO, "%s: read error in the %s: %s", r->path, part, strerror(errno));
    if (zerr == Z_BUF_ERROR)
        return mp_error(MP_ERR_FORMAT, "%s: truncated gzip file: expected %zu bytes of %s, got %zu (zlib: %s)",
                        r->path, expected, part, got, zmsg);
    if (zerr != Z_OK && zerr != Z_STREAM_END)
        return mp_error(MP_ERR_FORMAT, "%s: corrupt gzip data while reading the %s (zlib: %s)", r->path, part, zmsg);
    return mp_error(MP_ERR_FORMAT, "%s: truncated: expected %zu bytes of %s, got %zu", r->path, expected, part,
                    got);
}

/* Open, read and validate the header: magic, element type, ndim, dims. */
static mp_status idx_open(idx_reader *r, const char *path, const char *what, int want_ndim) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->what = what;
    r->unit = want_ndim == 3 ? "image" : "label";
    MP_TRY(mp_data_check_file(path, NULL));
    int fd;
    MP_TRY(mp_input_open(path, &fd, NULL)); /* never blocks on a FIFO or device */
    r->f = gzdopen(fd, "rb");
    if (!r->f) {
        close(fd);
        return mp_error(MP_ERR_NOMEM, "%s: cannot open: out of memory", path);
    }
    gzbuffer(r->f, 1u << 17);

    unsigned char m[4];
    size_t got;
    if (!idx_read_raw(r, m, 4, &got) || got < 4) return idx_short(r, "IDX header (magic)", 4, got);
    uint32_t magic = be32(m);
    uint32_t expect = (uint32_t)(IDX_U8 << 8 | want_ndim);
    if (m[0] != 0 || m[1] != 0 || m[3] == 0) /* (an IDX file has at least one dimension) */
        return mp_error(MP_ERR_FORMAT, "%s: bad IDX magic 0x%08x (expected 0x%08x for ubyte %s)", path,
                        magic, expect, what);
    r->type = m[2];
    r->esize = idx_type_size(r->type);
    if (!r->esize)
        return mp_error(MP_ERR_FORMAT,
                        "%s: unknown IDX element type 0x%02x in magic 0x%08x (known: 0x08 ubyte, "
                        "0x09 sbyte, 0x0B short, 0x0C int, 0x0D float, 0x0E double)",
                        path, r->type, magic);
    r->ndim = m[3];
    if (r->ndim != want_ndim)
        return mp_error(MP_ERR_FORMAT,
                        "%s: IDX %s must have %d dimension%s (%s), the file has %d (magic 0x%08x)", path,
                        what, want_ndim, want_ndim == 1 ? "" : "s", want_ndim == 1 ? "n" : "n, h, w",
                        r->ndim, magic);

    unsigned char d[12];
    if (!idx_read_raw(r, d, 4u * (size_t)r->ndim, &got) || got < 4u * (size_t)r->ndim)
        return idx_short(r, "IDX header (dimensions)", 4u * (size_t)r->ndim, got);
    unsigned long long count = 1;
    bool absurd = false;
    char shape[48] = "";
    for (int i = 0; i < r->ndim; i++) {
        r->dims[i] = be32(d + 4 * i);
        count *= r->dims[i]; /* < 2^32 * 2^32: cannot wrap before the check */
        if (r->dims[i] > INT_MAX || count > IDX_MAX_VALUES) absurd = true;
        if (count > IDX_MAX_VALUES) count = IDX_MAX_VALUES + 1;
        size_t len = strlen(shape);
        snprintf(shape + len, sizeof shape - len, "%s%u", i ? " x " : "", r->dims[i]);
    }
    if (absurd)
        return mp_error(MP_ERR_FORMAT,
                        "%s: absurd IDX dimensions %s (limit %llu values, %d per dimension): the header "
                        "is probably corrupt",
                        path, shape, IDX_MAX_VALUES, INT_MAX);
    if (r->dims[0] == 0) return mp_error(MP_ERR_FORMAT, "%s: IDX %s file holds no samples", path, what);
    if (r->ndim == 3) {
        unsigned long long per = (unsigned long long)r->dims[1] * r->dims[2];
        if (per == 0 || per > IDX_MAX_SAMPLE)
            return mp_error(MP_ERR_FORMAT, "%s: absurd IDX image size %u x %u: the header is probably corrupt",
                            path, r->dims[1], r->dims[2]);
    }
    r->count = (size_t)count;
    return MP_OK;
}

static void idx_close(idx_reader *r) {
    if (r->f) gzclose(r->f);
    r->f = NULL;
}

static double idx_decode(int type, const unsigned char *p) {
    switch (type) {
    case IDX_U8: return p[0];
    case IDX_S8: return (int8_t)p[0];
    case IDX_I16: return (int16_t)(uint16_t)(p[0] << 8 | p[1]);
    case IDX_I32: return (int32_t)be32(p);
    case IDX_F32: {
        uint32_t u = be32(p);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case IDX_F64: {
        uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
        double x;
        memcpy(&x, &u, 8);
        return x;
    }
    }
    return 0;
}

/* Whether values [from, to) of r, esz bytes each, fit in the host's memory (core/host_mem.h). */
static mp_status check_growth(const idx_reader *r, size_t from, size_t to, size_t esz) {
    return mp_host_mem_check((to - from) * esz, NULL, "the %s of %s (values %zu to %zu of %zu)", r->what, r->path,
                             from, to, r->count);
}

/* Read all r->count values as floats (ubyte scaled by 1/255) or int32.
 * The output grows as data arrives, so a header that lies about its size
 * costs no more memory than the data actually there. */
static mp_status idx_read_values(idx_reader *r, bool as_float, void **out) {
    *out = NULL;
    size_t esz = as_float ? sizeof(float) : sizeof(int32_t);
    size_t cap = r->count < (1u << 20) ? r->count : (1u << 20), done = 0;
    MP_TRY(check_growth(r, 0, cap, esz));
    unsigned char *chunk = malloc(IDX_CHUNK);
    char *vals = malloc(cap * esz);
    if (!chunk || !vals) {
        free(chunk);
        free(vals);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory reading %s", r->path, r->what);
    }
    size_t per_chunk = IDX_CHUNK / (size_t)r->esize;
    while (done < r->count) {
        size_t k = r->count - done < per_chunk ? r->count - done : per_chunk, got;
        bool ok = idx_read_raw(r, chunk, k * (size_t)r->esize, &got);
        if (!ok || got < k * (size_t)r->esize) {
            free(chunk);
            free(vals);
            char part[32];
            snprintf(part, sizeof part, "%s data", r->unit);
            return idx_short(r, part, r->count * (size_t)r->esize, done * (size_t)r->esize + got);
        }
        if (done + k > cap) {
            size_t ncap = cap * 2 < r->count ? cap * 2 : r->count;
            while (ncap < done + k) ncap = ncap * 2 < r->count ? ncap * 2 : r->count;
            const mp_status fits = check_growth(r, cap, ncap, esz);
            if (fits != MP_OK) {
                free(chunk);
                free(vals);
                return fits;
            }
            char *nv = realloc(vals, ncap * esz);
            if (!nv) {
                free(chunk);
                free(vals);
                return mp_error(MP_ERR_NOMEM, "%s: out of memory for %zu %s values", r->path, r->count, r->what);
            }
            vals = nv;
            cap = ncap;
        }
        /* a double past float's range is named, not made inf (labels are integer types: they fit) */
        const char *bad = NULL;
        double v = 0;
        size_t at = 0;
        if (as_float) {
            float *dst = (float *)vals + done;
            if (r->type == IDX_U8)
                for (size_t i = 0; i < k; i++) dst[i] = (float)chunk[i] / 255.0f;
            else
                for (size_t i = 0; i < k && !bad; i++) {
                    v = idx_decode(r->type, chunk + i * r->esize), at = i;
                    if (isfinite(v) && fabs(v) > FLT_MAX) bad = "beyond float32's range";
                    dst[i] = (float)v;
                }
        } else {
            int32_t *dst = (int32_t *)vals + done;
            for (size_t i = 0; i < k; i++) dst[i] = (int32_t)idx_decode(r->type, chunk + i * r->esize);
        }
        if (bad) {
            free(chunk);
            free(vals);
            return mp_error(MP_ERR_FORMAT, "%s: %s value %zu is %g, %s", r->path, r->what, done + at, v, bad);
        }
        done += k;
    }
    free(chunk);
    /* Reading on to the end also makes zlib verify the gzip CRC and length. */
    unsigned char extra;
    size_t got;
    bool ok = idx_read_raw(r, &extra, 1, &got);
    int zerr = Z_OK;
    const char *zmsg = idx_zmsg(r, &zerr);
    if (!ok || got > 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
        free(vals);
        if (zerr == Z_ERRNO) return mp_error(MP_ERR_IO, "%s: read error: %s", r->path, strerror(errno));
        if (got == 0 && zerr == Z_BUF_ERROR)
            return mp_error(MP_ERR_FORMAT, "%s: truncated gzip file: cut short after the %zu bytes of %s data (zlib: %s)",
                            r->path, r->count * (size_t)r->esize, r->unit, zmsg);
        if (got == 0)
            return mp_error(MP_ERR_FORMAT, "%s: corrupt gzip data after the %zu bytes of %s data (zlib: %s)", r->path,
                            r->count * (size_t)r->esize, r->unit, zmsg);
        return mp_error(MP_ERR_FORMAT, "%s: unexpected data after the %zu bytes of %s data the IDX header declares",
                        r->path, r->count * (size_t)r->esize, r->unit);
    }
    *out = vals;
    return MP_OK;
}

mp_status mp_dataset_load_idx(const char *images_path, const char *labels_path, mp_dataset *out) {
    memset(out, 0, sizeof *out);
    idx_reader im, lb;
    memset(&lb, 0, sizeof lb);
    mp_status s = idx_open(&im, images_path, "images", 3);
    if (s == MP_OK) s = idx_open(&lb, labels_path, "labels", 1);
    if (s == MP_OK && (lb.type == IDX_F32 || lb.type == IDX_F64))
        s = mp_error(MP_ERR_FORMAT, "%s: IDX labels must be integers, the file holds %s values", labels_path,
                     idx_type_name(lb.type));
    if (s == MP_OK && lb.dims[0] != im.dims[0])
        s = mp_error(MP_ERR_FORMAT, "count mismatch: %s has %u images but %s has %u labels", images_path,
                     im.dims[0], labels_path, lb.dims[0]);
    void *images = NULL, *labels = NULL;
    if (s == MP_OK) s = idx_read_values(&im, true, &images);
    if (s == MP_OK) s = idx_read_values(&lb, false, &labels);
    idx_close(&im);
    idx_close(&lb);
    if (s != MP_OK) {
        free(images);
        free(labels);
        return s;
    }
    out->n = (int)im.dims[0];
    out->c = 1;
    out->h = (int)im.dims[1];
    out->w = (int)im.dims[2];
    out->images = images;
    out->labels = labels;
    mp_dataset_set_source(out, "%s", images_path);
    s = mp_dataset_set_classes(out, labels_path);
    if (s == MP_OK && (im.type == IDX_F32 || im.type == IDX_F64)) s = mp_dataset_check_finite(out);
    if (s != MP_OK) mp_dataset_free(out);
    return s;
}

#define FASHION_HINT "(install Fashion-MNIST with `apt-get install dataset-fashion-mnist`; it lands in /usr/share/datasets/fashion-mnist)"

/* dir/name.gz if it exists, else dir/name; MP_ERR_IO naming both if neither. */
static mp_status fashion_path(const char *dir, const char *name, char *path, size_t cap) {
    struct stat st;
    if ((size_t)snprintf(path, cap, "%s/%s.gz", dir, name) >= cap)
        return mp_error(MP_ERR_INVALID_ARG, "%s: directory path too long", dir);
    if (stat(path, &st) == 0) return MP_OK;
    snprintf(path, cap, "%s/%s", dir, name);
    if (stat(path, &st) == 0) return MP_OK;
    return mp_error(MP_ERR_IO, "%s/%s.gz: not found (nor %s without .gz) %s", dir, name, name, FASHION_HINT);
}

mp_status mp_dataset_load_fashion_mnist(const char *dir, bool train, mp_dataset *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0)
        return mp_error(MP_ERR_IO, "%s: Fashion-MNIST directory %s %s", dir,
                        errno == ENOENT ? "not found" : strerror(errno), FASHION_HINT);
    if (!S_ISDIR(st.st_mode))
        return mp_error(MP_ERR_IO, "%s: not a directory; expected the Fashion-MNIST directory %s", dir,
                        FASHION_HINT);
    const char *pre = train ? "train" : "t10k";
    char name[64], ipath[4096], lpath[4096];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", pre);
    MP_TRY(fashion_path(dir, name, ipath, sizeof ipath));
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", pre);
    MP_TRY(fashion_path(dir, name, lpath, sizeof lpath));
    MP_TRY(mp_dataset_load_idx(ipath, lpath, out));
    mp_status s = mp_dataset_check_labels(out, 10, lpath);
    if (s != MP_OK) {
        mp_dataset_free(out);
        return s;
    }
    out->classes = 10; /* a subset missing the top class still has 10 outputs */
    mp_dataset_set_source(out, "Fashion-MNIST %s (%s)", train ? "train" : "test", ipath);
    return MP_OK;
}
