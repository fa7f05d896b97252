/* npy.c — NumPy .npy files (format versions 1.0, 2.0 and 3.0): the magic
 * "\x93NUMPY", a version, a little-endian header length and a header that is
 * a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}
 * padded with spaces and ended by '\n', then the raw C-order array.
 *
 * The header is parsed strictly (exactly those three keys, once each, a
 * known dtype, non-negative dimensions, nothing but padding after the
 * dict) and the file must hold exactly the bytes the header declares. */
#include "data/npy.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "io/input_file.h"

#define NPY_MAX_HEADER (1u << 20)  /* a real header is ~100 bytes; more is corrupt */
#define NPY_MAX_VALUES (1ull << 32) /* as the IDX reader: beyond that it is corrupt, not big */
#define NPY_CHUNK (1u << 20)

/* ---- the header dict ------------------------------------------------------ */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_space(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A Python string literal in single or double quotes without escapes. */
static bool parse_string(cursor *c, char *buf, size_t cap) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    const char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return false;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    buf[n] = '\0';
    return true;
}

static bool parse_word(cursor *c, const char *word) {
    skip_space(c);
    const size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n)) return false;
    c->p += n;
    return true;
}

/* (d0, d1, ...) with an optional trailing comma; (n,) for one dimension. */
static bool parse_shape(cursor *c, mp_npy_header *h) {
    if (!eat(c, '(')) return false;
    h->ndim = 0;
    for (;;) {
        skip_space(c);
        if (c->p < c->end && *c->p == ')') {
            c->p++;
            return true;
        }
        if (h->ndim >= MP_NPY_MAX_DIMS) return false;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return false;
        unsigned long long v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            v = v * 10 + (unsigned long long)(*c->p++ - '0');
            if (v > (unsigned long long)INT64_MAX / 16) return false;
        }
        h->dims[h->ndim++] = (int64_t)v;
        skip_space(c);
        if (c->p < c->end && *c->p == ',') c->p++;
        else if (c->p < c->end && *c->p == ')') continue;
        else return false;
    }
}

static const struct {
    const char *descr;
    mp_npy_dtype dtype;
    int size;
} npy_types[] = {
    {"|u1", MP_NPY_U8, 1}, {"<u1", MP_NPY_U8, 1}, {">u1", MP_NPY_U8, 1}, {"=u1", MP_NPY_U8, 1},
    {"u1", MP_NPY_U8, 1}, {"|b1", MP_NPY_BOOL, 1}, {"|i1", MP_NPY_I8, 1}, {"<i1", MP_NPY_I8, 1},
    {">i1", MP_NPY_I8, 1}, {"=i1", MP_NPY_I8, 1}, {"<i2", MP_NPY_I16, 2}, {"<u2", MP_NPY_U16, 2},
    {"<i4", MP_NPY_I32, 4}, {"<u4", MP_NPY_U32, 4}, {"<i8", MP_NPY_I64, 8}, {"<u8", MP_NPY_U64, 8},
    {"<f2", MP_NPY_F16, 2}, {"<f4", MP_NPY_F32, 4}, {"<f8", MP_NPY_F64, 8},
};

const char *mp_npy_dtype_name(mp_npy_dtype t) {
    switch (t) {
    case MP_NPY_U8: return "uint8";
    case MP_NPY_BOOL: return "bool";
    case MP_NPY_I8: return "int8";
    case MP_NPY_I16: return "int16";
    case MP_NPY_U16: return "uint16";
    case MP_NPY_I32: return "int32";
    case MP_NPY_U32: return "uint32";
    case MP_NPY_I64: return "int64";
    case MP_NPY_U64: return "uint64";
    case MP_NPY_F16: return "float16";
    case MP_NPY_F32: return "float32";
    case MP_NPY_F64: return "float64";
    }
    return "?";
}

static mp_status set_dtype(const char *path, const char *descr, mp_npy_header *h) {
    for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
        if (!strcmp(descr, npy_types[i].descr)) {
            h->dtype = npy_types[i].dtype;
            h->esize = npy_types[i].size;
            return MP_OK;
        }
    if (descr[0] == '>' && strlen(descr) > 2 && descr[2] != '1')
        return mp_error(MP_ERR_FORMAT, "%s: dtype '%s' is big-endian; only little-endian .npy files are read "
                        "(np.save(path, a.astype(a.dtype.newbyteorder('<'))))", path, descr);
    return mp_error(MP_ERR_FORMAT, "%s: unsupported dtype '%s' (known: uint8, int8, int16, uint16, int32, uint32, "
                    "int64, uint64, float16, float32, float64, little-endian)", path, descr);
}

mp_status mp_npy_parse_header(const char *path, const unsigned char *buf, size_t len, mp_npy_header *h) {
    memset(h, 0, sizeof *h);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
        return mp_error(MP_ERR_FORMAT, "%s: bad magic: not a NumPy .npy file (expected \\x93NUMPY%s)", path,
                        len < 10 ? ", the file is shorter than the 10-byte preamble" : "");
    const int major = buf[6], minor = buf[7];
    if (major < 1 || major > 3 || minor != 0)
        return mp_error(MP_ERR_FORMAT, "%s: .npy format version %d.%d is not supported (1.0, 2.0, 3.0)", path,
                        major, minor);
    size_t pre = major == 1 ? 10 : 12, hlen;
    if (len < pre) return mp_error(MP_ERR_FORMAT, "%s: truncated: the .npy preamble ends early", path);
    if (major == 1) hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    else hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return mp_error(MP_ERR_FORMAT, "%s: header length %zu is absurd (the header is probably corrupt)", path, hlen);
    if (len < pre + hlen)
        return mp_error(MP_ERR_FORMAT, "%s: truncated: the header declares %zu bytes, the file holds %zu", path,
                        hlen, len - pre);
    h->data_offset = pre + hlen;
    cursor c = {(const char *)buf + pre, (const char *)buf + pre + hlen};
    if (hlen == 0 || c.end[-1] != '\n')
        return mp_error(MP_ERR_FORMAT, "%s: header parse error: the header does not end with a newline", path);
    c.end--;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    char descr[16] = "";
    if (!eat(&c, '{')) return mp_error(MP_ERR_FORMAT, "%s: header parse error: expected a '{' dict", path);
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_string(&c, key, sizeof key) || !eat(&c, ':'))
            return mp_error(MP_ERR_FORMAT, "%s: header parse error at offset %d: expected 'key': value", path,
                            (int)(c.p - (const char *)buf));
        if (!strcmp(key, "descr") && !seen_descr) {
            if (!parse_string(&c, descr, sizeof descr))
                return mp_error(MP_ERR_FORMAT, "%s: header parse error: 'descr' must be a simple dtype string such as "
                                "'<f4' (structured dtypes are not supported)", path);
            seen_descr = true;
        } else if (!strcmp(key, "fortran_order") && !seen_fortran) {
            if (parse_word(&c, "True")) h->fortran_order = true;
            else if (parse_word(&c, "False")) h->fortran_order = false;
            else return mp_error(MP_ERR_FORMAT, "%s: header parse error: 'fortran_order' must be True or False", path);
            seen_fortran = true;
        } else if (!strcmp(key, "shape") && !seen_shape) {
            if (!parse_shape(&c, h))
                return mp_error(MP_ERR_FORMAT, "%s: header parse error: 'shape' must be a tuple of at most %d "
                                "non-negative integers", path, MP_NPY_MAX_DIMS);
            seen_shape = true;
        } else {
            return mp_error(MP_ERR_FORMAT, "%s: header parse error: %s key '%s' (expected 'descr', 'fortran_order', "
                            "'shape' once each)", path,
                            (!strcmp(key, "descr") || !strcmp(key, "fortran_order") || !strcmp(key, "shape"))
                                ? "repeated" : "unexpected", key);
        }
        if (eat(&c, '}')) break;
        if (!eat(&c, ','))
            return mp_error(MP_ERR_FORMAT, "%s: header parse error at offset %d: expected ',' or '}'", path,
                            (int)(c.p - (const char *)buf));
    }
    skip_space(&c);
    if (c.p != c.end)
        return mp_error(MP_ERR_FORMAT, "%s: header parse error: unexpected text after the header dict", path);
    if (!seen_descr || !seen_fortran || !seen_shape)
        return mp_error(MP_ERR_FORMAT, "%s: header parse error: key '%s' missing", path,
                        !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    MP_TRY(set_dtype(path, descr, h));
    if (h->fortran_order)
        return mp_error(MP_ERR_FORMAT, "%s: fortran_order is True: only C-order arrays are read "
                        "(save np.ascontiguousarray(a))", path);
    unsigned long long count = 1;
    for (int i = 0; i < h->ndim; i++) {
        if (h->dims[i] > INT_MAX || (h->dims[i] && count > NPY_MAX_VALUES / (unsigned long long)h->dims[i]))
            return mp_error(MP_ERR_FORMAT, "%s: absurd shape (more than %llu values): the header is probably corrupt",
                            path, NPY_MAX_VALUES);
        count *= (unsigned long long)h->dims[i];
    }
    h->count = (size_t)count;
    return MP_OK;
}

/* ---- reading -------------------------------------------------------------- */

/* The whole header (first up to 64 KiB, more if it says so) and the data
 * size check against the file size. */
static mp_status npy_open(const char *path, int *fd, mp_npy_header *h) {
    uint64_t size = 0;
    MP_TRY(mp_input_open(path, fd, &size));
    size_t want = 65536, got = 0;
    unsigned char *buf = NULL;
    mp_status s = MP_OK;
    for (int round = 0; round < 2; round++) {
        unsigned char *nb = realloc(buf, want);
        if (!nb) {
            s = mp_error(MP_ERR_NOMEM, "%s: out of memory reading the header", path);
            break;
        }
        buf = nb;
        while (got < want) {
            ssize_t k = pread(*fd, buf + got, want - got, (off_t)got);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) {
                s = mp_error(MP_ERR_IO, "%s: read error: %s", path, strerror(errno));
                break;
            }
            if (k == 0) break;
            got += (size_t)k;
        }
        if (s != MP_OK) break;
        s = mp_npy_parse_header(path, buf, got, h);
        /* a v2/v3 header longer than what was read: read it all once */
        if (s == MP_OK || round == 1 || got < want || got < 12 || buf[6] == 1) break;
        size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        if (hlen > NPY_MAX_HEADER) break;
        want = 12 + hlen;
    }
    free(buf);
    if (s == MP_OK) {
        const uint64_t need = (uint64_t)h->count * (uint64_t)h->esize, have = size - h->data_offset;
        if (have < need)
            s = mp_error(MP_ERR_FORMAT, "%s: truncated: the header declares %llu bytes of data, the file holds %llu",
                         path, (unsigned long long)need, (unsigned long long)have);
        else if (have > need)
            s = mp_error(MP_ERR_FORMAT, "%s: %llu unexpected bytes after the %llu bytes of data the header declares",
                         path, (unsigned long long)(have - need), (unsigned long long)need);
    }
    if (s != MP_OK) {
        close(*fd);
        *fd = -1;
    }
    return s;
}

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* Element i of raw little-endian data as a double (integers exactly up to 2^53). */
static double npy_value(mp_npy_dtype t, const unsigned char *p) {
    switch (t) {
    case MP_NPY_U8: case MP_NPY_BOOL: return p[0];
    case MP_NPY_I8: return (int8_t)p[0];
    case MP_NPY_I16: return (int16_t)le16(p);
    case MP_NPY_U16: return le16(p);
    case MP_NPY_I32: return (int32_t)le32(p);
    case MP_NPY_U32: return le32(p);
    case MP_NPY_I64: return (double)(int64_t)le64(p);
    case MP_NPY_U64: return (double)le64(p);
    case MP_NPY_F16: {
        const uint16_t b = le16(p);
        const int e = b >> 10 & 31, m = b & 1023;
        double v = e == 0 ? m / 16777216.0 : e == 31 ? (m ? NAN : INFINITY) : (1024 + m) * ldexp(1.0, e - 25);
        return b & 0x8000 ? -v : v;
    }
    case MP_NPY_F32: {
        uint32_t u = le32(p);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case MP_NPY_F64: {
        uint64_t u = le64(p);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    }
    return 0;
}

mp_status mp_npy_read(const char *path, mp_npy_header *h, mp_npy_begin begin, mp_npy_sink sink, void *arg) {
    int fd = -1;
    MP_TRY(npy_open(path, &fd, h));
    mp_status s = begin(arg, h);
    if (s != MP_OK) {
        close(fd);
        return s;
    }
    unsigned char *chunk = malloc(NPY_CHUNK);
    double *vals = malloc(NPY_CHUNK / (size_t)h->esize * sizeof(double));
    s = chunk && vals ? MP_OK : mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    const size_t per_chunk = NPY_CHUNK / (size_t)h->esize;
    for (size_t done = 0; s == MP_OK && done < h->count;) {
        const size_t k = h->count - done < per_chunk ? h->count - done : per_chunk, bytes = k * (size_t)h->esize;
        size_t got = 0;
        while (got < bytes) {
            ssize_t r = pread(fd, chunk + got, bytes - got, (off_t)(h->data_offset + done * (size_t)h->esize + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got < bytes) {
            s = mp_error(MP_ERR_IO, "%s: read error or the file shrank while it was read", path);
            break;
        }
        for (size_t i = 0; i < k; i++) vals[i] = npy_value(h->dtype, chunk + i * (size_t)h->esize);
        s = sink(arg, done, vals, k);
        done += k;
    }
    free(chunk);
    free(vals);
    close(fd);
    return s;
}
