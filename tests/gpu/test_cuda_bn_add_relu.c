/* test_cuda_bn_add_relu.c — batch norm + residual add (+ ReLU) fused into
 * one pass each way on the GPU (graph/plan_fuse.h,
 * mp_plan_opts.no_bn_add_relu_fusion) against the same plan unfused and the
 * CPU:
 *  - resnet18 (3x3 convs, stride-2 blocks with 1x1 projection shortcuts,
 *    channels multiples of 8: cuDNN's BN_ADD_ACTIVATION kernels in f16 and
 *    bf16 where timed faster, else our 16-byte kernels; scripts/gpu-check
 *    also runs it with ours forced, fast and general) and a small residual
 *    net of 20/40 channels (20: the scalar kernels; 40: the fast ones in
 *    f16/bf16) whose residual has a consumer after the add, so
 *    the fused backward adds to a gradient already written, and two
 *    block tails with an add and no ReLU (MobileNetV2's): at 20 channels,
 *    its residual read again after it (the scalar kernels, adding to the
 *    residual's gradient), and at 40 (the fast ones, writing it);
 *  - amp-bf16, amp-fp16, bf16 and fp16: every add of a block tail fused; one
 *    training step: the loss and the gradients of every parameter as close
 *    to the fp32 CPU oracle as test_cuda_plan asks, and to the unfused GPU
 *    plan's; the running statistics after it (f32 sums) as the unfused
 *    plan's and the CPU's; then an inference plan (running statistics in the
 *    fused pass) whose logits match the unfused plan's and the CPU's (the
 *    CPU references keep the three apart; CPU plans' own fusion is
 *    test_bn_add_cpu's);
 *  - overflow provenance: a residual's fp16 gradient that overflows where
 *    the fused backward adds to it is named as the add's, as the unfused
 *    GPU plan and the CPU name it (mp_plan_backward_checked); a sum of two
 *    finite fp16 values that overflows in the fused forward is named as the
 *    add's output, with and without a ReLU after it, as unfused
 *    (mp_plan_find_nonfinite_forward).
 * Needs a GPU: one clear line and exit 2 without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "graph/plan.h"
#include "models/models.h"
#include "resblocks_net.h"

enum { B = 8, MAX_PARAMS = 256 };

typedef struct {
    const char *model; /* a zoo model, or "resblocks" (built here) */
    int c, h, w;
    int fused_adds; /* adds every fused plan must fuse */
} model_case;

static mp_model build(const model_case *mc, mp_precision prec) {
    mp_model m;
    if (!strcmp(mc->model, "resblocks")) {
        memset(&m, 0, sizeof m);
        m.g = mp_graph_create();
        MP_ASSERT(m.g && resblocks(&m, mc->c, mc->h, mc->w, 10) == MP_OK);
    } else {
        MP_ASSERT(mp_model_build(mc->model, mc->c, mc->h, mc->w, 10, &m) == MP_OK);
    }
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 5);
    return m;
}

/* ||a_k - b_k|| / ||b_k|| over the selected values of every parameter k
 * (grads: trainable gradients; else: the non-trainable values, the running
 * statistics); worst: the largest single-parameter ratio, named. */
static double diff(const mp_graph *a, const mp_graph *b, bool grads, double *worst, char *wname, size_t wlen) {
    double d2 = 0, r2 = 0;
    *worst = 0;
    for (int k = 0; k < b->n_params; k++) {
        const mp_gparam *pa = &a->params[k], *pb = &b->params[k];
        if (pb->spec.trainable != grads) continue;
        const float *va = grads ? pa->grad : pa->data, *vb = grads ? pb->grad : pb->data;
        double pd2 = 0, pr2 = 0;
        for (int64_t i = 0; i < mp_shape_numel(&pb->spec.shape); i++) {
            const double e = (double)va[i] - vb[i];
            pd2 += e * e;
            pr2 += (double)vb[i] * vb[i];
        }
        d2 += pd2, r2 += pr2;
        const double rel = sqrt(pd2 / (pr2 > 1e-30 ? pr2 : 1e-30));
        if (pr2 > 1e-20 && rel > *worst) {
            *worst = rel;
            snprintf(wname, wlen, "%s", pb->name);
        }
    }
    return sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
}

static void make_batch(mp_rng *r, float *x, size_t n, int32_t *y) {
    for (size_t i = 0; i < n; i++) x[i] = (float)mp_rng_normal(r);
    for (int i = 0; i < B; i++) y[i] = (int32_t)mp_rng_below(r, 10);
}

/* One training forward + backward; host gradients and parameters (running
 * statistics moved) afterwards. gpu: on the GPU, fused or not. */
static mp_status train_step(mp_model *m, bool gpu, bool fused, mp_precision prec, const float *x, size_t n,
                            const int32_t *y, float *loss, int *n_fused) {
    const bool pure = prec == MP_PRECISION_FP16 || prec == MP_PRECISION_BF16;
    mp_plan_opts o = {.batch = B, .training = true, .loss = m->loss, .no_bn_add_relu_fusion = !fused};
    if (gpu) {
        o.device = (mp_device){MP_DEVICE_CUDA, 0};
        o.grads_in_arena = true;
        o.low_grads = pure;
    }
    mp_plan *p = NULL;
    MP_TRY(mp_plan_create(m->g, o, &p));
    *n_fused = 0;
    for (int i = 0; i < p->n; i++) *n_fused += p->nodes[i].add_fused != 0;
    mp_status s = mp_plan_set_input(p, m->input, x, n);
    if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, m->loss, loss, 1);
    mp_graph_zero_grad(m->g);
    if (s == MP_OK) s = mp_plan_backward(p, 1.0f);
    if (s == MP_OK && gpu) s = mp_plan_sync_params(p, true);
    mp_plan_destroy(p);
    return s;
}

/* Inference (running statistics) logits into out (B x 10). */
static mp_status eval_logits(mp_model *m, bool gpu, bool fused, const float *x, size_t n, const int32_t *y,
                             float *out, int *n_fused) {
    mp_plan_opts o = {.batch = B, .training = false, .loss = m->loss, .no_bn_add_relu_fusion = !fused};
    if (gpu) o.device = (mp_device){MP_DEVICE_CUDA, 0};
    mp_plan *p = NULL;
    MP_TRY(mp_plan_create(m->g, o, &p));
    *n_fused = 0;
    for (int i = 0; i < p->n; i++) *n_fused += p->nodes[i].add_fused != 0;
    mp_status s = mp_plan_set_input(p, m->input, x, n);
    if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, m->logits, out, (size_t)B * 10);
    mp_plan_destroy(p);
    return s;
}

static double vec_diff(const float *a, const float *b, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r2 += (double)b[i] * b[i];
    return sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
}

static void one_case(const model_case *mc, mp_precision prec) {
    const char *pn = mp_precision_name(prec);
    mp_model fused = build(mc, prec), plain = build(mc, prec), cpu = build(mc, prec),
             oracle = build(mc, MP_PRECISION_FP32);
    const size_t n = (size_t)B * mc->c * mc->h * mc->w;
    float *x = malloc(n * sizeof *x);
    int32_t y[B];
    mp_rng r;
    mp_rng_seed(&r, 11);
    make_batch(&r, x, n, y);
    float lf = 0, lp = 0, lc = 0, lo = 0;
    int nf = 0, np = 0, nc = 0, no = 0;
    mp_status s = train_step(&fused, true, true, prec, x, n, y, &lf, &nf);
    CHECK(s == MP_OK, "%s %s: fused GPU step: %s", mc->model, pn, mp_last_error());
    mp_status s2 = train_step(&plain, true, false, prec, x, n, y, &lp, &np);
    CHECK(s2 == MP_OK, "%s %s: unfused GPU step: %s", mc->model, pn, mp_last_error());
    /* the CPU references keep the three apart (CPU plans fuse them too: test_bn_add_cpu) */
    MP_ASSERT(train_step(&cpu, false, false, prec, x, n, y, &lc, &nc) == MP_OK);
    MP_ASSERT(train_step(&oracle, false, false, MP_PRECISION_FP32, x, n, y, &lo, &no) == MP_OK);
    const bool no_fusion = mp_env_get()->no_fusion || mp_env_get()->no_bn_add_relu_fusion;
    CHECK(nf == (no_fusion ? 0 : mc->fused_adds), "%s %s: %d adds fused, want %d", mc->model, pn, nf,
          no_fusion ? 0 : mc->fused_adds);
    CHECK(np == 0, "%s %s: %d adds fused in the plan told not to fuse", mc->model, pn, np);
    CHECK(nc == 0 && no == 0, "%s %s: the CPU references, told not to, fused %d/%d adds", mc->model, pn, nc, no);
    if (s == MP_OK && s2 == MP_OK) {
        char w1[128] = "-", w2[128] = "-", w3[128] = "-", w4[128] = "-";
        double pw1, pw2, pw3, pw4;
        const double e_f = diff(fused.g, oracle.g, true, &pw1, w1, sizeof w1);
        const double e_p = diff(plain.g, oracle.g, true, &pw2, w2, sizeof w2);
        const double e_c = diff(cpu.g, oracle.g, true, &pw3, w3, sizeof w3);
        const double e_fp = diff(fused.g, plain.g, true, &pw4, w4, sizeof w4);
        double sw1, sw2;
        char s1[128] = "-", s2n[128] = "-";
        const double st_fp = diff(fused.g, plain.g, false, &sw1, s1, sizeof s1);
        const double st_fc = diff(fused.g, cpu.g, false, &sw2, s2n, sizeof s2n);
        const double tol = 2 * e_c + 2e-2;
        printf("%-9s %-8s fused %d: loss fused %.6f unfused %.6f cpu %.6f oracle %.6f; gradients vs the fp32 oracle: "
               "fused %.2e unfused %.2e cpu emulation %.2e (tolerance %.2e); fused vs unfused %.2e (worst %s "
               "%.2e); running stats fused vs unfused %.2e (worst %s), vs cpu %.2e (worst %s %.2e)\n",
               mc->model, pn, nf, lf, lp, lc, lo, e_f, e_p, e_c, tol, e_fp, w4, pw4, st_fp, s1, st_fc, s2n, sw2);
        /* fused and unfused round at different places: in bf16 within half a
         * relative spacing (2^-8, the round-to-nearest bound; 2.6e-3 measured
         * on cuDNN's kernels), in f16 1e-3 */
        const float loss_tol = prec == MP_PRECISION_AMP_BF16 || prec == MP_PRECISION_BF16 ? 0x1p-8f : 1e-3f;
        CHECK(fabsf(lf - lp) <= loss_tol * fabsf(lp) + 1e-5f, "%s %s: loss fused %g, unfused %g (tolerance %g)",
              mc->model, pn, lf, lp, (double)loss_tol);
        CHECK(fabsf(lf - lc) <= 1e-2f * fabsf(lc), "%s %s: loss fused %g, cpu %g", mc->model, pn, lf, lc);
        CHECK(e_f <= tol, "%s %s: fused gradients %.3e from the oracle (tolerance %.3e; worst %s %.3e)", mc->model,
              pn, e_f, tol, w1, pw1);
        /* the same values but for summation orders and ReLU flips they cause */
        CHECK(e_fp <= 0.5 * tol, "%s %s: fused gradients %.3e from the unfused GPU's (worst %s %.3e)", mc->model, pn,
              e_fp, w4, pw4);
        CHECK(pw4 <= tol, "%s %s: parameter %s: fused gradient %.3e from the unfused GPU's", mc->model, pn, w4, pw4);
        CHECK(st_fp <= 1e-3, "%s %s: running statistics %.3e from the unfused GPU's (worst %s)", mc->model, pn, st_fp,
              s1);
        CHECK(st_fc <= 2e-2 && sw2 <= 5e-2, "%s %s: running statistics %.3e from the CPU's (worst %s %.3e)", mc->model,
              pn, st_fc, s2n, sw2);
        /* inference: every graph now holds its own moved running statistics */
        float *zf = malloc((size_t)B * 10 * sizeof *zf), *zp = malloc((size_t)B * 10 * sizeof *zp),
              *zc = malloc((size_t)B * 10 * sizeof *zc);
        int ef = 0, ep = 0, ec = 0;
        s = eval_logits(&fused, true, true, x, n, y, zf, &ef);
        CHECK(s == MP_OK, "%s %s: fused GPU inference: %s", mc->model, pn, mp_last_error());
        s2 = eval_logits(&plain, true, false, x, n, y, zp, &ep);
        CHECK(s2 == MP_OK, "%s %s: unfused GPU inference: %s", mc->model, pn, mp_last_error());
        MP_ASSERT(eval_logits(&cpu, false, false, x, n, y, zc, &ec) == MP_OK);
        CHECK(ef == (no_fusion ? 0 : mc->fused_adds), "%s %s inference: %d adds fused", mc->model, pn, ef);
        CHECK(ec == 0, "%s %s inference: the CPU reference, told not to, fused %d adds", mc->model, pn, ec);
        if (s == MP_OK && s2 == MP_OK) {
            const double d_fp = vec_diff(zf, zp, (size_t)B * 10), d_fc = vec_diff(zf, zc, (size_t)B * 10);
            printf("%-9s %-8s inference logits: fused vs unfused %.2e, vs cpu emulation %.2e\n", mc->model, pn, d_fp,
                   d_fc);
            CHECK(d_fp <= 1e-2, "%s %s: inference logits %.3e from the unfused GPU's", mc->model, pn, d_fp);
            CHECK(d_fc <= 5e-2, "%s %s: inference logits %.3e from the CPU's", mc->model, pn, d_fc);
        }
        free(zf), free(zp), free(zc);
    }
    free(x);
    mp_model_free(&fused);
    mp_model_free(&plain);
    mp_model_free(&cpu);
    mp_model_free(&oracle);
}

/* input (4 x 1 x 1) -> 1x1 conv r_conv (8 channels, no bias) -> [1x1 conv
 * a + BN a_bn] + r = s_add (ReLU s_relu after it when relu) -> + r = t_add
 * -> gap -> fc (no bias), in amp-fp16, one training forward; then
 *  - backward (forward false): a zero input (every activation 0, the
 *    softmax uniform), labels 0, fc's class-0 row -1 and the rest 0, and a
 *    checked backward seeded with SEED gives t, s and r each the gradient
 *    v = 0.1125 SEED (< 65504 in fp16), so r's gradient, written v by t and
 *    then added v by s, is the first to overflow (the CPU names s_add's
 *    input 1 for seeds 3e5 to 5e5; the batch norm's dx is 0, its parameter
 *    gradients f32);
 *  - forward: every input 1, r_conv's filter 1e4 (r = 40000), a's filter 0
 *    and a_bn's beta 40000 (a = 40000): a and r finite in fp16, their sum,
 *    80000, not; the forward's replay names s_add's output.
 * site and name (its node's, or "nothing"): what the search found;
 * *was_fused: the plan fused a_bn with s_add; running: a_bn's running mean
 * and variance after it (the forward's and the replay's updates). */
#define OVERFLOW_SEED 4e5f

static void overflow_site(mp_device dev, bool fused, bool relu, bool forward, mp_nonfinite_site *site, char *name,
                          size_t name_len, bool *was_fused, float running[16]) {
    mp_model m;
    memset(&m, 0, sizeof m);
    memset(site, 0, sizeof *site);
    snprintf(name, name_len, "nothing");
    *was_fused = false;
    mp_graph *g = m.g = mp_graph_create();
    MP_ASSERT(g);
    mp_node x = m.input = mp_graph_input(g, "input", 4, 1, 1);
    mp_node r = mp_conv2d(g, "r_conv", x, (mp_conv_opts){.out_channels = 8, .kernel = 1});
    mp_node a = mp_conv_bn(g, "a", r, (mp_conv_opts){.out_channels = 8, .kernel = 1});
    mp_node s = mp_add(g, "s_add", a, r);
    mp_node y = mp_global_avgpool(g, "gap", mp_add(g, "t_add", relu ? mp_relu(g, "s_relu", s) : s, r));
    y = mp_linear(g, "fc", y, (mp_linear_opts){.out_features = 10, .bias = false});
    MP_ASSERT(mp_model_finish(&m, y) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    mp_graph_init_params(g, 5);
    for (int k = 0; k < g->n_params; k++) {
        const char *pn = g->params[k].name;
        float *v = g->params[k].data;
        for (int64_t e = 0; e < mp_shape_numel(&g->params[k].spec.shape); e++) {
            if (!forward && !strcmp(pn, "fc.weight")) v[e] = e < 8 ? -1.f : 0.f; /* (10, 8): row 0 */
            if (forward && !strcmp(pn, "r_conv.weight")) v[e] = 1e4f;
            if (forward && !strcmp(pn, "a.weight")) v[e] = 0.f;
            if (forward && !strcmp(pn, "a_bn.bias")) v[e] = 40000.f;
        }
    }
    mp_plan_opts o = {.batch = B, .training = true, .loss = m.loss, .device = dev, .no_bn_add_relu_fusion = !fused};
    float in[B * 4];
    for (int i = 0; i < B * 4; i++) in[i] = forward ? 1.f : 0.f;
    int32_t labels[B] = {0};
    mp_plan *p = NULL;
    mp_status st = mp_plan_create(g, o, &p);
    if (st == MP_OK) *was_fused = p->nodes[a].add_fused == s;
    if (st == MP_OK) st = mp_plan_set_input(p, m.input, in, B * 4);
    if (st == MP_OK) st = mp_plan_set_labels(p, m.labels, labels, B);
    if (st == MP_OK) st = mp_plan_forward(p);
    if (st == MP_OK)
        st = forward ? mp_plan_find_nonfinite_forward(p, site) : mp_plan_backward_checked(p, OVERFLOW_SEED, site);
    CHECK(st == MP_OK, "%s overflow provenance plan (%s, %s%s): %s", forward ? "forward" : "backward",
          dev.kind == MP_DEVICE_CUDA ? "cuda" : "cpu", fused ? "fused" : "unfused", relu ? ", ReLU" : "",
          mp_last_error());
    if (site->found) snprintf(name, name_len, "%s", g->nodes[site->node].name);
    if (st == MP_OK) st = mp_plan_sync_params(p, true);
    for (int k = 0; k < 2 && st == MP_OK; k++)
        memcpy(running + 8 * k, g->params[g->nodes[a].first_param + 2 + k].data, 8 * sizeof *running);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

static void test_overflow_provenance(void) {
    mp_nonfinite_site cpu, apart, fused;
    char cpu_name[64], apart_name[64], fused_name[64];
    bool f_cpu, f_apart, f_fused;
    float running[16];
    const mp_device cpu_dev = {MP_DEVICE_CPU, 0}, gpu = {MP_DEVICE_CUDA, 0};
    overflow_site(cpu_dev, false, false, false, &cpu, cpu_name, sizeof cpu_name, &f_cpu, running);
    overflow_site(gpu, false, false, false, &apart, apart_name, sizeof apart_name, &f_apart, running);
    overflow_site(gpu, true, false, false, &fused, fused_name, sizeof fused_name, &f_fused, running);
    CHECK(f_fused && !f_apart, "overflow provenance: the GPU plan fuses a_bn with s_add (%s) and the unfused one "
          "does not (%s)", f_fused ? "yes" : "no", f_apart ? "it does" : "no");
    CHECK(cpu.found && !strcmp(cpu_name, "s_add") && !strcmp(cpu.what, "grad input 1"),
          "overflow provenance, cpu: %s '%s' (expected s_add's grad input 1)", cpu_name, cpu.what);
    CHECK(apart.found && !strcmp(apart_name, "s_add") && !strcmp(apart.what, "grad input 1"),
          "overflow provenance, gpu unfused: %s '%s' (expected s_add's grad input 1)", apart_name, apart.what);
    CHECK(fused.found && !strcmp(fused_name, "s_add") && !strcmp(fused.what, "grad input 1"),
          "overflow provenance, gpu fused: %s '%s' (expected s_add's grad input 1, as unfused)", fused_name,
          fused.what);
}

static void test_forward_overflow_provenance(void) {
    for (int relu = 0; relu < 2; relu++) {
        const mp_device devs[] = {{MP_DEVICE_CPU, 0}, {MP_DEVICE_CUDA, 0}, {MP_DEVICE_CUDA, 0}};
        const char *label[] = {"cpu", "gpu unfused", "gpu fused"};
        float running[3][16];
        for (int d = 0; d < 3; d++) {
            mp_nonfinite_site site;
            char name[64];
            bool was_fused;
            overflow_site(devs[d], d == 2, relu, true, &site, name, sizeof name, &was_fused, running[d]);
            CHECK(was_fused == (d == 2), "forward overflow provenance, %s%s: a_bn %sfused with s_add", label[d],
                  relu ? ", ReLU" : "", was_fused ? "" : "not ");
            const bool ok = site.found && !site.backward && !strcmp(name, "s_add") && !strcmp(site.what, "output");
            CHECK(ok, "forward overflow provenance, %s%s: %s '%s' (expected s_add's output)", label[d],
                  relu ? ", ReLU" : "", name, site.what);
            printf("%s forward overflow provenance, %s%s: the replay names %s (%s)\n", ok ? "ok  " : "FAIL", label[d],
                   relu ? ", ReLU after the add" : "", name, site.what);
        }
        /* the replay moved a_bn's running statistics once on each plan, fused or not */
        double worst = 0;
        for (int d = 1; d < 3; d++)
            for (int k = 0; k < 16; k++) {
                const double e = fabs((double)running[d][k] - running[0][k]);
                worst = e > worst || e != e ? e : worst;
            }
        CHECK(worst <= 1e-6, "forward overflow provenance%s: a_bn's running statistics after the replay %.3g from the "
              "CPU's", relu ? ", ReLU" : "", worst);
    }
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL; /* one model's cases (diagnosis) */
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_bn_add_relu: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    const model_case models[] = {{"resblocks", 3, 16, 16, RESBLOCKS_FUSED_ADDS}, {"resnet18", 3, 32, 32, 8}};
    bool known = !only;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) known = known || !strcmp(only, models[i].model);
    if (!known) {
        fprintf(stderr, "test_cuda_bn_add_relu: unknown model '%s' (resblocks, resnet18)\n", only);
        return 2;
    }
    const mp_precision precs[] = {MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16, MP_PRECISION_BF16,
                                  MP_PRECISION_FP16};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        for (size_t j = 0; j < sizeof precs / sizeof precs[0] && (!only || !strcmp(only, models[i].model)); j++)
            one_case(&models[i], precs[j]);
    if (!only) test_overflow_provenance();
    if (!only) test_forward_overflow_provenance();
    return test_summary("test_cuda_bn_add_relu");
}
