/* cpu_fusion_steps.h — what the tests of a fusion on CPU plans share
 * (test_bn_pool_cpu.c, test_bn_add_cpu.c, test_bn_dx_over_dy_cpu.c,
 * test_add_grad_alias_cpu.c; graph/plan_fuse.h, plan_inplace.h,
 * plan_grad_alias.h): whether a plan's batch norms run where CPU fusions
 * can, two training steps of a plan on an arena of NaN bytes, the
 * gradients' norm, the checks of a plan with a fusion against one
 * without (cpu_fusion_compare: all of them on two steps), and a small test
 * net's start and end. Static functions for one test program each (the
 * inline ones: not every program uses them). */
#ifndef MP_TESTS_CPU_FUSION_STEPS_H
#define MP_TESTS_CPU_FUSION_STEPS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"
#include "models/models.h"
#include "ops/cpu_fast.h"
#include "params_differ.h"

/* Whether a CPU plan of prec runs its batch norms natively channels-last
 * (f32, or bf16 storage unless MIXPREC_NATIVE_BF16=0 emulates it;
 * channels-last needs oneDNN's convolutions and the vector kernels), where
 * the CPU's fusions can run, and the environment leaves fusion and
 * channels-last on. */
static bool cpu_fusions_run(mp_precision prec, bool channels_first) {
    const mp_env *env = mp_env_get();
    const bool bf16 = prec == MP_PRECISION_AMP_BF16 || prec == MP_PRECISION_BF16;
    const bool native = prec == MP_PRECISION_FP32 || (bf16 && env->native_bf16 != 0);
    return native && !env->no_fusion && !env->no_channels_last && !channels_first &&
           mp_fast_isa_current() != MP_FAST_NONE && mp_onednn_available();
}

/* A small test net's start: m's graph and its input (3 x h x w), returned. */
static inline mp_node cpu_net_begin(mp_model *m, int h, int w) {
    memset(m, 0, sizeof *m);
    m->g = mp_graph_create();
    MP_ASSERT(m->g);
    return m->input = mp_graph_input(m->g, "input", 3, h, w);
}

/* Its end: x -> global pool "gap" -> linear "fc" (10 classes) as the logits, the precision applied, the
 * parameters drawn from seed. */
static inline void cpu_net_end(mp_model *m, mp_node x, mp_precision prec, uint64_t seed) {
    x = mp_linear(m->g, "fc", mp_global_avgpool(m->g, "gap", x), (mp_linear_opts){.out_features = 10, .bias = true});
    MP_ASSERT(mp_model_finish(m, x) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m->g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m->g, seed);
}

/* Two training steps of a plan made with o on m (the second on memory the
 * first left) on the batch x (nx values), y (o.batch labels): the loss, and
 * the gradients and running statistics in m's parameters; *n_fused: what
 * count says of the plan; checked: each forward replayed by the overflow
 * search and the backward checked (*found: what either found). */
static mp_status cpu_fusion_steps(mp_model *m, mp_plan_opts o, const float *x, size_t nx, const int32_t *y,
                                  bool checked, int (*count)(const mp_plan *), float *loss, int *n_fused,
                                  bool *found) {
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(m->g, o, &p);
    *n_fused = s == MP_OK ? count(p) : -1;
    *found = false;
    if (s == MP_OK) memset(p->arena, 0xFF, p->arena_bytes); /* NaN in every float dtype */
    for (int step = 0; step < 2 && s == MP_OK; step++) {
        mp_nonfinite_site site;
        memset(&site, 0, sizeof site);
        s = mp_plan_set_input(p, m->input, x, nx);
        if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, o.batch);
        if (s == MP_OK) s = mp_plan_forward(p);
        if (s == MP_OK && checked) s = mp_plan_find_nonfinite_forward(p, &site);
        *found |= site.found;
        if (s == MP_OK) s = mp_plan_read(p, m->loss, loss, 1);
        mp_graph_zero_grad(m->g);
        if (s == MP_OK) s = checked ? mp_plan_backward_checked(p, 1.0f, &site) : mp_plan_backward(p, 1.0f);
        *found |= site.found;
    }
    mp_plan_destroy(p);
    return s;
}

/* The sum of the squares of every trainable parameter's gradient. */
static double cpu_fusion_grad_norm2(const mp_model *m) {
    double g2 = 0;
    for (int k = 0; k < m->g->n_params; k++) {
        const mp_gparam *gp = &m->g->params[k];
        for (int64_t i = 0; gp->spec.trainable && i < mp_shape_numel(&gp->spec.shape); i++)
            g2 += (double)gp->grad[i] * gp->grad[i];
    }
    return g2;
}

/* After the same steps of a plan with a fusion (model a, loss la) and one
 * without (b, lb), named pn: the same loss and parameters (gradients,
 * running statistics) bit for bit, and gradients finite and not all zero;
 * *differ: how many parameters differ. Whether all of it held. */
static bool cpu_fusion_same(const char *pn, const mp_model *a, const mp_model *b, float la, float lb, int *differ) {
    const char *first = "-";
    double rel = 0;
    *differ = params_differ(a, b, NULL, &first, &rel);
    const double g2 = cpu_fusion_grad_norm2(a);
    const bool loss_same = isfinite(la) && !memcmp(&la, &lb, sizeof la), grads_live = g2 > 0 && isfinite(g2);
    CHECK(loss_same, "steps %s: loss %.9g, without the fusion %.9g", pn, la, lb);
    CHECK(*differ == 0, "steps %s: %d parameters' gradients or running statistics differ (first %s, by %.3g of its "
          "largest value)", pn, *differ, first, rel);
    CHECK(grads_live, "steps %s: gradients all zero or not finite (%g)", pn, g2);
    return loss_same && !*differ && grads_live;
}

/* A fusion's two training steps against the same plan without it, on a's and b's copies of one net (input
 * 3 x h x w; oa made with the fusion, ob without, both of oa.batch samples: normal noise, labels 1, 4, 7, ...): the
 * same loss, gradients and running statistics bit for bit, count (what it counts named by `what`) want on the fused
 * plan and 0 on the other, nothing non-finite found, and the fused plan's arena no larger. pn names the case in the
 * report. */
static inline void cpu_fusion_compare(const char *pn, const char *what, mp_model *a, mp_model *b, mp_plan_opts oa,
                                      mp_plan_opts ob, int h, int w, bool checked, int (*count)(const mp_plan *),
                                      int want) {
    const size_t nx = (size_t)oa.batch * 3 * h * w;
    float *x = malloc(nx * sizeof *x);
    int32_t *y = malloc((size_t)oa.batch * sizeof *y);
    MP_ASSERT(x && y);
    mp_rng r;
    mp_rng_seed(&r, 3);
    for (size_t i = 0; i < nx; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < oa.batch; i++) y[i] = (int32_t)((i * 3 + 1) % 10);
    float la = 0, lb = 0;
    int na = 0, nb = 0;
    bool fa = false, fb = false;
    const mp_status sa = cpu_fusion_steps(a, oa, x, nx, y, checked, count, &la, &na, &fa),
                    sb = cpu_fusion_steps(b, ob, x, nx, y, checked, count, &lb, &nb, &fb);
    CHECK(sa == MP_OK && sb == MP_OK, "steps %s: %s", pn, mp_last_error());
    CHECK(na == want && nb == 0, "steps %s: %d %s with the fusion and %d without, want %d and 0", pn, na, what, nb,
          want);
    CHECK(!fa && !fb, "steps %s: the overflow search found a NaN/inf in finite steps", pn);
    int differ = -1;
    const bool same = sa == MP_OK && sb == MP_OK && cpu_fusion_same(pn, a, b, la, lb, &differ);
    printf("%s steps %s, %d %s: loss %.9g / %.9g, %d of %d parameters differ\n",
           same && !fa && !fb && na == want ? "ok  " : "FAIL", pn, na, what, la, lb, differ, a->g->n_params);
    /* the arena, once more: fewer buffers can only shrink it */
    mp_plan *pa = NULL, *pb = NULL;
    const mp_status s2 = mp_plan_create(a->g, oa, &pa) == MP_OK ? mp_plan_create(a->g, ob, &pb) : MP_ERR_INTERNAL;
    const bool smaller = s2 == MP_OK && pa->arena_bytes <= pb->arena_bytes;
    CHECK(smaller, "arena %s: %zu bytes with the fusion, %zu without", pn, s2 == MP_OK ? pa->arena_bytes : 0,
          s2 == MP_OK ? pb->arena_bytes : 0);
    printf("%s arena %s: %zu bytes with the fusion, %zu without\n", smaller ? "ok  " : "FAIL", pn,
           s2 == MP_OK ? pa->arena_bytes : 0, s2 == MP_OK ? pb->arena_bytes : 0);
    mp_plan_destroy(pa);
    mp_plan_destroy(pb);
    free(x);
    free(y);
}

#endif
