/* loader.h — batches from an mp_dataset, prepared by a background thread
 * (triple buffering) while the caller trains on the current one.
 *
 * Order and augmentation are functions of (seed, epoch, sample index) only,
 * so results never depend on thread timing. Nothing is allocated per batch.
 * The dataset must outlive the loader. */
#ifndef MP_DATA_LOADER_H
#define MP_DATA_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"

typedef struct {
    int batch;        /* samples per batch, 1..dataset size */
    bool shuffle;     /* a fresh permutation per epoch from (seed, epoch) */
    bool drop_last;   /* skip the final short batch */
    uint64_t seed;
    int crop_pad;     /* random crop after zero-padding this many pixels per side, 0 = off */
    bool hflip;       /* random horizontal flip (probability 1/2) */
    const float *mean, *std; /* per-channel normalization (x - mean) / std; NULL = none (copied) */
    /* data parallel: the epoch's order is cut into global batches of
     * batch * shards samples and this loader yields part `shard` of each
     * (0 -> one shard); every rank uses the same seed */
    int shards, shard;
} mp_loader_opts;

typedef struct mp_loader mp_loader;

mp_status mp_loader_create(const mp_dataset *d, mp_loader_opts o, mp_loader **out);
/* Batches per epoch. */
int mp_loader_batches(const mp_loader *l);
/* Begin (or restart, even mid-epoch) epoch `epoch` >= 0. */
mp_status mp_loader_start_epoch(mp_loader *l, int epoch);
/* The next batch of the epoch: images (batch, C, H, W), labels (batch).
 * *n = valid samples; a short last batch (drop_last off) is padded with zero
 * images and label 0 to the full batch length. At the end of the epoch:
 * MP_OK, *n = 0 and NULL pointers. Pointers stay valid until the next call
 * to mp_loader_next, mp_loader_start_epoch or mp_loader_destroy. */
mp_status mp_loader_next(mp_loader *l, const float **images, const int32_t **labels, int *n);
/* Stops and joins the worker (also mid-epoch) and frees everything. NULL is fine. */
void mp_loader_destroy(mp_loader *l);

#endif
