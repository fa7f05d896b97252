/* test_cuda_penalty.c — gradient penalties (mixprec/penalty.h) on the GPU
 * against the CPU, through the public API (plans and trainers):
 *  1. plans: a CPU and a GPU second-order plan of two separately built,
 *     identically initialized graphs, on the same batch — a classifier
 *     (conv -> batchnorm2d (batch statistics) -> relu -> maxpool -> conv ->
 *     batchnorm2d -> relu -> global_avgpool -> linear -> softmax CE) and a
 *     discriminator (conv -> batchnorm2d -> leaky_relu -> avgpool, then
 *     tanh and sigmoid conv branches, mul, add, concat, flatten -> linear(1)
 *     -> BCE with logits), each in fp32 and amp-bf16. Per plan: forward,
 *     random directions on the input and on two parameters, forward_tangent,
 *     backward from the loss and backward_tangent from it, then
 *     backward_input_grad (sum of the logits w.r.t. the input),
 *     read_input_grad and backward_tangent from the logits; the loss, the
 *     input gradient and every trainable parameter's tangent gradient (both
 *     roots) compared tensor by tensor;
 *  2. trainers: the classifier with an L2 penalty on its parameter gradients
 *     (weight 0.1) and the discriminator with R1 (weight 10, input = the
 *     images, output = the logit), fp32, amp-fp16 (dynamic loss scale) and
 *     amp-bf16: 5 steps of SGD (momentum 0.9) on a CPU and a GPU trainer
 *     from the same weights and batches. After every step (mp_trainer_wait
 *     on the GPU): the penalty value (both NaN on a skipped step), the loss,
 *     the skipped-step count and the loss scale, R1's input gradient; after
 *     the 5 steps every parameter and buffer, and how far they moved. Under
 *     amp-fp16 the scale starts at 2^20, so that the first steps overflow
 *     (3 of 5 skipped on the CPU) and both sides must skip the same ones;
 *  3. calls out of order on a GPU plan fail as on a CPU plan (same status,
 *     same words), and a GPU trainer's penalty value before its first step;
 *  4. an R1 weight (3e38) whose value stays finite (2.2e38) while weight x
 *     input gradient (3.6e38) passes f32: a forward overflow of the penalty,
 *     value NaN, on both devices.
 * Convolutions before a batchnorm2d have no bias: its gradient would be zero
 * up to rounding, whose relative error means nothing. Tolerances, as
 * ||gpu - cpu|| / ||cpu|| per tensor: 1e-4 in fp32, 3e-2 under amp (the GPU's
 * tangent kernels read f16/bf16 primal tensors where the CPU widens them to
 * f32 first); the movement of the trained weights within 3x that. A
 * reference tangent that is zero (the head's bias from the logits: its
 * gradient is the constant seed) must be zero on the GPU too.
 * One line per case; exit 1 on any failure, 2 when no GPU can be opened.
 * Run by scripts/gpu-check on the GPU machine (not by ctest: CI has no GPU):
 *   build-gpu/tests/gpu/test_cuda_penalty */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"

enum { B = 8, C = 3, S = 8, K = 10, XN = B * C * S * S, STEPS = 5 };

#define TOL_FP32 1e-4
#define TOL_AMP 3e-2
#define MOVE_FACTOR 3.0 /* the trained weights' movement: within this times the tolerance */

static const mp_device CPU = {MP_DEVICE_CPU, 0}, GPU = {MP_DEVICE_CUDA, 0};

static double tol_of(mp_precision p) { return p == MP_PRECISION_FP32 ? TOL_FP32 : TOL_AMP; }

/* ---- the two networks ---------------------------------------------------- */

typedef struct {
    mp_graph *g;
    bool disc;             /* the discriminator, else the classifier */
    mp_node x, y, out, loss; /* y: labels (classifier) or targets (discriminator); out: the logits */
    const char *dir[2];    /* the parameters that get a tangent direction */
} net;

static mp_node conv(mp_graph *g, const char *name, mp_node x, int out, bool bias) {
    return mp_conv2d(g, name, x, (mp_conv_opts){.out_channels = out, .kernel = 3, .padding = 1, .bias = bias});
}

static void build_classifier(net *n) {
    mp_graph *g = n->g;
    mp_node h = mp_relu(g, "relu1", mp_batchnorm2d(g, "bn1", conv(g, "conv1", n->x, 8, false), (mp_batchnorm_opts){0}));
    h = mp_maxpool2d(g, "pool1", h, (mp_pool_opts){.kernel = 2});
    h = mp_relu(g, "relu2", mp_batchnorm2d(g, "bn2", conv(g, "conv2", h, 16, false), (mp_batchnorm_opts){0}));
    n->out = mp_linear(g, "fc", mp_global_avgpool(g, "gap", h), (mp_linear_opts){.out_features = K, .bias = true});
    n->y = mp_graph_labels(g, "y");
    n->loss = mp_softmax_cross_entropy(g, "loss", n->out, n->y);
    n->dir[0] = "conv1.weight", n->dir[1] = "fc.weight";
}

static void build_discriminator(net *n) {
    mp_graph *g = n->g;
    mp_node h = mp_batchnorm2d(g, "d_bn0", conv(g, "d_conv0", n->x, 8, false), (mp_batchnorm_opts){0});
    mp_node p = mp_avgpool2d(g, "d_pool", mp_leaky_relu(g, "d_act0", h, 0.2f), (mp_pool_opts){.kernel = 2});
    mp_node t = mp_tanh(g, "d_tanh", conv(g, "d_conv_t", p, 8, true));
    mp_node s = mp_sigmoid(g, "d_sigmoid", conv(g, "d_conv_s", p, 8, true));
    mp_node a = mp_add(g, "d_add", mp_mul(g, "d_mul", t, s), p);
    const mp_node both[2] = {a, t};
    mp_node f = mp_flatten(g, "d_flat", mp_concat(g, "d_cat", both, 2));
    n->out = mp_linear(g, "d_head", f, (mp_linear_opts){.out_features = 1, .bias = true});
    n->y = mp_graph_targets(g, "t", 1);
    n->loss = mp_bce_with_logits(g, "loss", n->out, n->y);
    n->dir[0] = "d_conv0.weight", n->dir[1] = "d_head.weight";
}

/* The same weights for the same (disc, prec) every time: seed 7. */
static mp_status build(net *n, bool disc, mp_precision prec) {
    memset(n, 0, sizeof *n);
    n->disc = disc;
    n->g = mp_graph_create();
    if (!n->g) return mp_error(MP_ERR_NOMEM, "graph");
    n->x = mp_graph_input(n->g, "x", C, S, S);
    if (disc) build_discriminator(n);
    else build_classifier(n);
    mp_graph_mark_output(n->g, n->out);
    mp_graph_mark_output(n->g, n->loss);
    MP_TRY(mp_graph_status(n->g));
    MP_TRY(mp_graph_apply_policy(n->g, (mp_policy_opts){.precision = prec}));
    mp_graph_init_params(n->g, 7);
    return MP_OK;
}

static const char *net_name(bool disc) { return disc ? "discriminator" : "classifier"; }

typedef struct {
    float x[XN], t[B];
    int32_t y[B];
} batch;

static void make_batch(batch *b, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int i = 0; i < XN; i++) b->x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) b->y[i] = (int32_t)mp_rng_below(&r, K), b->t[i] = (float)mp_rng_below(&r, 2);
}

/* ---- comparisons --------------------------------------------------------- */

static double norm(const float *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

/* ||a - ref|| / ||ref|| (ref all zero: ||a||, which must then be 0 too). */
static double rel_err(const float *a, const float *ref, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    const double r = norm(ref, n);
    return r > 0 ? sqrt(d) / r : sqrt(d);
}

/* Worst tensor of a comparison over every trainable parameter. */
typedef struct {
    double worst;
    char name[64];
    int zero_refs; /* reference tensors that are all zero */
    int tensors;
} tensor_cmp;

/* gpu and cpu hold every trainable parameter's values (with buffers: every
 * parameter tensor's), concatenated in the graph's order; each tensor within
 * tol (a zero reference: exactly zero). */
static void compare_params(const mp_graph *g, bool buffers, const float *gpu, const float *cpu, double tol,
                           const char *what, tensor_cmp *out) {
    memset(out, 0, sizeof *out);
    size_t at = 0;
    for (int k = 0; k < mp_graph_param_tensors(g); k++) {
        mp_param_info pi;
        mp_graph_param_info(g, k, &pi);
        if (!pi.trainable && !buffers) continue;
        const size_t n = (size_t)pi.numel;
        const double e = rel_err(gpu + at, cpu + at, n);
        const bool zero = norm(cpu + at, n) == 0;
        out->tensors++;
        out->zero_refs += zero;
        CHECK(zero ? e == 0 : e <= tol, "%s: %s: ||gpu - cpu|| %s %.3e (tolerance %.0e)", what, pi.name,
              zero ? "(the CPU's is all zero)" : "/ ||cpu||", e, zero ? 0.0 : tol);
        if (!zero && e >= out->worst) out->worst = e, snprintf(out->name, sizeof out->name, "%s", pi.name);
        at += n;
    }
}

/* ---- 1. plans ------------------------------------------------------------ */

/* What one pass of a plan gives: the loss, the input gradient and the
 * tangent gradients of every trainable parameter from both roots. */
typedef struct {
    float loss;
    float gx[XN];
    float *t_loss, *t_out; /* concatenated in the graph's parameter order */
} plan_out;

static mp_status read_tangents(mp_plan *p, const mp_graph *g, float *dst) {
    for (int k = 0; k < mp_graph_param_tensors(g); k++) {
        mp_param_info pi;
        mp_graph_param_info(g, k, &pi);
        if (!pi.trainable) continue;
        MP_TRY(mp_plan_read_tangent_grad(p, pi.name, dst, (size_t)pi.numel));
        dst += pi.numel;
    }
    return MP_OK;
}

/* Random directions, the same for every plan: the input's, then dir[0]'s and dir[1]'s. */
static float *direction(const net *n, int which, size_t *len) {
    const int k = which ? mp_graph_param_find(n->g, n->dir[which - 1]) : -1;
    mp_param_info pi = {0};
    if (which) mp_graph_param_info(n->g, k, &pi);
    *len = which ? (size_t)pi.numel : XN;
    float *v = malloc(*len * sizeof *v);
    mp_rng r;
    mp_rng_seed(&r, 100 + (uint64_t)which);
    for (size_t i = 0; v && i < *len; i++) v[i] = (float)mp_rng_normal(&r);
    return v;
}

static mp_status plan_pass(mp_plan *p, const net *n, const batch *b, plan_out *o) {
    MP_TRY(mp_plan_set_input(p, n->x, b->x, XN));
    MP_TRY(n->disc ? mp_plan_set_input(p, n->y, b->t, B) : mp_plan_set_labels(p, n->y, b->y, B));
    MP_TRY(mp_plan_forward(p));
    MP_TRY(mp_plan_read(p, n->loss, &o->loss, 1));
    for (int which = 0; which < 3; which++) {
        size_t len = 0;
        float *v = direction(n, which, &len);
        if (!v) return mp_error(MP_ERR_NOMEM, "direction");
        mp_status s = which ? mp_plan_set_tangent_param(p, n->dir[which - 1], v, len)
                            : mp_plan_set_tangent_input(p, v, len);
        free(v);
        MP_TRY(s);
    }
    MP_TRY(mp_plan_forward_tangent(p));
    MP_TRY(mp_plan_backward(p, 1.0f));
    MP_TRY(mp_plan_backward_tangent(p, n->loss));
    MP_TRY(read_tangents(p, n->g, o->t_loss));
    MP_TRY(mp_plan_backward_input_grad(p, 1.0f));
    MP_TRY(mp_plan_read_input_grad(p, o->gx, XN));
    MP_TRY(mp_plan_backward_tangent(p, n->out));
    return read_tangents(p, n->g, o->t_out);
}

static mp_plan_opts plan_opts(const net *n, mp_device dev) {
    return (mp_plan_opts){.batch = B, .training = true, .loss = n->loss, .device = dev, .second_order = true,
                          .input_grad = true, .input_grad_of = n->out, .input_grad_wrt = n->x};
}

/* Build, compile and run one side; the graph stays in *n for the comparisons. */
static mp_status plan_side(net *n, bool disc, mp_precision prec, mp_device dev, const batch *b, plan_out *o) {
    MP_TRY(build(n, disc, prec));
    const size_t np = (size_t)mp_graph_param_count(n->g);
    o->t_loss = calloc(np, sizeof(float)), o->t_out = calloc(np, sizeof(float));
    if (!o->t_loss || !o->t_out) return mp_error(MP_ERR_NOMEM, "tangent gradients");
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(n->g, plan_opts(n, dev), &p);
    if (s == MP_OK) s = plan_pass(p, n, b, o);
    mp_plan_destroy(p);
    return s;
}

static void plan_case(bool disc, mp_precision prec) {
    char label[80];
    snprintf(label, sizeof label, "plan %-8s %-13s", mp_precision_name(prec), net_name(disc));
    const int failed_before = check_failed;
    const double tol = tol_of(prec);
    batch b;
    make_batch(&b, 11);
    net nc = {0}, ng = {0};
    plan_out oc = {0}, og = {0};
    mp_status sc = plan_side(&nc, disc, prec, CPU, &b, &oc);
    CHECK(sc == MP_OK, "%s: CPU plan: %s", label, mp_last_error());
    mp_status sg = sc == MP_OK ? plan_side(&ng, disc, prec, GPU, &b, &og) : sc;
    CHECK(sc != MP_OK || sg == MP_OK, "%s: GPU plan: %s", label, mp_last_error());
    if (sc == MP_OK && sg == MP_OK) {
        const double e_loss = fabs((double)og.loss - oc.loss) / fabs((double)oc.loss);
        const double e_gx = rel_err(og.gx, oc.gx, XN);
        CHECK(e_loss <= tol, "%s: loss %.7g on the GPU, %.7g on the CPU", label, (double)og.loss, (double)oc.loss);
        CHECK(norm(oc.gx, XN) > 0 && e_gx <= tol, "%s: input gradient: rel. error %.3e, CPU norm %g", label, e_gx,
              norm(oc.gx, XN));
        tensor_cmp tl, to;
        char what[128];
        snprintf(what, sizeof what, "%s, tangent gradient from the loss", label);
        compare_params(nc.g, false, og.t_loss, oc.t_loss, tol, what, &tl);
        snprintf(what, sizeof what, "%s, tangent gradient from the logits", label);
        compare_params(nc.g, false, og.t_out, oc.t_out, tol, what, &to);
        CHECK(tl.zero_refs == 0 && to.zero_refs <= 1, "%s: the CPU's tangent gradients are all zero for %d of %d "
              "tensors from the loss (expected none), %d from the logits (expected at most the head's bias)", label,
              tl.zero_refs, tl.tensors, to.zero_refs);
        printf("%-4s %s loss %.5f (rel. %.1e), input grad %.1e; tangent grads from the loss: worst %.1e (%s), from "
               "the logits: worst %.1e (%s), %d zero; tolerance %.0e\n",
               check_failed > failed_before ? "FAIL" : "ok", label, (double)oc.loss, e_loss, e_gx, tl.worst, tl.name,
               to.worst, to.name, to.zero_refs, tol);
    } else {
        printf("FAIL %s %s\n", label, mp_last_error());
    }
    free(oc.t_loss), free(oc.t_out), free(og.t_loss), free(og.t_out);
    mp_graph_destroy(nc.g);
    mp_graph_destroy(ng.g);
}

/* ---- 2. trainers --------------------------------------------------------- */

typedef struct {
    net n;
    mp_optimizer *opt;
    mp_trainer *t;
} rig;

static mp_penalty penalty_of(const net *n) {
    return n->disc ? (mp_penalty){.kind = MP_PENALTY_R1, .weight = 10, .input = n->x, .output = n->out}
                   : (mp_penalty){.kind = MP_PENALTY_L2_GRAD, .weight = 0.1f};
}

/* *r must be zero; rig_close frees what was made, whatever failed. */
static mp_status rig_open(rig *r, bool disc, mp_precision prec, mp_device dev) {
    MP_TRY(build(&r->n, disc, prec));
    const net *n = &r->n;
    MP_TRY(mp_optimizer_create(n->g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                          .lr = {.base_lr = 0.02f}},
                               &r->opt));
    mp_trainer_opts to = {.batch = B, .device = dev, .input = n->x, .labels = n->y, .loss = n->loss,
                          .optimizer = r->opt, .penalty = penalty_of(n)};
    /* R1 under amp-fp16 from 2^20: the first steps' activation gradients
     * overflow fp16 on both devices and are skipped. Not for L2: its skips
     * there would come from the parameter gradients, which the CPU rounds
     * to fp16 and a GPU keeps in fp32 under scaling (the doctor's
     * mp_doctor_opts.gpu), so the devices would skip different steps. */
    if (prec == MP_PRECISION_AMP_FP16 && disc) to.scaler.init_scale = 0x1p20f;
    return mp_trainer_create(n->g, &to, &r->t);
}

static void rig_close(rig *r) {
    mp_trainer_destroy(r->t);
    mp_optimizer_destroy(r->opt);
    mp_graph_destroy(r->n.g);
}

/* One step, waited for (the GPU's penalty value is exact only then). */
static mp_status rig_step(rig *r, const batch *b) {
    MP_TRY(mp_trainer_set_input(r->t, r->n.x, b->x, XN));
    MP_TRY(r->n.disc ? mp_trainer_set_input(r->t, r->n.y, b->t, B) : mp_trainer_set_labels(r->t, r->n.y, b->y, B));
    MP_TRY(mp_trainer_step(r->t, NULL, NULL));
    return mp_trainer_wait(r->t, NULL);
}

/* Every parameter tensor and buffer (numel: their total). */
static size_t all_numel(const mp_graph *g) {
    size_t n = 0;
    for (int k = 0; k < mp_graph_param_tensors(g); k++) {
        mp_param_info pi;
        mp_graph_param_info(g, k, &pi);
        n += (size_t)pi.numel;
    }
    return n;
}

static mp_status read_all(rig *r, float *dst) {
    for (int k = 0; k < mp_graph_param_tensors(r->n.g); k++) {
        mp_param_info pi;
        mp_graph_param_info(r->n.g, k, &pi);
        MP_TRY(mp_trainer_param_get(r->t, pi.name, dst, (size_t)pi.numel));
        dst += pi.numel;
    }
    return MP_OK;
}

static double rel_diff(double a, double ref) { return fabs(a - ref) / fmax(fabs(ref), 1e-30); }

/* Both NaN, or within tol of each other. */
static bool close_or_nan(double a, double ref, double tol) {
    return isnan(a) || isnan(ref) ? isnan(a) && isnan(ref) : rel_diff(a, ref) <= tol;
}

/* Per step: penalty, loss, skips, scale and R1's input gradient. Worst
 * relative differences into worst[0..2]. */
static void compare_step(rig *rc, rig *rg, int k, const char *label, double tol, double worst[3],
                         int64_t *skipped_before) {
    float pc = NAN, pg = NAN, lc = NAN, lg = NAN;
    CHECK(mp_trainer_penalty_value(rc->t, &pc) == MP_OK, "%s: CPU penalty: %s", label, mp_last_error());
    CHECK(mp_trainer_penalty_value(rg->t, &pg) == MP_OK, "%s: GPU penalty: %s", label, mp_last_error());
    CHECK(mp_trainer_loss(rc->t, &lc) == MP_OK && mp_trainer_loss(rg->t, &lg) == MP_OK, "%s: loss: %s", label,
          mp_last_error());
    const int64_t sc = mp_trainer_skipped_steps(rc->t), sg = mp_trainer_skipped_steps(rg->t);
    const float scale_c = mp_trainer_loss_scale(rc->t), scale_g = mp_trainer_loss_scale(rg->t);
    CHECK(sc == sg && scale_c == scale_g, "%s, step %d: skipped steps %lld on the GPU, %lld on the CPU; loss scale "
          "%g and %g", label, k + 1, (long long)sg, (long long)sc, (double)scale_g, (double)scale_c);
    /* a step both skipped: where it overflowed may differ (a GPU's conv
     * writes an input gradient in the f16 compute dtype, the CPU's
     * emulation in its f32 storage dtype), so its penalty is NaN on one
     * side and finite on the other; nothing of it was applied */
    const bool skipped = sc > *skipped_before && sg > *skipped_before;
    *skipped_before = sc;
    if (skipped) return;
    CHECK(close_or_nan(pg, pc, tol), "%s, step %d: penalty %.7g on the GPU, %.7g on the CPU", label, k + 1,
          (double)pg, (double)pc);
    CHECK(close_or_nan(lg, lc, tol), "%s, step %d: loss %.7g on the GPU, %.7g on the CPU", label, k + 1, (double)lg,
          (double)lc);
    if (!isnan(pc)) worst[0] = fmax(worst[0], rel_diff(pg, pc));
    if (!isnan(lc)) worst[1] = fmax(worst[1], rel_diff(lg, lc));
    if (!rc->n.disc || isnan(pc)) return;
    static float gc[XN], gg[XN];
    CHECK(mp_trainer_penalty_input_grad(rc->t, gc, XN) == MP_OK, "%s: CPU input gradient: %s", label, mp_last_error());
    CHECK(mp_trainer_penalty_input_grad(rg->t, gg, XN) == MP_OK, "%s: GPU input gradient: %s", label, mp_last_error());
    const double e = rel_err(gg, gc, XN);
    CHECK(norm(gc, XN) > 0 && e <= tol, "%s, step %d: R1's input gradient: rel. error %.3e (CPU norm %g)", label,
          k + 1, e, norm(gc, XN));
    worst[2] = fmax(worst[2], e);
}

static void trainer_case(bool disc, mp_precision prec) {
    char label[96];
    snprintf(label, sizeof label, "trainer %-8s %-13s %s", mp_precision_name(prec), net_name(disc),
             disc ? "r1 10" : "l2 0.1");
    const int failed_before = check_failed;
    const double tol = tol_of(prec);
    rig rc = {0}, rg = {0};
    mp_status sc = rig_open(&rc, disc, prec, CPU);
    CHECK(sc == MP_OK, "%s: CPU trainer: %s", label, mp_last_error());
    mp_status sg = sc == MP_OK ? rig_open(&rg, disc, prec, GPU) : sc;
    CHECK(sc != MP_OK || sg == MP_OK, "%s: GPU trainer: %s", label, mp_last_error());
    const size_t n = sc == MP_OK ? all_numel(rc.n.g) : 0;
    float *init = malloc(n * sizeof *init), *pc = malloc(n * sizeof *pc), *pg = malloc(n * sizeof *pg);
    if (sc != MP_OK || sg != MP_OK || !init || !pc || !pg) {
        printf("FAIL %s %s\n", label, mp_last_error());
        goto out;
    }
    CHECK(read_all(&rc, init) == MP_OK && read_all(&rg, pg) == MP_OK, "%s: %s", label, mp_last_error());
    CHECK(rel_err(pg, init, n) == 0, "%s: the GPU trainer starts from other weights", label);
    double worst[3] = {0}, p_first = NAN, p_last = NAN;
    int64_t skipped_before = 0;
    for (int k = 0; k < STEPS; k++) {
        batch b;
        make_batch(&b, 200 + (uint64_t)k);
        mp_status a = rig_step(&rc, &b);
        CHECK(a == MP_OK, "%s, step %d: CPU: %s", label, k + 1, mp_last_error());
        mp_status c = rig_step(&rg, &b);
        CHECK(c == MP_OK, "%s, step %d: GPU: %s", label, k + 1, mp_last_error());
        if (a != MP_OK || c != MP_OK) break;
        compare_step(&rc, &rg, k, label, tol, worst, &skipped_before);
        float v = NAN;
        mp_trainer_penalty_value(rc.t, &v);
        if (k == 0) p_first = v;
        p_last = v;
    }
    CHECK(read_all(&rc, pc) == MP_OK && read_all(&rg, pg) == MP_OK, "%s: %s", label, mp_last_error());
    tensor_cmp params;
    char what[128];
    snprintf(what, sizeof what, "%s, after %d steps", label, STEPS);
    compare_params(rc.n.g, true, pg, pc, tol, what, &params);
    /* how far they moved: (gpu - init) against (cpu - init) */
    for (size_t i = 0; i < n; i++) pg[i] -= init[i], pc[i] -= init[i];
    const double moved = norm(pc, n) / norm(init, n), e_move = rel_err(pg, pc, n);
    CHECK(moved > 0 && e_move <= MOVE_FACTOR * tol, "%s: the weights moved %.3e of their norm on the CPU; the GPU's "
          "movement differs by %.3e of it (tolerance %.0e)", label, moved, e_move, MOVE_FACTOR * tol);
    char r1[64] = "";
    if (disc) snprintf(r1, sizeof r1, "; R1's input grad worst %.1e", worst[2]);
    printf("%-4s %s %d steps, %lld skipped, scale %g: penalty %.5g -> %.5g, worst rel. %.1e; loss %.1e%s; "
           "weights worst %.1e (%s), moved %.1e, movement %.1e; tolerance %.0e\n",
           check_failed > failed_before ? "FAIL" : "ok", label, STEPS, (long long)mp_trainer_skipped_steps(rc.t),
           (double)mp_trainer_loss_scale(rc.t), p_first, p_last, worst[0], worst[1], r1, params.worst, params.name,
           moved, e_move, tol);
out:
    free(init), free(pc), free(pg);
    rig_close(&rg);
    rig_close(&rc);
}

/* ---- 3. calls out of order ----------------------------------------------- */

/* The calls, in order, on a fresh plan of the discriminator, and what each gives. */
static const struct {
    const char *what;
    mp_status want;
    const char *needle;
} ORDER[] = {
    {"forward_tangent before any forward", MP_ERR_INVALID_ARG, "before any forward"},
    {"backward_input_grad before any forward", MP_ERR_INVALID_ARG, "before any forward"},
    {"forward", MP_OK, ""},
    {"read_input_grad before backward_input_grad", MP_ERR_INVALID_ARG, "no mp_plan_backward_input_grad"},
    {"backward_tangent before forward_tangent", MP_ERR_INVALID_ARG, "before mp_plan_forward_tangent"},
    {"set_tangent_input with 3 values", MP_ERR_SHAPE, "got 3 values"},
    {"set_tangent_param of a buffer", MP_ERR_INVALID_ARG, "'d_bn0.running_mean' is not a trainable"},
    {"set_tangent_input, forward_tangent", MP_OK, ""},
    {"backward_tangent without a backward", MP_ERR_INVALID_ARG, "the last backward since the forward is none"},
    {"backward_input_grad", MP_OK, ""},
    {"backward_tangent from the loss after backward_input_grad", MP_ERR_INVALID_ARG, "started at 'd_head'"},
    {"read_input_grad with 2 values", MP_ERR_SHAPE, "asked for 2 values"},
    {"backward_tangent from the logits", MP_OK, ""},
    {"read_tangent_grad with 2 values", MP_ERR_SHAPE, "d_head.weight"},
};
enum { N_ORDER = sizeof ORDER / sizeof ORDER[0] };

static mp_status order_call(mp_plan *p, const net *n, int i) {
    static float v[XN];
    switch (i) {
    case 0: return mp_plan_forward_tangent(p);
    case 1: return mp_plan_backward_input_grad(p, 1.0f);
    case 2: return mp_plan_forward(p);
    case 3: return mp_plan_read_input_grad(p, v, XN);
    case 4: return mp_plan_backward_tangent(p, n->loss);
    case 5: return mp_plan_set_tangent_input(p, v, 3);
    case 6: return mp_plan_set_tangent_param(p, "d_bn0.running_mean", v, 8);
    case 7: MP_TRY(mp_plan_set_tangent_input(p, v, XN)); return mp_plan_forward_tangent(p);
    case 8: return mp_plan_backward_tangent(p, n->loss);
    case 9: return mp_plan_backward_input_grad(p, 1.0f);
    case 10: return mp_plan_backward_tangent(p, n->loss);
    case 11: return mp_plan_read_input_grad(p, v, 2);
    case 12: return mp_plan_backward_tangent(p, n->out);
    default: return mp_plan_read_tangent_grad(p, "d_head.weight", v, 2);
    }
}

static void order_case(void) {
    const int failed_before = check_failed;
    batch b;
    make_batch(&b, 5);
    net n[2] = {{0}, {0}};
    mp_plan *p[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        mp_status s = build(&n[d], true, MP_PRECISION_FP32);
        if (s == MP_OK) s = mp_plan_create(n[d].g, plan_opts(&n[d], d ? GPU : CPU), &p[d]);
        if (s == MP_OK) s = mp_plan_set_input(p[d], n[d].x, b.x, XN);
        if (s == MP_OK) s = mp_plan_set_input(p[d], n[d].y, b.t, B);
        CHECK(s == MP_OK, "order: %s plan: %s", d ? "GPU" : "CPU", mp_last_error());
        for (int i = 0; i < N_ORDER && s == MP_OK; i++) {
            const mp_status got = order_call(p[d], &n[d], i);
            const char *msg = got == MP_OK ? "" : mp_last_error();
            CHECK(got == ORDER[i].want && strstr(msg, ORDER[i].needle),
                  "order on the %s: %s: status %s (expected %s), message lacks '%s': %s", d ? "GPU" : "CPU",
                  ORDER[i].what, mp_status_name(got), mp_status_name(ORDER[i].want), ORDER[i].needle, msg);
            if (getenv("MP_TEST_VERBOSE")) printf("  %s [%s] %s\n", d ? "GPU" : "CPU", mp_status_name(got), msg);
        }
        if (s != MP_OK) break;
    }
    rig r = {0};
    mp_status s = rig_open(&r, false, MP_PRECISION_FP32, GPU);
    CHECK(s == MP_OK, "GPU trainer: %s", mp_last_error());
    float v = 0;
    if (s == MP_OK) CHECK_ERR(mp_trainer_penalty_value(r.t, &v), MP_ERR_INVALID_ARG, "no step has run yet");
    rig_close(&r);
    printf("%-4s order: %d calls, in and out of order, give on a GPU plan the status and words of a CPU plan; a GPU "
           "trainer's penalty before its first step is an error\n", check_failed > failed_before ? "FAIL" : "ok",
           N_ORDER);
    for (int d = 0; d < 2; d++) mp_plan_destroy(p[d]), mp_graph_destroy(n[d].g);
}

/* ---- 4. a huge R1 weight ------------------------------------------------- */

/* x (3 features) -> fc1 (4) -> tanh -> head (1) -> BCE with logits, with
 * weights that make the logit's gradient w.r.t. every sample's x (1.2, 0, 0)
 * at x = 0. */
static mp_status huge_weight_step(mp_device dev, mp_step_report *rep, float *value) {
    enum { HB = 4, HF = 3 };
    mp_graph *g = mp_graph_create();
    if (!g) return mp_error(MP_ERR_NOMEM, "graph");
    mp_node x = mp_graph_targets(g, "x", HF);
    mp_node h = mp_tanh(g, "t1", mp_linear(g, "fc1", x, (mp_linear_opts){.out_features = 4, .bias = true}));
    mp_node out = mp_linear(g, "head", h, (mp_linear_opts){.out_features = 1, .bias = true});
    mp_node t = mp_graph_targets(g, "t", 1);
    mp_node loss = mp_bce_with_logits(g, "loss", out, t);
    mp_graph_mark_output(g, loss);
    mp_optimizer *opt = NULL;
    mp_trainer *tr = NULL;
    const float w1[12] = {1}, b1[4] = {0}, w2[4] = {1.2f}, b2[1] = {0}, xs[HB * HF] = {0}, ts[HB] = {1, 0, 1, 0};
    mp_status st = mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_FP32});
    if (st == MP_OK) mp_graph_init_params(g, 5);
    if (st == MP_OK) st = mp_graph_param_set(g, "fc1.weight", w1, 12);
    if (st == MP_OK) st = mp_graph_param_set(g, "fc1.bias", b1, 4);
    if (st == MP_OK) st = mp_graph_param_set(g, "head.weight", w2, 4);
    if (st == MP_OK) st = mp_graph_param_set(g, "head.bias", b2, 1);
    if (st == MP_OK) st = mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}}, &opt);
    if (st == MP_OK)
        st = mp_trainer_create(g, &(mp_trainer_opts){.batch = HB, .loss = loss, .optimizer = opt, .device = dev,
                                                     .max_skip_share = 1,
                                                     .penalty = {.kind = MP_PENALTY_R1, .weight = 3e38f,
                                                                 .input = x, .output = out}},
                               &tr);
    if (st == MP_OK) st = mp_trainer_set_input(tr, x, xs, HB * HF);
    if (st == MP_OK) st = mp_trainer_set_input(tr, t, ts, HB);
    mp_step_report late = {0}; /* a GPU reports a step's overflow when the host sees it: here, at the wait */
    if (st == MP_OK) st = mp_trainer_step(tr, NULL, rep);
    if (st == MP_OK) st = mp_trainer_wait(tr, &late);
    rep->overflow.found |= late.overflow.found;
    rep->overflow.forward |= late.overflow.forward;
    if (st == MP_OK) st = mp_trainer_penalty_value(tr, value);
    mp_trainer_destroy(tr);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(g);
    return st;
}

static void huge_weight_case(void) {
    const int failed_before = check_failed;
    for (int d = 0; d < 2; d++) {
        mp_step_report rep = {0};
        float v = 0;
        const mp_status st = huge_weight_step(d ? GPU : CPU, &rep, &v);
        CHECK(st == MP_OK, "huge weight on the %s: %s", d ? "GPU" : "CPU", mp_last_error());
        CHECK(st != MP_OK || (rep.overflow.found && rep.overflow.forward && isnan(v)),
              "huge weight on the %s: overflow %d, forward %d, value %g (expected a forward overflow, NaN)",
              d ? "GPU" : "CPU", rep.overflow.found, rep.overflow.forward, (double)v);
    }
    printf("%-4s huge R1 weight: weight x gradient past f32 is a forward overflow of the penalty on both devices\n",
           check_failed > failed_before ? "FAIL" : "ok");
}

int main(void) {
    if (mp_cuda_device_count() < 1) {
        printf("test_cuda_penalty: no CUDA device, nothing tested (%s)\n", mp_cuda_device_list());
        return 2;
    }
    printf("test_cuda_penalty on %s\n", mp_cuda_device_list());
    const mp_precision plan_precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16};
    const mp_precision trainer_precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_FP16, MP_PRECISION_AMP_BF16};
    for (int disc = 0; disc < 2; disc++)
        for (int k = 0; k < 2; k++) plan_case(disc, plan_precs[k]);
    for (int disc = 0; disc < 2; disc++)
        for (int k = 0; k < 3; k++) trainer_case(disc, trainer_precs[k]);
    order_case();
    huge_weight_case();
    return test_summary("test_cuda_penalty");
}
