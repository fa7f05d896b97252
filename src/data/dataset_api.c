/* dataset_api.c — the public datasets (mixprec/data.h): heap objects over the
 * fill-in-place loaders of dataset.h and datasets from memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "data/dataset.h"
#include "data/folder.h"

/* A heap copy of a filled dataset (which is emptied), or an error. */
static mp_status box(mp_status s, mp_dataset *filled, mp_dataset **out) {
    *out = NULL;
    if (s != MP_OK) return s;
    mp_dataset *d = malloc(sizeof *d);
    if (!d) {
        mp_dataset_free(filled);
        return mp_error(MP_ERR_NOMEM, "dataset: out of memory");
    }
    *d = *filled;
    *out = d;
    return MP_OK;
}

mp_status mp_dataset_open_idx(const char *images_path, const char *labels_path, mp_dataset **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "dataset: no output pointer");
    if (!images_path || !labels_path)
        return mp_error(MP_ERR_INVALID_ARG, "IDX dataset: null %s path", !images_path ? "images" : "labels");
    mp_dataset d = {0};
    return box(mp_dataset_load_idx(images_path, labels_path, &d), &d, out);
}

mp_status mp_dataset_open_fashion_mnist(const char *dir, bool train, mp_dataset **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "dataset: no output pointer");
    mp_dataset d = {0};
    return box(mp_dataset_load_fashion_mnist(dir ? dir : MP_FASHION_MNIST_DIR, train, &d), &d, out);
}

mp_status mp_dataset_open_npy(const char *images_path, const char *labels_path, const mp_npy_opts *o,
                              mp_dataset **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "dataset: no output pointer");
    if (!images_path || !labels_path)
        return mp_error(MP_ERR_INVALID_ARG, "npy dataset: null %s path", !images_path ? "images" : "labels");
    mp_dataset d = {0};
    return box(mp_dataset_load_npy(images_path, labels_path, o, &d), &d, out);
}

mp_status mp_dataset_open_cifar10(const char *dir, bool train, mp_dataset **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "dataset: no output pointer");
    if (!dir) return mp_error(MP_ERR_INVALID_ARG, "CIFAR-10 dataset: null directory");
    mp_dataset d = {0};
    return box(mp_dataset_load_cifar10(dir, train, &d), &d, out);
}

mp_status mp_dataset_create_synthetic(int n, int c, int h, int w, int classes, uint64_t seed, mp_dataset **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "dataset: no output pointer");
    mp_dataset d = {0};
    return box(mp_dataset_synthetic(n, c, h, w, classes, seed, &d), &d, out);
}

mp_status mp_dataset_create(int n, int c, int h, int w, int classes, const float *images, const int32_t *labels,
                            const char *name, mp_dataset **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "dataset: no output pointer");
    *out = NULL;
    const char *nm = name ? name : "dataset";
    if (n < 1 || c < 1 || h < 1 || w < 1 || classes < 1 || classes > MP_DATASET_MAX_CLASSES || !images || !labels)
        return mp_error(MP_ERR_INVALID_ARG, "%s: %d samples of %dx%dx%d, %d classes (all >= 1, classes <= %d, with "
                        "image and label arrays)", nm, n, c, h, w, classes, MP_DATASET_MAX_CLASSES);
    const int64_t per = (int64_t)c * h * w;
    if (per > ((int64_t)1 << 30) / n) return mp_error(MP_ERR_INVALID_ARG, "%s: too large", nm);
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return mp_error(MP_ERR_INVALID_ARG, "%s: label %d of sample %d is outside [0, %d)", nm, (int)labels[i], i,
                            classes);
    MP_TRY(mp_host_mem_check((size_t)(per * n) * sizeof(float), NULL, "a copy of the %d samples of %s (%dx%dx%d each)",
                             n, nm, c, h, w));
    mp_dataset d = {.n = n, .c = c, .h = h, .w = w, .classes = classes};
    d.images = malloc((size_t)(per * n) * sizeof(float));
    d.labels = malloc((size_t)n * sizeof(int32_t));
    if (!d.images || !d.labels) {
        mp_dataset_free(&d);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", nm);
    }
    memcpy(d.images, images, (size_t)(per * n) * sizeof(float));
    memcpy(d.labels, labels, (size_t)n * sizeof(int32_t));
    mp_dataset_set_source(&d, "%s", nm);
    mp_status s = mp_dataset_check_finite(&d);
    if (s != MP_OK) mp_dataset_free(&d);
    return box(s, &d, out);
}

mp_status mp_dataset_create_slice(const mp_dataset *src, int start, int n, mp_dataset **out) {
    if (!out || !src) return mp_error(MP_ERR_INVALID_ARG, "dataset: null dataset or output pointer");
    mp_dataset d = {0};
    return box(mp_dataset_slice(src, start, n, &d), &d, out);
}

void mp_dataset_destroy(mp_dataset *d) {
    if (!d) return;
    mp_dataset_free(d);
    free(d);
}

void mp_dataset_describe(const mp_dataset *d, mp_dataset_info *out) {
    if (!out) return;
    if (!d) {
        *out = (mp_dataset_info){0};
        return;
    }
    *out = (mp_dataset_info){.n = d->n, .c = d->c, .h = d->h, .w = d->w, .classes = d->classes, .source = d->source,
                             .lazy = d->images == NULL && d->src != NULL, .skipped = d->skipped};
}

const char *mp_dataset_class_name(const mp_dataset *d, int k) {
    if (!d || !d->names || k < 0 || k >= d->names->n) return NULL;
    return d->names->names[k];
}

mp_status mp_dataset_open_folder(const char *dir, const mp_folder_opts *o, mp_dataset **train, mp_dataset **val) {
    if (!dir || !train || !val) return mp_error(MP_ERR_INVALID_ARG, "folder dataset: null folder or output pointer");
    *train = *val = NULL;
    mp_dataset t = {0}, v = {0};
    MP_TRY(mp_dataset_load_folder(dir, o, &t, &v));
    mp_status s = box(MP_OK, &t, train);
    if (s != MP_OK) {
        mp_dataset_free(&v);
        return s;
    }
    s = box(MP_OK, &v, val);
    if (s != MP_OK) {
        mp_dataset_destroy(*train);
        *train = NULL;
    }
    return s;
}
