/* loader.c — the batch loader: one worker thread fills a ring of LOADER_SLOTS
 * batch buffers in epoch order while the caller consumes them; each batch's
 * samples are prepared on a pool of `workers` threads (decode_pool.h), the
 * loader thread among them, each sample written to its own place, so the
 * batches do not depend on the number of threads.
 *
 * A sample comes from memory, or (datasets decoded per batch) from the
 * dataset's sample source, which decodes the file; random-resized-crop is
 * drawn from its own RNG stream keyed on (seed, epoch, sample) and applied
 * to the full decoded image (per batch) or to the image in memory; then the
 * crop/flip and normalization below.
 *
 * Protocol (all counters under mu): the worker may fill batch `produced` when
 * produced - released < LOADER_SLOTS, i.e. its slot is not the one the caller
 * still reads. mp_loader_next releases the previous batch, waits for
 * produced > consumed and hands out slot consumed % LOADER_SLOTS, or the
 * error that filling it met. Restarting an epoch bumps `gen`, waits for a
 * fill in progress to finish (its result is dropped) and resets the
 * counters. */
#include "data/loader.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/host_mem.h"
#include "core/rng.h"
#include "data/decode_pool.h"
#include "data/image_resize.h"
#include "data/normalize.h"

#define LOADER_SLOTS 3
#define LOADER_REPLACE_TRIES 16 /* samples after an undecodable one tried in its place */
#define LOADER_KEY_PERM 0x5045524D5554ull
#define LOADER_KEY_AUG 0x4155474D454Eull
#define LOADER_KEY_RRC 0x5252432D4352ull

struct mp_loader {
    const mp_dataset *d;
    mp_loader_opts o;
    float *mean, *std; // (C) each, NULL = none
    size_t per;        /* floats per sample */
    int batches;
    int shards;        // o.shards, at least 1
    int32_t *perm;     // (N) sample order of the current epoch
    float *img[LOADER_SLOTS];   // (batch, C, H, W) each
    int32_t *lab[LOADER_SLOTS]; // (batch) each
    int count[LOADER_SLOTS];    /* valid samples per slot */
    mp_status status[LOADER_SLOTS]; /* what filling the slot met */
    char *message[LOADER_SLOTS];    /* its error message */
    mp_pool *pool;     /* the threads preparing samples */
    float **tmp;       /* (workers) per-worker (C, H, W) buffers: decoded or cropped samples */
    double wait_s;     /* the caller's waits this epoch */
    unsigned char *bad; /* (N) samples known not to decode (atomic), when bad ones are replaced or left out */
    int bad_images;    /* such samples met at their own place in the batches handed out this epoch (atomic) */
    int slot_bad[LOADER_SLOTS]; /* those of the batch in each slot (atomic while it is filled) */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int epoch;
    uint64_t gen;
    bool active, stop, busy;
    int produced, consumed, released;
};

/* The sample before crop/flip: from memory, decoded, and/or a random-resized crop. */
static mp_status loader_source(const mp_loader *l, int idx, int worker, const float **src) {
    const mp_dataset *d = l->d;
    mp_rng r;
    if (l->o.random_resized_crop)
        mp_rng_seed(&r, mp_hash64(mp_hash64(l->o.seed ^ LOADER_KEY_RRC, (uint64_t)l->epoch), (uint64_t)idx));
    mp_rng *rrc = l->o.random_resized_crop ? &r : NULL;
    if (!d->images) {
        MP_TRY(mp_dataset_fetch(d, idx, rrc, l->tmp[worker]));
        *src = l->tmp[worker];
        return MP_OK;
    }
    *src = d->images + (size_t)idx * l->per; // (C, H, W)
    if (!rrc) return MP_OK;
    MP_TRY(mp_resample_bilinear(*src, d->c, d->h, d->w, mp_box_random_resized(rrc, d->h, d->w), l->tmp[worker], d->h,
                                d->w));
    *src = l->tmp[worker];
    return MP_OK;
}

/* One sample: crop (from a zero-padded image) and flip chosen by an RNG
 * keyed on (seed, epoch, sample index), then per-channel normalization. */
static mp_status loader_sample(const mp_loader *l, int idx, int worker, float *dst) {
    const mp_dataset *d = l->d;
    const float *src;
    MP_TRY(loader_source(l, idx, worker, &src));
    int C = d->c, H = d->h, W = d->w, P = l->o.crop_pad;
    int dy = 0, dx = 0;
    bool flip = false;
    if (P > 0 || l->o.hflip) {
        mp_rng r;
        uint64_t ekey = mp_hash64(l->o.seed ^ LOADER_KEY_AUG, (uint64_t)l->epoch);
        mp_rng_seed(&r, mp_hash64(ekey, (uint64_t)idx));
        if (P > 0) {
            dy = (int)mp_rng_below(&r, 2 * (uint64_t)P + 1) - P;
            dx = (int)mp_rng_below(&r, 2 * (uint64_t)P + 1) - P;
        }
        if (l->o.hflip) flip = mp_rng_below(&r, 2) != 0;
    }
    if (dy == 0 && dx == 0 && !flip && !l->mean && !l->std) {
        memcpy(dst, src, l->per * sizeof(float));
        return MP_OK;
    }
    /* out[y][x] = in[y + dy][x' + dx], x' = flip ? W-1-x : x; 0 outside;
     * then (v - mean) / std. Valid columns: no flip x + dx in [0, W);
     * flip W-1-x+dx in [0, W). */
    int x0 = flip ? (dx > 0 ? dx : 0) : (dx < 0 ? -dx : 0);
    int x1 = flip ? (dx < 0 ? W + dx : W) : (dx > 0 ? W - dx : W);
    for (int c = 0; c < C; c++) {
        float m = l->mean ? l->mean[c] : 0.0f, sd = l->std ? l->std[c] : 1.0f;
        float zero = (0.0f - m) / sd;
        for (int y = 0; y < H; y++) {
            float *o = dst + ((size_t)c * H + y) * W;
            int sy = y + dy;
            if (sy < 0 || sy >= H) {
                for (int x = 0; x < W; x++) o[x] = zero;
                continue;
            }
            const float *s = src + ((size_t)c * H + sy) * W;
            for (int x = 0; x < x0; x++) o[x] = zero;
            if (flip)
                for (int x = x0; x < x1; x++) o[x] = (s[W - 1 - x + dx] - m) / sd;
            else
                for (int x = x0; x < x1; x++) o[x] = (s[x + dx] - m) / sd;
            for (int x = x1 > x0 ? x1 : x0; x < W; x++) o[x] = zero;
        }
    }
    return MP_OK;
}

typedef struct {
    mp_loader *l;
    int start, slot;
} fill_job;

/* Under MP_BAD_IMAGES_SKIP: an undecodable sample is left out of its batch
 * (evaluation, one shard without drop_last), not replaced. */
static bool leaves_out_bad(const mp_loader *l) { return !l->o.drop_last && l->shards == 1; }

/* Sample idx into dst: true when it does not decode (MP_ERR_FORMAT, now or
 * in an earlier epoch: l->bad remembers; why, if not NULL, receives the
 * decoder's message), else false with *s its status. */
static bool undecodable(mp_loader *l, int idx, int worker, float *dst, mp_status *s, char *why, size_t why_len) {
    *s = MP_OK;
    if (__atomic_load_n(&l->bad[idx], __ATOMIC_RELAXED)) {
        if (why) snprintf(why, why_len, "%s: sample %d did not decode in an earlier batch", l->d->source, idx);
        return true;
    }
    *s = loader_sample(l, idx, worker, dst);
    if (*s != MP_ERR_FORMAT) return false;
    __atomic_store_n(&l->bad[idx], 1, __ATOMIC_RELAXED);
    if (why) snprintf(why, why_len, "%s", mp_last_error());
    mp_clear_error();
    *s = MP_OK;
    return true;
}

/* Sample j of a batch; position start + j of the epoch's order (past the
 * end: the epoch's first samples again). Under MP_BAD_IMAGES_SKIP a sample
 * that does not decode is counted (not where it only pads the last global
 * batch) and, where batches must keep their size (drop_last, or shards that
 * must yield the same batches), replaced by the next one in the order that
 * decodes, image and label; else left out (label -1 here; loader_fill
 * closes the gap). The same for any number of threads. */
static mp_status fill_one(void *arg, int j, int worker) {
    const fill_job *f = arg;
    mp_loader *l = f->l;
    const int n = l->d->n, pos = f->start + j;
    float *dst = l->img[f->slot] + (size_t)j * l->per;
    int32_t *label = &l->lab[f->slot][j];
    int idx = l->perm[pos % n];
    mp_status s;
    if (!l->bad) {
        *label = l->d->labels[idx];
        return loader_sample(l, idx, worker, dst);
    }
    char why[512];
    if (!undecodable(l, idx, worker, dst, &s, why, sizeof why)) {
        *label = l->d->labels[idx];
        return s;
    }
    if (pos < n) __atomic_add_fetch(&l->slot_bad[f->slot], 1, __ATOMIC_RELAXED);
    *label = -1;
    if (leaves_out_bad(l)) return MP_OK;
    for (int t = 1; t <= LOADER_REPLACE_TRIES && t < n; t++) {
        idx = l->perm[(pos + t) % n];
        if (!undecodable(l, idx, worker, dst, &s, NULL, 0)) {
            *label = l->d->labels[idx];
            return s;
        }
    }
    return mp_error(MP_ERR_FORMAT, "%s; the %d samples after it in the epoch's order do not decode either: "
                    "--bad-images skip replaces a bad image, not a folder that cannot be read", why,
                    LOADER_REPLACE_TRIES < n - 1 ? LOADER_REPLACE_TRIES : n - 1);
}

/* Batch b of this shard: its part of global batch b. Without drop_last the
 * last global batch's r samples are shared evenly, ceil(r / shards) each,
 * topped up with the epoch's first samples (as PyTorch's DistributedSampler
 * pads), so every shard has the same batches with the same counts. */
static void loader_fill(mp_loader *l, int b, int slot) {
    const int B = l->o.batch, S = l->shards, rest = l->d->n - b * S * B;
    int start = (b * S + l->o.shard) * B, k = B;
    if (rest < S * B) { /* the last, short global batch */
        k = rest < B ? rest : B;
        if (S > 1) k = (rest + S - 1) / S, start = b * S * B + l->o.shard * k;
    }
    fill_job job = {.l = l, .start = start, .slot = slot};
    l->slot_bad[slot] = 0;
    l->status[slot] = mp_pool_run(l->pool, k, fill_one, &job);
    if (l->status[slot] != MP_OK) snprintf(l->message[slot], 1024, "%s", mp_last_error());
    if (l->bad && leaves_out_bad(l)) { /* undecodable samples left out: the rest moved up */
        int kept = 0;
        for (int j = 0; j < k; j++) {
            if (l->lab[slot][j] < 0) continue;
            if (kept != j) {
                memcpy(l->img[slot] + (size_t)kept * l->per, l->img[slot] + (size_t)j * l->per, l->per * sizeof(float));
                l->lab[slot][kept] = l->lab[slot][j];
            }
            kept++;
        }
        k = kept;
    }
    if (k < B) {
        memset(l->img[slot] + (size_t)k * l->per, 0, (size_t)(B - k) * l->per * sizeof(float));
        memset(l->lab[slot] + k, 0, (size_t)(B - k) * sizeof(int32_t));
    }
    l->count[slot] = k;
}

static void *loader_worker(void *arg) {
    mp_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (!l->active || l->produced >= l->batches || l->produced - l->released >= LOADER_SLOTS) {
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        int b = l->produced;
        uint64_t gen = l->gen;
        l->busy = true;
        pthread_mutex_unlock(&l->mu);
        loader_fill(l, b, b % LOADER_SLOTS);
        pthread_mutex_lock(&l->mu);
        l->busy = false;
        if (gen == l->gen) l->produced++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void loader_free(mp_loader *l) {
    mp_pool_destroy(l->pool);
    for (int w = 0; l->tmp && w < l->o.workers; w++) free(l->tmp[w]);
    free(l->tmp);
    for (int s = 0; s < LOADER_SLOTS; s++) free(l->message[s]);
    free(l->mean);
    free(l->std);
    free(l->perm);
    free(l->bad);
    for (int s = 0; s < LOADER_SLOTS; s++) {
        free(l->img[s]);
        free(l->lab[s]);
    }
    free(l);
}

mp_status mp_loader_create(const mp_dataset *d, mp_loader_opts o, mp_loader **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "loader: null output (%s)", d ? d->source : "no dataset");
    *out = NULL;
    if (!d) return mp_error(MP_ERR_INVALID_ARG, "loader: null dataset");
    if (d->n < 1 || (!d->images && !d->src) || !d->labels)
        return mp_error(MP_ERR_INVALID_ARG, "loader: the dataset %s is empty", d->source);
    if (o.batch <= 0) return mp_error(MP_ERR_INVALID_ARG, "loader: batch %d must be positive (%s)", o.batch, d->source);
    if (o.batch > d->n)
        return mp_error(MP_ERR_INVALID_ARG, "loader: batch %d is larger than the dataset (%d samples in %s)", o.batch,
                        d->n, d->source);
    /* shards 0 means one shard: shard 0 */
    if (o.shards < 0 || o.shard < 0 || o.shard >= (o.shards > 0 ? o.shards : 1))
        return mp_error(MP_ERR_INVALID_ARG, "loader: shard %d of %d does not exist: it must lie in [0, %d) (%s)",
                        o.shard, o.shards, o.shards > 0 ? o.shards : 1, d->source);
    if ((long long)o.batch * (o.shards > 1 ? o.shards : 1) > d->n)
        return mp_error(MP_ERR_INVALID_ARG, "loader: %d ranks x batch %d is larger than the dataset (%d samples in %s)",
                        o.shards, o.batch, d->n, d->source);
    if (o.crop_pad < 0 || o.crop_pad > d->h || o.crop_pad > d->w)
        return mp_error(MP_ERR_INVALID_ARG, "loader: crop_pad %d must lie in [0, %d] for %dx%d images (%s)",
                        o.crop_pad, d->h < d->w ? d->h : d->w, d->h, d->w, d->source);
    MP_TRY(mp_normalization_check(o.mean, o.std, d->c, "loader"));
    if (o.workers < 0 || o.workers > 1024)
        return mp_error(MP_ERR_INVALID_ARG, "loader: %d workers is out of range [0, 1024] (%s)", o.workers, d->source);
    if (!o.workers) o.workers = !d->images || o.random_resized_crop ? mp_online_cpus() : 1;
    const size_t sample_bytes = (size_t)d->c * d->h * d->w * sizeof(float);
    MP_TRY(mp_host_mem_check(((size_t)LOADER_SLOTS * o.batch + (size_t)o.workers) * sample_bytes,
                             "try a smaller batch or sample size",
                             "the loader's %d batches of %d samples of %dx%dx%d, plus one per worker (%d), of %s",
                             LOADER_SLOTS, o.batch, d->c, d->h, d->w, o.workers, d->source));
    mp_loader *l = calloc(1, sizeof *l);
    if (!l) return mp_error(MP_ERR_NOMEM, "loader: out of memory");
    l->d = d;
    l->o = o;
    l->per = (size_t)d->c * d->h * d->w;
    l->shards = o.shards > 0 ? o.shards : 1;
    const int global = o.batch * l->shards;
    l->batches = o.drop_last ? d->n / global : (d->n + global - 1) / global;
    bool ok = (l->perm = malloc((size_t)d->n * sizeof(int32_t))) != NULL;
    if (!d->images && d->src && d->src->replace_bad) ok = ok && (l->bad = calloc((size_t)d->n, 1)) != NULL;
    if (o.mean) ok = ok && (l->mean = malloc((size_t)d->c * sizeof(float))) != NULL;
    if (o.std) ok = ok && (l->std = malloc((size_t)d->c * sizeof(float))) != NULL;
    for (int s = 0; s < LOADER_SLOTS && ok; s++) {
        ok = (l->img[s] = malloc((size_t)o.batch * l->per * sizeof(float))) != NULL &&
             (l->lab[s] = malloc((size_t)o.batch * sizeof(int32_t))) != NULL &&
             (l->message[s] = calloc(1024, 1)) != NULL;
    }
    ok = ok && (l->tmp = calloc((size_t)o.workers, sizeof *l->tmp)) != NULL;
    for (int w = 0; w < o.workers && ok; w++) ok = (l->tmp[w] = malloc(l->per * sizeof(float))) != NULL;
    if (!ok) {
        loader_free(l);
        return mp_error(MP_ERR_NOMEM, "loader: out of memory for %d x %d batches of %d samples (%s)", LOADER_SLOTS,
                        o.batch, o.batch, d->source);
    }
    if (mp_pool_create(o.workers, &l->pool) != MP_OK) {
        mp_status ps = mp_error(MP_ERR_INTERNAL, "loader: %s (%s)", mp_last_error(), d->source);
        loader_free(l);
        return ps;
    }
    if (o.mean) memcpy(l->mean, o.mean, (size_t)d->c * sizeof(float));
    if (o.std) memcpy(l->std, o.std, (size_t)d->c * sizeof(float));
    l->o.mean = l->o.std = NULL; /* the copies above are used */
    if (pthread_mutex_init(&l->mu, NULL) != 0) {
        loader_free(l);
        return mp_error(MP_ERR_INTERNAL, "loader: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&l->cv, NULL) != 0) {
        pthread_mutex_destroy(&l->mu);
        loader_free(l);
        return mp_error(MP_ERR_INTERNAL, "loader: pthread_cond_init failed");
    }
    if (pthread_create(&l->thread, NULL, loader_worker, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        loader_free(l);
        return mp_error(MP_ERR_INTERNAL, "loader: cannot start the loader thread");
    }
    *out = l;
    return MP_OK;
}

int mp_loader_batches(const mp_loader *l) { return l ? l->batches : 0; }

int mp_loader_bad_images(const mp_loader *l) { return l ? __atomic_load_n(&l->bad_images, __ATOMIC_RELAXED) : 0; }

mp_status mp_loader_start_epoch(mp_loader *l, int epoch) {
    if (!l) return mp_error(MP_ERR_INVALID_ARG, "loader: null loader");
    if (epoch < 0) return mp_error(MP_ERR_INVALID_ARG, "loader: epoch %d must be >= 0", epoch);
    pthread_mutex_lock(&l->mu);
    l->active = false;
    l->gen++;
    while (l->busy) pthread_cond_wait(&l->cv, &l->mu);
    /* The worker is idle now and stays so until active is set again. */
    int n = l->d->n;
    for (int i = 0; i < n; i++) l->perm[i] = i;
    if (l->o.shuffle) {
        mp_rng r;
        mp_rng_seed(&r, mp_hash64(l->o.seed ^ LOADER_KEY_PERM, (uint64_t)epoch));
        for (int i = n - 1; i > 0; i--) {
            int j = (int)mp_rng_below(&r, (uint64_t)i + 1);
            int32_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->epoch = epoch;
    l->produced = l->consumed = l->released = 0;
    l->wait_s = 0;
    l->bad_images = 0;
    l->active = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return MP_OK;
}

mp_status mp_loader_next(mp_loader *l, const float **images, const int32_t **labels, int *n) {
    if (!l || !images || !labels || !n)
        return mp_error(MP_ERR_INVALID_ARG, "loader: mp_loader_next needs a loader and places for images, labels "
                        "and n (%s is null)", !l ? "the loader" : !images ? "images" : !labels ? "labels" : "n");
    *images = NULL;
    *labels = NULL;
    *n = 0;
    pthread_mutex_lock(&l->mu);
    if (!l->active) {
        pthread_mutex_unlock(&l->mu);
        return mp_error(MP_ERR_INVALID_ARG, "loader: mp_loader_next called before mp_loader_start_epoch (%s)",
                        l->d->source);
    }
    int slot;
    do { /* a batch whose every sample was left out as undecodable is passed over: *n = 0 means the end */
        l->released = l->consumed; /* the previous batch is no longer read */
        pthread_cond_broadcast(&l->cv);
        if (l->consumed >= l->batches) {
            pthread_mutex_unlock(&l->mu);
            return MP_OK;
        }
        if (l->produced <= l->consumed) {
            const double t0 = mp_now_seconds();
            while (l->produced <= l->consumed) pthread_cond_wait(&l->cv, &l->mu);
            l->wait_s += mp_now_seconds() - t0;
        }
        slot = l->consumed % LOADER_SLOTS;
        l->consumed++;
        __atomic_add_fetch(&l->bad_images, l->slot_bad[slot], __ATOMIC_RELAXED); /* counted once handed out */
        if (l->status[slot] != MP_OK) {
            mp_status s = mp_error(l->status[slot], "%s", l->message[slot]);
            pthread_mutex_unlock(&l->mu);
            return s;
        }
    } while (l->count[slot] == 0);
    *images = l->img[slot];
    *labels = l->lab[slot];
    *n = l->count[slot];
    pthread_mutex_unlock(&l->mu);
    return MP_OK;
}

double mp_loader_wait_seconds(const mp_loader *l) {
    if (!l) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    const double w = l->wait_s;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
    return w;
}

void mp_loader_destroy(mp_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    loader_free(l);
}
