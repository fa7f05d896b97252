/* gan_trainer.h — the AC-GAN training loop behind `mixprec train-gan`, on the
 * public trainer with two optimizer groups (one Adam over the generator's
 * g_* parameters, one over the discriminator's d_*) and one loss scaler
 * shared by their losses:
 *
 *   forward (G on noise + class, D on the real and on the generated batch);
 *   a NaN/inf loss is a forward overflow: both skip, the scale stays;
 *   G: backward of (gen_src + fake_cls) * scale, unscale/check, Adam unless
 *      its gradients overflowed;
 *   D: backward of (real_src + 2 real_cls + fake_src + aux_fake_weight
 *      fake_cls) * scale, plus the gradient of an optional penalty (R1 on
 *      the real images, WGAN-GP on interpolates between real and generated
 *      ones, mixprec/penalty.h), unscale/check, Adam unless they overflowed;
 *   one scaler update.
 *
 * D's class head is trained on real images only by default, as in Keras'
 * AC-GAN example that seed 001 follows (weights 2 on the real images' class
 * loss and 0 on the generated ones'); G is still trained to make D see the
 * class it asked for. Both updates come from the same forward; G steps
 * first (D's gradients do not depend on G's weights).
 *
 * Epochs over a shuffled dataset (images in [0, 1], fed in [-1, 1]), a
 * progress line per epoch (D and G losses, the epoch's skipped steps, time
 * per batch), a sample grid after every epoch (one row per class, the same noise in every
 * column) and a JSONL record per epoch with every batch's time (seed 001's
 * figure 1). Files in out_dir: samples_epochN.png (or .pgm/.ppm without
 * libpng) and batch_times.jsonl. */
#ifndef MP_TRAIN_GAN_TRAINER_H
#define MP_TRAIN_GAN_TRAINER_H

#include <stdio.h>

#include "models/models.h"

/* The weight of D's class loss on real images (Keras' AC-GAN: 2). */
#define MP_GAN_AUX_REAL_WEIGHT 2.0f

typedef struct {
    /* batch, device, loss scaling and scaler, overflow handling, events;
     * groups, losses and inputs are the GAN's */
    mp_trainer_opts trainer;
    float lr;                /* Adam learning rate of both, 0 -> 2e-4 */
    float beta1;             /* Adam's beta1 of both, [0, 1); 0 -> 0.5 (DCGAN) unless beta1_as_given */
    bool beta1_as_given;     /* beta1 is used as given, 0 (no momentum) included; beta2 is 0.999 */
    /* weight of D's class loss on generated images, >= 0: 0 (the default) as
     * Keras' AC-GAN; the real images' class loss weighs MP_GAN_AUX_REAL_WEIGHT */
    float aux_fake_weight;
    uint64_t seed;           /* initialization, noise and fake classes */
    int epochs;
    int max_steps;           /* per epoch, 0 = whole epochs */
    int data_workers;        /* threads preparing batches (mp_loader_opts.workers), 0: the loader's default */
    const char *data_name;   /* for logs */
    const char *out_dir;     /* existing, writable folder */
    FILE *out;               /* progress; NULL = silent */
    /* a gradient penalty on D (mixprec/penalty.h): MP_PENALTY_R1 on the
     * real images' logits, or MP_PENALTY_WGAN_GP on the interpolates (the
     * model built with mp_acgan_add_interpolates); NONE: none */
    mp_penalty_kind penalty;
    float penalty_weight;
} mp_gan_train_opts;

typedef struct {
    int epochs_run;
    double d_loss, g_loss;   /* last epoch's means */
    double batch_ms;         /* last epoch's mean time per batch */
    int64_t g_skipped, d_skipped, forward_overflows; /* over the whole run */
    float loss_scale;
    double penalty;          /* last epoch's mean penalty (finite steps), 0 without */
    char samples_path[4200]; /* last grid written */
} mp_gan_train_result;

/* m: built, precision policy applied; parameters are initialized here
 * (mp_acgan_init_params) unless they already are. */
mp_status mp_gan_train_run(mp_acgan *m, const mp_dataset *train, const mp_gan_train_opts *o, mp_gan_train_result *r);

/* Generate rows x cols images, row r of class r % classes, column k from
 * noise vector k (the same in every row), with an inference plan of batch
 * rows*cols; images: (rows*cols, c, h, w) in [-1, 1]. */
mp_status mp_gan_sample_grid(mp_acgan *m, int rows, int cols, uint64_t seed, bool reference, mp_device device,
                             float *images);

/* The two groups (generator, discriminator) of an AC-GAN trainer, their
 * optimizers made over m's graph with Adam (lr, beta1 as given, beta2
 * 0.999). Exposed for tests. */
mp_status mp_gan_groups(mp_acgan *m, float lr, float beta1, float aux_fake_weight, mp_train_group groups[2]);

#endif
