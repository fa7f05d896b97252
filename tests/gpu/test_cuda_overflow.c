/* test_cuda_overflow.c — the AMP issue's overflow rules on the GPU, through
 * the epoch loop over the trainer (mp_fit with --device cuda), as
 * test_amp_train.c checks them on the CPU:
 *  1. seed 000's collapse (an fp16 inf in conv2's output, NaN loss every
 *     step): the run stops at 3 consecutive forward overflows with an error
 *     naming conv2, the loss scale untouched (steps queued beyond the third
 *     before the host saw it are skipped too);
 *  2. the same without loss scaling (fp32, conv2's weights NaN): the device
 *     still checks every step and the run stops naming conv2;
 *  3. --auto-fallback moves conv2 to fp32 on the GPU and training goes on,
 *     under amp-fp16 and under fp16 with f16 weight, gradient and momentum;
 *  4. a static scale so large that fp16 gradients overflow: both steps are
 *     skipped, the trainable weights stay bit-identical, and each report names the
 *     backward op where the gradient first went non-finite.
 * Run by scripts/gpu-check. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "models/models.h"
#include "train/fit.h"

/* Steps the GPU may run past the one that reached the limit before the host,
 * which never waits for a step, reads the counts (an epoch here is 16). */
enum { QUEUE_LAG = 16 };

static mp_dataset data(int n) {
    mp_dataset d;
    MP_ASSERT(mp_dataset_synthetic(n, 1, 8, 8, 4, 3, &d) == MP_OK);
    return d;
}

/* The run's precision is the model's policy (small_model). */
static mp_fit_opts gpu_opts(void) {
    return (mp_fit_opts){.model_name = "small", .epochs = 1, .trainer = {.batch = 16, .device = {MP_DEVICE_CUDA, 0}},
                         .lr = 0.1f, .optim = {.kind = MP_OPTIM_SGD}, .lr_schedule = "constant", .seed = 9};
}

static mp_model small_model(mp_precision prec) {
    mp_model m;
    MP_ASSERT(mp_model_build("small", 1, 8, 8, 4, &m) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(m.g, 1);
    return m;
}

static void set_conv2_weights(mp_model *m, float v) {
    mp_node conv2 = mp_graph_find(m->g, "conv2");
    MP_ASSERT(conv2 >= 0);
    mp_gparam *w = &m->g->params[m->g->nodes[conv2].first_param];
    for (int64_t j = 0; j < mp_shape_numel(&w->spec.shape); j++) w->data[j] = v;
}

/* The trainer's event lines, read back from a temporary file. */
static char *slurp(FILE *f) {
    long n = ftell(f);
    char *s = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(f);
    if (s && n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    return s;
}

/* mp_fit with the trainer's event lines captured into *events (to free). */
static mp_status train_capturing(mp_model *m, const mp_dataset *d, mp_fit_opts o, mp_fit_result *r, char **events) {
    o.trainer.events = tmpfile();
    mp_status s = mp_fit(m, d, NULL, &o, r);
    *events = o.trainer.events ? slurp(o.trainer.events) : NULL;
    if (o.trainer.events) fclose(o.trainer.events);
    return s;
}

static void test_collapse(bool scaling) {
    const char *label = scaling ? "amp-fp16, loss scaling" : "fp32, no loss scaling";
    mp_dataset d = data(256);
    mp_model m = small_model(scaling ? MP_PRECISION_AMP_FP16 : MP_PRECISION_FP32);
    /* fp16: conv2's outputs exceed 65504; fp32: 3e38 times inputs above 1.14 pass f32's range (the weights
     * stay finite: a trainer refuses non-finite ones) */
    set_conv2_weights(&m, scaling ? 1e6f : 3e38f);
    mp_fit_opts o = gpu_opts();
    o.trainer.loss_scaling = scaling ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_OFF;
    o.trainer.scaler = (mp_scaler_opts){0};
    mp_fit_result r;
    char *ev = NULL;
    mp_status s = train_capturing(&m, &d, o, &r, &ev);
    CHECK(s == MP_ERR_NONFINITE, "%s: the collapse must stop the run, status %d", label, s);
    CHECK(strstr(mp_last_error(), "conv2") != NULL, "%s: the error names the layer: %s", label, mp_last_error());
    CHECK(strstr(mp_last_error(), "3 consecutive forward overflows") != NULL, "%s: after 3 steps: %s", label,
          mp_last_error());
    /* the host sees the counts a few queued steps late: those steps skip as well */
    CHECK(r.skipped_steps >= 3 && r.skipped_steps <= 3 + QUEUE_LAG, "%s: skipped %lld", label,
          (long long)r.skipped_steps);
    if (scaling)
        CHECK(r.final_loss_scale == 65536.0f, "%s: a forward overflow must not lower the scale: %g", label,
              r.final_loss_scale);
    CHECK(ev && strstr(ev, "forward overflow: first non-finite value in the output of conv2") != NULL,
          "%s: each forward overflow is reported naming conv2: %s", label, ev ? ev : "");
    printf("collapse (%s): %s\n", label, mp_last_error());
    free(ev);
    mp_model_free(&m);
    mp_dataset_free(&d);
}

/* pure: fp16 without loss scaling, SGD with momentum, so conv2's weight,
 * gradient and momentum live in f16 on the GPU until the fallback moves the
 * layer (its weights 60000, a value of f16, whose outputs overflow it). */
static void test_auto_fallback(bool pure) {
    const char *label = pure ? "fp16, no loss scaling, momentum" : "amp-fp16";
    mp_dataset d = data(256);
    mp_model m = small_model(pure ? MP_PRECISION_FP16 : MP_PRECISION_AMP_FP16);
    set_conv2_weights(&m, pure ? 6e4f : 1e6f);
    mp_fit_opts o = gpu_opts();
    o.epochs = 2;
    o.trainer.loss_scaling = pure ? MP_LOSS_SCALING_OFF : MP_LOSS_SCALING_ON;
    o.trainer.scaler = (mp_scaler_opts){0};
    if (pure) o.optim.momentum = 0.9f;
    o.trainer.auto_fallback = true;
    mp_fit_result r;
    char *ev = NULL;
    mp_status s = train_capturing(&m, &d, o, &r, &ev);
    CHECK(s == MP_OK, "%s: auto-fallback run failed: %s", label, mp_last_error());
    mp_node c2 = mp_graph_find(m.g, "conv2");
    CHECK(m.g->nodes[c2].compute_dtype == MP_DTYPE_F32 && m.g->nodes[c2].storage_dtype == MP_DTYPE_F32,
          "%s: conv2 moved to fp32", label);
    CHECK(ev && strstr(ev, "--auto-fallback: moving conv2 to fp32") != NULL, "%s: the fallback is reported: %s", label,
          ev ? ev : "");
    CHECK(r.skipped_steps >= 3 && r.skipped_steps <= 8 + QUEUE_LAG, "%s: skipped %lld", label,
          (long long)r.skipped_steps);
    if (!pure) CHECK(r.final_loss_scale >= 256.0f, "loss scale %g after recovery", r.final_loss_scale);
    CHECK(isfinite(r.train_loss), "%s: training continued with a finite loss: %g", label, r.train_loss);
    printf("auto-fallback (%s): %lld skipped steps, final scale %g, train loss %.4f\n", label,
           (long long)r.skipped_steps, r.final_loss_scale, r.train_loss);
    free(ev);
    mp_model_free(&m);
    mp_dataset_free(&d);
}

/* The trainable parameters (BN's running statistics move in every forward,
 * skipped or not). */
static float *snapshot(const mp_graph *g, size_t *n_out) {
    size_t n = 0;
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].spec.trainable) n += (size_t)mp_shape_numel(&g->params[i].spec.shape);
    float *s = malloc(n * sizeof *s), *p = s;
    for (int i = 0; s && i < g->n_params; i++) {
        if (!g->params[i].spec.trainable) continue;
        size_t k = (size_t)mp_shape_numel(&g->params[i].spec.shape);
        memcpy(p, g->params[i].data, k * sizeof *p);
        p += k;
    }
    *n_out = n;
    return s;
}

static void test_gradient_overflow_skips(void) {
    mp_dataset d = data(256);
    mp_model m = small_model(MP_PRECISION_AMP_FP16);
    size_t n = 0;
    float *before = snapshot(m.g, &n);
    mp_fit_opts o = gpu_opts();
    o.optim = (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f};
    o.max_steps = 2;
    o.trainer.loss_scaling = MP_LOSS_SCALING_ON;
    o.trainer.scaler = (mp_scaler_opts){.static_scale = true, .init_scale = 1e30f};
    mp_fit_result r;
    char *ev = NULL;
    mp_status s = train_capturing(&m, &d, o, &r, &ev);
    /* an epoch of which every step was skipped trained nothing: an error */
    CHECK(s == MP_ERR_NONFINITE && strstr(mp_last_error(), "all 2 steps skipped"), "status %d: %s", s,
          mp_last_error());
    CHECK(r.skipped_steps == 2, "both steps skipped, got %lld", (long long)r.skipped_steps);
    size_t n2 = 0;
    float *after = snapshot(m.g, &n2);
    CHECK(n == n2 && memcmp(before, after, n * sizeof(float)) == 0, "skipped steps changed the weights");
    const char *line = ev ? strstr(ev, "gradient overflow in backward of ") : NULL;
    CHECK(line != NULL, "a skipped step is reported with the op: %s", ev ? ev : "");
    CHECK(ev && strstr(ev, "loss scale 1e+30 -> 1e+30") != NULL, "a static scale stays: %s", ev ? ev : "");
    const int line_len = line ? (int)strcspn(line, "\n") : 0;
    CHECK(line && !memmem(line, (size_t)line_len, "not located", 11), "the report names the op: %.*s", line_len,
          line ? line : "");
    if (line) printf("gradient overflow report: %.*s\n", line_len, line);
    free(ev);
    free(before);
    free(after);
    mp_model_free(&m);
    mp_dataset_free(&d);
}

int main(void) {
    test_collapse(true);
    test_collapse(false);
    test_auto_fallback(false);
    test_auto_fallback(true);
    test_gradient_overflow_skips();
    return test_summary("test_cuda_overflow");
}
