/* npy_dataset.c — a dataset from two NumPy files: images (N, H, W),
 * (N, C, H, W) or (N, H, W, C) of uint8 (scaled by 1/255, as the IDX and
 * CIFAR readers do) or float32 (finite), and labels (N,) of uint8, int32
 * or int64. The labels are read first, so a count mismatch is found
 * before the (large) image data is read. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "data/dataset.h"
#include "data/npy.h"

#define NPY_MAX_SAMPLE (1ll << 26) /* values per image */

typedef struct {
    const char *path;
    mp_npy_layout layout;   /* resolved: NCHW or NHWC */
    int n, c, h, w;
    int expect_n;           /* the labels' count, -1 = unknown */
    const char *labels_path;
    float *images;          // (n, c, h, w)
    int32_t *labels;        // (n)
    int classes;            /* 0: max + 1 */
    int32_t max_label;
} npy_load;

static void shape_text(const mp_npy_header *h, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < h->ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)h->dims[i]);
    if (used < cap) snprintf(buf + used, cap - used, "%s)", h->ndim == 1 ? "," : "");
}

static mp_status labels_begin(void *arg, const mp_npy_header *h) {
    npy_load *L = arg;
    char shape[160];
    shape_text(h, shape, sizeof shape);
    if (h->dtype != MP_NPY_U8 && h->dtype != MP_NPY_I32 && h->dtype != MP_NPY_I64)
        return mp_error(MP_ERR_FORMAT, "%s: labels of dtype %s are not supported (uint8, int32 or int64)", L->path,
                        mp_npy_dtype_name(h->dtype));
    if (h->ndim != 1)
        return mp_error(MP_ERR_FORMAT, "%s: labels must be 1-D (N,), the file's shape is %s", L->path, shape);
    if (h->dims[0] < 1) return mp_error(MP_ERR_FORMAT, "%s: the labels file holds no samples", L->path);
    L->n = (int)h->dims[0];
    MP_TRY(mp_host_mem_check((size_t)L->n * sizeof *L->labels, NULL, "the %d labels of %s", L->n, L->path));
    L->labels = malloc((size_t)L->n * sizeof *L->labels);
    if (!L->labels) return mp_error(MP_ERR_NOMEM, "%s: out of memory for %d labels", L->path, L->n);
    L->max_label = -1;
    return MP_OK;
}

static mp_status labels_sink(void *arg, size_t at, const double *v, size_t n) {
    npy_load *L = arg;
    const int limit = L->classes > 0 ? L->classes : MP_DATASET_MAX_CLASSES;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] >= 0 && v[i] < limit)) {
            if (L->classes > 0)
                return mp_error(MP_ERR_FORMAT, "%s: label %.0f of sample %zu is out of range [0, %d) (%d classes "
                                "given)", L->path, v[i], at + i, limit, L->classes);
            return mp_error(MP_ERR_FORMAT, "%s: label %.0f of sample %zu is out of range [0, %d)", L->path, v[i],
                            at + i, limit);
        }
        L->labels[at + i] = (int32_t)v[i];
        if (L->labels[at + i] > L->max_label) L->max_label = L->labels[at + i];
    }
    return MP_OK;
}

static mp_status images_begin(void *arg, const mp_npy_header *h) {
    npy_load *L = arg;
    char shape[160];
    shape_text(h, shape, sizeof shape);
    if (h->dtype != MP_NPY_U8 && h->dtype != MP_NPY_F32)
        return mp_error(MP_ERR_FORMAT, "%s: images of dtype %s are not supported (uint8 or float32)", L->path,
                        mp_npy_dtype_name(h->dtype));
    if (h->ndim == 3) {
        L->layout = MP_NPY_LAYOUT_NCHW;
        L->c = 1, L->h = (int)h->dims[1], L->w = (int)h->dims[2];
    } else if (h->ndim == 4) {
        if (L->layout == MP_NPY_LAYOUT_AUTO)
            L->layout = h->dims[3] == 1 || h->dims[3] == 3 ? MP_NPY_LAYOUT_NHWC : MP_NPY_LAYOUT_NCHW;
        const bool nhwc = L->layout == MP_NPY_LAYOUT_NHWC;
        L->c = (int)h->dims[nhwc ? 3 : 1], L->h = (int)h->dims[nhwc ? 1 : 2], L->w = (int)h->dims[nhwc ? 2 : 3];
    } else {
        return mp_error(MP_ERR_FORMAT, "%s: images must be 3-D (N, H, W) or 4-D (N, C, H, W) / (N, H, W, C), the "
                        "file's shape is %s", L->path, shape);
    }
    if (h->dims[0] < 1) return mp_error(MP_ERR_FORMAT, "%s: the images file holds no samples", L->path);
    if (L->c < 1 || L->h < 1 || L->w < 1 || (long long)L->c * L->h * L->w > NPY_MAX_SAMPLE)
        return mp_error(MP_ERR_FORMAT, "%s: image shape %s gives %dx%dx%d samples (each dimension >= 1, at most "
                        "%lld values)", L->path, shape, L->c, L->h, L->w, NPY_MAX_SAMPLE);
    if (h->dims[0] != L->expect_n)
        return mp_error(MP_ERR_FORMAT, "count mismatch: %s has %lld images but %s has %d labels", L->path,
                        (long long)h->dims[0], L->labels_path, L->expect_n);
    L->n = (int)h->dims[0];
    MP_TRY(mp_host_mem_check(h->count * sizeof *L->images, NULL, "the %d images of %s (%dx%dx%d each, as float32)",
                             L->n, L->path, L->c, L->h, L->w));
    L->images = malloc(h->count * sizeof *L->images);
    if (!L->images) return mp_error(MP_ERR_NOMEM, "%s: out of memory for %zu values", L->path, h->count);
    return MP_OK;
}

static mp_status images_sink(void *arg, size_t at, const double *v, size_t n) {
    npy_load *L = arg;
    const size_t per = (size_t)L->c * L->h * L->w, hw = (size_t)L->h * L->w;
    for (size_t i = 0; i < n; i++) {
        const size_t g = at + i, s = g / per, q = g % per;
        size_t dst = g;
        if (L->layout == MP_NPY_LAYOUT_NHWC) { /* q = (y * W + x) * C + c */
            const size_t ch = q % (size_t)L->c, pix = q / (size_t)L->c;
            dst = s * per + ch * hw + pix;
        }
        L->images[dst] = (float)v[i];
    }
    return MP_OK;
}

mp_status mp_dataset_load_npy(const char *images_path, const char *labels_path, const mp_npy_opts *o,
                              mp_dataset *out) {
    memset(out, 0, sizeof *out);
    const mp_npy_opts opts = o ? *o : (mp_npy_opts){0};
    if (opts.layout != MP_NPY_LAYOUT_AUTO && opts.layout != MP_NPY_LAYOUT_NCHW && opts.layout != MP_NPY_LAYOUT_NHWC)
        return mp_error(MP_ERR_INVALID_ARG, "%s: unknown layout %d (auto, NCHW or NHWC)", images_path, (int)opts.layout);
    if (opts.classes < 0 || opts.classes > MP_DATASET_MAX_CLASSES)
        return mp_error(MP_ERR_INVALID_ARG, "%s: classes %d out of range [0, %d]", labels_path, opts.classes,
                        MP_DATASET_MAX_CLASSES);
    npy_load L = {.path = labels_path, .layout = opts.layout, .classes = opts.classes};
    mp_npy_header lh, ih;
    mp_status s = mp_npy_read(labels_path, &lh, labels_begin, labels_sink, &L);
    if (s == MP_OK) {
        L.expect_n = L.n;
        L.path = images_path;
        L.labels_path = labels_path;
        s = mp_npy_read(images_path, &ih, images_begin, images_sink, &L);
    }
    if (s == MP_OK && ih.dtype == MP_NPY_U8) {
        const size_t total = (size_t)L.n * L.c * L.h * L.w;
        for (size_t k = 0; k < total; k++) L.images[k] = L.images[k] / 255.0f; /* exact bytes, as the IDX reader */
    }
    if (s != MP_OK) {
        free(L.images);
        free(L.labels);
        return s;
    }
    *out = (mp_dataset){.n = L.n, .c = L.c, .h = L.h, .w = L.w, .images = L.images, .labels = L.labels,
                        .classes = opts.classes > 0 ? opts.classes : L.max_label + 1};
    mp_dataset_set_source(out, "%s", images_path);
    if (ih.dtype == MP_NPY_F32) s = mp_dataset_check_finite(out);
    if (s != MP_OK) mp_dataset_free(out);
    return s;
}
