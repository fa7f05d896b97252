/* test_folder.c — image-folder datasets: a tree of PNG and JPEG files written
 * here (libpng, libjpeg), decoded to known pixels (gray and colour, each
 * converted to the dataset's channels), class names and order, the held-out
 * split and train/ + val/, resize + centre-crop geometry, corrupt and
 * truncated files under fail and skip, the per-batch path giving the batches
 * the in-memory path gives, loader batches independent of the number of
 * decoder threads (with random-resized-crop, crop and flip), and the errors
 * for empty folders and dangling symbolic links. */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

#include "check.h"
#include "core/error.h"
#include "data/folder.h"
#include "data/image_decode.h"
#include "data/image_resize.h"
#include "scratch_dir.h"

static char dir[4096];

static const char *mk(const char *rel) {
    const char *p = scratch_path(dir, rel);
    mkdir(p, 0755);
    return p;
}

/* pixels (h, w, c), c = 1 or 3 */
static void write_png(const char *rel, const uint8_t *px, int w, int h, int c) {
    png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w, .height = (png_uint_32)h,
                    .format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB};
    if (!png_image_write_to_file(&im, scratch_path(dir, rel), 0, px, 0, NULL)) {
        fprintf(stderr, "write_png %s: %s\n", rel, im.message);
        exit(2);
    }
}

static void write_jpeg(const char *rel, const uint8_t *px, int w, int h, int c) {
    FILE *f = fopen(scratch_path(dir, rel), "wb");
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

static void write_bytes(const char *rel, const void *b, size_t n) {
    FILE *f = fopen(scratch_path(dir, rel), "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static unsigned char *read_all(const char *rel, size_t *n) {
    unsigned char *b;
    if (mp_image_read_file(scratch_path(dir, rel), &b, n) != MP_OK) exit(2);
    return b;
}

/* colour image (h, w, 3): R = 40 x, G = 30 y, B = 200 */
static void colour(uint8_t *px, int w, int h) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(40 * x), p[1] = (uint8_t)(30 * y), p[2] = 200;
        }
}

static void test_tree(void) {
    mk("t1");
    mk("t1/cat"), mk("t1/dog"), mk("t1/empty"), mk("t1/.hidden");
    uint8_t rgb[4 * 6 * 3], gray[4 * 6], flat[4 * 6 * 3];
    colour(rgb, 6, 4);
    for (int i = 0; i < 24; i++) gray[i] = (uint8_t)(10 * i);
    for (int i = 0; i < 24 * 3; i++) flat[i] = (uint8_t)(i % 3 == 0 ? 200 : i % 3 == 1 ? 100 : 50);
    write_png("t1/cat/a0.png", rgb, 6, 4, 3);
    write_png("t1/cat/a1.png", gray, 6, 4, 1);
    write_jpeg("t1/dog/b0.jpg", flat, 6, 4, 3);
    write_jpeg("t1/dog/b1.JPEG", gray, 6, 4, 1);
    write_bytes("t1/dog/notes.txt", "not an image", 12);
    write_png("t1/.hidden/x.png", gray, 6, 4, 1);
    mp_dataset tr, va;
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t1"), &(mp_folder_opts){.val_fraction = 0.25, .threads = 2}, &tr,
                                 &va) == MP_OK, "%s", mp_last_error());
    CHECK(tr.n == 3 && va.n == 1 && tr.c == 3 && tr.h == 4 && tr.w == 6 && tr.classes == 3 && va.classes == 3,
          "shape: %d + %d samples of %dx%dx%d, %d classes", tr.n, va.n, tr.c, tr.h, tr.w, tr.classes);
    CHECK(tr.images && !tr.src, "small sets are decoded in memory");
    CHECK(tr.names && tr.names->n == 3 && !strcmp(tr.names->names[0], "cat") && !strcmp(tr.names->names[1], "dog") &&
              !strcmp(tr.names->names[2], "empty"), "class names");
    /* order a0 a1 (cat) b0 b1 (dog); floor(4 / 4) = 1 held out: equal remainders 0.5, so cat's, its second */
    CHECK(tr.labels[0] == 0 && tr.labels[1] == 1 && tr.labels[2] == 1 && va.labels[0] == 0, "labels %d %d %d | %d",
          tr.labels[0], tr.labels[1], tr.labels[2], va.labels[0]);
    const size_t hw = 24;
    bool exact = true;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 6; x++) {
            const size_t q = (size_t)y * 6 + x;
            exact = exact && tr.images[q] == (float)(40 * x) / 255.0f && tr.images[hw + q] == (float)(30 * y) / 255.0f &&
                    tr.images[2 * hw + q] == 200 / 255.0f;
            for (int ch = 0; ch < 3; ch++) exact = exact && va.images[ch * hw + q] == (float)gray[q] / 255.0f;
        }
    CHECK(exact, "PNG pixels exact; gray replicated to RGB");
    float err = 0;
    for (size_t q = 0; q < hw; q++) {
        err = fmaxf(err, fabsf(tr.images[3 * hw + q] * 255 - 200));
        err = fmaxf(err, fabsf(tr.images[4 * hw + q] * 255 - 100));
        err = fmaxf(err, fabsf(tr.images[5 * hw + q] * 255 - 50));
    }
    CHECK(err <= 3, "JPEG colour within 3 levels: %g", err);
    err = 0;
    for (size_t q = 0; q < hw; q++) err = fmaxf(err, fabsf(tr.images[6 * hw + q] * 255 - gray[q]));
    CHECK(err <= 3, "gray JPEG within 3 levels: %g", err);
    CHECK(mp_dataset_class_name(&va, 2) && !strcmp(mp_dataset_class_name(&va, 2), "empty") &&
              !mp_dataset_class_name(&va, 3), "public class names");
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* forced gray: colour converted with the 601 luma weights */
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t1"), &(mp_folder_opts){.val_fraction = 0.25, .channels = 1}, &tr,
                                 &va) == MP_OK, "%s", mp_last_error());
    const float want = 64 / 255.0f; /* (80, 30, 200): Pillow 13's convert("L") */
    CHECK(tr.c == 1 && tr.images[1 * 6 + 2] == want, "RGB -> gray: %g vs %g", tr.images[8], want);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
}

/* 8x12 ramp -> 4x4: cover scale 1/2, centre box x in [2, 10), 2x2 averages. */
static void test_geometry(void) {
    mk("t2"), mk("t2/a"), mk("t2/b");
    uint8_t px[8 * 12];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 12; x++) px[y * 12 + x] = (uint8_t)(10 * x + y);
    write_png("t2/a/0.png", px, 12, 8, 1);
    write_png("t2/b/1.png", px, 12, 8, 1);
    write_png("t2/a/2.png", px, 12, 8, 1); /* the one held out: a class's only image never is */
    mp_dataset tr, va;
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t2"), &(mp_folder_opts){.height = 4, .width = 4, .val_fraction = 0.5},
                                 &tr, &va) == MP_OK, "%s", mp_last_error());
    bool ok = tr.h == 4 && tr.w == 4 && tr.c == 1;
    for (int y = 0; ok && y < 4; y++)
        for (int x = 0; x < 4; x++) {
            const float want = (float)(10 * (2.5 + 2 * x) + (2 * y + 0.5)) / 255.0f;
            ok = ok && fabsf(tr.images[y * 4 + x] - want) < 1e-5f;
        }
    CHECK(ok, "resize + centre crop geometry");
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* a decoded set the host cannot hold twice (core/host_mem.h, its figure lowered to 100 bytes) is decoded per
     * batch instead, as under a lower max_memory */
    setenv("MIXPREC_HOST_MEM_LIMIT", "100", 1);
    const mp_folder_opts big = {.height = 64, .width = 64, .val_fraction = 0.5};
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "t2"), &big, &tr, &va), MP_OK);
    CHECK(!tr.images && !va.images && tr.n + va.n == 3,
          "beyond the host: per batch (%d + %d samples)", tr.n, va.n);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "t2"), &big, &tr, &va), MP_OK);
    CHECK(tr.images != NULL, "within the host: decoded in memory");
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    mp_box b = mp_box_centre(100, 50, 32, 32);
    CHECK(b.w == 50 && fabs(b.h - 50) < 1e-9 && fabs(b.y - 25) < 1e-9 && b.x == 0, "centre box of a tall image");
    mp_rng r;
    mp_rng_seed(&r, 7);
    bool in = true;
    for (int i = 0; i < 1000; i++) {
        b = mp_box_random_resized(&r, 30, 40);
        const double area = b.h * b.w / 1200.0, ratio = b.w / b.h;
        in = in && b.y >= 0 && b.x >= 0 && b.y + b.h <= 30 && b.x + b.w <= 40 && area > 0.07 && area <= 1 &&
             ratio > 0.70 && ratio < 1.42;
    }
    CHECK(in, "random-resized boxes inside the image, scale and aspect in range");
}

static void test_bad(void) {
    mk("t3"), mk("t3/a"), mk("t3/b");
    uint8_t px[16 * 16 * 3];
    colour(px, 16, 16);
    write_png("t3/a/0.png", px, 16, 16, 3);
    write_jpeg("t3/a/1.jpg", px, 16, 16, 3);
    write_png("t3/b/2.png", px, 16, 16, 3);
    write_jpeg("t3/b/3.jpg", px, 16, 16, 3);
    write_png("t3/b/4.png", px, 16, 16, 3);
    write_jpeg("t3/b/5.jpg", px, 16, 16, 3);
    size_t n;
    unsigned char *png = read_all("t3/a/0.png", &n);
    write_bytes("t3/b/6_trunc.png", png, n / 2); /* header fine, data cut */
    free(png);
    unsigned char *jpg = read_all("t3/a/1.jpg", &n);
    for (size_t i = n / 2; i < n - 2; i++) jpg[i] = (unsigned char)(i * 7); /* scan data garbage */
    write_bytes("t3/b/7_corrupt.jpg", jpg, n);
    write_bytes("t3/b/8_cut.jpg", jpg, n / 3);
    free(jpg);
    write_bytes("t3/b/9_garbage.png", "GIF89a not a png", 16);
    mp_dataset tr, va;
    const char *d3 = scratch_path(dir, "t3");
    CHECK_ERR(mp_dataset_load_folder(d3, &(mp_folder_opts){.val_fraction = 0.2}, &tr, &va), MP_ERR_FORMAT,
              "/t3/b/", "--bad-images skip");
    CHECK(!tr.labels && !va.labels, "nothing on error");
    CHECK(mp_dataset_load_folder(d3, &(mp_folder_opts){.val_fraction = 0.2, .bad_images = MP_BAD_IMAGES_SKIP}, &tr,
                                 &va) == MP_OK, "%s", mp_last_error());
    CHECK(tr.n + va.n == 6 && tr.skipped + va.skipped == 4, "skip: %d + %d kept, %d + %d skipped", tr.n, va.n,
          tr.skipped, va.skipped);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* per batch: a header that reads but data that does not decode fails in the loader, naming the file */
    mk("t4"), mk("t4/a"), mk("t4/b");
    write_png("t4/a/0.png", px, 16, 16, 3);
    write_png("t4/b/1.png", px, 16, 16, 3);
    png = read_all("t4/a/0.png", &n);
    write_bytes("t4/b/2.png", png, n - 20);
    write_png("t4/a/3.png", px, 16, 16, 3);
    free(png);
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t4"), &(mp_folder_opts){.val_fraction = 0.25, .lazy = true}, &tr,
                                 &va) == MP_OK, "%s", mp_last_error());
    CHECK(tr.src && !tr.images && tr.n == 3, "lazy");
    mp_loader *l;
    CHECK(mp_loader_create(&tr, (mp_loader_opts){.batch = 3, .workers = 2}, &l) == MP_OK, "%s", mp_last_error());
    mp_loader_start_epoch(l, 0);
    const float *x;
    const int32_t *y;
    int k;
    CHECK_ERR(mp_loader_next(l, &x, &y, &k), MP_ERR_FORMAT, "2.png", "corrupt PNG");
    mp_loader_destroy(l);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* the same under skip: with drop_last 2.png (class b) is replaced by the next sample in the order, 0.png
     * (class a), image and label, not a black image labelled b; without, it is left out */
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t4"), &(mp_folder_opts){.val_fraction = 0.25, .lazy = true,
                                                                          .bad_images = MP_BAD_IMAGES_SKIP},
                                 &tr, &va) == MP_OK && tr.n == 3, "%s", mp_last_error());
    l = NULL;
    CHECK(mp_loader_create(&tr, (mp_loader_opts){.batch = 3, .workers = 2, .drop_last = true}, &l) == MP_OK, "%s",
          mp_last_error());
    if (l) {
        mp_loader_start_epoch(l, 0);
        CHECK(mp_loader_next(l, &x, &y, &k) == MP_OK && k == 3, "skip: %s", mp_last_error());
        float peak = 0;
        for (size_t q = 0; k == 3 && q < 16 * 16 * 3; q++) peak = fmaxf(peak, x[2 * 16 * 16 * 3 + q]);
        CHECK(k == 3 && y[0] == 0 && y[1] == 1 && y[2] == 0 && peak > 0.5f,
              "the bad image replaced by 0.png: labels %d %d %d, brightest pixel %g", y[0], y[1], y[2], peak);
        CHECK(mp_loader_bad_images(l) == 1, "one bad: %d", mp_loader_bad_images(l));
        /* the next epoch: known bad, not decoded again, counted again */
        mp_loader_start_epoch(l, 1);
        CHECK(mp_loader_next(l, &x, &y, &k) == MP_OK && k == 3 && mp_loader_bad_images(l) == 1,
              "epoch 1: %d samples, %d bad", k, mp_loader_bad_images(l));
    }
    mp_loader_destroy(l);
    l = NULL;
    CHECK(mp_loader_create(&tr, (mp_loader_opts){.batch = 3, .workers = 2}, &l) == MP_OK, "%s", mp_last_error());
    if (l) {
        mp_loader_start_epoch(l, 0);
        CHECK(mp_loader_next(l, &x, &y, &k) == MP_OK && k == 2 && y[0] == 0 && y[1] == 1 &&
                  mp_loader_bad_images(l) == 1,
              "without drop_last left out: %d samples, labels %d %d, %d bad", k, y[0], y[1],
              mp_loader_bad_images(l));
        CHECK(mp_loader_next(l, &x, &y, &k) == MP_OK && k == 0, "then the end");
    }
    mp_loader_destroy(l);
    /* batches of one: the bad one's batch is empty and passed over, not taken for the end; it is counted when
     * its batch comes, not when the loader prepares it ahead (given 0.2 s to, after the first batch) */
    l = NULL;
    CHECK(mp_loader_create(&tr, (mp_loader_opts){.batch = 1, .workers = 1}, &l) == MP_OK, "%s", mp_last_error());
    if (l) mp_loader_start_epoch(l, 0);
    int got = 0, bad_early = -1;
    for (int b = 0; l && b < 4 && mp_loader_next(l, &x, &y, &k) == MP_OK && k > 0; b++) {
        got += k;
        if (b == 0) nanosleep(&(struct timespec){.tv_nsec = 200000000}, NULL), bad_early = mp_loader_bad_images(l);
    }
    CHECK(got == 2, "batches of one: %d samples before the end", got);
    CHECK(bad_early == 0 && l && mp_loader_bad_images(l) == 1, "batches of one: %d bad after the first batch, %d at "
          "the end", bad_early, l ? mp_loader_bad_images(l) : -1);
    mp_loader_destroy(l);
    /* two shards without drop_last must yield the same batches: the bad one (position 2, shard 0's second) is
     * replaced there, by position 3 = the epoch's first sample, as shard 1's padding is; counted once */
    int counts[2][3] = {{0}}, bad = 0;
    for (int r = 0; r < 2; r++) {
        l = NULL;
        CHECK(mp_loader_create(&tr, (mp_loader_opts){.batch = 1, .workers = 1, .shards = 2, .shard = r}, &l) ==
                  MP_OK, "%s", mp_last_error());
        if (l) mp_loader_start_epoch(l, 0);
        for (int b = 0; l && b < 3 && mp_loader_next(l, &x, &y, &k) == MP_OK; b++) counts[r][b] = k;
        bad += l ? mp_loader_bad_images(l) : 0;
        mp_loader_destroy(l);
    }
    CHECK(counts[0][0] == 1 && counts[0][1] == 1 && counts[0][2] == 0 && counts[1][0] == 1 && counts[1][1] == 1 &&
              counts[1][2] == 0 && bad == 1,
          "shards: %d %d %d | %d %d %d samples, %d bad", counts[0][0], counts[0][1], counts[0][2], counts[1][0],
          counts[1][1], counts[1][2], bad);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* a folder that does not decode at all: 17 bad in a row, then an error, not a search of the whole set */
    mk("allbad"), mk("allbad/a"), mk("allbad/b");
    png = read_all("t4/a/0.png", &n);
    for (int i = 0; i < 20; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "allbad/a/%02d.png", i);
        write_bytes(rel, png, n - 20);
    }
    write_bytes("allbad/b/99.png", png, n);
    free(png);
    CHECK(mp_dataset_load_folder(scratch_path(dir, "allbad"), &(mp_folder_opts){.val_fraction = 0.05, .lazy = true,
                                                                          .bad_images = MP_BAD_IMAGES_SKIP},
                                 &tr, &va) == MP_OK, "%s", mp_last_error());
    l = NULL;
    CHECK(mp_loader_create(&tr, (mp_loader_opts){.batch = 1, .workers = 1, .drop_last = true}, &l) == MP_OK, "%s",
          mp_last_error());
    if (l) {
        mp_loader_start_epoch(l, 0);
        CHECK_ERR(mp_loader_next(l, &x, &y, &k), MP_ERR_FORMAT, "allbad/a/00.png: corrupt PNG",
                  "the 16 samples after it in the epoch's order do not decode either");
    }
    mp_loader_destroy(l);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    /* probe and decode never crash on any prefix of a JPEG or PNG */
    jpg = read_all("t3/a/1.jpg", &n);
    png = read_all("t3/a/0.png", &n);
    size_t nj, np;
    free(read_all("t3/a/1.jpg", &nj));
    free(read_all("t3/a/0.png", &np));
    int fails = 0;
    for (size_t cut = 0; cut < nj; cut += 7) {
        mp_image im;
        fails += mp_image_decode(jpg, cut, "jpg", 3, &im) != MP_OK;
        mp_image_free(&im);
    }
    for (size_t cut = 0; cut < np; cut += 5) {
        mp_image im;
        fails += mp_image_decode(png, cut, "png", 1, &im) != MP_OK;
        mp_image_free(&im);
    }
    CHECK(fails == (int)((nj + 6) / 7 + (np + 4) / 5), "every cut-short image is an error (%d)", fails);
    free(jpg);
    free(png);
}

static void test_errors(void) {
    mp_dataset tr, va;
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "nope"), NULL, &tr, &va), MP_ERR_IO, "nope: not found");
    mk("e1");
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "e1"), NULL, &tr, &va), MP_ERR_FORMAT, "e1: no class subfolders");
    mk("e2"), mk("e2/a"), mk("e2/b");
    write_bytes("e2/a/readme.txt", "x", 1);
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "e2"), NULL, &tr, &va), MP_ERR_FORMAT,
              "e2: no images (.jpg, .jpeg, .png) in its 2 class subfolders");
    mk("e3"), mk("e3/a"), mk("e3/b");
    uint8_t px[10 * 10];
    memset(px, 9, sizeof px);
    write_png("e3/a/0.png", px, 10, 10, 1);
    write_png("e3/b/1.png", px, 8, 10, 1);
    write_png("e3/a/2.png", px, 10, 10, 1);
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "e3"), &(mp_folder_opts){.val_fraction = 0.5}, &tr, &va),
              MP_ERR_FORMAT, "images differ in size", "--image-size");
    /* each class numbers its own files: in name-then-class order every 4th image is class d's; the split
     * still holds out 8 / 4 = 2 of each class */
    mk("strat");
    for (int c = 0; c < 4; c++) {
        char rel[64];
        snprintf(rel, sizeof rel, "strat/%c", 'a' + c);
        mk(rel);
        for (int i = 0; i < 8; i++) {
            snprintf(rel, sizeof rel, "strat/%c/%d.png", 'a' + c, i);
            write_png(rel, px, 4, 4, 1);
        }
    }
    CHECK(mp_dataset_load_folder(scratch_path(dir, "strat"), &(mp_folder_opts){.val_fraction = 0.25}, &tr, &va) ==
              MP_OK, "%s", mp_last_error());
    int per_class[4] = {0};
    for (int i = 0; i < va.n; i++) per_class[va.labels[i]]++;
    CHECK(tr.n == 24 && va.n == 8 && per_class[0] == 2 && per_class[1] == 2 && per_class[2] == 2 && per_class[3] == 2,
          "stratified: %d + %d, held out per class %d %d %d %d", tr.n, va.n, per_class[0], per_class[1],
          per_class[2], per_class[3]);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "e3"), &(mp_folder_opts){.val_fraction = 0.1}, &tr, &va),
              MP_ERR_INVALID_ARG, "leaves 3 for training and 0 held out");
    /* train/ and val/ */
    mk("s"), mk("s/train"), mk("s/val"), mk("s/train/x"), mk("s/train/y"), mk("s/val/x"), mk("s/val/y");
    write_png("s/train/x/0.png", px, 10, 10, 1);
    write_png("s/train/y/0.png", px, 10, 10, 1);
    write_png("s/train/y/1.png", px, 10, 10, 1);
    write_png("s/val/y/0.png", px, 10, 10, 1);
    CHECK(mp_dataset_load_folder(scratch_path(dir, "s"), NULL, &tr, &va) == MP_OK, "%s", mp_last_error());
    CHECK(tr.n == 3 && va.n == 1 && va.labels[0] == 1 && tr.classes == 2 && strstr(va.source, "val/"), "train/ + val/");
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    mk("s/val/z");
    write_png("s/val/z/0.png", px, 10, 10, 1);
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "s"), NULL, &tr, &va), MP_ERR_FORMAT,
              "val/z: a validation class that");
    /* train/ and test/: the same; train/ alone is a class folder named train, and the error says why */
    mk("st"), mk("st/train"), mk("st/train/x"), mk("st/train/y");
    write_png("st/train/x/0.png", px, 10, 10, 1);
    write_png("st/train/y/0.png", px, 10, 10, 1);
    CHECK_ERR(mp_dataset_load_folder(scratch_path(dir, "st"), NULL, &tr, &va), MP_ERR_FORMAT,
              "no images (.jpg, .jpeg, .png) in its 1 class subfolders (its train/ is read as the training part only "
              "with a val/ or test/ beside it)");
    mk("st/test"), mk("st/test/y");
    write_png("st/test/y/0.png", px, 10, 10, 1);
    CHECK(mp_dataset_load_folder(scratch_path(dir, "st"), NULL, &tr, &va) == MP_OK, "%s", mp_last_error());
    CHECK(tr.n == 2 && va.n == 1 && va.labels[0] == 1 && tr.classes == 2 && strstr(va.source, "test/"),
          "train/ + test/: %d + %d", tr.n, va.n);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
    mp_dataset *pt = NULL, *pv = NULL;
    CHECK_ERR(mp_dataset_open_folder(scratch_path(dir, "e1"), NULL, &pt, &pv), MP_ERR_FORMAT, "no class subfolders");
    CHECK(!pt && !pv, "public open: nothing on error");
}

/* Dangling symbolic links: as a class folder an error naming it under fail
 * and skip (dropped, it would shift the labels of the classes after it); as
 * an image a bad image (fail names it, skip leaves it out). */
static void test_dangling(void) {
    uint8_t px[4 * 4];
    memset(px, 7, sizeof px);
    mk("dc"), mk("dc/a"), mk("dc/c");
    for (int i = 0; i < 4; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "dc/%c/%d.png", i < 2 ? 'a' : 'c', i);
        write_png(rel, px, 4, 4, 1);
    }
    CHECK(symlink(scratch_path(dir, "none"), scratch_path(dir, "dc/b")) == 0, "symlink dc/b");
    mp_dataset tr, va;
    const char *dc = scratch_path(dir, "dc");
    for (int skip = 0; skip < 2; skip++) {
        const mp_folder_opts o = {.val_fraction = 0.5, .bad_images = skip ? MP_BAD_IMAGES_SKIP : MP_BAD_IMAGES_FAIL};
        CHECK_ERR(mp_dataset_load_folder(dc, &o, &tr, &va), MP_ERR_IO,
                  "/dc/b: a symbolic link to a path that does not exist");
    }
    mk("di"), mk("di/a"), mk("di/b");
    for (int i = 0; i < 5; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "di/%c/%d.png", i % 2 ? 'b' : 'a', i);
        write_png(rel, px, 4, 4, 1);
    }
    CHECK(symlink(scratch_path(dir, "none.png"), scratch_path(dir, "di/b/x.png")) == 0, "symlink di/b/x.png");
    const char *di = scratch_path(dir, "di");
    CHECK_ERR(mp_dataset_load_folder(di, &(mp_folder_opts){.val_fraction = 0.25}, &tr, &va), MP_ERR_FORMAT,
              "/di/b/x.png: a symbolic link to a path that does not exist", "--bad-images skip");
    CHECK(mp_dataset_load_folder(di, &(mp_folder_opts){.val_fraction = 0.25, .bad_images = MP_BAD_IMAGES_SKIP},
                                 &tr, &va) == MP_OK, "%s", mp_last_error());
    CHECK(tr.n + va.n == 5 && tr.skipped + va.skipped == 1, "dangling image under skip: %d + %d kept, %d + %d skipped",
          tr.n, va.n, tr.skipped, va.skipped);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
}

/* Every batch of an epoch, concatenated. */
static float *epoch_batches(const mp_dataset *d, mp_loader_opts o, int epoch, size_t *len) {
    mp_loader *l;
    if (mp_loader_create(d, o, &l) != MP_OK) {
        CHECK(0, "%s", mp_last_error());
        return NULL;
    }
    const size_t per = (size_t)d->c * d->h * d->w;
    const int nb = mp_loader_batches(l);
    float *all = calloc((size_t)nb * o.batch * per, sizeof *all);
    mp_loader_start_epoch(l, epoch);
    for (int b = 0; b < nb; b++) {
        const float *x;
        const int32_t *y;
        int n;
        CHECK(mp_loader_next(l, &x, &y, &n) == MP_OK, "%s", mp_last_error());
        memcpy(all + (size_t)b * o.batch * per, x, (size_t)o.batch * per * sizeof *x);
    }
    mp_loader_destroy(l);
    *len = (size_t)nb * o.batch * per;
    return all;
}

static bool same(const float *a, const float *b, size_t n) { return a && b && !memcmp(a, b, n * sizeof *a); }

static void test_determinism(void) {
    mk("t5");
    const char *classes[] = {"t5/a", "t5/b", "t5/c"};
    for (int k = 0; k < 3; k++) mk(classes[k]);
    uint8_t px[20 * 24 * 3];
    for (int i = 0; i < 30; i++) {
        for (size_t q = 0; q < sizeof px; q++) px[q] = (uint8_t)(q * (i + 3) + 17 * i);
        char rel[64];
        snprintf(rel, sizeof rel, "%s/%03d.%s", classes[i % 3], i, i % 2 ? "png" : "jpg");
        if (i % 2) write_png(rel, px, 24, 20, 3);
        else write_jpeg(rel, px, 24, 20, 3);
    }
    mp_dataset mem, memv, lazy, lazyv;
    const mp_folder_opts fo = {.height = 16, .width = 16, .val_fraction = 0.2};
    mp_folder_opts lo = fo;
    lo.lazy = true;
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t5"), &fo, &mem, &memv) == MP_OK, "%s", mp_last_error());
    CHECK(mp_dataset_load_folder(scratch_path(dir, "t5"), &lo, &lazy, &lazyv) == MP_OK, "%s", mp_last_error());
    CHECK(mem.images && lazy.src && mem.n == 24 && lazy.n == 24, "in memory and per batch");
    size_t n1, n2, n3, n4;
    const mp_loader_opts plain = {.batch = 5, .shuffle = true, .seed = 3, .workers = 1};
    float *a = epoch_batches(&mem, plain, 1, &n1), *b = epoch_batches(&lazy, plain, 1, &n2);
    CHECK(n1 == n2 && same(a, b, n1), "per-batch decoding gives the in-memory batches");
    free(a), free(b);
    mp_loader_opts aug = {.batch = 5, .shuffle = true, .seed = 3, .crop_pad = 2, .hflip = true,
                          .random_resized_crop = true, .workers = 1};
    a = epoch_batches(&lazy, aug, 2, &n1);
    aug.workers = 4;
    b = epoch_batches(&lazy, aug, 2, &n2);
    CHECK(n1 == n2 && same(a, b, n1), "per batch with augmentation: 1 and 4 decoder threads give the same batches");
    float *c = epoch_batches(&lazy, aug, 3, &n3);
    CHECK(!same(a, c, n1), "another epoch, other crops");
    free(a), free(b), free(c);
    aug.workers = 1;
    a = epoch_batches(&mem, aug, 2, &n1);
    aug.workers = 4;
    b = epoch_batches(&mem, aug, 2, &n4);
    CHECK(n1 == n4 && same(a, b, n1), "in memory with random-resized-crop: 1 and 4 threads the same");
    free(a), free(b);
    float ml[3], sl[3], mm[3], sm[3];
    mp_dataset_channel_stats(&lazy, ml, sl);
    mp_dataset_channel_stats(&mem, mm, sm);
    CHECK(fabsf(ml[0] - mm[0]) < 1e-5f && fabsf(sl[2] - sm[2]) < 1e-5f, "statistics of both paths agree");
    mp_dataset sub;
    CHECK(mp_dataset_subset(&lazy, 10, &sub) == MP_OK && sub.src == lazy.src && sub.n == 10, "lazy subset shares");
    mp_dataset_free(&lazy); /* the subset keeps the source alive */
    a = epoch_batches(&sub, plain, 0, &n1);
    CHECK(a != NULL, "subset loads after the parent is freed");
    free(a);
    mp_dataset_free(&sub);
    mp_dataset_free(&mem), mp_dataset_free(&memv), mp_dataset_free(&lazyv);
}

/* Colour to gray as Pillow's convert("L"): its values for these colours
 * (Pillow 13.0), one of which a rounding of (299 R + 587 G + 114 B) / 1000
 * misses by one (0, 0, 250: 29). */
static void test_luma(void) {
    mk("luma"), mk("luma/train"), mk("luma/val"), mk("luma/train/a"), mk("luma/val/a");
    const uint8_t px[5 * 3] = {0, 0, 250, 80, 30, 200, 255, 255, 255, 1, 2, 3, 200, 100, 50};
    const float pil[5] = {28, 64, 255, 2, 124};
    write_png("luma/train/a/0.png", px, 5, 1, 3);
    write_png("luma/val/a/0.png", px, 5, 1, 3);
    mp_dataset tr, va;
    CHECK(mp_dataset_load_folder(scratch_path(dir, "luma"), &(mp_folder_opts){.channels = 1}, &tr, &va) == MP_OK,
          "%s", mp_last_error());
    bool same = tr.c == 1 && tr.w == 5;
    for (int i = 0; same && i < 5; i++) same = tr.images[i] == pil[i] / 255.0f;
    CHECK(same, "gray as Pillow: %g %g %g %g %g", tr.images[0] * 255, tr.images[1] * 255, tr.images[2] * 255,
          tr.images[3] * 255, tr.images[4] * 255);
    mp_dataset_free(&tr);
    mp_dataset_free(&va);
}

int main(void) {
    scratch_dir_create(dir, sizeof dir, "test_folder");
    test_tree();
    test_luma();
    test_geometry();
    test_bad();
    test_errors();
    test_dangling();
    test_determinism();
    scratch_dir_remove(dir);
    return test_summary("test_folder");
}
