/* test_bn_dx_over_dy_cpu.c — a CPU batch norm's backward writing its
 * input gradient over its output gradient (graph/plan_inplace.h).
 *  1. which batch norms a plan gives one buffer for dx and dy, on a net
 *     where two may (c1_bn, c2_bn: each the only consumer of its conv, its
 *     dy read by nothing after it) and one may not (c3_bn: its conv's output
 *     also feeds a residual add, whose gradient the batch norm's is added
 *     to): two in fp32, amp-bf16 and bf16 channels-last plans, each such dx
 *     at its dy's offset; none in amp-fp16 (staged), channels-first,
 *     inference or repeat_backward plans or when told not to;
 *  2. two training steps of each such plan, and of cnn10's (seven of nine
 *     marked), against the same plan told not to
 *     (mp_plan_opts.no_bn_dx_over_dy), on arenas of NaN bytes, plain and
 *     with each forward replayed and the backward checked: the same loss,
 *     gradients and running statistics bit for bit (the checked backward
 *     tests each gradient as its node writes it, dx over dy included); the
 *     arena no larger;
 *  3. the buffers' lifetimes the rule hands the arena planner, on made-up
 *     lifetimes for the small net's plan: each marked dx loses its buffer
 *     and its dy's lasts until dx's last reader (no test net happens to
 *     reuse that memory in between, so part 2 cannot see it); a dx born
 *     before the batch norm's backward, or a dy read after it, keeps both
 *     buffers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "cpu_fusion_steps.h"
#include "graph/plan.h"
#include "graph/plan_inplace.h"
#include "models/models.h"

enum { B = 4, C = 8, H = 9, W = 7 };

/* input (3 x H x W) -> conv "c1" -> "c1_bn" + ReLU -> conv "c2" -> "c2_bn"
 * + ReLU -> conv "c3" = t -> "c3_bn" + ReLU = u -> add(t, u) -> global
 * pool -> linear (10 classes). */
static mp_model build(mp_precision prec) {
    mp_model m;
    mp_node x = cpu_net_begin(&m, H, W);
    mp_graph *g = m.g;
    const mp_conv_opts conv = {.out_channels = C, .kernel = 3, .padding = 1};
    x = mp_relu(g, "c1_relu", mp_conv_bn(g, "c1", x, conv));
    x = mp_relu(g, "c2_relu", mp_conv_bn(g, "c2", x, conv));
    const mp_node t = mp_conv2d(g, "c3", x, conv);
    const mp_node u = mp_relu(g, "c3_relu", mp_batchnorm2d(g, "c3_bn", t, (mp_batchnorm_opts){0}));
    cpu_net_end(&m, mp_add(g, "skip", t, u), prec, 23);
    return m;
}

/* Batch norms plan p writes dx over dy, -100 if one is marked but its dx
 * is not at its dy's offset (or c3_bn is marked). */
static int marked_count(const mp_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++) {
        if (!p->nodes[i].dx_over_dy) continue;
        n++;
        const int c = p->g->nodes[i].in[0];
        if (p->nodes[c].grad_off != p->nodes[i].grad_off || !strcmp(p->g->nodes[i].name, "c3_bn")) return -100;
    }
    return n;
}

/* How many of the net's batch norms a training plan of prec should mark:
 * two, where the CPU's fusions run (their channels-last kernels) and the
 * environment leaves it on. */
static int in_place_wanted(mp_precision prec) {
    return cpu_fusions_run(prec, false) && !mp_env_get()->no_bn_dx_over_dy ? 2 : 0;
}

/* Part 1: how many batch norms a plan made with o marks. */
static void expect_marked(const char *what, mp_precision prec, mp_plan_opts o, int want) {
    mp_model m = build(prec);
    o.loss = m.loss;
    mp_plan *p = NULL;
    const mp_status s = mp_plan_create(m.g, o, &p);
    const int got = s == MP_OK ? marked_count(p) : -1;
    CHECK(s == MP_OK && got == want, "%s (%s): %s, %d batch norms write dx over dy, want %d", what,
          mp_precision_name(prec), s == MP_OK ? "made" : mp_last_error(), got, want);
    printf("%s %s (%s): %d batch norms write dx over dy\n", s == MP_OK && got == want ? "ok  " : "FAIL", what,
           mp_precision_name(prec), got);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* cnn10 on 3 x 16 x 16 images: nine batch norms, seven of which may write
 * dx over dy (two feed pools fused in), on an arena whose buffers are
 * reused more than the small net's. */
static mp_model build_cnn10(mp_precision prec) {
    mp_model m;
    memset(&m, 0, sizeof m);
    m.g = mp_graph_create();
    MP_ASSERT(m.g && mp_model_cnn10(&m, 3, 16, 16, 10) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 29);
    return m;
}

/* Part 2: steps in place against apart, bit for bit, on the net build
 * makes (input 3 x h x w; want batch norms in place where they run). */
static void exact_steps(const char *net, mp_model (*make)(mp_precision), int h, int w, int want_on,
                        mp_precision prec, bool checked) {
    mp_model a = make(prec), b = make(prec);
    const mp_plan_opts oa = {.batch = B, .training = true, .loss = a.loss};
    mp_plan_opts ob = oa;
    ob.no_bn_dx_over_dy = true;
    char pn[64];
    snprintf(pn, sizeof pn, "%s %s%s", net, mp_precision_name(prec), checked ? ", checked" : "");
    cpu_fusion_compare(pn, "batch norms in place", &a, &b, oa, ob, h, w, checked, marked_count,
                       in_place_wanted(prec) ? want_on : 0);
    mp_model_free(&a);
    mp_model_free(&b);
}

enum { LIFE_SIZE = 4096, LIFE_LATE = 3 }; /* dx's last reader: LIFE_LATE steps after its conv's backward */

/* Gradient buffers (b[3k + 1]) as the rule wants them for each batch norm
 * of `marked`: dx born at the batch norm's backward and read until
 * LIFE_LATE steps after its conv's, dy dying at the batch norm's backward;
 * with `dx_early` (dy_late) dx born a step earlier (dy read a step later).
 * Every other buffer: none. */
static void made_up_lifetimes(const mp_plan *p, const bool *marked, bool dx_early, bool dy_late, mp_arena_buf *b) {
    const int n = p->n;
    memset(b, 0, (size_t)(3 * n + 3) * sizeof *b);
    for (int i = 0; i < n; i++) {
        if (!marked[i]) continue;
        const int c = p->g->nodes[i].in[0], step = 2 * n - 1 - i;
        b[3 * c + 1] = (mp_arena_buf){.size = LIFE_SIZE, .first = step - dx_early, .last = 2 * n - 1 - c + LIFE_LATE};
        b[3 * mp_plan_bn_dy_node(p, i) + 1] = (mp_arena_buf){.size = LIFE_SIZE, .first = 1, .last = step + dy_late};
    }
}

/* Part 3, on plan p (its marks taken as the batch norms to try). It
 * rewrites p's marks: p is only destroyed afterwards, never run. */
static void lifetimes(const char *what, mp_plan *p) {
    const int n = p->n;
    bool *marked = calloc((size_t)n, sizeof *marked);
    mp_arena_buf *b = calloc((size_t)(3 * n + 3), sizeof *b);
    MP_ASSERT(marked && b);
    int n_marked = 0;
    for (int i = 0; i < n; i++) n_marked += marked[i] = p->nodes[i].dx_over_dy;
    CHECK(n_marked > 0, "lifetimes %s: no batch norm marked to try", what);
    made_up_lifetimes(p, marked, false, false, b);
    mp_plan_inplace_buffers(p, b);
    int good = 0;
    for (int i = 0; i < n; i++) {
        if (!marked[i]) continue;
        const int c = p->g->nodes[i].in[0], j = mp_plan_bn_dy_node(p, i);
        const mp_arena_buf *dx = &b[3 * c + 1], *dy = &b[3 * j + 1];
        const int dx_last = 2 * n - 1 - c + LIFE_LATE;
        const bool ok = p->nodes[i].dx_over_dy && dx->size == 0 && dy->size == LIFE_SIZE && dy->first == 1 &&
                        dy->last == dx_last;
        CHECK(ok, "lifetimes %s: '%s': marked %d, dx %zu bytes, dy %zu bytes alive %d..%d (want 1, 0, %d, 1..%d)",
              what, p->g->nodes[i].name, p->nodes[i].dx_over_dy, dx->size, dy->size, dy->first, dy->last, LIFE_SIZE,
              dx_last);
        good += ok;
    }
    /* either lifetime off by a step: nothing marked, both buffers kept */
    int kept = 0;
    for (int late = 0; late < 2; late++) {
        made_up_lifetimes(p, marked, !late, late, b);
        mp_plan_inplace_buffers(p, b);
        for (int i = 0; i < n; i++) {
            if (!marked[i]) continue;
            const mp_arena_buf *dy = &b[3 * mp_plan_bn_dy_node(p, i) + 1];
            const bool ok = !p->nodes[i].dx_over_dy && b[3 * p->g->nodes[i].in[0] + 1].size == LIFE_SIZE &&
                            dy->last == 2 * n - 1 - i + late;
            CHECK(ok, "lifetimes %s: '%s' marked or its buffers changed, though its %s", what, p->g->nodes[i].name,
                  late ? "dy is read after its backward" : "dx is born before its backward");
            kept += ok;
        }
    }
    printf("%s lifetimes %s: %d of %d batch norms take dy's buffer, kept alive to dx's last reader; %d of %d "
           "refused a step off\n",
           n_marked > 0 && good == n_marked && kept == 2 * n_marked ? "ok  " : "FAIL", what, good, n_marked, kept, 2 * n_marked);
    free(b);
    free(marked);
}

static void lifetimes_of(mp_precision prec) {
    mp_model m = build(prec);
    mp_plan *p = NULL;
    const mp_status s = mp_plan_create(m.g, (mp_plan_opts){.batch = B, .training = true, .loss = m.loss}, &p);
    CHECK(s == MP_OK, "lifetimes %s: %s", mp_precision_name(prec), mp_last_error());
    if (s == MP_OK) lifetimes(mp_precision_name(prec), p);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

int main(void) {
    const mp_plan_opts train = {.batch = B, .training = true};
    expect_marked("training", MP_PRECISION_FP32, train, in_place_wanted(MP_PRECISION_FP32));
    expect_marked("training", MP_PRECISION_AMP_BF16, train, in_place_wanted(MP_PRECISION_AMP_BF16));
    expect_marked("training", MP_PRECISION_AMP_FP16, train, 0); /* staged batch norms */
    mp_plan_opts o = train;
    o.channels_first = true;
    expect_marked("channels-first", MP_PRECISION_FP32, o, 0);
    o = train;
    o.no_bn_dx_over_dy = true;
    expect_marked("told not to", MP_PRECISION_FP32, o, 0);
    o = train;
    o.repeat_backward = true;
    expect_marked("repeat_backward", MP_PRECISION_FP32, o, 0);
    o = train;
    o.training = false;
    expect_marked("inference", MP_PRECISION_FP32, o, 0);

    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_BF16};
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) exact_steps("net", build, H, W, 2, precs[i], false);
    exact_steps("net", build, H, W, 2, MP_PRECISION_AMP_BF16, true);
    exact_steps("cnn10", build_cnn10, 16, 16, 7, MP_PRECISION_FP32, false);
    exact_steps("cnn10", build_cnn10, 16, 16, 7, MP_PRECISION_AMP_BF16, false);
    if (in_place_wanted(MP_PRECISION_FP32)) lifetimes_of(MP_PRECISION_FP32);
    if (in_place_wanted(MP_PRECISION_AMP_BF16)) lifetimes_of(MP_PRECISION_AMP_BF16);
    return test_summary("test_bn_dx_over_dy_cpu");
}
