/* test_cuda_accumulate.c — gradient accumulation on the GPU (cuda_step's
 * accumulate), on the small CNN of small_cnn.h without BatchNorm (batch
 * statistics would differ between a micro-batch and the whole batch by
 * design):
 *  1. k micro-batches of b reach the weights of one batch of k*b after
 *     STEPS steps: fp32 within fp32 reduction-order tolerance (k = 2, 4),
 *     amp-fp16 with loss scaling within one fp16-rounding-order margin, with
 *     the same loss scale, which grows every 2 steps (so the micro-batches'
 *     seed must follow the scale the device holds);
 *  2. an overflow in an accumulated step skips that step only: weights
 *     bit-identical before and after it, one skipped step, scale halved,
 *     and the run ends where one batch of k*b with the same overflow ends;
 *  3. the step's state cannot be saved in the middle of a step;
 *  4. a plan keeping its gradients in the arena (grads_in_arena, as the
 *     trainer's one-batch runs: every one-batch run here does) cannot
 *     accumulate: a clear error, not silently lost gradients.
 * Run by scripts/gpu-check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_plan.h"
#include "graph/plan.h"
#include "small_cnn.h"

enum { GLOBAL_BATCH = 32, STEPS = 8, INJECT_STEP = 4 };

typedef struct {
    float *params;          /* every parameter after the run */
    float *before_inject;   /* with an injected overflow: the parameters before step INJECT_STEP */
    float *after_inject;    /* ... and after it */
    size_t n;
    mp_scaler scaler;
    mp_status s;
} run_result;

/* The plan's parameters, downloaded (synchronizing). */
static float *snapshot(mp_plan *p, const mp_graph *g, size_t *n_out) {
    return mp_plan_sync_params(p, true) == MP_OK ? small_cnn_params(g, n_out) : NULL;
}

/* STEPS steps of the global batch as k micro-batches of GLOBAL_BATCH / k. */
static run_result train(mp_precision prec, int k, bool inject) {
    run_result r = {0};
    const int b = GLOBAL_BATCH / k;
    const size_t per = (size_t)SMALL_C * SMALL_H * SMALL_W;
    const bool scaling = prec == MP_PRECISION_AMP_FP16;
    mp_model m = {0};
    mp_plan *p = NULL;
    mp_cuda_step *st = NULL;
    float *x = malloc((size_t)GLOBAL_BATCH * per * sizeof *x);
    int32_t y[GLOBAL_BATCH];
    mp_status s = x ? small_cnn_build(prec, false, &m) : mp_error(MP_ERR_NOMEM, "batch");
    if (s == MP_OK)
        s = mp_plan_create(m.g, (mp_plan_opts){.batch = b, .training = true, .loss = m.loss,
                                               .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = k == 1},
                           &p);
    mp_cuda_step_opts so = {.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f}, .loss_scaling = scaling,
                            .scaler = {.init_scale = 1024, .growth_interval = 2},
                            .fault_injection = inject,
                            .accumulate = k};
    if (s == MP_OK) s = mp_cuda_step_create(p, &so, &st);
    size_t n = 0;
    for (int t = 0; s == MP_OK && t < STEPS; t++) {
        small_cnn_batch(200 + (uint64_t)t, GLOBAL_BATCH, x, y);
        if (inject && t == INJECT_STEP) {
            r.before_inject = snapshot(p, m.g, &n);
            s = mp_cuda_step_inject_overflow(st);
        }
        for (int micro = 0; micro < k && s == MP_OK; micro++) {
            s = mp_plan_set_input(p, m.input, x + (size_t)micro * b * per, (size_t)b * per);
            if (s == MP_OK) s = mp_plan_set_labels(p, m.labels, y + micro * b, (size_t)b);
            if (s == MP_OK) s = mp_cuda_step_run(st, 0.05f);
            if (s == MP_OK && k == 2 && micro == 0 && t == 0) /* mid-step: nothing to save */
                CHECK_ERR(mp_cuda_step_state_to_host(st, NULL, NULL), MP_ERR_INVALID_ARG, "middle of a step",
                          "1 of 2");
        }
        if (s == MP_OK) s = mp_cuda_step_wait(st);
        if (s == MP_OK && inject && t == INJECT_STEP) r.after_inject = snapshot(p, m.g, &n);
    }
    if (s == MP_OK && scaling) s = mp_cuda_step_scaler(st, &r.scaler);
    if (s == MP_OK) r.params = snapshot(p, m.g, &r.n);
    if (s == MP_OK && !r.params) s = mp_error(MP_ERR_NOMEM, "parameters");
    if (s != MP_OK) fprintf(stderr, "%s k=%d: %s\n", mp_precision_name(prec), k, mp_last_error());
    r.s = s;
    mp_cuda_step_destroy(st);
    mp_plan_destroy(p);
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

static void refused_with_arena_grads(void) {
    mp_model m = {0};
    mp_plan *p = NULL;
    mp_cuda_step *st = NULL;
    mp_status s = small_cnn_build(MP_PRECISION_FP32, false, &m);
    if (s == MP_OK)
        s = mp_plan_create(m.g, (mp_plan_opts){.batch = 8, .training = true, .loss = m.loss,
                                               .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = true},
                           &p);
    CHECK(s == MP_OK, "plan: %s", mp_last_error());
    CHECK(mp_plan_grads_in_arena(p), "the plan does not keep its gradients in the arena");
    mp_cuda_step_opts so = {.optim = {.kind = MP_OPTIM_SGD}, .accumulate = 2};
    if (s == MP_OK) CHECK_ERR(mp_cuda_step_create(p, &so, &st), MP_ERR_INVALID_ARG, "accumulating 2", "grads_in_arena");
    CHECK(st == NULL, "a step was made");
    mp_plan_destroy(p);
    mp_model_free(&m);
}

int main(void) {
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_accumulate: no GPU (%s)\n", mp_cuda_device_list());
        return 2;
    }
    same_update(MP_PRECISION_FP32, 2, 2e-5);
    same_update(MP_PRECISION_FP32, 4, 2e-5);
    /* fp16 activations of 16- and 32-sample convolutions sum in different orders */
    same_update(MP_PRECISION_AMP_FP16, 2, 0x1p-8);
    skipped_step(2);
    refused_with_arena_grads();
    return test_summary("test_cuda_accumulate");
}
