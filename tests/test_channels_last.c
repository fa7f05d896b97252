/* test_channels_last.c — CPU plans storing activations channels-last
 * (graph/plan_layout.h) against the same plans kept NCHW
 * (opts.channels_first), per graph and precision policy: which activations
 * went NHWC (none with channels_first; where the rules say otherwise), the
 * same loss, logits, an intermediate activation read back through
 * mp_plan_read (NCHW either way), each parameter's gradient, running statistics
 * and inference logits (fp32; bf16 run natively; amp-fp16 staged in f32),
 * within what the two layouts' different summation orders allow (f32 1e-4
 * relative, 16-bit storage 1e-2). Arenas are poisoned (NaN bytes) first,
 * so a tensor read before it is written shows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"
#include "graph/plan_layout.h"
#include "ops/cpu_fast.h"

enum { B = 4, CLASSES = 5 };

typedef struct {
    const char *name;
    mp_graph *g;
    mp_node x, y, loss, logits, probe; /* probe: an activation read back */
    int cin, hw;
    int min_nhwc; /* activations the rules store NHWC, at least */
} net;

static mp_node conv(mp_graph *g, const char *name, mp_node x, int out, int k, int groups) {
    return mp_conv2d(g, name, x, (mp_conv_opts){.out_channels = out, .kernel = k, .padding = k / 2, .groups = groups});
}

static mp_node bn_relu(mp_graph *g, const char *name, mp_node x) {
    char b[32];
    snprintf(b, sizeof b, "%s_bn", name);
    return mp_relu(g, name, mp_batchnorm2d(g, b, x, (mp_batchnorm_opts){0}));
}

static void head(net *n, mp_node features) {
    mp_graph *g = n->g;
    n->logits = mp_linear(g, "fc", features, (mp_linear_opts){.out_features = CLASSES, .bias = true});
    n->y = mp_graph_labels(g, "y");
    n->loss = mp_softmax_cross_entropy(g, "loss", n->logits, n->y);
    mp_graph_mark_output(g, n->loss);
    mp_graph_mark_output(g, n->logits);
    mp_graph_mark_output(g, n->probe); /* kept through backward, to be read after it */
}

/* cnn10's pattern: conv-BN-ReLU stages, 2x2 average pooling, global average
 * pooling: every 4-D activation NHWC (the input, 3 convs, 3 BN+ReLU, pool). */
static void cnn(net *n) {
    mp_graph *g = n->g;
    n->cin = 3, n->hw = 8, n->min_nhwc = 8;
    n->x = mp_graph_input(g, "x", n->cin, n->hw, n->hw);
    mp_node a = bn_relu(g, "r1", conv(g, "c1", n->x, 16, 3, 1));
    n->probe = bn_relu(g, "r2", conv(g, "c2", a, 16, 3, 1));
    mp_node p = mp_avgpool2d(g, "pool", n->probe, (mp_pool_opts){.kernel = 2});
    mp_node c = bn_relu(g, "r3", conv(g, "c3", p, 24, 3, 1));
    head(n, mp_global_avgpool(g, "gap", c));
}

/* A residual block: a batch norm read by its ReLU and by an add, a
 * standalone ReLU, a 1x1 convolution, mul. */
static void residual(net *n) {
    mp_graph *g = n->g;
    n->cin = 4, n->hw = 6, n->min_nhwc = 6;
    n->x = mp_graph_input(g, "x", n->cin, n->hw, n->hw);
    mp_node a = bn_relu(g, "r1", conv(g, "c1", n->x, 8, 3, 1));
    mp_node b = mp_batchnorm2d(g, "b2", conv(g, "c2", a, 8, 3, 1), (mp_batchnorm_opts){0});
    mp_node sum = mp_add(g, "sum", mp_relu(g, "r2", b), b);
    n->probe = mp_relu(g, "r3", mp_add(g, "res", sum, a));
    mp_node m = mp_mul(g, "gate", n->probe, mp_sigmoid(g, "sig", conv(g, "c3", n->probe, 8, 1, 1)));
    head(n, mp_global_avgpool(g, "gap", m));
}

/* Ops that read NCHW only between others: a reshape before the dense layer,
 * dropout, concat, max pooling, a depthwise convolution: the convolutions
 * next to them take each tensor in its own layout. */
static void mixed(net *n) {
    mp_graph *g = n->g;
    n->cin = 8, n->hw = 8, n->min_nhwc = 1; /* the input: every other tensor meets one of them */
    n->x = mp_graph_input(g, "x", n->cin, n->hw, n->hw);
    mp_node a = bn_relu(g, "r1", conv(g, "c1", n->x, 8, 3, 1));
    mp_node dw = bn_relu(g, "r2", conv(g, "dw", a, 8, 3, 8));
    mp_node d = mp_dropout(g, "drop", dw, 0.25f);
    mp_node cat = mp_concat(g, "cat", (mp_node[]){d, a}, 2);
    n->probe = mp_maxpool2d(g, "mpool", conv(g, "c2", cat, 8, 3, 1), (mp_pool_opts){.kernel = 2});
    mp_node r = bn_relu(g, "r3", conv(g, "c3", n->probe, 6, 3, 1));
    head(n, mp_flatten(g, "flat", r));
}

/* An RGB stem: its convolution reads the NHWC input and writes NCHW for
 * max pooling (3 input channels: no gemm kernel mixes layouts); the
 * convolution after the pooling goes NHWC again. */
static void stem(net *n) {
    mp_graph *g = n->g;
    n->cin = 3, n->hw = 8, n->min_nhwc = 4; /* the input, c2, its batch norm and ReLU */
    n->x = mp_graph_input(g, "x", n->cin, n->hw, n->hw);
    mp_node a = bn_relu(g, "r1", conv(g, "c1", n->x, 16, 3, 1));
    n->probe = mp_maxpool2d(g, "mpool", a, (mp_pool_opts){.kernel = 2});
    head(n, mp_global_avgpool(g, "gap", bn_relu(g, "r2", conv(g, "c2", n->probe, 16, 3, 1))));
}

/* A generator's transposed convolutions, tanh and leaky ReLU. */
static void upsample(net *n) {
    mp_graph *g = n->g;
    n->cin = 6, n->hw = 4, n->min_nhwc = 4;
    n->x = mp_graph_input(g, "x", n->cin, n->hw, n->hw);
    mp_node u = mp_conv_transpose2d(g, "up1", n->x, (mp_conv_opts){.out_channels = 8, .kernel = 4, .stride = 2,
                                                                     .padding = 1});
    mp_node a = mp_leaky_relu(g, "lr", mp_batchnorm2d(g, "b1", u, (mp_batchnorm_opts){0}), 0.2f);
    n->probe = mp_tanh(g, "t", mp_conv_transpose2d(g, "up2", a, (mp_conv_opts){.out_channels = 3, .kernel = 4,
                                                                              .stride = 2, .padding = 1}));
    head(n, mp_global_avgpool(g, "gap", n->probe));
}

typedef struct {
    float loss, logits[B * CLASSES], eval_logits[B * CLASSES];
    float *probe, *params; /* params: each parameter's gradient, or a buffer's value */
    int64_t n_probe, n_params;
    int n_tensors;
    int64_t size[64]; /* of each of those */
    int nhwc;
} result;

static net build(void (*make)(net *), const char *name, mp_precision prec) {
    net n = {.name = name, .g = mp_graph_create()};
    make(&n);
    MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(n.g, 11);
    return n;
}

static mp_plan *plan(net *n, bool channels_first, bool training) {
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(
        n->g, (mp_plan_opts){.batch = B, .training = training, .loss = n->loss, .channels_first = channels_first}, &p);
    CHECK(s == MP_OK, "%s: plan: %s", n->name, mp_last_error());
    if (s != MP_OK) return NULL;
    memset(p->arena, 0xFF, p->arena_bytes); /* NaN in every float dtype */
    return p;
}

static bool run(void (*make)(net *), const char *name, mp_precision prec, bool channels_first, result *r) {
    memset(r, 0, sizeof *r);
    net n = build(make, name, prec);
    const int64_t nin = (int64_t)B * n.cin * n.hw * n.hw;
    float *in = malloc((size_t)nin * sizeof *in);
    int32_t lab[B];
    mp_rng g;
    mp_rng_seed(&g, 5);
    for (int64_t i = 0; i < nin; i++) in[i] = (float)mp_rng_normal(&g);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)mp_rng_below(&g, CLASSES);
    mp_plan *p = plan(&n, channels_first, true);
    bool ok = p != NULL;
    for (int step = 0; ok && step < 2; step++) { /* the second step runs on memory the first left behind */
        mp_plan_set_step(p, 7); /* the same dropout masks every step, in both plans */
        ok = mp_plan_set_input(p, n.x, in, (size_t)nin) == MP_OK && mp_plan_set_labels(p, n.y, lab, B) == MP_OK &&
             mp_plan_forward(p) == MP_OK;
        mp_graph_zero_grad(n.g);
        ok = ok && mp_plan_backward(p, 1.0f) == MP_OK;
        CHECK(ok, "%s %s: step %d: %s", name, mp_precision_name(prec), step, mp_last_error());
    }
    if (ok) {
        r->nhwc = mp_plan_channels_last(p, NULL);
        r->n_probe = (int64_t)mp_plan_numel(p, n.probe);
        r->probe = malloc((size_t)r->n_probe * sizeof(float));
        ok = mp_plan_read(p, n.loss, &r->loss, 1) == MP_OK &&
             mp_plan_read(p, n.logits, r->logits, B * CLASSES) == MP_OK &&
             mp_plan_read(p, n.probe, r->probe, (size_t)r->n_probe) == MP_OK;
        MP_ASSERT(n.g->n_params <= 64);
        r->n_tensors = n.g->n_params;
        for (int k = 0; k < n.g->n_params; k++)
            r->n_params += r->size[k] = mp_shape_numel(&n.g->params[k].spec.shape);
        r->params = malloc((size_t)r->n_params * sizeof(float));
        int64_t at = 0;
        for (int k = 0; k < n.g->n_params; k++) {
            const mp_gparam *gp = &n.g->params[k];
            const int64_t m = mp_shape_numel(&gp->spec.shape);
            memcpy(r->params + at, gp->spec.trainable ? gp->grad : gp->data, (size_t)m * sizeof(float));
            at += m;
        }
    }
    mp_plan_destroy(p);
    mp_plan *e = ok ? plan(&n, channels_first, false) : NULL;
    ok = e && mp_plan_set_input(e, n.x, in, (size_t)nin) == MP_OK && mp_plan_set_labels(e, n.y, lab, B) == MP_OK &&
         mp_plan_forward(e) == MP_OK &&
         mp_plan_read(e, n.logits, r->eval_logits, B * CLASSES) == MP_OK;
    CHECK(ok, "%s %s: inference: %s", name, mp_precision_name(prec), mp_last_error());
    mp_plan_destroy(e);
    mp_graph_destroy(n.g);
    free(in);
    return ok;
}

/* ||a - b|| / ||b|| (NaN if either holds a NaN). */
static double rel(const float *a, const float *b, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

int main(void) {
    struct {
        void (*make)(net *);
        const char *name;
    } nets[] = {{cnn, "cnn"}, {residual, "residual"}, {mixed, "mixed"}, {stem, "stem"}, {upsample, "upsample"}};
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_BF16, MP_PRECISION_AMP_FP16};
    const bool env_off = mp_env_get()->no_channels_last;
    for (size_t k = 0; k < sizeof nets / sizeof nets[0]; k++)
        for (size_t q = 0; q < sizeof precs / sizeof precs[0]; q++) {
            const char *pn = mp_precision_name(precs[q]);
            result l, f;
            if (!run(nets[k].make, nets[k].name, precs[q], false, &l) ||
                !run(nets[k].make, nets[k].name, precs[q], true, &f))
                continue;
            const net probe = build(nets[k].make, nets[k].name, precs[q]);
            /* without the vector kernels only the convolutions and the input take NHWC tensors */
            const int want = env_off ? 0 : mp_fast_isa_current() == MP_FAST_NONE ? 1 : probe.min_nhwc;
            mp_graph_destroy(probe.g);
            CHECK(f.nhwc == 0 && (env_off ? l.nhwc == 0 : l.nhwc >= want),
                  "%s %s: %d activations channels-last (channels_first: %d), expected %s%d%s", nets[k].name, pn,
                  l.nhwc, f.nhwc, env_off ? "" : "at least ", want, env_off ? " (MIXPREC_CPU_CHANNELS_LAST=0)" : "");
            const double tol = precs[q] == MP_PRECISION_FP32 ? 1e-4 : 1e-2;
            const double e_loss = fabs((double)l.loss - f.loss) / fmax(fabs((double)f.loss), 1e-6);
            const double e_logits = rel(l.logits, f.logits, B * CLASSES), e_probe = rel(l.probe, f.probe, l.n_probe);
            double e_params = 0; /* the worst parameter's, so that a small one cannot hide under the others */
            for (int t = 0, at = 0; t < l.n_tensors; at += (int)l.size[t++])
                e_params = fmax(e_params, rel(l.params + at, f.params + at, l.size[t]));
            const double e_eval = rel(l.eval_logits, f.eval_logits, B * CLASSES);
            CHECK(isfinite(l.loss) && e_loss <= tol, "%s %s: loss %.7g channels-last, %.7g NCHW", nets[k].name, pn,
                  (double)l.loss, (double)f.loss);
            CHECK(e_logits <= tol, "%s %s: logits differ by %.3g (tolerance %g)", nets[k].name, pn, e_logits, tol);
            CHECK(e_probe <= tol, "%s %s: the probe activation read back differs by %.3g (tolerance %g)",
                  nets[k].name, pn, e_probe, tol);
            CHECK(e_params <= tol, "%s %s: a parameter's gradient or statistics differ by %.3g (tolerance %g)",
                  nets[k].name, pn, e_params, tol);
            CHECK(e_eval <= tol, "%s %s: inference logits differ by %.3g (tolerance %g)", nets[k].name, pn, e_eval,
                  tol);
            printf("%-9s %-9s %2d activations channels-last: loss %.6f vs %.6f; rel. differences logits %.1e, probe "
                   "%.1e, gradients %.1e, inference %.1e (tolerance %g)\n",
                   nets[k].name, pn, l.nhwc, (double)l.loss, (double)f.loss, e_logits, e_probe, e_params, e_eval,
                   tol);
            free(l.probe), free(f.probe), free(l.params), free(f.params);
        }
    return test_summary("test_channels_last");
}
