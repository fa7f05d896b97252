/* test_bn_add_cpu.c — a batch norm + residual add (+ ReLU) fused into one
 * pass each way on CPU plans (graph/plan_fuse.h): the batch norm stores
 * relu(bn(x) + r), and its backward masks dy with that output, writes the
 * add's gradient of r and its own dx in one pass
 * (ops/batchnorm2d_nhwc_kernels.inc).
 *  1. two training steps of resblocks (resblocks_net.h: two block tails with
 *     a ReLU, two without, residuals read again after the fused add, so the
 *     fused backward adds to a gradient already written, a projection
 *     shortcut) and of resnet18, fused and unfused
 *     (mp_plan_opts.no_bn_add_relu_fusion), in fp32, amp-bf16 and bf16, on
 *     arenas of NaN bytes (a read of something nobody wrote shows): the same
 *     loss, gradients and running statistics bit for bit; amp-fp16 (its
 *     batch norms staged) and channels-first plans fuse nothing and train;
 *  2. the same with each forward replayed by the overflow search and the
 *     backward checked: nothing found, the same values;
 *  3. inference plans: the logits fused and unfused, bit for bit;
 *  4. overflow provenance, fp32 and amp-bf16: the forward's replay names a
 *     fused batch norm whose output overflows (also where only its -inf,
 *     which the ReLU zeroes, is there beside the sum's +inf), and the add
 *     where bn(x) and the residual are finite and their sum overflows, as
 *     unfused, and leaves the chain's output and the running statistics as
 *     unfused;
 *     reading a fused batch norm's own output is an error naming the add. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "cpu_fusion_steps.h"
#include "graph/plan.h"
#include "resblocks_net.h"

enum { B = 4, CLASSES = 10 };

typedef struct {
    const char *model; /* a zoo model, or "resblocks" */
    int c, h, w;
    int adds; /* the block tails a plan can fuse */
} net_case;

static const net_case NETS[] = {{"resblocks", 3, 11, 10, RESBLOCKS_FUSED_ADDS}, {"resnet18", 3, 16, 16, 8}};

static mp_model build(const net_case *nc, mp_precision prec) {
    mp_model m;
    memset(&m, 0, sizeof m);
    if (!strcmp(nc->model, "resblocks")) {
        m.g = mp_graph_create();
        MP_ASSERT(m.g && resblocks(&m, nc->c, nc->h, nc->w, CLASSES) == MP_OK);
    } else {
        MP_ASSERT(mp_model_build(nc->model, nc->c, nc->h, nc->w, CLASSES, &m) == MP_OK);
    }
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 5);
    return m;
}

static int adds_fused(const mp_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++) n += p->nodes[i].add_fused != 0;
    return n;
}

/* How many adds a plan of prec should fuse: every block tail, where the
 * CPU's fusions run (cpu_fusion_steps.h) and this one is on. */
static int fused_wanted(const net_case *nc, mp_precision prec, bool channels_first) {
    return cpu_fusions_run(prec, channels_first) && !mp_env_get()->no_bn_add_relu_fusion ? nc->adds : 0;
}

static void make_batch(const net_case *nc, float *x, int32_t *y) {
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (size_t i = 0; i < (size_t)B * nc->c * nc->h * nc->w; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) y[i] = (int32_t)((i * 7 + 3) % CLASSES);
}

/* Two training steps, fused or not (cpu_fusion_steps). */
static mp_status train_steps(mp_model *m, const net_case *nc, bool fused, bool checked, bool channels_first,
                             float *loss, int *n_fused, bool *found) {
    const size_t nx = (size_t)B * nc->c * nc->h * nc->w;
    float *x = malloc(nx * sizeof *x);
    MP_ASSERT(x);
    int32_t y[B];
    make_batch(nc, x, y);
    const mp_plan_opts o = {.batch = B, .training = true, .loss = m->loss, .no_bn_add_relu_fusion = !fused,
                            .channels_first = channels_first};
    const mp_status s = cpu_fusion_steps(m, o, x, nx, y, checked, adds_fused, loss, n_fused, found);
    free(x);
    return s;
}

/* The fused plan (as asked) against the unfused one, bit for bit. */
static void exact_steps(const net_case *nc, mp_precision prec, bool checked, bool channels_first) {
    char pn[96];
    snprintf(pn, sizeof pn, "%s %s%s%s", nc->model, mp_precision_name(prec), checked ? ", checked" : "",
             channels_first ? ", channels-first" : "");
    mp_model a = build(nc, prec), b = build(nc, prec);
    float la = 0, lb = 0;
    int na = 0, nb = 0;
    bool fa = false, fb = false;
    const mp_status sa = train_steps(&a, nc, true, checked, channels_first, &la, &na, &fa),
                    sb = train_steps(&b, nc, false, checked, channels_first, &lb, &nb, &fb);
    CHECK(sa == MP_OK && sb == MP_OK, "steps %s: %s", pn, mp_last_error());
    const int want = fused_wanted(nc, prec, channels_first);
    CHECK(na == want && nb == 0, "steps %s: %d (fused) and %d (unfused) adds fused, want %d and 0", pn, na, nb, want);
    CHECK(!fa && !fb, "steps %s: the overflow search found a NaN/inf in finite steps", pn);
    int differ = -1;
    const bool same = sa == MP_OK && sb == MP_OK && cpu_fusion_same(pn, &a, &b, la, lb, &differ);
    printf("%s steps %s, %d adds fused: loss %.9g / %.9g, %d of %d parameters differ\n",
           same && !fa && !fb && na == want ? "ok  " : "FAIL", pn, na, la, lb, differ, a.g->n_params);
    mp_model_free(&a);
    mp_model_free(&b);
}

/* An inference plan's logits, fused or not (*n_fused: adds fused). */
static mp_status infer(mp_model *m, const net_case *nc, bool fused, float *logits, int *n_fused) {
    const size_t nx = (size_t)B * nc->c * nc->h * nc->w;
    float *x = malloc(nx * sizeof *x);
    MP_ASSERT(x);
    int32_t y[B];
    make_batch(nc, x, y);
    mp_plan *p = NULL;
    const mp_plan_opts o = {.batch = B, .training = false, .loss = m->loss, .no_bn_add_relu_fusion = !fused};
    mp_status s = mp_plan_create(m->g, o, &p);
    *n_fused = s == MP_OK ? adds_fused(p) : -1;
    if (s == MP_OK) memset(p->arena, 0xFF, p->arena_bytes);
    if (s == MP_OK) s = mp_plan_set_input(p, m->input, x, nx);
    if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, m->logits, logits, (size_t)B * CLASSES);
    mp_plan_destroy(p);
    free(x);
    return s;
}

static void exact_inference(const net_case *nc, mp_precision prec) {
    mp_model m = build(nc, prec);
    float la[B * CLASSES], lb[B * CLASSES];
    int na = 0, nb = 0;
    const mp_status sa = infer(&m, nc, true, la, &na), sb = infer(&m, nc, false, lb, &nb);
    const int want = fused_wanted(nc, prec, false);
    bool finite = true;
    for (int i = 0; i < B * CLASSES; i++) finite &= isfinite(la[i]) != 0;
    const bool same = sa == MP_OK && sb == MP_OK && !memcmp(la, lb, sizeof la);
    CHECK(sa == MP_OK && sb == MP_OK, "inference %s %s: %s", nc->model, mp_precision_name(prec), mp_last_error());
    CHECK(na == want && nb == 0, "inference %s %s: %d and %d adds fused, want %d and 0", nc->model,
          mp_precision_name(prec), na, nb, want);
    CHECK(same && finite, "inference %s %s: the logits fused and unfused differ (or are not finite)", nc->model,
          mp_precision_name(prec));
    printf("%s inference %s %s, %d adds fused: logits %s\n", same && finite && na == want ? "ok  " : "FAIL",
           nc->model, mp_precision_name(prec), na, same ? "bit for bit" : "differ");
    mp_model_free(&m);
}

static int node_named(const mp_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    MP_ASSERT(!"no such node");
    return -1;
}

/* Parameter k of the node named `node` (batch norm: 0 gamma, 1 beta, 2
 * running mean, 3 running variance). */
static float *param(mp_graph *g, const char *node, int k) {
    return g->params[g->nodes[node_named(g, node)].first_param + k].data;
}

static void set_param(mp_graph *g, const char *node, int k, int C, float v) {
    float *w = param(g, node, k);
    for (int c = 0; c < C; c++) w[c] = v;
}

/* Forward overflows in resblocks' first block tail, "a_conv_bn" (fused with
 * "a_add" and "a_relu"), which the forward's replay names as an unfused
 * plan does:
 *  - OVF_BN: every gamma of a_conv_bn 3e38: its own output overflows
 *    (a_conv_bn);
 *  - OVF_SUM: a_conv's filter 0 and a_conv_bn's beta 2e38 (bn(x) = 2e38),
 *    the stem's gamma 0 and beta 2e38 (the residual 2e38): both finite, their
 *    sum overflows (a_add; before the replay ran the chain apart it named the
 *    batch norm);
 *  - OVF_HIDDEN: as OVF_SUM in channels 1-19, while channel 0 (a_conv's
 *    filter from input channel 0 kept, the stem's channel 0 plain) has
 *    gamma 1e36 and beta -3.4e38: bn(x) is -inf where x is below its mean
 *    and finite (negative) elsewhere, its scale finite (no NaN); the ReLU
 *    after the sum turns those -inf into 0, so only the sum's +inf shows in
 *    the fused output (a_conv_bn, as unfused: the chain's batch norm must
 *    run without the ReLU to see it).
 * The fused batch norm's own output cannot be read from the fused plan.
 * after ((B x 20 x h x w) + 40 floats): a_relu's output and a_conv_bn's
 * running mean and variance once the replay is done. */
enum { OVF_BN, OVF_SUM, OVF_HIDDEN };
static const char *const OVF_NAME[] = {"bn(x) overflows", "the sum overflows", "bn(x) -inf under the ReLU"};

static void provenance(bool fused, int kind, mp_precision prec, float *after) {
    const net_case *nc = &NETS[0];
    mp_model m = build(nc, prec);
    const int bn = node_named(m.g, "a_conv_bn"), add = node_named(m.g, "a_add");
    const int want_node = kind == OVF_SUM ? add : bn;
    if (kind == OVF_BN) set_param(m.g, "a_conv_bn", 0, 20, 3e38f);
    if (kind != OVF_BN) {
        float *w = param(m.g, "a_conv", 0); /* (20, 20, 3, 3) */
        for (int e = kind == OVF_HIDDEN ? 9 : 0; e < 20 * 20 * 3 * 3; e++) w[e] = 0.0f;
        set_param(m.g, "a_conv_bn", 1, 20, 2e38f);
        set_param(m.g, "stem_bn", 0, 20, 0.0f);
        set_param(m.g, "stem_bn", 1, 20, 2e38f);
    }
    if (kind == OVF_HIDDEN) { /* channel 0: the stem plain, a_conv_bn's values from -inf to about 0 */
        param(m.g, "stem_bn", 0)[0] = 1.0f, param(m.g, "stem_bn", 1)[0] = 0.0f;
        param(m.g, "a_conv_bn", 0)[0] = 1e36f, param(m.g, "a_conv_bn", 1)[0] = -3.4e38f;
    }
    const size_t nx = (size_t)B * nc->c * nc->h * nc->w, nact = (size_t)B * 20 * nc->h * nc->w;
    float *x = malloc(nx * sizeof *x), *act = malloc(nact * sizeof *act);
    MP_ASSERT(x && act);
    int32_t y[B];
    make_batch(nc, x, y);
    mp_plan_opts o = {.batch = B, .training = true, .loss = m.loss, .no_bn_add_relu_fusion = !fused};
    mp_plan *p = NULL;
    mp_nonfinite_site site;
    memset(&site, 0, sizeof site);
    char what[96];
    snprintf(what, sizeof what, "provenance (%s, %s, %s)", OVF_NAME[kind], mp_precision_name(prec),
             fused ? "fused" : "unfused");
    mp_status st = mp_plan_create(m.g, o, &p);
    const bool marked = st == MP_OK && p->nodes[bn].add_fused != 0;
    if (st == MP_OK) st = mp_plan_set_input(p, m.input, x, nx);
    if (st == MP_OK) st = mp_plan_set_labels(p, m.labels, y, B);
    if (st == MP_OK) st = mp_plan_forward(p);
    if (st == MP_OK) st = mp_plan_find_nonfinite_forward(p, &site);
    const char *named = site.found ? m.g->nodes[site.node].name : "nothing";
    const bool want = fused_wanted(nc, prec, false) > 0 && fused;
    CHECK(st == MP_OK, "%s: %s", what, mp_last_error());
    CHECK(marked == want, "%s: a_conv_bn is %sfused with its add, want %s", what, marked ? "" : "not ",
          want ? "fused" : "apart");
    CHECK(site.found && site.node == want_node && !site.backward && !strcmp(site.what, "output"),
          "%s: the replay names %s (%s), want %s", what, named, site.what, m.g->nodes[want_node].name);
    if (st == MP_OK && marked) {
        const mp_status rs = mp_plan_read(p, bn, act, nact);
        CHECK(rs == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "residual add") &&
                  strstr(mp_last_error(), "'a_conv_bn'"),
              "reading the fused batch norm's own output: %s", rs == MP_OK ? "no error" : mp_last_error());
    }
    /* what the replay leaves for a backward: the chain's output and the running statistics */
    const mp_status ra = st == MP_OK ? mp_plan_read(p, node_named(m.g, "a_relu"), after, nact) : st;
    CHECK(ra == MP_OK, "%s: reading a_relu after the replay: %s", what, mp_last_error());
    for (int k = 0; k < 2; k++)
        memcpy(after + nact + 20 * k, param(m.g, "a_conv_bn", 2 + k), 20 * sizeof *after);
    printf("%s %s, a_conv_bn %s: the replay names %s (%s)\n",
           st == MP_OK && site.node == want_node && marked == want ? "ok  " : "FAIL", what,
           marked ? "fused" : "apart", named, site.what);
    free(x), free(act);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* provenance() fused and unfused: after the replay the chain's output and
 * the batch norm's running statistics (updated once more by the replay)
 * are the same bits either way. */
static void provenance_pair(int kind, mp_precision prec) {
    const net_case *nc = &NETS[0];
    const size_t n = (size_t)B * 20 * nc->h * nc->w + 40;
    float *fused = malloc(n * sizeof *fused), *apart = malloc(n * sizeof *apart);
    MP_ASSERT(fused && apart);
    provenance(true, kind, prec, fused);
    provenance(false, kind, prec, apart);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&fused[i], &apart[i], sizeof *fused) != 0;
    CHECK(differ == 0, "provenance (%s, %s): after the replay %zu of a_relu's output and a_conv_bn's running "
          "statistics differ fused and unfused", OVF_NAME[kind], mp_precision_name(prec), differ);
    free(fused), free(apart);
}

int main(void) {
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_BF16, MP_PRECISION_AMP_FP16};
    for (size_t n = 0; n < sizeof NETS / sizeof NETS[0]; n++) {
        for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) exact_steps(&NETS[n], precs[i], false, false);
        exact_inference(&NETS[n], MP_PRECISION_FP32);
        exact_inference(&NETS[n], MP_PRECISION_AMP_BF16);
    }
    exact_steps(&NETS[0], MP_PRECISION_FP32, true, false);
    exact_steps(&NETS[0], MP_PRECISION_AMP_BF16, true, false);
    exact_steps(&NETS[0], MP_PRECISION_AMP_BF16, false, true); /* channels-first: nothing fused */
    for (int kind = OVF_BN; kind <= OVF_HIDDEN; kind++) {
        provenance_pair(kind, MP_PRECISION_FP32);
        provenance_pair(kind, MP_PRECISION_AMP_BF16);
    }
    return test_summary("test_bn_add_cpu");
}
