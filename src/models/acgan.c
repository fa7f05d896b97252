/* acgan.c — AC-GAN (Odena et al., seed 001) as one graph, see models.h.
 *
 * Generator: one-hot class -> linear without bias (the class embedding, as
 * many features as the noise) multiplied elementwise with the noise z, as in
 * Keras' AC-GAN (seed 001) -> linear to 128 x h/4 x w/4 -> BN -> ReLU ->
 * transposed conv 4x4/2 to 64 x h/2 x w/2 -> BN -> ReLU -> transposed conv
 * 4x4/2 to c x h x w -> tanh. The class reaches the generator only as a
 * per-class scaling of the noise, so the noise cannot be ignored
 * (concatenated, the generator learnt one image per class whatever the
 * noise; bench/NOTES.md has both measured).
 * Discriminator: conv 4x4/2 (64) -> leaky 0.2 -> conv 4x4/2 (128) -> BN ->
 * leaky 0.2 -> flatten -> two heads: real/fake logit (1) and class logits.
 * It is built once on the real batch (d_*) and once on the generated batch
 * (d_fake_*), each parametrized node of the second copy tied to the first.
 * Channel counts are multiples of 8 (Tensor Cores, seed 001). */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "graph/graph.h"
#include "models/models.h"

#define G_CHANNELS 128 /* after the dense layer; halved by the first transposed conv */
#define D_CHANNELS 64  /* first conv; doubled by the second */

static mp_node generator(mp_acgan *m) {
    mp_graph *g = m->g;
    const int h4 = m->h / 4, w4 = m->w / 4;
    mp_node embed = mp_linear(g, "g_embed", m->onehot, (mp_linear_opts){.out_features = m->latent});
    mp_node x = mp_mul(g, "g_cond", m->z, embed);
    x = mp_linear(g, "g_fc", x, (mp_linear_opts){.out_features = G_CHANNELS * h4 * w4}); /* BN follows: no bias */
    x = mp_reshape(g, "g_fc_reshape", x, G_CHANNELS, h4, w4);
    x = mp_batchnorm2d(g, "g_fc_bn", x, (mp_batchnorm_opts){0});
    x = mp_relu(g, "g_fc_relu", x);
    x = mp_conv_transpose2d(g, "g_up1", x,
                            (mp_conv_opts){.out_channels = G_CHANNELS / 2, .kernel = 4, .stride = 2, .padding = 1});
    x = mp_batchnorm2d(g, "g_up1_bn", x, (mp_batchnorm_opts){0});
    x = mp_relu(g, "g_up1_relu", x);
    x = mp_conv_transpose2d(g, "g_up2", x,
                            (mp_conv_opts){.out_channels = m->c, .kernel = 4, .stride = 2, .padding = 1, .bias = true});
    return mp_tanh(g, "g_out", x);
}

/* The parametrized nodes of one discriminator copy. */
typedef struct {
    mp_node conv1, conv2, bn2, src, cls;
} d_nodes;

/* Ties node to from's parameters when building the second copy. */
static mp_status tie(mp_graph *g, mp_node node, const d_nodes *first, mp_node from) {
    if (!first || node < 0) return mp_graph_status(g);
    return mp_graph_share_params(g, node, from);
}

static mp_status discriminator(mp_graph *g, const char *prefix, mp_node x, int classes, const d_nodes *first,
                               d_nodes *out) {
    char name[MP_NAME_MAX];
#define NAME(s) (snprintf(name, sizeof name, "%s%s", prefix, s), name)
    out->conv1 = mp_conv2d(g, NAME("conv1"), x,
                           (mp_conv_opts){.out_channels = D_CHANNELS, .kernel = 4, .stride = 2, .padding = 1, .bias = true});
    MP_TRY(tie(g, out->conv1, first, first ? first->conv1 : -1));
    x = mp_leaky_relu(g, NAME("conv1_act"), out->conv1, 0.2f);
    out->conv2 = mp_conv2d(g, NAME("conv2"), x,
                           (mp_conv_opts){.out_channels = 2 * D_CHANNELS, .kernel = 4, .stride = 2, .padding = 1});
    MP_TRY(tie(g, out->conv2, first, first ? first->conv2 : -1));
    out->bn2 = mp_batchnorm2d(g, NAME("conv2_bn"), out->conv2, (mp_batchnorm_opts){0});
    MP_TRY(tie(g, out->bn2, first, first ? first->bn2 : -1));
    x = mp_leaky_relu(g, NAME("conv2_act"), out->bn2, 0.2f);
    x = mp_flatten(g, NAME("flat"), x);
    out->src = mp_linear(g, NAME("src"), x, (mp_linear_opts){.out_features = 1, .bias = true});
    MP_TRY(tie(g, out->src, first, first ? first->src : -1));
    out->cls = mp_linear(g, NAME("cls"), x, (mp_linear_opts){.out_features = classes, .bias = true});
    MP_TRY(tie(g, out->cls, first, first ? first->cls : -1));
#undef NAME
    return mp_graph_status(g);
}

static mp_status build(mp_acgan *m) {
    mp_graph *g = m->g;
    m->z = mp_graph_targets(g, "z", m->latent);
    m->onehot = mp_graph_targets(g, "class_onehot", m->classes);
    m->fake_labels = mp_graph_labels(g, "fake_labels");
    m->real = mp_graph_input(g, "real", m->c, m->h, m->w);
    m->real_labels = mp_graph_labels(g, "real_labels");
    m->ones = mp_graph_targets(g, "ones", 1);
    m->zeros = mp_graph_targets(g, "zeros", 1);
    m->fake = generator(m);
    d_nodes real, fake;
    MP_TRY(discriminator(g, "d_", m->real, m->classes, NULL, &real));
    MP_TRY(discriminator(g, "d_fake_", m->fake, m->classes, &real, &fake));
    m->real_src = real.src, m->real_cls = real.cls;
    m->fake_src = fake.src, m->fake_cls = fake.cls;
    m->real_src_loss = mp_bce_with_logits(g, "real_src_loss", m->real_src, m->ones);
    m->real_cls_loss = mp_softmax_cross_entropy(g, "real_cls_loss", m->real_cls, m->real_labels);
    m->fake_src_loss = mp_bce_with_logits(g, "fake_src_loss", m->fake_src, m->zeros);
    m->fake_cls_loss = mp_softmax_cross_entropy(g, "fake_cls_loss", m->fake_cls, m->fake_labels);
    m->gen_src_loss = mp_bce_with_logits(g, "gen_src_loss", m->fake_src, m->ones);
    mp_node outputs[] = {m->fake, m->real_src_loss, m->real_cls_loss, m->fake_src_loss, m->fake_cls_loss,
                         m->gen_src_loss};
    for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++) mp_graph_mark_output(g, outputs[i]);
    return mp_graph_status(g);
}

mp_status mp_acgan_build(mp_acgan *m, int c, int h, int w, int classes, int latent) {
    memset(m, 0, sizeof *m);
    if (c < 1 || h < 4 || w < 4 || h % 4 || w % 4)
        return mp_error(MP_ERR_SHAPE, "acgan: images of %dx%dx%d: height and width must be multiples of 4", c, h, w);
    if (classes < 2 || latent < 1)
        return mp_error(MP_ERR_INVALID_ARG, "acgan: needs at least 2 classes (got %d) and 1 noise feature (got %d)",
                        classes, latent);
    *m = (mp_acgan){.g = mp_graph_create(), .latent = latent, .classes = classes, .c = c, .h = h, .w = w};
    if (!m->g) return mp_error(MP_ERR_NOMEM, "acgan: out of memory");
    mp_status s = build(m);
    if (s != MP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mp_last_error());
        mp_acgan_free(m);
        return mp_error(s, "acgan for %dx%dx%d images: %s", c, h, w, msg);
    }
    return MP_OK;
}

void mp_acgan_free(mp_acgan *m) {
    mp_graph_destroy(m->g);
    m->g = NULL;
}

mp_status mp_acgan_add_interpolates(mp_acgan *m) {
    mp_graph *g = m->g;
    if (m->has_interp) return mp_error(MP_ERR_INVALID_ARG, "acgan: the interpolates are already there");
    const d_nodes real = {.conv1 = mp_graph_find(g, "d_conv1"), .conv2 = mp_graph_find(g, "d_conv2"),
                          .bn2 = mp_graph_find(g, "d_conv2_bn"), .src = mp_graph_find(g, "d_src"),
                          .cls = mp_graph_find(g, "d_cls")};
    m->gp_eps = mp_graph_input(g, "gp_eps", m->c, m->h, m->w);
    m->gp_keep = mp_graph_input(g, "gp_keep", m->c, m->h, m->w);
    m->interp = mp_add(g, "gp_interp", mp_mul(g, "gp_real_part", m->gp_eps, m->real),
                       mp_mul(g, "gp_fake_part", m->gp_keep, m->fake));
    d_nodes on;
    MP_TRY(discriminator(g, "d_interp_", m->interp, m->classes, &real, &on));
    m->interp_src = on.src;
    m->has_interp = true;
    return mp_graph_status(g);
}

int mp_acgan_losses(const mp_acgan *m, mp_node *losses) {
    const mp_node all[] = {m->real_src_loss, m->real_cls_loss, m->fake_src_loss, m->fake_cls_loss, m->gen_src_loss};
    memcpy(losses, all, sizeof all);
    return (int)(sizeof all / sizeof *all);
}

void mp_acgan_init_params(mp_acgan *m, uint64_t seed) {
    mp_graph *g = m->g;
    mp_graph_init_params(g, seed); /* BN running statistics and everything else */
    mp_rng r;
    mp_rng_seed(&r, seed ^ 0xAC6A4ull);
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *p = &g->params[k];
        if (!p->spec.trainable) continue;
        bool bn = g->nodes[p->node].desc.kind == MP_OP_BATCHNORM2D;
        bool weight = !strcmp(p->spec.name, "weight");
        /* the class embedding as nn.Embedding: N(0, 1), so that z * embed keeps
         * the unit variance of the noise (with 0.02 it would shrink it 50x) */
        float sd = strncmp(p->name, "g_embed.", 8) ? 0.02f : 1.0f;
        int64_t n = mp_shape_numel(&p->spec.shape);
        for (int64_t i = 0; i < n; i++) p->data[i] = weight ? (bn ? 1.0f : 0.0f) + sd * (float)mp_rng_normal(&r) : 0.0f;
    }
}

bool mp_acgan_is_generator_param(const mp_acgan *m, int k) {
    return k >= 0 && k < m->g->n_params && !strncmp(m->g->params[k].name, "g_", 2);
}

int64_t mp_acgan_generator_param_count(const mp_acgan *m) {
    int64_t n = 0;
    for (int k = 0; k < m->g->n_params; k++)
        if (m->g->params[k].spec.trainable && mp_acgan_is_generator_param(m, k))
            n += mp_shape_numel(&m->g->params[k].spec.shape);
    return n;
}
