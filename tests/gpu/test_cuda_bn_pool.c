/* test_cuda_bn_pool.c — a batch norm + ReLU fused into the k x k average
 * pool (stride k, no padding) reading it (graph/plan_fuse.h): the pool
 * applies the batch norm as it loads its input, and the batch norm's
 * backward reads the pool's output gradient in place of the one the pool's
 * backward would write.
 *  1. a training step of a small net (conv, batch norm + ReLU, 2x2 pool,
 *     conv, batch norm + ReLU, 3x3 pool over a 10 x 7 image, whose last
 *     row and column no window reaches, global pool, linear) fused and
 *     unfused, in fp32, amp-bf16 and amp-fp16 (also fp32 at 12 channels,
 *     the pool's one-channel kernels, and amp-bf16 at batch 48): the same
 *     loss, running statistics and gradients bit for bit
 *     (MIXPREC_DETERMINISTIC=1: every convolution on an algorithm free of
 *     atomics, the same in both plans; otherwise the first conv's weight
 *     gradient within 1e-5), on an arena of NaN bytes (MIXPREC_POISON_ARENA=1: a read of a
 *     gradient nobody wrote shows). Batch norm runs on our one-kernel
 *     passes (MIXPREC_CUDNN_BN=0, MIXPREC_BN_PERSIST=1) unless the
 *     environment says otherwise: scripts/gpu-check's gpu-bn mode runs this
 *     under the three-kernel passes too;
 *  2. a checked backward (the overflow search's replay) of a finite step
 *     finds nothing and leaves the same gradients: it writes the pool's
 *     input gradient it checks;
 *  3. overflow provenance: a batch norm whose output overflows f16, fused
 *     into the pool after it, is still the node the forward's replay names;
 *     reading its ReLU's output through mp_plan_read is an error naming
 *     the pool;
 *  4. inference plans and plans with no_bn_pool_fusion fuse nothing; where
 *     the batch norm's fast kernels decline its channels (12 in bf16) it
 *     runs apart and the step works.
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

enum { B = 4, H = 20, W = 14, BMAX = 48 };

/* input (3 x 20 x 14) -> conv (c) -> bn + ReLU -> avgpool 2 (10 x 7) -> conv (c) -> bn + ReLU -> avgpool 3
 * (3 x 2: row 9 and column 6 in no window) -> gap -> fc. */
static mp_status pool_net(mp_model *m, int c) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", 3, H, W);
    x = mp_relu(g, "c1_relu", mp_conv_bn(g, "c1", x, (mp_conv_opts){.out_channels = c, .kernel = 3, .padding = 1}));
    x = mp_avgpool2d(g, "pool1", x, (mp_pool_opts){.kernel = 2});
    x = mp_relu(g, "c2_relu", mp_conv_bn(g, "c2", x, (mp_conv_opts){.out_channels = c, .kernel = 3, .padding = 1}));
    x = mp_avgpool2d(g, "pool2", x, (mp_pool_opts){.kernel = 3});
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = 10, .bias = true});
    return mp_model_finish(m, x);
}

static mp_model build_net(mp_precision prec, int channels) {
    mp_model m;
    memset(&m, 0, sizeof m);
    m.g = mp_graph_create();
    MP_ASSERT(m.g && pool_net(&m, channels) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 11);
    return m;
}

static int fused_count(const mp_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++) n += p->nodes[i].pool_fused && p->g->nodes[i].desc.kind == MP_OP_BATCHNORM2D;
    return n;
}

/* One training step on the GPU, fused or not: the loss, and the gradients
 * and running statistics in m's host copies; checked: the backward as the
 * overflow search replays it (*found: what it found). */
static mp_status net_step(mp_model *m, int batch, bool fused, bool checked, float *loss, int *n_fused,
                          bool *found) {
    MP_ASSERT(batch <= BMAX);
    float *x = malloc((size_t)batch * 3 * H * W * sizeof *x);
    if (!x) return mp_error(MP_ERR_NOMEM, "test: out of memory");
    int32_t y[BMAX];
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (int i = 0; i < batch * 3 * H * W; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < batch; i++) y[i] = (int32_t)((i * 7 + 3) % 10);
    mp_plan_opts o = {.batch = batch, .training = true, .loss = m->loss, .no_bn_pool_fusion = !fused,
                      .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = true};
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(m->g, o, &p);
    *n_fused = s == MP_OK ? fused_count(p) : -1;
    if (s == MP_OK) s = mp_plan_set_input(p, m->input, x, (size_t)batch * 3 * H * W);
    if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, batch);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, m->loss, loss, 1);
    mp_graph_zero_grad(m->g);
    mp_nonfinite_site site;
    memset(&site, 0, sizeof site);
    if (s == MP_OK) s = checked ? mp_plan_backward_checked(p, 1.0f, &site) : mp_plan_backward(p, 1.0f);
    *found = site.found;
    if (s == MP_OK) s = mp_plan_sync_params(p, true);
    mp_plan_destroy(p);
    free(x);
    return s;
}

/* Parameters (gradients of trainable ones, values of buffers) of a and b
 * that differ; *first: the first one's name, *rel its largest difference
 * relative to its largest value. */
static int params_differ(const mp_model *a, const mp_model *b, const char **first, double *rel) {
    int differ = 0;
    *first = "-";
    *rel = 0;
    for (int k = 0; k < a->g->n_params; k++) {
        const mp_gparam *pa = &a->g->params[k], *pb = &b->g->params[k];
        const int64_t n = mp_shape_numel(&pb->spec.shape);
        const float *va = pb->spec.trainable ? pa->grad : pa->data, *vb = pb->spec.trainable ? pb->grad : pb->data;
        bool same = !memcmp(va, vb, (size_t)n * sizeof *va);
        if (!same && !strcmp(pb->name, "c1.weight") && !mp_env_get()->deterministic) { /* maybe atomics */
            double d2 = 0, r2 = 0;
            for (int64_t i = 0; i < n; i++) {
                const double e = (double)va[i] - vb[i];
                d2 += e * e, r2 += (double)vb[i] * vb[i];
            }
            same = d2 <= 1e-10 * r2;
        }
        if (!same && !differ++) {
            *first = pb->name;
            double dmax = 0, vmax = 0;
            for (int64_t i = 0; i < n; i++) {
                dmax = fmax(dmax, fabs((double)va[i] - vb[i]));
                vmax = fmax(vmax, fabs((double)vb[i]));
            }
            *rel = vmax > 0 ? dmax / vmax : dmax;
        }
    }
    return differ;
}

static void exact_step(mp_precision prec, bool checked, int channels, int batch) {
    char pn[64];
    snprintf(pn, sizeof pn, "%s, %d channels, batch %d", mp_precision_name(prec), channels, batch);
    const char *how = checked ? "checked backward" : "backward";
    mp_model a = build_net(prec, channels), b = build_net(prec, channels);
    float la = 0, lb = 0;
    int na = 0, nb = 0;
    bool fa = false, fb = false;
    const mp_status sa = net_step(&a, batch, true, checked, &la, &na, &fa),
                    sb = net_step(&b, batch, false, false, &lb, &nb, &fb);
    CHECK(sa == MP_OK && sb == MP_OK, "exact step %s (%s): %s", pn, how, mp_last_error());
    const mp_env *env = mp_env_get();
    const int want = env->no_fusion || env->no_bn_fast || env->no_bn_pool_fusion || env->cudnn_bn == 1 ? 0 : 2;
    CHECK(na == want && nb == 0, "exact step %s: %d (fused) and %d (unfused) batch norms fused, want %d and 0", pn,
          na, nb, want);
    CHECK(!fa, "exact step %s: the checked backward found a NaN/inf in a finite step", pn);
    const char *first = "-";
    double rel = 0;
    const int differ = sa == MP_OK && sb == MP_OK ? params_differ(&a, &b, &first, &rel) : -1;
    CHECK(!memcmp(&la, &lb, sizeof la), "exact step %s: loss fused %.9g, unfused %.9g", pn, la, lb);
    CHECK(differ == 0, "exact step %s (%s): %d parameters' gradients or running statistics differ (first %s, by %.3g "
          "of its largest value)", pn, how, differ, first, rel);
    printf("%s exact step %s (%s), %d batch norms fused: loss %.9g / %.9g, %d of %d parameters differ\n",
           sa == MP_OK && sb == MP_OK && !differ && la == lb && !fa ? "ok  " : "FAIL", pn, how, na, la, lb, differ,
           a.g->n_params);
    mp_model_free(&a);
    mp_model_free(&b);
}

/* 12 channels, which the batch norm's fast kernels decline in bf16 (not a multiple of 8): nothing fused, and
 * the step works. */
static void declined_step(void) {
    mp_model m = build_net(MP_PRECISION_AMP_BF16, 12);
    float loss = 0;
    int n = -1;
    bool found = false;
    const mp_status s = net_step(&m, B, true, false, &loss, &n, &found);
    CHECK(s == MP_OK && n == 0 && isfinite(loss), "declined fusion (12 channels, bf16): %s, %d batch norms fused, "
          "loss %g", s == MP_OK ? "step ran" : mp_last_error(), n, loss);
    printf("%s declined fusion, 12 channels bf16: %d fused, loss %.6g\n",
           s == MP_OK && n == 0 && isfinite(loss) ? "ok  " : "FAIL", n, loss);
    mp_model_free(&m);
}

/* An inference plan fuses nothing. */
static void inference_unfused(void) {
    mp_model m = build_net(MP_PRECISION_AMP_BF16, 16);
    mp_plan_opts o = {.batch = 2, .training = false, .loss = m.loss, .device = {MP_DEVICE_CUDA, 0}};
    mp_plan *p = NULL;
    const mp_status s = mp_plan_create(m.g, o, &p);
    int n = 0;
    for (int i = 0; s == MP_OK && i < p->n; i++) n += p->nodes[i].pool_fused != 0;
    CHECK(s == MP_OK && n == 0, "inference plan: %s, %d nodes marked fused into a pool",
          s == MP_OK ? "created" : mp_last_error(), n);
    printf("%s inference plan: %d nodes fused\n", s == MP_OK && n == 0 ? "ok  " : "FAIL", n);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* The batch norm "c1_bn" scaled by 1e6 overflows f16: the forward's replay
 * must name it, fused into "pool1" or not; the fused ReLU's output cannot
 * be read. */
static void provenance(bool fused) {
    mp_model m = build_net(MP_PRECISION_FP16, 16);
    int bn = -1, relu = -1;
    for (int i = 0; i < m.g->n_nodes; i++) {
        if (!strcmp(m.g->nodes[i].name, "c1_bn")) bn = i;
        if (!strcmp(m.g->nodes[i].name, "c1_relu")) relu = i;
    }
    MP_ASSERT(bn >= 0 && relu >= 0);
    float *gamma = m.g->params[m.g->nodes[bn].first_param].data;
    for (int c = 0; c < 16; c++) gamma[c] = 1e6f;
    mp_plan_opts o = {.batch = B, .training = true, .loss = m.loss, .no_bn_pool_fusion = !fused,
                      .device = {MP_DEVICE_CUDA, 0}};
    mp_plan *p = NULL;
    float *x = malloc((size_t)B * 3 * H * W * sizeof *x), *act = malloc((size_t)B * 16 * H * W * sizeof *act);
    MP_ASSERT(x && act);
    int32_t y[B] = {1, 2, 3, 4};
    mp_rng r;
    mp_rng_seed(&r, 9);
    for (int i = 0; i < B * 3 * H * W; i++) x[i] = (float)mp_rng_normal(&r);
    mp_nonfinite_site site;
    memset(&site, 0, sizeof site);
    mp_status s = mp_plan_create(m.g, o, &p);
    const bool marked = s == MP_OK && p->nodes[bn].pool_fused != 0;
    if (s == MP_OK) s = mp_plan_set_input(p, m.input, x, (size_t)B * 3 * H * W);
    if (s == MP_OK) s = mp_plan_set_labels(p, m.labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_find_nonfinite_forward(p, &site);
    const char *named = site.found ? m.g->nodes[site.node].name : "nothing";
    const mp_status rs = s == MP_OK ? mp_plan_read(p, relu, act, (size_t)B * 16 * H * W) : MP_OK;
    if (s == MP_OK && marked)
        CHECK(rs == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "'pool1'"), "reading the fused ReLU's output: %s",
              rs == MP_OK ? "no error" : mp_last_error());
    else if (s == MP_OK)
        CHECK(rs == MP_OK, "reading the unfused ReLU's output: %s", mp_last_error());
    const mp_env *env = mp_env_get();
    const bool want_fused = fused && !env->no_fusion && !env->no_bn_fast && !env->no_bn_pool_fusion && env->cudnn_bn != 1;
    CHECK(s == MP_OK, "provenance (%s): %s", fused ? "fused" : "unfused", mp_last_error());
    CHECK(marked == want_fused, "provenance: the batch norm is %sfused into the pool, want %s", marked ? "" : "not ",
          want_fused ? "fused" : "apart");
    CHECK(site.found && site.node == bn && !site.backward, "provenance (%s): the replay names %s, want c1_bn",
          fused ? "fused" : "unfused", named);
    printf("%s provenance, batch norm %s: the replay names %s (%s)\n", s == MP_OK && site.node == bn ? "ok  " : "FAIL",
           marked ? "fused into the pool" : "apart", named, site.what);
    free(x), free(act);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

int main(void) {
    /* exact steps need batch norm on our kernels in both plans; an arena of NaN bytes shows unwritten reads;
     * set before the library first reads its environment; what the environment sets stays */
    setenv("MIXPREC_CUDNN_BN", "0", 0);
    setenv("MIXPREC_DETERMINISTIC", "1", 0); /* the same convolution algorithms, none summing with atomics */
    setenv("MIXPREC_BN_PERSIST", "1", 0);
    setenv("MIXPREC_POISON_ARENA", "1", 0);
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_bn_pool: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16};
    for (size_t i = 0; i < 3; i++) exact_step(precs[i], false, 16, B);
    exact_step(MP_PRECISION_FP32, false, 12, B); /* f32 groups of 4 channels: the pool's one-channel kernels */
    exact_step(MP_PRECISION_AMP_BF16, false, 16, BMAX); /* many chunks of rows */
    exact_step(MP_PRECISION_AMP_BF16, true, 16, B);
    inference_unfused();
    declined_step();
    provenance(true);
    provenance(false);
    return test_summary("test_cuda_bn_pool");
}
