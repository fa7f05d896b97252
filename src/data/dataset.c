/* dataset.c — dataset lifetime, finite check, per-channel statistics,
 * subsets, and the small helpers the file loaders share. */
#include "data/dataset.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/host_mem.h"

void mp_sample_source_retain(mp_sample_source *s) {
    if (s) __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void mp_sample_source_release(mp_sample_source *s) {
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) s->destroy(s);
}

mp_class_names *mp_class_names_retain(mp_class_names *c) {
    if (c) __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void mp_class_names_release(mp_class_names *c) {
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    for (int i = 0; i < c->n; i++) free(c->names[i]);
    free(c->names);
    free(c);
}

void mp_dataset_free(mp_dataset *d) {
    if (!d) return;
    free(d->images);
    free(d->labels);
    mp_sample_source_release(d->src);
    mp_class_names_release(d->names);
    memset(d, 0, sizeof *d);
}

void mp_dataset_set_source(mp_dataset *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(d->source, sizeof d->source, fmt, ap);
    va_end(ap);
    if (len >= (int)sizeof d->source) /* mark the cut */
        memcpy(d->source + sizeof d->source - 4, "...", 4);
}

mp_status mp_dataset_set_classes(mp_dataset *d, const char *path) {
    int32_t max = -1;
    for (int i = 0; i < d->n; i++) {
        int32_t l = d->labels[i];
        if (l < 0 || l >= MP_DATASET_MAX_CLASSES)
            return mp_error(MP_ERR_FORMAT, "%s: label %d of sample %d is out of range [0, %d)", path,
                            (int)l, i, MP_DATASET_MAX_CLASSES);
        if (l > max) max = l;
    }
    d->classes = (int)max + 1;
    return MP_OK;
}

mp_status mp_dataset_check_labels(const mp_dataset *d, int classes, const char *path) {
    for (int i = 0; i < d->n; i++)
        if (d->labels[i] < 0 || d->labels[i] >= classes)
            return mp_error(MP_ERR_FORMAT, "%s: label %d of sample %d is outside the dataset's %d classes [0, %d)", path,
                            (int)d->labels[i], i, classes, classes);
    return MP_OK;
}

mp_status mp_dataset_check_compatible(const mp_dataset *train, const mp_dataset *test) {
    if (!train || !test)
        return mp_error(MP_ERR_INVALID_ARG, "check_compatible: no %s set given", !train ? "training" : "test");
    if (test->c != train->c || test->h != train->h || test->w != train->w)
        return mp_error(MP_ERR_SHAPE,
                        "the test set %s has samples of %dx%dx%d but the training set %s has %dx%dx%d: both must "
                        "have one shape",
                        test->source, test->c, test->h, test->w, train->source, train->c, train->h, train->w);
    for (int i = 0; i < test->n; i++)
        if (test->labels[i] < 0 || test->labels[i] >= train->classes)
            return mp_error(MP_ERR_FORMAT,
                            "the test set %s: label %d of sample %d is outside the training set's %d classes [0, %d) "
                            "(%s)",
                            test->source, (int)test->labels[i], i, train->classes, train->classes, train->source);
    return MP_OK;
}

mp_status mp_data_check_file(const char *path, const char *hint) {
    struct stat st;
    const char *sep = hint ? " " : "", *h = hint ? hint : "";
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return mp_error(MP_ERR_IO, "%s: not found%s%s", path, sep, h);
        return mp_error(MP_ERR_IO, "%s: cannot access: %s%s%s", path, strerror(errno), sep, h);
    }
    if (S_ISDIR(st.st_mode)) return mp_error(MP_ERR_IO, "%s: is a directory, expected a file", path);
    if (!S_ISREG(st.st_mode)) return mp_error(MP_ERR_IO, "%s: not a regular file", path);
    return MP_OK;
}

mp_status mp_dataset_check_finite(const mp_dataset *d) {
    if (!d->images) return MP_OK; /* decoded images: bytes / 255 */
    size_t per = (size_t)d->c * d->h * d->w;
    for (int i = 0; i < d->n; i++) {
        const float *x = d->images + (size_t)i * per; // (c, h, w)
        for (size_t k = 0; k < per; k++) {
            if (isfinite(x[k])) continue;
            int ch = (int)(k / ((size_t)d->h * d->w)), rest = (int)(k % ((size_t)d->h * d->w));
            return mp_error(MP_ERR_NONFINITE,
                            "%s: sample %d has a non-finite pixel (%s at channel %d, row %d, column %d)",
                            d->source, i, isnan(x[k]) ? "NaN" : (x[k] > 0 ? "+inf" : "-inf"), ch,
                            rest / d->w, rest % d->w);
        }
    }
    return MP_OK;
}

/* A lazy dataset's statistics from at most LAZY_STATS_SAMPLES evenly spaced
 * samples (decoding all of a large folder would take as long as an epoch);
 * samples that fail to decode are left out. */
#define LAZY_STATS_SAMPLES 2048
static void lazy_channel_stats(const mp_dataset *d, float *mean, float *std) {
    const size_t hw = (size_t)d->h * d->w;
    const int k = d->n < LAZY_STATS_SAMPLES ? d->n : LAZY_STATS_SAMPLES;
    double *s1 = calloc((size_t)d->c, sizeof *s1), *s2 = calloc((size_t)d->c, sizeof *s2);
    float *x = malloc((size_t)d->c * hw * sizeof *x);
    double count = 0;
    for (int j = 0; s1 && s2 && x && j < k; j++) {
        if (mp_dataset_fetch(d, (int)((long long)j * d->n / k), NULL, x) != MP_OK) continue;
        for (int ch = 0; ch < d->c; ch++)
            for (size_t q = 0; q < hw; q++) s1[ch] += x[ch * hw + q], s2[ch] += (double)x[ch * hw + q] * x[ch * hw + q];
        count += (double)hw;
    }
    for (int ch = 0; ch < d->c; ch++) {
        const double m = count > 0 ? s1[ch] / count : 0, v = count > 0 ? s2[ch] / count - m * m : 0;
        mean[ch] = (float)m;
        std[ch] = (float)sqrt(v > 0 ? v : 0);
    }
    free(s1), free(s2), free(x);
}

void mp_dataset_channel_stats(const mp_dataset *d, float *mean, float *std) {
    if (!d || !mean || !std) return;
    if (!d->images && d->src) {
        lazy_channel_stats(d, mean, std);
        return;
    }
    size_t hw = (size_t)d->h * d->w;
    double count = (double)d->n * (double)hw;
    for (int ch = 0; ch < d->c; ch++) {
        double s = 0;
        for (int i = 0; i < d->n; i++) {
            const float *x = d->images + ((size_t)i * d->c + ch) * hw; // (h, w)
            for (size_t k = 0; k < hw; k++) s += x[k];
        }
        double m = count > 0 ? s / count : 0;
        double v = 0;
        for (int i = 0; i < d->n; i++) {
            const float *x = d->images + ((size_t)i * d->c + ch) * hw;
            for (size_t k = 0; k < hw; k++) v += (x[k] - m) * (x[k] - m);
        }
        mean[ch] = (float)m;
        std[ch] = count > 0 ? (float)sqrt(v / count) : 0.0f;
    }
}

mp_status mp_dataset_slice(const mp_dataset *d, int start, int n, mp_dataset *out) {
    memset(out, 0, sizeof *out);
    if (start < 0 || n < 1 || n > d->n - start)
        return mp_error(MP_ERR_INVALID_ARG, "%s: samples [%d, %lld) requested, the dataset has %d",
                        d->source, start, (long long)start + n, d->n);
    size_t per = (size_t)d->c * d->h * d->w;
    if (d->images)
        MP_TRY(mp_host_mem_check((size_t)n * per * sizeof(float), NULL, "a copy of %d samples of %s (%dx%dx%d each)", n,
                                 d->source, d->c, d->h, d->w));
    out->images = d->images ? malloc((size_t)n * per * sizeof(float)) : NULL;
    out->labels = malloc((size_t)n * sizeof(int32_t));
    if ((d->images && !out->images) || !out->labels) {
        mp_dataset_free(out);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory for a subset of %d samples", d->source, n);
    }
    if (d->images) memcpy(out->images, d->images + (size_t)start * per, (size_t)n * per * sizeof(float));
    memcpy(out->labels, d->labels + start, (size_t)n * sizeof(int32_t));
    if (d->src) {
        mp_sample_source_retain(d->src);
        out->src = d->src;
        out->src_offset = d->src_offset + start;
    }
    out->names = mp_class_names_retain(d->names);
    out->n = n;
    out->c = d->c;
    out->h = d->h;
    out->w = d->w;
    out->classes = d->classes;
    out->ignored_files = d->ignored_files;
    if (start == 0) mp_dataset_set_source(out, "%s [first %d]", d->source, n);
    else mp_dataset_set_source(out, "%s [%d..%d]", d->source, start, start + n - 1);
    return MP_OK;
}

mp_status mp_dataset_subset(const mp_dataset *d, int n, mp_dataset *out) {
    return mp_dataset_slice(d, 0, n, out);
}
