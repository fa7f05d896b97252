/* test_acgan.c — the AC-GAN: its parameter count against a hand count, the
 * tied discriminator, a few GAN iterations on tiny synthetic data (finite
 * losses, non-zero gradients for both networks, each optimizer moving only
 * its own network, the discriminator learning a fixed batch), the losses'
 * weights (D's class head on real images only, weight 2, as Keras'
 * AC-GAN; the generator still trained on the class loss), one shared
 * loss scaler updated once per iteration, the sample grid, and the image
 * writer (PNG signature and IHDR, or the PGM header without libpng). */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "io/image_grid.h"
#include "scratch_dir.h"
#include "train/gan_trainer.h"

enum { B = 8, LATENT = 100, CLASSES = 10 };

static void test_param_count(void) {
    mp_acgan m;
    CHECK(mp_acgan_build(&m, 1, 28, 28, CLASSES, LATENT) == MP_OK, "%s", mp_last_error());
    if (!m.g) return;
    /* by hand: weights + biases, BN gamma + beta; 7x7x128 after the dense layer */
    const int64_t embed = 10 * 100, fc = 100 * (128 * 7 * 7), fc_bn = 2 * 128; /* embedding: one per noise feature */
    const int64_t up1 = 128 * 64 * 4 * 4, up1_bn = 2 * 64, up2 = 64 * 1 * 4 * 4 + 1;
    const int64_t conv1 = 1 * 64 * 4 * 4 + 64, conv2 = 64 * 128 * 4 * 4, conv2_bn = 2 * 128;
    const int64_t src = 128 * 7 * 7 + 1, cls = 128 * 7 * 7 * 10 + 10;
    const int64_t gen = embed + fc + fc_bn + up1 + up1_bn + up2, dis = conv1 + conv2 + conv2_bn + src + cls;
    CHECK(gen == 760681 && dis == 201419, "hand count G %lld D %lld", (long long)gen, (long long)dis);
    CHECK(mp_graph_param_count(m.g) == gen + dis, "parameters %lld, by hand %lld",
          (long long)mp_graph_param_count(m.g), (long long)(gen + dis));
    CHECK(mp_acgan_generator_param_count(&m) == gen, "generator %lld, by hand %lld",
          (long long)mp_acgan_generator_param_count(&m), (long long)gen);
    /* the discriminator on generated images owns no parameters: tied to d_* */
    const char *pairs[][2] = {{"d_fake_conv1", "d_conv1"}, {"d_fake_conv2", "d_conv2"},
                              {"d_fake_conv2_bn", "d_conv2_bn"}, {"d_fake_src", "d_src"}, {"d_fake_cls", "d_cls"}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        mp_node a = mp_graph_find(m.g, pairs[i][0]), b = mp_graph_find(m.g, pairs[i][1]);
        CHECK(a >= 0 && b >= 0 && m.g->nodes[a].first_param == m.g->nodes[b].first_param,
              "%s must use %s's parameters", pairs[i][0], pairs[i][1]);
    }
    mp_shape fake = mp_graph_node_shape(m.g, m.fake, 1), logits = mp_graph_node_shape(m.g, m.fake_cls, 1);
    CHECK(fake.ndim == 4 && fake.dims[1] == 1 && fake.dims[2] == 28 && fake.dims[3] == 28, "fake image shape");
    CHECK(logits.ndim == 2 && logits.dims[1] == CLASSES, "class logits shape");
    CHECK(!strcmp(mp_graph_node_op(m.g, m.fake), mp_graph_node_op(m.g, mp_graph_find(m.g, "g_out"))) &&
              mp_graph_find(m.g, "g_up2") >= 0,
          "generator ends with g_up2 -> g_out");
    /* Keras-style conditioning: noise times a class embedding of the noise's width */
    mp_node cond = mp_graph_find(m.g, "g_cond");
    mp_shape embed_shape = mp_graph_node_shape(m.g, mp_graph_find(m.g, "g_embed"), 1);
    CHECK(cond >= 0 && !strcmp(mp_graph_node_op(m.g, cond), "mul") && embed_shape.dims[1] == LATENT,
          "generator multiplies z by a %d-feature class embedding", LATENT);
    mp_acgan_free(&m);
    mp_acgan bad;
    CHECK_ERR(mp_acgan_build(&bad, 1, 30, 30, CLASSES, LATENT), MP_ERR_SHAPE, "multiples of 4");
}

/* Real batch (B, 1, 28, 28) in [-1, 1] and its labels. */
static void real_batch(float *x, int32_t *y) {
    mp_dataset d;
    MP_ASSERT(mp_dataset_synthetic(B, 1, 28, 28, CLASSES, 7, &d) == MP_OK);
    for (int i = 0; i < B * 28 * 28; i++) x[i] = 2 * d.images[i] - 1;
    memcpy(y, d.labels, B * sizeof *y);
    mp_dataset_free(&d);
}

/* Copies of every trainable parameter; returns the elements copied. */
static int64_t snapshot(const mp_graph *g, float *dst) {
    int64_t at = 0;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *p = &g->params[k];
        if (!p->spec.trainable) continue;
        int64_t n = mp_shape_numel(&p->spec.shape);
        memcpy(dst + at, p->data, (size_t)n * sizeof *dst);
        at += n;
    }
    return at;
}

/* Elements of the generator (or discriminator) that differ from the snapshot. */
static int64_t changed(const mp_acgan *m, const float *before, bool generator) {
    int64_t at = 0, diff = 0;
    for (int k = 0; k < m->g->n_params; k++) {
        const mp_gparam *p = &m->g->params[k];
        if (!p->spec.trainable) continue;
        int64_t n = mp_shape_numel(&p->spec.shape);
        if (mp_acgan_is_generator_param(m, k) == generator)
            for (int64_t i = 0; i < n; i++) diff += memcmp(&p->data[i], &before[at + i], sizeof(float)) != 0;
        at += n;
    }
    return diff;
}

static double grad_norm(const mp_gan_group *gr) {
    double s = 0;
    for (int i = 0; i < gr->n; i++)
        for (int64_t j = 0; j < gr->sizes[i]; j++) s += (double)gr->grads[i][j] * gr->grads[i][j];
    return sqrt(s);
}

static void test_training_steps(void) {
    mp_acgan m;
    MP_ASSERT(mp_acgan_build(&m, 1, 28, 28, CLASSES, LATENT) == MP_OK);
    mp_acgan_init_params(&m, 3);
    mp_gan_ctx c;
    mp_status s = mp_gan_ctx_init(&c, &m, &(mp_gan_opts){.batch = B, .lr = 1e-3f, .use_onednn = true, .seed = 5});
    CHECK(s == MP_OK, "%s", mp_last_error());
    if (s != MP_OK) return;
    CHECK(c.gen.n == 9 && c.dis.n == 9, "tensors: G %d (embed, fc, BN 2, up1, BN 2, up2 2), D %d (conv1 2, conv2, BN 2, "
          "src 2, cls 2)", c.gen.n, c.dis.n);
    float *real = malloc(B * 28 * 28 * sizeof *real);
    int32_t labels[B];
    real_batch(real, labels);
    int64_t total = mp_graph_param_count(m.g);
    float *before = malloc((size_t)total * sizeof *before);
    bool overflow = true, skipped = true;
    CHECK(mp_gan_forward(&c, real, labels, &overflow) == MP_OK && !overflow, "first forward: %s", mp_last_error());
    for (int j = 0; j < 5; j++) CHECK(isfinite(c.losses[j]) && c.losses[j] > 0, "loss %d = %g", j, c.losses[j]);
    const float first_real_cls = c.losses[1];
    /* G's step: G moves, D's weights stay bit-identical */
    snapshot(m.g, before);
    CHECK(mp_gan_update_generator(&c, &skipped) == MP_OK && !skipped, "G update: %s", mp_last_error());
    CHECK(grad_norm(&c.gen) > 0, "the generator's gradient is zero");
    CHECK(changed(&m, before, true) > 0, "the generator did not move");
    CHECK(changed(&m, before, false) == 0, "G's step changed %lld discriminator weights",
          (long long)changed(&m, before, false));
    /* D's step: D moves, G's weights stay bit-identical */
    snapshot(m.g, before);
    CHECK(mp_gan_update_discriminator(&c, &skipped) == MP_OK && !skipped, "D update: %s", mp_last_error());
    CHECK(grad_norm(&c.dis) > 0, "the discriminator's gradient is zero");
    CHECK(changed(&m, before, false) > 0, "the discriminator did not move");
    CHECK(changed(&m, before, true) == 0, "D's step changed %lld generator weights", (long long)changed(&m, before, true));
    CHECK(mp_gan_end_iteration(&c) == MP_OK, "%s", mp_last_error());
    /* more iterations on the same real batch: D learns its classes */
    for (int it = 0; it < 8; it++) {
        CHECK(mp_gan_forward(&c, real, labels, &overflow) == MP_OK && !overflow, "%s", mp_last_error());
        CHECK(mp_gan_update_generator(&c, &skipped) == MP_OK, "%s", mp_last_error());
        CHECK(mp_gan_update_discriminator(&c, &skipped) == MP_OK, "%s", mp_last_error());
        mp_gan_end_iteration(&c);
    }
    mp_gan_forward(&c, real, labels, &overflow);
    CHECK(isfinite(mp_gan_d_loss(&c)) && isfinite(mp_gan_g_loss(&c)), "losses D %g G %g", mp_gan_d_loss(&c),
          mp_gan_g_loss(&c));
    CHECK(c.losses[1] < 0.5f * first_real_cls, "D's class loss on a fixed real batch: %g -> %g", first_real_cls,
          c.losses[1]);
    CHECK(mp_optim_step_count(c.gen.opt) == 9 && mp_optim_step_count(c.dis.opt) == 9, "steps G %lld D %lld",
          (long long)mp_optim_step_count(c.gen.opt), (long long)mp_optim_step_count(c.dis.opt));
    /* the sample grid: one row per class, the same noise down each column */
    enum { ROWS = 10, COLS = 3 };
    float *grid = malloc(ROWS * COLS * 28 * 28 * sizeof *grid);
    CHECK(mp_gan_sample_grid(&m, ROWS, COLS, 1, true, (mp_device){0}, grid) == MP_OK, "%s", mp_last_error());
    double lo = 1, hi = -1, row_diff = 0, col_diff = 0;
    for (int i = 0; i < ROWS * COLS * 28 * 28; i++) lo = fmin(lo, grid[i]), hi = fmax(hi, grid[i]);
    for (int i = 0; i < 28 * 28; i++) {
        row_diff += fabs(grid[i] - grid[COLS * 28 * 28 + i]); /* class 0 vs class 1, column 0 */
        col_diff += fabs(grid[i] - grid[28 * 28 + i]);        /* column 0 vs column 1, class 0 */
    }
    CHECK(lo >= -1 && hi <= 1 && hi > lo, "samples in [%g, %g]", lo, hi);
    CHECK(row_diff > 0 && col_diff > 0, "class and noise change the sample: %g, %g", row_diff, col_diff);
    free(grid);
    free(before);
    free(real);
    mp_gan_ctx_free(&c);
    mp_acgan_free(&m);
}

/* A network's gradients (the group's tensors, in order) into dst. */
static void copy_grads(const mp_gan_group *gr, float *dst) {
    for (int i = 0; i < gr->n; i++, dst += gr->sizes[i - 1])
        memcpy(dst, gr->grads[i], (size_t)gr->sizes[i] * sizeof *dst);
}

/* ||got - sum_j w[j] parts[j]|| / ||sum_j w[j] parts[j]|| over n elements. */
static double combo_error(const float *got, float *const *parts, const double *w, int n_parts, int64_t n) {
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int j = 0; j < n_parts; j++) want += w[j] * parts[j][i];
        err += (got[i] - want) * (got[i] - want);
        ref += want * want;
    }
    return sqrt(err / ref);
}

static double norm(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* The discriminator's class head learns from real images only (Keras'
 * AC-GAN, seed 001): D's gradient is that of real_src + 2 real_cls +
 * fake_src (+ W fake_cls with --aux-fake-weight W), each loss's gradient
 * taken alone on the same forward; the generator's is that of gen_src +
 * fake_cls whatever W is. */
static void test_aux_class_weights(void) {
    enum { RS, RC, FS, FC, GS, N_LOSS };
    for (int variant = 0; variant < 2; variant++) {
        const float w_fake = variant ? 0.5f : 0.0f; /* the default, and --aux-fake-weight 0.5 */
        mp_acgan m;
        MP_ASSERT(mp_acgan_build(&m, 1, 28, 28, CLASSES, LATENT) == MP_OK);
        mp_acgan_init_params(&m, 3);
        mp_gan_ctx c;
        mp_status s = mp_gan_ctx_init(
            &c, &m, &(mp_gan_opts){.batch = B, .use_onednn = true, .aux_fake_weight = w_fake, .seed = 5});
        CHECK(s == MP_OK, "%s", mp_last_error());
        if (s != MP_OK) return;
        int64_t nd = 0, ng = 0;
        for (int i = 0; i < c.dis.n; i++) nd += c.dis.sizes[i];
        for (int i = 0; i < c.gen.n; i++) ng += c.gen.sizes[i];
        float *real = malloc(B * 28 * 28 * sizeof *real), *dg[N_LOSS], *gg[N_LOSS];
        float *got_d = malloc((size_t)nd * sizeof *got_d), *got_g = malloc((size_t)ng * sizeof *got_g);
        for (int j = 0; j < N_LOSS; j++) {
            dg[j] = malloc((size_t)nd * sizeof *dg[j]);
            gg[j] = malloc((size_t)ng * sizeof *gg[j]);
        }
        int32_t labels[B];
        real_batch(real, labels);
        bool overflow = true, skipped = true;
        CHECK(mp_gan_forward(&c, real, labels, &overflow) == MP_OK && !overflow, "%s", mp_last_error());
        /* each loss's gradients alone, before any step */
        mp_node losses[MP_MAX_LOSSES];
        mp_acgan_losses(&m, losses);
        for (int j = 0; j < N_LOSS; j++) {
            mp_graph_zero_grad(m.g);
            CHECK(mp_plan_backward_from(c.plan, losses[j], 1) == MP_OK, "%s", mp_last_error());
            copy_grads(&c.dis, dg[j]);
            copy_grads(&c.gen, gg[j]);
        }
        /* guards: the class loss on generated images does reach D and G */
        CHECK(norm(dg[FC], nd) > 0.1 * norm(dg[RC], nd), "D's gradient of fake_cls %g, of real_cls %g",
              norm(dg[FC], nd), norm(dg[RC], nd));
        CHECK(norm(gg[FC], ng) > 0, "fake_cls does not reach the generator");
        /* the generator: gen_src + fake_cls, as before */
        CHECK(mp_gan_update_generator(&c, &skipped) == MP_OK && !skipped, "%s", mp_last_error());
        copy_grads(&c.gen, got_g);
        float *g_parts[] = {gg[GS], gg[FC]};
        double e = combo_error(got_g, g_parts, (double[]){1, 1}, 2, ng);
        CHECK(e < 1e-5, "W %g: G's gradient is not that of gen_src + fake_cls: relative error %g", w_fake, e);
        /* the discriminator: real_src + 2 real_cls + fake_src + W fake_cls */
        CHECK(mp_gan_update_discriminator(&c, &skipped) == MP_OK && !skipped, "%s", mp_last_error());
        copy_grads(&c.dis, got_d);
        float *d_parts[] = {dg[RS], dg[RC], dg[FS], dg[FC]};
        const double w_d[] = {1, MP_GAN_AUX_REAL_WEIGHT, 1, w_fake};
        e = combo_error(got_d, d_parts, w_d, 4, nd);
        /* guard: other weights, all 1 (before) or 1 on real_cls, give a gradient far from the expected one */
        float *want = malloc((size_t)nd * sizeof *want);
        for (int64_t i = 0; i < nd; i++)
            want[i] = (float)(dg[RS][i] + w_d[1] * dg[RC][i] + dg[FS][i] + w_fake * dg[FC][i]);
        double e_equal = combo_error(want, d_parts, (double[]){1, 1, 1, 1}, 4, nd);
        double e_no_2 = combo_error(want, d_parts, (double[]){1, 1, 1, w_fake}, 4, nd);
        free(want);
        CHECK(MP_GAN_AUX_REAL_WEIGHT == 2.0f, "the real images' class loss weighs %g, Keras' AC-GAN 2",
              (double)MP_GAN_AUX_REAL_WEIGHT);
        CHECK(e < 1e-5, "W %g: D's gradient is not that of real_src + 2 real_cls + fake_src + W fake_cls: relative "
              "error %g", w_fake, e);
        CHECK(e_equal > 1e-2 && e_no_2 > 1e-2, "W %g: the weights cannot be told apart (%g, %g)", w_fake, e_equal,
              e_no_2);
        double want_d = c.losses[RS] + 2.0 * c.losses[RC] + c.losses[FS] + (double)w_fake * c.losses[FC];
        CHECK(fabs(mp_gan_d_loss(&c) - want_d) < 1e-5 * want_d, "W %g: D loss %g, expected %g", w_fake,
              mp_gan_d_loss(&c), want_d);
        CHECK(fabs(mp_gan_g_loss(&c) - ((double)c.losses[GS] + c.losses[FC])) < 1e-6 * mp_gan_g_loss(&c),
              "G loss %g", mp_gan_g_loss(&c));
        for (int j = 0; j < N_LOSS; j++) free(dg[j]), free(gg[j]);
        free(got_d);
        free(got_g);
        free(real);
        mp_gan_ctx_free(&c);
        mp_acgan_free(&m);
    }
    mp_acgan m;
    MP_ASSERT(mp_acgan_build(&m, 1, 28, 28, CLASSES, LATENT) == MP_OK);
    mp_gan_ctx c;
    CHECK_ERR(mp_gan_ctx_init(&c, &m, &(mp_gan_opts){.batch = B, .aux_fake_weight = -1}), MP_ERR_INVALID_ARG,
              "--aux-fake-weight -1");
    mp_gan_ctx_free(&c);
    mp_acgan_free(&m);
}

/* With the default weights D's step does not depend on the classes asked of
 * the generated images: two runs from the same state whose forwards differ
 * only in the generated images' class labels (the same images) leave D's
 * weights bit-identical; with --aux-fake-weight 1 they differ. */
static void test_d_ignores_fake_labels(void) {
    for (int variant = 0; variant < 2; variant++) {
        const float w_fake = (float)variant;
        mp_acgan m[2];
        mp_gan_ctx c[2];
        float *real = malloc(B * 28 * 28 * sizeof *real), fake_cls[2] = {0, 0};
        int32_t labels[B];
        real_batch(real, labels);
        for (int r = 0; r < 2; r++) {
            MP_ASSERT(mp_acgan_build(&m[r], 1, 28, 28, CLASSES, LATENT) == MP_OK);
            mp_acgan_init_params(&m[r], 3);
            MP_ASSERT(mp_gan_ctx_init(&c[r], &m[r], &(mp_gan_opts){.batch = B, .use_onednn = true,
                                                                   .aux_fake_weight = w_fake, .seed = 5}) == MP_OK);
            bool overflow = true, skipped = true;
            CHECK(mp_gan_forward(&c[r], real, labels, &overflow) == MP_OK && !overflow, "%s", mp_last_error());
            if (r == 1) { /* the same images, other class targets for D's class head */
                int32_t other[B];
                for (int i = 0; i < B; i++) other[i] = (c[r].fake_labels[i] + 1 + i % (CLASSES - 1)) % CLASSES;
                MP_ASSERT(mp_plan_set_labels(c[r].plan, m[r].fake_labels, other, B) == MP_OK);
                MP_ASSERT(mp_plan_forward(c[r].plan) == MP_OK);
                mp_node losses[MP_MAX_LOSSES];
                mp_acgan_losses(&m[r], losses);
                MP_ASSERT(mp_plan_read(c[r].plan, losses[3], &c[r].losses[3], 1) == MP_OK);
            }
            fake_cls[r] = c[r].losses[3];
            CHECK(mp_gan_update_generator(&c[r], &skipped) == MP_OK, "%s", mp_last_error());
            CHECK(mp_gan_update_discriminator(&c[r], &skipped) == MP_OK && !skipped, "%s", mp_last_error());
        }
        CHECK(fabsf(fake_cls[0] - fake_cls[1]) > 0.01f, "the labels did not change fake_cls: %g, %g", fake_cls[0],
              fake_cls[1]);
        int64_t differ = 0, n = 0;
        for (int k = 0; k < m[0].g->n_params; k++) {
            const mp_gparam *a = &m[0].g->params[k], *b = &m[1].g->params[k];
            if (!a->spec.trainable || mp_acgan_is_generator_param(&m[0], k)) continue;
            int64_t len = mp_shape_numel(&a->spec.shape);
            for (int64_t i = 0; i < len; i++) differ += memcmp(&a->data[i], &b->data[i], sizeof(float)) != 0;
            n += len;
        }
        if (variant == 0)
            CHECK(differ == 0, "default weights: D's step depends on the generated images' labels (%lld of %lld "
                  "weights differ)", (long long)differ, (long long)n);
        else
            CHECK(differ > n / 100, "--aux-fake-weight 1: D's step should depend on them (%lld of %lld differ)",
                  (long long)differ, (long long)n);
        for (int r = 0; r < 2; r++) mp_gan_ctx_free(&c[r]), mp_acgan_free(&m[r]);
        free(real);
    }
}

/* amp-fp16 with the shared dynamic scaler: one scaler update per iteration
 * (not per optimizer or loss), each optimizer stepped or skipped. */
static void test_shared_scaler(void) {
    mp_acgan m;
    MP_ASSERT(mp_acgan_build(&m, 1, 28, 28, CLASSES, LATENT) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    mp_acgan_init_params(&m, 4);
    mp_gan_ctx c;
    mp_status s = mp_gan_ctx_init(&c, &m, &(mp_gan_opts){.batch = B, .use_onednn = true, .loss_scaling = true,
                                                         .scaler = {.dynamic = true}, .seed = 6});
    CHECK(s == MP_OK, "%s", mp_last_error());
    if (s != MP_OK) return;
    float *real = malloc(B * 28 * 28 * sizeof *real);
    int32_t labels[B];
    real_batch(real, labels);
    enum { ITERS = 5 };
    double want_scale = 65536;
    for (int it = 0; it < ITERS; it++) {
        bool overflow, g_skipped, d_skipped;
        CHECK(mp_gan_forward(&c, real, labels, &overflow) == MP_OK && !overflow, "%s", mp_last_error());
        CHECK(mp_gan_update_generator(&c, &g_skipped) == MP_OK, "%s", mp_last_error());
        CHECK(mp_gan_update_discriminator(&c, &d_skipped) == MP_OK, "%s", mp_last_error());
        CHECK(mp_gan_end_iteration(&c) == MP_OK, "%s", mp_last_error());
        if (g_skipped || d_skipped) want_scale *= 0.5; /* backs off once, whoever overflowed */
        if (getenv("MP_TEST_VERBOSE")) printf("  iteration %d: G %s, D %s, scale %g\n", it, g_skipped ? "skipped" : "stepped",
                                              d_skipped ? "skipped" : "stepped", mp_gan_loss_scale(&c));
    }
    CHECK(mp_gan_loss_scale(&c) == (float)want_scale, "scale %g, expected %g", mp_gan_loss_scale(&c), want_scale);
    CHECK(c.scaler.step == ITERS, "scaler updates %lld, iterations %d", (long long)c.scaler.step, ITERS);
    CHECK(mp_optim_step_count(c.gen.opt) + c.gen.skipped == ITERS &&
              mp_optim_step_count(c.dis.opt) + c.dis.skipped == ITERS,
          "G %lld+%lld, D %lld+%lld", (long long)mp_optim_step_count(c.gen.opt), (long long)c.gen.skipped,
          (long long)mp_optim_step_count(c.dis.opt), (long long)c.dis.skipped);
    CHECK(mp_optim_step_count(c.dis.opt) > 0, "the discriminator never stepped under amp-fp16");
    free(real);
    mp_gan_ctx_free(&c);
    mp_acgan_free(&m);
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Writes a grid and checks the file's header: width, height, channels. */
static void check_grid_file(const char *dir, int rows, int cols, int c, int h, int w) {
    const int n = rows * cols;
    float *img = malloc((size_t)n * c * h * w * sizeof *img);
    for (int i = 0; i < n * c * h * w; i++) img[i] = (float)(i % 7) / 3.0f - 1.0f;
    char stem[4400], path[4400];
    snprintf(stem, sizeof stem, "%s/grid_%dx%d_c%d", dir, rows, cols, c);
    mp_image_grid gr = {.rows = rows, .cols = cols, .c = c, .h = h, .w = w, .lo = -1, .hi = 1};
    CHECK(mp_image_grid_write(stem, img, &gr, path, sizeof path) == MP_OK, "%s", mp_last_error());
    free(img);
    unsigned char head[64] = {0};
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "%s not written", path);
    if (!f) return;
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (mp_image_png_available()) {
        static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        CHECK(got >= 33 && !memcmp(head, sig, 8), "%s: no PNG signature", path);
        CHECK(be32(head + 8) == 13 && !memcmp(head + 12, "IHDR", 4), "%s: IHDR is not the first chunk", path);
        CHECK(be32(head + 16) == (uint32_t)(cols * w) && be32(head + 20) == (uint32_t)(rows * h),
              "%s: IHDR %ux%u, expected %dx%d", path, be32(head + 16), be32(head + 20), cols * w, rows * h);
        CHECK(head[24] == 8 && head[25] == (c == 1 ? 0 : 2), "%s: bit depth %d, colour type %d", path, head[24],
              head[25]);
    } else {
        char want[64];
        snprintf(want, sizeof want, "P%c\n%d %d\n255\n", c == 1 ? '5' : '6', cols * w, rows * h);
        CHECK(got > strlen(want) && !memcmp(head, want, strlen(want)), "%s: PNM header", path);
    }
}

static void test_image_grid(void) {
    char dir[4096];
    scratch_dir_create(dir, sizeof dir, "test_acgan");
    check_grid_file(dir, 10, 10, 1, 28, 28); /* 280x280, as train-gan writes for Fashion-MNIST */
    check_grid_file(dir, 2, 3, 3, 4, 5);
    mp_image_grid bad = {.rows = 1, .cols = 1, .c = 2, .h = 1, .w = 1, .lo = 0, .hi = 1};
    char path[64];
    float px[2] = {0, 0};
    CHECK_ERR(mp_image_grid_write("x", px, &bad, path, sizeof path), MP_ERR_INVALID_ARG, "1 or 3 channels");
    mp_image_grid ok = {.rows = 1, .cols = 1, .c = 1, .h = 1, .w = 1, .lo = 0, .hi = 1};
    CHECK_ERR(mp_image_grid_write("/nonexistent-dir/x", px, &ok, path, sizeof path), MP_ERR_IO, "/nonexistent-dir/x.");
    scratch_dir_remove(dir);
}

int main(void) {
    test_param_count();
    test_training_steps();
    test_aux_class_weights();
    test_d_ignores_fake_labels();
    test_shared_scaler();
    test_image_grid();
    return test_summary("test_acgan");
}
