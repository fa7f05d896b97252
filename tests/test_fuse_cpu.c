/* test_fuse_cpu.c — batchnorm2d + ReLU fused on CPU plans (graph/plan_fuse.h)
 * against the same plans with no_fusion set, for every storage the
 * policies give the pair: f32 (fp32), bf16 run natively (amp-bf16, o2-bf16,
 * bf16) and f16 run staged (amp-fp16). Arenas are poisoned (NaN bytes)
 * before the first step, so a tensor read before it is written shows. Per
 * policy: which ReLUs fused (only those whose batch norm feeds nothing
 * else), the same loss, logits, parameter gradients and running statistics
 * (==, fused rounding keeps the sign, so at most a zero's sign differs), an
 * arena no larger, and inference plans giving the same logits; with
 * channels whose outputs sit on the ReLU's edge in every storage type. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"

enum { B = 6, CIN = 3, HW = 10, CLASSES = 5 };

typedef struct {
    mp_graph *g;
    mp_node x, y, loss, logits;
} net;

/* Two fusable pairs (b1-r1, b2-r2) and one batch norm with two consumers
 * (b3 feeds r3 and the add), which must stay apart. */
static net build(mp_precision prec) {
    net n;
    mp_graph *g = n.g = mp_graph_create();
    n.x = mp_graph_input(g, "x", CIN, HW, HW);
    mp_node c1 = mp_conv2d(g, "c1", n.x, (mp_conv_opts){.out_channels = 8, .kernel = 3, .padding = 1});
    mp_node r1 = mp_relu(g, "r1", mp_batchnorm2d(g, "b1", c1, (mp_batchnorm_opts){0}));
    mp_node c2 = mp_conv2d(g, "c2", r1, (mp_conv_opts){.out_channels = 8, .kernel = 3, .padding = 1});
    mp_node r2 = mp_relu(g, "r2", mp_batchnorm2d(g, "b2", c2, (mp_batchnorm_opts){0}));
    mp_node sum = mp_add(g, "sum", r2, r1);
    mp_node c3 = mp_conv2d(g, "c3", sum, (mp_conv_opts){.out_channels = 8, .kernel = 3, .padding = 1});
    mp_node b3 = mp_batchnorm2d(g, "b3", c3, (mp_batchnorm_opts){0});
    mp_node r3 = mp_relu(g, "r3", b3);
    mp_node both = mp_add(g, "both", r3, b3);
    mp_node pool = mp_avgpool2d(g, "pool", both, (mp_pool_opts){.kernel = 2});
    n.logits = mp_linear(g, "fc", mp_global_avgpool(g, "gap", pool), (mp_linear_opts){.out_features = CLASSES});
    n.y = mp_graph_labels(g, "y");
    n.loss = mp_softmax_cross_entropy(g, "loss", n.logits, n.y);
    mp_graph_mark_output(g, n.loss);
    mp_graph_mark_output(g, n.logits);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(g, 11);
    /* b1's first channels put every output on the ReLU's edge (gamma 0): +0, a value bf16 rounds to +0
     * (2^-134), one f16 storage rounds to +0 (2^-26) and one it keeps (2^-23); a fused backward must mask
     * exactly where the stored output is 0, however it finds that out */
    float w[8], b[8];
    MP_ASSERT(mp_graph_param_get(g, "b1.weight", w, 8) == MP_OK && mp_graph_param_get(g, "b1.bias", b, 8) == MP_OK);
    const float edge[4] = {0.0f, 0x1p-134f, 0x1p-26f, 0x1p-23f};
    for (int c = 0; c < 4; c++) w[c] = 0, b[c] = edge[c];
    MP_ASSERT(mp_graph_param_set(g, "b1.weight", w, 8) == MP_OK && mp_graph_param_set(g, "b1.bias", b, 8) == MP_OK);
    return n;
}

typedef struct {
    float loss, logits[B * CLASSES], eval_logits[B * CLASSES];
    float *params; /* gradients, then running statistics */
    int64_t n_params;
    int fused;
    size_t arena;
} result;

static mp_plan *make_plan(net *n, bool fuse, bool training, result *r) {
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(n->g, (mp_plan_opts){.batch = B, .training = training, .loss = n->loss, .no_fusion = !fuse},
                             &p) == MP_OK);
    memset(p->arena, 0xFF, p->arena_bytes); /* NaN in every float dtype */
    if (training) {
        r->arena = p->arena_bytes;
        for (int i = 0; i < p->n; i++) r->fused += p->nodes[i].fused_away;
        for (int i = 0; i < p->n; i++) /* the edge channels are meant for the channels-last kernels */
            if (!strcmp(p->g->nodes[i].name, "b1"))
                CHECK(mp_info_nhwc_out(&p->nodes[i].info), "b1 is not channels-last: the edge channels test less");
    }
    return p;
}

static result run(mp_precision prec, bool fuse) {
    result r = {0};
    net n = build(prec);
    mp_rng g;
    mp_rng_seed(&g, 5);
    float in[B * CIN * HW * HW];
    int32_t lab[B];
    for (int i = 0; i < B * CIN * HW * HW; i++) in[i] = (float)mp_rng_normal(&g);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)mp_rng_below(&g, CLASSES);
    mp_plan *p = make_plan(&n, fuse, true, &r);
    for (int step = 0; step < 2; step++) { /* the second step runs on memory the first left behind */
        MP_ASSERT(mp_plan_set_input(p, n.x, in, sizeof in / sizeof in[0]) == MP_OK);
        MP_ASSERT(mp_plan_set_labels(p, n.y, lab, B) == MP_OK);
        MP_ASSERT(mp_plan_forward(p) == MP_OK);
        mp_graph_zero_grad(n.g);
        MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
    }
    mp_plan_read(p, n.loss, &r.loss, 1);
    mp_plan_read(p, n.logits, r.logits, B * CLASSES);
    for (int k = 0; k < n.g->n_params; k++) r.n_params += mp_shape_numel(&n.g->params[k].spec.shape);
    r.params = malloc((size_t)r.n_params * sizeof(float));
    int64_t at = 0;
    for (int k = 0; k < n.g->n_params; k++) {
        const mp_gparam *gp = &n.g->params[k];
        int64_t m = mp_shape_numel(&gp->spec.shape);
        memcpy(r.params + at, gp->spec.trainable ? gp->grad : gp->data, (size_t)m * sizeof(float));
        at += m;
    }
    mp_plan_destroy(p);
    mp_plan *e = make_plan(&n, fuse, false, &r);
    MP_ASSERT(mp_plan_set_input(e, n.x, in, sizeof in / sizeof in[0]) == MP_OK);
    MP_ASSERT(mp_plan_set_labels(e, n.y, lab, B) == MP_OK);
    MP_ASSERT(mp_plan_forward(e) == MP_OK);
    mp_plan_read(e, n.logits, r.eval_logits, B * CLASSES);
    mp_plan_destroy(e);
    mp_graph_destroy(n.g);
    return r;
}

static int64_t differing(const float *a, const float *b, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !(a[i] == b[i]); /* NaN never equal */
    return bad;
}

int main(void) {
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_O2_BF16, MP_PRECISION_BF16,
                                  MP_PRECISION_AMP_FP16};
    for (size_t k = 0; k < sizeof precs / sizeof precs[0]; k++) {
        const char *name = mp_precision_name(precs[k]);
        result f = run(precs[k], true), u = run(precs[k], false);
        /* MIXPREC_NO_FUSION=1 in the environment turns the fusion off in every plan */
        const int want = mp_env_get()->no_fusion ? 0 : 2;
        CHECK(f.fused == want && u.fused == 0, "%s: %d ReLUs fused (unfused plan: %d), expected %d and 0%s", name,
              f.fused, u.fused, want, want ? "" : " (MIXPREC_NO_FUSION=1)");
        CHECK(isfinite(f.loss) && f.loss == u.loss, "%s: loss fused %.9g, unfused %.9g", name, f.loss, u.loss);
        int64_t bad = differing(f.logits, u.logits, B * CLASSES);
        CHECK(bad == 0, "%s: %lld logits differ", name, (long long)bad);
        bad = differing(f.params, u.params, f.n_params);
        CHECK(bad == 0, "%s: %lld of %lld parameter gradients / running statistics differ", name, (long long)bad,
              (long long)f.n_params);
        double g2 = 0;
        for (int64_t i = 0; i < f.n_params; i++) g2 += (double)f.params[i] * f.params[i];
        CHECK(g2 > 0, "%s: all-zero gradients", name);
        CHECK(f.arena <= u.arena, "%s: fused arena %zu bytes > unfused %zu", name, f.arena, u.arena);
        bad = differing(f.eval_logits, u.eval_logits, B * CLASSES);
        CHECK(bad == 0, "%s: %lld inference logits differ", name, (long long)bad);
        printf("%-9s %d ReLUs fused: loss %.6f == unfused, %lld gradients and statistics equal, arena %zu <= %zu "
               "bytes\n", name, f.fused, f.loss, (long long)f.n_params, f.arena, u.arena);
        free(f.params);
        free(u.params);
    }
    return test_summary("test_fuse_cpu");
}
