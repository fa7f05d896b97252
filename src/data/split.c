/* split.c — a held-out split by fraction f that needs no randomness and
 * tests every class: floor(n f) samples in all (fewer where the classes
 * have too few samples to spare one), each class's share
 * proportional (floor(n_c f), the rest to the classes with the largest
 * remainders, ties to the lower label; never all of a class) and evenly
 * spaced through the class in the dataset's order (the r-th of a class
 * whose quota q of n_c steps up there: floor((r + 1) q / n_c) > floor(r q /
 * n_c); q / n_c = f gives every 1/f-th). The fraction is taken as the
 * decimal it was written as: n f for 0.35 or 0.29 lands a hair below the
 * whole number it means, and counts as that number. Both parts keep the
 * original order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "data/dataset.h"

/* floor(x), with x within rounding of an integer taken as that integer */
static int decimal_floor(double x) { return (int)floor(x + 1e-14 * (fabs(x) + 1)); }

int mp_split_mark(const int32_t *labels, int n, int classes, double fraction, bool *held) {
    int *count = calloc((size_t)classes, sizeof *count), *quota = calloc((size_t)classes, sizeof *quota);
    int *seen = calloc((size_t)classes, sizeof *seen);
    if (!count || !quota || !seen) {
        free(count), free(quota), free(seen);
        mp_error(MP_ERR_NOMEM, "held-out split: out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) count[labels[i]]++;
    const int total = decimal_floor((double)n * fraction);
    int given = 0;
    for (int k = 0; k < classes; k++) given += quota[k] = decimal_floor((double)count[k] * fraction);
    /* the rest, one each, to the largest remainders n_c f - quota (a class served has a negative one) */
    while (given < total) {
        int best = -1;
        double best_rem = 0;
        for (int k = 0; k < classes; k++) {
            const double rem = (double)count[k] * fraction - quota[k];
            if (quota[k] + 1 < count[k] && rem > best_rem + 1e-12) best = k, best_rem = rem;
        }
        if (best < 0) break; /* every class left would go wholly into the held-out part */
        quota[best]++, given++;
    }
    for (int i = 0; i < n; i++) {
        const int k = labels[i];
        const int64_t r = seen[k]++, q = quota[k], c = count[k];
        held[i] = (r + 1) * q / c > r * q / c;
    }
    free(count), free(quota), free(seen);
    return given;
}

mp_status mp_dataset_split(const mp_dataset *d, double fraction, mp_dataset *train, mp_dataset *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (!d->images)
        return mp_error(MP_ERR_INVALID_ARG, "%s: a dataset decoded per batch is split when it is opened", d->source);
    if (!(fraction > 0 && fraction < 1))
        return mp_error(MP_ERR_INVALID_ARG, "--val-fraction %g must lie in (0, 1)", fraction);
    bool *held = malloc((size_t)d->n + 1);
    if (!held) return mp_error(MP_ERR_NOMEM, "%s: out of memory splitting", d->source);
    const int nv = mp_split_mark(d->labels, d->n, d->classes, fraction, held), nt = d->n - nv;
    if (nv < 0) {
        free(held);
        return MP_ERR_NOMEM;
    }
    if (nv < 1 || nt < 1) {
        free(held);
        return mp_error(MP_ERR_INVALID_ARG, "%s: --val-fraction %g of %d samples leaves %d for training and %d held "
                        "out: each part needs at least one%s", d->source, fraction, d->n, nt, nv,
                        nv < 1 && decimal_floor((double)d->n * fraction) >= 1
                            ? " (a class's last sample is never held out)" : "");
    }
    const size_t per = (size_t)d->c * d->h * d->w;
    const mp_status fits = mp_host_mem_check((size_t)d->n * per * sizeof(float), NULL,
                                             "the %d train and %d held-out samples split from %s (%dx%dx%d each)", nt,
                                             nv, d->source, d->c, d->h, d->w);
    if (fits != MP_OK) {
        free(held);
        return fits;
    }
    mp_dataset *parts[2] = {train, val};
    const int counts[2] = {nt, nv};
    for (int k = 0; k < 2; k++) {
        mp_dataset *p = parts[k];
        *p = (mp_dataset){.n = counts[k], .c = d->c, .h = d->h, .w = d->w, .classes = d->classes};
        p->images = malloc((size_t)counts[k] * per * sizeof(float));
        p->labels = malloc((size_t)counts[k] * sizeof(int32_t));
        if (!p->images || !p->labels) {
            free(held);
            mp_dataset_free(train);
            mp_dataset_free(val);
            return mp_error(MP_ERR_NOMEM, "%s: out of memory splitting off %d held-out samples", d->source, nv);
        }
    }
    int at[2] = {0, 0};
    for (int i = 0; i < d->n; i++) {
        const int k = held[i];
        memcpy(parts[k]->images + (size_t)at[k] * per, d->images + (size_t)i * per, per * sizeof(float));
        parts[k]->labels[at[k]++] = d->labels[i];
    }
    free(held);
    train->names = mp_class_names_retain(d->names);
    val->names = mp_class_names_retain(d->names);
    mp_dataset_set_source(train, "%s [train: %d of %d, --val-fraction %g held out]", d->source, nt, d->n, fraction);
    mp_dataset_set_source(val, "%s [held out: %d of %d, --val-fraction %g]", d->source, nv, d->n, fraction);
    return MP_OK;
}
