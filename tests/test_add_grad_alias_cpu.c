/* test_add_grad_alias_cpu.c — a residual add handing its output gradient to
 * its inputs without a copy (graph/plan_grad_alias.h), on CPU plans.
 *  1. which inputs a plan shares: with the CPU's batch norms writing dx
 *     in their own buffers (mp_plan_opts.no_bn_dx_over_dy, as on a GPU),
 *     wrn-10-1's three pre-activation blocks (an identity block
 *     add(conv2, x) and two projection blocks add(conv2, shortcut)): both
 *     inputs of each add; wrn-16-1's six, three chains of two blocks (one
 *     per stage): both of each; a net where one input feeds the other's producer,
 *     add(t, conv(t)): only t, since conv's backward reads conv(t)'s
 *     gradient while it adds into t's; add(add(t, u), conv(t)): one input
 *     of each add (conv(t)'s backward adds into t's gradient while u's and
 *     conv(t)'s are still to be read; a wrong rule sharing all four
 *     changes a weight gradient there); by default wrn-16-1's three adds
 *     whose output feeds a second block (its output gradient then read by
 *     the add alone), not the three whose output's only reader is a batch
 *     norm writing its dx over its dy there (the add's output gradient
 *     lives in that batch norm's buffer: not shared); every shared input's
 *     gradient at its add's offset (chains followed); none in inference,
 *     repeat_backward or second_order plans, when told not to, or where
 *     the adds run on staged f32 copies (amp-fp16; bf16 under
 *     MIXPREC_NATIVE_BF16=0, a ctest variant, as is MIXPREC_ADD_GRAD_ALIAS=0);
 *  2. two training steps of each such plan against the same plan told not
 *     to (mp_plan_opts.no_add_grad_alias), on arenas of NaN bytes, plain
 *     and with each forward replayed and the backward checked: the same
 *     loss, gradients and running statistics bit for bit; the arena no
 *     larger. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "cpu_fusion_steps.h"
#include "graph/plan.h"
#include "graph/plan_grad_alias.h"
#include "models/models.h"

enum { B = 4, C = 8, H = 8, W = 8 };

/* input (3 x H x W) -> conv "a" = t -> conv "b" = u -> add(t, u) -> global pool -> linear (10 classes): t's
 * gradient is written by the add, then added to by b's backward, which reads u's. */
static mp_model build_feed(mp_precision prec) {
    mp_model m;
    const mp_node x = cpu_net_begin(&m, H, W);
    const mp_conv_opts conv = {.out_channels = C, .kernel = 3, .padding = 1};
    const mp_node t = mp_conv2d(m.g, "a", x, conv), u = mp_conv2d(m.g, "b", t, conv);
    cpu_net_end(&m, mp_add(m.g, "skip", t, u), prec, 23);
    return m;
}

/* input -> conv "a" = t, conv "b" = u, conv "c" = w (of t) -> s = add "inner"(t, u) -> add "outer"(s, w) -> global
 * pool -> linear: c's backward adds into t's gradient while b's has still to read u's, and while it reads w's. The
 * adds taken in forward order, each input in turn: "inner" shares t's, then not u's (c would change it under b);
 * "outer" shares s's (t's with it), then not w's (c would add into the memory it reads). */
static mp_model build_cross(mp_precision prec) {
    mp_model m;
    const mp_node x = cpu_net_begin(&m, H, W);
    const mp_conv_opts conv = {.out_channels = C, .kernel = 3, .padding = 1};
    const mp_node t = mp_conv2d(m.g, "a", x, conv), u = mp_conv2d(m.g, "b", x, conv), w = mp_conv2d(m.g, "c", t, conv);
    cpu_net_end(&m, mp_add(m.g, "outer", mp_add(m.g, "inner", t, u), w), prec, 31);
    return m;
}

static mp_model build_wrn(mp_precision prec, int depth) {
    mp_model m;
    memset(&m, 0, sizeof m);
    m.g = mp_graph_create();
    MP_ASSERT(m.g && mp_model_wide_resnet(&m, depth, 1, 3, H, W, 10) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 29);
    return m;
}

static mp_model build_wrn10(mp_precision prec) { return build_wrn(prec, 10); }
static mp_model build_wrn16(mp_precision prec) { return build_wrn(prec, 16); }

/* The inputs plan p shares (bits summed over its adds), -100 if a shared input's gradient is not at its add's
 * offset. */
static int shared_count(const mp_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < 2; k++) {
            if (!(p->nodes[i].grad_alias & (1u << k))) continue;
            n++;
            if (p->nodes[p->g->nodes[i].in[k]].grad_off != p->nodes[i].grad_off) return -100;
        }
    return n;
}

/* Which inputs of the add named `add` plan p shares (its grad_alias bits), -1 if there is no such node. */
static int bits_of(const mp_plan *p, const char *add) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->g->nodes[i].name, add)) return p->nodes[i].grad_alias;
    return -1;
}

/* want, where prec's adds run on the arena's tensors (f32, or bf16 storage on the native kernels) and the
 * environment leaves the sharing on; else 0. */
static int where_shared(mp_precision prec, int want) {
    const bool bf16 = prec == MP_PRECISION_AMP_BF16 || prec == MP_PRECISION_BF16;
    const bool on_arena = prec == MP_PRECISION_FP32 || (bf16 && mp_env_get()->native_bf16 != 0);
    return on_arena && !mp_env_get()->no_add_grad_alias ? want : 0;
}

/* Part 1: how many inputs a plan made with o on the net make builds shares; bits of the add named `add` (when
 * not NULL) as want_bits. */
static void expect_shared(const char *what, mp_model (*make)(mp_precision), mp_precision prec, mp_plan_opts o,
                          int want, const char *add, int want_bits) {
    mp_model m = make(prec);
    o.loss = m.loss;
    mp_plan *p = NULL;
    const mp_status s = mp_plan_create(m.g, o, &p);
    const int got = s == MP_OK ? shared_count(p) : -1, bits = s == MP_OK && add ? bits_of(p, add) : want_bits;
    const bool ok = s == MP_OK && got == want && bits == want_bits;
    CHECK(ok, "%s (%s): %s, %d inputs share their add's gradient, want %d; '%s' bits %d, want %d", what,
          mp_precision_name(prec), s == MP_OK ? "made" : mp_last_error(), got, want, add ? add : "-", bits, want_bits);
    printf("%s %s (%s): %d add inputs share the add's output gradient\n", ok ? "ok  " : "FAIL", what,
           mp_precision_name(prec), got);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* Part 2: shared against copied, bit for bit, on the net make builds (want_on inputs shared). */
static void exact_steps(const char *net, mp_model (*make)(mp_precision), int want_on, mp_precision prec,
                        bool checked, bool dx_over_dy) {
    mp_model a = make(prec), b = make(prec);
    const mp_plan_opts oa = {.batch = B, .training = true, .loss = a.loss, .no_bn_dx_over_dy = !dx_over_dy};
    mp_plan_opts ob = oa;
    ob.no_add_grad_alias = true;
    char pn[64];
    snprintf(pn, sizeof pn, "%s %s%s%s", net, mp_precision_name(prec), checked ? ", checked" : "",
             dx_over_dy ? ", dx over dy" : "");
    cpu_fusion_compare(pn, "inputs shared", &a, &b, oa, ob, H, W, checked, shared_count, where_shared(prec, want_on));
    mp_model_free(&a);
    mp_model_free(&b);
}

int main(void) {
    const mp_precision f32 = MP_PRECISION_FP32, abf16 = MP_PRECISION_AMP_BF16;
    const mp_plan_opts train = {.batch = B, .training = true, .no_bn_dx_over_dy = true};
    expect_shared("wrn-10-1", build_wrn10, f32, train, where_shared(f32, 6), "layer1_0_add", where_shared(f32, 3));
    expect_shared("wrn-10-1", build_wrn10, abf16, train, where_shared(abf16, 6), "layer2_0_add", where_shared(abf16, 3));
    expect_shared("wrn-16-1", build_wrn16, f32, train, where_shared(f32, 12), "layer1_1_add", where_shared(f32, 3));
    expect_shared("add(t, conv(t))", build_feed, f32, train, where_shared(f32, 1), "skip", where_shared(f32, 1));
    expect_shared("add(add(t, u), conv(t))", build_cross, f32, train, where_shared(f32, 2), "inner", where_shared(f32, 1));
    expect_shared("add(add(t, u), conv(t))", build_cross, f32, train, where_shared(f32, 2), "outer", where_shared(f32, 1));
    expect_shared("wrn-10-1 staged", build_wrn10, MP_PRECISION_AMP_FP16, train, 0, NULL, 0);
    mp_plan_opts o = train;
    o.no_bn_dx_over_dy = false; /* the default: where a batch norm writes dx over dy, the add's own is not shared */
    const bool over = cpu_fusions_run(f32, false) && !mp_env_get()->no_bn_dx_over_dy;
    expect_shared("wrn-16-1, dx over dy", build_wrn16, f32, o, where_shared(f32, over ? 6 : 12), "layer1_1_add",
                  where_shared(f32, over ? 0 : 3));
    mp_plan_opts told = train, repeat = train, second = train, inference = train;
    told.no_add_grad_alias = repeat.repeat_backward = second.second_order = true;
    inference.training = false;
    const struct {
        const char *what;
        mp_plan_opts o;
    } none[] = {{"told not to", told}, {"repeat_backward", repeat}, {"second_order", second}, {"inference", inference}};
    for (size_t k = 0; k < sizeof none / sizeof none[0]; k++)
        expect_shared(none[k].what, build_wrn10, f32, none[k].o, 0, NULL, 0);

    const mp_precision precs[] = {f32, abf16, MP_PRECISION_BF16};
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) {
        exact_steps("wrn-10-1", build_wrn10, 6, precs[i], false, false);
        exact_steps("add(t, conv(t))", build_feed, 1, precs[i], false, false);
        exact_steps("add(add(t, u), conv(t))", build_cross, 2, precs[i], false, false);
    }
    exact_steps("wrn-16-1", build_wrn16, 12, f32, false, false);
    exact_steps("wrn-16-1", build_wrn16, 12, abf16, true, false);
    exact_steps("wrn-16-1", build_wrn16, over ? 6 : 12, f32, false, true);
    exact_steps("add(t, conv(t))", build_feed, 1, f32, true, false);
    return test_summary("test_add_grad_alias_cpu");
}
