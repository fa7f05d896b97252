/* data_export.c — writes copies of Fashion-MNIST (its IDX files) for the
 * data-format tests: the first NTRAIN training samples and the first NTEST
 * test samples as
 *   OUT/npy/{x_train,y_train,x_test,y_test}.npy   uint8 (N, 28, 28), int64 labels
 *   OUT/folder/{train,val}/<k>_<name>/<index>.png gray PNG, <index> = %05d
 * so both hold the IDX bytes in the IDX order (the folder loader orders
 * samples by file name).
 *   data_export IDX_DIR OUT NTRAIN NTEST */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <png.h>

#include "data/dataset.h"

static const char *const names[10] = {"T-shirt", "Trouser", "Pullover", "Dress", "Coat",
                                      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle-boot"};

static void die(const char *what, const char *path) {
    fprintf(stderr, "data_export: %s %s: %s\n", what, path, errno ? strerror(errno) : mp_last_error());
    exit(1);
}

static void mkdirs(const char *p) {
    if (mkdir(p, 0755) != 0 && errno != EEXIST) die("mkdir", p);
}

static uint8_t byte_of(float v) { return (uint8_t)lrintf(v * 255.0f); }

/* .npy v1.0 with the header padded to 64 bytes. */
static void write_npy(const char *path, const char *descr, const char *shape, const void *data, size_t len) {
    char dict[160];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    int hlen = dl + 1;
    while ((10 + hlen) % 64) hlen++;
    FILE *f = fopen(path, "wb");
    if (!f) die("open", path);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 255, f);
    fputc(hlen >> 8, f);
    fwrite(dict, 1, (size_t)dl, f);
    for (int i = dl; i < hlen - 1; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, len, f);
    if (fclose(f) != 0) die("write", path);
}

static void export_part(const mp_dataset *d, int n, const char *out, const char *split, const char *tag) {
    const size_t per = (size_t)d->h * d->w;
    uint8_t *x = malloc((size_t)n * per);
    int64_t *y = malloc((size_t)n * sizeof *y);
    char path[4096], shape[64];
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < per; k++) x[(size_t)i * per + k] = byte_of(d->images[(size_t)i * per + k]);
        y[i] = d->labels[i];
    }
    snprintf(shape, sizeof shape, "(%d, %d, %d)", n, d->h, d->w);
    snprintf(path, sizeof path, "%s/npy/x_%s.npy", out, tag);
    write_npy(path, "|u1", shape, x, (size_t)n * per);
    snprintf(shape, sizeof shape, "(%d,)", n);
    snprintf(path, sizeof path, "%s/npy/y_%s.npy", out, tag);
    write_npy(path, "<i8", shape, y, (size_t)n * sizeof *y);
    for (int k = 0; k < 10; k++) {
        snprintf(path, sizeof path, "%s/folder/%s/%d_%s", out, split, k, names[k]);
        mkdirs(path);
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/folder/%s/%d_%s/%05d.png", out, split, (int)y[i], names[y[i]], i);
        png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)d->w, .height = (png_uint_32)d->h,
                        .format = PNG_FORMAT_GRAY};
        if (!png_image_write_to_file(&im, path, 0, x + (size_t)i * per, 0, NULL)) die("png", path);
    }
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: data_export IDX_DIR OUT NTRAIN NTEST\n");
        return 2;
    }
    const char *out = argv[2];
    const int ntrain = atoi(argv[3]), ntest = atoi(argv[4]);
    mp_dataset tr, te;
    if (mp_dataset_load_fashion_mnist(argv[1], true, &tr) != MP_OK) die("load", argv[1]);
    if (mp_dataset_load_fashion_mnist(argv[1], false, &te) != MP_OK) die("load", argv[1]);
    if (ntrain < 1 || ntrain > tr.n || ntest < 1 || ntest > te.n) {
        fprintf(stderr, "data_export: NTRAIN 1..%d, NTEST 1..%d\n", tr.n, te.n);
        return 2;
    }
    char path[4096];
    mkdirs(out);
    snprintf(path, sizeof path, "%s/npy", out);
    mkdirs(path);
    snprintf(path, sizeof path, "%s/folder", out);
    mkdirs(path);
    for (const char *s = "train"; s; s = strcmp(s, "train") ? NULL : "val") {
        snprintf(path, sizeof path, "%s/folder/%s", out, s);
        mkdirs(path);
    }
    export_part(&tr, ntrain, out, "train", "train");
    export_part(&te, ntest, out, "val", "test");
    mp_dataset_free(&tr);
    mp_dataset_free(&te);
    return 0;
}
