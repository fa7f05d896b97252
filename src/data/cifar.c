/* cifar.c — CIFAR-10 binary version: data_batch_1..5.bin / test_batch.bin,
 * each a sequence of 3073-byte records (label byte, then 3x32x32 pixels,
 * channel-major, row-major within a channel). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "data/dataset.h"
#include "io/input_file.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define CIFAR_CHUNK 256 /* records per fread */
#define CIFAR_HINT "(the CIFAR-10 binary version, from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz)"

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* dst = a/b (or a when b is NULL); false if it does not fit in 4096 bytes. */
static bool join(char dst[4096], const char *a, const char *b) {
    int len = b ? snprintf(dst, 4096, "%s/%s", a, b) : snprintf(dst, 4096, "%s", a);
    return len >= 0 && len < 4096;
}

/* Read one batch file of `records` records into images/labels (buf: CIFAR_CHUNK records). */
static mp_status cifar_read_file(const char *path, int records, float *images, int32_t *labels,
                                 unsigned char *buf) {
    uint64_t size;
    FILE *f;
    MP_TRY(mp_input_fopen(path, &f, &size)); /* never blocks on a FIFO or device */
    if (size != (uint64_t)records * CIFAR_RECORD) {
        fclose(f);
        return mp_error(MP_ERR_IO, "%s: the file changed while it was being read", path);
    }
    for (int r0 = 0; r0 < records; r0 += CIFAR_CHUNK) {
        int k = records - r0 < CIFAR_CHUNK ? records - r0 : CIFAR_CHUNK;
        size_t got = fread(buf, CIFAR_RECORD, (size_t)k, f);
        if (got < (size_t)k) {
            mp_status s = ferror(f) ? mp_error(MP_ERR_IO, "%s: read error at record %d: %s", path,
                                               r0 + (int)got, strerror(errno))
                                    : mp_error(MP_ERR_FORMAT, "%s: truncated: expected %d records, got %d",
                                               path, records, r0 + (int)got);
            fclose(f);
            return s;
        }
        for (int j = 0; j < k; j++) {
            const unsigned char *rec = buf + (size_t)j * CIFAR_RECORD;
            if (rec[0] >= CIFAR_CLASSES) {
                fclose(f);
                return mp_error(MP_ERR_FORMAT,
                                "%s: record %d has label %u, expected 0..%d (corrupt, or not a CIFAR-10 "
                                "binary batch?)",
                                path, r0 + j, rec[0], CIFAR_CLASSES - 1);
            }
            labels[r0 + j] = rec[0];
            float *dst = images + (size_t)(r0 + j) * CIFAR_PIXELS; // (3, 32, 32)
            for (int p = 0; p < CIFAR_PIXELS; p++) dst[p] = (float)rec[1 + p] / 255.0f;
        }
    }
    fclose(f);
    return MP_OK;
}

mp_status mp_dataset_load_cifar10(const char *dir, bool train, mp_dataset *out) {
    memset(out, 0, sizeof *out);
    if (!is_dir(dir))
        return mp_error(MP_ERR_IO, "%s: CIFAR-10 directory %s %s", dir, exists(dir) ? "is not a directory" : "not found",
                        CIFAR_HINT);
    char base[4096], paths[5][4096], sub[4096];
    if (!join(base, dir, NULL) || !join(sub, dir, "cifar-10-batches-bin") ||
        !join(paths[0], dir, train ? "data_batch_1.bin" : "test_batch.bin"))
        return mp_error(MP_ERR_INVALID_ARG, "%s: directory path too long", dir);
    if (!exists(paths[0]) && is_dir(sub)) /* the tarball extracts into cifar-10-batches-bin/ */
        memcpy(base, sub, sizeof base);
    int nfiles = train ? 5 : 1;
    long long sizes[5], total = 0;
    for (int i = 0; i < nfiles; i++) {
        char name[32];
        snprintf(name, sizeof name, train ? "data_batch_%d.bin" : "test_batch.bin", i + 1);
        if (!join(paths[i], base, name)) return mp_error(MP_ERR_INVALID_ARG, "%s: directory path too long", dir);
        MP_TRY(mp_data_check_file(paths[i], CIFAR_HINT));
        struct stat st;
        if (stat(paths[i], &st) != 0) return mp_error(MP_ERR_IO, "%s: cannot stat: %s", paths[i], strerror(errno));
        sizes[i] = (long long)st.st_size;
        if (sizes[i] == 0) return mp_error(MP_ERR_FORMAT, "%s: empty file, expected CIFAR-10 records", paths[i]);
        if (sizes[i] % CIFAR_RECORD)
            return mp_error(MP_ERR_FORMAT,
                            "%s: truncated or corrupt: size %lld bytes is not a multiple of the %d-byte "
                            "CIFAR-10 record (1 label byte + 3x32x32 pixels)",
                            paths[i], sizes[i], CIFAR_RECORD);
        total += sizes[i] / CIFAR_RECORD;
        if (total > (1 << 24))
            return mp_error(MP_ERR_FORMAT, "%s: absurdly many CIFAR-10 records (%lld so far)", paths[i], total);
    }
    MP_TRY(mp_host_mem_check((size_t)total * CIFAR_PIXELS * sizeof(float), NULL,
                             "the %lld CIFAR-10 %s images of %s (3x32x32 each)", total, train ? "train" : "test", base));
    out->images = malloc((size_t)total * CIFAR_PIXELS * sizeof(float));
    out->labels = malloc((size_t)total * sizeof(int32_t));
    unsigned char *buf = malloc((size_t)CIFAR_CHUNK * CIFAR_RECORD);
    if (!out->images || !out->labels || !buf) {
        free(buf);
        mp_dataset_free(out);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory for %lld CIFAR-10 images", dir, total);
    }
    long long at = 0;
    for (int i = 0; i < nfiles; i++) {
        int records = (int)(sizes[i] / CIFAR_RECORD);
        mp_status s = cifar_read_file(paths[i], records, out->images + at * CIFAR_PIXELS, out->labels + at, buf);
        if (s != MP_OK) {
            free(buf);
            mp_dataset_free(out);
            return s;
        }
        at += records;
    }
    free(buf);
    out->n = (int)total;
    out->c = 3;
    out->h = 32;
    out->w = 32;
    out->classes = CIFAR_CLASSES;
    mp_dataset_set_source(out, "CIFAR-10 %s (%s)", train ? "train" : "test", base);
    return MP_OK;
}
