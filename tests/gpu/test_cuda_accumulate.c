/* test_cuda_accumulate.c — gradient accumulation on the GPU through the
 * trainer (mp_trainer_opts.accumulate, a step of k calls of
 * mp_trainer_step), on the small CNN of small_cnn.h without BatchNorm
 * (batch statistics would differ between a micro-batch and the whole batch
 * by design):
 *  1. k micro-batches of b reach the weights of one batch of k*b after
 *     STEPS steps: fp32 within fp32 reduction-order tolerance (k = 2, 4),
 *     amp-fp16 with loss scaling within one fp16-rounding-order margin, with
 *     the same loss scale, which grows every 2 steps (so the micro-batches'
 *     seed must follow the scale the device holds);
 *  2. an overflow in an accumulated step (+inf written into a gradient
 *     after the last micro-batch's backward, inject.h) skips that step only:
 *     weights bit-identical before and after it, one skipped step, scale
 *     halved, and the run ends where one batch of k*b with the same
 *     overflow ends;
 *  3. the state cannot be moved in the middle of a step: mp_trainer_save
 *     and mp_trainer_param_set after the first of 2 micro-batches are clear
 *     errors;
 *  4. the trainer keeps the gradients in the activation arena (they do not
 *     outlive a step) exactly when it does not accumulate: there
 *     mp_trainer_grad_get is refused, naming the gradient; with 2
 *     micro-batches the accumulated gradient can be read and equals the
 *     gradient of one batch of 2b on the CPU.
 * Run by scripts/gpu-check. */
#define _GNU_SOURCE /* nftw (scratch_dir.h) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/cuda_ctx.h"
#include "graph/plan.h"
#include "inject.h"
#include "scratch_dir.h"
#include "small_cnn.h"
#include "train/trainer.h"

enum { GLOBAL_BATCH = 32, STEPS = 8, INJECT_STEP = 4 };

/* Where the refused mid-step checkpoint would go (the save must not write it). */
static char scratch[4096];

typedef struct {
    float *params;          /* every parameter after the run */
    float *before_inject;   /* with an injected overflow: the parameters before step INJECT_STEP */
    float *after_inject;    /* ... and after it */
    size_t n;
    mp_scaler scaler;
    mp_status s;
} run_result;

/* The trainer's parameters, downloaded (synchronizing). */
static float *snapshot(mp_trainer *t, const mp_graph *g, size_t *n_out) {
    return mp_trainer_sync(t, NULL) == MP_OK ? small_cnn_params(g, n_out) : NULL;
}

/* SGD with momentum 0.9 at a constant 0.05 over every parameter of g. */
static mp_status sgd(mp_graph *g, mp_optimizer **out) {
    return mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                       .lr = {.base_lr = 0.05f}},
                               out);
}

/* Mid-step (the first of 2 micro-batches queued): nothing is saved or set. */
static void refused_mid_step(mp_trainer *t, const mp_graph *g) {
    const char *path = scratch_path(scratch, "mid_step.safetensors");
    CHECK_ERR(mp_trainer_save(t, path, &(mp_checkpoint_info){.model = "small"}), MP_ERR_INVALID_ARG,
              "middle of a step", "1 of 2");
    FILE *f = fopen(path, "rb");
    CHECK(f == NULL, "a refused save wrote %s", path);
    if (f) fclose(f);
    const mp_gparam *w = &g->params[0];
    CHECK_ERR(mp_trainer_param_set(t, w->name, w->data, (size_t)mp_shape_numel(&w->spec.shape)), MP_ERR_INVALID_ARG,
              "middle of an accumulated step");
}

/* STEPS steps of the global batch as k micro-batches of GLOBAL_BATCH / k. */
static run_result train(mp_precision prec, int k, bool inject) {
    run_result r = {0};
    const int b = GLOBAL_BATCH / k;
    const size_t per = (size_t)SMALL_C * SMALL_H * SMALL_W;
    const bool scaling = prec == MP_PRECISION_AMP_FP16;
    mp_model m = {0};
    mp_optimizer *opt = NULL;
    mp_trainer *t = NULL;
    gpu_inject inj = {0};
    float *x = malloc((size_t)GLOBAL_BATCH * per * sizeof *x);
    int32_t y[GLOBAL_BATCH];
    mp_status s = x ? small_cnn_build(prec, false, &m) : mp_error(MP_ERR_NOMEM, "batch");
    if (s == MP_OK) s = sgd(m.g, &opt);
    if (s == MP_OK)
        s = mp_trainer_create(m.g,
                              &(mp_trainer_opts){.batch = b, .device = {MP_DEVICE_CUDA, 0}, .input = m.input,
                                                 .labels = m.labels, .loss = m.loss, .optimizer = opt,
                                                 .loss_scaling = scaling ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_OFF,
                                                 .scaler = {.init_scale = 1024, .growth_interval = 2},
                                                 .accumulate = k},
                              &t);
    if (s == MP_OK && inject) s = gpu_inject_attach(t, &inj);
    size_t n = 0;
    for (int step = 0; s == MP_OK && step < STEPS; step++) {
        small_cnn_batch(200 + (uint64_t)step, GLOBAL_BATCH, x, y);
        if (inject && step == INJECT_STEP) {
            r.before_inject = snapshot(t, m.g, &n);
            s = gpu_inject_arm(t, &inj);
        }
        for (int micro = 0; micro < k && s == MP_OK; micro++) {
            s = mp_trainer_step(t, &(mp_batch){.images = x + (size_t)micro * b * per, .labels = y + micro * b, .n = b},
                                NULL);
            if (s == MP_OK && k == 2 && micro == 0 && step == 0) refused_mid_step(t, m.g);
        }
        if (s == MP_OK) s = mp_trainer_wait(t, NULL);
        if (s == MP_OK && inject && step == INJECT_STEP) r.after_inject = snapshot(t, m.g, &n);
    }
    if (s == MP_OK) r.scaler = t->scaler; /* exact after mp_trainer_wait */
    if (s == MP_OK) r.params = snapshot(t, m.g, &r.n);
    if (s == MP_OK && !r.params) s = mp_error(MP_ERR_NOMEM, "parameters");
    if (s != MP_OK) fprintf(stderr, "%s k=%d: %s\n", mp_precision_name(prec), k, mp_last_error());
    r.s = s;
    mp_trainer_destroy(t);
    gpu_inject_free(&inj);
    mp_optimizer_destroy(opt);
    if (m.g) mp_model_free(&m);
    free(x);
    return r;
}

static void free_result(run_result *r) {
    free(r->params);
    free(r->before_inject);
    free(r->after_inject);
}

static void same_update(mp_precision prec, int k, double tol) {
    run_result one = train(prec, 1, false), acc = train(prec, k, false);
    CHECK(one.s == MP_OK && acc.s == MP_OK, "%s runs failed", mp_precision_name(prec));
    if (one.s == MP_OK && acc.s == MP_OK) {
        double e = small_cnn_rel_diff(acc.params, one.params, one.n);
        printf("%-9s %d micro-batches of %2d vs one batch of %d: weights after %d steps differ by %.2e (tolerance "
               "%.0e)\n",
               mp_precision_name(prec), k, GLOBAL_BATCH / k, GLOBAL_BATCH, STEPS, e, tol);
        CHECK(e <= tol, "%s: %d micro-batches differ from one batch by %g", mp_precision_name(prec), k, e);
        const double moved = small_cnn_moved(prec, one.params, one.n); /* the runs trained */
        CHECK(moved > 1e-3, "%s: the weights hardly moved (%g)", mp_precision_name(prec), moved);
        if (prec == MP_PRECISION_AMP_FP16) { /* 1024 doubled every 2 clean steps (2^20 would overflow f16) */
            CHECK(mp_scaler_scale(&acc.scaler) == mp_scaler_scale(&one.scaler), "loss scale %g vs %g",
                  (double)mp_scaler_scale(&acc.scaler), (double)mp_scaler_scale(&one.scaler));
            CHECK(mp_scaler_scale(&acc.scaler) == 1024.0f * 16, "loss scale %g after %d clean steps",
                  (double)mp_scaler_scale(&acc.scaler), STEPS);
        }
    }
    free_result(&one);
    free_result(&acc);
}

static void skipped_step(int k) {
    run_result r = train(MP_PRECISION_AMP_FP16, k, true), one = train(MP_PRECISION_AMP_FP16, 1, true);
    CHECK(r.s == MP_OK && one.s == MP_OK, "overflow runs failed");
    CHECK(r.before_inject && r.after_inject, "no snapshots around the overflow");
    if (r.s == MP_OK && r.before_inject && r.after_inject) {
        bool same = !memcmp(r.before_inject, r.after_inject, r.n * sizeof(float));
        printf("amp-fp16  %d micro-batches, overflow in step %d: weights %s, %lld step(s) skipped, scale %g\n", k,
               INJECT_STEP + 1, same ? "unchanged" : "CHANGED", (long long)r.scaler.skipped_steps,
               (double)mp_scaler_scale(&r.scaler));
        CHECK(same, "the skipped step changed the weights");
        CHECK(r.scaler.skipped_steps == 1, "%lld skipped steps", (long long)r.scaler.skipped_steps);
        /* 1024, x2 after steps 2 and 4 (growth every 2 clean steps), /2 at step 5 (the overflow), x2
         * after step 7: 4096 */
        CHECK(mp_scaler_scale(&r.scaler) == 4096.0f, "scale %g", (double)mp_scaler_scale(&r.scaler));
        CHECK(mp_scaler_scale(&r.scaler) == mp_scaler_scale(&one.scaler), "scale %g, one batch %g",
              (double)mp_scaler_scale(&r.scaler), (double)mp_scaler_scale(&one.scaler));
        if (one.s == MP_OK) {
            double e = small_cnn_rel_diff(r.params, one.params, one.n);
            printf("amp-fp16  %d micro-batches with the overflow vs one batch with it: weights differ by %.2e "
                   "(tolerance %.0e)\n", k, e, 0x1p-8);
            CHECK(e <= 0x1p-8, "after the skipped step: %d micro-batches differ from one batch by %g", k, e);
        }
    }
    free_result(&r);
    free_result(&one);
}

/* One step of the fp32 small CNN on the k*b samples of batch seed 300 as k
 * micro-batches of b on `device`; *t is left for the caller (NULL on error). */
static mp_status one_step(mp_model *m, mp_device device, int k, int b, mp_optimizer **opt, mp_trainer **t) {
    const size_t per = (size_t)SMALL_C * SMALL_H * SMALL_W;
    float *x = malloc((size_t)k * b * per * sizeof *x);
    int32_t *y = malloc((size_t)k * b * sizeof *y);
    mp_status s = x && y ? small_cnn_build(MP_PRECISION_FP32, false, m) : mp_error(MP_ERR_NOMEM, "batch");
    if (s == MP_OK) s = sgd(m->g, opt);
    if (s == MP_OK)
        s = mp_trainer_create(m->g,
                              &(mp_trainer_opts){.batch = b, .device = device, .input = m->input, .labels = m->labels,
                                                 .loss = m->loss, .optimizer = *opt, .accumulate = k},
                              t);
    if (s == MP_OK) small_cnn_batch(300, k * b, x, y);
    for (int micro = 0; s == MP_OK && micro < k; micro++)
        s = mp_trainer_step(*t, &(mp_batch){.images = x + (size_t)micro * b * per, .labels = y + micro * b, .n = b},
                            NULL);
    if (s == MP_OK) s = mp_trainer_wait(*t, NULL);
    free(x);
    free(y);
    return s;
}

static void free_step(mp_model *m, mp_optimizer *opt, mp_trainer *t) {
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    if (m->g) mp_model_free(m);
}

/* The trainer makes its own plan: without accumulation the gradients live
 * in the arena and cannot be read after the step (a clear error, not stale
 * values); accumulating, they outlive the step and mp_trainer_grad_get
 * returns the step's unscaled gradient: 2 micro-batches of 8 on the GPU
 * against one batch of 16 on the CPU. */
static void gradients_after_the_step(void) {
    mp_model gm = {0}, am = {0}, cm = {0};
    mp_optimizer *go = NULL, *ao = NULL, *co = NULL;
    mp_trainer *gt = NULL, *at = NULL, *ct = NULL;
    const mp_device gpu = {MP_DEVICE_CUDA, 0}, cpu = {MP_DEVICE_CPU, 0};
    mp_status s = one_step(&gm, gpu, 1, 16, &go, &gt);
    CHECK(s == MP_OK, "one GPU batch: %s", mp_last_error());
    if (s == MP_OK) {
        CHECK(mp_plan_grads_in_arena(mp_trainer_plan(gt)), "without accumulation the gradients are not in the arena");
        const mp_gparam *w = &gm.g->params[0];
        const size_t n = (size_t)mp_shape_numel(&w->spec.shape);
        float *g = malloc(n * sizeof *g);
        CHECK_ERR(mp_trainer_grad_get(gt, w->name, g, n), MP_ERR_UNSUPPORTED, w->name, "arena", "accumulate 2");
        free(g);
    }
    s = one_step(&am, gpu, 2, 8, &ao, &at);
    CHECK(s == MP_OK, "2 GPU micro-batches: %s", mp_last_error());
    mp_status sc = one_step(&cm, cpu, 1, 16, &co, &ct);
    CHECK(sc == MP_OK, "one CPU batch: %s", mp_last_error());
    if (s == MP_OK && sc == MP_OK) {
        CHECK(!mp_plan_grads_in_arena(mp_trainer_plan(at)), "accumulating, the gradients are in the arena");
        double d2 = 0, r2 = 0;
        int read = 0;
        for (int k = 0; k < am.g->n_params; k++) {
            const mp_gparam *p = &am.g->params[k];
            if (!p->spec.trainable) continue;
            const size_t n = (size_t)mp_shape_numel(&p->spec.shape);
            float *a = malloc(n * sizeof *a), *c = malloc(n * sizeof *c);
            mp_status ga = mp_trainer_grad_get(at, p->name, a, n), gc = mp_trainer_grad_get(ct, p->name, c, n);
            CHECK(ga == MP_OK && gc == MP_OK, "gradient of %s: %s", p->name, mp_last_error());
            for (size_t i = 0; ga == MP_OK && gc == MP_OK && i < n; i++) {
                d2 += ((double)a[i] - c[i]) * ((double)a[i] - c[i]);
                r2 += (double)c[i] * c[i];
            }
            read += ga == MP_OK && gc == MP_OK;
            free(a);
            free(c);
        }
        const double e = sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
        printf("fp32      gradients after a step of 2 micro-batches of 8 (GPU) vs one batch of 16 (CPU): %d tensors, "
               "differ by %.2e (tolerance 1e-2)\n", read, e);
        /* fp32 on two devices: summation orders, and a ReLU near zero that goes the other way, move a
         * gradient by up to ~1e-3 (test_cuda_plan); a missing micro-batch, a seed not divided by k or
         * gradients left scaled are errors of O(1) */
        CHECK(r2 > 0 && e <= 1e-2, "accumulated GPU gradients differ from one CPU batch's by %g (norm %g)", e,
              sqrt(r2));
    }
    free_step(&gm, go, gt);
    free_step(&am, ao, at);
    free_step(&cm, co, ct);
}

int main(void) {
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_accumulate: no GPU (%s)\n", mp_cuda_device_list());
        return 2;
    }
    scratch_dir_create(scratch, sizeof scratch, "test_cuda_accumulate");
    same_update(MP_PRECISION_FP32, 2, 2e-5);
    same_update(MP_PRECISION_FP32, 4, 2e-5);
    /* fp16 activations of 16- and 32-sample convolutions sum in different orders */
    same_update(MP_PRECISION_AMP_FP16, 2, 0x1p-8);
    skipped_step(2);
    gradients_after_the_step();
    scratch_dir_remove(scratch);
    return test_summary("test_cuda_accumulate");
}
