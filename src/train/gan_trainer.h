/* gan_trainer.h — the AC-GAN training loop behind `mixprec train-gan`:
 * epochs over a shuffled dataset (images in [0, 1], fed to the networks in
 * [-1, 1]), the iteration of gan_step.h, a progress line per epoch (D and G
 * losses, skipped steps, per-batch time), a sample grid after every epoch
 * (one row per class, the same fixed noise in every column) and a JSONL
 * record per epoch with every batch's time (seed 001's figure 1).
 *
 * Files in out_dir: samples_epochN.png (or .pgm/.ppm without libpng) and
 * batch_times.jsonl.
 *
 * On a GPU each update round-trips the parameters through the host (see
 * gan_step.h), which adds a fixed cost per batch to the times logged. */
#ifndef MP_TRAIN_GAN_TRAINER_H
#define MP_TRAIN_GAN_TRAINER_H

#include <stdio.h>

#include "data/dataset.h"
#include "train/gan_step.h"

typedef struct {
    mp_gan_opts step;        /* batch, lr, beta1, device, scaler, aux_fake_weight, seed, events */
    int epochs;
    int max_steps;           /* per epoch, 0 = whole epochs */
    const char *precision;   /* for logs */
    const char *data_name;   /* for logs */
    const char *out_dir;     /* existing, writable folder */
    FILE *out;               /* progress; NULL = silent */
} mp_gan_train_opts;

typedef struct {
    int epochs_run;
    double d_loss, g_loss;   /* last epoch's means */
    double batch_ms;         /* last epoch's mean time per batch */
    int64_t g_skipped, d_skipped, forward_overflows;
    float loss_scale;
    char samples_path[4200]; /* last grid written */
} mp_gan_train_result;

/* m: built, precision policy applied; parameters are initialized here
 * (mp_acgan_init_params) unless they already are. */
mp_status mp_gan_train_run(mp_acgan *m, const mp_dataset *train, const mp_gan_train_opts *o, mp_gan_train_result *r);

/* Generate rows x cols images, row r of class r % classes, column k from
 * noise vector k (the same in every row), with an inference plan of batch
 * rows*cols; images: (rows*cols, c, h, w) in [-1, 1]. */
mp_status mp_gan_sample_grid(mp_acgan *m, int rows, int cols, uint64_t seed, bool use_onednn, mp_device device,
                             float *images);

#endif
