/* conv_grad_plan.h — what test_conv_wgrad and test_conv_dgrad share: a
 * conv2d's descriptor, and one training step of a small plan, input (3 x 8 x 8) -> conv c1 -> ReLU ->
 * conv c2 (no bias, 8 x 8 = 64 output pixels) -> global pool -> linear (test_conv_dw_wgrad's with a
 * depthwise c2),
 * with a conv gradient form forced by its mode setter (the form's
 * mp_*_mode_set, mode 1 or 0), and every trainable parameter's gradient,
 * concatenated, and how many of its convolutions took the form (taken:
 * whether a conv2d's state did). c2's backward data runs before its weight
 * gradient, in one workspace; c1's weight gradient reads what c2's
 * backward data wrote. */
#ifndef MP_TESTS_CONV_GRAD_PLAN_H
#define MP_TESTS_CONV_GRAD_PLAN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"

/* conv2d `name`: OC output channels, a k x k filter, groups 1, no bias. */
static inline mp_op_desc conv_grad_desc(const char *name, int OC, int k, int stride, int pad, int dil) {
    mp_op_desc d;
    memset(&d, 0, sizeof d);
    d.kind = MP_OP_CONV2D;
    d.name = name;
    d.attr.conv =
        (mp_conv_opts){.out_channels = OC, .kernel = k, .stride = stride, .padding = pad, .dilation = dil, .groups = 1};
    return d;
}

/* Every trainable parameter's gradient of g, concatenated (*grads: malloc'd). */
static inline void conv_grad_concat(const mp_graph *g, float **grads, int64_t *n) {
    *n = 0;
    for (int k = 0; k < g->n_params; k++)
        if (g->params[k].spec.trainable) *n += mp_shape_numel(&g->params[k].spec.shape);
    *grads = malloc((size_t)*n * sizeof **grads);
    MP_ASSERT(*grads);
    int64_t at = 0;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable) continue;
        memcpy(*grads + at, gp->grad, (size_t)mp_shape_numel(&gp->spec.shape) * sizeof **grads);
        at += mp_shape_numel(&gp->spec.shape);
    }
}

/* One training step of input (3 x hw x hw) -> conv c1 (16) -> ReLU -> conv
 * c2 (c2o) -> global pool -> linear in precision prec (channels_first: the
 * plan's option): the gradients (conv_grad_concat) and how many conv2d
 * states taken() says took a form. */
static inline mp_status conv_grad_run(int hw, mp_conv_opts c2o, mp_precision prec, bool channels_first,
                                      bool (*taken)(const void *state), float **grads, int64_t *n, int *n_taken) {
    enum { B = 6 };
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 3, hw, hw);
    mp_node c1 = mp_relu(g, "r1", mp_conv2d(g, "c1", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1}));
    mp_node c2 = mp_conv2d(g, "c2", c1, c2o);
    mp_node logits = mp_linear(g, "fc", mp_global_avgpool(g, "gap", c2), (mp_linear_opts){.out_features = 5});
    mp_node y = mp_graph_labels(g, "y"), loss = mp_softmax_cross_entropy(g, "loss", logits, y);
    mp_graph_mark_output(g, loss);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(g, 7);
    const int64_t nin = (int64_t)B * 3 * hw * hw;
    float *in = malloc((size_t)nin * sizeof *in);
    int32_t lab[B];
    MP_ASSERT(in);
    mp_rng r;
    mp_rng_seed(&r, 3);
    for (int64_t i = 0; i < nin; i++) in[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)mp_rng_below(&r, 5);
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(
        g, (mp_plan_opts){.batch = B, .training = true, .loss = loss, .channels_first = channels_first}, &p);
    *n_taken = 0;
    for (int i = 0; s == MP_OK && i < p->n; i++)
        *n_taken += p->nodes[i].call.desc->kind == MP_OP_CONV2D && taken(p->nodes[i].call.state);
    if (s == MP_OK) s = mp_plan_set_input(p, x, in, nin);
    if (s == MP_OK) s = mp_plan_set_labels(p, y, lab, B);
    if (s == MP_OK) s = mp_plan_forward(p);
    mp_graph_zero_grad(g);
    if (s == MP_OK) s = mp_plan_backward(p, 1.0f);
    conv_grad_concat(g, grads, n);
    mp_plan_destroy(p);
    mp_graph_destroy(g);
    free(in);
    return s;
}

/* conv_grad_run's plan (8 x 8, c2: 32 channels, 3x3) with a form's mode set. */
static inline mp_status conv_grad_plan_step(int (*mode_set)(int), bool (*taken)(const void *state), int mode,
                                            mp_precision prec, float **grads, int64_t *n, int *n_taken) {
    const int before = mode_set(mode);
    const mp_status s = conv_grad_run(8, (mp_conv_opts){.out_channels = 32, .kernel = 3, .padding = 1}, prec, false,
                                      taken, grads, n, n_taken);
    mode_set(before);
    return s;
}

/* The plan's gradients with the form on (mode on_mode) and forced off
 * agree within tol (relative L2); forced off no conv takes it, on some
 * does where can_take; what: the form, for the messages. */
static inline void conv_grad_plan_check(int (*mode_set)(int), int on_mode, bool (*taken)(const void *state),
                                        bool can_take, mp_precision prec, double tol, const char *what) {
    float *on = NULL, *off = NULL;
    int64_t n_on = 0, n_off = 0;
    int t_on = 0, t_off = 0;
    const mp_status a = conv_grad_plan_step(mode_set, taken, on_mode, prec, &on, &n_on, &t_on);
    const mp_status b = conv_grad_plan_step(mode_set, taken, 0, prec, &off, &n_off, &t_off);
    CHECK(a == MP_OK && b == MP_OK && n_on == n_off, "plan step (%s): %s", what, mp_last_error());
    CHECK(t_off == 0 && (t_on > 0) == can_take, "plan step (%s): forced on, %d convs took the form (want %s); "
          "forced off, %d", what, t_on, can_take ? "some" : "none", t_off);
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; a == MP_OK && b == MP_OK && i < n_on; i++) {
        const double e = (double)on[i] - off[i];
        d2 += e * e, r2 += (double)off[i] * off[i];
    }
    const double rel = r2 > 0 ? sqrt(d2 / r2) : INFINITY;
    CHECK(rel <= tol && r2 > 0, "plan step: gradients with %s differ by %.3g (relative L2) from the primitive's", what,
          rel);
    printf("%s plan step, %s (%d of its convs) against the primitive: %.2g (relative L2)\n",
           rel <= tol && r2 > 0 && t_off == 0 && (t_on > 0) == can_take ? "ok  " : "FAIL", what, t_on, rel);
    free(on), free(off);
}

#endif
