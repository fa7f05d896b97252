/* test_cuda_dw_bn.c — a batch norm + ReLU applied by the depthwise kernels as
 * they load their input (cuda/conv_depthwise.h, graph/plan_fuse.h):
 *  1. the kernels: forward and backward-filter on x with the batch norm's
 *     coefficients give, bit for bit, what they give on the output the batch
 *     norm's own apply kernel stores (batchnorm2d_fast.h), in f32, f16 and
 *     bf16, at stride 1 and 2, padding 0 to 2, images taller than a band,
 *     and channels up to 1024; shifts > 0 so that a padded zero put through
 *     the batch norm would show; and not what they give on x itself;
 *  2. a training step of a small net (conv, batch norm + ReLU, depthwise
 *     conv at stride 1 and 2, batch norm + ReLU, pooling, linear) fused and
 *     unfused, in fp32, amp-bf16 and amp-fp16: the same loss, running
 *     statistics and gradients bit for bit (the first conv's weight
 *     gradient, whose cuDNN algorithm may sum with atomics, within 1e-5).
 *     Exact because this program runs every depthwise pass on our kernels
 *     and batch norm on our one-kernel passes (MIXPREC_CONV_OWN=force,
 *     MIXPREC_CUDNN_BN=0, MIXPREC_BN_PERSIST=1, unless the environment
 *     says otherwise: scripts/gpu-check's gpu-bn mode runs it under the
 *     other batch-norm kernels);
 *  3. overflow provenance: a batch norm whose output overflows f16, fused
 *     into the depthwise conv after it, is still the node the replay names
 *     (it stores its output while an overflow is traced), as it is unfused;
 *     reading its output through mp_plan_read is an error naming the conv;
 *  4. inference plans never fuse it (their batch norm has no saved
 *     coefficients of a step: it applies the running statistics); where
 *     the kernels decline a conv (36 channels in bf16), its batch norm runs
 *     as an unfused one and the step works.
 * The fusion is off unless asked for (mp_plan_opts.bn_dw_fusion); these
 * plans ask. scripts/gpu-check depthwise trains mobilenetv2 with it (A/B).
 * Needs a GPU: one clear line and exit 2 without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "cuda/batchnorm2d_fast.h"
#include "cuda/conv_depthwise.h"
#include "cuda/cuda_ctx.h"
#include "dw_geom.h"
#include "graph/plan.h"
#include "models/models.h"

/* n normal values (times scale) of dt on the device. */
static void *device_random(mp_rng *r, mp_dtype dt, size_t n, double scale) {
    float *h = malloc(n * sizeof *h);
    void *hd = malloc(n * mp_dtype_size(dt)), *d = NULL;
    bool ok = h && hd && cudaMalloc(&d, n * mp_dtype_size(dt)) == cudaSuccess;
    for (size_t i = 0; ok && i < n; i++) h[i] = (float)(scale * mp_rng_normal(r));
    if (ok) mp_store_f32(hd, dt, h, (int64_t)n);
    ok = ok && cudaMemcpy(d, hd, n * mp_dtype_size(dt), cudaMemcpyHostToDevice) == cudaSuccess;
    free(h), free(hd);
    if (!ok && d) cudaFree(d);
    return ok ? d : NULL;
}

/* Whether device buffers a and b hold the same bytes. */
static bool same_bytes(const void *a, const void *b, size_t bytes) {
    char *ha = malloc(bytes), *hb = malloc(bytes);
    const bool ok = ha && hb && cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
                    cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost) == cudaSuccess && !memcmp(ha, hb, bytes);
    free(ha), free(hb);
    return ok;
}

static void kernel_case(mp_cuda_ctx *ctx, mp_dtype dt, mp_conv_geom g) {
    char what[96];
    snprintf(what, sizeof what, "C%d %dx%d stride %d pad %d n %d %s", g.cx, g.hx, g.wx, g.stride, g.pad, g.n,
             mp_dtype_name(dt));
    const long long M = (long long)g.n * g.hx * g.wx;
    const size_t es = mp_dtype_size(dt), xn = (size_t)M * g.cx, yn = (size_t)g.n * g.hy * g.wy * g.cy;
    mp_rng r;
    mp_rng_seed(&r, 0x4457424E + (uint64_t)g.cx * 31 + (uint64_t)g.stride * 7 + (uint64_t)dt);
    /* (mu, scale, shift): scales of both signs, shifts mostly > 0 (a padded zero through them is not zero) */
    float *coef = malloc(3 * (size_t)g.cx * sizeof *coef);
    for (int c = 0; coef && c < g.cx; c++) {
        coef[c] = (float)(0.3 * mp_rng_normal(&r));
        coef[g.cx + c] = (float)((c % 4 == 3 ? -1 : 1) * (0.5 + fabs(mp_rng_normal(&r))));
        coef[2 * g.cx + c] = (float)(0.5 + 0.3 * mp_rng_normal(&r));
    }
    void *x = device_random(&r, dt, xn, 1.0), *w = device_random(&r, dt, (size_t)g.cx * 9, 0.3);
    void *dy = device_random(&r, dt, yn, 1.0), *bn_out = NULL, *out[3] = {NULL}, *dw[2] = {NULL}, *ws = NULL;
    float *d_coef = NULL;
    const size_t ws_bytes = mp_dw_workspace(ctx, &g, dt, MP_CONV_BWD_FILTER);
    bool ok = coef && x && w && dy && cudaMalloc(&bn_out, xn * es) == cudaSuccess &&
              cudaMalloc((void **)&d_coef, 3 * (size_t)g.cx * sizeof *d_coef) == cudaSuccess &&
              cudaMalloc(&ws, ws_bytes) == cudaSuccess &&
              cudaMemcpy(d_coef, coef, 3 * (size_t)g.cx * sizeof *coef, cudaMemcpyHostToDevice) == cudaSuccess;
    for (int k = 0; k < 3; k++) ok = ok && cudaMalloc(&out[k], yn * es) == cudaSuccess;
    for (int k = 0; k < 2; k++) ok = ok && cudaMalloc(&dw[k], (size_t)g.cx * 9 * es) == cudaSuccess;
    const mp_dw_bn_relu bn = {d_coef, d_coef + g.cx, d_coef + 2 * g.cx};
    ok = ok && mp_bn_fast_rows_per_pass(dt, g.cx) > 0 &&
         mp_bn_fast_apply(ctx->stream, dt, x, NULL, bn_out, M, g.cx, 1, M, d_coef, true) == cudaSuccess &&
         mp_dw_forward(ctx, &g, dt, x, &bn, w, out[0], what) == MP_OK &&
         mp_dw_forward(ctx, &g, dt, bn_out, NULL, w, out[1], what) == MP_OK &&
         mp_dw_forward(ctx, &g, dt, x, NULL, w, out[2], what) == MP_OK &&
         mp_dw_backward_filter(ctx, &g, dt, x, &bn, dy, dw[0], ws, ws_bytes, what) == MP_OK &&
         mp_dw_backward_filter(ctx, &g, dt, bn_out, NULL, dy, dw[1], ws, ws_bytes, what) == MP_OK &&
         cudaStreamSynchronize(ctx->stream) == cudaSuccess;
    const bool fwd_same = ok && same_bytes(out[0], out[1], yn * es);
    const bool dw_same = ok && same_bytes(dw[0], dw[1], (size_t)g.cx * 9 * es);
    const bool applied = ok && !same_bytes(out[0], out[2], yn * es);
    CHECK(ok, "%s: a kernel failed: %s", what, mp_last_error());
    CHECK(!ok || fwd_same, "%s: forward on x with the batch norm differs from forward on its stored output", what);
    CHECK(!ok || dw_same, "%s: backward-filter on x with the batch norm differs from it on the stored output", what);
    CHECK(!ok || applied, "%s: forward with the batch norm equals forward on x: nothing applied", what);
    printf("%s %s: forward %s, backward-filter %s (bit for bit against the stored output)\n",
           ok && fwd_same && dw_same && applied ? "ok  " : "FAIL", what, fwd_same ? "same" : "differs",
           dw_same ? "same" : "differs");
    cudaFree(x), cudaFree(w), cudaFree(dy), cudaFree(bn_out), cudaFree(d_coef), cudaFree(ws);
    for (int k = 0; k < 3; k++) cudaFree(out[k]);
    for (int k = 0; k < 2; k++) cudaFree(dw[k]);
    free(coef);
}

/* input -> conv -> bn0 + ReLU -> depthwise conv -> bn1 + ReLU -> gap -> fc. */
static mp_status dw_net(mp_model *m) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", 3, 8, 8);
    x = mp_conv_bn(g, "conv", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1});
    x = mp_relu(g, "conv_relu", x);
    x = mp_conv_bn(g, "dw", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1, .groups = 16});
    x = mp_relu(g, "dw_relu", x);
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = 10, .bias = true});
    return mp_model_finish(m, x);
}

/* input (3 x 20 x 12) -> conv (c channels) -> bn + ReLU -> depthwise conv -> bn + ReLU -> depthwise conv,
 * stride 2 -> bn + ReLU -> gap -> fc: two batch norms to fuse into depthwise convs. */
static mp_status dw_net2(mp_model *m, int c) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", 3, 20, 12);
    x = mp_relu(g, "conv_relu",
                mp_conv_bn(g, "conv", x, (mp_conv_opts){.out_channels = c, .kernel = 3, .padding = 1}));
    x = mp_relu(g, "dw1_relu", mp_conv_bn(g, "dw1", x,
                                          (mp_conv_opts){.out_channels = c, .kernel = 3, .padding = 1, .groups = c}));
    x = mp_relu(g, "dw2_relu", mp_conv_bn(g, "dw2", x,
                                          (mp_conv_opts){.out_channels = c, .kernel = 3, .stride = 2, .padding = 1,
                                                         .groups = c}));
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = 10, .bias = true});
    return mp_model_finish(m, x);
}

/* One training step of dw_net2 on the GPU, fused or not: the loss, and the
 * gradients and running statistics in m's host copies; *n_fused: batch
 * norms fused into depthwise convs. */
static mp_status net_step(mp_model *m, bool fused, float *loss, int *n_fused) {
    enum { B = 4 };
    float x[B * 3 * 20 * 12];
    int32_t y[B] = {3, 1, 4, 1};
    mp_rng r;
    mp_rng_seed(&r, 21);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)mp_rng_normal(&r);
    mp_plan_opts o = {.batch = B, .training = true, .loss = m->loss, .bn_dw_fusion = fused,
                      .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = true};
    mp_plan *p = NULL;
    MP_TRY(mp_plan_create(m->g, o, &p));
    *n_fused = 0;
    for (int i = 0; i < p->n; i++) *n_fused += p->nodes[i].dw_fused && p->g->nodes[i].desc.kind == MP_OP_BATCHNORM2D;
    mp_status s = mp_plan_set_input(p, m->input, x, sizeof x / sizeof x[0]);
    if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, m->loss, loss, 1);
    mp_graph_zero_grad(m->g);
    if (s == MP_OK) s = mp_plan_backward(p, 1.0f);
    if (s == MP_OK) s = mp_plan_sync_params(p, true);
    mp_plan_destroy(p);
    return s;
}

static mp_model build_net2(mp_precision prec, int channels) {
    mp_model m;
    memset(&m, 0, sizeof m);
    m.g = mp_graph_create();
    MP_ASSERT(m.g && dw_net2(&m, channels) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 7);
    return m;
}

static void exact_step(mp_precision prec) {
    const char *pn = mp_precision_name(prec);
    mp_model a = build_net2(prec, 24), b = build_net2(prec, 24);
    float la = 0, lb = 0;
    int na = 0, nb = 0;
    const mp_status sa = net_step(&a, true, &la, &na), sb = net_step(&b, false, &lb, &nb);
    CHECK(sa == MP_OK && sb == MP_OK, "exact step %s: %s", pn, mp_last_error());
    const mp_env *env = mp_env_get();
    const int want = env->no_fusion || env->no_bn_fast || env->conv_own == 0 ? 0 : 2;
    const int want_b = env->bn_dw_fusion ? want : 0; /* MIXPREC_FUSE_BN_DW=1 fuses every plan */
    CHECK(na == want && nb == want_b, "exact step %s: %d (fused) and %d (unfused) batch norms fused, want %d and %d",
          pn, na, nb, want, want_b);
    int differ = 0;
    const char *first = "-";
    for (int k = 0; sa == MP_OK && sb == MP_OK && k < a.g->n_params; k++) {
        const mp_gparam *pa = &a.g->params[k], *pb = &b.g->params[k];
        const int64_t n = mp_shape_numel(&pb->spec.shape);
        const float *va = pb->spec.trainable ? pa->grad : pa->data, *vb = pb->spec.trainable ? pb->grad : pb->data;
        bool same = !memcmp(va, vb, (size_t)n * sizeof *va);
        if (!same && !strcmp(pb->name, "conv.weight")) { /* cuDNN's weight gradient: maybe atomics */
            double d2 = 0, r2 = 0;
            for (int64_t i = 0; i < n; i++) {
                const double e = (double)va[i] - vb[i];
                d2 += e * e, r2 += (double)vb[i] * vb[i];
            }
            same = d2 <= 1e-10 * r2;
        }
        if (!same && !differ++) first = pb->name;
    }
    CHECK(!memcmp(&la, &lb, sizeof la), "exact step %s: loss fused %.9g, unfused %.9g", pn, la, lb);
    CHECK(differ == 0, "exact step %s: %d parameters' gradients or running statistics differ (first %s)", pn, differ,
          first);
    printf("%s exact step %s, %d batch norms fused: loss %.9g / %.9g, %d of %d parameters differ\n",
           sa == MP_OK && sb == MP_OK && !differ && la == lb ? "ok  " : "FAIL", pn, na, la, lb, differ, a.g->n_params);
    mp_model_free(&a);
    mp_model_free(&b);
}

/* Depthwise convs of 36 channels, which the kernels decline in bf16 (not a multiple of 8), as the batch
 * norms' fast kernels do: asked to fuse, the plan fuses nothing, its batch norms run as unfused ones (the
 * general kernels, reading the stored output), and the step works. */
static void declined_step(void) {
    mp_model m = build_net2(MP_PRECISION_AMP_BF16, 36);
    float loss = 0;
    int n = -1;
    const mp_status s = net_step(&m, true, &loss, &n);
    CHECK(s == MP_OK && n == 0 && isfinite(loss), "declined fusion (36 channels, bf16): %s, %d batch norms fused, "
          "loss %g", s == MP_OK ? "step ran" : mp_last_error(), n, loss);
    printf("%s declined fusion, 36 channels bf16: %d fused, loss %.6g\n",
           s == MP_OK && n == 0 && isfinite(loss) ? "ok  " : "FAIL", n, loss);
    mp_model_free(&m);
}

/* An inference plan asked to fuse fuses nothing. */
static void inference_unfused(void) {
    mp_model m = build_net2(MP_PRECISION_AMP_BF16, 24);
    mp_plan_opts o = {.batch = 2, .training = false, .loss = m.loss, .bn_dw_fusion = true,
                      .device = {MP_DEVICE_CUDA, 0}};
    mp_plan *p = NULL;
    const mp_status s = mp_plan_create(m.g, o, &p);
    int n = 0;
    for (int i = 0; s == MP_OK && i < p->n; i++) n += p->nodes[i].dw_fused != 0;
    CHECK(s == MP_OK && n == 0, "inference plan: %s, %d nodes marked fused into a depthwise conv",
          s == MP_OK ? "created" : mp_last_error(), n);
    printf("%s inference plan asked to fuse: %d nodes fused\n", s == MP_OK && n == 0 ? "ok  " : "FAIL", n);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* The batch norm "conv_bn" scaled by 1e6 overflows f16: the replay of the
 * forward must name it, fused into "dw" (fused) or not. */
static void provenance(bool fused) {
    enum { B = 4 };
    mp_model m;
    memset(&m, 0, sizeof m);
    m.g = mp_graph_create();
    MP_ASSERT(m.g && dw_net(&m) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_FP16}) == MP_OK);
    mp_graph_init_params(m.g, 3);
    int bn = -1, relu = -1;
    for (int i = 0; i < m.g->n_nodes; i++) {
        if (!strcmp(m.g->nodes[i].name, "conv_bn")) bn = i;
        if (!strcmp(m.g->nodes[i].name, "conv_relu")) relu = i;
    }
    MP_ASSERT(bn >= 0 && relu >= 0);
    float *gamma = m.g->params[m.g->nodes[bn].first_param].data;
    for (int c = 0; c < 16; c++) gamma[c] = 1e6f;
    mp_plan_opts o = {.batch = B, .training = true, .loss = m.loss, .bn_dw_fusion = fused,
                      .device = {MP_DEVICE_CUDA, 0}};
    mp_plan *p = NULL;
    float x[B * 3 * 8 * 8];
    int32_t y[B] = {1, 2, 3, 4};
    mp_rng r;
    mp_rng_seed(&r, 9);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)mp_rng_normal(&r);
    mp_nonfinite_site site;
    memset(&site, 0, sizeof site);
    mp_status s = mp_plan_create(m.g, o, &p);
    const bool marked = s == MP_OK && p->nodes[bn].dw_fused != 0;
    if (s == MP_OK) s = mp_plan_set_input(p, m.input, x, sizeof x / sizeof x[0]);
    if (s == MP_OK) s = mp_plan_set_labels(p, m.labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_find_nonfinite_forward(p, &site);
    const char *named = site.found ? m.g->nodes[site.node].name : "nothing";
    /* the fused batch norm's output is not stored: reading it is an error naming the convolution */
    float *act = malloc((size_t)B * 16 * 8 * 8 * sizeof *act);
    const mp_status rs = s == MP_OK ? mp_plan_read(p, relu, act, (size_t)B * 16 * 8 * 8) : MP_OK;
    if (s == MP_OK && marked)
        CHECK(rs == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "'dw'"), "reading the fused ReLU's output: %s",
              rs == MP_OK ? "no error" : mp_last_error());
    else if (s == MP_OK)
        CHECK(rs == MP_OK, "reading the unfused ReLU's output: %s", mp_last_error());
    free(act);
    const mp_env *env = mp_env_get();
    const bool want_fused = (fused || env->bn_dw_fusion) && !env->no_fusion && !env->no_bn_fast && env->conv_own != 0;
    CHECK(s == MP_OK, "provenance (%s): %s", fused ? "fused" : "unfused", mp_last_error());
    CHECK(marked == want_fused, "provenance: the batch norm is %sfused into the depthwise conv, want %s",
          marked ? "" : "not ", want_fused ? "fused" : "apart");
    CHECK(site.found && site.node == bn && !site.backward, "provenance (%s): the replay names %s, want conv_bn",
          fused ? "fused" : "unfused", named);
    printf("%s provenance, batch norm %s: the replay names %s (%s)\n", s == MP_OK && site.node == bn ? "ok  " : "FAIL",
           marked ? "fused into the depthwise conv" : "apart", named, site.what);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

int main(void) {
    /* every pass on the kernels that make fused and unfused steps comparable bit for bit (exact_step), before
     * the library first reads its environment; what the environment sets stays */
    setenv("MIXPREC_CONV_OWN", "force", 0);
    setenv("MIXPREC_CUDNN_BN", "0", 0);
    setenv("MIXPREC_BN_PERSIST", "1", 0);
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_dw_bn: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    mp_cuda_ctx *ctx = NULL;
    if (mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        fprintf(stderr, "test_cuda_dw_bn: %s\n", mp_last_error());
        return 2;
    }
    const mp_conv_geom shapes[] = {dw_geom(2, 16, 19, 5, 1, 1), dw_geom(2, 8, 21, 6, 2, 1),
                                   dw_geom(3, 8, 9, 8, 2, 0),   dw_geom(2, 32, 8, 8, 1, 1),
                                   dw_geom(2, 24, 7, 7, 1, 2),  dw_geom(1, 1024, 4, 4, 1, 1),
                                   dw_geom(4, 144, 16, 16, 2, 1)};
    const mp_dtype dts[] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) kernel_case(ctx, dts[d], shapes[s]);
    mp_cuda_ctx_destroy(ctx);
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16};
    for (size_t i = 0; i < 3; i++) exact_step(precs[i]);
    inference_unfused();
    declined_step();
    provenance(true);
    provenance(false);
    return test_summary("test_cuda_dw_bn");
}
