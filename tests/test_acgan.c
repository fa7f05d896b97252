/* test_acgan.c — the AC-GAN: its parameter count against a hand count, the
 * tied discriminator, a few GAN iterations on tiny synthetic data (finite
 * losses, non-zero gradients for both networks, each optimizer moving only
 * its own network, the discriminator learning a fixed batch), the losses'
 * weights (D's class head on real images only, weight 2, as Keras'
 * AC-GAN; the generator still trained on the class loss), one shared
 * loss scaler updated once per iteration, the sample grid, and the image
 * writer (PNG signature and IHDR, or the PGM header without libpng; libpng's
 * errors in the one error, not on stderr). */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "io/image_grid.h"
#include "scratch_dir.h"
#include "train/gan_trainer.h"
#include "train/trainer.h"

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

/* One iteration's inputs: a real batch and the generator's noise and classes. */
typedef struct {
    float real[B * 28 * 28], z[B * LATENT], onehot[B * CLASSES], ones[B], zeros[B];
    int32_t labels[B], fake_labels[B];
} gan_inputs;

static void make_inputs(gan_inputs *in, uint64_t seed) {
    real_batch(in->real, in->labels);
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int i = 0; i < B * LATENT; i++) in->z[i] = (float)mp_rng_normal(&r);
    memset(in->onehot, 0, sizeof in->onehot);
    for (int i = 0; i < B; i++) {
        in->fake_labels[i] = (int32_t)mp_rng_below(&r, CLASSES);
        in->onehot[i * CLASSES + in->fake_labels[i]] = 1;
        in->ones[i] = 1, in->zeros[i] = 0;
    }
}

/* Sets every input of the GAN through set_input / set_labels of a plan or a
 * trainer (the same signatures). */
#define SET_INPUTS(set_input, set_labels, obj, m, in)                                                          \
    do {                                                                                                         \
        MP_ASSERT(set_input(obj, (m)->real, (in)->real, B * 28 * 28) == MP_OK);                                  \
        MP_ASSERT(set_labels(obj, (m)->real_labels, (in)->labels, B) == MP_OK);                                  \
        MP_ASSERT(set_input(obj, (m)->z, (in)->z, B * LATENT) == MP_OK);                                         \
        MP_ASSERT(set_input(obj, (m)->onehot, (in)->onehot, B * CLASSES) == MP_OK);                              \
        MP_ASSERT(set_labels(obj, (m)->fake_labels, (in)->fake_labels, B) == MP_OK);                             \
        MP_ASSERT(set_input(obj, (m)->ones, (in)->ones, B) == MP_OK);                                            \
        MP_ASSERT(set_input(obj, (m)->zeros, (in)->zeros, B) == MP_OK);                                          \
    } while (0)

/* An AC-GAN with its two groups and a trainer over `which` of them (both, or
 * only the generator's or only the discriminator's). */
typedef struct {
    mp_acgan m;
    mp_train_group groups[2];
    mp_trainer *t;
} gan;

enum { BOTH = -1, GEN = 0, DIS = 1 };

static mp_status gan_open(gan *g, uint64_t init_seed, mp_precision p, float aux_fake_weight, float lr, int which) {
    memset(g, 0, sizeof *g);
    MP_ASSERT(mp_acgan_build(&g->m, 1, 28, 28, CLASSES, LATENT) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(g->m.g, (mp_policy_opts){.precision = p}) == MP_OK);
    mp_acgan_init_params(&g->m, init_seed);
    MP_TRY(mp_gan_groups(&g->m, lr, 0.5f, aux_fake_weight, g->groups));
    mp_trainer_opts o = {.batch = B, .seed = 5};
    if (which == BOTH) {
        o.n_groups = 2;
        o.groups[0] = g->groups[0], o.groups[1] = g->groups[1];
    } else {
        o.n_groups = 1;
        o.groups[0] = g->groups[which];
    }
    return mp_trainer_create(g->m.g, &o, &g->t);
}

static void gan_close(gan *g) {
    mp_trainer_destroy(g->t);
    for (int i = 0; i < 2; i++) mp_optimizer_destroy(g->groups[i].optimizer);
    mp_acgan_free(&g->m);
}

static mp_status gan_step(gan *g, const gan_inputs *in) {
    SET_INPUTS(mp_trainer_set_input, mp_trainer_set_labels, g->t, &g->m, in);
    return mp_trainer_step(g->t, NULL, NULL);
}

/* The five losses of the last forward, in mp_acgan_losses order. */
static void read_losses(gan *g, float *losses) {
    mp_node ids[MP_MAX_LOSSES];
    const int n = mp_acgan_losses(&g->m, ids);
    for (int j = 0; j < n; j++) MP_ASSERT(mp_trainer_read(g->t, ids[j], &losses[j], 1) == MP_OK);
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

/* The gradients of one network's trainable tensors, concatenated in graph
 * order, into dst (NULL: only count); returns the elements. */
static int64_t net_grads(const mp_acgan *m, bool generator, float *dst) {
    int64_t at = 0;
    for (int k = 0; k < m->g->n_params; k++) {
        const mp_gparam *p = &m->g->params[k];
        if (!p->spec.trainable || mp_acgan_is_generator_param(m, k) != generator) continue;
        const int64_t n = mp_shape_numel(&p->spec.shape);
        if (dst) memcpy(dst + at, p->grad, (size_t)n * sizeof *dst);
        at += n;
    }
    return at;
}

static double norm(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* Each group moves only its own network: a trainer over the generator's
 * group alone leaves the discriminator bit-identical, and the other way
 * round; both together train, and D learns a fixed real batch's classes. */
static void test_training_steps(void) {
    static gan_inputs in;
    make_inputs(&in, 11);
    int64_t total = 0;
    for (int which = GEN; which <= DIS; which++) {
        gan g;
        mp_status s = gan_open(&g, 3, MP_PRECISION_FP32, 0, 1e-3f, which);
        CHECK(s == MP_OK, "%s", mp_last_error());
        if (s != MP_OK) return;
        CHECK(mp_optimizer_param_count(g.groups[GEN].optimizer) == 9 && mp_optimizer_param_count(g.groups[DIS].optimizer) == 9,
              "tensors: G %d (embed, fc, BN 2, up1, BN 2, up2 2), D %d (conv1 2, conv2, BN 2, src 2, cls 2)",
              mp_optimizer_param_count(g.groups[GEN].optimizer), mp_optimizer_param_count(g.groups[DIS].optimizer));
        total = mp_graph_param_count(g.m.g);
        float *before = malloc((size_t)total * sizeof *before);
        snapshot(g.m.g, before);
        CHECK(gan_step(&g, &in) == MP_OK, "%s", mp_last_error());
        float losses[5];
        read_losses(&g, losses);
        for (int j = 0; j < 5; j++) CHECK(isfinite(losses[j]) && losses[j] > 0, "loss %d = %g", j, losses[j]);
        const int64_t mine = changed(&g.m, before, which == GEN), other = changed(&g.m, before, which != GEN);
        CHECK(mine > 0, "%s did not move", which == GEN ? "the generator" : "the discriminator");
        CHECK(other == 0, "%s's step changed %lld weights of the other network", which == GEN ? "G" : "D",
              (long long)other);
        free(before);
        gan_close(&g);
    }
    gan g;
    MP_ASSERT(gan_open(&g, 3, MP_PRECISION_FP32, 0, 1e-3f, BOTH) == MP_OK);
    float first[5], last[5];
    for (int it = 0; it < 9; it++) {
        CHECK(gan_step(&g, &in) == MP_OK, "%s", mp_last_error());
        read_losses(&g, it ? last : first);
    }
    CHECK(isfinite(last[0]) && isfinite(last[4]), "losses %g %g", last[0], last[4]);
    CHECK(last[1] < 0.5f * first[1], "D's class loss on a fixed real batch: %g -> %g", first[1], last[1]);
    CHECK(mp_optimizer_steps(g.groups[GEN].optimizer) == 9 && mp_optimizer_steps(g.groups[DIS].optimizer) == 9,
          "steps G %lld D %lld", (long long)mp_optimizer_steps(g.groups[GEN].optimizer),
          (long long)mp_optimizer_steps(g.groups[DIS].optimizer));
    /* the sample grid: one row per class, the same noise down each column */
    enum { ROWS = 10, COLS = 3 };
    float *grid = malloc(ROWS * COLS * 28 * 28 * sizeof *grid);
    CHECK(mp_gan_sample_grid(&g.m, ROWS, COLS, 1, false, (mp_device){0}, grid) == MP_OK, "%s", mp_last_error());
    double lo = 1, hi = -1, row_diff = 0, col_diff = 0;
    for (int i = 0; i < ROWS * COLS * 28 * 28; i++) lo = fmin(lo, grid[i]), hi = fmax(hi, grid[i]);
    for (int i = 0; i < 28 * 28; i++) {
        row_diff += fabs(grid[i] - grid[COLS * 28 * 28 + i]); /* class 0 vs class 1, column 0 */
        col_diff += fabs(grid[i] - grid[28 * 28 + i]);        /* column 0 vs column 1, class 0 */
    }
    CHECK(lo >= -1 && hi <= 1 && hi > lo, "samples in [%g, %g]", lo, hi);
    CHECK(row_diff > 0 && col_diff > 0, "class and noise change the sample: %g, %g", row_diff, col_diff);
    free(grid);
    gan_close(&g);
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

/* The discriminator's class head learns from real images only (Keras'
 * AC-GAN, seed 001): D's gradient is that of real_src + 2 real_cls +
 * fake_src (+ W fake_cls with --aux-fake-weight W), each loss's gradient
 * taken alone on the same forward; the generator's is that of gen_src +
 * fake_cls whatever W is. Each group's gradient is read from a trainer over
 * that group alone (with both, D's backward reuses G's gradient arrays). */
static void test_aux_class_weights(void) {
    enum { RS, RC, FS, FC, GS, N_LOSS };
    static gan_inputs in;
    make_inputs(&in, 12);
    for (int variant = 0; variant < 2; variant++) {
        const float w_fake = variant ? 0.5f : 0.0f; /* the default, and --aux-fake-weight 0.5 */
        /* each loss's gradients alone, on a plan over all five losses */
        gan ref;
        MP_ASSERT(gan_open(&ref, 3, MP_PRECISION_FP32, w_fake, 1e-3f, BOTH) == MP_OK);
        mp_plan *plan = mp_trainer_plan(ref.t);
        const int64_t nd = net_grads(&ref.m, false, NULL), ng = net_grads(&ref.m, true, NULL);
        float *dg[N_LOSS], *gg[N_LOSS];
        for (int j = 0; j < N_LOSS; j++) {
            dg[j] = malloc((size_t)nd * sizeof *dg[j]);
            gg[j] = malloc((size_t)ng * sizeof *gg[j]);
        }
        SET_INPUTS(mp_plan_set_input, mp_plan_set_labels, plan, &ref.m, &in);
        CHECK(mp_plan_forward(plan) == MP_OK, "%s", mp_last_error());
        mp_node losses[MP_MAX_LOSSES];
        mp_acgan_losses(&ref.m, losses);
        for (int j = 0; j < N_LOSS; j++) {
            mp_graph_zero_grad(ref.m.g);
            CHECK(mp_plan_backward_from(plan, losses[j], 1) == MP_OK, "%s", mp_last_error());
            net_grads(&ref.m, false, dg[j]);
            net_grads(&ref.m, true, gg[j]);
        }
        /* guards: the class loss on generated images does reach D and G */
        CHECK(norm(dg[FC], nd) > 0.1 * norm(dg[RC], nd), "D's gradient of fake_cls %g, of real_cls %g",
              norm(dg[FC], nd), norm(dg[RC], nd));
        CHECK(norm(gg[FC], ng) > 0, "fake_cls does not reach the generator");
        float *got = malloc((size_t)(nd > ng ? nd : ng) * sizeof *got);
        /* the generator: gen_src + fake_cls, whatever W */
        gan gen;
        MP_ASSERT(gan_open(&gen, 3, MP_PRECISION_FP32, w_fake, 1e-3f, GEN) == MP_OK);
        CHECK(gan_step(&gen, &in) == MP_OK, "%s", mp_last_error());
        net_grads(&gen.m, true, got);
        float *g_parts[] = {gg[GS], gg[FC]};
        double e = combo_error(got, g_parts, (double[]){1, 1}, 2, ng);
        CHECK(e < 1e-5, "W %g: G's gradient is not that of gen_src + fake_cls: relative error %g", w_fake, e);
        gan_close(&gen);
        /* the discriminator: real_src + 2 real_cls + fake_src + W fake_cls */
        gan dis;
        MP_ASSERT(gan_open(&dis, 3, MP_PRECISION_FP32, w_fake, 1e-3f, DIS) == MP_OK);
        CHECK(gan_step(&dis, &in) == MP_OK, "%s", mp_last_error());
        net_grads(&dis.m, false, got);
        float *d_parts[] = {dg[RS], dg[RC], dg[FS], dg[FC]};
        const double w_d[] = {1, MP_GAN_AUX_REAL_WEIGHT, 1, w_fake};
        e = combo_error(got, d_parts, w_d, 4, nd);
        /* guard: other weights, all 1 or 1 on real_cls, give a gradient far from the expected one */
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
        gan_close(&dis);
        for (int j = 0; j < N_LOSS; j++) free(dg[j]), free(gg[j]);
        free(got);
        gan_close(&ref);
    }
    mp_acgan m;
    MP_ASSERT(mp_acgan_build(&m, 1, 28, 28, CLASSES, LATENT) == MP_OK);
    mp_train_group groups[2];
    CHECK_ERR(mp_gan_groups(&m, 2e-4f, 0.5f, -1, groups), MP_ERR_INVALID_ARG, "--aux-fake-weight -1");
    mp_acgan_free(&m);
}

/* With the default weights D's step does not depend on the classes asked of
 * the generated images: two runs from the same state whose inputs differ only
 * in the generated images' class labels (the same images: the same noise and
 * one-hot conditioning) leave D's weights bit-identical; with
 * --aux-fake-weight 1 they differ. */
static void test_d_ignores_fake_labels(void) {
    static gan_inputs in[2];
    for (int variant = 0; variant < 2; variant++) {
        const float w_fake = (float)variant;
        gan g[2];
        float fake_cls[2] = {0, 0};
        for (int r = 0; r < 2; r++) {
            make_inputs(&in[r], 13);
            if (r == 1) /* the same images, other class targets for D's class head */
                for (int i = 0; i < B; i++) in[r].fake_labels[i] = (in[0].fake_labels[i] + 1 + i % (CLASSES - 1)) % CLASSES;
            MP_ASSERT(gan_open(&g[r], 3, MP_PRECISION_FP32, w_fake, 1e-3f, BOTH) == MP_OK);
            CHECK(gan_step(&g[r], &in[r]) == MP_OK, "%s", mp_last_error());
            float losses[5];
            read_losses(&g[r], losses);
            fake_cls[r] = losses[3];
        }
        CHECK(fabsf(fake_cls[0] - fake_cls[1]) > 0.01f, "the labels did not change fake_cls: %g, %g", fake_cls[0],
              fake_cls[1]);
        int64_t differ = 0, n = 0;
        for (int k = 0; k < g[0].m.g->n_params; k++) {
            const mp_gparam *a = &g[0].m.g->params[k], *b = &g[1].m.g->params[k];
            if (!a->spec.trainable || mp_acgan_is_generator_param(&g[0].m, k)) continue;
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
        for (int r = 0; r < 2; r++) gan_close(&g[r]);
    }
}

/* amp-fp16 with the shared dynamic scaler: one scaler update per iteration
 * (not per optimizer or loss), each optimizer stepped or skipped on its own
 * gradients. */
static void test_shared_scaler(void) {
    gan g;
    mp_status s = gan_open(&g, 4, MP_PRECISION_AMP_FP16, 0, 2e-4f, BOTH);
    CHECK(s == MP_OK, "%s", mp_last_error());
    if (s != MP_OK) return;
    static gan_inputs in;
    make_inputs(&in, 14);
    enum { ITERS = 5 };
    double want_scale = 65536;
    for (int it = 0; it < ITERS; it++) {
        const mp_scaler before = g.t->scaler;
        CHECK(gan_step(&g, &in) == MP_OK, "%s", mp_last_error());
        const mp_scaler *now = &g.t->scaler;
        const bool g_skipped = now->group_skips[GEN] > before.group_skips[GEN];
        const bool d_skipped = now->group_skips[DIS] > before.group_skips[DIS];
        if (g_skipped || d_skipped) want_scale *= 0.5; /* backs off once, whoever overflowed */
        if (getenv("MP_TEST_VERBOSE"))
            printf("  iteration %d: G %s, D %s, scale %g\n", it, g_skipped ? "skipped" : "stepped",
                   d_skipped ? "skipped" : "stepped", mp_trainer_loss_scale(g.t));
    }
    const mp_scaler *sc = &g.t->scaler;
    CHECK(mp_trainer_loss_scale(g.t) == (float)want_scale, "scale %g, expected %g", mp_trainer_loss_scale(g.t),
          want_scale);
    CHECK(sc->step == ITERS, "scaler updates %lld, iterations %d", (long long)sc->step, ITERS);
    const int64_t gs = mp_optimizer_steps(g.groups[GEN].optimizer), ds = mp_optimizer_steps(g.groups[DIS].optimizer);
    CHECK(gs + sc->group_skips[GEN] == ITERS && ds + sc->group_skips[DIS] == ITERS, "G %lld+%lld, D %lld+%lld",
          (long long)gs, sc->group_skips[GEN], (long long)ds, sc->group_skips[DIS]);
    CHECK(ds > 0, "the discriminator never stepped under amp-fp16");
    gan_close(&g);
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

/* A grid libpng refuses (wider than its 10^6-pixel limit): libpng's error
 * and warning text in the one error naming the file, none on stderr. */
static void check_png_refused(const char *dir) {
    const int w = 1000001;
    float *px = calloc((size_t)w, sizeof *px);
    char stem[4400], path[4400], said[256] = "";
    snprintf(stem, sizeof stem, "%s/too_wide", dir);
    mp_image_grid gr = {.rows = 1, .cols = 1, .c = 1, .h = 1, .w = w, .lo = 0, .hi = 1};
    FILE *err = tmpfile();
    const int saved = dup(2);
    CHECK(px && err && saved >= 0, "set-up");
    if (!px || !err || saved < 0) return;
    fflush(stderr);
    dup2(fileno(err), 2);
    const mp_status s = mp_image_grid_write(stem, px, &gr, path, sizeof path);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(err);
    const size_t n = fread(said, 1, sizeof said - 1, err);
    fclose(err);
    free(px);
    CHECK(s == MP_ERR_IO && strstr(mp_last_error(), "too_wide.png: libpng failed writing the image: Invalid IHDR") &&
              strstr(mp_last_error(), "exceeds user limit"),
          "status %s: %s", mp_status_name(s), mp_last_error());
    CHECK(n == 0, "libpng wrote to stderr: %s", said);
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
    if (mp_image_png_available()) check_png_refused(dir);
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
