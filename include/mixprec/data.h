/** @file mixprec/data.h
 * In-memory image classification datasets (IDX as MNIST and Fashion-MNIST,
 * CIFAR-10 binary batches, synthetic data, arrays from memory) and the
 * background loader that batches, shuffles, augments and normalizes them. */
#ifndef MIXPREC_DATA_H
#define MIXPREC_DATA_H

#include "mixprec/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A dataset: n samples of (c, h, w) f32 images with int32 labels (opaque). */
typedef struct mp_dataset mp_dataset;

/** Where Debian's dataset-fashion-mnist package puts Fashion-MNIST. */
#define MP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/** IDX files (MNIST format, gzip or not): images (n, h, w) of any IDX
 * element type (uint8 scaled to [0, 1]), labels 1-D integers in [0, classes)
 * with classes = max label + 1 (at most 1000). Errors name the file. */
MP_API mp_status mp_dataset_open_idx(const char *images_path, const char *labels_path, mp_dataset **out);
/** Fashion-MNIST (or MNIST) from dir ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz];
 * NULL: MP_FASHION_MNIST_DIR): 10 classes. */
MP_API mp_status mp_dataset_open_fashion_mnist(const char *dir, bool train, mp_dataset **out);
/** CIFAR-10 binary batches from dir (or dir/cifar-10-batches-bin):
 * data_batch_1..5.bin (train) or test_batch.bin. */
MP_API mp_status mp_dataset_open_cifar10(const char *dir, bool train, mp_dataset **out);
/** Layout of 4-D .npy image arrays. */
typedef enum {
    MP_NPY_LAYOUT_AUTO = 0, /**< NHWC when the last dimension is 1 or 3, else NCHW */
    MP_NPY_LAYOUT_NCHW,     /**< (N, C, H, W) */
    MP_NPY_LAYOUT_NHWC,     /**< (N, H, W, C) */
} mp_npy_layout;

/** Options of mp_dataset_open_npy; zero fields take the defaults beside them. */
typedef struct {
    mp_npy_layout layout;   /**< of 4-D image arrays (3-D (N, H, W) arrays have one channel) */
    int classes;            /**< labels must lie in [0, classes); 0: classes = max label + 1 */
} mp_npy_opts;

/** NumPy .npy files (format 1.0, 2.0 or 3.0, little-endian, C order): images
 * (N, H, W), (N, C, H, W) or (N, H, W, C) of uint8 (scaled by 1/255) or
 * float32 (finite), labels (N,) of uint8, int32 or int64 in [0, classes).
 * o may be NULL. Errors name the file and what is wrong (bad magic,
 * truncated, header parse error, unsupported dtype, fortran_order, a count
 * mismatch naming both files and both counts, a label out of range naming
 * the sample). */
MP_API mp_status mp_dataset_open_npy(const char *images_path, const char *labels_path, const mp_npy_opts *o,
                                     mp_dataset **out);
/** What to do with an image that cannot be decoded. */
typedef enum {
    MP_BAD_IMAGES_FAIL = 0, /**< an error naming the file */
    /** leave it out (counted in mp_dataset_info.skipped); one found only when
     * a dataset decoded per batch decodes it is replaced or left out by the
     * loader (mp_loader_next) */
    MP_BAD_IMAGES_SKIP,
} mp_bad_images;

/** Options of mp_dataset_open_folder; zero fields take the defaults beside them. */
typedef struct {
    int height;             /**< sample height; 0 (with width 0): the images' size, which must then be the same for all */
    int width;              /**< sample width; see height */
    int channels;           /**< 1 (gray) or 3 (RGB); 0: 3 when any image has colour, else 1 */
    mp_bad_images bad_images; /**< corrupt, truncated or unreadable images */
    double val_fraction;    /**< without DIR/train and DIR/val: the held-out share, 0 -> 0.1 */
    /** Decode every image once into memory when the decoded set (n x C x H x W
     * floats, both parts) takes at most this many bytes, 0 -> 2 GiB, and the
     * host can give twice that (the peak while the parts are made); else
     * the loader decodes each batch (with random-resized crops taken from
     * the full decoded image). */
    size_t max_memory;
    bool lazy;              /**< always decode per batch, whatever the size */
    int threads;            /**< decoder threads for the one-time decode and the header scan, 0 -> online CPUs */
} mp_folder_opts;

/** An ImageNet-style folder: `DIR/CLASS/IMAGE` (JPEG or PNG), classes the
 * sorted subfolder names (mp_dataset_class_name), or `DIR/train/CLASS/...`
 * and `DIR/val/CLASS/...` (or `DIR/test/CLASS/...`) as the two parts;
 * other files and nested folders are ignored, as are hidden (".name")
 * entries, class folders included. Without val/ or test/, floor(n
 * val_fraction) of the n images are held out (fewer where classes are too
 * small to spare one), each class's share in
 * proportion to its size (never all of a class) and evenly spaced through
 * the class in file-name order.
 * Images are converted to the channels, resized so that they cover the
 * sample size (the shorter side for square samples, bilinear without
 * antialiasing) and centre-cropped; pixels are scaled to [0, 1] (16-bit
 * PNGs by their high byte). *train and *val receive the
 * two parts (both freed with mp_dataset_destroy). Errors name the folder or
 * file: not found, no class subfolders, no images, a bad image under
 * MP_BAD_IMAGES_FAIL, images of different sizes without a size given. */
MP_API mp_status mp_dataset_open_folder(const char *dir, const mp_folder_opts *o, mp_dataset **train,
                                        mp_dataset **val);
/** The name of class k (an image folder's subfolder), or NULL when the
 * dataset has no class names or k is out of range. */
MP_API const char *mp_dataset_class_name(const mp_dataset *d, int k);
/** Deterministic learnable data: a smooth pattern per class and channel plus
 * noise; sample i depends only on (seed, i). */
MP_API mp_status mp_dataset_create_synthetic(int n, int c, int h, int w, int classes, uint64_t seed,
                                             mp_dataset **out);
/** A dataset copied from memory: images (n, c, h, w) f32, finite; labels in [0, classes). */
MP_API mp_status mp_dataset_create(int n, int c, int h, int w, int classes, const float *images,
                                   const int32_t *labels, const char *name, mp_dataset **out);
/** Samples [start, start + n) as a new dataset (the same classes). */
MP_API mp_status mp_dataset_create_slice(const mp_dataset *d, int start, int n, mp_dataset **out);
/** Frees the dataset (NULL is fine). */
MP_API void mp_dataset_destroy(mp_dataset *d);

/** A dataset's shape. */
typedef struct {
    int n;              /**< samples */
    int c;              /**< channels per sample */
    int h;              /**< height */
    int w;              /**< width */
    int classes;        /**< labels lie in [0, classes) */
    const char *source; /**< where it came from (a path or a description) */
    bool lazy;          /**< decoded per batch by the loader, not held in memory */
    int skipped;        /**< images left out as bad (MP_BAD_IMAGES_SKIP) */
} mp_dataset_info;
/** d's shape (NULL d: *out zeroed; NULL out: nothing). */
MP_API void mp_dataset_describe(const mp_dataset *d, mp_dataset_info *out);
/** Per-channel mean and population standard deviation over all samples
 * (mean and std hold c floats each); for a dataset decoded per batch over
 * at most 2048 evenly spaced ones (decoding all would take an epoch),
 * leaving out any that fail to decode. NULL d, mean or std: nothing. */
MP_API void mp_dataset_channel_stats(const mp_dataset *d, float *mean, float *std);
/** A test set fits a training set: the same per-sample shape and every test
 * label within the training classes; errors name both sources and shapes. */
MP_API mp_status mp_dataset_check_compatible(const mp_dataset *train, const mp_dataset *test);

/** Loader options. */
typedef struct {
    int batch;        /**< samples per batch, 1..dataset size */
    bool shuffle;     /**< a fresh permutation per epoch from (seed, epoch) */
    bool drop_last;   /**< skip the final short batch */
    uint64_t seed;    /**< order and augmentation */
    int crop_pad;     /**< random crop after zero-padding this many pixels per side, 0 = off */
    bool hflip;       /**< random horizontal flip (probability 1/2) */
    const float *mean; /**< per-channel normalization (x - mean) / std; NULL = none (copied) */
    const float *std;  /**< see mean */
    /** Data parallel: each global batch of batch * shards samples is cut into
     * shards and this loader yields part `shard` (0 -> one shard); every rank
     * uses the same seed. Without drop_last the last global batch's r
     * samples are shared evenly, ceil(r / shards) per shard, topped up with
     * the epoch's first samples (as PyTorch's DistributedSampler pads): every
     * shard yields mp_loader_batches batches of the same counts. */
    int shards;       /**< parts of each global batch (data parallel), 0 -> 1 */
    int shard;        /**< the part this loader yields, in [0, max(shards, 1)) */
    /** torchvision's RandomResizedCrop (scale (0.08, 1), aspect (3/4, 4/3))
     * before crop_pad/hflip: from the full decoded image for datasets
     * decoded per batch, else from the image held in memory. */
    bool random_resized_crop;
    /** Threads preparing each batch (decoding, augmenting), 0 -> the online
     * CPUs for datasets decoded per batch or with random_resized_crop, else 1.
     * Batches are the same for any number. */
    int workers;
} mp_loader_opts;

/** Batches of a dataset, prepared by a background thread while the caller
 * trains on the current one; order and augmentation depend only on (seed,
 * epoch, sample), never on thread timing (opaque). */
typedef struct mp_loader mp_loader;

/** A loader over d (which must outlive it). */
MP_API mp_status mp_loader_create(const mp_dataset *d, mp_loader_opts o, mp_loader **out);
/** Batches per epoch (at most, for a dataset decoded per batch under
 * MP_BAD_IMAGES_SKIP without drop_last: see mp_loader_next); 0 for NULL. */
MP_API int mp_loader_batches(const mp_loader *l);
/** Begin (or restart, even mid-epoch) epoch `epoch` >= 0. */
MP_API mp_status mp_loader_start_epoch(mp_loader *l, int epoch);
/** The next batch: images (batch, C, H, W), labels (batch), *n valid samples
 * (a short last batch without drop_last is padded with zeros and label 0).
 * An image that fails to decode (datasets decoded per batch, whose headers
 * were read when it was opened) is an error naming the file, or under
 * MP_BAD_IMAGES_SKIP is counted (mp_loader_bad_images) and, with drop_last
 * or shards, replaced by the next sample in the epoch's order that decodes
 * (image and label; after 16 that do not, an error naming the first),
 * otherwise left out (a shorter batch; one left empty is passed over).
 * At the epoch's end MP_OK with *n = 0. Pointers stay valid until the next
 * call on the loader. */
MP_API mp_status mp_loader_next(mp_loader *l, const float **images, const int32_t **labels, int *n);
/** Samples (0 for NULL) that did not decode (MP_BAD_IMAGES_SKIP, datasets decoded per
 * batch), each counted once where it stood, in the batches mp_loader_next
 * handed out (or passed over, every sample left out) this epoch; not those
 * of batches the loader prepared ahead that were not handed out. */
MP_API int mp_loader_bad_images(const mp_loader *l);
/** Seconds mp_loader_next has waited for batches since the epoch began (the
 * step waited on decoding when this is more than a small share of the epoch);
 * 0 for NULL. */
MP_API double mp_loader_wait_seconds(const mp_loader *l);
/** Stops the worker and frees the loader (NULL is fine). */
MP_API void mp_loader_destroy(mp_loader *l);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_DATA_H */
