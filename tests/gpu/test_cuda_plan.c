/* test_cuda_plan.c — whole networks on the GPU against the CPU oracle:
 *  1. one forward/backward of the same model, parameters and batch: the GPU's
 *     gradients under a policy are as close to the fp32 CPU oracle as the
 *     CPU's own emulation of that policy is (within 2x, plus a floor: 0.15
 *     for tf32, which the CPU computes in fp32), and the losses agree. For
 *     fp32 the floor is measured: ReLU and max-pool make the gradient a
 *     non-smooth function of the inputs, so moving every input and weight by
 *     one ulp moves the oracle's gradients by up to ~5e-4 on cnn10 and ~3e-3
 *     on resnet18; the GPU (another f32 summation order in every layer) must
 *     stay within 4x the largest such move of 16 trials (or of the CPU's
 *     reference kernels' order), 1e-5 at least and 2e-2 at most. The same
 *     rules hold for each trainable parameter alone, with its own CPU
 *     emulation error or its own largest move (param_scales: how a gradient
 *     that is zero or rounding noise is judged; in fp32 also twice the
 *     tolerance over all, FLIP_SHARE), so an error confined to a small
 *     tensor cannot hide in the norm over all. The GPU fuses each
 *     batchnorm2d + relu pair of these models (graph/plan_fuse.h)
 *     and keeps the gradients in the arena, so these comparisons check both;
 *     under fp16/bf16 the arena holds the conv/linear weight gradients in
 *     f16/bf16 (low_grads, as the trainer asks for), under amp and O2 the
 *     conv filters'; cnn10 fp32 and
 *     amp-bf16 run again unfused with gradients of their own (in a child
 *     process started with MIXPREC_NO_FUSION=1: the library reads its
 *     environment once);
 *  2. a short training run per policy through the GPU trainer (SGD,
 *     momentum 0.9, two batches in turn so the loss must fall; the step
 *     replayed from its CUDA graph; a static loss scale for amp-fp16 on both
 *     sides, so no overflow decision can differ) whose loss curve follows the
 *     CPU's; the trainer keeps the gradients in the arena, the weights' in
 *     their dtype (low_grads) for fp16 and bf16 and the conv filters' for
 *     amp-bf16 (no loss scaling), the CPU rounding the weights as the
 *     trainer does;
 *  3. f16/bf16 gradients are never rescaled in place: the trainer plans
 *     them (low_grads) only when nothing unscales or clips them, and a
 *     step with loss scaling or clipping runs over f32 gradients; a
 *     low_grads plan's gradients keep their dtype when a layer moves to fp32;
 *     with fp32 masters (amp, O2) a low_grads plan keeps the conv filters'
 *     gradients in the compute dtype cuDNN writes them in (linear weights'
 *     stay f32 sums), and in a child under MIXPREC_DETERMINISTIC=1
 *     ("--same-values") such a plan's gradients equal, bit for bit, those of
 *     a plan with f32 gradients (cnn10 amp-bf16 and amp-fp16, resnet18
 *     amp-bf16).
 * wrn-16-1's pre-activation blocks add a batch norm's dx into the identity
 * shortcut's gradient (mp_op_call.d_in_add on cuDNN's kernels).
 * Arguments (diagnosis): a model (small, cnn10, resnet18, wrn-16-1) runs that model's
 * cases only, and a precision after it only that policy's; "--plain" runs
 * the unfused cases only (the child of case 1, under MIXPREC_NO_FUSION=1),
 * "--same-values" case 3's bit-for-bit comparison (MIXPREC_DETERMINISTIC=1).
 * Needs a GPU: one clear line and exit 2 without one. Run by scripts/gpu-check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_op.h"
#include "cuda/cuda_plan.h"
#include "graph/exec_backend.h"
#include "graph/plan.h"
#include "models/models.h"
#include "optim/optim.h"
#include "rerun.h"

enum { B = 16, STEPS = 12 };

typedef struct {
    const char *model;
    int c, h, w;
} model_case;

/* Non-fp32 policies: the floor over twice the CPU emulation's error. */
static double floor_of(mp_precision p) { return p == MP_PRECISION_TF32 ? 0.15 : 2e-2; }

enum { ULP_TRIALS = 16, MAX_PARAMS = 256 };
/* fp32, per parameter: the own-move rule, or FLIP_SHARE x the tolerance
 * over all. An element near a ReLU's zero that goes the other way on the
 * GPU (another summation order) changes every gradient upstream of it; the
 * 16 one-ulp trials flip some elements, not necessarily the GPU's. Seen
 * (cnn10, legacy cuDNN algorithms, bench notes v0.12): one flip at
 * conv3_1_bn's output moved conv3_1_bn.bias and everything before it by
 * 6.5e-4-1.0e-3 each, the whole gradient by 5.9e-4 (tolerance 8.98e-4),
 * while conv3_1_bn.weight (dgamma sees the flipped element times its
 * normalized value, ~0 at a ReLU's zero) and all after it stayed at the
 * 1e-6 of summation order. The largest parameter share of one flip was
 * 1.3x its share of the whole; a kernel error confined to one tensor is
 * O(1) of it, far past FP32_CAP. */
#define FLIP_SHARE 2.0
#define FP32_CAP 2e-2 /* the measured fp32 tolerance never exceeds this (TF32 alone is ~8e-2 on resnet18) */

/* The GPU's gradient error may be: for fp32, 4x the oracle's own largest
 * move under f32 rounding (spread), 1e-5 at least, FP32_CAP at most; for the
 * other policies twice the CPU emulation's error (e_cpu) plus the floor.
 * The same rule for all gradients at once and for each parameter alone. */
static double tolerance(mp_precision p, double spread, double e_cpu) {
    return p == MP_PRECISION_FP32 ? fmin(fmax(4 * spread, 1e-5), FP32_CAP) : 2 * e_cpu + floor_of(p);
}

static void make_batch(mp_rng *r, float *x, size_t n, int32_t *y) {
    for (size_t i = 0; i < n; i++) x[i] = (float)mp_rng_normal(r);
    for (int i = 0; i < B; i++) y[i] = (int32_t)mp_rng_below(r, 10);
}

/* One batch of B of mc's images (*n floats, malloc'd) and labels y from seed. */
static float *seeded_batch(const model_case *mc, uint64_t seed, size_t *n, int32_t *y) {
    *n = (size_t)B * mc->c * mc->h * mc->w;
    float *x = malloc(*n * sizeof *x);
    MP_ASSERT(x);
    mp_rng r;
    mp_rng_seed(&r, seed);
    make_batch(&r, x, *n, y);
    return x;
}

/* Whether a low_grads plan of policy prec keeps weight gradients in f16/bf16:
 * fp16/bf16 every conv/linear weight's; with fp32 masters (amp, O2) the conv
 * filters', which cuDNN writes in the compute dtype, unless
 * MIXPREC_LOW_CONV_GRADS=0. */
static bool low_grads_expected(mp_precision prec) {
    if (prec == MP_PRECISION_FP32 || prec == MP_PRECISION_TF32) return false;
    return prec == MP_PRECISION_FP16 || prec == MP_PRECISION_BF16 || !mp_env_get()->no_low_conv_grads;
}

static mp_model build(const model_case *mc, mp_precision prec) {
    mp_model m;
    MP_ASSERT(mp_model_build(mc->model, mc->c, mc->h, mc->w, 10, &m) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 5);
    return m;
}

/* ||a.grad - b.grad|| / ||b.grad|| over every trainable parameter, and
 * (d, when set) each parameter's own ||a.grad_k - b.grad_k|| (0 for the
 * others). */
static double grad_diff(const mp_graph *a, const mp_graph *b, double *d) {
    MP_ASSERT(b->n_params <= MAX_PARAMS);
    double d2 = 0, r2 = 0;
    for (int k = 0; k < b->n_params; k++) {
        double pd2 = 0;
        for (int64_t i = 0; b->params[k].spec.trainable && i < mp_shape_numel(&b->params[k].spec.shape); i++) {
            double e = (double)a->params[k].grad[i] - b->params[k].grad[i];
            pd2 += e * e;
            r2 += (double)b->params[k].grad[i] * b->params[k].grad[i];
        }
        if (d) d[k] = sqrt(pd2);
        d2 += pd2;
    }
    return sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
}

/* What each parameter's gradient error is divided by: the oracle's own
 * gradient norm ||o_k||, but at least TINY_REL x the norm a gradient of its
 * size has at the model's RMS gradient, G sqrt(numel_k / numel), G the
 * norm over all. A gradient that is 0 (nothing reaches the parameter) or
 * rounding noise (a conv bias before a batch norm is 0 in exact arithmetic)
 * has no meaningful relative error: the GPU's noise over the oracle's is
 * O(1) however small both are (on test_cuda_dist's small CNN with batch
 * norms, ||o_k|| ~1e-7 and a 17th 1-ulp trial 0.26-0.53 from it: past
 * FP32_CAP). Against the floor the rules read as absolute ones on the
 * model's own scale: there the same trial is 4e-4-5e-4 of the floor within
 * tolerances of 1.6e-3-3e-3 (4x the 16 trials' largest move); an exact 0
 * (its moves are 0 too) must stay within 1e-5 x the floor in fp32, so
 * garbage in an unreached gradient fails. Only a gradient 1000 times under
 * the model's RMS takes the floor; every gradient of small, cnn10 and
 * resnet18 is at 0.3x it or more (their convolutions before a batch norm
 * have no bias), so here the floor is a guard, not a relaxation a case
 * relies on. */
#define TINY_REL 1e-3
static void param_scales(const mp_graph *oracle, double *scale) {
    double g2 = 0, numel = 0;
    for (int k = 0; k < oracle->n_params; k++) {
        const mp_gparam *gp = &oracle->params[k];
        scale[k] = 0;
        for (int64_t i = 0; gp->spec.trainable && i < mp_shape_numel(&gp->spec.shape); i++)
            scale[k] += (double)gp->grad[i] * gp->grad[i];
        g2 += scale[k];
        numel += gp->spec.trainable ? (double)mp_shape_numel(&gp->spec.shape) : 0;
    }
    for (int k = 0; k < oracle->n_params; k++) {
        const double n_k = (double)mp_shape_numel(&oracle->params[k].spec.shape);
        const double at_rms = numel > 0 ? TINY_REL * sqrt(g2 * n_k / numel) : 0;
        scale[k] = fmax(fmax(sqrt(scale[k]), at_rms), 1e-30);
    }
}

/* Gradients of one CPU step (policy prec) into g's host gradients; its loss. */
static float cpu_gradients(mp_model *m, const float *x, size_t n, const int32_t *y, bool onednn) {
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(m->g, (mp_plan_opts){.batch = B, .training = true, .loss = m->loss, .reference = !onednn},
                             &p) == MP_OK);
    float loss = 0;
    mp_plan_set_input(p, m->input, x, n);
    mp_plan_set_labels(p, m->labels, y, B);
    MP_ASSERT(mp_plan_forward(p) == MP_OK && mp_plan_read(p, m->loss, &loss, 1) == MP_OK);
    mp_graph_zero_grad(m->g);
    MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
    mp_plan_destroy(p);
    return loss;
}

static float ulp_step(mp_rng *q, float v) { return nextafterf(v, mp_rng_below(q, 2) ? INFINITY : -INFINITY); }

/* How far the fp32 oracle's gradients move under f32 rounding itself: with
 * the CPU's reference kernels (another summation order) instead of oneDNN
 * (*e_order), and, largest of ULP_TRIALS, with every input and weight moved
 * one ulp up or down at random (*e_ulp); move[k]: the largest of all these
 * moves of parameter k's gradient alone, ||moved_k - oracle_k||. The moves
 * are discrete: most trials land on one of a few values (on cnn10 ~2e-6,
 * 1.1e-5, 2.2e-4, 5.5e-4), as an element near a ReLU's zero or a max-pool
 * tie goes the other way; the GPU, another summation order in every layer,
 * lands on the same values. */
static void fp32_spread(const model_case *mc, const float *x, size_t n, const int32_t *y, const mp_graph *oracle,
                        double *e_order, double *e_ulp, double *move) {
    mp_model ref = build(mc, MP_PRECISION_FP32);
    cpu_gradients(&ref, x, n, y, false);
    *e_order = grad_diff(ref.g, oracle, move);
    mp_model_free(&ref);
    float *xp = malloc(n * sizeof *xp);
    MP_ASSERT(xp != NULL);
    *e_ulp = 0;
    for (int t = 0; t < ULP_TRIALS; t++) {
        mp_rng q;
        mp_rng_seed(&q, 100 + (uint64_t)t);
        for (size_t i = 0; i < n; i++) xp[i] = ulp_step(&q, x[i]);
        mp_model moved = build(mc, MP_PRECISION_FP32);
        for (int k = 0; k < moved.g->n_params; k++) {
            mp_gparam *gp = &moved.g->params[k];
            if (!gp->spec.trainable) continue;
            for (int64_t i = 0; i < mp_shape_numel(&gp->spec.shape); i++) gp->data[i] = ulp_step(&q, gp->data[i]);
        }
        cpu_gradients(&moved, xp, n, y, true);
        double d[MAX_PARAMS];
        double e = grad_diff(moved.g, oracle, d);
        if (e > *e_ulp) *e_ulp = e;
        for (int k = 0; k < oracle->n_params; k++) move[k] = fmax(move[k], d[k]);
        mp_model_free(&moved);
    }
    free(xp);
}

/* The GPU plan as the trainer makes it (fused pairs, gradients in the arena),
 * or, when set, plain: MIXPREC_NO_FUSION=1 and gradients of their own. */
static bool plain;
static bool f32_wgrad; /* mp_plan_opts.f32_weight_grads: cuDNN writes conv weight gradients in f32, straight into
                          the gradient the plan keeps in KRSC */

static void one_step_gradients(const model_case *mc, mp_precision prec) {
    mp_model cpu = build(mc, prec), gpu = build(mc, prec), oracle = build(mc, MP_PRECISION_FP32);
    mp_plan *pg = NULL;
    mp_status s = mp_plan_create(gpu.g, (mp_plan_opts){.batch = B, .training = true, .loss = gpu.loss,
                                                       .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = !plain,
                                                       .low_grads = !plain, .f32_weight_grads = f32_wgrad},
                                 &pg);
    CHECK(s == MP_OK, "%s %s: GPU plan: %s", mc->model, mp_precision_name(prec), mp_last_error());
    if (s != MP_OK) return;
    int f32_grads = 0; /* weight gradients kept as f32 sums (conv and linear weights under f32_wgrad) */
    for (int k = 0; k < gpu.g->n_params; k++) f32_grads += mp_plan_f32_weight_grad(pg, k);
    CHECK(f32_wgrad == (f32_grads > 0), "%s %s: %d f32 weight gradients with f32_weight_grads %s", mc->model,
          mp_precision_name(prec), f32_grads, f32_wgrad ? "on" : "off");
    int fused = 0; /* batchnorm2d + relu pairs (graph/plan_fuse.h): every model here has them */
    for (int i = 0; i < pg->n; i++) fused += pg->nodes[i].fused_away;
    const bool want_fused = !mp_env_get()->no_fusion;
    CHECK(!want_fused || fused > 0, "%s %s: no batchnorm2d+relu pair was fused", mc->model, mp_precision_name(prec));
    CHECK(want_fused || fused == 0, "%s %s: %d pairs fused under MIXPREC_NO_FUSION", mc->model,
          mp_precision_name(prec), fused);
    CHECK(mp_plan_grads_in_arena(pg) == !plain, "%s %s: gradients %sin the arena", mc->model, mp_precision_name(prec),
          plain ? "" : "not ");
    int low_grads = 0; /* weight gradients the plan keeps in f16/bf16 */
    for (int k = 0; k < gpu.g->n_params; k++) low_grads += mp_plan_grad_dtype(pg, k) != MP_DTYPE_F32;
    /* (f32_weight_grads: the amp cases here, whose filter gradients are then f32 sums) */
    const bool want_low = !plain && !f32_wgrad && low_grads_expected(prec);
    CHECK(want_low == (low_grads > 0), "%s %s: %d weight gradients in f16/bf16", mc->model, mp_precision_name(prec),
          low_grads);
    for (int k = 0; k < gpu.g->n_params; k++) { /* a linear weight with a master keeps cuBLASLt's f32 sums */
        const mp_gnode *wn = &gpu.g->nodes[gpu.g->params[k].node];
        if (wn->desc.kind == MP_OP_LINEAR && k == wn->first_param && mp_graph_param_low_only(gpu.g, k) == MP_DTYPE_F32)
            CHECK(mp_plan_grad_dtype(pg, k) == MP_DTYPE_F32, "%s %s: linear weight '%s' with an fp32 master has a %s "
                  "gradient", mc->model, mp_precision_name(prec), gpu.g->params[k].name,
                  mp_dtype_name(mp_plan_grad_dtype(pg, k)));
    }
    /* the device keeps every conv2d filter in KRSC (unless MIXPREC_CONV_WEIGHTS_KRSC=0), so none needs a
     * copy; else the copies are in the memory report (mp_plan_print_memory): each conv2d node's weight
     * once, in its compute dtype (2 or 4 bytes), each copy 256-byte aligned. The gradients compared
     * below come back through that layout. */
    size_t pb[4], krsc_lo = 0, krsc_hi = 0;
    pg->be->param_bytes(pg, pb);
    const bool weights_krsc = !mp_env_get()->no_conv_weights_krsc;
    for (int i = 0; i < pg->n; i++)
        if (gpu.g->nodes[i].desc.kind == MP_OP_CONV2D && !pg->nodes[i].fused_away) {
            const int k = gpu.g->nodes[i].first_param;
            const size_t wn = mp_shape_numel(&gpu.g->params[k].spec.shape);
            int dims[3] = {0};
            const bool krsc = mp_cuda_plan_param_krsc(pg, k, dims);
            const mp_shape *ws = &gpu.g->params[k].spec.shape;
            CHECK(krsc == weights_krsc && (!krsc || (dims[0] == ws->dims[0] && dims[1] == ws->dims[1] &&
                                                     dims[2] == ws->dims[2] * ws->dims[3])),
                  "%s %s: conv filter '%s' %s in KRSC (dims %d, %d, %d)", mc->model, mp_precision_name(prec),
                  gpu.g->params[k].name, krsc ? "kept" : "not kept", dims[0], dims[1], dims[2]);
            if (!krsc) krsc_lo += 2 * wn, krsc_hi += 4 * wn + 256;
        }
    CHECK(mp_env_get()->no_conv_krsc_copies ? pb[3] == 0 : pb[3] >= krsc_lo && pb[3] <= krsc_hi,
          "%s %s: KRSC filter copies of %zu bytes, not in [%zu, %zu]", mc->model, mp_precision_name(prec), pb[3],
          krsc_lo, krsc_hi);
    /* wrn-16-1 in amp: its batch norms (cuDNN's kernels or ours, as timed) add their dx into a gradient already
     * written (the executor asks for it where an identity shortcut's gradient is there first, so the gradients
     * checked below went that way), unless the environment turns it off */
    const mp_env *env = mp_env_get();
    if (!strcmp(mc->model, "wrn-16-1") && (prec == MP_PRECISION_AMP_BF16 || prec == MP_PRECISION_AMP_FP16) &&
        !env->no_cudnn_add_dx) {
        const mp_cuda_op_vtable *bn = mp_cuda_op_lookup(MP_OP_BATCHNORM2D);
        int adding = 0;
        for (int i = 0; i < pg->n; i++)
            adding += gpu.g->nodes[i].desc.kind == MP_OP_BATCHNORM2D && !pg->nodes[i].fused_away &&
                      bn->adds_input_grad && bn->adds_input_grad(pg->nodes[i].call.state, 0);
        CHECK(adding > 0, "%s %s: no batch norm adds its dx into another consumer's gradient", mc->model,
              mp_precision_name(prec));
    }
    size_t n;
    int32_t y[B];
    float *x = seeded_batch(mc, 9, &n, y);
    float lg = 0, lc = cpu_gradients(&cpu, x, n, y, true);
    cpu_gradients(&oracle, x, n, y, true);
    double e_order = 0, e_ulp = 0, move[MAX_PARAMS] = {0};
    if (prec == MP_PRECISION_FP32) fp32_spread(mc, x, n, y, oracle.g, &e_order, &e_ulp, move);
    s = mp_plan_set_input(pg, gpu.input, x, n);
    if (s == MP_OK) s = mp_plan_set_labels(pg, gpu.labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(pg);
    if (s == MP_OK) s = mp_plan_read(pg, gpu.loss, &lg, 1);
    mp_graph_zero_grad(gpu.g);
    if (s == MP_OK) s = mp_plan_backward(pg, 1.0f);
    if (s == MP_OK) s = mp_plan_sync_params(pg, true);
    CHECK(s == MP_OK, "%s %s: GPU step: %s", mc->model, mp_precision_name(prec), mp_last_error());
    if (s == MP_OK) { /* labels read back as their values, as the CPU plan reads them */
        float yb[B];
        const mp_status r = mp_plan_read(pg, gpu.labels, yb, B);
        int wrong = 0;
        for (int i = 0; r == MP_OK && i < B; i++) wrong += yb[i] != (float)y[i];
        CHECK(r == MP_OK && wrong == 0, "%s %s: labels read back: %d of %d differ %s", mc->model,
              mp_precision_name(prec), wrong, B, r == MP_OK ? "" : mp_last_error());
    }
    if (s == MP_OK) {
        const mp_graph *o = oracle.g;
        double scale[MAX_PARAMS], d_gpu[MAX_PARAMS], d_cpu[MAX_PARAMS], e[MAX_PARAMS] = {0}, t[MAX_PARAMS] = {0};
        param_scales(o, scale);
        double e_gpu = grad_diff(gpu.g, o, d_gpu), e_cpu = grad_diff(cpu.g, o, d_cpu);
        double tol = tolerance(prec, e_order > e_ulp ? e_order : e_ulp, e_cpu);
        int worst = -1; /* the parameter nearest its tolerance (or furthest past it) */
        for (int k = 0; k < o->n_params; k++) {
            if (!o->params[k].spec.trainable) continue;
            e[k] = d_gpu[k] / scale[k];
            t[k] = tolerance(prec, move[k] / scale[k], d_cpu[k] / scale[k]);
            if (prec == MP_PRECISION_FP32) t[k] = fmin(fmax(t[k], FLIP_SHARE * tol), FP32_CAP);
            if (getenv("MP_TEST_VERBOSE"))
                printf("    %-32s gpu %.3e cpu emulation %.3e 1-ulp move %.3e tolerance %.3e\n", o->params[k].name,
                       e[k], d_cpu[k] / scale[k], move[k] / scale[k], t[k]);
            if (worst < 0 || e[k] / t[k] > e[worst] / t[worst]) worst = k;
        }
        char worst_s[320] = "none";
        if (worst >= 0)
            snprintf(worst_s, sizeof worst_s, "%.200s %.2e (tol %.2e)", o->params[worst].name, e[worst], t[worst]);
        printf("%s%-8s %-9s one step: loss cpu %.6f gpu %.6f; gradients vs the fp32 CPU: gpu %.2e, cpu emulation "
               "%.2e, cpu reference kernels %.2e, inputs and weights moved 1 ulp %.2e (tolerance %.2e); "
               "per-parameter worst %s\n",
               plain ? "plain " : f32_wgrad ? "f32-dW " : "", mc->model, mp_precision_name(prec), lc, lg, e_gpu, e_cpu, e_order, e_ulp, tol,
               worst_s);
        CHECK(fabsf(lg - lc) <= 1e-2f * fabsf(lc), "%s %s: loss %g vs %g", mc->model, mp_precision_name(prec), lg, lc);
        CHECK(e_gpu <= tol, "%s %s: GPU gradients %g from the fp32 oracle (CPU emulation %g); worst parameter: %s",
              mc->model, mp_precision_name(prec), e_gpu, e_cpu, worst_s);
        CHECK(worst >= 0, "%s %s: no trainable parameter", mc->model, mp_precision_name(prec));
        for (int k = 0; k < o->n_params; k++)
            if (o->params[k].spec.trainable)
                CHECK(e[k] <= t[k], "%s %s: parameter %s: GPU gradient %.3e from the fp32 oracle, tolerance %.3e "
                      "(CPU emulation %.3e, 1-ulp move %.3e, relative to %.3e)", mc->model, mp_precision_name(prec),
                      o->params[k].name, e[k], t[k], d_cpu[k] / scale[k], move[k] / scale[k], scale[k]);
    }
    free(x);
    mp_plan_destroy(pg);
    mp_model_free(&cpu);
    mp_model_free(&gpu);
    mp_model_free(&oracle);
}

/* CPU: the same step the GPU graph runs (scaled backward, unscale/check,
 * SGD unless found_inf, scaler update). */
static float cpu_curve(const model_case *mc, mp_precision prec, bool scaling, float *curve) {
    mp_model m = build(mc, prec);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(m.g, (mp_plan_opts){.batch = B, .training = true, .loss = m.loss},
                             &p) == MP_OK);
    mp_graph *g = m.g;
    mp_param_ref refs[256];
    float *grads[256];
    int64_t sizes[256];
    int n = 0;
    for (int k = 0; k < g->n_params && n < 256; k++) {
        mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable) continue;
        sizes[n] = mp_shape_numel(&gp->spec.shape);
        grads[n] = gp->grad;
        refs[n++] = (mp_param_ref){.param = gp->data, .grad = gp->grad, .n = sizes[n - 1],
                                   .decay = !strcmp(gp->spec.name, "weight") &&
                                            g->nodes[gp->node].desc.kind != MP_OP_BATCHNORM2D,
                                   .name = gp->name, .state_dtype = mp_graph_param_low_only(g, k)};
    }
    mp_optim *opt = NULL;
    MP_ASSERT(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f}, refs, n, &opt) == MP_OK);
    mp_graph_round_low_weights(g, NULL, NULL); /* as the trainer keeps them */
    mp_scaler sc;
    mp_scaler_init(&sc, (mp_scaler_opts){.static_scale = true, .init_scale = 1024});
    size_t in = mp_plan_numel(p, m.input);
    float *x = malloc(2 * in * sizeof *x);
    int32_t y[2 * B];
    mp_rng r;
    mp_rng_seed(&r, 21);
    make_batch(&r, x, in, y);
    make_batch(&r, x + in, in, y + B);
    for (int s = 0; s < STEPS; s++) {
        mp_plan_set_input(p, m.input, x + (s % 2) * in, in);
        mp_plan_set_labels(p, m.labels, y + (s % 2) * B, B);
        MP_ASSERT(mp_plan_forward(p) == MP_OK);
        mp_plan_read(p, m.loss, &curve[s], 1);
        mp_graph_zero_grad(g);
        MP_ASSERT(mp_plan_backward(p, scaling ? mp_scaler_scale(&sc) : 1.0f) == MP_OK);
        bool skip = false;
        if (scaling) {
            mp_scaler_unscale_check(&sc, grads, sizes, n);
            skip = mp_scaler_found_inf(&sc);
        }
        if (!skip) mp_optim_step(opt, 0.02f);
        if (!skip) mp_graph_round_low_weights(g, NULL, NULL);
        if (scaling) mp_scaler_update(&sc);
    }
    free(x);
    mp_optim_destroy(opt);
    mp_plan_destroy(p);
    mp_model_free(&m);
    return curve[STEPS - 1];
}

/* A GPU trainer of m with SGD (momentum 0.9, constant rate 0.02), loss
 * scaling on (static scale 1024) or off, and clipping by norm (0: off). */
static mp_status gpu_trainer(mp_model *m, bool scaling, float clip_norm, mp_optimizer **opt, mp_trainer **t) {
    MP_TRY(mp_optimizer_create(m->g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                          .lr = {.base_lr = 0.02f}},
                               opt));
    return mp_trainer_create(m->g,
                             &(mp_trainer_opts){.batch = B, .device = {MP_DEVICE_CUDA, 0}, .input = m->input,
                                                .labels = m->labels, .loss = m->loss, .optimizer = *opt,
                                                .loss_scaling = scaling ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_OFF,
                                                .scaler = {.static_scale = true, .init_scale = 1024},
                                                .clip_norm = clip_norm},
                             t);
}

/* Gradients the plan keeps in f16/bf16. */
static int low_grad_count(const mp_plan *p) {
    int n = 0;
    for (int k = 0; k < p->g->n_params; k++) n += mp_plan_grad_dtype(p, k) != MP_DTYPE_F32;
    return n;
}

static void training_curve(const model_case *mc, mp_precision prec) {
    bool scaling = prec == MP_PRECISION_AMP_FP16 || prec == MP_PRECISION_O2_FP16;
    float cpu[STEPS], gpu[STEPS];
    cpu_curve(mc, prec, scaling, cpu);
    mp_model m = build(mc, prec);
    mp_optimizer *opt = NULL;
    mp_trainer *t = NULL;
    mp_status s = gpu_trainer(&m, scaling, 0, &opt, &t);
    mp_plan *p = mp_trainer_plan(t);
    if (s == MP_OK) { /* the plan the trainer made: as the one-step comparisons checked it */
        CHECK(mp_plan_grads_in_arena(p), "%s %s: the trainer's gradients are not in the arena", mc->model,
              mp_precision_name(prec));
        const bool want_low = !scaling && low_grads_expected(prec);
        CHECK(want_low == (low_grad_count(p) > 0), "%s %s: %d weight gradients in f16/bf16", mc->model,
              mp_precision_name(prec), low_grad_count(p));
    }
    size_t in = p ? mp_plan_numel(p, m.input) : 0;
    float *x = malloc(2 * (in ? in : 1) * sizeof *x);
    int32_t y[2 * B];
    mp_rng r;
    mp_rng_seed(&r, 21);
    make_batch(&r, x, in, y);
    make_batch(&r, x + in, in, y + B);
    for (int k = 0; s == MP_OK && k < STEPS; k++) {
        s = mp_trainer_step(t, &(mp_batch){.images = x + (k % 2) * in, .labels = y + (k % 2) * B, .n = B}, NULL);
        if (s == MP_OK) s = mp_trainer_loss(t, &gpu[k]);
    }
    CHECK(s == MP_OK, "%s %s: GPU training: %s", mc->model, mp_precision_name(prec), mp_last_error());
    if (s == MP_OK) {
        double worst = 0;
        for (int k = 0; k < STEPS; k++) {
            double d = fabs((double)gpu[k] - cpu[k]) / fmax(fabs((double)cpu[k]), 1e-3);
            if (d > worst) worst = d;
        }
        double tol = prec == MP_PRECISION_FP32 ? 1e-2 : 0.15;
        printf("%-8s %-9s %d steps: loss cpu %.4f -> %.4f, gpu %.4f -> %.4f, worst rel. diff %.2e (tolerance %.0e)\n",
               mc->model, mp_precision_name(prec), STEPS, cpu[0], cpu[STEPS - 1], gpu[0], gpu[STEPS - 1], worst, tol);
        CHECK(worst <= tol, "%s %s: the GPU loss curve leaves the CPU's (%g)", mc->model, mp_precision_name(prec), worst);
        CHECK(gpu[STEPS - 1] < 0.8f * gpu[0], "%s %s: the loss must fall (%g -> %g)", mc->model,
              mp_precision_name(prec), gpu[0], gpu[STEPS - 1]);
    }
    free(x);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_model_free(&m);
}

/* f16/bf16 weight gradients are rounded once, by backward, and never
 * rescaled in place: the trainer keeps them in their dtype (low_grads) only
 * when nothing unscales or clips them; with loss scaling or clipping its
 * plan holds f32 gradients, and such a step runs. */
static void low_grads_choice(const model_case *mc, const float *x, const int32_t *y) {
    static const struct {
        const char *what;
        bool scaling;
        float clip_norm;
        bool low;
    } cases[] = {{"neither loss scaling nor clipping", false, 0, true},
                 {"loss scaling", true, 0, false},
                 {"clipping", false, 1.0f, false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mp_model m = build(mc, MP_PRECISION_FP16);
        mp_optimizer *opt = NULL;
        mp_trainer *t = NULL;
        mp_status s = gpu_trainer(&m, cases[i].scaling, cases[i].clip_norm, &opt, &t);
        CHECK(s == MP_OK, "fp16 trainer with %s: %s", cases[i].what, mp_last_error());
        if (s == MP_OK) {
            const int low = low_grad_count(mp_trainer_plan(t));
            CHECK((low > 0) == cases[i].low, "fp16 trainer with %s: %d gradients in f16", cases[i].what, low);
            float loss = NAN;
            s = mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = B}, NULL);
            if (s == MP_OK) s = mp_trainer_loss(t, &loss);
            CHECK(s == MP_OK && isfinite(loss), "fp16 trainer with %s: a step: %s (loss %g)", cases[i].what,
                  s == MP_OK ? "ok" : mp_last_error(), loss);
            printf("%-8s fp16      trainer with %s: %d gradients in f16, a step runs (loss %.4f)\n", mc->model,
                   cases[i].what, low, loss);
        }
        mp_trainer_destroy(t);
        mp_optimizer_destroy(opt);
        mp_model_free(&m);
    }
}

/* A low_grads plan's gradient dtype is the plan's from its creation: a
 * layer moved to fp32 afterwards (as --auto-fallback does before the old
 * plan syncs its state to the host) still syncs the gradient it holds. */
static void low_grads_keep_dtype(const model_case *mc, const float *x, size_t n, const int32_t *y) {
    mp_model m = build(mc, MP_PRECISION_FP16);
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(m.g, (mp_plan_opts){.batch = B, .training = true, .loss = m.loss,
                                                     .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = true,
                                                     .low_grads = true},
                                 &p);
    CHECK(s == MP_OK, "low_grads plan: %s", mp_last_error());
    mp_graph *g = m.g;
    if (s == MP_OK) s = mp_plan_set_input(p, m.input, x, n);
    if (s == MP_OK) s = mp_plan_set_labels(p, m.labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_backward(p, 1.0f);
    if (s == MP_OK) s = mp_plan_sync_params(p, true);
    int k = 0; /* the first weight whose gradient is f16 */
    while (p && k < g->n_params && mp_plan_grad_dtype(p, k) != MP_DTYPE_F16) k++;
    CHECK(s == MP_OK && k < g->n_params, "low_grads step: %s", s == MP_OK ? "no f16 gradient" : mp_last_error());
    if (s == MP_OK && k < g->n_params) {
        const size_t gn = (size_t)mp_shape_numel(&g->params[k].spec.shape);
        float *before = malloc(gn * sizeof *before);
        memcpy(before, g->params[k].grad, gn * sizeof *before);
        mp_gnode *nd = &g->nodes[g->params[k].node];
        const mp_dtype was = nd->compute_dtype;
        nd->compute_dtype = MP_DTYPE_F32; /* the fallback's first move */
        CHECK(mp_plan_grad_dtype(p, k) == MP_DTYPE_F16, "%s: the gradient's dtype moved with the layer",
              g->params[k].name);
        memset(g->params[k].grad, 0, gn * sizeof(float));
        s = mp_plan_sync_params(p, true);
        CHECK(s == MP_OK && !memcmp(before, g->params[k].grad, gn * sizeof *before),
              "%s: after the layer moved to fp32 the sync returns the f16 gradient it held: %s", g->params[k].name,
              s == MP_OK ? "values differ" : mp_last_error());
        nd->compute_dtype = was;
        free(before);
    }
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* One forward and backward of m on plan p, the gradients synced to the host. */
static mp_status plan_gradients(mp_model *m, mp_plan *p, const float *x, size_t n, const int32_t *y) {
    MP_TRY(mp_plan_set_input(p, m->input, x, n));
    MP_TRY(mp_plan_set_labels(p, m->labels, y, B));
    MP_TRY(mp_plan_forward(p));
    mp_graph_zero_grad(m->g);
    MP_TRY(mp_plan_backward(p, 1.0f));
    return mp_plan_sync_params(p, true);
}

/* With fp32 master weights (amp) a low_grads plan keeps each conv filter's
 * gradient in the dtype cuDNN writes it in instead of casting it to f32: the
 * same values, so the host gets the gradients bit for bit as from a plan
 * with f32 gradients. Run under MIXPREC_DETERMINISTIC=1 (the child
 * "--same-values"), where both plans run the same algorithms. */
static void low_grads_same_values(const model_case *mc, mp_precision prec) {
    mp_model a = build(mc, prec), b = build(mc, prec);
    mp_plan *pa = NULL, *pb = NULL;
    const mp_plan_opts o = {.batch = B, .training = true, .loss = a.loss, .device = {MP_DEVICE_CUDA, 0},
                            .grads_in_arena = true, .low_grads = true};
    mp_plan_opts o32 = o;
    o32.loss = b.loss, o32.low_grads = false;
    mp_status s = mp_plan_create(a.g, o, &pa);
    if (s == MP_OK) s = mp_plan_create(b.g, o32, &pb);
    CHECK(s == MP_OK, "%s %s: plans: %s", mc->model, mp_precision_name(prec), mp_last_error());
    const int low = s == MP_OK ? low_grad_count(pa) : 0;
    CHECK(s != MP_OK || (low > 0 && low_grad_count(pb) == 0), "%s %s: %d low gradients with low_grads, %d without",
          mc->model, mp_precision_name(prec), low, s == MP_OK ? low_grad_count(pb) : 0);
    size_t n;
    int32_t y[B];
    float *x = seeded_batch(mc, 13, &n, y);
    if (s == MP_OK) s = plan_gradients(&a, pa, x, n, y);
    if (s == MP_OK) s = plan_gradients(&b, pb, x, n, y);
    CHECK(s == MP_OK, "%s %s: steps: %s", mc->model, mp_precision_name(prec), mp_last_error());
    int differ = 0, first = -1;
    for (int k = 0; s == MP_OK && k < a.g->n_params; k++) {
        const mp_gparam *ga = &a.g->params[k], *gb = &b.g->params[k];
        if (!ga->spec.trainable || !ga->grad) continue;
        const size_t bytes = (size_t)mp_shape_numel(&ga->spec.shape) * sizeof(float);
        if (memcmp(ga->grad, gb->grad, bytes)) differ++, first = first < 0 ? k : first;
    }
    CHECK(differ == 0, "%s %s: %d gradients differ between low and f32 gradient plans (first '%s')", mc->model,
          mp_precision_name(prec), differ, first >= 0 ? a.g->params[first].name : "");
    if (s == MP_OK)
        printf("%-8s %-9s %d conv filter gradients kept in %s: every gradient bit for bit as with f32 ones (%d "
               "differ)\n", mc->model, mp_precision_name(prec), low, prec == MP_PRECISION_AMP_FP16 ? "f16" : "bf16",
               differ);
    free(x);
    mp_plan_destroy(pa);
    mp_plan_destroy(pb);
    mp_model_free(&a);
    mp_model_free(&b);
}

/* The child "--same-values", under MIXPREC_DETERMINISTIC=1. */
static int same_value_cases(const model_case *cnn10, const model_case *resnet18) {
    if (!mp_env_get()->deterministic) {
        fprintf(stderr, "test_cuda_plan --same-values: needs MIXPREC_DETERMINISTIC=1 in the environment\n");
        return 2;
    }
    low_grads_same_values(cnn10, MP_PRECISION_AMP_BF16);
    low_grads_same_values(cnn10, MP_PRECISION_AMP_FP16);
    low_grads_same_values(resnet18, MP_PRECISION_AMP_BF16);
    return test_summary("test_cuda_plan --same-values");
}

/* The child of case 1: cnn10 fp32 and amp-bf16 unfused, with gradients of their own. */
static int plain_cases(const model_case *cnn10) {
    if (!mp_env_get()->no_fusion) {
        fprintf(stderr, "test_cuda_plan --plain: needs MIXPREC_NO_FUSION=1 in the environment\n");
        return 2;
    }
    plain = true;
    one_step_gradients(cnn10, MP_PRECISION_FP32);
    one_step_gradients(cnn10, MP_PRECISION_AMP_BF16);
    return test_summary("test_cuda_plan --plain");
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL; /* one model's cases (diagnosis) */
    mp_precision only_prec = MP_PRECISION_FP32;
    const bool one_prec = argc > 2 && mp_precision_parse(argv[2], &only_prec) == MP_OK;
    if (argc > 2 && !one_prec) {
        fprintf(stderr, "test_cuda_plan: %s\n", mp_last_error());
        return 2;
    }
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_plan: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    /* wrn-16-1: pre-activation blocks whose input feeds a batch norm and an identity shortcut, so the
     * batch norm's backward adds its dx to the shortcut's gradient (on cuDNN's kernels, f16/bf16) */
    const model_case models[] = {
        {"small", 1, 28, 28}, {"cnn10", 3, 32, 32}, {"resnet18", 3, 32, 32}, {"wrn-16-1", 3, 32, 32}};
    if (only && !strcmp(only, "--plain")) return plain_cases(&models[1]);
    if (only && !strcmp(only, "--same-values")) return same_value_cases(&models[1], &models[2]);
    bool known = !only;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) known = known || !strcmp(only, models[i].model);
    if (!known) {
        fprintf(stderr, "test_cuda_plan: unknown model '%s' (small, cnn10, resnet18, wrn-16-1)\n", only);
        return 2;
    }
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_TF32, MP_PRECISION_AMP_FP16,
                                  MP_PRECISION_AMP_BF16, MP_PRECISION_O2_FP16, MP_PRECISION_O2_BF16,
                                  MP_PRECISION_FP16, MP_PRECISION_BF16};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        for (size_t j = 0; j < sizeof precs / sizeof precs[0] && (!only || !strcmp(only, models[i].model)); j++)
            if (!one_prec || precs[j] == only_prec) one_step_gradients(&models[i], precs[j]);
    /* amp with unrounded (f32) weight gradients: the convolutions' dW written by cuDNN in f32 */
    f32_wgrad = true;
    for (size_t i = 1; i < 3; i++)
        for (int j = 2; j < 4 && (!only || !strcmp(only, models[i].model)); j++) /* amp-fp16, amp-bf16 */
            if (!one_prec || precs[j] == only_prec) one_step_gradients(&models[i], precs[j]);
    f32_wgrad = false;
    const mp_precision curve_precs[] = {MP_PRECISION_FP32, MP_PRECISION_TF32, MP_PRECISION_AMP_FP16,
                                        MP_PRECISION_AMP_BF16, MP_PRECISION_FP16, MP_PRECISION_BF16};
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < 6 && (!only || !strcmp(only, models[i].model)); j++)
            if (!one_prec || curve_precs[j] == only_prec) training_curve(&models[i], curve_precs[j]);
    if (!only || !strcmp(only, "small")) { /* one batch of the small model for both */
        size_t n;
        int32_t y[B];
        float *x = seeded_batch(&models[0], 5, &n, y);
        low_grads_choice(&models[0], x, y);
        low_grads_keep_dtype(&models[0], x, n, y);
        free(x);
    }
    /* the unfused kernels and gradients of their own (accumulation, MIXPREC_NO_FUSION=1) stay covered: in a
     * child, as the library reads MIXPREC_NO_FUSION once per process */
    if (!only && !one_prec && !mp_env_get()->no_fusion) {
        char *child[] = {argv[0], "--plain", NULL};
        const int rc = gpu_test_rerun("MIXPREC_NO_FUSION=1", child);
        CHECK(rc == 0, "the unfused cases (MIXPREC_NO_FUSION=1 %s --plain) failed: exit %d", argv[0], rc);
    }
    /* the algorithm choices fixed: another child (not under MIXPREC_LOW_CONV_GRADS=0, which it compares against) */
    if (!only && !one_prec && !mp_env_get()->deterministic && !mp_env_get()->no_low_conv_grads) {
        char *child[] = {argv[0], "--same-values", NULL};
        const int rc = gpu_test_rerun("MIXPREC_DETERMINISTIC=1", child);
        CHECK(rc == 0, "the same-value cases (MIXPREC_DETERMINISTIC=1 %s --same-values) failed: exit %d", argv[0],
              rc);
    }
    return test_summary("test_cuda_plan");
}
