/* dataset.h — in-memory image classification datasets: IDX (MNIST-style,
 * optionally gzip), CIFAR-10 binary batches and a deterministic synthetic
 * generator, plus finite checks, per-channel statistics and subsets.
 *
 * Every loader fills a zeroed mp_dataset on success; on failure it leaves
 * *out zeroed (nothing to free) and mp_last_error() names the file and what
 * is wrong. mp_dataset_free() is safe on a zeroed or freed dataset. */
#ifndef MP_DATA_DATASET_H
#define MP_DATA_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "mixprec.h"

/* Largest class count accepted anywhere (labels must lie in [0, this)). */
#define MP_DATASET_MAX_CLASSES 1000

#include "core/rng.h"

/* Samples produced on demand (an image folder too large to hold decoded):
 * shared by a dataset and its slices through a reference count. */
typedef struct mp_sample_source mp_sample_source;
struct mp_sample_source {
    /* Sample i as (c, h, w) floats into dst: the dataset's fixed geometry,
     * or with rrc != NULL a random-resized crop drawn from rrc. Safe to call
     * from several threads at once. */
    mp_status (*fetch)(mp_sample_source *s, int i, mp_rng *rrc, float *dst);
    void (*destroy)(mp_sample_source *s);
    int refs; /* atomic */
    /* MP_BAD_IMAGES_SKIP: a sample whose fetch fails with MP_ERR_FORMAT (an
     * image whose header read but whose data does not) is replaced or left
     * out by the loader (mp_loader_next); other errors stay errors */
    bool replace_bad;
};

/* Class names, shared by a dataset and its slices (reference counted). */
typedef struct {
    int refs; /* atomic */
    int n;
    char **names;
} mp_class_names;

struct mp_dataset {
    int n, c, h, w;   /* samples and per-sample shape */
    int classes;      /* labels lie in [0, classes) */
    float *images;    // (n, c, h, w); uint8 sources scaled by 1/255, others as stored; NULL when src is set
    int32_t *labels;  // (n)
    char source[256]; /* where it came from (a path or a description), for messages */
    mp_sample_source *src; /* lazy datasets: sample i is src's sample src_offset + i */
    int src_offset;
    mp_class_names *names; /* may be NULL */
    int skipped;      /* bad images left out */
    int ignored_files; /* image folders: files in its class folders that are not images (not read) */
};

/* Sample i of a lazy dataset (geometry as stored, or a random-resized crop from rrc). */
static inline mp_status mp_dataset_fetch(const mp_dataset *d, int i, mp_rng *rrc, float *dst) {
    return d->src->fetch(d->src, d->src_offset + i, rrc, dst);
}

/* Reference counting of the shared parts (NULL is fine). */
void mp_sample_source_retain(mp_sample_source *s);
void mp_sample_source_release(mp_sample_source *s);
mp_class_names *mp_class_names_retain(mp_class_names *c);
void mp_class_names_release(mp_class_names *c);

/* IDX files (yann.lecun.com MNIST format), gzip-compressed or not: images are
 * 3-D (n, h, w) of any IDX element type (c = 1); labels are 1-D integers.
 * classes = max label + 1. source = images_path. */
mp_status mp_dataset_load_idx(const char *images_path, const char *labels_path, mp_dataset *out);

/* Fashion-MNIST (or MNIST) from dir: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz];
 * 10 classes: a label >= 10 is an error naming the labels file and the sample.
 * source = "Fashion-MNIST train|test (<images path>)". */
mp_status mp_dataset_load_fashion_mnist(const char *dir, bool train, mp_dataset *out);

/* NumPy .npy images and labels (mp_dataset_open_npy in mixprec/data.h);
 * o may be NULL. source = images_path. */
mp_status mp_dataset_load_npy(const char *images_path, const char *labels_path, const mp_npy_opts *o,
                              mp_dataset *out);

/* CIFAR-10 binary version from dir (or dir/cifar-10-batches-bin):
 * data_batch_1..5.bin (train) or test_batch.bin; records of 1 label byte +
 * 3x32x32 channel-major pixels. */
mp_status mp_dataset_load_cifar10(const char *dir, bool train, mp_dataset *out);

/* Deterministic learnable data: each class has a smooth per-channel pattern,
 * samples add near-Gaussian noise (clamped to [0, 1]). Sample i depends only on
 * (seed, i), so a smaller n gives a prefix of a larger one; labels are balanced
 * within every block of `classes` consecutive samples. */
mp_status mp_dataset_synthetic(int n, int c, int h, int w, int classes, uint64_t seed,
                               mp_dataset *out);

void mp_dataset_free(mp_dataset *d);

/* The public mp_dataset_open_* / _create* functions (dataset_api.c) wrap
 * these fill-in-place loaders in heap objects. */

/* MP_ERR_NONFINITE naming d->source and the first sample with NaN/inf. */
mp_status mp_dataset_check_finite(const mp_dataset *d);

/* Every label of d lies in [0, classes); else MP_ERR_FORMAT naming `path`
 * (the labels file), the first bad sample and its label. */
mp_status mp_dataset_check_labels(const mp_dataset *d, int classes, const char *path);

/* mp_dataset_check_compatible and mp_dataset_channel_stats are public
 * (mixprec/data.h). */

/* Copy of samples [start, start + n); classes is kept from d. */
mp_status mp_dataset_slice(const mp_dataset *d, int start, int n, mp_dataset *out);

/* Copy of the first n samples (1 <= n <= d->n); classes is kept from d. */
mp_status mp_dataset_subset(const mp_dataset *d, int n, mp_dataset *out);

/* Held-out split by fraction f in (0, 1) (split.c): floor(n f) samples (at
 * most), each class's proportional share (never all of a class), evenly spaced
 * through the class in order. mp_split_mark sets held[i] for the n samples
 * (labels in [0, classes)) and returns how many, or -1 (MP_ERR_NOMEM set).
 * mp_dataset_split copies the two parts, both in the original order, and
 * errors when either would be empty. */
int mp_split_mark(const int32_t *labels, int n, int classes, double fraction, bool *held);
mp_status mp_dataset_split(const mp_dataset *d, double fraction, mp_dataset *train, mp_dataset *val);

/* ---- helpers shared by the loaders in src/data (not for other callers) ---- */

/* Set d->source from a printf format (truncated to fit). */
void mp_dataset_set_source(mp_dataset *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Check labels lie in [0, MP_DATASET_MAX_CLASSES) and set d->classes to max + 1;
 * errors (MP_ERR_FORMAT) name `path` and the first bad sample. */
mp_status mp_dataset_set_classes(mp_dataset *d, const char *path);

/* MP_OK if `path` is an existing regular file; otherwise an MP_ERR_IO message
 * ("<path>: not found" / "is a directory" / strerror) followed by `hint`
 * (may be NULL), and that status. */
mp_status mp_data_check_file(const char *path, const char *hint);

#endif
