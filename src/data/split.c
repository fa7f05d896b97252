/* split.c — a held-out split by fraction that needs no randomness: sample i
 * is held out when floor((i + 1) f) > floor(i f), i.e. every 1/f-th sample,
 * spread evenly over the whole set (a set stored class by class still gives
 * a held-out part with every class), floor(n f) samples in all. Both parts
 * keep the original order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"

bool mp_split_held_out(int i, double fraction) {
    return floor((double)(i + 1) * fraction) > floor((double)i * fraction);
}

int mp_split_count(int n, double fraction) { return (int)floor((double)n * fraction); }

mp_status mp_dataset_split(const mp_dataset *d, double fraction, mp_dataset *train, mp_dataset *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (!d->images)
        return mp_error(MP_ERR_INVALID_ARG, "%s: a dataset decoded per batch is split when it is opened", d->source);
    if (!(fraction > 0 && fraction < 1))
        return mp_error(MP_ERR_INVALID_ARG, "--val-fraction %g must lie in (0, 1)", fraction);
    const int nv = mp_split_count(d->n, fraction), nt = d->n - nv;
    if (nv < 1 || nt < 1)
        return mp_error(MP_ERR_INVALID_ARG, "%s: --val-fraction %g of %d samples leaves %d for training and %d held "
                        "out: each part needs at least one", d->source, fraction, d->n, nt, nv);
    const size_t per = (size_t)d->c * d->h * d->w;
    mp_dataset *parts[2] = {train, val};
    const int counts[2] = {nt, nv};
    for (int k = 0; k < 2; k++) {
        mp_dataset *p = parts[k];
        *p = (mp_dataset){.n = counts[k], .c = d->c, .h = d->h, .w = d->w, .classes = d->classes};
        p->images = malloc((size_t)counts[k] * per * sizeof(float));
        p->labels = malloc((size_t)counts[k] * sizeof(int32_t));
        if (!p->images || !p->labels) {
            mp_dataset_free(train);
            mp_dataset_free(val);
            return mp_error(MP_ERR_NOMEM, "%s: out of memory splitting off %d held-out samples", d->source, nv);
        }
    }
    int at[2] = {0, 0};
    for (int i = 0; i < d->n; i++) {
        const int k = mp_split_held_out(i, fraction);
        memcpy(parts[k]->images + (size_t)at[k] * per, d->images + (size_t)i * per, per * sizeof(float));
        parts[k]->labels[at[k]++] = d->labels[i];
    }
    train->names = mp_class_names_retain(d->names);
    val->names = mp_class_names_retain(d->names);
    mp_dataset_set_source(train, "%s [train: %d of %d, --val-fraction %g held out]", d->source, nt, d->n, fraction);
    mp_dataset_set_source(val, "%s [held out: %d of %d, --val-fraction %g]", d->source, nv, d->n, fraction);
    return MP_OK;
}
