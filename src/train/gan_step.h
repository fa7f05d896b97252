/* gan_step.h — one AC-GAN iteration on a compiled plan (CPU or GPU) with two
 * Adam optimizers, one over the generator's and one over the
 * discriminator's parameters, and one loss scaler shared by the three losses:
 *
 *   forward (G on z + class, D on the real and on the generated batch);
 *   a NaN/inf loss is a forward overflow: the iteration is skipped and the
 *   scale is left alone (DESIGN.md); otherwise
 *   G: zero grads, backward of (gen_src + fake_cls) * scale, unscale/check
 *      G's gradients, Adam on G unless they overflowed;
 *   D: zero grads, backward of (real_src + 2 real_cls + fake_src +
 *      aux_fake_weight fake_cls) * scale, unscale/check D's gradients, Adam
 *      on D unless they overflowed;
 *   one scaler update (backs off once if either overflowed).
 *
 * D's class head is trained on real images only by default, as in Keras'
 * AC-GAN example that seed 001 follows: its discriminator's sample weights
 * are 2 on the real images' class loss and 0 on the generated images' (the
 * sum of the weights kept), 1 on every real/fake loss. Trained on generated
 * images too, D's class head can learn to give G's images the classes they
 * were drawn for however little they look like them, and then G's class
 * loss no longer pulls them toward the real classes (bench/NOTES.md has
 * both measured). G is still trained to make D classify its images as the
 * intended class (fake_cls in G's loss).
 *
 * Both gradients come from the same forward (simultaneous updates). G steps
 * first: D's gradients do not depend on G's weights, and the backward into G
 * that D's fake losses also run is discarded. On a GPU the parameters live
 * in device memory; each update copies them and their gradients to the host,
 * steps there and copies them back (mp_plan_sync_params): simple and correct,
 * not the fastest (see gan_trainer.h). */
#ifndef MP_TRAIN_GAN_STEP_H
#define MP_TRAIN_GAN_STEP_H

#include <stdio.h>

#include "amp/scaler.h"
#include "core/rng.h"
#include "models/models.h"
#include "optim/optim.h"

/* The weight of D's class loss on real images (Keras' AC-GAN: 2). */
#define MP_GAN_AUX_REAL_WEIGHT 2.0f

typedef struct {
    int batch;
    float lr;          /* Adam learning rate of both, 0 -> 2e-4 */
    float beta1;       /* 0 -> 0.5 (DCGAN) */
    bool use_onednn;
    mp_device device;
    bool loss_scaling; /* scale the losses (amp-fp16, o2-fp16) */
    mp_scaler_opts scaler;
    /* weight of D's class loss on generated images, >= 0: 0 (the default)
     * as Keras' AC-GAN; the real images' class loss weighs
     * MP_GAN_AUX_REAL_WEIGHT whatever this is */
    float aux_fake_weight;
    uint64_t seed;     /* noise and fake classes */
    FILE *events;      /* skipped steps (NULL = silent) */
} mp_gan_opts;

typedef struct {
    int n;
    float **grads;   /* host gradient of each trainable tensor */
    int64_t *sizes;
    mp_optim *opt;
    int64_t skipped; /* steps skipped on non-finite gradients */
} mp_gan_group;

typedef struct {
    mp_acgan *m;
    mp_gan_opts o;
    mp_plan *plan;
    mp_gan_group gen, dis;
    mp_scaler scaler;
    mp_rng rng;
    float *z, *onehot, *ones, *zeros; /* (batch, latent), (batch, classes), (batch), (batch) */
    int32_t *fake_labels;             /* (batch) */
    float losses[5];                  /* the last forward's, in mp_acgan_losses order */
    int64_t forward_overflows;
    int consecutive_forward_overflows;
    int64_t iteration;
} mp_gan_ctx;

/* Plan (training, five losses), optimizers and scaler for m, whose
 * parameters are initialized and whose precision policy is applied. */
mp_status mp_gan_ctx_init(mp_gan_ctx *c, mp_acgan *m, const mp_gan_opts *o);
void mp_gan_ctx_free(mp_gan_ctx *c);

/* Sets the batch (real: (batch, c, h, w) in [-1, 1], labels) with fresh
 * noise and fake classes, runs the forward and reads the five losses.
 * *overflow: a loss was NaN/inf (counted; the caller skips the updates and
 * calls mp_gan_end_iteration); after 3 in a row it is an error. */
mp_status mp_gan_forward(mp_gan_ctx *c, const float *real, const int32_t *labels, bool *overflow);
/* The generator's and the discriminator's update after a finite forward;
 * *skipped: its gradients were non-finite and it did not step. */
mp_status mp_gan_update_generator(mp_gan_ctx *c, bool *skipped);
mp_status mp_gan_update_discriminator(mp_gan_ctx *c, bool *skipped);
/* The one scaler update per iteration; an error when gradients overflow at
 * the minimum scale. */
mp_status mp_gan_end_iteration(mp_gan_ctx *c);

/* D's loss as it is trained (real_src + 2 real_cls + fake_src +
 * aux_fake_weight fake_cls) and G's (gen_src + fake_cls) from the last
 * forward. */
double mp_gan_d_loss(const mp_gan_ctx *c);
double mp_gan_g_loss(const mp_gan_ctx *c);
float mp_gan_loss_scale(const mp_gan_ctx *c);

#endif
