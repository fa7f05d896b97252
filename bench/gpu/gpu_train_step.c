/* gpu_train_step.c — training-step throughput on one GPU: for each model,
 * batch size and precision policy, a plan on cuda:N with the whole step
 * (forward, backward, unscale/check, SGD, scaler update) replayed from a
 * CUDA graph; synthetic CIFAR-shaped data (3x32x32, 10 classes) kept on the
 * device. Prints one table row per cell: ms/step (median of per-step CUDA
 * event times), images/s, device memory used by the run (cudaMemGetInfo
 * difference, library workspaces included), TFLOP/s and its share of the
 * bf16 GEMM rate given with --gemm-tflops (measured in the same device call).
 * --f32-weight-grads: plans with mp_plan_opts.f32_weight_grads (its cost).
 * --profile: the steps run without a graph, waiting after every node, and
 * each cell's time per op kind goes to stderr (its step times are then the
 * profiled ones, not the graph's).
 * Built only with the CUDA backend. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell_matrix.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_plan.h"
#include "graph/plan.h"
#include "models/models.h"
#include "core/median.h"

typedef struct {
    double ms, images_per_s, device_mib, arena_mib, tflops;
    float loss0, loss1;
} cell_result;

static int run_cell(const char *model, mp_precision prec, int batch, int steps, int device, bool profile,
                    bool f32_wgrad, cell_result *r) {
    memset(r, 0, sizeof *r);
    cudaSetDevice(device);
    cudaFree(0);
    size_t before = mp_cuda_used_bytes();
    mp_model m;
    if (mp_model_build(model, 3, 32, 32, 10, &m) != MP_OK ||
        mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = prec}) != MP_OK) {
        fprintf(stderr, "gpu_train_step: %s\n", mp_last_error());
        return -1;
    }
    mp_graph_init_params(m.g, 1);
    mp_optimizer *opt = NULL;
    mp_trainer *tr = NULL;
    mp_plan *plan = NULL;
    /* SGD with momentum, the policy's loss scaling; the plan keeps gradients
     * in its arena (in the weights' dtype where nothing rescales them) */
    mp_status s = mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                                .lr = {.base_lr = 0.01f}},
                                      &opt);
    if (s == MP_OK)
        s = mp_trainer_create(m.g,
                              &(mp_trainer_opts){.batch = batch, .device = {MP_DEVICE_CUDA, device}, .loss = m.loss,
                                                 .optimizer = opt, .profile = profile,
                                                 .f32_weight_grads = f32_wgrad},
                              &tr);
    if (s == MP_OK) plan = mp_trainer_plan(tr);
    const size_t after_plan = mp_cuda_used_bytes(), after_step = after_plan;
    float *x = NULL;
    int32_t *y = NULL;
    size_t in_n = plan ? mp_plan_numel(plan, m.input) : 0;
    if (s == MP_OK) {
        x = malloc(in_n * sizeof *x);
        y = malloc((size_t)batch * sizeof *y);
        mp_rng rng;
        mp_rng_seed(&rng, 3);
        for (size_t i = 0; i < in_n; i++) x[i] = (float)mp_rng_normal(&rng);
        for (int i = 0; i < batch; i++) y[i] = (int32_t)mp_rng_below(&rng, 10);
        s = mp_trainer_set_input(tr, m.input, x, in_n);
        if (s == MP_OK) s = mp_trainer_set_labels(tr, m.labels, y, (size_t)batch);
    }
    float *t = calloc((size_t)steps, sizeof *t);
    cudaEvent_t *ev = calloc((size_t)steps + 1, sizeof *ev);
    cudaStream_t stream = s == MP_OK ? mp_cuda_plan_ctx(plan)->stream : 0;
    for (int i = 0; s == MP_OK && i <= steps; i++) cudaEventCreate(&ev[i]);
    for (int i = 0; s == MP_OK && i < 3; i++) s = mp_trainer_step(tr, NULL, NULL); /* warm-up, graph capture */
    if (s == MP_OK) s = mp_trainer_loss(tr, &r->loss0);
    const size_t after_warm = mp_cuda_used_bytes();
    for (int i = 0; s == MP_OK && i < steps; i++) {
        cudaEventRecord(ev[i], stream);
        s = mp_trainer_step(tr, NULL, NULL);
    }
    if (s == MP_OK) {
        cudaEventRecord(ev[steps], stream);
        cudaEventSynchronize(ev[steps]);
        for (int i = 0; i < steps; i++) cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]);
        s = mp_trainer_loss(tr, &r->loss1);
    }
    if (s == MP_OK) {
        r->ms = mp_median_float(t, steps);
        r->images_per_s = batch / (r->ms / 1e3);
        size_t after = mp_cuda_used_bytes();
        r->device_mib = after > before ? (double)(after - before) / (1 << 20) : 0;
        r->tflops = mp_graph_flops(m.g, batch, true) / (r->ms / 1e3) / 1e12;
        r->arena_mib = (double)mp_plan_arena_bytes(plan) / (1 << 20);
        /* where the device memory went (stderr; the issue-4 memory bar at batch 128) */
        const double mib = 1.0 / (1 << 20);
        fprintf(stderr,
                "gpu_train_step: memory %s %s %d: plan and step state %+.0f MiB (arena %.0f, most alive at once "
                "%.0f), first steps and graph capture %+.0f, timed steps %+.0f, total %.0f MiB\n",
                model, mp_precision_name(prec), batch, ((double)after_plan - (double)before) * mib, r->arena_mib,
                (double)plan->arena_peak.bytes * mib, ((double)after_warm - (double)after_step) * mib,
                ((double)after - (double)after_warm) * mib, r->device_mib);
        mp_plan_print_memory(plan, stderr);
        if (profile) {
            fprintf(stderr, "\nprofile: %s %s batch %d, %d steps + 3 warm-up, every node waited for:\n", model,
                    mp_precision_name(prec), batch, steps);
            mp_plan_print_profile(plan, stderr);
        }
    } else {
        fprintf(stderr, "gpu_train_step: %s %s batch %d: %s\n", model, mp_precision_name(prec), batch, mp_last_error());
    }
    for (int i = 0; ev && i <= steps; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    free(ev);
    free(t);
    free(x);
    free(y);
    mp_trainer_destroy(tr);
    mp_optimizer_destroy(opt);
    mp_model_free(&m);
    return s == MP_OK ? 0 : -1;
}

typedef struct {
    int steps, device;
    double gemm_tflops;
    bool profile, f32_wgrad;
} step_args;

static int step_row(void *arg, const char *model, const char *batch, mp_precision prec, const char *prec_name) {
    const step_args *a = arg;
    cell_result r;
    if (run_cell(model, prec, atoi(batch), a->steps, a->device, a->profile, a->f32_wgrad, &r)) {
        printf("| %s | %s | %s | failed | | | | | | |\n", model, prec_name, batch);
        return 1;
    }
    char share[32] = "-";
    if (a->gemm_tflops > 0) snprintf(share, sizeof share, "%.1f%%", 100 * r.tflops / a->gemm_tflops);
    printf("| %s | %s | %s | %.2f | %.0f | %.0f | %.1f | %s | %.3f -> %.3f | %.0f |\n", model, prec_name, batch, r.ms,
           r.images_per_s, r.device_mib, r.tflops, share, r.loss0, r.loss1, r.arena_mib);
    return 0;
}

int main(int argc, char **argv) {
    const char *models = "cnn10,resnet18", *precisions = "fp32,tf32,amp-fp16,amp-bf16,o2-fp16,fp16",
               *batches = "128,512,2048";
    int steps = 20, device = 0;
    bool profile = false, f32_wgrad = false;
    double gemm_tflops = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc) precisions = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gemm-tflops") && i + 1 < argc) gemm_tflops = atof(argv[++i]);
        else if (!strcmp(argv[i], "--profile")) profile = true;
        else if (!strcmp(argv[i], "--f32-weight-grads")) f32_wgrad = true;
        else {
            fprintf(stderr, "usage: gpu_train_step [--models a,b] [--precisions p,q] [--batches 128,512] [--steps N] "
                            "[--device N] [--gemm-tflops X] [--profile] [--f32-weight-grads]\n");
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (steps < 1) {
        fprintf(stderr, "gpu_train_step: --steps must be positive\n");
        return 2;
    }
    printf("| model | precision | batch | ms/step | images/s | device MiB | TFLOP/s | share of bf16 GEMM | loss first -> last | arena MiB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    step_args sa = {.steps = steps, .device = device, .gemm_tflops = gemm_tflops, .profile = profile,
                    .f32_wgrad = f32_wgrad};
    int failures = bench_for_each_cell("gpu_train_step", models, batches, precisions, step_row, &sa);
    return failures < 0 ? 2 : failures ? 1 : 0;
}
