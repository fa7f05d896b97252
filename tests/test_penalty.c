/* test_penalty.c — gradient penalties (mixprec/penalty.h) on small networks:
 * the gradient a penalized trainer step produces, minus the loss's own, equals
 * central differences of the penalty (L2 of the parameter gradients, R1 and
 * WGAN-GP on an input gradient), which is itself checked against
 * differences of the network's output; under amp-fp16 with dynamic scaling
 * the penalty equals fp32's on the same weights; the L2 penalty scales with
 * its loss's weight (the norm of the weighted objective's gradient). Each on
 * an MLP and on a network with conv, batch norm (batch statistics) and max
 * pooling. The plans are f32 (there is no f64 policy), so the tolerances are
 * those of f32 differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "core/error.h"
#include "core/rng.h"

enum { B = 6, F = 5, H = 8, K = 3, S = 6, XMAX = B * S * S };

typedef struct {
    mp_graph *g;
    bool conv;               /* images (1, S, S) through conv + BN + pool, else F features */
    int xn;                  /* the input's elements */
    mp_node x, y, out, loss; /* out: the classifier's logits or the discriminator's logit */
} net;

/* conv 3x3 (4) -> BN -> tanh -> maxpool 2 -> flatten */
static mp_node conv_trunk(mp_graph *g, mp_node x) {
    mp_node h = mp_conv2d(g, "conv", x, (mp_conv_opts){.out_channels = 4, .kernel = 3, .padding = 1, .bias = true});
    h = mp_tanh(g, "conv_act", mp_batchnorm2d(g, "bn", h, (mp_batchnorm_opts){0}));
    return mp_flatten(g, "flat", mp_maxpool2d(g, "pool", h, (mp_pool_opts){.kernel = 2}));
}

/* A classifier (x -> linear -> relu -> linear -> softmax CE) or, disc, a
 * discriminator (x -> linear -> tanh -> linear -> tanh -> linear(1) -> BCE);
 * with conv, the conv trunk first. */
static void build(net *n, bool disc, bool conv, mp_precision prec) {
    mp_graph *g = n->g = mp_graph_create();
    n->conv = conv;
    n->xn = conv ? B * S * S : B * F;
    n->x = conv ? mp_graph_input(g, "x", 1, S, S) : mp_graph_targets(g, "x", F);
    mp_node h = mp_linear(g, "fc1", conv ? conv_trunk(g, n->x) : n->x, (mp_linear_opts){.out_features = H, .bias = true});
    /* the input-gradient penalties of a ReLU network jump where a unit
     * crosses zero, so central differences would straddle jumps: tanh */
    h = disc ? mp_tanh(g, "t1", h) : mp_relu(g, "r1", h);
    if (disc) h = mp_tanh(g, "t2", mp_linear(g, "fc2", h, (mp_linear_opts){.out_features = H, .bias = true}));
    n->out = mp_linear(g, "head", h, (mp_linear_opts){.out_features = disc ? 1 : K, .bias = true});
    n->y = disc ? mp_graph_targets(g, "t", 1) : mp_graph_labels(g, "y");
    n->loss = disc ? mp_bce_with_logits(g, "loss", n->out, n->y) : mp_softmax_cross_entropy(g, "loss", n->out, n->y);
    mp_graph_mark_output(g, n->loss);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(g, 11);
}

typedef struct {
    float x[XMAX], t[B];
    int32_t y[B];
} batch;

static void make_batch(batch *b, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int i = 0; i < XMAX; i++) b->x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) b->y[i] = (int32_t)mp_rng_below(&r, K), b->t[i] = (float)(i % 2);
}

static mp_status feed_plan(mp_plan *p, const net *n, bool disc, const batch *b) {
    MP_TRY(mp_plan_set_input(p, n->x, b->x, (size_t)n->xn));
    return disc ? mp_plan_set_input(p, n->y, b->t, B) : mp_plan_set_labels(p, n->y, b->y, B);
}

/* The penalty at the graph's current weights, from a second-order plan of
 * the same graph (f64 sums over f32 gradients, as the trainer's). */
static double penalty_at(mp_plan *p, const net *n, mp_penalty_kind kind, float w) {
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    mp_plan_set_step(p, 0);
    if (kind == MP_PENALTY_L2_GRAD) {
        mp_graph_zero_grad(n->g);
        MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
        double ss = 0;
        for (int k = 0; k < mp_graph_param_tensors(n->g); k++) {
            mp_param_info pi;
            mp_graph_param_info(n->g, k, &pi);
            if (!pi.trainable) continue;
            float *gr = malloc((size_t)pi.numel * sizeof *gr);
            MP_ASSERT(mp_graph_grad_get(n->g, pi.name, gr, (size_t)pi.numel) == MP_OK);
            for (int64_t j = 0; j < pi.numel; j++) ss += (double)gr[j] * gr[j];
            free(gr);
        }
        return w * sqrt(ss);
    }
    float gx[XMAX];
    const int per = n->xn / B;
    MP_ASSERT(mp_plan_backward_input_grad(p, 1.0f) == MP_OK);
    MP_ASSERT(mp_plan_read_input_grad(p, gx, (size_t)n->xn) == MP_OK);
    double sum = 0;
    for (int i = 0; i < B; i++) {
        double s = 0;
        for (int j = 0; j < per; j++) s += (double)gx[i * per + j] * gx[i * per + j];
        sum += kind == MP_PENALTY_R1 ? s : (sqrt(s) - 1) * (sqrt(s) - 1);
    }
    return (kind == MP_PENALTY_R1 ? 0.5 : 1.0) * w * sum / B;
}

/* A trainer with the penalty, SGD at rate 0 (the weights stay). */
static mp_status make_trainer(const net *n, const mp_penalty *pen, mp_trainer **t, mp_optimizer **opt) {
    mp_optimizer_opts oo = {.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0}};
    MP_TRY(mp_optimizer_create(n->g, &oo, opt));
    mp_trainer_opts to = {.batch = B, .input = n->x, .labels = n->y, .loss = n->loss, .optimizer = *opt,
                          .penalty = *pen};
    return mp_trainer_create(n->g, &to, t);
}

static mp_status step(mp_trainer *t, const net *n, bool disc, const batch *b, mp_step_report *r) {
    MP_TRY(mp_trainer_set_input(t, n->x, b->x, (size_t)n->xn));
    MP_TRY(disc ? mp_trainer_set_input(t, n->y, b->t, B) : mp_trainer_set_labels(t, n->y, b->y, B));
    return mp_trainer_step(t, NULL, r);
}

/* A network of one kind, its batch and a penalized trainer over it. */
typedef struct {
    net n;
    batch b;
    bool disc;
    mp_trainer *t;
    mp_optimizer *opt;
} rig;

static void rig_open(rig *r, mp_penalty_kind kind, float w, bool conv, mp_precision prec, uint64_t seed) {
    r->disc = kind != MP_PENALTY_L2_GRAD;
    build(&r->n, r->disc, conv, prec);
    make_batch(&r->b, seed);
    mp_penalty pen = {.kind = kind, .weight = w, .input = r->n.x, .output = r->n.out};
    if (make_trainer(&r->n, &pen, &r->t, &r->opt) != MP_OK) fprintf(stderr, "%s\n", mp_last_error()), exit(1);
}

static void rig_close(rig *r) {
    mp_trainer_destroy(r->t);
    mp_optimizer_destroy(r->opt);
    mp_graph_destroy(r->n.g);
}

/* All trainable gradients of the graph, concatenated. */
static int64_t read_grads(const net *n, float *dst) {
    int64_t m = 0;
    for (int k = 0; k < mp_graph_param_tensors(n->g); k++) {
        mp_param_info pi;
        mp_graph_param_info(n->g, k, &pi);
        if (!pi.trainable) continue;
        MP_ASSERT(mp_graph_grad_get(n->g, pi.name, dst + m, (size_t)pi.numel) == MP_OK);
        m += pi.numel;
    }
    return m;
}

/* Penalized step's gradient - the loss's own gradient = d(penalty)/d(theta),
 * against central differences of penalty_at over every weight. */
static void check_fd(mp_penalty_kind kind, float w, bool conv) {
    const char *arch = conv ? "conv+bn+pool" : "mlp";
    rig rg;
    rig_open(&rg, kind, w, conv, MP_PRECISION_FP32, 21);
    const bool disc = rg.disc;
    net n = rg.n;
    batch b = rg.b;
    mp_trainer *t = rg.t;
    mp_step_report r;
    if (step(t, &n, disc, &b, &r) != MP_OK) fprintf(stderr, "%s\n", mp_last_error()), exit(1);
    float *with = malloc(8192 * sizeof *with), *without = malloc(8192 * sizeof *without);
    const int64_t m = read_grads(&n, with);
    mp_plan *p = NULL;
    mp_plan_opts po = {.batch = B, .training = true, .loss = n.loss, .second_order = true, .input_grad = disc,
                       .input_grad_of = n.out, .input_grad_wrt = n.x};
    MP_ASSERT(mp_plan_create(n.g, po, &p) == MP_OK);
    MP_ASSERT(feed_plan(p, &n, disc, &b) == MP_OK);
    const double p0 = penalty_at(p, &n, kind, w);
    CHECK(fabs(p0 - r.penalty) <= 1e-5 * fabs(p0) + 1e-7, "%s: the step reports penalty %g, the plan gives %g",
          mp_penalty_kind_name(kind), (double)r.penalty, p0);
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    mp_graph_zero_grad(n.g);
    MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
    read_grads(&n, without);
    double worst = 0, biggest = 0;
    int64_t at = 0;
    for (int k = 0; k < mp_graph_param_tensors(n.g); k++) {
        mp_param_info pi;
        mp_graph_param_info(n.g, k, &pi);
        if (!pi.trainable) continue; /* BN running statistics: no gradient */
        float *v = malloc((size_t)pi.numel * sizeof *v);
        mp_graph_param_get(n.g, pi.name, v, (size_t)pi.numel);
        for (int64_t j = 0; j < pi.numel; j++, at++) {
            const float saved = v[j], h = 1e-3f;
            v[j] = saved + h, mp_graph_param_set(n.g, pi.name, v, (size_t)pi.numel);
            const double pp = penalty_at(p, &n, kind, w);
            v[j] = saved - h, mp_graph_param_set(n.g, pi.name, v, (size_t)pi.numel);
            const double pm = penalty_at(p, &n, kind, w);
            v[j] = saved, mp_graph_param_set(n.g, pi.name, v, (size_t)pi.numel);
            const double num = (pp - pm) / (2.0 * h), ana = (double)with[at] - without[at];
            const double err = fabs(num - ana) / fmax(fmax(fabs(num), fabs(ana)), 1e-2 * fmax(p0, 1e-3));
            if (err > worst) worst = err;
            if (fabs(ana) > biggest) biggest = fabs(ana);
            CHECK(err < 3e-2, "%s: %s[%lld]: penalized - plain gradient %g, central difference %g",
                  mp_penalty_kind_name(kind), pi.name, (long long)j, ana, num);
        }
        free(v);
    }
    CHECK(at == m && biggest > 1e-3, "%s: the penalty's gradient is all zero (largest %g) or sizes differ",
          mp_penalty_kind_name(kind), biggest);
    printf("%-8s %-12s weight %g: penalty %.6g; d(penalty)/d(theta) vs central differences over %lld weights: "
           "worst rel. error %.2e (largest component %.3g)\n", mp_penalty_kind_name(kind), arch, (double)w, p0,
           (long long)m, worst, biggest);
    if (disc) { /* the input gradient itself, against differences of sum(out) */
        float gx[XMAX], out[B];
        MP_ASSERT(mp_trainer_penalty_input_grad(t, gx, (size_t)n.xn) == MP_OK);
        double worst_x = 0, big = 0; /* f32 differences of sum(out): good to ~1e-4 absolute */
        for (int j = 0; j < n.xn; j++) big = fmax(big, fabs(gx[j]));
        for (int j = 0; j < n.xn; j += 3) {
            double s[2];
            const float saved = b.x[j];
            for (int sgn = 0; sgn < 2; sgn++) {
                b.x[j] = saved + (sgn ? -3e-3f : 3e-3f); /* max-pool windows switch at 1e-2 */
                MP_ASSERT(feed_plan(p, &n, disc, &b) == MP_OK && mp_plan_forward(p) == MP_OK);
                MP_ASSERT(mp_plan_read(p, n.out, out, B) == MP_OK);
                s[sgn] = 0;
                for (int i = 0; i < B; i++) s[sgn] += out[i];
            }
            b.x[j] = saved;
            const double num = (s[0] - s[1]) / 6e-3, err = fabs(num - gx[j]) / fmax(fabs(num), 0.1 * big);
            if (err > worst_x) worst_x = err;
            CHECK(err < 3e-2, "%s: d sum(out)/dx[%d]: %g, central difference %g", mp_penalty_kind_name(kind), j,
                  (double)gx[j], num);
        }
        printf("%-8s %-12s input gradient vs central differences: worst rel. error %.2e\n",
               mp_penalty_kind_name(kind), arch, worst_x);
    }
    free(with), free(without);
    mp_plan_destroy(p);
    rig_close(&rg);
}

/* The penalty of the first step that was not skipped (lr 0: the same
 * weights every step), and the steps skipped before it. */
static double penalty_in(mp_precision prec, mp_penalty_kind kind, float w, bool conv, int64_t *skipped,
                         float *scale) {
    rig rg;
    rig_open(&rg, kind, w, conv, prec, 33);
    mp_step_report r = {0};
    for (int i = 0; i < 30; i++) {
        MP_ASSERT(step(rg.t, &rg.n, rg.disc, &rg.b, &r) == MP_OK);
        if (!r.overflow.found) break;
    }
    *skipped = r.skipped_steps;
    *scale = r.loss_scale;
    rig_close(&rg);
    return r.penalty;
}

static void check_amp(mp_penalty_kind kind, float w, bool conv) {
    int64_t s32, s16;
    float scale32, scale16;
    const double p32 = penalty_in(MP_PRECISION_FP32, kind, w, conv, &s32, &scale32);
    const double p16 = penalty_in(MP_PRECISION_AMP_FP16, kind, w, conv, &s16, &scale16);
    const double rel = fabs(p16 - p32) / fabs(p32);
    CHECK(isfinite(p16) && rel < 1e-2 && p32 > 0, "%s: amp-fp16 penalty %g vs fp32 %g", mp_penalty_kind_name(kind),
          p16, p32);
    CHECK(scale16 > 1 && s32 == 0, "%s: amp-fp16 ran at loss scale %g; fp32 skipped %lld steps",
          mp_penalty_kind_name(kind), (double)scale16, (long long)s32);
    printf("%-8s %-12s amp-fp16 (dynamic scale, now %g, %lld steps skipped first) penalty %.6g vs fp32 %.6g: rel. "
           "difference %.2e\n", mp_penalty_kind_name(kind), conv ? "conv+bn+pool" : "mlp", (double)scale16,
           (long long)s16, p16, p32, rel);
}

/* The L2 penalty is the norm of the gradient of the group's weighted
 * objective (its loss times the loss's weight), not of the loss alone: a
 * loss weight of 0.25 gives 0.25 times the penalty of weight 1, whose value
 * is weight * ||dL/dtheta|| from a plan on the same weights. */
static void check_l2_loss_weight(void) {
    net n;
    build(&n, false, false, MP_PRECISION_FP32);
    batch b;
    make_batch(&b, 5);
    const float pw = 0.5f, lw[2] = {1, 0.25f};
    double pen[2];
    for (int i = 0; i < 2; i++) {
        mp_optimizer *opt = NULL;
        MP_ASSERT(mp_optimizer_create(n.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0}},
                                      &opt) == MP_OK);
        mp_trainer_opts to = {.batch = B, .input = n.x, .labels = n.y, .n_groups = 1,
                              .groups = {{.optimizer = opt, .losses = {n.loss}, .weights = {lw[i]}, .n_losses = 1}},
                              .penalty = {.kind = MP_PENALTY_L2_GRAD, .weight = pw}};
        mp_trainer *t = NULL;
        MP_ASSERT(mp_trainer_create(n.g, &to, &t) == MP_OK);
        mp_step_report r;
        MP_ASSERT(step(t, &n, false, &b, &r) == MP_OK && !r.overflow.found);
        pen[i] = r.penalty;
        mp_trainer_destroy(t);
        mp_optimizer_destroy(opt);
    }
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = B, .training = true, .loss = n.loss}, &p) == MP_OK);
    MP_ASSERT(feed_plan(p, &n, false, &b) == MP_OK);
    const double direct = penalty_at(p, &n, MP_PENALTY_L2_GRAD, pw);
    mp_plan_destroy(p);
    CHECK(fabs(pen[0] - direct) <= 1e-5 * direct && direct > 0, "loss weight 1: penalty %g, weight * ||dL/dtheta|| %g",
          pen[0], direct);
    CHECK(fabs(pen[1] - 0.25 * pen[0]) <= 1e-6 * pen[0], "loss weight 0.25: penalty %g, 0.25 x weight 1's is %g",
          pen[1], 0.25 * pen[0]);
    printf("l2       mlp          loss weight 0.25: penalty %.6g = 0.25 x %.6g (weight 1)\n", pen[1], pen[0]);
    mp_graph_destroy(n.g);
}

int main(void) {
    for (int conv = 0; conv < 2; conv++) {
        check_fd(MP_PENALTY_L2_GRAD, 0.5f, conv);
        check_fd(MP_PENALTY_R1, 2.0f, conv);
        check_fd(MP_PENALTY_WGAN_GP, 1.0f, conv);
        check_amp(MP_PENALTY_L2_GRAD, 0.5f, conv);
        check_amp(MP_PENALTY_R1, 2.0f, conv);
    }
    check_l2_loss_weight();
    return test_summary("test_penalty");
}
