/* test_plan_grad.c — whole-plan gradients against central differences of
 * the plan's own loss, on a network that uses every op whose backward skips
 * its inputs or its output (mp_op_vtable.bwd_skips): the planner frees
 * those activations after forward and reuses their memory, so a backward
 * that still read one would see another tensor's values and fail here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"

enum { B = 4 };

static float loss_of(mp_plan *p, mp_node loss) {
    float l = 0;
    MP_ASSERT(mp_plan_forward(p) == MP_OK && mp_plan_read(p, loss, &l, 1) == MP_OK);
    mp_plan_set_step(p, 0); /* same dropout masks every time */
    return l;
}

int main(void) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 3, 8, 8);
    mp_node c1 = mp_conv2d(g, "c1", x, (mp_conv_opts){.out_channels = 8, .kernel = 3, .padding = 1});
    mp_node b1 = mp_batchnorm2d(g, "b1", c1, (mp_batchnorm_opts){0});
    mp_node r1 = mp_relu(g, "r1", b1);
    mp_node c2 = mp_conv2d(g, "c2", r1, (mp_conv_opts){.out_channels = 8, .kernel = 3, .padding = 1, .bias = true});
    mp_node l2 = mp_leaky_relu(g, "l2", c2, 0.1f);
    mp_node t2 = mp_tanh(g, "t2", l2);
    mp_node sum = mp_add(g, "sum", t2, r1);
    mp_node gated = mp_mul(g, "gated", sum, t2); /* reads its inputs, not its output */
    mp_node mp = mp_maxpool2d(g, "mp", gated, (mp_pool_opts){.kernel = 2});
    mp_node ap = mp_avgpool2d(g, "ap", gated, (mp_pool_opts){.kernel = 2});
    mp_node parts[2] = {mp, ap};
    mp_node cat = mp_concat(g, "cat", parts, 2);
    mp_node c3 = mp_conv2d(g, "c3", cat, (mp_conv_opts){.out_channels = 6, .kernel = 3, .padding = 1});
    mp_node s3 = mp_sigmoid(g, "s3", c3);
    mp_node d3 = mp_dropout(g, "d3", s3, 0.25f);
    mp_node gap = mp_global_avgpool(g, "gap", d3);
    mp_node flat = mp_flatten(g, "flat", mp_avgpool2d(g, "ap2", d3, (mp_pool_opts){.kernel = 2}));
    mp_node both[2] = {gap, flat};
    mp_node fc = mp_linear(g, "fc", mp_concat(g, "feat", both, 2), (mp_linear_opts){.out_features = 5, .bias = true});
    mp_node y = mp_graph_labels(g, "y");
    mp_node loss = mp_softmax_cross_entropy(g, "loss", fc, y);
    mp_graph_mark_output(g, loss);
    mp_graph_init_params(g, 3);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(g, (mp_plan_opts){.batch = B, .training = true, .loss = loss}, &p) ==
              MP_OK);
    /* the arena must actually reuse memory for this test to mean anything */
    size_t all = 0;
    for (int i = 0; i < p->n; i++) all += 2 * (size_t)mp_shape_numel(&p->nodes[i].info.out) * sizeof(float);
    CHECK(p->arena_bytes < all, "arena %zu bytes is no smaller than all activations and gradients (%zu)",
          p->arena_bytes, all);
    mp_rng r;
    mp_rng_seed(&r, 5);
    float in[B * 3 * 64];
    int32_t lab[B];
    for (int i = 0; i < B * 3 * 64; i++) in[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)mp_rng_below(&r, 5);
    mp_plan_set_input(p, x, in, B * 3 * 64);
    mp_plan_set_labels(p, y, lab, B);
    /* batch statistics move with each probe: part of the function (running
     * statistics also move, but the training loss does not read them) */
    loss_of(p, loss);
    mp_graph_zero_grad(g);
    MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
    int checked = 0;
    double worst = 0;
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable) continue;
        int64_t n = mp_shape_numel(&gp->spec.shape);
        for (int probe = 0; probe < 3; probe++) {
            int64_t j = (int64_t)mp_rng_below(&r, (uint64_t)n);
            float saved = gp->data[j], h = 1e-2f * fmaxf(1.0f, fabsf(saved));
            gp->data[j] = saved + h;
            double lp = loss_of(p, loss);
            gp->data[j] = saved - h;
            double lm = loss_of(p, loss);
            gp->data[j] = saved;
            double num = (lp - lm) / (2.0 * h), ana = gp->grad[j];
            /* relative, with a floor: f32 differences through max-pool kinks are
             * good to ~1e-3 absolute */
            double err = fabs(num - ana) / fmax(fmax(fabs(num), fabs(ana)), 2e-2);
            if (err > worst) worst = err;
            CHECK(err < 5e-2, "%s[%lld]: analytic %g, numeric %g", gp->name, (long long)j, ana, num);
            checked++;
        }
    }
    printf("plan gradients vs central differences: %d probes over every trainable tensor, worst rel. error %.2e; "
           "arena %zu of %zu bytes\n", checked, worst, p->arena_bytes, all);
    mp_plan_destroy(p);
    mp_graph_destroy(g);
    return test_summary("test_plan_grad");
}
