/* test_policy.c — precision policies end to end: the pass that sets every
 * node's compute/storage dtype (against an independent reading of the
 * contract in DESIGN.md, on the zoo models and a hand-built graph), per-layer
 * overrides and their errors, the exact numerics of staged low-precision
 * execution (forward values and parameter gradients emulated in the test),
 * fp16 overflow to inf in storage, and a short training run per policy. */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "scratch_dir.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "graph/plan.h"
#include "models/models.h"
#include "train/fit.h"

/* The table of mixprec/precision.h, written out again for the checks. */
static const char *mp_graph_policy_name_for_test(const mp_graph *g) { return mp_precision_name(g->policy.precision); }

static mp_dtype mp_precision_low_dtype(mp_precision p) {
    static const mp_dtype lows[MP_PRECISION_COUNT] = {MP_DTYPE_F32, MP_DTYPE_F32,  MP_DTYPE_F16, MP_DTYPE_BF16,
                                                      MP_DTYPE_F16, MP_DTYPE_BF16, MP_DTYPE_F16, MP_DTYPE_BF16};
    return lows[p];
}

/* ---- dtype helpers ------------------------------------------------------- */

/* v rounded to dtype (f16/bf16 round-to-nearest-even; f32: to float). */
static float round_to(double v, mp_dtype dt) {
    float f = (float)v;
    if (dt == MP_DTYPE_F16) return mp_f16_to_f32(mp_f32_to_f16(f));
    if (dt == MP_DTYPE_BF16) return mp_bf16_to_f32(mp_f32_to_bf16(f));
    return f;
}

/* Whether f survives a trip through dtype bit for bit. */
static bool representable(float f, mp_dtype dt) {
    float r = round_to(f, dt);
    return memcmp(&r, &f, sizeof f) == 0 || (isnan(f) && isnan(r));
}

/* The library's value `got` equals the f32 result `v` (a double sum the
 * kernel rounds to float) rounded to dt. Sums in a different order than the
 * kernel's can move v across a rounding boundary, so a value within 1e-6
 * (relative) of v that rounds to `got` is accepted as well. */
static bool equals_rounded(float got, double v, mp_dtype dt) {
    float a = round_to(v, dt), lo = round_to(v * (1 - 1e-6), dt), hi = round_to(v * (1 + 1e-6), dt);
    return got == a || got == lo || got == hi;
}

/* `got` is the f32 sum `v` (its terms' magnitudes summing to mag), in any
 * order of f32 additions: within 1e-5 of mag, not rounded to a low dtype. */
static bool equals_f32(float got, double v, double mag) { return fabs(got - v) <= 1e-5 * mag + 1e-30; }

/* A parameter gradient: rounded to dt (the default), or the f32 sum
 * (mp_plan_opts.f32_weight_grads). */
static bool grad_equals(float got, double v, double mag, mp_dtype dt, bool unrounded) {
    return unrounded ? equals_f32(got, v, mag) : equals_rounded(got, v, dt);
}

static mp_dtype widest(mp_dtype a, mp_dtype b) {
    if (a == b) return a;
    if (a == MP_DTYPE_I32) return b;
    if (b == MP_DTYPE_I32) return a;
    return MP_DTYPE_F32;
}

static bool is_loss(mp_op_kind k) { return k == MP_OP_SOFTMAX_CE || k == MP_OP_BCE_LOGITS; }

/* ---- the contract, read independently of policy.c ------------------------ */

typedef struct {
    const char *layer; /* NULL = no override */
    mp_dtype dtype;
} override_t;

/* Expected compute/storage dtypes of every node of g under policy p: allow-list
 * (conv, transposed conv, linear) low in amp/o2/pure; BatchNorm computes in
 * f32 (low in pure with bn_low) and stores like its input; losses f32, labels
 * i32, targets f32; amp inputs f32, o2/pure inputs low; any other op computes
 * and stores in the widest dtype its inputs are stored in; an override sets
 * its node's dtypes and later nodes follow it like any other input; the
 * logits feeding a loss are stored in f32 whatever else applies. */
static void expected_dtypes(const mp_graph *g, mp_precision p, bool bn_low, override_t ov, mp_dtype *comp,
                            mp_dtype *stor) {
    const mp_dtype low = mp_precision_low_dtype(p);
    const bool amp = p == MP_PRECISION_AMP_FP16 || p == MP_PRECISION_AMP_BF16;
    const bool pure = p == MP_PRECISION_FP16 || p == MP_PRECISION_BF16;
    bool *logits = calloc((size_t)g->n_nodes, sizeof *logits);
    MP_ASSERT(logits);
    for (int i = 0; i < g->n_nodes; i++)
        if (is_loss(g->nodes[i].desc.kind)) logits[g->nodes[i].in[0]] = true;
    for (int i = 0; i < g->n_nodes; i++) {
        const mp_gnode *nd = &g->nodes[i];
        mp_dtype in = MP_DTYPE_I32;
        for (int j = 0; j < nd->n_in; j++) in = widest(in, stor[nd->in[j]]);
        switch (nd->desc.kind) {
        case MP_OP_LABELS: comp[i] = stor[i] = MP_DTYPE_I32; break;
        case MP_OP_INPUT: comp[i] = stor[i] = amp ? MP_DTYPE_F32 : low; break;
        case MP_OP_TARGETS:
        case MP_OP_SOFTMAX_CE:
        case MP_OP_BCE_LOGITS: comp[i] = stor[i] = MP_DTYPE_F32; break;
        case MP_OP_BATCHNORM2D:
            comp[i] = pure && bn_low ? low : MP_DTYPE_F32;
            stor[i] = in;
            break;
        case MP_OP_CONV2D:
        case MP_OP_CONV_TRANSPOSE2D:
        case MP_OP_LINEAR: comp[i] = stor[i] = low; break;
        default: comp[i] = stor[i] = in;
        }
        if (ov.layer && !strcmp(ov.layer, nd->name)) comp[i] = stor[i] = ov.dtype;
        if (logits[i]) stor[i] = MP_DTYPE_F32;
    }
    free(logits);
}

/* Compare every node's dtypes with the contract; returns the mismatches. */
static int check_against_contract(const mp_graph *g, mp_precision p, bool bn_low, override_t ov, const char *what) {
    mp_dtype *comp = calloc((size_t)g->n_nodes, sizeof *comp), *stor = calloc((size_t)g->n_nodes, sizeof *stor);
    MP_ASSERT(comp && stor);
    expected_dtypes(g, p, bn_low, ov, comp, stor);
    int bad = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const mp_gnode *nd = &g->nodes[i];
        bool ok = nd->compute_dtype == comp[i] && nd->storage_dtype == stor[i];
        bad += !ok;
        CHECK(ok, "%s, %s%s%s: node '%s' (%s) computes %s / stores %s, contract says %s / %s", what,
              mp_precision_name(p), bn_low ? " +bn_low" : "", ov.layer ? " +override" : "", nd->name,
              mp_op_lookup(nd->desc.kind)->name, mp_dtype_name(nd->compute_dtype), mp_dtype_name(nd->storage_dtype),
              mp_dtype_name(comp[i]), mp_dtype_name(stor[i]));
    }
    free(comp);
    free(stor);
    return bad;
}

static void expect_node(const mp_graph *g, const char *name, mp_dtype comp, mp_dtype stor, const char *what) {
    mp_node n = mp_graph_find(g, name);
    CHECK(n >= 0, "%s: no node '%s'", what, name);
    if (n < 0) return;
    CHECK(g->nodes[n].compute_dtype == comp && g->nodes[n].storage_dtype == stor,
          "%s: '%s' computes %s / stores %s, expected %s / %s", what, name, mp_dtype_name(g->nodes[n].compute_dtype),
          mp_dtype_name(g->nodes[n].storage_dtype), mp_dtype_name(comp), mp_dtype_name(stor));
}

static mp_status apply(mp_graph *g, mp_precision p, bool bn_low, const char *overrides) {
    return mp_graph_apply_policy(g, (mp_policy_opts){.precision = p, .bn_low = bn_low, .overrides = overrides});
}

/* ---- 1. the pass --------------------------------------------------------- */

static void test_precision_names(void) {
    for (int i = 0; i < MP_PRECISION_COUNT; i++) {
        mp_precision p = MP_PRECISION_COUNT;
        const char *name = mp_precision_name((mp_precision)i);
        CHECK(mp_precision_parse(name, &p) == MP_OK && p == (mp_precision)i, "parse(\"%s\") -> %d", name, (int)p);
        CHECK(strstr(mp_precision_list(), name) != NULL, "'%s' missing from the list '%s'", name, mp_precision_list());
    }
    /* what each policy implies, as the pass records it (mp_graph_policy) */
    for (int i = 0; i < MP_PRECISION_COUNT; i++) {
        mp_model m;
        MP_ASSERT(mp_model_build("small", 1, 8, 8, 4, &m) == MP_OK);
        MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = (mp_precision)i}) == MP_OK);
        mp_policy_info pi;
        CHECK(mp_graph_policy(m.g, &pi) == MP_OK && pi.precision == (mp_precision)i, "%s: policy recorded",
              mp_precision_name((mp_precision)i));
        const bool pure = i == MP_PRECISION_FP16 || i == MP_PRECISION_BF16;
        CHECK(pi.low_dtype == mp_precision_low_dtype((mp_precision)i), "%s: low dtype %s",
              mp_precision_name((mp_precision)i), mp_dtype_name(pi.low_dtype));
        CHECK(pi.master_weights == !pure, "%s: master weights", mp_precision_name((mp_precision)i));
        CHECK(pi.loss_scaling == (i == MP_PRECISION_AMP_FP16 || i == MP_PRECISION_O2_FP16), "%s: loss scaling %d",
              mp_precision_name((mp_precision)i), pi.loss_scaling);
        CHECK(pi.tf32 == (i == MP_PRECISION_TF32), "%s: tf32", mp_precision_name((mp_precision)i));
        CHECK(pi.allreduce_dtype == pi.low_dtype, "%s: all-reduce dtype %s", mp_precision_name((mp_precision)i),
              mp_dtype_name(pi.allreduce_dtype));
        for (int k = 0; k < m.g->n_nodes; k++) {
            mp_node_precision np;
            MP_ASSERT(mp_graph_node_precision(m.g, k, &np) == MP_OK);
            CHECK(np.tf32 == (pi.tf32 && np.compute == MP_DTYPE_F32), "%s: node %s tf32 %d",
                  mp_precision_name((mp_precision)i), mp_graph_node_name(m.g, k), np.tf32);
        }
        mp_model_free(&m);
    }
    mp_precision p;
    CHECK(mp_precision_parse("fp8", &p) == MP_ERR_INVALID_ARG, "unknown precision accepted");
    const char *msg = mp_last_error();
    CHECK(strstr(msg, "'fp8'") != NULL, "message names the bad value: %s", msg);
    for (int i = 0; i < MP_PRECISION_COUNT; i++)
        CHECK(strstr(msg, mp_precision_name((mp_precision)i)) != NULL, "message lists '%s': %s",
              mp_precision_name((mp_precision)i), msg);
    CHECK(mp_precision_parse("AMP-BF16", &p) == MP_ERR_INVALID_ARG, "names are lower case");
    CHECK(mp_precision_parse(NULL, &p) == MP_ERR_INVALID_ARG, "NULL name accepted");
    CHECK_ERR(mp_precision_parse("fp32", NULL), MP_ERR_INVALID_ARG, "'fp32'", "null output");
}

static void check_all_policies(mp_graph *g, const char *what) {
    for (int i = 0; i < MP_PRECISION_COUNT; i++)
        for (int bn_low = 0; bn_low < 2; bn_low++) {
            if (bn_low && i != MP_PRECISION_FP16 && i != MP_PRECISION_BF16) { /* fp16 and bf16 only */
                CHECK_ERR(apply(g, (mp_precision)i, true, NULL), MP_ERR_INVALID_ARG, "bn_low (--bn-low) applies to the "
                          "fp16 and bf16 policies only", mp_precision_name((mp_precision)i));
                continue;
            }
            mp_status s = apply(g, (mp_precision)i, bn_low, NULL);
            CHECK(s == MP_OK, "%s %s: %s", what, mp_precision_name((mp_precision)i), mp_last_error());
            if (s == MP_OK) check_against_contract(g, (mp_precision)i, bn_low, (override_t){0}, what);
        }
}

/* A hand-built graph: built without error (else destroyed, and false), and
 * under every policy each node's dtypes are the contract's. */
static bool check_built_graph(mp_graph *g, const char *what) {
    CHECK(mp_graph_status(g) == MP_OK, "%s graph: %s", what, mp_last_error());
    if (mp_graph_status(g) != MP_OK) {
        mp_graph_destroy(g);
        return false;
    }
    check_all_policies(g, what);
    return true;
}

static void test_pass_models(void) {
    mp_model m;
    mp_status s = mp_model_build("small", 1, 12, 12, 10, &m);
    CHECK(s == MP_OK, "small: %s", mp_last_error());
    if (s == MP_OK) {
        check_all_policies(m.g, "small");
        /* spot checks, spelled out */
        const mp_dtype F = MP_DTYPE_F32, H = MP_DTYPE_F16, B = MP_DTYPE_BF16, I = MP_DTYPE_I32;
        apply(m.g, MP_PRECISION_AMP_BF16, false, NULL);
        expect_node(m.g, "input", F, F, "small amp-bf16");
        expect_node(m.g, "conv1", B, B, "small amp-bf16");
        expect_node(m.g, "conv1_bn", F, B, "small amp-bf16");
        expect_node(m.g, "conv1_relu", B, B, "small amp-bf16");
        expect_node(m.g, "pool2", B, B, "small amp-bf16");
        expect_node(m.g, "flatten", B, B, "small amp-bf16");
        expect_node(m.g, "fc1", B, B, "small amp-bf16");
        expect_node(m.g, "fc2", B, F, "small amp-bf16");
        expect_node(m.g, "labels", I, I, "small amp-bf16");
        expect_node(m.g, "loss", F, F, "small amp-bf16");
        CHECK_ERR(apply(m.g, MP_PRECISION_O2_FP16, true, NULL), MP_ERR_INVALID_ARG, /* pure policies only */
                  "bn_low (--bn-low) applies to the fp16 and bf16 policies only (got o2-fp16)");
        expect_node(m.g, "input", F, F, "small amp-bf16 after a refused bn_low");
        apply(m.g, MP_PRECISION_O2_FP16, false, NULL);
        expect_node(m.g, "input", H, H, "small o2-fp16");
        expect_node(m.g, "conv2_bn", F, H, "small o2-fp16");
        expect_node(m.g, "fc2", H, F, "small o2-fp16");
        apply(m.g, MP_PRECISION_FP16, false, NULL);
        expect_node(m.g, "conv1_bn", F, H, "small fp16");
        apply(m.g, MP_PRECISION_BF16, true, NULL);
        expect_node(m.g, "conv1_bn", B, B, "small bf16 +bn_low");
        expect_node(m.g, "input", B, B, "small bf16 +bn_low");
        for (int p = MP_PRECISION_FP32; p <= MP_PRECISION_TF32; p++) {
            CHECK(apply(m.g, (mp_precision)p, true, NULL) == MP_ERR_INVALID_ARG, "%s took bn_low",
                  mp_precision_name((mp_precision)p));
            apply(m.g, (mp_precision)p, false, NULL);
            for (int i = 0; i < m.g->n_nodes; i++) {
                mp_dtype want = m.g->nodes[i].desc.kind == MP_OP_LABELS ? I : F;
                CHECK(m.g->nodes[i].compute_dtype == want && m.g->nodes[i].storage_dtype == want,
                      "small %s: '%s' is %s/%s", mp_precision_name((mp_precision)p), m.g->nodes[i].name,
                      mp_dtype_name(m.g->nodes[i].compute_dtype), mp_dtype_name(m.g->nodes[i].storage_dtype));
            }
        }
        /* mp_graph_print_precision lists every node */
        FILE *f = tmpfile();
        if (f) {
            apply(m.g, MP_PRECISION_AMP_FP16, false, NULL);
            mp_graph_print_precision(m.g, f);
            long lines = 0;
            rewind(f);
            for (int c; (c = fgetc(f)) != EOF;) lines += c == '\n';
            CHECK(lines == m.g->n_nodes + 1, "print_precision: %ld lines for %d nodes", lines, m.g->n_nodes);
            fclose(f);
        }
        mp_model_free(&m);
    }
    s = mp_model_build("cnn10", 3, 8, 8, 10, &m);
    CHECK(s == MP_OK, "cnn10: %s", mp_last_error());
    if (s == MP_OK) {
        check_all_policies(m.g, "cnn10");
        apply(m.g, MP_PRECISION_AMP_FP16, false, NULL);
        expect_node(m.g, "conv3_3", MP_DTYPE_F16, MP_DTYPE_F16, "cnn10 amp-fp16");
        expect_node(m.g, "pool2", MP_DTYPE_F16, MP_DTYPE_F16, "cnn10 amp-fp16");
        expect_node(m.g, "gap", MP_DTYPE_F16, MP_DTYPE_F16, "cnn10 amp-fp16");
        expect_node(m.g, "fc", MP_DTYPE_F16, MP_DTYPE_F32, "cnn10 amp-fp16");
        mp_model_free(&m);
    }
}

static double rel_l2(const float *a, const float *b, int n) {
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return sqrt(d) / fmax(sqrt(r), 1e-30);
}

/* One training step of a graph with the mixed graph's input, targets and
 * loss (batch 2, reference kernels): the loss and every trainable gradient,
 * concatenated. */
static bool mixed_step(mp_graph *g, float *grads, float *loss) {
    mp_node x = mp_graph_find(g, "x"), tg = mp_graph_find(g, "targets"), bce = mp_graph_find(g, "bce");
    mp_plan *p = NULL;
    mp_plan_opts po = {.batch = 2, .training = true, .loss = bce, .reference = true, .seed = 9};
    mp_status s = mp_plan_create(g, po, &p);
    float xin[2 * 3 * 8 * 8], tin[6] = {0, 1, 1, 1, 0, 0};
    mp_rng r;
    mp_rng_seed(&r, 4);
    for (size_t i = 0; i < sizeof xin / sizeof xin[0]; i++) xin[i] = (float)mp_rng_normal(&r);
    if (s == MP_OK) s = mp_plan_set_input(p, x, xin, sizeof xin / sizeof xin[0]);
    if (s == MP_OK) s = mp_plan_set_input(p, tg, tin, 6);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, bce, loss, 1);
    if (s == MP_OK) {
        mp_graph_zero_grad(g);
        s = mp_plan_backward(p, 1.0f);
    }
    CHECK(s == MP_OK, "mixed %s step: %s", mp_graph_policy_name_for_test(g), mp_last_error());
    for (int k = 0; s == MP_OK && k < g->n_params; k++) {
        const mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable) continue;
        int64_t n = mp_shape_numel(&gp->spec.shape);
        memcpy(grads, gp->grad, (size_t)n * sizeof *grads);
        grads += n;
    }
    mp_plan_destroy(p);
    return s == MP_OK;
}

/* Every policy runs a training step on g (built like build_mixed: input "x"
 * 3x8x8, "targets" 3, loss "bce"); the gradients stay close to fp32's (same
 * dropout masks: same plan seed and step). */
static void check_policy_steps(mp_graph *g, const char *what) {
    mp_graph_init_params(g, 2);
    int64_t n_grad = mp_graph_param_count(g);
    float *ref = calloc((size_t)n_grad, sizeof *ref), *got = calloc((size_t)n_grad, sizeof *got);
    MP_ASSERT(ref && got);
    float ref_loss = NAN;
    static const mp_precision pols[] = {MP_PRECISION_FP32,    MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16,
                                        MP_PRECISION_O2_BF16, MP_PRECISION_O2_FP16,  MP_PRECISION_BF16};
    for (size_t k = 0; k < sizeof pols / sizeof pols[0]; k++) {
        const char *pn = mp_precision_name(pols[k]);
        float l = NAN;
        CHECK(apply(g, pols[k], false, NULL) == MP_OK, "%s", mp_last_error());
        if (!mixed_step(g, k == 0 ? ref : got, &l)) continue;
        CHECK(isfinite(l) && l > 0, "%s %s: loss %g", what, pn, l);
        if (k == 0) {
            ref_loss = l;
            continue;
        }
        double tol = mp_precision_low_dtype(pols[k]) == MP_DTYPE_BF16 ? 2e-2 : 3e-3;
        double rel = rel_l2(got, ref, (int)n_grad);
        CHECK(rel < tol && rel > 0, "%s %s: gradients differ from fp32's by %g (relative, limit %g)", what, pn, rel,
              tol);
        CHECK(fabs(l - ref_loss) < tol * ref_loss, "%s %s: loss %g, fp32 %g", what, pn, l, ref_loss);
    }
    free(ref);
    free(got);
}

/* x -> c1 -> bn -> tanh -+-> c2 -> add(tanh, c2) -+-> concat -> convT -> dropout -> flatten -> fc -> BCE
 *  \-> sigmoid(x) ------------------------------/                              targets ------------/  */
static mp_graph *build_mixed(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 3, 8, 8);
    mp_node c1 = mp_conv2d(g, "c1", x, (mp_conv_opts){.out_channels = 4, .kernel = 3, .padding = 1, .bias = true});
    mp_node bn = mp_batchnorm2d(g, "bn", c1, (mp_batchnorm_opts){0});
    mp_node t = mp_tanh(g, "t", bn);
    mp_node c2 = mp_conv2d(g, "c2", t, (mp_conv_opts){.out_channels = 4, .kernel = 3, .padding = 1});
    mp_node sum = mp_add(g, "sum", t, c2);
    mp_node sig = mp_sigmoid(g, "sig", x);
    mp_node cat = mp_concat(g, "cat", (mp_node[]){sum, sig}, 2);
    mp_node ct = mp_conv_transpose2d(g, "ct", cat, (mp_conv_opts){.out_channels = 2, .kernel = 2, .stride = 2});
    mp_node d = mp_dropout(g, "drop", ct, 0.5f);
    mp_node f = mp_flatten(g, "flat", d);
    mp_node fc = mp_linear(g, "fc", f, (mp_linear_opts){.out_features = 3, .bias = true});
    mp_node tg = mp_graph_targets(g, "targets", 3);
    mp_node loss = mp_bce_with_logits(g, "bce", fc, tg);
    mp_graph_mark_output(g, fc);
    mp_graph_mark_output(g, loss);
    return g;
}

static void test_pass_mixed_graph(void) {
    mp_graph *g = build_mixed();
    if (!check_built_graph(g, "mixed")) return;
    const mp_dtype F = MP_DTYPE_F32, H = MP_DTYPE_F16, B = MP_DTYPE_BF16;
    /* amp: the f32 input makes sigmoid and the concat f32; the residual add is low */
    apply(g, MP_PRECISION_AMP_FP16, false, NULL);
    expect_node(g, "sig", F, F, "mixed amp-fp16");
    expect_node(g, "sum", H, H, "mixed amp-fp16");
    expect_node(g, "cat", F, F, "mixed amp-fp16");
    expect_node(g, "ct", H, H, "mixed amp-fp16");
    expect_node(g, "drop", H, H, "mixed amp-fp16");
    expect_node(g, "fc", H, F, "mixed amp-fp16");
    expect_node(g, "targets", F, F, "mixed amp-fp16");
    expect_node(g, "bce", F, F, "mixed amp-fp16");
    /* o2: everything low but BN compute, logits storage and the loss */
    apply(g, MP_PRECISION_O2_BF16, false, NULL);
    expect_node(g, "x", B, B, "mixed o2-bf16");
    expect_node(g, "sig", B, B, "mixed o2-bf16");
    expect_node(g, "cat", B, B, "mixed o2-bf16");
    expect_node(g, "bn", F, B, "mixed o2-bf16");
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "targets=bf16") == MP_ERR_INVALID_ARG,
          "override of the BCE targets accepted");
    CHECK(strstr(mp_last_error(), "'targets'"), "message names the targets: %s", mp_last_error());
    /* overrides reach transposed convs and the pointwise ops too */
    CHECK(apply(g, MP_PRECISION_AMP_FP16, false, "ct=fp32,sig=bf16") == MP_OK, "%s", mp_last_error());
    expect_node(g, "ct", F, F, "mixed amp-fp16 ct=fp32");
    expect_node(g, "sig", B, B, "mixed amp-fp16 sig=bf16");
    expect_node(g, "drop", F, F, "mixed amp-fp16 ct=fp32");
    check_policy_steps(g, "mixed");
    mp_graph_destroy(g);
}

/* mul follows its widest input, like add: low * low stays low; the network
 * input (f32 under amp) times a low node computes and stores in f32.
 * x -> c -> relu -> mul(c, relu) -> mul(x, that) -> flatten -> fc -> BCE */
static void test_pass_mul(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 3, 8, 8);
    mp_node c = mp_conv2d(g, "c", x, (mp_conv_opts){.out_channels = 3, .kernel = 3, .padding = 1, .bias = true});
    mp_node low = mp_mul(g, "low", c, mp_relu(g, "r", c));
    mp_node mixed = mp_mul(g, "mixed", x, low);
    mp_node fc = mp_linear(g, "fc", mp_flatten(g, "flat", mixed), (mp_linear_opts){.out_features = 3, .bias = true});
    mp_node loss = mp_bce_with_logits(g, "bce", fc, mp_graph_targets(g, "targets", 3));
    mp_graph_mark_output(g, fc);
    mp_graph_mark_output(g, loss);
    if (!check_built_graph(g, "mul")) return;
    const mp_dtype F = MP_DTYPE_F32, H = MP_DTYPE_F16, B = MP_DTYPE_BF16;
    apply(g, MP_PRECISION_AMP_FP16, false, NULL);
    expect_node(g, "low", H, H, "mul amp-fp16");
    expect_node(g, "mixed", F, F, "mul amp-fp16");
    apply(g, MP_PRECISION_O2_BF16, false, NULL);
    expect_node(g, "low", B, B, "mul o2-bf16");
    expect_node(g, "mixed", B, B, "mul o2-bf16");
    apply(g, MP_PRECISION_FP32, false, NULL);
    expect_node(g, "mixed", F, F, "mul fp32");
    check_policy_steps(g, "mul");
    mp_graph_destroy(g);
}

/* A node consuming the logits besides the loss (predicted probabilities):
 * once the logits are stored in f32, that node's widest input is f32. */
static void test_pass_logits_second_consumer(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 4, 4);
    mp_node f = mp_flatten(g, "flat", x);
    mp_node fc = mp_linear(g, "fc", f, (mp_linear_opts){.out_features = 3, .bias = true});
    mp_node probs = mp_sigmoid(g, "probs", fc);
    mp_node tg = mp_graph_targets(g, "targets", 3);
    mp_bce_with_logits(g, "bce", fc, tg);
    mp_graph_mark_output(g, probs);
    CHECK(mp_graph_status(g) == MP_OK, "%s", mp_last_error());
    for (int p = MP_PRECISION_AMP_FP16; p < MP_PRECISION_COUNT; p++) {
        CHECK(apply(g, (mp_precision)p, false, NULL) == MP_OK, "%s", mp_last_error());
        check_against_contract(g, (mp_precision)p, false, (override_t){0}, "logits with a second consumer");
    }
    mp_graph_destroy(g);
}

static void test_overrides(void) {
    mp_model m;
    mp_status s = mp_model_build("small", 1, 12, 12, 10, &m);
    CHECK(s == MP_OK, "small: %s", mp_last_error());
    if (s != MP_OK) return;
    mp_graph *g = m.g;
    const mp_dtype F = MP_DTYPE_F32, H = MP_DTYPE_F16, B = MP_DTYPE_BF16;

    /* fc2=fp32 changes that node only */
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "fc2=fp32") == MP_OK, "%s", mp_last_error());
    expect_node(g, "fc2", F, F, "amp-bf16 fc2=fp32");
    check_against_contract(g, MP_PRECISION_AMP_BF16, false, (override_t){"fc2", F}, "small fc2=fp32");
    /* several entries, every spelling of the dtypes */
    CHECK(apply(g, MP_PRECISION_FP32, false, "conv1=fp16,conv2=bf16,fc1=f16,fc2=f32") == MP_OK, "%s", mp_last_error());
    expect_node(g, "conv1", H, H, "fp32 conv1=fp16");
    expect_node(g, "conv2", B, B, "fp32 conv2=bf16");
    expect_node(g, "fc1", H, H, "fp32 fc1=f16");
    expect_node(g, "fc2", F, F, "fp32 fc2=f32");
    CHECK(apply(g, MP_PRECISION_O2_FP16, false, "conv1_bn=bf16") == MP_OK, "%s", mp_last_error());
    expect_node(g, "conv1_bn", B, B, "o2-fp16 conv1_bn=bf16");
    /* a fresh apply forgets earlier overrides */
    CHECK(apply(g, MP_PRECISION_FP32, false, NULL) == MP_OK, "%s", mp_last_error());
    expect_node(g, "conv1", F, F, "fp32 after overrides");
    CHECK(apply(g, MP_PRECISION_FP32, false, "") == MP_OK, "\"\" (none): %s", mp_last_error());

    /* errors name what is wrong, and leave the graph as it was */
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "fc1=fp32") == MP_OK, "%s", mp_last_error());
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "nosuch=fp32") == MP_ERR_INVALID_ARG, "unknown layer accepted");
    CHECK(strstr(mp_last_error(), "'nosuch'"), "message names the layer: %s", mp_last_error());
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "fc2=fp8") == MP_ERR_INVALID_ARG, "bad dtype accepted");
    CHECK(strstr(mp_last_error(), "'fp8'"), "message names the dtype: %s", mp_last_error());
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "fc2") == MP_ERR_INVALID_ARG, "malformed spec accepted");
    CHECK(strstr(mp_last_error(), "'fc2'") && strstr(mp_last_error(), "LAYER=DTYPE"), "message: %s", mp_last_error());
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "=fp32") == MP_ERR_INVALID_ARG, "empty layer name accepted");
    CHECK(apply(g, MP_PRECISION_AMP_BF16, false, "fc2=") == MP_ERR_INVALID_ARG, "empty dtype accepted");
    /* an empty entry anywhere, the trailing one too, is the same error; each layer once */
    static const char *const empty[] = {"fc1=fp32,,fc2=fp32", ",fc1=fp32", "fc1=fp32,", ","};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
        CHECK_ERR(apply(g, MP_PRECISION_AMP_BF16, false, empty[i]), MP_ERR_INVALID_ARG, "--precision-override '",
                  empty[i], "an empty entry");
    CHECK_ERR(apply(g, MP_PRECISION_AMP_BF16, false, "fc1=fp32,fc2=bf16,fc1=fp16"), MP_ERR_INVALID_ARG,
              "--precision-override: layer 'fc1' given twice");
    CHECK_ERR(apply(g, MP_PRECISION_AMP_BF16, false, "fc1=fp32,fc1=fp32"), MP_ERR_INVALID_ARG, "'fc1' given twice");
    CHECK(apply(g, MP_PRECISION_AMP_FP16, false, "loss=fp16") == MP_ERR_INVALID_ARG, "override of the loss accepted");
    CHECK(strstr(mp_last_error(), "'loss'"), "message names the loss: %s", mp_last_error());
    CHECK(apply(g, MP_PRECISION_AMP_FP16, false, "labels=fp32") == MP_ERR_INVALID_ARG, "override of labels accepted");
    char longname[200];
    memset(longname, 'a', 150);
    strcpy(longname + 150, "=fp32");
    CHECK(apply(g, MP_PRECISION_AMP_FP16, false, longname) == MP_ERR_INVALID_ARG, "150-char layer name accepted");
    CHECK(apply(g, MP_PRECISION_COUNT, false, NULL) == MP_ERR_INVALID_ARG, "policy out of range accepted");
    expect_node(g, "fc1", F, F, "after refused overrides");
    expect_node(g, "conv1", B, B, "after refused overrides");
    CHECK(g->policy.precision == MP_PRECISION_AMP_BF16, "refused overrides changed the graph's policy to %d",
          g->policy.precision);
    mp_model_free(&m);
}

/* An override is part of the same pass (DESIGN.md): ops after the overridden
 * node follow its dtype as their widest input. */
static void test_override_propagates(void) {
    mp_model m;
    if (mp_model_build("small", 1, 12, 12, 10, &m) != MP_OK) return;
    CHECK(apply(m.g, MP_PRECISION_AMP_BF16, false, "fc1=fp32") == MP_OK, "%s", mp_last_error());
    check_against_contract(m.g, MP_PRECISION_AMP_BF16, false, (override_t){"fc1", MP_DTYPE_F32}, "small fc1=fp32");
    CHECK(apply(m.g, MP_PRECISION_O2_BF16, false, "conv1=fp32") == MP_OK, "%s", mp_last_error());
    check_against_contract(m.g, MP_PRECISION_O2_BF16, false, (override_t){"conv1", MP_DTYPE_F32}, "small conv1=fp32");
    mp_model_free(&m);
}

/* "The final logits and loss are always fp32": an override may change the
 * dtype the logits layer computes in, not the f32 storage of the logits. */
static void test_override_keeps_logits_f32(void) {
    mp_model m;
    if (mp_model_build("small", 1, 12, 12, 10, &m) != MP_OK) return;
    CHECK(apply(m.g, MP_PRECISION_AMP_BF16, false, "fc2=bf16") == MP_OK, "%s", mp_last_error());
    expect_node(m.g, "fc2", MP_DTYPE_BF16, MP_DTYPE_F32, "amp-bf16 fc2=bf16 (logits)");
    CHECK(apply(m.g, MP_PRECISION_FP32, false, "fc2=fp16") == MP_OK, "%s", mp_last_error());
    expect_node(m.g, "fc2", MP_DTYPE_F16, MP_DTYPE_F32, "fp32 fc2=fp16 (logits)");
    mp_model_free(&m);
}

/* A plan or trainer holds the dtypes the policy gave its graph (buffers
 * sized for them): applying another while one is alive is refused, naming
 * what to destroy; once it is gone the policy applies. */
static void test_policy_with_live_plans(void) {
    mp_model m;
    MP_ASSERT(mp_model_build("small", 1, 12, 12, 10, &m) == MP_OK);
    CHECK(apply(m.g, MP_PRECISION_FP16, false, NULL) == MP_OK, "%s", mp_last_error());
    mp_plan *p = NULL, *q = NULL;
    MP_ASSERT(mp_plan_create(m.g, (mp_plan_opts){.batch = 4}, &p) == MP_OK);
    MP_ASSERT(mp_plan_create(m.g, (mp_plan_opts){.batch = 2}, &q) == MP_OK);
    CHECK_ERR(apply(m.g, MP_PRECISION_FP32, false, NULL), MP_ERR_INVALID_ARG, "2 plan(s)", "destroy the plans");
    mp_plan_destroy(p);
    CHECK_ERR(apply(m.g, MP_PRECISION_FP32, false, NULL), MP_ERR_INVALID_ARG, "1 plan(s)");
    CHECK(m.g->policy.precision == MP_PRECISION_FP16, "a refused policy changed the graph's to %d",
          m.g->policy.precision);
    mp_plan_destroy(q);
    CHECK_ERR(apply(m.g, MP_PRECISION_FP32, false, NULL), MP_OK);
    /* a plan that failed to build is not counted */
    CHECK(mp_plan_create(m.g, (mp_plan_opts){.batch = 0}, &p) != MP_OK, "batch 0 accepted");
    CHECK_ERR(apply(m.g, MP_PRECISION_FP16, false, NULL), MP_OK);
    /* a trainer owns a plan */
    mp_optimizer *o = NULL;
    MP_ASSERT(mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f}},
                                  &o) == MP_OK);
    mp_trainer *t = NULL;
    MP_ASSERT(mp_trainer_create(m.g, &(mp_trainer_opts){.batch = 4, .input = m.input, .labels = m.labels,
                                                        .loss = m.loss, .optimizer = o},
                                &t) == MP_OK);
    CHECK_ERR(apply(m.g, MP_PRECISION_FP32, false, NULL), MP_ERR_INVALID_ARG, "trainers first");
    mp_trainer_destroy(t);
    mp_optimizer_destroy(o);
    CHECK_ERR(apply(m.g, MP_PRECISION_FP32, false, NULL), MP_OK);
    mp_model_free(&m);
}

/* ---- 2. staged execution, exactly ------------------------------------------ */

enum { NB = 2, CI = 2, HW = 5, CO = 3, K = 3, FEAT = CO * HW * HW, NCLS = 4 };

typedef struct {
    mp_graph *g;
    mp_node x, conv, relu, flat, fc, labels, loss;
} tiny_net;

static tiny_net build_tiny(void) {
    tiny_net t;
    t.g = mp_graph_create();
    t.x = mp_graph_input(t.g, "x", CI, HW, HW);
    t.conv = mp_conv2d(t.g, "conv", t.x, (mp_conv_opts){.out_channels = CO, .kernel = K, .padding = 1, .bias = true});
    t.relu = mp_relu(t.g, "relu", t.conv);
    t.flat = mp_flatten(t.g, "flat", t.relu);
    t.fc = mp_linear(t.g, "fc", t.flat, (mp_linear_opts){.out_features = NCLS, .bias = true});
    t.labels = mp_graph_labels(t.g, "y");
    t.loss = mp_softmax_cross_entropy(t.g, "loss", t.fc, t.labels);
    /* keep every activation readable after the step */
    mp_graph_mark_output(t.g, t.x);
    mp_graph_mark_output(t.g, t.conv);
    mp_graph_mark_output(t.g, t.relu);
    mp_graph_mark_output(t.g, t.fc);
    mp_graph_mark_output(t.g, t.loss);
    return t;
}

typedef struct {
    float in[NB * CI * HW * HW], conv[NB * FEAT], relu[NB * FEAT], fc[NB * NCLS], loss;
    float dconv_w[CO * CI * K * K], dconv_b[CO], dfc_w[NCLS * FEAT], dfc_b[NCLS];
} tiny_run;

static const int32_t tiny_labels[NB] = {1, 3};

static bool run_tiny(tiny_net *t, const float *x, bool f32_weight_grads, tiny_run *out) {
    mp_plan *p = NULL;
    mp_plan_opts po = {.batch = NB, .training = true, .loss = t->loss, .reference = true,
                       .f32_weight_grads = f32_weight_grads};
    mp_status s = mp_plan_create(t->g, po, &p);
    CHECK(s == MP_OK, "tiny plan: %s", mp_last_error());
    if (s != MP_OK) return false;
    s = mp_plan_set_input(p, t->x, x, NB * CI * HW * HW);
    if (s == MP_OK) s = mp_plan_set_labels(p, t->labels, tiny_labels, NB);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) {
        mp_graph_zero_grad(t->g);
        s = mp_plan_backward(p, 1.0f);
    }
    if (s == MP_OK) s = mp_plan_read(p, t->x, out->in, NB * CI * HW * HW);
    if (s == MP_OK) s = mp_plan_read(p, t->conv, out->conv, NB * FEAT);
    if (s == MP_OK) s = mp_plan_read(p, t->relu, out->relu, NB * FEAT);
    if (s == MP_OK) s = mp_plan_read(p, t->fc, out->fc, NB * NCLS);
    if (s == MP_OK) s = mp_plan_read(p, t->loss, &out->loss, 1);
    CHECK(s == MP_OK, "tiny step: %s", mp_last_error());
    const mp_graph *g = t->g;
    const mp_gparam *cp = &g->params[g->nodes[t->conv].first_param], *fp = &g->params[g->nodes[t->fc].first_param];
    memcpy(out->dconv_w, cp[0].grad, sizeof out->dconv_w);
    memcpy(out->dconv_b, cp[1].grad, sizeof out->dconv_b);
    memcpy(out->dfc_w, fp[0].grad, sizeof out->dfc_w);
    memcpy(out->dfc_b, fp[1].grad, sizeof out->dfc_b);
    mp_plan_destroy(p);
    return s == MP_OK;
}

/* Count values of a stored low-precision tensor that do not round-trip. */
static int count_unrepresentable(const float *v, int n, mp_dtype dt) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !representable(v[i], dt);
    return bad;
}

static void test_staged_numerics(void) {
    tiny_net t = build_tiny();
    CHECK(mp_graph_status(t.g) == MP_OK, "tiny: %s", mp_last_error());
    if (mp_graph_status(t.g) != MP_OK) return;
    mp_graph_init_params(t.g, 7);
    mp_rng r;
    mp_rng_seed(&r, 21);
    float x[NB * CI * HW * HW];
    for (int i = 0; i < NB * CI * HW * HW; i++) x[i] = (float)mp_rng_normal(&r);
    const mp_graph *g = t.g;
    const float *cw = g->params[g->nodes[t.conv].first_param].data;     // (CO, CI, K, K)
    const float *cb = g->params[g->nodes[t.conv].first_param + 1].data; // (CO)
    const float *fw = g->params[g->nodes[t.fc].first_param].data;       // (NCLS, FEAT)
    const float *fb = g->params[g->nodes[t.fc].first_param + 1].data;   // (NCLS)

    static tiny_run ref32, run, runf, amp16;
    CHECK(apply(t.g, MP_PRECISION_FP32, false, NULL) == MP_OK, "%s", mp_last_error());
    if (!run_tiny(&t, x, false, &ref32)) goto done;

    static const mp_precision pols[3] = {MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16, MP_PRECISION_O2_FP16};
    for (int pi = 0; pi < 3; pi++) {
        const mp_precision pol = pols[pi];
        const mp_dtype low = mp_precision_low_dtype(pol);
        const char *pn = mp_precision_name(pol);
        CHECK(apply(t.g, pol, false, NULL) == MP_OK, "%s", mp_last_error());
        if (!run_tiny(&t, x, false, &run) || !run_tiny(&t, x, true, &runf)) continue;
        CHECK(!memcmp(run.fc, runf.fc, sizeof run.fc), "%s: f32_weight_grads changed the forward pass", pn);
        if (pol == MP_PRECISION_AMP_FP16) amp16 = run;

        /* input: amp keeps it f32 (exactly what was set), o2 stores it low */
        int bad = 0;
        for (int i = 0; i < NB * CI * HW * HW; i++)
            bad += run.in[i] != (pol == MP_PRECISION_O2_FP16 ? round_to(x[i], low) : x[i]);
        CHECK(bad == 0, "%s: %d input values differ from the %s input", pn, bad,
              pol == MP_PRECISION_O2_FP16 ? "rounded" : "given");

        /* conv: low inputs and weights, f32 result rounded to the low storage */
        float xr[NB * CI * HW * HW], cwr[CO * CI * K * K], cbr[CO];
        for (int i = 0; i < NB * CI * HW * HW; i++) xr[i] = round_to(x[i], low);
        for (int i = 0; i < CO * CI * K * K; i++) cwr[i] = round_to(cw[i], low);
        for (int i = 0; i < CO; i++) cbr[i] = round_to(cb[i], low);
        int bad_conv = 0, first = -1;
        double first_want = 0;
        for (int n = 0; n < NB; n++)
            for (int co = 0; co < CO; co++)
                for (int oh = 0; oh < HW; oh++)
                    for (int ow = 0; ow < HW; ow++) {
                        double acc = cbr[co];
                        for (int ci = 0; ci < CI; ci++)
                            for (int kh = 0; kh < K; kh++)
                                for (int kw = 0; kw < K; kw++) {
                                    int ih = oh + kh - 1, iw = ow + kw - 1;
                                    if (ih < 0 || ih >= HW || iw < 0 || iw >= HW) continue;
                                    acc += (double)cwr[((co * CI + ci) * K + kh) * K + kw] *
                                           xr[((n * CI + ci) * HW + ih) * HW + iw];
                                }
                        int i = ((n * CO + co) * HW + oh) * HW + ow;
                        if (!equals_rounded(run.conv[i], acc, low)) {
                            if (first < 0) first = i, first_want = round_to(acc, low);
                            bad_conv++;
                        }
                    }
        CHECK(bad_conv == 0, "%s: %d conv outputs differ from the emulation (first [%d]: %.9g, expected %.9g)", pn,
              bad_conv, first, first >= 0 ? run.conv[first] : 0.0, first_want);
        CHECK(count_unrepresentable(run.conv, NB * FEAT, low) == 0, "%s: conv output not representable in %s", pn,
              mp_dtype_name(low));

        /* relu of the stored conv output, stored low: exact */
        bad = 0;
        for (int i = 0; i < NB * FEAT; i++) bad += run.relu[i] != (run.conv[i] > 0 ? run.conv[i] : 0.0f);
        CHECK(bad == 0, "%s: %d relu outputs are not relu(conv)", pn, bad);
        CHECK(count_unrepresentable(run.relu, NB * FEAT, low) == 0, "%s: relu output not representable", pn);

        /* fc (logits): low weights and inputs, f32 accumulation, stored f32 (not rounded) */
        float fwr[NCLS * FEAT], fbr[NCLS];
        for (int i = 0; i < NCLS * FEAT; i++) fwr[i] = round_to(fw[i], low);
        for (int i = 0; i < NCLS; i++) fbr[i] = round_to(fb[i], low);
        double worst = 0;
        for (int n = 0; n < NB; n++)
            for (int o = 0; o < NCLS; o++) {
                double acc = fbr[o], mag = fabs(fbr[o]);
                for (int f = 0; f < FEAT; f++) {
                    acc += (double)fwr[o * FEAT + f] * run.relu[n * FEAT + f];
                    mag += fabs((double)fwr[o * FEAT + f] * run.relu[n * FEAT + f]);
                }
                worst = fmax(worst, fabs(run.fc[n * NCLS + o] - acc) / fmax(mag, 1e-30));
            }
        CHECK(worst < 1e-6, "%s: logits differ from the emulation by %g (relative)", pn, worst);
        CHECK(count_unrepresentable(run.fc, NB * NCLS, low) > 0, "%s: all %d logits are %s values: rounded, not f32",
              pn, NB * NCLS, mp_dtype_name(low));

        /* loss: f32 softmax CE of the f32 logits */
        double loss = 0, prob[NB * NCLS];
        for (int n = 0; n < NB; n++) {
            const float *l = run.fc + n * NCLS;
            double m = l[0], se = 0;
            for (int k = 1; k < NCLS; k++) m = fmax(m, l[k]);
            for (int k = 0; k < NCLS; k++) se += exp(l[k] - m);
            for (int k = 0; k < NCLS; k++) prob[n * NCLS + k] = (float)exp(l[k] - m - log(se));
            loss += (m + log(se) - l[tiny_labels[n]]) / NB;
        }
        CHECK(fabs(run.loss - loss) <= 1e-6 * fabs(loss), "%s: loss %.9g, expected %.9g", pn, run.loss, loss);

        /* backward: d(logits) f32; every gradient a low-compute node makes is
         * rounded to the compute dtype (parameter grads stored f32), except,
         * under f32_weight_grads (runf), parameter gradients: f32 sums */
        float dlog[NB * NCLS], dconv[NB * FEAT];
        for (int n = 0; n < NB; n++)
            for (int k = 0; k < NCLS; k++)
                dlog[n * NCLS + k] = (float)((prob[n * NCLS + k] - (k == tiny_labels[n])) / NB);
        for (int n = 0; n < NB; n++)
            for (int f = 0; f < FEAT; f++) {
                double dx = 0;
                for (int o = 0; o < NCLS; o++) dx += (double)dlog[n * NCLS + o] * fwr[o * FEAT + f];
                /* stored low by fc, passed through flatten; relu masks by its output */
                float d = round_to(dx, low);
                dconv[n * FEAT + f] = run.relu[n * FEAT + f] > 0 ? d : 0.0f;
            }
        for (int mode = 0; mode < 2; mode++) {
            const bool unrounded = mode == 1;
            const tiny_run *r = unrounded ? &runf : &run;
            const char *how = unrounded ? " (f32_weight_grads)" : "";
            int bad_fc = 0;
            for (int o = 0; o < NCLS; o++) {
                double db = 0, mb = 0;
                for (int n = 0; n < NB; n++) db += dlog[n * NCLS + o], mb += fabs(dlog[n * NCLS + o]);
                bad_fc += !grad_equals(r->dfc_b[o], db, mb, low, unrounded);
                for (int f = 0; f < FEAT; f++) {
                    double dw = 0, mw = 0;
                    for (int n = 0; n < NB; n++) {
                        const double term = (double)dlog[n * NCLS + o] * run.relu[n * FEAT + f];
                        dw += term, mw += fabs(term);
                    }
                    bad_fc += !grad_equals(r->dfc_w[o * FEAT + f], dw, mw, low, unrounded);
                }
            }
            CHECK(bad_fc == 0, "%s%s: %d fc parameter gradients differ from the emulation", pn, how, bad_fc);
            int bad_w = 0, first_w = -1;
            double first_w_want = 0;
            for (int co = 0; co < CO; co++) {
                double db = 0, mb = 0;
                for (int i = 0; i < NB * HW * HW; i++) {
                    const float d = dconv[(i / (HW * HW) * CO + co) * HW * HW + i % (HW * HW)];
                    db += d, mb += fabs(d);
                }
                bad_w += !grad_equals(r->dconv_b[co], db, mb, low, unrounded);
                for (int ci = 0; ci < CI; ci++)
                    for (int kh = 0; kh < K; kh++)
                        for (int kw = 0; kw < K; kw++) {
                            double dw = 0, mw = 0;
                            for (int n = 0; n < NB; n++)
                                for (int oh = 0; oh < HW; oh++)
                                    for (int ow = 0; ow < HW; ow++) {
                                        int ih = oh + kh - 1, iw = ow + kw - 1;
                                        if (ih < 0 || ih >= HW || iw < 0 || iw >= HW) continue;
                                        const double term = (double)dconv[((n * CO + co) * HW + oh) * HW + ow] *
                                                            xr[((n * CI + ci) * HW + ih) * HW + iw];
                                        dw += term, mw += fabs(term);
                                    }
                            int i = ((co * CI + ci) * K + kh) * K + kw;
                            if (!grad_equals(r->dconv_w[i], dw, mw, low, unrounded)) {
                                if (first_w < 0) first_w = i, first_w_want = unrounded ? dw : round_to(dw, low);
                                bad_w++;
                            }
                        }
            }
            CHECK(bad_w == 0,
                  "%s%s: %d conv parameter gradients differ from the emulation (first weight [%d]: %.9g, expected "
                  "%.9g)", pn, how, bad_w, first_w, first_w >= 0 ? r->dconv_w[first_w] : 0.0, first_w_want);
            const int not_low = count_unrepresentable(r->dconv_w, CO * CI * K * K, low) +
                                count_unrepresentable(r->dfc_w, NCLS * FEAT, low);
            if (unrounded)
                CHECK(not_low > 0, "%s%s: every conv and fc weight gradient is a %s value: rounded, not f32 sums", pn,
                      how, mp_dtype_name(low));
            else
                CHECK(not_low + count_unrepresentable(r->dconv_b, CO, low) == 0,
                      "%s: parameter gradients not rounded to %s", pn, mp_dtype_name(low));
        }

        /* and close to the fp32 policy */
        double tol = low == MP_DTYPE_BF16 ? 2e-2 : 2e-3;
        double dw_rel = rel_l2(run.dconv_w, ref32.dconv_w, CO * CI * K * K);
        double out_rel = rel_l2(run.fc, ref32.fc, NB * NCLS);
        CHECK(dw_rel < tol, "%s: conv weight gradient differs from fp32's by %g (relative, limit %g)", pn, dw_rel, tol);
        CHECK(out_rel < tol, "%s: logits differ from fp32's by %g (relative, limit %g)", pn, out_rel, tol);
        CHECK(dw_rel > 0, "%s: conv weight gradient identical to fp32's: nothing ran in low precision", pn);

        /* o2 rounds the input when it is set, amp at the conv: the same numbers */
        if (pol == MP_PRECISION_O2_FP16) {
            CHECK(!memcmp(run.conv, amp16.conv, sizeof run.conv) && !memcmp(run.fc, amp16.fc, sizeof run.fc) &&
                      !memcmp(run.dconv_w, amp16.dconv_w, sizeof run.dconv_w),
                  "o2-fp16 and amp-fp16 differ on this graph");
        }
    }
    /* pure bf16, even with f32_weight_grads: no fp32 master, so the weight gradients are bf16 values like the
     * weights */
    CHECK(apply(t.g, MP_PRECISION_BF16, false, NULL) == MP_OK, "%s", mp_last_error());
    if (run_tiny(&t, x, true, &run)) {
        const int not_bf16 = count_unrepresentable(run.dconv_w, CO * CI * K * K, MP_DTYPE_BF16) +
                             count_unrepresentable(run.dfc_w, NCLS * FEAT, MP_DTYPE_BF16);
        CHECK(not_bf16 == 0, "bf16 with f32_weight_grads: %d weight gradients are not bf16 values", not_bf16);
    }
done:
    mp_graph_destroy(t.g);
}

/* ---- 3. fp16 overflow -------------------------------------------------------- */

/* Under fp16/bf16 (no fp32 masters) a parameter lives in the low dtype: a
 * finite value it cannot hold (70000 > 65504 in f16) is refused by the
 * weights loader and param_set, naming the tensor, element and dtype, and
 * nothing changes; bf16 holds 70000. */
/* A weight set under fp32 that a pure fp16 policy applied afterwards cannot
 * hold: the trainer refuses it by name instead of training on inf; an
 * mp_precision outside the enum (negative too) is refused. */
static void test_trainer_checks_low_weights(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 2, 2), y = mp_graph_labels(g, "y");
    mp_node logits = mp_linear(g, "fc", mp_flatten(g, "f", x), (mp_linear_opts){.out_features = 2});
    mp_node loss = mp_softmax_cross_entropy(g, "loss", logits, y);
    mp_graph_init_params(g, 1);
    CHECK_ERR(mp_graph_apply_policy(g, (mp_policy_opts){.precision = (mp_precision)-1}), MP_ERR_INVALID_ARG,
              "unknown policy -1");
    const float big[8] = {1, 70000.0f, 1, 1, 1, 1, 1, 1};
    CHECK_ERR(mp_graph_param_set(g, "fc.weight", big, 8), MP_OK);
    CHECK_ERR(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_FP16}), MP_OK);
    mp_optimizer *o = NULL;
    MP_ASSERT(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f}},
                                  &o) == MP_OK);
    mp_trainer *t = NULL;
    CHECK_ERR(mp_trainer_create(g, &(mp_trainer_opts){.batch = 2, .input = x, .labels = y, .loss = loss,
                                                       .optimizer = o},
                                &t),
              MP_ERR_NONFINITE, "trainer", "'fc.weight'", "element 1", "f16");
    CHECK(t == NULL, "no trainer on a weight f16 cannot hold");
    mp_optimizer_destroy(o);
    mp_graph_destroy(g);
}

static void test_weights_out_of_range(void) {
    char dir[4096];
    scratch_dir_create(dir, sizeof dir, "test_policy");
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 2, 2);
    mp_graph_mark_output(g, mp_linear(g, "fc", mp_flatten(g, "f", x), (mp_linear_opts){.out_features = 1}));
    mp_graph_init_params(g, 1);
    float big[4] = {1.0f, 70000.0f, 1.0f, 1.0f}, before[4], after[4];
    CHECK_ERR(mp_graph_param_set(g, "fc.weight", big, 4), MP_OK); /* fp32: fine */
    const char *path = scratch_path(dir, "big.safetensors");
    CHECK_ERR(mp_graph_save_weights(g, path), MP_OK);
    const float small[4] = {0.5f, 0.25f, 0.125f, 2.0f};
    CHECK_ERR(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_FP16}), MP_OK);
    CHECK_ERR(mp_graph_param_set(g, "fc.weight", small, 4), MP_OK);
    MP_ASSERT(mp_graph_param_get(g, "fc.weight", before, 4) == MP_OK);
    CHECK_ERR(mp_graph_load_weights(g, path, NULL), MP_ERR_NONFINITE, "big.safetensors", "'fc.weight'", "70000",
              "element 1", "f16");
    CHECK_ERR(mp_graph_param_set(g, "fc.weight", big, 4), MP_ERR_NONFINITE, "param_set", "'fc.weight'", "element 1",
              "f16");
    MP_ASSERT(mp_graph_param_get(g, "fc.weight", after, 4) == MP_OK);
    CHECK(!memcmp(before, after, sizeof after), "a refused weight changed fc.weight: %g", (double)after[1]);
    CHECK_ERR(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_BF16}), MP_OK);
    CHECK_ERR(mp_graph_load_weights(g, path, NULL), MP_OK);
    MP_ASSERT(mp_graph_param_get(g, "fc.weight", after, 4) == MP_OK);
    CHECK(after[1] == round_to(70000.0, MP_DTYPE_BF16), "bf16 fc.weight[1] = %g", (double)after[1]);
    mp_graph_destroy(g);
    scratch_dir_remove(dir);
}

static void test_fp16_overflow(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 1, 1, 1);
    mp_node f = mp_flatten(g, "flat", x);
    mp_node big = mp_linear(g, "big", f, (mp_linear_opts){.out_features = 4});
    mp_graph_mark_output(g, big);
    CHECK(mp_graph_status(g) == MP_OK, "%s", mp_last_error());
    mp_graph_init_params(g, 1);
    float *w = g->params[g->nodes[big].first_param].data; // (4, 1)
    /* every weight and the input are exact in fp16 and bf16 */
    w[0] = 70.0f;  /* 70000: past fp16's 65504 -> +inf */
    w[1] = 65.5f;  /* 65500: rounds to 65504, finite */
    w[2] = -70.0f; /* -70000 -> -inf */
    w[3] = 1.0f;
    const float in = 1000.0f;
    static const struct {
        mp_precision p;
        const char *ov;
    } runs[] = {{MP_PRECISION_AMP_FP16, NULL}, {MP_PRECISION_O2_FP16, NULL}, {MP_PRECISION_FP16, NULL},
                {MP_PRECISION_AMP_BF16, NULL}, {MP_PRECISION_AMP_FP16, "big=fp32"}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        const char *pn = mp_precision_name(runs[k].p);
        CHECK(apply(g, runs[k].p, false, runs[k].ov) == MP_OK, "%s", mp_last_error());
        mp_plan *p = NULL;
        mp_status s = mp_plan_create(g, (mp_plan_opts){.batch = 1, .reference = true}, &p);
        CHECK(s == MP_OK, "%s: %s", pn, mp_last_error());
        if (s != MP_OK) continue;
        float y[4] = {0};
        CHECK(mp_plan_set_input(p, x, &in, 1) == MP_OK && mp_plan_forward(p) == MP_OK &&
                  mp_plan_read(p, big, y, 4) == MP_OK,
              "%s: %s", pn, mp_last_error());
        if (runs[k].ov) {
            CHECK(y[0] == 70000.0f && y[1] == 65500.0f && y[2] == -70000.0f && y[3] == 1000.0f,
                  "%s big=fp32: %g %g %g %g, expected exact f32 values", pn, y[0], y[1], y[2], y[3]);
        } else if (mp_precision_low_dtype(runs[k].p) == MP_DTYPE_F16) {
            CHECK(isinf(y[0]) && y[0] > 0, "%s: 70000 stored in fp16 reads %g, expected +inf", pn, y[0]);
            CHECK(y[1] == 65504.0f, "%s: 65500 stored in fp16 reads %g, expected 65504", pn, y[1]);
            CHECK(isinf(y[2]) && y[2] < 0, "%s: -70000 stored in fp16 reads %g, expected -inf", pn, y[2]);
            CHECK(y[3] == 1000.0f, "%s: 1000 reads %g", pn, y[3]);
        } else {
            for (int i = 0; i < 4; i++)
                CHECK(isfinite(y[i]) && y[i] == round_to((double)w[i] * in, MP_DTYPE_BF16),
                      "%s: output %d reads %g, expected %g", pn, i, y[i], round_to((double)w[i] * in, MP_DTYPE_BF16));
        }
        mp_plan_destroy(p);
    }
    mp_graph_destroy(g);
}

/* ---- 4. training smoke test ---------------------------------------------------- */

static void test_training(void) {
    mp_dataset all = {0}, train = {0}, test = {0};
    mp_status s = mp_dataset_synthetic(800, 1, 12, 12, 10, 3, &all);
    if (s == MP_OK) s = mp_dataset_slice(&all, 0, 640, &train);
    if (s == MP_OK) s = mp_dataset_slice(&all, 640, 160, &test);
    mp_dataset_free(&all);
    CHECK(s == MP_OK, "synthetic data: %s", mp_last_error());
    static const mp_precision pols[4] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16,
                                         MP_PRECISION_O2_BF16};
    double loss[4] = {0};
    for (int i = 0; s == MP_OK && i < 4; i++) {
        const char *pn = mp_precision_name(pols[i]);
        mp_model m;
        s = mp_model_build("small", 1, 12, 12, 10, &m);
        if (s == MP_OK) s = apply(m.g, pols[i], false, NULL);
        /* the policy's default loss scaling: dynamic for amp-fp16 */
        mp_fit_opts o = {.model_name = "small", .data_name = "synthetic", .epochs = 2, .trainer = {.batch = 32},
                         .lr = 0.002f, .optim = {.kind = MP_OPTIM_ADAM}, .lr_schedule = "cosine", .seed = 1,
                         .normalize = true};
        mp_fit_result res;
        if (s == MP_OK) s = mp_fit(&m, &train, &test, &o, &res);
        CHECK(s == MP_OK, "train %s: %s", pn, mp_last_error());
        if (s == MP_OK) {
            CHECK(res.epochs_run == 2, "%s: %d epochs run", pn, res.epochs_run);
            CHECK(res.test_acc >= 0.9, "%s: test accuracy %.4f after 2 epochs (train loss %.4f)", pn, res.test_acc,
                  res.train_loss);
            CHECK(isfinite(res.train_loss), "%s: train loss %g", pn, res.train_loss);
            loss[i] = res.train_loss;
        }
        mp_model_free(&m);
    }
    for (int i = 1; s == MP_OK && i < 3; i++)
        CHECK(fabs(loss[i] - loss[0]) <= 0.1 * loss[0],
              "%s: final train loss %.4f vs fp32's %.4f (more than 10%% apart)",
              mp_precision_name(pols[i]), loss[i], loss[0]);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
}

int main(void) {
    test_precision_names();
    test_pass_models();
    test_pass_mixed_graph();
    test_pass_mul();
    test_pass_logits_second_consumer();
    test_overrides();
    test_override_propagates();
    test_override_keeps_logits_f32();
    test_policy_with_live_plans();
    test_trainer_checks_low_weights();
    test_staged_numerics();
    test_fp16_overflow();
    test_weights_out_of_range();
    test_training();
    return test_summary("test_policy");
}
