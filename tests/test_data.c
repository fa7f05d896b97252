/* test_data.c — dataset loaders: IDX (raw and gzip, every element type),
 * Fashion-MNIST layout, CIFAR-10 binary batches, synthetic data, stats,
 * subsets and finite checks; every corrupt-file case must give the right
 * status and a message naming the file. Files are written to a temp dir. */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "scratch_dir.h"
#include "core/error.h"
#include "data/dataset.h"

static char tmp[4096];

static const char *tpath(const char *name) { return scratch_path(tmp, name); }

static void write_bytes(const char *path, bool gz, const void *data, size_t len) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || gzwrite(f, data, (unsigned)len) != (int)len) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(2);
        }
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(data, 1, len, f) != len) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(2);
        }
        fclose(f);
    }
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* IDX header + payload (payload already big-endian) into buf; returns length. */
static size_t idx_build(unsigned char *buf, int type, int ndim, const uint32_t *dims, const void *payload,
                        size_t plen) {
    buf[0] = buf[1] = 0;
    buf[2] = (unsigned char)type;
    buf[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        buf[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        buf[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        buf[7 + 4 * i] = (unsigned char)dims[i];
    }
    memcpy(buf + 4 + 4 * ndim, payload, plen);
    return 4 + 4 * (size_t)ndim + plen;
}

static void put_be(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
}

static void write_idx(const char *path, bool gz, int type, int ndim, const uint32_t *dims, const void *payload,
                      size_t plen) {
    unsigned char *buf = malloc(16 + plen);
    size_t len = idx_build(buf, type, ndim, dims, payload, plen);
    write_bytes(path, gz, buf, len);
    free(buf);
}

static void write_labels(const char *path, bool gz, const unsigned char *labels, uint32_t n) {
    write_idx(path, gz, 0x08, 1, &n, labels, n);
}

static void test_idx_ubyte(void) {
    unsigned char px[3 * 2 * 3], lab[3] = {0, 2, 1};
    for (int i = 0; i < 18; i++) px[i] = (unsigned char)(i * 37 + 5);
    px[4] = 255;
    px[7] = 0;
    uint32_t dims[3] = {3, 2, 3};
    for (int variant = 0; variant < 3; variant++) {
        bool gzi = variant >= 1, gzl = variant == 2;
        const char *ip = tpath(gzi ? "u8-images.gz" : "u8-images"), *lp = tpath(gzl ? "u8-labels.gz" : "u8-labels");
        write_idx(ip, gzi, 0x08, 3, dims, px, sizeof px);
        write_labels(lp, gzl, lab, 3);
        mp_dataset d;
        mp_status s = mp_dataset_load_idx(ip, lp, &d);
        CHECK(s == MP_OK, "variant %d: %s", variant, mp_last_error());
        if (s != MP_OK) continue;
        CHECK(d.n == 3 && d.c == 1 && d.h == 2 && d.w == 3, "shape %d %d %d %d", d.n, d.c, d.h, d.w);
        CHECK(d.classes == 3, "classes %d", d.classes);
        CHECK(strcmp(d.source, ip) == 0, "source %s", d.source);
        int bad = 0;
        for (int i = 0; i < 18; i++) bad += d.images[i] != (float)px[i] / 255.0f;
        CHECK(bad == 0, "variant %d: %d pixels differ", variant, bad);
        CHECK(d.images[4] == 1.0f && d.images[7] == 0.0f, "range ends");
        CHECK(d.labels[0] == 0 && d.labels[1] == 2 && d.labels[2] == 1, "labels");
        mp_dataset_free(&d);
        CHECK(d.images == NULL && d.n == 0, "free zeroes");
        mp_dataset_free(&d); /* twice is fine */
    }
}

static void test_idx_types(void) {
    /* Two 1x2 images per type; values as stored. */
    const char *lp = tpath("types-labels");
    unsigned char lab[2] = {1, 0};
    write_labels(lp, false, lab, 2);
    uint32_t dims[3] = {2, 1, 2};
    unsigned char pay[64];
    struct {
        int type, size;
        double v[4];
    } cases[] = {
        {0x09, 1, {-5, 7, -128, 127}},
        {0x0B, 2, {-300, 1000, -32768, 32767}},
        {0x0C, 4, {70000, -2, -2147483647.0, 123456}},
        {0x0D, 4, {1.5, -0.25, 1e-3, 3e7}},
        {0x0E, 8, {0.125, 3.0, -1e-8, 2.5e10}},
    };
    for (int t = 0; t < 5; t++) {
        for (int i = 0; i < 4; i++) {
            double v = cases[t].v[i];
            uint64_t u;
            if (cases[t].type == 0x0D) {
                float f = (float)v;
                uint32_t b;
                memcpy(&b, &f, 4);
                u = b;
            } else if (cases[t].type == 0x0E) {
                memcpy(&u, &v, 8);
            } else {
                u = (uint64_t)(int64_t)v;
            }
            put_be(pay + i * cases[t].size, u, cases[t].size);
        }
        const char *ip = tpath("types-images.gz");
        write_idx(ip, true, cases[t].type, 3, dims, pay, 4 * (size_t)cases[t].size);
        mp_dataset d;
        mp_status s = mp_dataset_load_idx(ip, lp, &d);
        CHECK(s == MP_OK, "type 0x%02x: %s", cases[t].type, mp_last_error());
        if (s != MP_OK) continue;
        for (int i = 0; i < 4; i++)
            CHECK(d.images[i] == (float)cases[t].v[i], "type 0x%02x value %d: %g vs %g", cases[t].type, i,
                  d.images[i], cases[t].v[i]);
        CHECK(d.classes == 2, "classes %d", d.classes);
        mp_dataset_free(&d);
    }
}

static void test_idx_errors(void) {
    mp_dataset d;
    unsigned char lab[4] = {0, 1, 2, 3};
    const char *lp = tpath("err-labels"), *lp4 = tpath("err-labels4.gz");
    write_labels(lp, false, lab, 3);
    write_labels(lp4, true, lab, 4);
    unsigned char px[3 * 4];
    memset(px, 7, sizeof px);
    uint32_t dims[3] = {3, 2, 2};

    const char *p = tpath("bad-magic");
    unsigned char buf[64];
    size_t len = idx_build(buf, 0x08, 3, dims, px, sizeof px);
    buf[0] = 0x12;
    buf[1] = 0x34;
    write_bytes(p, false, buf, len);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "bad IDX magic 0x12340803", "0x00000803");
    CHECK(d.images == NULL && d.n == 0, "out zeroed on error");

    p = tpath("zero-magic.gz");
    memset(buf, 0, 32);
    write_bytes(p, true, buf, 32);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "bad IDX magic 0x00000000 (expected 0x00000803");

    p = tpath("bad-type.gz");
    write_idx(p, true, 0x0A, 3, dims, px, sizeof px);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "unknown IDX element type 0x0a");

    /* doubles: a pixel past float's range is named, not read as inf */
    unsigned char f64[12 * 8];
    memset(f64, 0, sizeof f64);
    const double huge = 1e300;
    uint64_t u;
    memcpy(&u, &huge, 8);
    for (int b = 0; b < 8; b++) f64[8 + b] = (unsigned char)(u >> (56 - 8 * b)); /* value 1, big-endian */
    p = tpath("huge-f64.gz");
    write_idx(p, true, 0x0E, 3, dims, f64, sizeof f64);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "value 1 is 1e+300, beyond float32's range");

    /* A labels file given as images: wrong ndim. */
    CHECK_ERR(mp_dataset_load_idx(lp, lp, &d), MP_ERR_FORMAT, lp, "3 dimensions", "has 1");

    const char *good = tpath("good-images");
    write_idx(good, false, 0x08, 3, dims, px, sizeof px);
    CHECK_ERR(mp_dataset_load_idx(good, good, &d), MP_ERR_FORMAT, good, "labels must have 1 dimension");
    CHECK_ERR(mp_dataset_load_idx(good, lp4, &d), MP_ERR_FORMAT, good, lp4, "count mismatch");

    /* Truncated: larger incompressible payload so the gzip stream is long. */
    enum { TN = 50, TH = 28, TW = 28 };
    unsigned char *big = malloc(TN * TH * TW);
    uint32_t x = 12345;
    for (int i = 0; i < TN * TH * TW; i++) big[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
    uint32_t bdims[3] = {TN, TH, TW};
    unsigned char blab[TN] = {0};
    const char *blp = tpath("big-labels.gz");
    write_labels(blp, true, blab, TN);
    p = tpath("trunc-images.gz");
    write_idx(p, true, 0x08, 3, bdims, big, TN * TH * TW);
    CHECK(truncate(p, file_size(p) / 2) == 0, "truncate");
    CHECK_ERR(mp_dataset_load_idx(p, blp, &d), MP_ERR_FORMAT, p, "truncated", "39200 bytes of image data");

    /* Cut inside the gzip trailer: all values arrive, the CRC/length check cannot. */
    p = tpath("trunc-trailer.gz");
    write_idx(p, true, 0x08, 3, bdims, big, TN * TH * TW);
    CHECK(truncate(p, file_size(p) - 3) == 0, "truncate");
    CHECK_ERR(mp_dataset_load_idx(p, blp, &d), MP_ERR_FORMAT, p, "truncated");
    CHECK(!strstr(mp_last_error(), "<fd:"), "zlib's '<fd:N>: ' prefix removed: %s", mp_last_error());

    p = tpath("corrupt-images.gz");
    write_idx(p, true, 0x08, 3, bdims, big, TN * TH * TW);
    {
        FILE *f = fopen(p, "r+b");
        long sz = file_size(p);
        for (long off = sz / 3; off < sz / 3 + 64; off++) {
            fseek(f, off, SEEK_SET);
            fputc(0xA5 ^ (int)off, f);
        }
        fclose(f);
    }
    CHECK_ERR(mp_dataset_load_idx(p, blp, &d), MP_ERR_FORMAT, p, "corrupt");

    p = tpath("trunc-images");
    write_idx(p, false, 0x08, 3, bdims, big, 1024);
    CHECK_ERR(mp_dataset_load_idx(p, blp, &d), MP_ERR_FORMAT, p,
              "truncated: expected 39200 bytes of image data, got 1024");
    free(big);

    p = tpath("trunc-labels");
    write_labels(p, false, lab, 3);
    CHECK(truncate(p, 9) == 0, "truncate");
    CHECK_ERR(mp_dataset_load_idx(good, p, &d), MP_ERR_FORMAT, p, "truncated: expected 3 bytes of label data, got 1");

    p = tpath("trunc-header");
    idx_build(buf, 0x08, 3, dims, px, sizeof px);
    write_bytes(p, false, buf, 6);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "truncated", "header");
    p = tpath("empty.gz");
    write_bytes(p, true, buf, 0);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "truncated");

    p = tpath("absurd");
    uint32_t adims[3] = {0xFFFFFFFFu, 28, 28};
    write_idx(p, false, 0x08, 3, adims, px, sizeof px);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "absurd", "4294967295 x 28 x 28");
    uint32_t adims2[3] = {3000000, 3000, 3000};
    write_idx(p, false, 0x08, 3, adims2, px, sizeof px);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "absurd");
    uint32_t zdims[3] = {3, 0, 5};
    write_idx(p, false, 0x08, 3, zdims, px, 0);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "image size 0 x 5");
    uint32_t ndims[3] = {0, 2, 2};
    write_idx(p, false, 0x08, 3, ndims, px, 0);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "no samples");

    p = tpath("trailing.gz");
    unsigned char px2[3 * 4 + 5] = {0};
    write_idx(p, true, 0x08, 3, dims, px2, sizeof px2);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_FORMAT, p, "unexpected data");

    /* Float labels are refused; labels past the class limit too. */
    p = tpath("float-labels");
    unsigned char fl[12] = {0};
    write_idx(p, false, 0x0D, 1, (uint32_t[]){3}, fl, 12);
    CHECK_ERR(mp_dataset_load_idx(good, p, &d), MP_ERR_FORMAT, p, "integers");
    p = tpath("int-labels");
    unsigned char il[12] = {0};
    put_be(il + 4, 1000, 4);
    write_idx(p, false, 0x0C, 1, (uint32_t[]){3}, il, 12);
    CHECK_ERR(mp_dataset_load_idx(good, p, &d), MP_ERR_FORMAT, p, "sample 1", "1000");
    put_be(il + 8, (uint64_t)-3, 4);
    put_be(il + 4, 999, 4);
    write_idx(p, false, 0x0C, 1, (uint32_t[]){3}, il, 12);
    CHECK_ERR(mp_dataset_load_idx(good, p, &d), MP_ERR_FORMAT, p, "sample 2", "-3");
    put_be(il + 8, 4, 4);
    write_idx(p, false, 0x0C, 1, (uint32_t[]){3}, il, 12);
    CHECK(mp_dataset_load_idx(good, p, &d) == MP_OK && d.classes == 1000, "classes %d: %s", d.classes,
          mp_last_error());
    mp_dataset_free(&d);

    /* NaN / inf in float data: the first bad sample is named. */
    p = tpath("nan-images.gz");
    unsigned char fp[3 * 4 * 4];
    for (int i = 0; i < 12; i++) {
        float f = i == 9 ? NAN : i == 11 ? INFINITY : 0.5f;
        uint32_t b;
        memcpy(&b, &f, 4);
        put_be(fp + 4 * i, b, 4);
    }
    write_idx(p, true, 0x0D, 3, dims, fp, sizeof fp);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_NONFINITE, p, "sample 2", "NaN", "row 0, column 1");
    CHECK(d.images == NULL, "freed on NONFINITE");
    p = tpath("inf-images");
    unsigned char dp[3 * 4 * 8] = {0};
    double inf = -INFINITY;
    uint64_t ub;
    memcpy(&ub, &inf, 8);
    put_be(dp + 8 * 5, ub, 8);
    write_idx(p, false, 0x0E, 3, dims, dp, sizeof dp);
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_NONFINITE, p, "sample 1", "-inf");

    p = tpath("does-not-exist.gz");
    CHECK_ERR(mp_dataset_load_idx(p, lp, &d), MP_ERR_IO, p, "not found");
    CHECK_ERR(mp_dataset_load_idx(good, p, &d), MP_ERR_IO, p, "not found");
    CHECK_ERR(mp_dataset_load_idx(tmp, lp, &d), MP_ERR_IO, tmp, "directory");
}

static void test_fashion_layout(void) {
    mp_dataset d;
    const char *missing = tpath("no-fashion-here");
    CHECK_ERR(mp_dataset_load_fashion_mnist(missing, true, &d), MP_ERR_IO, missing,
              "apt-get install dataset-fashion-mnist");
    const char *dir = tpath("fashion");
    mkdir(dir, 0755);
    CHECK_ERR(mp_dataset_load_fashion_mnist(dir, true, &d), MP_ERR_IO, "train-images-idx3-ubyte.gz", dir,
              "apt-get install dataset-fashion-mnist");
    char ip[4400], lp[4400];
    snprintf(ip, sizeof ip, "%s/t10k-images-idx3-ubyte", dir); /* uncompressed names */
    snprintf(lp, sizeof lp, "%s/t10k-labels-idx1-ubyte.gz", dir);
    unsigned char px[2 * 28 * 28], lab[2] = {9, 3};
    for (int i = 0; i < 2 * 28 * 28; i++) px[i] = (unsigned char)i;
    write_idx(ip, false, 0x08, 3, (uint32_t[]){2, 28, 28}, px, sizeof px);
    write_labels(lp, true, lab, 2);
    mp_status s = mp_dataset_load_fashion_mnist(dir, false, &d);
    CHECK(s == MP_OK, "%s", mp_last_error());
    if (s == MP_OK) {
        CHECK(d.n == 2 && d.h == 28 && d.w == 28 && d.classes == 10, "shape/classes");
        CHECK(d.images[2 * 784 - 1] == (float)(unsigned char)(2 * 784 - 1) / 255.0f, "last pixel");
        CHECK(strstr(d.source, "Fashion-MNIST test") && strstr(d.source, ip), "source %s", d.source);
        mp_dataset_free(&d);
    }
    /* a label past Fashion-MNIST's 10 classes names the labels file and the sample */
    lab[1] = 201;
    write_labels(lp, true, lab, 2);
    CHECK_ERR(mp_dataset_load_fashion_mnist(dir, false, &d), MP_ERR_FORMAT, lp,
              "label 201 of sample 1 is outside the dataset's 10 classes [0, 10)");
    CHECK(d.images == NULL && d.n == 0, "a failed load left a dataset");
}

/* Train and test sets checked against each other when opened: one sample
 * shape, test labels within the training classes. */
static void test_compatible(void) {
    mp_dataset train, test, small, other;
    CHECK_ERR(mp_dataset_synthetic(20, 1, 28, 28, 10, 1, &train), MP_OK);
    CHECK_ERR(mp_dataset_synthetic(10, 1, 56, 56, 10, 2, &test), MP_OK);
    CHECK_ERR(mp_dataset_synthetic(10, 1, 28, 28, 4, 3, &small), MP_OK);
    CHECK_ERR(mp_dataset_synthetic(10, 3, 28, 28, 10, 4, &other), MP_OK);
    mp_dataset_set_source(&train, "train.idx");
    mp_dataset_set_source(&test, "t10k.idx");
    CHECK_ERR(mp_dataset_check_compatible(&train, &test), MP_ERR_SHAPE,
              "the test set t10k.idx has samples of 1x56x56 but the training set train.idx has 1x28x28");
    CHECK_ERR(mp_dataset_check_compatible(&test, &train), MP_ERR_SHAPE, "1x28x28", "1x56x56");
    CHECK_ERR(mp_dataset_check_compatible(&train, &other), MP_ERR_SHAPE, "3x28x28");
    CHECK_ERR(mp_dataset_check_compatible(&train, &small), MP_OK);
    CHECK_ERR(mp_dataset_check_compatible(NULL, NULL), MP_ERR_INVALID_ARG, "no training set");
    CHECK_ERR(mp_dataset_check_compatible(&train, NULL), MP_ERR_INVALID_ARG, "no test set");
    mp_dataset_info info = {.n = 7};
    mp_dataset_describe(NULL, &info); /* nothing to describe: zeros */
    CHECK(info.n == 0 && info.source == NULL, "describe(NULL) left n %d", info.n);
    mp_dataset_describe(&train, NULL);
    /* test labels 0..9 against a 4-class training set: the first one >= 4 is named */
    mp_dataset_set_source(&small, "small.idx");
    int first = 0, first9 = 0;
    while (train.labels[first] < 4) first++;
    while (train.labels[first9] < 9) first9++;
    char want[96], want9[96];
    snprintf(want, sizeof want, "the test set train.idx: label %d of sample %d", (int)train.labels[first], first);
    snprintf(want9, sizeof want9, "labels.idx: label 9 of sample %d", first9);
    CHECK_ERR(mp_dataset_check_compatible(&small, &train), MP_ERR_FORMAT, want,
              "outside the training set's 4 classes [0, 4) (small.idx)");
    CHECK_ERR(mp_dataset_check_labels(&train, 10, "labels.idx"), MP_OK);
    CHECK_ERR(mp_dataset_check_labels(&train, 9, "labels.idx"), MP_ERR_FORMAT, want9);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    mp_dataset_free(&small);
    mp_dataset_free(&other);
}

/* CIFAR record g: label g % 10, pixel p = (g * 31 + p * 7) & 255. */
static void cifar_write(const char *path, int first, int records, int bad_record) {
    unsigned char *buf = malloc((size_t)records * 3073);
    for (int r = 0; r < records; r++) {
        unsigned char *rec = buf + (size_t)r * 3073;
        rec[0] = (unsigned char)(r == bad_record ? 10 : (first + r) % 10);
        for (int p = 0; p < 3072; p++) rec[1 + p] = (unsigned char)(((first + r) * 31 + p * 7) & 255);
    }
    write_bytes(path, false, buf, (size_t)records * 3073);
    free(buf);
}

static void test_cifar(void) {
    mp_dataset d;
    const char *dir = tpath("cifar");
    mkdir(dir, 0755);
    int counts[5] = {2, 1, 1, 1, 3}, first = 0;
    char path[4400];
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, i + 1);
        cifar_write(path, first, counts[i], -1);
        first += counts[i];
    }
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    cifar_write(path, 100, 2, -1);
    mp_status s = mp_dataset_load_cifar10(dir, true, &d);
    CHECK(s == MP_OK, "%s", mp_last_error());
    if (s == MP_OK) {
        CHECK(d.n == 8 && d.c == 3 && d.h == 32 && d.w == 32 && d.classes == 10, "shape");
        int bad = 0;
        for (int g = 0; g < 8; g++) {
            bad += d.labels[g] != g % 10;
            for (int p = 0; p < 3072; p++)
                bad += d.images[(size_t)g * 3072 + p] != (float)(unsigned char)((g * 31 + p * 7) & 255) / 255.0f;
        }
        CHECK(bad == 0, "%d values differ", bad);
        mp_dataset_free(&d);
    }
    s = mp_dataset_load_cifar10(dir, false, &d);
    CHECK(s == MP_OK && d.n == 2 && d.labels[1] == 1 && d.images[3072] == (float)(101 * 31 & 255) / 255.0f, "test: %s",
          mp_last_error());
    mp_dataset_free(&d);

    /* The tarball's subdirectory is found too. */
    const char *top = tpath("cifar-top"), *sub = tpath("cifar-top/cifar-10-batches-bin");
    mkdir(top, 0755);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/test_batch.bin", sub);
    cifar_write(path, 0, 3, -1);
    s = mp_dataset_load_cifar10(top, false, &d);
    CHECK(s == MP_OK && d.n == 3, "subdir: %s", mp_last_error());
    mp_dataset_free(&d);

    /* Wrong size, bad label, missing file, missing directory. */
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    cifar_write(path, 0, 3, 1);
    CHECK_ERR(mp_dataset_load_cifar10(dir, false, &d), MP_ERR_FORMAT, path, "record 1", "label 10");
    CHECK(d.images == NULL && d.n == 0, "zeroed after error");
    {
        FILE *f = fopen(path, "ab");
        fputs("extra", f);
        fclose(f);
    }
    CHECK_ERR(mp_dataset_load_cifar10(dir, false, &d), MP_ERR_FORMAT, path, "multiple of the 3073-byte");
    write_bytes(path, false, "", 0);
    CHECK_ERR(mp_dataset_load_cifar10(dir, false, &d), MP_ERR_FORMAT, path, "empty");
    snprintf(path, sizeof path, "%s/data_batch_4.bin", dir);
    unlink(path);
    CHECK_ERR(mp_dataset_load_cifar10(dir, true, &d), MP_ERR_IO, path, "not found", "cifar-10-binary");
    const char *nodir = tpath("no-cifar");
    CHECK_ERR(mp_dataset_load_cifar10(nodir, true, &d), MP_ERR_IO, nodir, "not found");
}

static void test_synthetic(void) {
    mp_dataset a, b, c, p;
    CHECK(mp_dataset_synthetic(400, 2, 6, 5, 4, 1, &a) == MP_OK, "%s", mp_last_error());
    CHECK(mp_dataset_synthetic(400, 2, 6, 5, 4, 1, &b) == MP_OK, "%s", mp_last_error());
    CHECK(mp_dataset_synthetic(400, 2, 6, 5, 4, 2, &c) == MP_OK, "%s", mp_last_error());
    CHECK(mp_dataset_synthetic(50, 2, 6, 5, 4, 1, &p) == MP_OK, "%s", mp_last_error());
    size_t per = 2 * 6 * 5;
    CHECK(memcmp(a.images, b.images, 400 * per * sizeof(float)) == 0 &&
              memcmp(a.labels, b.labels, 400 * sizeof(int32_t)) == 0,
          "same seed, same data");
    CHECK(memcmp(a.images, c.images, 400 * per * sizeof(float)) != 0, "different seed, different data");
    CHECK(memcmp(a.images, p.images, 50 * per * sizeof(float)) == 0 &&
              memcmp(a.labels, p.labels, 50 * sizeof(int32_t)) == 0,
          "smaller n is a prefix");
    CHECK(a.classes == 4 && a.c == 2 && a.h == 6 && a.w == 5 && strstr(a.source, "synthetic"), "meta");
    int hist[4] = {0}, out_of_range = 0;
    for (int i = 0; i < 400; i++) hist[a.labels[i]]++;
    for (size_t k = 0; k < 400 * per; k++) out_of_range += a.images[k] < 0 || a.images[k] > 1;
    CHECK(hist[0] == 100 && hist[1] == 100 && hist[2] == 100 && hist[3] == 100, "balanced %d %d %d %d", hist[0],
          hist[1], hist[2], hist[3]);
    CHECK(out_of_range == 0, "values in [0, 1]");
    /* Learnable: nearest class mean from the first 300 classifies the rest. */
    double mean[4][60] = {{0}};
    for (int i = 0; i < 300; i++)
        for (size_t k = 0; k < per; k++) mean[a.labels[i]][k] += a.images[i * per + k] / 75.0;
    int correct = 0;
    for (int i = 300; i < 400; i++) {
        int best = 0;
        double bd = 1e30;
        for (int q = 0; q < 4; q++) {
            double dist = 0;
            for (size_t k = 0; k < per; k++) dist += pow(a.images[i * per + k] - mean[q][k], 2);
            if (dist < bd) bd = dist, best = q;
        }
        correct += best == a.labels[i];
    }
    CHECK(correct >= 90, "nearest-mean accuracy %d/100", correct);
    mp_dataset_free(&a);
    mp_dataset_free(&b);
    mp_dataset_free(&c);
    mp_dataset_free(&p);

    mp_dataset d;
    CHECK_ERR(mp_dataset_synthetic(0, 1, 4, 4, 2, 1, &d), MP_ERR_INVALID_ARG, "synthetic", "n = 0");
    CHECK_ERR(mp_dataset_synthetic(10, 0, 4, 4, 2, 1, &d), MP_ERR_INVALID_ARG, "c = 0");
    CHECK_ERR(mp_dataset_synthetic(10, 1, -4, 4, 2, 1, &d), MP_ERR_INVALID_ARG, "h = -4");
    CHECK_ERR(mp_dataset_synthetic(10, 1, 4, 100000, 2, 1, &d), MP_ERR_INVALID_ARG, "w = 100000");
    CHECK_ERR(mp_dataset_synthetic(10, 1, 4, 4, 1001, 1, &d), MP_ERR_INVALID_ARG, "classes = 1001");
    CHECK_ERR(mp_dataset_synthetic(10, 1, 4, 4, 0, 1, &d), MP_ERR_INVALID_ARG, "classes = 0");
    CHECK_ERR(mp_dataset_synthetic(1 << 24, 64, 64, 64, 10, 1, &d), MP_ERR_INVALID_ARG, "more than the limit");
    CHECK_ERR(mp_dataset_synthetic(1, 64, 4096, 4096, 1000, 1, &d), MP_ERR_INVALID_ARG, "too large");
    CHECK(d.images == NULL, "zeroed");
}

static void test_stats_subset_finite(void) {
    mp_dataset d = {.n = 4, .c = 2, .h = 1, .w = 2, .classes = 3};
    d.images = malloc(4 * 4 * sizeof(float));
    d.labels = malloc(4 * sizeof(int32_t));
    /* channel 0 values: 0..7 over samples; channel 1: constant 2 except one 6 */
    for (int i = 0; i < 4; i++) {
        d.images[i * 4 + 0] = (float)(2 * i);
        d.images[i * 4 + 1] = (float)(2 * i + 1);
        d.images[i * 4 + 2] = 2.0f;
        d.images[i * 4 + 3] = i == 3 ? 10.0f : 2.0f;
        d.labels[i] = i % 3;
    }
    mp_dataset_set_source(&d, "hand-made");
    float mean[2], sd[2];
    mp_dataset_channel_stats(&d, mean, sd);
    CHECK(fabsf(mean[0] - 3.5f) < 1e-6f && fabsf(sd[0] - sqrtf(5.25f)) < 1e-6f, "ch0 %g %g", mean[0], sd[0]);
    CHECK(fabsf(mean[1] - 3.0f) < 1e-6f && fabsf(sd[1] - sqrtf(7.0f)) < 1e-6f, "ch1 %g %g", mean[1], sd[1]);
    CHECK(mp_dataset_check_finite(&d) == MP_OK, "finite");

    mp_dataset s;
    CHECK(mp_dataset_subset(&d, 2, &s) == MP_OK, "%s", mp_last_error());
    CHECK(s.n == 2 && s.c == 2 && s.w == 2 && s.classes == 3 && s.images != d.images &&
              memcmp(s.images, d.images, 8 * sizeof(float)) == 0 && s.labels[1] == 1,
          "subset copy");
    CHECK(strstr(s.source, "hand-made") && strstr(s.source, "first 2"), "subset source %s", s.source);
    mp_dataset_free(&s);
    CHECK_ERR(mp_dataset_subset(&d, 5, &s), MP_ERR_INVALID_ARG, "hand-made", "5");
    CHECK_ERR(mp_dataset_subset(&d, 0, &s), MP_ERR_INVALID_ARG, "hand-made");

    d.images[3 * 4 + 2] = NAN;
    CHECK_ERR(mp_dataset_check_finite(&d), MP_ERR_NONFINITE, "hand-made", "sample 3", "channel 1");
    mp_dataset_free(&d);

    char longsrc[400];
    memset(longsrc, 'x', sizeof longsrc - 1);
    longsrc[sizeof longsrc - 1] = 0;
    mp_dataset_set_source(&d, "%s", longsrc);
    CHECK(strlen(d.source) == sizeof d.source - 1 && strcmp(d.source + sizeof d.source - 4, "...") == 0,
          "long source cut with ...");
}

static void test_real_fashion(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    struct stat st;
    if (stat(dir, &st) != 0) {
        printf("test_data: %s not present, real-data check skipped\n", dir);
        return;
    }
    for (int train = 1; train >= 0; train--) {
        mp_dataset d;
        mp_status s = mp_dataset_load_fashion_mnist(dir, train, &d);
        CHECK(s == MP_OK, "%s", mp_last_error());
        if (s != MP_OK) continue;
        CHECK(d.n == (train ? 60000 : 10000) && d.c == 1 && d.h == 28 && d.w == 28 && d.classes == 10, "n %d", d.n);
        float lo = 1, hi = 0;
        for (size_t k = 0; k < (size_t)d.n * 784; k++) {
            lo = fminf(lo, d.images[k]);
            hi = fmaxf(hi, d.images[k]);
        }
        CHECK(lo == 0.0f && hi == 1.0f, "range [%g, %g]", lo, hi);
        int hist[10] = {0};
        for (int i = 0; i < d.n; i++) hist[d.labels[i]]++;
        for (int k = 0; k < 10; k++)
            CHECK(hist[k] == (train ? 6000 : 1000), "class %d has %d samples", k, hist[k]);
        CHECK(mp_dataset_check_finite(&d) == MP_OK, "finite");
        mp_dataset_free(&d);
    }
}

/* The public openers and the channel statistics given NULL: an error naming
 * the argument (they passed it on to stat and printf's %s before), or nothing. */
static void test_null_arguments(void) {
    mp_dataset *d = NULL;
    CHECK_ERR(mp_dataset_open_idx(NULL, "labels.idx", &d), MP_ERR_INVALID_ARG, "IDX dataset: null images path");
    CHECK_ERR(mp_dataset_open_idx("images.idx", NULL, &d), MP_ERR_INVALID_ARG, "IDX dataset: null labels path");
    CHECK_ERR(mp_dataset_open_cifar10(NULL, true, &d), MP_ERR_INVALID_ARG, "CIFAR-10 dataset: null directory");
    CHECK_ERR(mp_dataset_open_npy("x.npy", NULL, NULL, &d), MP_ERR_INVALID_ARG, "npy dataset: null labels path");
    float mean[1] = {7}, sd[1] = {7};
    mp_dataset_channel_stats(NULL, mean, sd);
    CHECK(mean[0] == 7 && sd[0] == 7, "statistics of no dataset were written");
    mp_dataset *syn = NULL;
    CHECK(mp_dataset_create_synthetic(8, 1, 4, 4, 3, 1, &syn) == MP_OK, "%s", mp_last_error());
    mp_dataset_channel_stats(syn, NULL, NULL); /* nothing to write to: nothing, no crash */
    mp_dataset_channel_stats(syn, mean, sd);
    CHECK(mean[0] != 7 && sd[0] > 0, "synthetic statistics: mean %g std %g", mean[0], sd[0]);
    mp_dataset_destroy(syn);
}

/* More than the host can give (core/host_mem.h; MIXPREC_HOST_MEM_LIMIT lowers
 * that figure to 50 bytes here): each loader and copy refuses with
 * MP_ERR_NOMEM naming what the bytes were for, instead of allocating. */
static void test_host_mem(void) {
    mp_dataset d, a, b;
    CHECK(mp_dataset_synthetic(20, 1, 4, 4, 2, 1, &d) == MP_OK, "%s", mp_last_error());
    unsigned char px[18] = {0}, lab[3] = {0, 1, 0};
    const uint32_t dims[3] = {3, 2, 3};
    const char *ip = tpath("limit-images"), *lp = tpath("limit-labels"), *cdir = tpath("cifar-limit");
    write_idx(ip, false, 0x08, 3, dims, px, sizeof px);
    write_labels(lp, false, lab, 3);
    mkdir(cdir, 0755);
    char path[4400];
    snprintf(path, sizeof path, "%s/test_batch.bin", cdir);
    cifar_write(path, 0, 2, -1);
    const float images[2 * 16] = {0};
    const int32_t labels[2] = {0, 1};
    mp_dataset *made = NULL;

    setenv("MIXPREC_HOST_MEM_LIMIT", "50", 1);
    const char *avail = "50 bytes (0.00 GiB) available (MIXPREC_HOST_MEM_LIMIT)";
    CHECK_ERR(mp_dataset_synthetic(100, 1, 8, 8, 10, 1, &a), MP_ERR_NOMEM,
              "out of memory for the synthetic dataset's 100 samples of 1x8x8: asked 25600 bytes (0.00 GiB)", avail);
    CHECK(a.images == NULL && a.labels == NULL, "nothing kept after the refusal");
    CHECK_ERR(mp_dataset_load_idx(ip, lp, &a), MP_ERR_NOMEM, "out of memory for the images of ", ip,
              " (values 0 to 18 of 18): asked 72 bytes", avail);
    CHECK_ERR(mp_dataset_load_cifar10(cdir, false, &a), MP_ERR_NOMEM,
              "out of memory for the 2 CIFAR-10 test images of ", cdir, "asked 24576 bytes", avail);
    CHECK_ERR(mp_dataset_slice(&d, 0, 10, &a), MP_ERR_NOMEM, "out of memory for a copy of 10 samples of ", d.source,
              "asked 640 bytes", avail);
    CHECK_ERR(mp_dataset_split(&d, 0.5, &a, &b), MP_ERR_NOMEM, "out of memory for the 10 train and 10 held-out samples "
              "split from ", d.source, "asked 1280 bytes", avail);
    CHECK_ERR(mp_dataset_create(2, 1, 4, 4, 2, images, labels, "two", &made), MP_ERR_NOMEM,
              "out of memory for a copy of the 2 samples of two (1x4x4 each): asked 128 bytes", avail);
    CHECK(made == NULL, "no dataset after the refusal");
    setenv("MIXPREC_HOST_MEM_LIMIT", "100000", 1); /* 25600 bytes fit under this one */
    CHECK(mp_dataset_synthetic(100, 1, 8, 8, 10, 1, &a) == MP_OK, "%s", mp_last_error());
    unsetenv("MIXPREC_HOST_MEM_LIMIT");
    mp_dataset_free(&a);
    mp_dataset_free(&d);
}

int main(void) {
    scratch_dir_create(tmp, sizeof tmp, "test_data");
    test_null_arguments();
    test_idx_ubyte();
    test_idx_types();
    test_idx_errors();
    test_fashion_layout();
    test_compatible();
    test_cifar();
    test_synthetic();
    test_host_mem();
    test_stats_subset_finite();
    test_real_fashion();
    scratch_dir_remove(tmp);
    return test_summary("test_data");
}
