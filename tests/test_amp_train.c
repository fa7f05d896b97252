/* test_amp_train.c — the AMP training step end to end on small synthetic
 * problems: seed 000's collapse (NaN forward every step) ends in a clear
 * error naming the layer with the scale untouched, --auto-fallback recovers
 * (also on inputs set once, which the rebuilt plan keeps, with running
 * statistics the overflows reached restarted, not NaN);
 * k micro-batches of b equal one batch of k*b; clipping sees unscaled
 * gradients; a skipped step changes nothing; the pure policies' weights
 * are kept at values of their dtype (mp_graph_round_low_weights) and the
 * ones without an fp32 master are named (mp_graph_param_low_only). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "models/models.h"
#include "train/fit.h"

static mp_dataset data(int n) {
    mp_dataset d;
    MP_ASSERT(mp_dataset_synthetic(n, 1, 8, 8, 4, 3, &d) == MP_OK);
    return d;
}

/* conv -> relu -> gap -> linear: no BatchNorm or dropout, so a batch's
 * gradient is exactly the mean of its samples' (needed for accumulation). */
static mp_model plain_model(void) {
    mp_model m = {.g = mp_graph_create()};
    mp_graph *g = m.g;
    m.input = mp_graph_input(g, "input", 1, 8, 8);
    mp_node x = mp_conv2d(g, "conv", m.input, (mp_conv_opts){.out_channels = 6, .kernel = 3, .padding = 1, .bias = true});
    x = mp_relu(g, "relu", x);
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = 4, .bias = true});
    MP_ASSERT(mp_model_finish(&m, x) == MP_OK);
    return m;
}

static mp_fit_opts base_opts(void) {
    return (mp_fit_opts){.model_name = "test", .epochs = 1, .trainer = {.batch = 16}, .lr = 0.1f,
                         .optim = {.kind = MP_OPTIM_SGD}, .lr_schedule = "constant", .seed = 9};
}

static bool has_master(mp_precision p) { return p != MP_PRECISION_FP16 && p != MP_PRECISION_BF16; }

static float *snapshot(const mp_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->n_params; i++) n += mp_shape_numel(&g->params[i].spec.shape);
    float *s = malloc((size_t)n * sizeof *s), *p = s;
    for (int i = 0; i < g->n_params; i++) {
        int64_t k = mp_shape_numel(&g->params[i].spec.shape);
        memcpy(p, g->params[i].data, (size_t)k * sizeof *p);
        p += k;
    }
    return s;
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1e-3));
    return worst;
}

static int64_t param_floats(const mp_graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->n_params; i++) n += mp_shape_numel(&g->params[i].spec.shape);
    return n;
}

static void test_collapse_and_fallback(void) {
    mp_dataset d = data(256);
    for (int run = 0; run < 3; run++) {
        const bool fallback = run == 2, reference = run == 1;
        mp_model m;
        MP_ASSERT(mp_model_build("small", 1, 8, 8, 4, &m) == MP_OK);
        MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
        mp_graph_init_params(m.g, 1);
        /* conv2's outputs now exceed fp16's 65504: inf in its fp16 output */
        mp_node conv2 = mp_graph_find(m.g, "conv2");
        MP_ASSERT(conv2 >= 0);
        mp_gparam *w = &m.g->params[m.g->nodes[conv2].first_param];
        for (int64_t j = 0; j < mp_shape_numel(&w->spec.shape); j++) w->data[j] = 1e6f;
        mp_fit_opts o = base_opts();
        o.trainer.loss_scaling = MP_LOSS_SCALING_ON;
        o.trainer.auto_fallback = fallback;
        o.trainer.reference = reference;
        o.trainer.events = fopen("/dev/null", "w");
        mp_fit_result r;
        mp_status s = mp_fit(&m, &d, NULL, &o, &r);
        fclose(o.trainer.events);
        if (!fallback) {
            CHECK(s == MP_ERR_NONFINITE, "collapse must stop the run, status %d", s);
            CHECK(strstr(mp_last_error(), "conv2") != NULL, "error names the layer: %s", mp_last_error());
            CHECK(strstr(mp_last_error(), "3 consecutive forward overflows") != NULL, "after 3 steps: %s", mp_last_error());
            CHECK(r.skipped_steps == 3, "skipped %lld", (long long)r.skipped_steps);
            CHECK(r.final_loss_scale == 65536.0f, "a forward overflow must not lower the scale: %g", r.final_loss_scale);
            /* conv2's inf made its batch norm's statistics NaN (not a variance of 0, which the fast kernels once
             * made of NaN): they restarted from mean 0, variance 1, whichever kernels ran */
            float mean[32], var[32];
            MP_ASSERT(mp_graph_param_get(m.g, "conv2_bn.running_mean", mean, 32) == MP_OK &&
                      mp_graph_param_get(m.g, "conv2_bn.running_var", var, 32) == MP_OK);
            bool restarted = true;
            for (int c = 0; c < 32; c++) restarted = restarted && mean[c] == 0.0f && var[c] == 1.0f;
            CHECK(restarted, "%s kernels: conv2_bn's running statistics restarted (mean[0] %g, var[0] %g)",
                  reference ? "reference" : "fast", mean[0], var[0]);
        } else {
            CHECK(s == MP_OK, "auto-fallback run failed: %s", mp_last_error());
            mp_node c2 = mp_graph_find(m.g, "conv2");
            CHECK(m.g->nodes[c2].compute_dtype == MP_DTYPE_F32 && m.g->nodes[c2].storage_dtype == MP_DTYPE_F32,
                  "conv2 moved to fp32");
            /* 3 forward overflows, then the usual early gradient backoffs of fp16 */
            CHECK(r.skipped_steps >= 3 && r.skipped_steps <= 8, "skipped %lld", (long long)r.skipped_steps);
            CHECK(r.final_loss_scale >= 256.0f, "loss scale %g after recovery", r.final_loss_scale);
            CHECK(isfinite(r.train_loss), "training continued with a finite loss: %g", r.train_loss);
        }
        mp_model_free(&m);
    }
    mp_dataset_free(&d);
}

/* A trainer stepping on inputs set once (mp_trainer_set_input, no batch per
 * step) goes on after --auto-fallback rebuilds its plan: the rebuilt plan
 * holds the same image and labels (read back before its first step, bit for
 * bit) and the later steps train on them. */
static void test_fallback_keeps_set_inputs(void) {
    enum { B = 16 };
    mp_model m;
    MP_ASSERT(mp_model_build("small", 1, 8, 8, 4, &m) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    mp_graph_init_params(m.g, 1);
    const mp_node conv2 = mp_graph_find(m.g, "conv2");
    MP_ASSERT(conv2 >= 0);
    mp_gparam *w = &m.g->params[m.g->nodes[conv2].first_param];
    for (int64_t j = 0; j < mp_shape_numel(&w->spec.shape); j++) w->data[j] = 1e6f; /* inf in fp16 */
    float x[B * 64], back[B * 64], yf[B];
    int32_t y[B];
    for (int i = 0; i < B * 64; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < B; i++) y[i] = i % 4;
    mp_optimizer *opt = NULL;
    MP_ASSERT(mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.01f}},
                                  &opt) == MP_OK);
    FILE *events = fopen("/dev/null", "w");
    mp_trainer *t = NULL;
    MP_ASSERT(mp_trainer_create(m.g, &(mp_trainer_opts){.batch = B, .loss = m.loss, .optimizer = opt,
                                                        .loss_scaling = MP_LOSS_SCALING_ON, .auto_fallback = true,
                                                        .events = events},
                                &t) == MP_OK);
    CHECK(mp_trainer_set_input(t, m.input, x, B * 64) == MP_OK, "%s", mp_last_error());
    CHECK(mp_trainer_set_labels(t, m.labels, y, B) == MP_OK, "%s", mp_last_error());
    bool rebuilt = false;
    for (int step = 0; step < 6; step++) {
        mp_step_report r;
        const mp_status s = mp_trainer_step(t, NULL, &r);
        CHECK(s == MP_OK, "step %d after %s: %s", step, rebuilt ? "the rebuild" : "set_input", mp_last_error());
        if (s != MP_OK) break;
        if (rebuilt || m.g->nodes[conv2].compute_dtype != MP_DTYPE_F32) continue;
        rebuilt = true; /* before the rebuilt plan's first step: the batch it was handed */
        CHECK(mp_trainer_read(t, m.input, back, B * 64) == MP_OK && !memcmp(back, x, sizeof x),
              "the image set before the rebuild reads back unchanged: %s", mp_last_error());
        const bool read = mp_trainer_read(t, m.labels, yf, B) == MP_OK;
        CHECK(read, "labels read: %s", mp_last_error());
        for (int i = 0; read && i < B; i++) CHECK(yf[i] == (float)y[i], "label %d: %g, set %d", i, yf[i], y[i]);
    }
    CHECK(rebuilt, "conv2's forward overflows must move it to fp32");
    float loss = NAN;
    CHECK(mp_trainer_loss(t, &loss) == MP_OK && isfinite(loss), "the last step's loss %g", loss);
    /* the overflowing forwards' NaN did not stay in the batch norms' running statistics (eval would read it) */
    MP_ASSERT(mp_trainer_sync(t, NULL) == MP_OK);
    for (int k = 0; k < m.g->n_params; k++) {
        const mp_gparam *p = &m.g->params[k];
        int64_t bad = 0;
        for (int64_t j = 0; !p->spec.trainable && j < mp_shape_numel(&p->spec.shape); j++) bad += !isfinite(p->data[j]);
        CHECK(bad == 0, "%s holds %lld non-finite values after the fallback", p->name, (long long)bad);
    }
    mp_trainer_destroy(t);
    /* another plan of the graph alive (sized for conv2's fp16): no fallback, an error naming the layer */
    for (int64_t j = 0; j < mp_shape_numel(&w->spec.shape); j++) w->data[j] = 1e6f;
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    mp_plan *other = NULL;
    MP_ASSERT(mp_plan_create(m.g, (mp_plan_opts){.batch = B, .loss = m.logits}, &other) == MP_OK);
    const mp_status made = mp_trainer_create(m.g, &(mp_trainer_opts){.batch = B, .loss = m.loss, .optimizer = opt,
                                                                     .loss_scaling = MP_LOSS_SCALING_ON,
                                                                     .auto_fallback = true, .events = events},
                                             &t);
    CHECK(made == MP_OK, "second trainer: %s", mp_last_error());
    MP_ASSERT(made == MP_OK);
    MP_ASSERT(mp_trainer_set_input(t, m.input, x, B * 64) == MP_OK);
    MP_ASSERT(mp_trainer_set_labels(t, m.labels, y, B) == MP_OK);
    mp_status s = MP_OK;
    for (int step = 0; step < 3 && s == MP_OK; step++) s = mp_trainer_step(t, NULL, NULL);
    CHECK(s == MP_ERR_NONFINITE && strstr(mp_last_error(), "conv2") && strstr(mp_last_error(), "another plan"),
          "a fallback with another plan alive: status %d: %s", s, mp_last_error());
    CHECK(m.g->nodes[conv2].compute_dtype != MP_DTYPE_F32, "conv2 left as the live plan holds it");
    mp_trainer_destroy(t);
    /* a NaN running statistic (as a run without this reset left one) is refused by evaluation, by name */
    const mp_node bn2 = mp_graph_find(m.g, "conv2_bn");
    MP_ASSERT(bn2 >= 0);
    float *running_mean = NULL;
    for (int k = 0; k < m.g->n_params; k++)
        if (m.g->params[k].node == bn2 && !strcmp(m.g->params[k].spec.name, "running_mean"))
            running_mean = m.g->params[k].data;
    MP_ASSERT(running_mean);
    const float kept = running_mean[3];
    running_mean[3] = NAN;
    float logits[B * 4];
    s = mp_predict(m.g, &(mp_eval_opts){.input = m.input, .logits = m.logits}, x, B, logits);
    CHECK(s == MP_ERR_NONFINITE && strstr(mp_last_error(), "conv2_bn.running_mean") &&
              strstr(mp_last_error(), "element 3"),
          "predict with a NaN running mean: status %d: %s", s, mp_last_error());
    running_mean[3] = kept;
    mp_plan_destroy(other);
    mp_optimizer_destroy(opt);
    fclose(events);
    mp_model_free(&m);
}

/* The plain model's parameters after training with options `o` (fp32). */
static float *params_after(const mp_dataset *d, mp_fit_opts o, int64_t *n) {
    mp_model m = plain_model();
    mp_graph_init_params(m.g, 5);
    mp_fit_result r;
    CHECK(mp_fit(&m, d, NULL, &o, &r) == MP_OK, "%s", mp_last_error());
    float *p = snapshot(m.g);
    *n = param_floats(m.g);
    mp_model_free(&m);
    return p;
}

/* One optimizer step: batch k*b vs k micro-batches of b. */
static void test_accumulation(void) {
    mp_dataset d = data(256);
    int64_t n = 0;
    mp_fit_opts o = base_opts();
    o.max_steps = 1;
    o.trainer.batch = 64;
    float *whole = params_after(&d, o, &n);
    o.trainer.batch = 16;
    o.trainer.accumulate = 4;
    float *micro = params_after(&d, o, &n);
    double diff = max_rel_diff(micro, whole, n);
    CHECK(diff < 1e-4, "4 micro-batches of 16 vs one batch of 64: max rel. diff %g", diff);
    /* and the step did something */
    mp_model m = plain_model();
    mp_graph_init_params(m.g, 5);
    float *init = snapshot(m.g);
    CHECK(max_rel_diff(whole, init, n) > 1e-3, "the step must change the weights");
    free(init);
    mp_model_free(&m);
    free(whole);
    free(micro);
    mp_dataset_free(&d);
}

/* Clip by norm with a static loss scale of 1024 equals clipping without any
 * scaling: the clip sees the true (unscaled) gradients. */
static void test_clip_sees_unscaled(void) {
    mp_dataset d = data(256);
    int64_t n = 0;
    mp_fit_opts o = base_opts();
    o.max_steps = 3;
    o.trainer.clip_norm = 0.01f;
    float *plain = params_after(&d, o, &n);
    o.trainer.loss_scaling = MP_LOSS_SCALING_ON;
    o.trainer.scaler = (mp_scaler_opts){.static_scale = true, .init_scale = 1024};
    float *scaled = params_after(&d, o, &n);
    double diff = max_rel_diff(scaled, plain, n);
    CHECK(diff < 1e-5, "clipping with loss scale 1024 vs none: max rel. diff %g", diff);
    free(plain);
    free(scaled);
    mp_dataset_free(&d);
}

/* A static scale so large that fp16 gradients overflow: every step is
 * skipped and leaves the weights and the optimizer state untouched, and an
 * epoch of which every step was skipped ends the run with an error. */
static void test_skipped_step_changes_nothing(void) {
    mp_dataset d = data(256);
    mp_model m = plain_model();
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    mp_graph_init_params(m.g, 5);
    float *before = snapshot(m.g);
    mp_fit_opts o = base_opts();
    o.optim = (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f};
    o.max_steps = 2;
    o.trainer.loss_scaling = MP_LOSS_SCALING_ON;
    o.trainer.scaler = (mp_scaler_opts){.static_scale = true, .init_scale = 1e30f};
    o.trainer.events = fopen("/dev/null", "w");
    mp_fit_result r;
    mp_status s = mp_fit(&m, &d, NULL, &o, &r);
    fclose(o.trainer.events);
    CHECK(s == MP_ERR_NONFINITE && strstr(mp_last_error(), "all 2 steps skipped"), "status %d: %s", s,
          mp_last_error());
    CHECK(r.skipped_steps == 2, "both steps skipped, got %lld", (long long)r.skipped_steps);
    float *after = snapshot(m.g);
    CHECK(memcmp(before, after, (size_t)param_floats(m.g) * sizeof(float)) == 0, "skipped steps changed the weights");
    free(before);
    free(after);
    mp_model_free(&m);
    mp_dataset_free(&d);
}

/* Every element of x (n) is a value of dtype. */
static bool representable(const float *x, int64_t n, mp_dtype dt) {
    float *y = malloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    mp_round_f32(y, n, dt);
    const bool same = !memcmp(x, y, (size_t)n * sizeof *y);
    free(y);
    return same;
}

static bool odd_params(const void *arg, int k) { return (void)arg, k % 2 == 1; }

/* small (conv, BN, linear) under fp16, bf16 and amp-fp16: off-grid weights
 * (x * (1 + 2^-20) + 0.1) are rounded exactly where the node computes in f16/bf16,
 * only under the policies without master weights, only where selected. */
static void test_round_low_weights(void) {
    const mp_precision precs[] = {MP_PRECISION_FP16, MP_PRECISION_BF16, MP_PRECISION_AMP_FP16};
    for (int pi = 0; pi < 3; pi++) {
        const mp_precision prec = precs[pi];
        for (int selected = 0; selected < 2; selected++) {
            mp_model m;
            MP_ASSERT(mp_model_build("small", 1, 8, 8, 4, &m) == MP_OK);
            MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
            mp_graph_init_params(m.g, 3);
            mp_graph *g = m.g;
            for (int k = 0; k < g->n_params; k++)
                for (int64_t i = 0; i < mp_shape_numel(&g->params[k].spec.shape); i++)
                    g->params[k].data[i] = g->params[k].data[i] * (1.0f + 0x1p-20f) + 0.1f;
            mp_graph_round_low_weights(g, selected ? odd_params : NULL, NULL);
            int rounded = 0, low_only = 0;
            for (int k = 0; k < g->n_params; k++) {
                const mp_gparam *p = &g->params[k];
                const mp_dtype dt = g->nodes[p->node].compute_dtype;
                const bool want = p->spec.trainable && dt != MP_DTYPE_F32 && has_master(prec) == false &&
                                  (!selected || k % 2 == 1);
                const bool is = dt != MP_DTYPE_F32 && representable(p->data, mp_shape_numel(&p->spec.shape), dt);
                CHECK(want == is, "%s: parameter %s %s rounded to %s", mp_precision_name(prec), p->name,
                      want ? "not" : "wrongly", mp_dtype_name(dt));
                rounded += is;
                const mp_dtype lo = mp_graph_param_low_only(g, k);
                CHECK(lo == (has_master(prec) || !p->spec.trainable ? MP_DTYPE_F32 : dt),
                      "%s: parameter %s: low-only dtype %s", mp_precision_name(prec), p->name, mp_dtype_name(lo));
                low_only += lo != MP_DTYPE_F32;
            }
            CHECK((rounded > 0) == !has_master(prec), "%s: %d parameters rounded", mp_precision_name(prec),
                  rounded);
            CHECK((low_only > 0) == !has_master(prec), "%s: %d parameters without a master",
                  mp_precision_name(prec), low_only);
            mp_model_free(&m);
        }
    }
}

int main(void) {
    test_round_low_weights();
    test_collapse_and_fallback();
    test_fallback_keeps_set_inputs();
    test_accumulation();
    test_clip_sees_unscaled();
    test_skipped_step_changes_nothing();
    return test_summary("test_amp_train");
}
