/* numerics_overhead.c — what numerics statistics (mixprec/numerics.h) cost a
 * GPU training step. For each model, batch and precision: two trainers of
 * the same model on cuda:N, one without statistics and one collecting every
 * --every steps (every kind, every node) and reading them after each step as
 * `mixprec train --numerics-log` does; both replay their CUDA graphs. Timed
 * in alternating segments of --segment steps (one CUDA event pair per
 * segment), --rounds rounds: the table gives the medians of the mean step
 * time per segment, the overhead of collecting (the bar: <= 2% at
 * every 100), and one collecting step's time beside a plain one (medians of
 * per-step events over the collecting trainer's steps). Synthetic CIFAR-shaped
 * data (3x32x32, 10 classes) kept on the device. Built only with the CUDA
 * backend. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cell_matrix.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_plan.h"
#include "mixprec/numerics.h"
#include "models/models.h"
#include "core/median.h"

typedef struct {
    int every, segment, rounds, device;
} bench_args;

typedef struct {
    mp_model m;
    mp_optimizer *opt;
    mp_trainer *t;
    cudaStream_t stream;
} run;

static mp_status run_open(run *r, const char *model, mp_precision prec, int batch, int device) {
    memset(r, 0, sizeof *r);
    MP_TRY(mp_model_build(model, 3, 32, 32, 10, &r->m));
    MP_TRY(mp_graph_apply_policy(r->m.g, (mp_policy_opts){.precision = prec}));
    mp_graph_init_params(r->m.g, 1);
    MP_TRY(mp_optimizer_create(r->m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                            .lr = {.base_lr = 0.01f}},
                               &r->opt));
    MP_TRY(mp_trainer_create(r->m.g,
                             &(mp_trainer_opts){.batch = batch, .device = {MP_DEVICE_CUDA, device}, .loss = r->m.loss,
                                                .optimizer = r->opt},
                             &r->t));
    const size_t n = mp_plan_numel(mp_trainer_plan(r->t), r->m.input);
    float *x = malloc(n * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    mp_status s = x && y ? MP_OK : mp_error(MP_ERR_NOMEM, "numerics_overhead: batch");
    mp_rng rng;
    mp_rng_seed(&rng, 3);
    for (size_t i = 0; s == MP_OK && i < n; i++) x[i] = (float)mp_rng_normal(&rng);
    for (int i = 0; s == MP_OK && i < batch; i++) y[i] = (int32_t)mp_rng_below(&rng, 10);
    if (s == MP_OK) s = mp_trainer_set_input(r->t, r->m.input, x, n);
    if (s == MP_OK) s = mp_trainer_set_labels(r->t, r->m.labels, y, (size_t)batch);
    free(x);
    free(y);
    r->stream = mp_cuda_plan_ctx(mp_trainer_plan(r->t))->stream;
    return s;
}

static void run_close(run *r) {
    mp_trainer_destroy(r->t);
    mp_optimizer_destroy(r->opt);
    if (r->m.g) mp_model_free(&r->m);
}

/* n steps; per-step times into ms[] (when given), the segment's mean returned
 * in *mean_ms; collecting trainers read their statistics after each step. */
static mp_status segment(run *r, int n, bool read, cudaEvent_t *ev, double *ms, double *mean_ms, int *records) {
    for (int i = 0; i < n; i++) {
        if (ms) cudaEventRecord(ev[i], r->stream);
        else if (i == 0) cudaEventRecord(ev[0], r->stream);
        MP_TRY(mp_trainer_step(r->t, NULL, NULL));
        if (read) {
            const mp_numerics_record *rec;
            int k = 0;
            int64_t step = 0;
            MP_TRY(mp_trainer_numerics(r->t, &rec, &k, &step));
            if (k) *records = k;
        }
    }
    cudaEventRecord(ev[n], r->stream);
    cudaEventSynchronize(ev[n]);
    float t = 0;
    cudaEventElapsedTime(&t, ev[0], ev[n]);
    *mean_ms = t / n;
    for (int i = 0; ms && i < n; i++) {
        float s = 0;
        cudaEventElapsedTime(&s, ev[i], ev[i + 1]);
        ms[i] = s;
    }
    return MP_OK;
}

static int cell(void *arg, const char *model, const char *batch_s, mp_precision prec, const char *prec_name) {
    const bench_args *a = arg;
    const int batch = atoi(batch_s), n = a->segment;
    run off, on;
    cudaEvent_t *ev = calloc((size_t)n + 1, sizeof *ev);
    double *mean_off = calloc((size_t)a->rounds, sizeof(double)), *mean_on = calloc((size_t)a->rounds, sizeof(double));
    double *plain = calloc((size_t)a->rounds * n, sizeof(double)), *collecting = calloc((size_t)a->rounds * n, sizeof(double));
    double *steps = calloc((size_t)n, sizeof(double));
    int records = 0, n_plain = 0, n_coll = 0;
    mp_status s = ev && mean_off && mean_on && plain && collecting && steps ? MP_OK : mp_error(MP_ERR_NOMEM, "bench");
    for (int i = 0; s == MP_OK && i <= n; i++) cudaEventCreate(&ev[i]);
    if (s == MP_OK) s = run_open(&off, model, prec, batch, a->device);
    if (s == MP_OK) s = run_open(&on, model, prec, batch, a->device);
    if (s == MP_OK) s = mp_trainer_numerics_enable(on.t, &(mp_numerics_opts){.every = a->every});
    double m = 0;
    /* warm-up: libraries, both graphs of each trainer captured (a collection is made) */
    if (s == MP_OK) s = segment(&off, a->every + 3, false, ev, NULL, &m, &records);
    if (s == MP_OK) s = segment(&on, a->every + 3, true, ev, NULL, &m, &records);
    for (int k = 0; s == MP_OK && k < a->rounds; k++) {
        s = segment(&off, n, false, ev, NULL, &mean_off[k], &records);
        const int64_t first = mp_trainer_steps(on.t) + 1;
        if (s == MP_OK) s = segment(&on, n, true, ev, steps, &mean_on[k], &records);
        for (int i = 0; s == MP_OK && i < n; i++) {
            if ((first + i) % a->every == 0) collecting[n_coll++] = steps[i];
            else plain[n_plain++] = steps[i];
        }
    }
    if (s == MP_OK) {
        const double off_ms = mp_median_double(mean_off, a->rounds);
        const double on_ms = mp_median_double(mean_on, a->rounds);
        const double plain_ms = mp_median_double(plain, n_plain);
        const double collecting_ms = n_coll ? mp_median_double(collecting, n_coll) : 0;
        printf("| %s | %s | %d | %d | %.3f | %.3f | %+.2f%% | %.3f | %.3f | %d |\n", model, prec_name, batch, a->every,
               off_ms, on_ms, 100 * (on_ms / off_ms - 1), plain_ms, collecting_ms, records);
    } else {
        fprintf(stderr, "numerics_overhead: %s %s batch %d: %s\n", model, prec_name, batch, mp_last_error());
        printf("| %s | %s | %d | %d | failed | | | | | |\n", model, prec_name, batch, a->every);
    }
    fflush(stdout);
    for (int i = 0; ev && i <= n; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    run_close(&on);
    run_close(&off);
    free(ev);
    free(mean_off);
    free(mean_on);
    free(plain);
    free(collecting);
    free(steps);
    return s == MP_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *models = "cnn10,resnet18", *precisions = "amp-bf16,amp-fp16", *batches = "128,512";
    bench_args a = {.every = 100, .segment = 200, .rounds = 5, .device = 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc) precisions = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--every") && i + 1 < argc) a.every = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--segment") && i + 1 < argc) a.segment = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) a.rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) a.device = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: numerics_overhead [--models a,b] [--precisions p,q] [--batches 128,512] "
                            "[--every N] [--segment STEPS] [--rounds R] [--device N]\n");
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (a.every < 1 || a.segment < a.every || a.rounds < 1) {
        fprintf(stderr, "numerics_overhead: need --every >= 1, --segment >= --every, --rounds >= 1\n");
        return 2;
    }
    printf("| model | precision | batch | every | ms/step without | ms/step with | overhead | plain step ms | "
           "collecting step ms | records |\n|---|---|---|---|---|---|---|---|---|---|\n");
    const int failures = bench_for_each_cell("numerics_overhead", models, batches, precisions, cell, &a);
    return failures < 0 ? 2 : failures ? 1 : 0;
}
