/* test_penalty_api.c — misuse of the gradient-penalty API (mixprec/penalty.h)
 * is one clear error naming the thing: bad weights and kinds, missing or
 * unconnected nodes, options a penalty cannot be combined with, calls out of
 * order, the error an op without tangents would give; and an overflowing input gradient under
 * amp-fp16 is a gradient overflow the dynamic scale backs off from (the
 * step skipped, the penalty NaN), after which the penalty is finite; a step
 * skipped on a forward overflow reports NaN for the penalty and its input
 * gradient alike. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "graph/second_order.h"
#include "ops/op.h"

enum { B = 4, F = 3 };

typedef struct {
    mp_graph *g;
    mp_node x, x2, out, t, loss, loss2;
} net;

static void build(net *n, mp_precision prec) {
    mp_graph *g = n->g = mp_graph_create();
    n->x = mp_graph_targets(g, "x", F);
    n->x2 = mp_graph_targets(g, "unused_input", F);
    mp_node h = mp_tanh(g, "t1", mp_linear(g, "fc1", n->x, (mp_linear_opts){.out_features = 4, .bias = true}));
    n->out = mp_linear(g, "head", h, (mp_linear_opts){.out_features = 1, .bias = true});
    n->t = mp_graph_targets(g, "t", 1);
    n->loss = mp_bce_with_logits(g, "loss", n->out, n->t);
    n->loss2 = mp_bce_with_logits(g, "loss2", n->out, n->t);
    mp_graph_mark_output(g, n->loss);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(g, 5);
}

static mp_status trainer(const net *n, mp_penalty pen, int accumulate, mp_device dev, mp_optimizer *opt,
                         mp_trainer **t) {
    mp_trainer_opts to = {.batch = B, .loss = n->loss, .optimizer = opt, .penalty = pen, .accumulate = accumulate,
                          .device = dev};
    return mp_trainer_create(n->g, &to, t);
}

/* An SGD trainer of n's loss with an R1 penalty of weight w on x -> out,
 * from loss scale init_scale (0: the default), that skipped steps never stop. */
static mp_trainer *r1_trainer(const net *n, float w, float init_scale, mp_optimizer **opt) {
    MP_ASSERT(mp_optimizer_create(n->g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}}, opt) == MP_OK);
    mp_trainer_opts to = {.batch = B, .loss = n->loss, .optimizer = *opt, .scaler = {.init_scale = init_scale},
                          .max_skip_share = 1,
                          .penalty = {.kind = MP_PENALTY_R1, .weight = w, .input = n->x, .output = n->out}};
    mp_trainer *t = NULL;
    MP_ASSERT(mp_trainer_create(n->g, &to, &t) == MP_OK);
    return t;
}

static void bad_options(void) {
    net n;
    build(&n, MP_PRECISION_FP32);
    mp_optimizer *opt = NULL;
    MP_ASSERT(mp_optimizer_create(n.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}}, &opt) == MP_OK);
    mp_trainer *t = NULL;
    const mp_device cpu = {0};
    const mp_penalty r1 = {.kind = MP_PENALTY_R1, .weight = 1, .input = n.x, .output = n.out};
    mp_penalty p = r1;
    p.weight = -1;
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "gradient penalty r1", "weight -1", ">= 0");
    p.weight = NAN;
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "weight nan");
    p.weight = INFINITY;
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "weight inf");
    p = r1, p.kind = (mp_penalty_kind)9;
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "kind 9 is not an mp_penalty_kind");
    p = r1, p.input = -1;
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "needs the graph's input node and output node");
    p = r1, p.input = n.t; /* created after the logits */
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "node 't' does not feed node 'head'");
    p = r1, p.input = n.x2; /* before the logits, on no path to them */
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "'unused_input' does not feed node 'head'");
    CHECK_ERR(trainer(&n, r1, 2, cpu, opt, &t), MP_ERR_UNSUPPORTED, "r1 with --accumulate 2");
    /* data parallel: refused before the communicator is touched (a stand-in) */
    static char comm_stand_in;
    mp_trainer_opts dp = {.batch = B, .loss = n.loss, .optimizer = opt, .penalty = r1,
                          .device = {.kind = MP_DEVICE_CUDA}, .dist = (mp_dist *)&comm_stand_in};
    CHECK_ERR(mp_trainer_create(n.g, &dp, &t), MP_ERR_UNSUPPORTED, "r1 in a data-parallel run: not supported");
    p = r1, p.group = 2;
    CHECK_ERR(trainer(&n, p, 0, cpu, opt, &t), MP_ERR_INVALID_ARG, "group 2 (the trainer has 1)");
    /* L2 needs a group with one loss */
    mp_trainer_opts two = {.batch = B, .n_groups = 1, .penalty = {.kind = MP_PENALTY_L2_GRAD, .weight = 1}};
    two.groups[0] = (mp_train_group){.optimizer = opt, .losses = {n.loss, n.loss2}, .weights = {1, 1}, .n_losses = 2};
    CHECK_ERR(mp_trainer_create(n.g, &two, &t), MP_ERR_INVALID_ARG, "l2: group 0 must minimize one loss");
    /* calls out of order */
    MP_ASSERT(trainer(&n, (mp_penalty){.kind = MP_PENALTY_L2_GRAD, .weight = 1}, 0, cpu, opt, &t) == MP_OK);
    float v = 0, gx[B * F];
    CHECK_ERR(mp_trainer_penalty_value(t, &v), MP_ERR_INVALID_ARG, "no step has run yet");
    CHECK_ERR(mp_trainer_penalty_input_grad(t, gx, B * F), MP_ERR_INVALID_ARG, "no R1 or WGAN-GP penalty");
    mp_trainer_destroy(t);
    MP_ASSERT(trainer(&n, (mp_penalty){0}, 0, cpu, opt, &t) == MP_OK);
    CHECK_ERR(mp_trainer_penalty_value(t, &v), MP_ERR_INVALID_ARG, "has no gradient penalty");
    mp_trainer_destroy(t);
    MP_ASSERT(trainer(&n, r1, 0, cpu, opt, &t) == MP_OK);
    const float x[B * F] = {0.1f, -0.2f, 0.3f}, tt[B] = {1, 0, 1, 0};
    MP_ASSERT(mp_trainer_set_input(t, n.x, x, B * F) == MP_OK && mp_trainer_set_input(t, n.t, tt, B) == MP_OK);
    mp_step_report r;
    MP_ASSERT(mp_trainer_step(t, NULL, &r) == MP_OK);
    CHECK(isfinite(r.penalty) && r.penalty > 0, "penalty %g", (double)r.penalty);
    CHECK_ERR(mp_trainer_penalty_input_grad(t, gx, 5), MP_ERR_SHAPE, "'x'", "asked for 5 values, it has 12");
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(n.g);
}

static void plan_order(void) {
    net n;
    build(&n, MP_PRECISION_FP32);
    mp_plan *p = NULL;
    mp_plan_opts po = {.batch = B, .training = true, .loss = n.loss, .input_grad = true, .input_grad_of = n.out,
                       .input_grad_wrt = n.x};
    CHECK_ERR(mp_plan_create(n.g, po, &p), MP_ERR_INVALID_ARG, "input_grad needs a second_order plan");
    po.second_order = true, po.training = false;
    CHECK_ERR(mp_plan_create(n.g, po, &p), MP_ERR_INVALID_ARG, "must be a training plan");
    po.training = true;
    MP_ASSERT(mp_plan_create(n.g, po, &p) == MP_OK);
    CHECK(mp_plan_tangent_bytes(p) > 0, "no tangent buffers");
    float gx[B * F] = {0}, tg[4] = {0};
    CHECK_ERR(mp_plan_forward_tangent(p), MP_ERR_INVALID_ARG, "before any forward");
    CHECK_ERR(mp_plan_backward_input_grad(p, 1), MP_ERR_INVALID_ARG, "before any forward");
    CHECK_ERR(mp_plan_forward(p), MP_ERR_INVALID_ARG, "targets 'x' has no batch yet");
    const float tt[B] = {1, 0, 1, 0};
    MP_ASSERT(mp_plan_set_input(p, n.x, gx, B * F) == MP_OK && mp_plan_set_input(p, n.t, tt, B) == MP_OK);
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    CHECK_ERR(mp_plan_read_input_grad(p, gx, B * F), MP_ERR_INVALID_ARG, "no mp_plan_backward_input_grad");
    CHECK_ERR(mp_plan_read_tangent_grad(p, "head.weight", tg, 4), MP_ERR_INVALID_ARG, "read_tangent_grad 'head.weight'",
              "no mp_plan_backward_tangent since the last forward");
    float bad[B * F] = {0};
    bad[5] = NAN;
    CHECK_ERR(mp_plan_set_tangent_input(p, bad, B * F), MP_ERR_NONFINITE, "set_tangent_input 'x'", "nan at element 5");
    bad[5] = 0, bad[2] = -INFINITY;
    CHECK_ERR(mp_plan_set_tangent_param(p, "head.weight", bad, 4), MP_ERR_NONFINITE, "set_tangent_param 'head.weight'",
              "-inf at element 2");
    CHECK_ERR(mp_plan_backward_tangent(p, n.loss), MP_ERR_INVALID_ARG, "before mp_plan_forward_tangent");
    CHECK_ERR(mp_plan_set_tangent_param(p, "nope.weight", NULL, 0), MP_ERR_INVALID_ARG, "'nope.weight' is not a trainable");
    CHECK_ERR(mp_plan_set_tangent_input(p, gx, 3), MP_ERR_SHAPE, "got 3 values, it has 12");
    MP_ASSERT(mp_plan_set_tangent_input(p, gx, B * F) == MP_OK && mp_plan_forward_tangent(p) == MP_OK);
    CHECK_ERR(mp_plan_backward_tangent(p, n.loss), MP_ERR_INVALID_ARG, "the last backward since the forward is none");
    MP_ASSERT(mp_plan_backward_input_grad(p, 1) == MP_OK);
    CHECK_ERR(mp_plan_backward_tangent(p, n.loss), MP_ERR_INVALID_ARG, "started at 'head'");
    CHECK(mp_plan_backward_tangent(p, n.out) == MP_OK, "%s", mp_last_error());
    CHECK(mp_plan_read_tangent_grad(p, "head.weight", tg, 4) == MP_OK, "%s", mp_last_error());
    CHECK_ERR(mp_plan_read_tangent_grad(p, "head.weight", NULL, 4), MP_ERR_INVALID_ARG,
              "read_tangent_grad: null output");
    CHECK_ERR(mp_plan_read_input_grad(p, NULL, B * F), MP_ERR_INVALID_ARG, "read_input_grad: null output");
    CHECK_ERR(mp_plan_read_input_grad(p, gx, 2), MP_ERR_SHAPE, "asked for 2 values");
    /* a new batch after the forward: every pass that reads the forward's values refuses until the next forward */
    MP_ASSERT(mp_plan_set_input(p, n.t, tt, B) == MP_OK);
    CHECK_ERR(mp_plan_backward_input_grad(p, 1), MP_ERR_INVALID_ARG, "backward_input_grad", "'t'", "new batch");
    CHECK_ERR(mp_plan_forward_tangent(p), MP_ERR_INVALID_ARG, "forward_tangent", "'t'", "new batch");
    CHECK_ERR(mp_plan_backward_tangent(p, n.out), MP_ERR_INVALID_ARG, "backward_tangent", "'t'", "new batch");
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    CHECK_ERR(mp_plan_read_tangent_grad(p, "head.weight", tg, 4), MP_ERR_INVALID_ARG, "no mp_plan_backward_tangent");
    CHECK_ERR(mp_plan_backward_input_grad(p, 1), MP_OK);
    mp_plan_destroy(p);
    CHECK_ERR(mp_plan_forward_tangent(NULL), MP_ERR_INVALID_ARG, "not compiled with opts.second_order");
    mp_graph_destroy(n.g);
}

/* Every op kind with a forward has both tangents on the CPU (a penalty can
 * pass through any graph); the error a future op without them would give
 * names the op, the node and the device. */
static void every_op_has_tangents(void) {
    for (int k = 0; k < MP_OP_COUNT; k++) {
        const mp_op_vtable *vt = mp_op_lookup((mp_op_kind)k);
        if (!vt || !vt->forward || k == MP_OP_INPUT || k == MP_OP_LABELS || k == MP_OP_TARGETS) continue;
        CHECK(vt->forward_tangent && vt->backward_tangent, "op %s lacks a CPU tangent", vt->name);
    }
    net n;
    build(&n, MP_PRECISION_FP32);
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = B, .training = true, .loss = n.loss, .second_order = true},
                             &p) == MP_OK);
    CHECK_ERR(mp_so_no_tangent(p, 2, "backward"), MP_ERR_UNSUPPORTED, "op linear (node 'fc1') has no backward tangent",
              "on the CPU", "gradient penalty cannot pass through it");
    mp_plan_destroy(p);
    mp_graph_destroy(n.g);
}

/* amp-fp16 at an initial scale of 2^30: the input gradient (seeded with the
 * scale on every logit) overflows fp16 — a gradient overflow: skipped, the
 * scale backs off, the penalty is NaN; at a lower scale it is finite. */
static void overflow_backs_off(void) {
    net n;
    build(&n, MP_PRECISION_AMP_FP16);
    mp_optimizer *opt = NULL;
    mp_trainer *t = r1_trainer(&n, 1, 0x1p30f, &opt);
    const float x[B * F] = {0.5f, -1, 2, 0.1f, 0.3f, -0.7f, 1, 1, -1, 0.2f, 0.4f, 0.9f}, tt[B] = {1, 0, 1, 0};
    MP_ASSERT(mp_trainer_set_input(t, n.x, x, B * F) == MP_OK && mp_trainer_set_input(t, n.t, tt, B) == MP_OK);
    mp_step_report r;
    MP_ASSERT(mp_trainer_step(t, NULL, &r) == MP_OK);
    CHECK(r.overflow.found && !r.overflow.forward && isnan(r.penalty) && r.loss_scale < 0x1p30f,
          "first step: overflow %d forward %d penalty %g scale %g", r.overflow.found, r.overflow.forward,
          (double)r.penalty, (double)r.loss_scale);
    int steps = 1;
    while (r.overflow.found && steps < 40) MP_ASSERT(mp_trainer_step(t, NULL, &r) == MP_OK), steps++;
    CHECK(!r.overflow.found && isfinite(r.penalty) && r.penalty > 0, "after %d steps: penalty %g", steps,
          (double)r.penalty);
    printf("amp-fp16 from scale 2^30: %lld steps skipped on input-gradient overflows, then penalty %g at scale %g\n",
           (long long)r.skipped_steps, (double)r.penalty, (double)r.loss_scale);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(n.g);
}

/* A step skipped on a forward overflow (1e6 is inf in fp16: inf - inf in fc1)
 * computes no penalty: its value and every element of its input gradient are
 * NaN, not the previous step's gradient or uninitialized memory. */
static void skipped_step_input_grad(void) {
    net n;
    build(&n, MP_PRECISION_AMP_FP16);
    mp_optimizer *opt = NULL;
    mp_trainer *t = r1_trainer(&n, 1, 0, &opt);
    const float x[B * F] = {0.5f, -1, 2, 0.1f, 0.3f, -0.7f, 1, 1, -1, 0.2f, 0.4f, 0.9f}, tt[B] = {1, 0, 1, 0};
    float big[B * F], gx[B * F], v = 0;
    memcpy(big, x, sizeof big);
    big[0] = 1e6f, big[1] = -1e6f, big[2] = 1e6f;
    mp_step_report r;
    MP_ASSERT(mp_trainer_set_input(t, n.x, x, B * F) == MP_OK && mp_trainer_set_input(t, n.t, tt, B) == MP_OK);
    MP_ASSERT(mp_trainer_step(t, NULL, &r) == MP_OK && !r.overflow.found); /* a finite gradient first */
    MP_ASSERT(mp_trainer_set_input(t, n.x, big, B * F) == MP_OK);
    MP_ASSERT(mp_trainer_step(t, NULL, &r) == MP_OK);
    CHECK(r.overflow.found && r.overflow.forward, "overflow %d forward %d", r.overflow.found, r.overflow.forward);
    CHECK(mp_trainer_penalty_value(t, &v) == MP_OK && isnan(v), "penalty value %g", (double)v);
    CHECK(mp_trainer_penalty_input_grad(t, gx, B * F) == MP_OK, "%s", mp_last_error());
    int nan = 0;
    for (int i = 0; i < B * F; i++) nan += isnan(gx[i]);
    CHECK(nan == B * F, "input gradient after a skipped step: %d of %d NaN (gx[0] %g)", nan, B * F, (double)gx[0]);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(n.g);
}

/* R1 with weight 3e38 on an input gradient of 1.2: the value (2.2e38) is a
 * float but the direction weight * 1.2 is not: a forward overflow of the
 * penalty (the step skipped, the value NaN), not a failed step. */
static void huge_weight_direction(void) {
    net n;
    build(&n, MP_PRECISION_FP32);
    float w1[12] = {1}, b1[4] = {0}, w2[4] = {1.2f}, b2[1] = {0}, x[B * F] = {0}, v = 0;
    MP_ASSERT(mp_graph_param_set(n.g, "fc1.weight", w1, 12) == 0 && mp_graph_param_set(n.g, "fc1.bias", b1, 4) == 0);
    MP_ASSERT(mp_graph_param_set(n.g, "head.weight", w2, 4) == 0 && mp_graph_param_set(n.g, "head.bias", b2, 1) == 0);
    mp_optimizer *opt = NULL;
    mp_trainer *t = r1_trainer(&n, 3e38f, 0, &opt);
    const float tt[B] = {1, 0, 1, 0};
    MP_ASSERT(mp_trainer_set_input(t, n.x, x, B * F) == MP_OK && mp_trainer_set_input(t, n.t, tt, B) == MP_OK);
    mp_step_report r;
    CHECK(mp_trainer_step(t, NULL, &r) == MP_OK, "%s", mp_last_error());
    CHECK(r.overflow.found && r.overflow.forward, "overflow %d forward %d", r.overflow.found, r.overflow.forward);
    CHECK(mp_trainer_penalty_value(t, &v) == MP_OK && isnan(v), "penalty value %g", (double)v);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(n.g);
}

int main(void) {
    bad_options();
    plan_order();
    every_op_has_tangents();
    overflow_backs_off();
    skipped_step_input_grad();
    huge_weight_direction();
    return test_summary("test_penalty_api");
}
