/* safetensors_read.c — the validating safetensors checkpoint reader: open
 * (header parsed with cJSON, checked as strictly as the reference
 * implementation), tensor and metadata lookups, close. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "io/input_file.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

/* ---- reader -------------------------------------------------------------- */

typedef struct {
    char *name;
    int dt;                        /* index into mp_st_dtypes */
    int ndim;
    int64_t dims[MP_ST_MAX_DIMS];  /* the first MP_ST_MAX_DIMS dimensions */
    uint64_t begin, end;           /* data_offsets */
    const void *data;
    void *own;                     /* aligned copy when begin is misaligned */
} st_entry;

struct mp_st_file {
    char *path;
    unsigned char *buf;  /* the data buffer, 64-byte aligned */
    st_entry *t;         /* by data offset */
    int n;
    st_entry **by_name;  /* sorted by name */
    char **mkey, **mval;
    int n_meta;
};

void mp_safetensors_close(mp_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        free(f->t[i].name);
        free(f->t[i].own);
    }
    for (int i = 0; i < f->n_meta; i++) {
        free(f->mkey[i]);
        free(f->mval[i]);
    }
    free(f->t);
    free(f->by_name);
    free(f->mkey);
    free(f->mval);
    free(f->buf);
    free(f->path);
    free(f);
}

int mp_safetensors_count(const mp_st_file *f) {
    MP_ASSERT(f);
    return f->n;
}

const char *mp_safetensors_name(const mp_st_file *f, int i) {
    MP_ASSERT(f && i >= 0 && i < f->n);
    return f->t[i].name;
}

int mp_safetensors_meta_count(const mp_st_file *f) {
    MP_ASSERT(f);
    return f->n_meta;
}

const char *mp_safetensors_meta_key(const mp_st_file *f, int i) {
    MP_ASSERT(f && i >= 0 && i < f->n_meta);
    return f->mkey[i];
}

const char *mp_safetensors_meta(const mp_st_file *f, const char *key) {
    MP_ASSERT(f && key);
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->mkey[i], key) == 0) return f->mval[i];
    return NULL;
}

static int st_name_key_cmp(const void *key, const void *elem) {
    return strcmp((const char *)key, (*(st_entry *const *)elem)->name);
}

mp_status mp_safetensors_get(const mp_st_file *f, const char *name, mp_st_tensor *out) {
    MP_ASSERT(f && name && out);
    st_entry *const *hit = bsearch(name, f->by_name, (size_t)f->n, sizeof *f->by_name, st_name_key_cmp);
    if (!hit) return mp_error(MP_ERR_FORMAT, "%s: no tensor named '%s'", f->path, name);
    const st_entry *e = *hit;
    const st_dtype_info *d = &mp_st_dtypes[e->dt];
    if (d->mp < 0)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which mixprec does not use", f->path,
                        name, d->name);
    if (e->ndim > MP_ST_MAX_DIMS)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions; mixprec supports up to %d",
                        f->path, name, e->ndim, MP_ST_MAX_DIMS);
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = (mp_dtype)d->mp;
    out->ndim = e->ndim;
    memcpy(out->dims, e->dims, sizeof out->dims);
    out->data = e->data;
    return MP_OK;
}

/* MP_ERR_FORMAT "<path>: <message>". */
__attribute__((format(printf, 2, 3))) static mp_status st_bad(const char *path, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mp_error(MP_ERR_FORMAT, "%s: %s", path, msg);
}

/* JSON forbids raw control characters in strings and allows only
 * whitespace ones outside them; cJSON checks neither (and treats every byte
 * up to 0x20 as whitespace). A \u0000 escape would decode to a NUL, which C
 * strings cannot hold. */
static mp_status st_prescan(const char *path, const char *h, size_t n) {
    if (n >= 3 && memcmp(h, "\xef\xbb\xbf", 3) == 0)
        return st_bad(path, "header is not valid JSON: it starts with a byte-order mark");
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c < 0x20 && (in_str || (c != '\t' && c != '\n' && c != '\r')))
            return st_bad(path, "header is not valid JSON: control character 0x%02x at byte %zu", c, i);
        if (!in_str) {
            in_str = c == '"';
        } else if (c == '"') {
            in_str = false;
        } else if (c == '\\' && i + 1 < n) {
            if (h[i + 1] == 'u' && n - i >= 6 && memcmp(h + i + 2, "0000", 4) == 0)
                return st_bad(path, "header has a \\u0000 (NUL) escape at byte %zu, which mixprec cannot represent",
                              i);
            i++;
        }
    }
    return MP_OK;
}

static bool st_json_uint(const cJSON *x, uint64_t *v) {
    if (!cJSON_IsNumber(x)) return false;
    double d = x->valuedouble;
    if (!(d >= 0 && d < (double)ST_MAX_INT)) return false;
    *v = (uint64_t)d;
    return (double)*v == d;
}

static const char *st_json_kind(const cJSON *x) {
    if (cJSON_IsArray(x)) return "an array";
    if (cJSON_IsString(x)) return "a string";
    if (cJSON_IsNumber(x)) return "a number";
    if (cJSON_IsBool(x)) return "a boolean";
    if (cJSON_IsNull(x)) return "null";
    return "an object";
}

/* "(10, 3)" from a validated shape array. */
static void st_shape_str(const cJSON *shape, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "(");
    int i = 0;
    for (const cJSON *d = shape->child; d && k + 32 < cap; d = d->next, i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRIu64, i ? ", " : "", (uint64_t)d->valuedouble);
    snprintf(buf + k, cap - k, "%s)", k + 32 >= cap ? ", ..." : "");
}

static mp_status st_parse_meta(const char *path, mp_st_file *f, const cJSON *m) {
    if (cJSON_IsNull(m)) return MP_OK;
    if (!cJSON_IsObject(m)) return st_bad(path, "\"__metadata__\" is %s, not an object", st_json_kind(m));
    int cnt = cJSON_GetArraySize(m);
    f->mkey = calloc((size_t)cnt + 1, sizeof *f->mkey);
    f->mval = calloc((size_t)cnt + 1, sizeof *f->mval);
    if (!f->mkey || !f->mval) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    for (const cJSON *it = m->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return st_bad(path, "metadata '%s' is %s (metadata values must be strings)", it->string,
                          st_json_kind(it));
        for (int j = 0; j < f->n_meta; j++)
            if (strcmp(f->mkey[j], it->string) == 0)
                return st_bad(path, "metadata key '%s' appears twice", it->string);
        char *k = strdup(it->string), *v = strdup(it->valuestring);
        if (!k || !v) {
            free(k);
            free(v);
            return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
        }
        f->mkey[f->n_meta] = k;
        f->mval[f->n_meta++] = v;
    }
    return MP_OK;
}

/* One tensor entry, checked on its own (offsets against the buffer size,
 * not yet against each other). */
static mp_status st_parse_entry(const char *path, const cJSON *it, st_entry *e, uint64_t data_len) {
    const char *nm = e->name;
    if (!cJSON_IsObject(it)) return st_bad(path, "tensor '%s': entry is %s, not an object", nm, st_json_kind(it));
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    const cJSON *fv[3] = {NULL, NULL, NULL};
    for (const cJSON *c = it->child; c; c = c->next)
        for (int k = 0; k < 3; k++)
            if (strcmp(c->string, fields[k]) == 0) {
                if (fv[k]) return st_bad(path, "tensor '%s': \"%s\" appears twice", nm, fields[k]);
                fv[k] = c;
            }
    for (int k = 0; k < 3; k++)
        if (!fv[k]) return st_bad(path, "tensor '%s': no \"%s\"", nm, fields[k]);
    const cJSON *dt = fv[0], *shape = fv[1], *offs = fv[2];

    if (!cJSON_IsString(dt)) return st_bad(path, "tensor '%s': \"dtype\" is %s, not a string", nm, st_json_kind(dt));
    e->dt = -1;
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(dt->valuestring, mp_st_dtypes[i].name) == 0) e->dt = i;
    if (e->dt < 0) return st_bad(path, "tensor '%s': unknown dtype '%s'", nm, dt->valuestring);
    const st_dtype_info *d = &mp_st_dtypes[e->dt];

    if (!cJSON_IsArray(shape))
        return st_bad(path, "tensor '%s': \"shape\" is %s, not an array", nm, st_json_kind(shape));
    uint64_t numel = 1;
    bool overflow = false;
    e->ndim = 0;
    for (const cJSON *x = shape->child; x; x = x->next) {
        uint64_t v;
        if (!st_json_uint(x, &v))
            return st_bad(path, "tensor '%s': \"shape\" has an entry that is not an integer in [0, 2^53)", nm);
        if (e->ndim < MP_ST_MAX_DIMS) e->dims[e->ndim] = (int64_t)v;
        e->ndim++;
        overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    char shp[160];
    st_shape_str(shape, shp, sizeof shp);
    uint64_t bits = 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)d->bits, &bits);
    if (overflow) return st_bad(path, "tensor '%s': shape %s of %s is too large", nm, shp, d->name);
    if (bits % 8 != 0)
        return st_bad(path, "tensor '%s': shape %s of %s is not a whole number of bytes", nm, shp, d->name);

    uint64_t be[2];
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_json_uint(offs->child, &be[0]) ||
        !st_json_uint(offs->child->next, &be[1]))
        return st_bad(path, "tensor '%s': \"data_offsets\" is not [begin, end] with integers in [0, 2^53)", nm);
    e->begin = be[0];
    e->end = be[1];
    if (e->end < e->begin)
        return st_bad(path, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin", nm,
                      e->begin, e->end);
    if (e->end - e->begin != bits / 8)
        return st_bad(path, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] do not match shape %s of %s (%" PRIu64
                      " bytes)", nm, e->begin, e->end, shp, d->name, bits / 8);
    if (e->end > data_len)
        return st_bad(path, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of the %" PRIu64
                      "-byte data buffer (truncated file?)", nm, e->begin, e->end, data_len);
    return MP_OK;
}

static int st_entry_offset_cmp(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name); /* deterministic messages and order */
}

static int st_entry_name_cmp(const void *a, const void *b) {
    return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}

/* Entries, metadata, then the layout as a whole: unique names and a
 * contiguous covering of the data buffer, as the reference requires. */
static mp_status st_parse_header(const char *path, mp_st_file *f, const cJSON *root, uint64_t data_len) {
    if (!cJSON_IsObject(root)) return st_bad(path, "header is %s, not a JSON object", st_json_kind(root));
    int cnt = cJSON_GetArraySize(root);
    f->t = calloc((size_t)cnt + 1, sizeof *f->t);
    f->by_name = calloc((size_t)cnt + 1, sizeof *f->by_name);
    if (!f->t || !f->by_name) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    bool seen_meta = false;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (seen_meta) return st_bad(path, "\"__metadata__\" appears twice");
            seen_meta = true;
            MP_TRY(st_parse_meta(path, f, it));
            continue;
        }
        st_entry *e = &f->t[f->n];
        e->name = strdup(it->string);
        if (!e->name) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
        f->n++;
        MP_TRY(st_parse_entry(path, it, e, data_len));
    }

    qsort(f->t, (size_t)f->n, sizeof *f->t, st_entry_offset_cmp);
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, st_entry_name_cmp);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            return st_bad(path, "tensor '%s' appears twice in the header", f->by_name[i]->name);

    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->t[i];
        if (e->begin > at && i == 0)
            return st_bad(path, "bytes [0, %" PRIu64 ") of the data buffer belong to no tensor (the first, '%s', "
                          "begins at %" PRIu64 ")", e->begin, e->name, e->begin);
        if (e->begin > at)
            return st_bad(path, "bytes [%" PRIu64 ", %" PRIu64 ") of the data buffer, between tensors '%s' and '%s', "
                          "belong to no tensor", at, e->begin, f->t[i - 1].name, e->name);
        if (e->begin < at)
            return st_bad(path, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor '%s' [%" PRIu64
                          ", %" PRIu64 "]", e->name, e->begin, e->end, f->t[i - 1].name, f->t[i - 1].begin,
                          f->t[i - 1].end);
        at = e->end;
    }
    if (at != data_len)
        return st_bad(path, "%" PRIu64 " trailing bytes after the last tensor (the data buffer is %" PRIu64
                      " bytes, the tensors cover %" PRIu64 ")", data_len - at, data_len, at);
    return MP_OK;
}

static mp_status st_read(const char *path, FILE *fp, void *dst, size_t n) {
    if (n > 0 && fread(dst, 1, n, fp) != n) {
        if (ferror(fp)) return mp_error(MP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        return mp_error(MP_ERR_IO, "%s: the file shrank while it was being read", path);
    }
    return MP_OK;
}

/* The header of the file at fp (size bytes) into f, validated; with_data:
 * the tensors' bytes too. */
static mp_status st_load(const char *path, mp_st_file *f, FILE *fp, uint64_t size, bool with_data) {
    if (size < 8)
        return st_bad(path, "file is %" PRIu64 " bytes, shorter than the 8-byte header length (truncated?)", size);
    unsigned char len8[8];
    MP_TRY(st_read(path, fp, len8, 8));
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)len8[k] << (8 * k);
    if (n > ST_MAX_HEADER)
        return st_bad(path, "header length %" PRIu64 " is over the format's %llu-byte limit (not a safetensors file?)",
                      n, ST_MAX_HEADER);
    if (n > size - 8)
        return st_bad(path, "header length %" PRIu64 " runs past the end of the %" PRIu64 "-byte file (truncated?)",
                      n, size);
    uint64_t data_len = size - 8 - n;

    char *h = malloc((size_t)n + 1);
    if (!h) return mp_error(MP_ERR_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header", path, n);
    cJSON *root = NULL;
    mp_status s = st_read(path, fp, h, (size_t)n);
    if (s != MP_OK) goto done;
    h[n] = '\0';
    size_t good = mp_st_utf8_valid_prefix((const unsigned char *)h, (size_t)n);
    if (good != n) {
        s = st_bad(path, "header is not valid UTF-8 (at byte %zu)", good);
        goto done;
    }
    s = st_prescan(path, h, (size_t)n);
    if (s != MP_OK) goto done;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(h, (size_t)n, &end, 0);
    if (!root) {
        s = st_bad(path, "header is not valid JSON (at byte %zu of %" PRIu64 ")", end ? (size_t)(end - h) : (size_t)0,
                   n);
        goto done;
    }
    for (const char *q = end; q < h + n; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            s = st_bad(path, "header is not valid JSON: text after its top-level value at byte %zu", (size_t)(q - h));
            goto done;
        }
    s = st_parse_header(path, f, root, data_len);
    if (s != MP_OK || !with_data) goto done;

    s = mp_host_mem_check(((size_t)data_len + 64) & ~(size_t)63, NULL, "the tensors of %s", path);
    if (s != MP_OK) goto done;
    f->buf = aligned_alloc(64, ((size_t)data_len + 64) & ~(size_t)63);
    if (!f->buf) {
        s = mp_error(MP_ERR_NOMEM, "%s: out of memory for %" PRIu64 " bytes of tensors", path, data_len);
        goto done;
    }
    s = st_read(path, fp, f->buf, (size_t)data_len);
    if (s != MP_OK) goto done;
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->t[i];
        int bits = mp_st_dtypes[e->dt].bits;
        uint64_t nb = e->end - e->begin, align = bits >= 8 ? (uint64_t)bits / 8 : 1;
        e->data = f->buf + e->begin;
        if (nb > 0 && e->begin % align != 0) {
            e->own = aligned_alloc(64, ((size_t)nb + 63) & ~(size_t)63);
            if (!e->own) {
                s = mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
                goto done;
            }
            memcpy(e->own, e->data, (size_t)nb);
            e->data = e->own;
        }
    }
done:
    cJSON_Delete(root);
    free(h);
    return s;
}

/* mp_safetensors_open and mp_safetensors_open_header. */
static mp_status st_open(const char *path, bool with_data, mp_st_file **out) {
    MP_ASSERT(path && out);
    *out = NULL;
    uint64_t size;
    FILE *fp;
    MP_TRY(mp_input_fopen(path, &fp, &size)); /* never blocks on a FIFO or device */
    mp_st_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(path);
    if (!f || !f->path) {
        fclose(fp);
        mp_safetensors_close(f);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    }
    mp_status s = st_load(path, f, fp, size, with_data);
    fclose(fp);
    if (s != MP_OK) {
        mp_safetensors_close(f);
        return s;
    }
    *out = f;
    return MP_OK;
}

mp_status mp_safetensors_open(const char *path, mp_st_file **out) { return st_open(path, true, out); }

mp_status mp_safetensors_open_header(const char *path, mp_st_file **out) { return st_open(path, false, out); }
