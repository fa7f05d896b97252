/* models.h — the model zoo: each builder makes a graph for a given input
 * shape and class count and returns its input, labels, logits and loss nodes. */
#ifndef MP_MODELS_MODELS_H
#define MP_MODELS_MODELS_H

#include "mixprec.h"

/* mp_model, mp_model_build, mp_model_free, mp_model_list, mp_model_describe
 * and mp_model_check_name are public (mixprec/models.h). */

typedef mp_status (*mp_model_builder)(mp_model *m, int c, int h, int w, int classes);

/* Builders (one file each). */
mp_status mp_model_small_cnn(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_cnn10(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet18(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet34(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet50(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet101(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_mobilenetv2(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_convnet256(mp_model *m, int c, int h, int w, int classes);
/* Wide ResNets: "wrn" (= wrn-28-10) or "wrn-D-K" -> depth D and widening
 * factor K, or MP_ERR_INVALID_ARG with a message naming the model. */
mp_status mp_wide_resnet_parse(const char *name, int *depth, int *widen);
mp_status mp_model_wide_resnet(mp_model *m, int depth, int widen, int c, int h, int w, int classes);

/* AC-GAN (Odena et al.; seed 001) in one graph: the generator, and the
 * discriminator applied to a real batch and, with the same (tied) weights,
 * to the generated batch. Generator nodes are named g_*, discriminator nodes
 * d_* (its copy on generated images d_fake_*, holding no parameters), so
 * every parameter name starts with "g_" or "d_". Images are in [-1, 1]. */
typedef struct {
    mp_graph *g;
    int latent, classes, c, h, w;
    /* inputs */
    mp_node z;           /* (latent) noise */
    mp_node onehot;      /* (classes) one-hot class the generator is asked for */
    mp_node fake_labels; /* the same class as an index, for the class loss */
    mp_node real;        /* (c, h, w) real images */
    mp_node real_labels;
    mp_node ones, zeros; /* (1) BCE targets */
    /* outputs */
    mp_node fake;                /* (c, h, w) generated images (tanh) */
    mp_node real_src, fake_src;  /* (1) real/fake logits */
    mp_node real_cls, fake_cls;  /* (classes) class logits */
    /* losses: D on real = real_src_loss + real_cls_loss; D on fake =
     * fake_src_loss + fake_cls_loss; G = gen_src_loss + fake_cls_loss */
    mp_node real_src_loss, real_cls_loss, fake_src_loss, fake_cls_loss, gen_src_loss;
    /* WGAN-GP (mp_acgan_add_interpolates): interp = eps * real + keep * fake
     * with eps, keep = 1 - eps per sample (inputs of the image's shape), and
     * a third tied discriminator copy (d_interp_*) on it, interp_src its
     * real/fake logit; has_interp false: none */
    bool has_interp;
    mp_node gp_eps, gp_keep, interp, interp_src;
} mp_acgan;

/* Builds the AC-GAN for (c, h, w) images (h and w multiples of 4),
 * `classes` classes and `latent` noise features; on error m->g is NULL. */
mp_status mp_acgan_build(mp_acgan *m, int c, int h, int w, int classes, int latent);
void mp_acgan_free(mp_acgan *m);
/* Adds the interpolates and the discriminator on them (WGAN-GP's gradient
 * penalty, mixprec/penalty.h), before the policy is applied. */
mp_status mp_acgan_add_interpolates(mp_acgan *m);
/* The five losses in the order above, for mp_plan_opts.losses. */
int mp_acgan_losses(const mp_acgan *m, mp_node *losses);
/* DCGAN initialization: conv/linear weights N(0, 0.02), biases 0, BN gamma
 * N(1, 0.02), beta 0; the class embedding N(0, 1) (as nn.Embedding, so that
 * noise * embedding has the noise's unit variance); reproducible from seed. */
void mp_acgan_init_params(mp_acgan *m, uint64_t seed);
/* Whether graph parameter k belongs to the generator. */
bool mp_acgan_is_generator_param(const mp_acgan *m, int k);
/* Trainable elements of the generator (the rest are the discriminator's). */
int64_t mp_acgan_generator_param_count(const mp_acgan *m);

/* Shared by builders: conv (no bias, the options' stride, padding, groups) +
 * batchnorm named <name>, <name>_bn. */
mp_node mp_conv_bn(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);
/* conv (no bias, padding kernel/2) + batchnorm + relu named <name>,
 * <name>_bn, <name>_relu. */
mp_node mp_conv_bn_relu(mp_graph *g, const char *name, mp_node x, int out_channels, int kernel, int stride);
/* Model names ending in ".onnx" (zoo_onnx.c): the file is imported, and its
 * input shape and class count must be the data's (c, h, w, classes; classes
 * 0: the file's own, unchecked). */
bool mp_model_is_onnx_name(const char *name);
mp_status mp_model_onnx_check(const char *name);
mp_status mp_model_onnx_build(const char *name, int c, int h, int w, int classes, mp_model *m);

/* Attach labels + softmax cross-entropy to logits and mark outputs. */
mp_status mp_model_finish(mp_model *m, mp_node logits);

#endif
