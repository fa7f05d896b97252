/* test_loader.c — the background batch loader: argument errors, every sample
 * once per epoch, deterministic shuffles, padding of the last batch,
 * normalization, crop/flip geometry, augmentation independent of batching,
 * and clean destroy mid-epoch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "data/loader.h"

/* Sample i: pixel k = i + k / 1000 (identifies the sample), label i % classes. */
static mp_dataset make_ds(int n, int c, int h, int w, int classes) {
    mp_dataset d = {.n = n, .c = c, .h = h, .w = w, .classes = classes};
    size_t per = (size_t)c * h * w;
    d.images = malloc((size_t)n * per * sizeof(float));
    d.labels = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < per; k++) d.images[i * per + k] = (float)i + (float)k / 1000.0f;
        d.labels[i] = i % classes;
    }
    mp_dataset_set_source(&d, "test-set(%d)", n);
    return d;
}

/* The sample order of one epoch (ids from pixel 0); returns the count seen. */
static int epoch_order(mp_loader *l, int epoch, int *order, int cap, int batch, int per) {
    mp_loader_start_epoch(l, epoch);
    int seen = 0, nb = 0;
    for (;;) {
        const float *x;
        const int32_t *y;
        int n;
        mp_status s = mp_loader_next(l, &x, &y, &n);
        CHECK(s == MP_OK, "%s", mp_last_error());
        if (s != MP_OK || n == 0) break;
        nb++;
        for (int j = 0; j < n && seen < cap; j++) order[seen++] = (int)x[(size_t)j * per];
        for (int j = n; j < batch; j++) {
            int nz = 0;
            for (int k = 0; k < per; k++) nz += x[(size_t)j * per + k] != 0.0f;
            CHECK(nz == 0 && y[j] == 0, "padding row %d not zero", j);
        }
    }
    CHECK(nb == mp_loader_batches(l), "batches %d vs %d", nb, mp_loader_batches(l));
    return seen;
}

static void test_errors(void) {
    mp_dataset d = make_ds(10, 1, 2, 2, 3);
    mp_loader *l = (mp_loader *)1;
    mp_status s = mp_loader_create(&d, (mp_loader_opts){.batch = 11}, &l);
    CHECK(s == MP_ERR_INVALID_ARG && l == NULL, "batch > n");
    CHECK(strstr(mp_last_error(), "batch 11 is larger than the dataset (10 samples") &&
              strstr(mp_last_error(), "test-set(10)"),
          "%s", mp_last_error());
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 0}, &l) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "batch 0"),
          "%s", mp_last_error());
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 2, .crop_pad = 3}, &l) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "crop_pad 3"),
          "%s", mp_last_error());
    float bad_std[1] = {0};
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 2, .std = bad_std}, &l) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "std[0]"),
          "%s", mp_last_error());
    /* batches beyond what the host can give (core/host_mem.h, lowered to 100 bytes here): refused, named */
    setenv("MIXPREC_HOST_MEM_LIMIT", "100", 1);
    l = (mp_loader *)1;
    CHECK_ERR(mp_loader_create(&d, (mp_loader_opts){.batch = 2, .workers = 1}, &l), MP_ERR_NOMEM,
              "out of memory for the loader's 3 batches of 2 samples of 1x2x2, plus one per worker (1), of "
              "test-set(10): asked 112 bytes (0.00 GiB), 100 bytes (0.00 GiB) available (MIXPREC_HOST_MEM_LIMIT)");
    CHECK(l == NULL, "no loader after a refusal");
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 2}, &l) == MP_OK, "%s", mp_last_error());
    const float *x;
    const int32_t *y;
    int n;
    CHECK(mp_loader_next(l, &x, &y, &n) == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "start_epoch"), "%s",
          mp_last_error());
    CHECK(mp_loader_start_epoch(l, -1) == MP_ERR_INVALID_ARG, "negative epoch");
    mp_loader_destroy(l);
    mp_loader_destroy(NULL);
    mp_dataset_free(&d);
}

static void test_order(void) {
    enum { N = 103, B = 10 };
    mp_dataset d = make_ds(N, 1, 3, 2, 7);
    int per = 6;
    mp_loader *a, *b;
    mp_loader_opts o = {.batch = B, .shuffle = true, .seed = 42};
    CHECK(mp_loader_create(&d, o, &a) == MP_OK && mp_loader_create(&d, o, &b) == MP_OK, "%s", mp_last_error());
    CHECK(mp_loader_batches(a) == 11, "batches %d", mp_loader_batches(a));
    int oa[N], ob[N], oc[N];
    for (int epoch = 0; epoch < 3; epoch++) {
        int n = epoch_order(a, epoch, oa, N, B, per);
        CHECK(n == N, "epoch %d saw %d", epoch, n);
        int hits[N] = {0}, dup = 0;
        for (int i = 0; i < n; i++) dup += hits[oa[i]]++ != 0;
        CHECK(dup == 0, "epoch %d: %d duplicates", epoch, dup);
        CHECK(epoch_order(b, epoch, ob, N, B, per) == N && memcmp(oa, ob, sizeof oa) == 0,
              "same seed+epoch, same order");
        if (epoch > 0) CHECK(memcmp(oa, oc, sizeof oa) != 0, "epoch %d order equals the previous", epoch);
        memcpy(oc, oa, sizeof oa);
    }
    int identity = 1;
    for (int i = 0; i < N; i++) identity &= oa[i] == i;
    CHECK(!identity, "shuffled");
    /* Labels follow their images. */
    mp_loader_start_epoch(a, 5);
    const float *x;
    const int32_t *y;
    int n, bad = 0;
    while (mp_loader_next(a, &x, &y, &n) == MP_OK && n > 0)
        for (int j = 0; j < n; j++) bad += y[j] != (int)x[(size_t)j * per] % 7;
    CHECK(bad == 0, "labels mismatch %d", bad);
    CHECK(mp_loader_next(a, &x, &y, &n) == MP_OK && n == 0 && x == NULL, "stays at end");
    /* A restart mid-epoch gives the same order as a fresh loader. */
    mp_loader_start_epoch(a, 1);
    mp_loader_next(a, &x, &y, &n);
    mp_loader_next(a, &x, &y, &n);
    epoch_order(a, 2, oa, N, B, per);
    epoch_order(b, 2, ob, N, B, per);
    CHECK(memcmp(oa, ob, sizeof oa) == 0, "restart mid-epoch");
    mp_loader_destroy(a);
    mp_loader_destroy(b);

    /* Without shuffle: identity order; drop_last skips the short batch. */
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = B, .drop_last = true, .shuffle = false}, &a) == MP_OK, "%s", mp_last_error());
    CHECK(mp_loader_batches(a) == 10, "drop_last batches %d", mp_loader_batches(a));
    int seen = epoch_order(a, 0, oa, N, B, per), ok = seen == 100;
    for (int i = 0; i < seen; i++) ok &= oa[i] == i;
    CHECK(ok, "identity order with drop_last (%d seen)", seen);
    mp_loader_destroy(a);
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = N, .shuffle = true, .seed = 3}, &a) == MP_OK, "%s", mp_last_error());
    CHECK(mp_loader_batches(a) == 1 && epoch_order(a, 0, oa, N, N, per) == N, "one full batch");
    mp_loader_destroy(a);
    mp_dataset_free(&d);
}

static void test_normalize(void) {
    mp_dataset d = make_ds(5, 2, 2, 3, 2);
    float mean[2] = {1.5f, -0.25f}, sd[2] = {2.0f, 0.5f};
    mp_loader *l;
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 5, .mean = mean, .std = sd}, &l) == MP_OK, "%s", mp_last_error());
    mean[0] = 100; /* the loader keeps its own copy */
    mp_loader_start_epoch(l, 0);
    const float *x;
    const int32_t *y;
    int n;
    mp_loader_next(l, &x, &y, &n);
    double err = 0;
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 6; k++) {
                float v = d.images[i * 12 + c * 6 + k];
                float want = c == 0 ? (v - 1.5f) / 2.0f : (v + 0.25f) / 0.5f;
                err = fmax(err, fabs(x[i * 12 + c * 6 + k] - want));
            }
    CHECK(n == 5 && err == 0, "normalization error %g", err);
    mp_loader_destroy(l);
    mp_dataset_free(&d);
}

/* Does `out` equal `in` (C x H x W) shifted by (dy, dx), optionally flipped? */
static bool matches(const float *out, const float *in, int C, int H, int W, int dy, int dx, bool flip) {
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
                float want = sy >= 0 && sy < H && sx >= 0 && sx < W ? in[(c * H + sy) * W + sx] : 0.0f;
                if (out[(c * H + y) * W + x] != want) return false;
            }
    return true;
}

static void test_augment(void) {
    enum { C = 2, H = 4, W = 5, P = 2 };
    mp_dataset d = make_ds(1, C, H, W, 1);
    for (int k = 0; k < C * H * W; k++) d.images[k] = (float)(k + 1); /* all distinct, nonzero */
    const float *x;
    const int32_t *y;
    int n;
    /* Flip only: identity or mirror, both seen. */
    mp_loader *l;
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 1, .hflip = true, .seed = 9}, &l) == MP_OK, "%s", mp_last_error());
    int flips = 0, plain = 0, other = 0;
    for (int e = 0; e < 40; e++) {
        mp_loader_start_epoch(l, e);
        mp_loader_next(l, &x, &y, &n);
        if (matches(x, d.images, C, H, W, 0, 0, false)) plain++;
        else if (matches(x, d.images, C, H, W, 0, 0, true)) flips++;
        else other++;
    }
    CHECK(other == 0 && flips > 5 && plain > 5, "flip: %d plain, %d flipped, %d other", plain, flips, other);
    mp_loader_destroy(l);
    /* Crop only: same size, content shifted by some (dy, dx) in [-P, P]^2. */
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 1, .crop_pad = P, .seed = 9}, &l) == MP_OK, "%s", mp_last_error());
    int seen[2 * P + 1][2 * P + 1] = {{0}}, nomatch = 0;
    for (int e = 0; e < 150; e++) {
        mp_loader_start_epoch(l, e);
        mp_loader_next(l, &x, &y, &n);
        int found = 0;
        for (int dy = -P; dy <= P; dy++)
            for (int dx = -P; dx <= P; dx++)
                if (matches(x, d.images, C, H, W, dy, dx, false)) seen[dy + P][dx + P]++, found++;
        nomatch += found != 1;
    }
    int distinct = 0;
    for (int i = 0; i < 2 * P + 1; i++)
        for (int j = 0; j < 2 * P + 1; j++) distinct += seen[i][j] > 0;
    CHECK(nomatch == 0 && distinct >= 20, "crop: %d unmatched, %d distinct shifts", nomatch, distinct);
    mp_loader_destroy(l);
    /* Pad value 0 is normalized like any pixel. */
    float mean[2] = {1, 1}, sd[2] = {2, 2};
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 1, .crop_pad = P, .seed = 9, .mean = mean, .std = sd}, &l) ==
              MP_OK,
          "%s", mp_last_error());
    int padded = 0;
    for (int e = 0; e < 20; e++) {
        mp_loader_start_epoch(l, e);
        mp_loader_next(l, &x, &y, &n);
        for (int k = 0; k < C * H * W; k++) padded += x[k] == -0.5f;
    }
    CHECK(padded > 0, "normalized padding seen");
    mp_loader_destroy(l);
    mp_dataset_free(&d);

    /* Augmentation depends on (seed, epoch, sample), not on batching or order. */
    mp_dataset m = make_ds(37, 3, 6, 6, 5);
    mp_loader *a, *b;
    mp_loader_opts oa = {.batch = 1, .shuffle = true, .seed = 77, .crop_pad = 2, .hflip = true};
    mp_loader_opts ob = {.batch = 37, .shuffle = false, .seed = 77, .crop_pad = 2, .hflip = true};
    CHECK(mp_loader_create(&m, oa, &a) == MP_OK && mp_loader_create(&m, ob, &b) == MP_OK, "%s", mp_last_error());
    size_t per = 3 * 6 * 6;
    float *ref = malloc(37 * per * sizeof(float));
    int mismatch = 0, changed = 0;
    for (int e = 0; e < 2; e++) {
        mp_loader_start_epoch(b, e);
        mp_loader_next(b, &x, &y, &n);
        memcpy(ref, x, 37 * per * sizeof(float));
        mp_loader_start_epoch(a, e);
        while (mp_loader_next(a, &x, &y, &n) == MP_OK && n > 0) {
            /* identify the sample by its label and any surviving pixel */
            int id = -1;
            for (size_t k = 0; k < per && id < 0; k++)
                if (x[k] != 0) id = (int)x[k];
            CHECK(id >= 0 && id < 37, "id %d", id);
            if (id < 0 || id >= 37) continue;
            mismatch += memcmp(x, ref + id * per, per * sizeof(float)) != 0;
            changed += memcmp(x, m.images + id * per, per * sizeof(float)) != 0;
        }
    }
    CHECK(mismatch == 0 && changed > 37, "batching changed augmentation (%d), changed %d", mismatch, changed);
    free(ref);
    mp_loader_destroy(a);
    mp_loader_destroy(b);
    mp_dataset_free(&m);
}

static void test_destroy(void) {
    mp_dataset d = make_ds(2000, 3, 8, 8, 10);
    const float *x;
    const int32_t *y;
    int n;
    for (int t = 0; t < 50; t++) {
        mp_loader *l;
        mp_loader_opts o = {.batch = 16, .shuffle = true, .seed = (uint64_t)t, .crop_pad = 1, .hflip = true};
        if (mp_loader_create(&d, o, &l) != MP_OK) {
            CHECK(0, "%s", mp_last_error());
            continue;
        }
        if (t % 5 == 1) mp_loader_start_epoch(l, t);                 /* worker busy filling */
        if (t % 5 == 2) mp_loader_start_epoch(l, t), mp_loader_next(l, &x, &y, &n);
        if (t % 5 == 3) {                                            /* restart while ahead */
            mp_loader_start_epoch(l, 0);
            for (int k = 0; k < 5; k++) mp_loader_next(l, &x, &y, &n);
            mp_loader_start_epoch(l, 1);
            mp_loader_next(l, &x, &y, &n);
            CHECK(n == 16, "n %d", n);
        }
        mp_loader_destroy(l); /* t % 5 == 0: never started */
    }
    /* A full pass over a bigger set: the pipeline keeps up and counts match. */
    mp_loader *l;
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 64, .shuffle = true, .seed = 1, .hflip = true}, &l) == MP_OK,
          "%s", mp_last_error());
    long total = 0;
    for (int e = 0; e < 3; e++) {
        mp_loader_start_epoch(l, e);
        while (mp_loader_next(l, &x, &y, &n) == MP_OK && n > 0) total += n;
    }
    CHECK(total == 3 * 2000, "total %ld", total);
    mp_loader_destroy(l);
    mp_dataset_free(&d);
}

/* Data parallel: R shards of batch b together yield, batch by batch, the
 * batches one loader of batch R*b yields (same seed); each shard has the
 * same number of batches; impossible shards are refused. */
static void test_shards(void) {
    enum { N = 103, B = 4, R = 3 };
    mp_dataset d = make_ds(N, 1, 2, 2, 10);
    const int per = 4;
    mp_loader *whole = NULL, *part[R] = {0};
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = B * R, .shuffle = true, .drop_last = true, .seed = 9}, &whole) ==
              MP_OK, "%s", mp_last_error());
    for (int r = 0; r < R; r++)
        CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = B, .shuffle = true, .drop_last = true, .seed = 9,
                                                    .shards = R, .shard = r},
                               &part[r]) == MP_OK,
              "%s", mp_last_error());
    if (whole && part[0] && part[1] && part[2]) {
        for (int r = 0; r < R; r++)
            CHECK(mp_loader_batches(part[r]) == N / (B * R), "shard %d: %d batches, want %d", r,
                  mp_loader_batches(part[r]), N / (B * R));
        mp_loader_start_epoch(whole, 2);
        for (int r = 0; r < R; r++) mp_loader_start_epoch(part[r], 2);
        int compared = 0;
        for (int b = 0; b < N / (B * R); b++) {
            const float *xw, *xp;
            const int32_t *yw, *yp;
            int nw = 0, np = 0;
            mp_loader_next(whole, &xw, &yw, &nw);
            for (int r = 0; r < R; r++) {
                mp_loader_next(part[r], &xp, &yp, &np);
                CHECK(np == B, "shard %d batch %d: %d samples", r, b, np);
                for (int j = 0; j < np && nw == B * R; j++, compared++) {
                    CHECK(xp[(size_t)j * per] == xw[(size_t)(r * B + j) * per] && yp[j] == yw[r * B + j],
                          "shard %d batch %d sample %d: sample %g, want %g", r, b, j, (double)xp[(size_t)j * per],
                          (double)xw[(size_t)(r * B + j) * per]);
                }
            }
        }
        CHECK(compared == (N / (B * R)) * B * R, "compared %d samples", compared);
    }
    mp_loader_destroy(whole);
    for (int r = 0; r < R; r++) mp_loader_destroy(part[r]);
    /* without drop_last: 103 = 8 global batches of 12 + 7; the 7 shared 3, 3, 3 (two of them the epoch's
     * first samples again), so every shard yields 9 batches, the last of 3, then the end */
    for (int r = 0; r < R; r++)
        CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = B, .seed = 9, .shards = R, .shard = r}, &part[r]) ==
                  MP_OK, "%s", mp_last_error());
    if (part[0] && part[1] && part[2]) {
        int seen[N] = {0}, counts_ok = 1;
        for (int r = 0; r < R; r++) {
            counts_ok &= mp_loader_batches(part[r]) == 9;
            mp_loader_start_epoch(part[r], 0);
            for (int b = 0; b < 10; b++) {
                const float *xp;
                const int32_t *yp;
                int np = -1;
                CHECK(mp_loader_next(part[r], &xp, &yp, &np) == MP_OK, "%s", mp_last_error());
                counts_ok &= np == (b < 8 ? B : b == 8 ? 3 : 0);
                for (int j = 0; j < np; j++) seen[(int)xp[(size_t)j * per]]++;
            }
        }
        int once = 0, twice = 0;
        for (int i = 0; i < N; i++) once += seen[i] == 1, twice += seen[i] == 2;
        CHECK(counts_ok, "every shard: %d batches of 4 then one of 3, then the end", N / (B * R));
        CHECK(once == N - 2 && twice == 2 && seen[0] == 2 && seen[1] == 2, "every sample once, the first two twice: "
              "%d once, %d twice", once, twice);
    }
    for (int r = 0; r < R; r++) mp_loader_destroy(part[r]);
    mp_loader *l = NULL;
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = B, .shards = R, .shard = R}, &l) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "shard 3 of 3 does not exist"),
          "shard out of range: %s", mp_last_error());
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = 40, .shards = 3, .shard = 0}, &l) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "3 ranks x batch 40 is larger than the dataset (103 samples"),
          "global batch too large: %s", mp_last_error());
    /* shards 0 is one shard: only shard 0 exists */
    const int bad_shards[2] = {2, -1};
    for (int i = 0; i < 2; i++) {
        char want[64];
        snprintf(want, sizeof want, "shard %d of 0 does not exist", bad_shards[i]);
        CHECK_ERR(mp_loader_create(&d, (mp_loader_opts){.batch = B, .shards = 0, .shard = bad_shards[i]}, &l),
                  MP_ERR_INVALID_ARG, want, "[0, 1)");
        CHECK(l == NULL, "a refused loader was returned");
    }
    CHECK_ERR(mp_loader_create(&d, (mp_loader_opts){.batch = B, .shards = 3, .shard = -1}, &l), MP_ERR_INVALID_ARG,
              "shard -1 of 3");
    CHECK_ERR(mp_loader_create(&d, (mp_loader_opts){.batch = B}, NULL), MP_ERR_INVALID_ARG, "null output");
    CHECK_ERR(mp_loader_create(NULL, (mp_loader_opts){.batch = B}, NULL), MP_ERR_INVALID_ARG, "null output");
    CHECK_ERR(mp_loader_create(NULL, (mp_loader_opts){.batch = B}, &l), MP_ERR_INVALID_ARG, "null dataset");
    /* a null loader or output place: an error or 0, never a crash */
    const float *x = NULL;
    const int32_t *y = NULL;
    int n = -1;
    CHECK_ERR(mp_loader_start_epoch(NULL, 0), MP_ERR_INVALID_ARG, "null loader");
    CHECK_ERR(mp_loader_next(NULL, &x, &y, &n), MP_ERR_INVALID_ARG, "the loader is null");
    CHECK(mp_loader_batches(NULL) == 0 && mp_loader_wait_seconds(NULL) == 0 && mp_loader_bad_images(NULL) == 0,
          "a null loader's counts are not 0");
    CHECK(mp_loader_create(&d, (mp_loader_opts){.batch = B}, &l) == MP_OK, "%s", mp_last_error());
    CHECK(mp_loader_start_epoch(l, 0) == MP_OK, "%s", mp_last_error());
    CHECK_ERR(mp_loader_next(l, NULL, &y, &n), MP_ERR_INVALID_ARG, "images is null");
    CHECK_ERR(mp_loader_next(l, &x, &y, NULL), MP_ERR_INVALID_ARG, "n is null");
    CHECK(mp_loader_next(l, &x, &y, &n) == MP_OK && n == B, "the loader after refused calls: %s", mp_last_error());
    mp_loader_destroy(l);
    mp_dataset_free(&d);
}

int main(void) {
    test_errors();
    test_shards();
    test_order();
    test_normalize();
    test_augment();
    test_destroy();
    return test_summary("test_loader");
}
