/* decode_throughput.c — images/s of the image-folder loader beside a plain
 * single-threaded libjpeg-turbo (or libpng) decode loop over the same files.
 *
 *   bench/decode_throughput [--files N] [--big-files N] [--epochs E]
 *
 * Writes its own images into a temporary folder (10 classes): 32x32 RGB PNG,
 * 32x32 RGB JPEG and 224x224 RGB JPEG (quality 90, smooth content plus
 * noise), then measures for each set
 *   - plain: read from memory and decode to RGB bytes on one thread (the
 *     libraries alone: the ceiling of one core),
 *   - loader: one epoch of mp_loader batches (batch 64) over the folder
 *     dataset decoded per batch (file read, decode, floats, resample, batch
 *     copy), with 1 decoder thread and with all online CPUs; for 224x224
 *     also with random-resized-crop to 224x224,
 *   - in memory: the one-time decode when the dataset is opened with all
 *     online CPUs (the path for datasets under the memory cap).
 * Prints the CPU and the load average, then one row per set. */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jpeglib.h>
#include <png.h>

#include "core/cpu_features.h"
#include "core/rng.h"
#include "data/decode_pool.h"
#include "data/image_decode.h"
#include "mixprec.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void make_pixels(uint8_t *px, int w, int h, int seed) {
    mp_rng r;
    mp_rng_seed(&r, (uint64_t)seed);
    const double fx = 0.05 + 0.1 * mp_rng_uniform(&r), fy = 0.05 + 0.1 * mp_rng_uniform(&r);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                double v = 128 + 90 * sin(fx * x * (c + 1) + fy * y + seed) + 20 * (mp_rng_uniform(&r) - 0.5);
                px[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

static void write_jpeg(const char *path, const uint8_t *px, int w, int h) {
    FILE *f = fopen(path, "wb");
    if (!f) exit(1);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * 3);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

static void write_png(const char *path, const uint8_t *px, int w, int h) {
    png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w, .height = (png_uint_32)h,
                    .format = PNG_FORMAT_RGB};
    if (!png_image_write_to_file(&im, path, 0, px, 0, NULL)) exit(1);
}

typedef struct {
    const char *name, *ext;
    int side, files;
    char dir[4096];
    unsigned char **blobs; /* the files in memory, for the plain loop */
    size_t *sizes;
} image_set;

static void make_set(image_set *s, const char *root) {
    snprintf(s->dir, sizeof s->dir, "%s/%s", root, s->name);
    mkdir(s->dir, 0755);
    uint8_t *px = malloc((size_t)s->side * s->side * 3);
    s->blobs = calloc((size_t)s->files, sizeof *s->blobs);
    s->sizes = calloc((size_t)s->files, sizeof *s->sizes);
    for (int k = 0; k < 10; k++) {
        char c[4200];
        snprintf(c, sizeof c, "%s/class%d", s->dir, k);
        mkdir(c, 0755);
    }
    for (int i = 0; i < s->files; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/class%d/%06d.%s", s->dir, i % 10, i, s->ext);
        make_pixels(px, s->side, s->side, i);
        if (!strcmp(s->ext, "png")) write_png(path, px, s->side, s->side);
        else write_jpeg(path, px, s->side, s->side);
        if (mp_image_read_file(path, &s->blobs[i], &s->sizes[i]) != MP_OK) exit(1);
    }
    free(px);
}

/* The libraries alone: decode every file from memory to RGB bytes on one thread. */
static double plain_rate(const image_set *s) {
    const bool jpeg = strcmp(s->ext, "png") != 0;
    uint8_t *out = malloc((size_t)s->side * s->side * 3);
    const double t0 = now();
    for (int i = 0; i < s->files; i++) {
        if (jpeg) {
            struct jpeg_decompress_struct ci;
            struct jpeg_error_mgr err;
            ci.err = jpeg_std_error(&err);
            jpeg_create_decompress(&ci);
            jpeg_mem_src(&ci, s->blobs[i], (unsigned long)s->sizes[i]);
            jpeg_read_header(&ci, TRUE);
            ci.out_color_space = JCS_RGB;
            jpeg_start_decompress(&ci);
            while (ci.output_scanline < ci.output_height) {
                JSAMPROW row = out + (size_t)ci.output_scanline * ci.output_width * 3;
                jpeg_read_scanlines(&ci, &row, 1);
            }
            jpeg_finish_decompress(&ci);
            jpeg_destroy_decompress(&ci);
        } else {
            png_image im = {.version = PNG_IMAGE_VERSION};
            png_image_begin_read_from_memory(&im, s->blobs[i], s->sizes[i]);
            im.format = PNG_FORMAT_RGB;
            png_image_finish_read(&im, NULL, out, 0, NULL);
        }
    }
    const double dt = now() - t0;
    free(out);
    return s->files / dt;
}

/* Epochs of loader batches over the set decoded per batch. */
static double loader_rate(const image_set *s, int workers, bool rrc, int epochs) {
    mp_dataset *tr, *va;
    const mp_folder_opts fo = {.lazy = true, .val_fraction = 0.01, .threads = workers};
    if (mp_dataset_open_folder(s->dir, &fo, &tr, &va) != MP_OK) {
        fprintf(stderr, "decode_throughput: %s\n", mp_last_error());
        exit(1);
    }
    mp_dataset_info info;
    mp_dataset_describe(tr, &info);
    mp_loader *l;
    if (mp_loader_create(tr, (mp_loader_opts){.batch = 64, .shuffle = true, .seed = 1, .drop_last = true,
                                              .random_resized_crop = rrc, .workers = workers}, &l) != MP_OK) {
        fprintf(stderr, "decode_throughput: %s\n", mp_last_error());
        exit(1);
    }
    long images = 0;
    const double t0 = now();
    for (int e = 0; e < epochs; e++) {
        mp_loader_start_epoch(l, e);
        for (;;) {
            const float *x;
            const int32_t *y;
            int n;
            if (mp_loader_next(l, &x, &y, &n) != MP_OK) {
                fprintf(stderr, "decode_throughput: %s\n", mp_last_error());
                exit(1);
            }
            if (!n) break;
            images += n;
        }
    }
    const double dt = now() - t0;
    mp_loader_destroy(l);
    mp_dataset_destroy(tr);
    mp_dataset_destroy(va);
    return images / dt;
}

/* Opening the folder with the one-time decode into memory (header scan included). */
static double memory_rate(const image_set *s, int threads) {
    mp_dataset *tr, *va;
    const double t0 = now();
    if (mp_dataset_open_folder(s->dir, &(mp_folder_opts){.val_fraction = 0.01, .threads = threads}, &tr, &va) != MP_OK) {
        fprintf(stderr, "decode_throughput: %s\n", mp_last_error());
        exit(1);
    }
    const double dt = now() - t0;
    mp_dataset_destroy(tr);
    mp_dataset_destroy(va);
    return s->files / dt;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(int argc, char **argv) {
    int files = 4000, big = 600, epochs = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--files")) files = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--big-files")) big = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs")) epochs = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: decode_throughput [--files N] [--big-files N] [--epochs E]\n");
            return 2;
        }
    }
    char root[] = "/tmp/mp_decode_bench.XXXXXX";
    if (!mkdtemp(root)) return 1;
    image_set sets[] = {{.name = "png32", .ext = "png", .side = 32, .files = files},
                        {.name = "jpeg32", .ext = "jpg", .side = 32, .files = files},
                        {.name = "jpeg224", .ext = "jpg", .side = 224, .files = big}};
    const int ns = sizeof sets / sizeof *sets, cpus = mp_online_cpus();
    for (int k = 0; k < ns; k++) make_set(&sets[k], root);
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(la);
    }
    printf("decode_throughput: %s, %d online CPUs, load average %.2f %.2f %.2f, loader batch 64, %d epochs\n\n",
           mp_cpu_model_name(), cpus, load[0], load[1], load[2], epochs);
    printf("| images | files | plain decode, 1 thread | loader, 1 thread | loader, %d threads | in memory once, %d threads |\n",
           cpus, cpus);
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < ns; k++) {
        const image_set *s = &sets[k];
        const double plain = plain_rate(s), l1 = loader_rate(s, 1, false, epochs),
                     ln = loader_rate(s, cpus, false, epochs), mem = memory_rate(s, cpus);
        printf("| %dx%d %s | %d | %.0f img/s | %.0f img/s | %.0f img/s | %.0f img/s |\n", s->side, s->side,
               strcmp(s->ext, "png") ? "JPEG" : "PNG", s->files, plain, l1, ln, mem);
        if (s->side == 224)
            printf("| %dx%d JPEG + random-resized-crop | %d | | %.0f img/s | %.0f img/s | |\n", s->side, s->side,
                   s->files, loader_rate(s, 1, true, epochs), loader_rate(s, cpus, true, epochs));
        fflush(stdout);
    }
    for (int k = 0; k < ns; k++) {
        for (int i = 0; i < sets[k].files; i++) free(sets[k].blobs[i]);
        free(sets[k].blobs);
        free(sets[k].sizes);
    }
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
