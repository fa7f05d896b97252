/* test_api_lifetimes.c — the public API where objects outlive or precede
 * one another, and where a refused call must leave nothing changed:
 *  - nodes added, or parameters shared, after an optimizer or a trainer was
 *    made from the graph: refused, naming the node (the optimizer would
 *    never train the new layer; the plan would read freed node lists);
 *  - a graph destroyed before its trainer and optimizer: freed after the
 *    last of them (the suite runs under ASan, which sees a use after free);
 *  - reads into a NULL buffer, parse helpers without an output pointer, a
 *    plan option outside its enum;
 *  - a batch whose labels are outside the loss's classes: refused before
 *    the forward, so batch norm's running statistics stay as they were;
 *  - a parameter gradient before any step; a checkpoint whose epoch no load
 *    would accept; NaN images held in fp32 (the error says the data, not a
 *    precision setting, is at fault). */
#define _GNU_SOURCE /* nftw in scratch_dir.h */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_net.h"
#include "check.h"
#include "scratch_dir.h"

static char dir[4096];

/* make_net's classifier (3 classes), its optimizer and trainer (batch 4), and one batch */
typedef net_fixture fixture;

static mp_status step(fixture *f) {
    return mp_trainer_step(f->t, &(mp_batch){.images = f->x, .labels = f->y, .n = 4}, NULL);
}

/* with_trainer 0: the graph and optimizer only; steps: taken on the batch */
static fixture *fixture_create(bool with_trainer, int steps) {
    fixture *f = calloc(1, sizeof *f);
    MP_ASSERT(f);
    f->n = make_net(4, 3);
    f->o = sgd(f->n.g);
    if (with_trainer)
        MP_ASSERT(mp_trainer_create(f->n.g, &(mp_trainer_opts){.batch = 4, .input = f->n.input, .labels = f->n.labels,
                                                               .loss = f->n.loss, .optimizer = f->o},
                                    &f->t) == MP_OK);
    small_batch(f->x, f->y);
    for (int s = 0; s < steps; s++) CHECK_ERR(step(f), MP_OK);
    return f;
}

static void fixture_destroy(fixture *f) {
    mp_trainer_destroy(f->t);
    mp_optimizer_destroy(f->o);
    mp_graph_destroy(f->n.g);
    free(f);
}

static void test_graph_frozen(void) {
    for (int with_trainer = 0; with_trainer < 2; with_trainer++) {
        fixture *f = fixture_create(with_trainer, 0);
        CHECK(mp_relu(f->n.g, "late_relu", f->n.logits) < 0, "a node added after the optimizer%s got an index",
              with_trainer ? " and trainer" : "");
        CHECK_ERR(mp_graph_status(f->n.g), MP_ERR_INVALID_ARG, "late_relu", "add every node first");
        fixture_destroy(f);
    }
    /* share_params after an optimizer: it holds the parameters share_params would free */
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "image", 1, 4, 4);
    mp_node a = mp_linear(g, "fc1", mp_flatten(g, "flat", x), (mp_linear_opts){.out_features = 16});
    mp_node b = mp_linear(g, "fc2", a, (mp_linear_opts){.out_features = 16});
    MP_ASSERT(mp_graph_status(g) == MP_OK);
    mp_optimizer *o = sgd(g);
    CHECK_ERR(mp_graph_share_params(g, b, a), MP_ERR_INVALID_ARG, "fc2", "optimizer");
    mp_optimizer_destroy(o);
    CHECK_ERR(mp_graph_share_params(g, b, a), MP_OK); /* with none alive, as before */
    mp_graph_destroy(g);
}

static void test_graph_destroyed_first(void) {
    fixture *f = fixture_create(true, 1);
    float w[36];
    mp_graph_destroy(f->n.g); /* the trainer still reads it */
    CHECK_ERR(step(f), MP_OK);
    CHECK_ERR(mp_trainer_param_get(f->t, "conv.weight", w, 36), MP_OK);
    mp_trainer_destroy(f->t);
    mp_optimizer_destroy(f->o); /* the last user: the graph goes with it */
    free(f);
}

static void test_null_outputs(void) {
    fixture *f = fixture_create(true, 0);
    float w[36];
    CHECK_ERR(mp_trainer_grad_get(f->t, "conv.weight", w, 36), MP_ERR_INVALID_ARG, "conv.weight",
              "no step has run yet");
    CHECK_ERR(step(f), MP_OK);
    CHECK_ERR(mp_trainer_grad_get(f->t, "conv.weight", w, 36), MP_OK);
    CHECK_ERR(mp_trainer_read(f->t, f->n.loss, NULL, 1), MP_ERR_INVALID_ARG, "loss", "null buffer");
    CHECK_ERR(mp_trainer_loss(f->t, NULL), MP_ERR_INVALID_ARG, "null pointer");
    fixture_destroy(f);
    mp_plan *p = NULL;
    net n = make_net(4, 3);
    CHECK_ERR(mp_plan_create(n.g, (mp_plan_opts){.batch = 4, .native_bf16 = (mp_native_mode)9}, &p),
              MP_ERR_INVALID_ARG, "native_bf16 9");
    mp_graph_destroy(n.g);
    CHECK_ERR(mp_optim_kind_parse("sgd", NULL), MP_ERR_INVALID_ARG, "output pointer");
    CHECK_ERR(mp_device_parse("cpu", NULL), MP_ERR_INVALID_ARG, "output pointer");
}

static void test_labels_refused_first(void) {
    fixture *f = fixture_create(true, 1);
    float before[2][4], after[2][4];
    CHECK_ERR(mp_trainer_param_get(f->t, "bn.running_mean", before[0], 4), MP_OK);
    CHECK_ERR(mp_trainer_param_get(f->t, "bn.running_var", before[1], 4), MP_OK);
    f->y[3] = 9;
    CHECK_ERR(step(f), MP_ERR_INVALID_ARG, "label", "sample 3 has label 9", "[0, 3)", "'loss'");
    f->y[3] = -1;
    CHECK_ERR(step(f), MP_ERR_INVALID_ARG, "label -1");
    CHECK_ERR(mp_trainer_param_get(f->t, "bn.running_mean", after[0], 4), MP_OK);
    CHECK_ERR(mp_trainer_param_get(f->t, "bn.running_var", after[1], 4), MP_OK);
    CHECK(!memcmp(before, after, sizeof before), "refused batches moved bn's running statistics (mean %g -> %g)",
          before[0][0], after[0][0]);
    f->y[3] = 2;
    CHECK_ERR(step(f), MP_OK);
    fixture_destroy(f);
}

static void test_checkpoint_epoch_and_nan_data(void) {
    fixture *f = fixture_create(true, 1);
    char path[4200];
    snprintf(path, sizeof path, "%s/epoch.safetensors", dir);
    CHECK_ERR(mp_trainer_save(f->t, path, &(mp_checkpoint_info){.model = "m", .epoch = -1}), MP_ERR_INVALID_ARG,
              "epoch -1", "[0, 100000]");
    CHECK_ERR(mp_trainer_save(f->t, path, &(mp_checkpoint_info){.model = "m", .epoch = 100001}), MP_ERR_INVALID_ARG,
              "epoch 100001");
    CHECK_ERR(mp_trainer_save(f->t, path, &(mp_checkpoint_info){.model = "m", .epoch = 100000}), MP_OK);
    mp_checkpoint_info info = {.model = "m"};
    CHECK_ERR(mp_trainer_load(f->t, path, &info), MP_OK);
    CHECK(info.epoch == 100000, "loaded epoch %d", info.epoch);
    /* NaN images: steps are skipped, then one error that blames the data */
    f->x[5] = NAN;
    mp_status s = MP_OK;
    for (int k = 0; k < 10 && s == MP_OK; k++) s = step(f);
    CHECK(s == MP_ERR_NONFINITE, "NaN images: %s after up to 10 steps: %s", mp_status_name(s), mp_last_error());
    CHECK(strstr(mp_last_error(), "check the data") && strstr(mp_last_error(), "image") &&
              !strstr(mp_last_error(), "--precision"),
          "NaN images: the error does not blame the data: %s", mp_last_error());
    fixture_destroy(f);
}

/* A graph's construction error is kept with its message: every call that
 * refuses the graph later quotes it, whatever failed in between (the plan
 * quoted the last error of any call before, the others none). */
static void test_graph_error_kept(void) {
    mp_graph *g = mp_graph_create();
    CHECK(!strcmp(mp_graph_error(g), ""), "a new graph has an error: %s", mp_graph_error(g));
    mp_node x = mp_graph_input(g, "image", 1, 8, 8);
    CHECK(mp_relu(g, "image", x) < 0, "a duplicate name got a node");
    mp_relu(g, "later", x); /* refused too: the first error stays */
    CHECK(strstr(mp_graph_error(g), "duplicate node name 'image'"), "mp_graph_error: %s", mp_graph_error(g));
    mp_dataset *d = NULL;
    CHECK(mp_dataset_create_synthetic(0, 1, 8, 8, 3, 1, &d) != MP_OK, "an empty synthetic dataset was made");
    mp_plan *p = NULL;
    CHECK_ERR(mp_plan_create(g, (mp_plan_opts){.batch = 4}, &p), MP_ERR_INVALID_ARG,
              "plan: the graph has a construction error: graph: duplicate node name 'image'");
    CHECK(!strstr(mp_last_error(), "synthetic"), "the plan quoted an unrelated error: %s", mp_last_error());
    CHECK_ERR(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_BF16}), MP_ERR_INVALID_ARG,
              "precision policy: the graph has a construction error: graph: duplicate node name 'image'");
    mp_optimizer *o = NULL;
    CHECK_ERR(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f}}, &o),
              MP_ERR_INVALID_ARG, "optimizer: the graph has a construction error: graph: duplicate node name");
    CHECK(!strcmp(mp_graph_error(NULL), "null graph"), "mp_graph_error(NULL): %s", mp_graph_error(NULL));
    mp_graph_destroy(g);
}

/* Two trainers (or a trainer and a training plan) over one graph on the CPU
 * share the graph's gradient arrays: while one is in the middle of an
 * accumulated step, the other's step or backward is refused before its
 * forward (it would overwrite the micro-batches' sum: the accumulating
 * trainer then stepped on another batch's gradients), and its gradients
 * come out as those of the trainer alone. */
static void test_two_trainers_accumulating(void) {
    float x[4 * 64], y_grad[2][36];
    int32_t y[4];
    small_batch(x, y);
    const mp_batch b = {.images = x, .labels = y, .n = 4};
    for (int shared = 0; shared < 2; shared++) {
        net n = make_net(4, 3);
        mp_optimizer *oa = sgd(n.g), *ob = sgd(n.g);
        mp_trainer *ta = NULL, *tb = NULL;
        MP_ASSERT(mp_trainer_create(n.g, &(mp_trainer_opts){.batch = 4, .input = n.input, .labels = n.labels,
                                                            .loss = n.loss, .optimizer = oa, .accumulate = 2},
                                    &ta) == MP_OK);
        CHECK_ERR(mp_trainer_step(ta, &b, NULL), MP_OK);
        if (shared) {
            MP_ASSERT(mp_trainer_create(n.g, &(mp_trainer_opts){.batch = 4, .input = n.input, .labels = n.labels,
                                                                .loss = n.loss, .optimizer = ob},
                                        &tb) == MP_OK);
            float before[4], after[4];
            CHECK_ERR(mp_trainer_param_get(tb, "bn.running_mean", before, 4), MP_OK);
            CHECK_ERR(mp_trainer_step(tb, &b, NULL), MP_ERR_INVALID_ARG, "another trainer of this graph",
                      "middle of an accumulated step");
            CHECK_ERR(mp_trainer_param_get(tb, "bn.running_mean", after, 4), MP_OK);
            CHECK(!memcmp(before, after, sizeof before), "the refused step moved bn's running mean");
            mp_plan *p = NULL;
            MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = 4, .training = true, .loss = n.loss}, &p) == MP_OK);
            CHECK_ERR(mp_plan_set_input(p, n.input, x, 4 * 64), MP_OK);
            CHECK_ERR(mp_plan_set_labels(p, n.labels, y, 4), MP_OK);
            CHECK_ERR(mp_plan_forward(p), MP_OK);
            CHECK_ERR(mp_plan_backward(p, 1.0f), MP_ERR_INVALID_ARG, "backward", "another trainer of this graph");
            mp_plan_destroy(p);
        }
        CHECK_ERR(mp_trainer_step(ta, &b, NULL), MP_OK);
        CHECK(mp_trainer_steps(ta) == 1, "%lld steps after two micro-batches", (long long)mp_trainer_steps(ta));
        CHECK_ERR(mp_trainer_grad_get(ta, "conv.weight", y_grad[shared], 36), MP_OK);
        if (shared) {
            CHECK(!memcmp(y_grad[0], y_grad[1], sizeof y_grad[0]),
                  "conv.weight's gradient with a second trainer: %g, alone: %g", y_grad[1][0], y_grad[0][0]);
            CHECK_ERR(mp_trainer_step(tb, &b, NULL), MP_OK); /* the step ended: the other trains */
            CHECK_ERR(mp_trainer_step(ta, &b, NULL), MP_OK);
            mp_trainer_destroy(ta); /* in the middle of its step: the other is free to train */
            ta = NULL;
            CHECK_ERR(mp_trainer_step(tb, &b, NULL), MP_OK);
        }
        mp_trainer_destroy(ta);
        mp_trainer_destroy(tb);
        mp_optimizer_destroy(oa);
        mp_optimizer_destroy(ob);
        mp_graph_destroy(n.g);
    }
}

/* auto_fallback's rebuild of the plan fails for want of memory: the step
 * says so, the trainer is not dead for good (every call that needs the plan
 * remakes it once memory is back: before, each refused "no plan (a rebuild
 * failed)" forever), and a rebuilt plan's forward count (dropout masks,
 * checkpoints' plan_step) goes on from the old plan's instead of 0. */
static void test_rebuild_out_of_memory(void) {
    for (int fail = 0; fail < 2; fail++) {
        fixture *f = calloc(1, sizeof *f);
        MP_ASSERT(f);
        f->n = make_net(4, 3);
        MP_ASSERT(mp_graph_apply_policy(f->n.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
        f->o = sgd(f->n.g);
        MP_ASSERT(mp_trainer_create(f->n.g, &(mp_trainer_opts){.batch = 4, .input = f->n.input, .labels = f->n.labels,
                                                               .loss = f->n.loss, .optimizer = f->o,
                                                               .auto_fallback = true, .max_forward_overflows = 1},
                                    &f->t) == MP_OK);
        small_batch(f->x, f->y);
        for (int s = 0; s < 3; s++) CHECK_ERR(step(f), MP_OK);
        for (int i = 0; i < 4 * 64; i++) f->x[i] *= 3e4f; /* conv's f16 output overflows: conv moves to fp32 */
        if (fail) setenv("MIXPREC_HOST_MEM_LIMIT", "1000", 1);
        CHECK_ERR(step(f), fail ? MP_ERR_NOMEM : MP_OK, fail ? "the plan's arena" : "");
        if (fail) {
            float loss = 0, w[36];
            CHECK(mp_trainer_plan(f->t) == NULL, "a failed rebuild left a plan");
            CHECK_ERR(step(f), MP_ERR_NOMEM, "could not make, cannot be made yet either", "the plan's arena");
            CHECK_ERR(mp_trainer_param_get(f->t, "conv.weight", w, 36), MP_ERR_NOMEM, "cannot be made yet");
            unsetenv("MIXPREC_HOST_MEM_LIMIT");
            CHECK_ERR(mp_trainer_loss(f->t, &loss), MP_OK); /* remade: NaN until its first step */
            CHECK(isnan(loss), "the loss of a remade plan before its step: %g", loss);
        }
        CHECK(mp_trainer_plan(f->t) && mp_plan_step(mp_trainer_plan(f->t)) == 4,
              "the rebuilt plan's forward count: %llu, want 4",
              (unsigned long long)(mp_trainer_plan(f->t) ? mp_plan_step(mp_trainer_plan(f->t)) : 0));
        CHECK_ERR(step(f), MP_OK);
        CHECK(mp_trainer_steps(f->t) == 5, "%lld steps", (long long)mp_trainer_steps(f->t));
        mp_node_precision np;
        CHECK(mp_graph_node_precision(f->n.g, mp_graph_find(f->n.g, "conv"), &np) == MP_OK &&
                  np.compute == MP_DTYPE_F32, "conv was not moved to fp32");
        fixture_destroy(f);
    }
}

int main(void) {
    scratch_dir_create(dir, sizeof dir, "test_api_lifetimes");
    test_graph_error_kept();
    test_graph_frozen();
    test_graph_destroyed_first();
    test_null_outputs();
    test_labels_refused_first();
    test_checkpoint_epoch_and_nan_data();
    test_two_trainers_accumulating();
    test_rebuild_out_of_memory();
    scratch_dir_remove(dir);
    return test_summary("test_api_lifetimes");
}
