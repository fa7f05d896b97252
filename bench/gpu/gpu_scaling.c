/* gpu_scaling.c — data-parallel scaling: for each model, per-GPU batch and
 * precision, the training step on 1 GPU (no communicator) and on N GPUs
 * (ranks as threads, NCCL all-reduce of the gradients overlapped with
 * backward, found-inf all-reduced), both replayed from CUDA graphs on
 * synthetic CIFAR-shaped data kept on the devices. Time: wall clock of a
 * window of steps, all ranks started together (barrier) and waited for,
 * median of --repeats windows; images/s = ranks x batch x steps / time.
 * Prints one table row per cell with the ratio N-GPU / 1-GPU images/s.
 * Under mpirun (one process per GPU) it measures one cell, N-GPU column
 * only: `mpirun -np 2 gpu_scaling --models cnn10 --batches 128`; there the
 * windows are rank 0's (the ranks meet at every step's all-reduce, not at a
 * barrier before each window). --f32-weight-grads: plans with
 * mp_plan_opts.f32_weight_grads (one GPU's weights within fp32 tolerance).
 * Built only with the CUDA backend. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cell_matrix.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_plan.h"
#include "dist/dist.h"
#include "models/models.h"
#include "graph/plan.h"
#include "core/median.h"

enum { MAX_RANKS = 8, MAX_REPEATS = 15 };

typedef struct {
    const char *model;
    mp_precision prec;
    int batch, steps, repeats, world;
    const char *wire; /* NULL = the policy's */
    double bucket_mb; /* 0: the default */
    bool f32_wgrad;   /* mp_plan_opts.f32_weight_grads */
    mp_dist_group *group;
    pthread_barrier_t *barrier;
} cell;

typedef struct {
    const cell *c;
    int rank;
    double window_s[MAX_REPEATS];
    int buckets;
    mp_status s;
    char msg[512];
} rank_job;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static mp_status rank_train(rank_job *j, mp_dist *d) {
    const cell *c = j->c;
    const int device = d ? mp_dist_device(d) : 0;
    mp_model m = {0};
    mp_optimizer *opt = NULL;
    mp_trainer *tr = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    mp_status s = mp_model_build(c->model, 3, 32, 32, 10, &m);
    if (s == MP_OK) s = mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = c->prec});
    if (s == MP_OK) {
        mp_graph_init_params(m.g, 1);
        s = mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                          .lr = {.base_lr = 0.01f}},
                                &opt);
    }
    /* the policy's loss scaling, the all-reduce in its 16-bit dtype unless --wire says */
    if (s == MP_OK)
        s = mp_trainer_create(m.g,
                              &(mp_trainer_opts){.batch = c->batch, .device = {MP_DEVICE_CUDA, device},
                                                 .loss = m.loss, .optimizer = opt, .dist = d, .allreduce = c->wire,
                                                 .bucket_mb = c->bucket_mb, .f32_weight_grads = c->f32_wgrad},
                              &tr);
    if (s == MP_OK) {
        j->buckets = mp_cuda_trainer_buckets(tr);
        size_t in_n = mp_plan_numel(mp_trainer_plan(tr), m.input);
        x = malloc(in_n * sizeof *x);
        y = malloc((size_t)c->batch * sizeof *y);
        mp_rng rng;
        mp_rng_seed(&rng, 3 + (uint64_t)j->rank);
        for (size_t i = 0; x && i < in_n; i++) x[i] = (float)mp_rng_normal(&rng);
        for (int i = 0; y && i < c->batch; i++) y[i] = (int32_t)mp_rng_below(&rng, 10);
        s = x && y ? mp_trainer_set_input(tr, m.input, x, in_n) : mp_error(MP_ERR_NOMEM, "batch");
        if (s == MP_OK) s = mp_trainer_set_labels(tr, m.labels, y, (size_t)c->batch);
    }
    for (int i = 0; s == MP_OK && i < 3; i++) s = mp_trainer_step(tr, NULL, NULL); /* warm-up, capture */
    if (s == MP_OK) s = mp_trainer_wait(tr, NULL);
    for (int r = 0; r < c->repeats; r++) {
        /* every rank reaches the barrier, failed or not, so none waits forever */
        if (c->barrier) pthread_barrier_wait(c->barrier);
        double t0 = now_s();
        for (int i = 0; s == MP_OK && i < c->steps; i++) s = mp_trainer_step(tr, NULL, NULL);
        if (s == MP_OK) s = mp_trainer_wait(tr, NULL);
        j->window_s[r] = now_s() - t0;
    }
    if (s != MP_OK) mp_dist_fail(d, s);
    free(x);
    free(y);
    mp_trainer_destroy(tr);
    mp_optimizer_destroy(opt);
    mp_model_free(&m);
    return s;
}

static void *rank_main(void *arg) {
    rank_job *j = arg;
    mp_dist *d = NULL;
    j->s = j->c->group ? mp_dist_group_join(j->c->group, j->rank, j->rank, &d) : MP_OK;
    if (j->s == MP_OK) j->s = rank_train(j, d);
    else if (j->c->barrier) /* still meet the others at every barrier */
        for (int r = 0; r < j->c->repeats; r++) pthread_barrier_wait(j->c->barrier);
    if (j->s != MP_OK) snprintf(j->msg, sizeof j->msg, "%s", mp_last_error());
    mp_dist_destroy(d);
    return NULL;
}

/* images/s of one configuration (world 1 without a communicator unless
 * with_comm: then a one-rank communicator, which prices the all-reduce
 * path without another GPU); -1 on failure. */
static double run(cell c, int world, bool with_comm, int *buckets) {
    c.world = world;
    pthread_barrier_t barrier;
    mp_dist_group *group = NULL;
    if (world > 1 || with_comm) {
        if (mp_dist_group_create(world, 120, &group) != MP_OK) {
            fprintf(stderr, "gpu_scaling: %s\n", mp_last_error());
            return -1;
        }
        pthread_barrier_init(&barrier, NULL, (unsigned)world);
        c.barrier = &barrier;
    }
    c.group = group;
    rank_job jobs[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < world; r++) {
        jobs[r] = (rank_job){.c = &c, .rank = r};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
    mp_dist_group_destroy(group);
    if (group) pthread_barrier_destroy(&barrier);
    for (int r = 0; r < world; r++)
        if (jobs[r].s != MP_OK) {
            fprintf(stderr, "gpu_scaling: %s %s batch %d, %d GPU(s), rank %d: %s\n", c.model,
                    mp_precision_name(c.prec), c.batch, world, r, jobs[r].msg);
            return -1;
        }
    double w[MAX_REPEATS];
    for (int i = 0; i < c.repeats; i++) { /* a window lasts until the slowest rank is done */
        w[i] = 0;
        for (int r = 0; r < world; r++)
            if (jobs[r].window_s[i] > w[i]) w[i] = jobs[r].window_s[i];
    }
    *buckets = jobs[0].buckets;
    return (double)world * c.batch * c.steps / mp_median_double(w, c.repeats);
}

/* One row: the cell on 1 GPU, on 1 GPU with a one-rank communicator, on
 * proto->world GPUs. */
static int scaling_row(void *arg, const char *model, const char *batch, mp_precision prec, const char *prec_name) {
    const cell *proto = arg;
    cell c = *proto;
    c.model = model, c.batch = atoi(batch), c.prec = prec;
    int buckets = 0, unused = 0;
    double one = run(c, 1, false, &unused), comm = run(c, 1, true, &unused), many = run(c, proto->world, false, &buckets);
    if (one <= 0 || comm <= 0 || many <= 0) {
        printf("| %s | %s | %s | failed | | | | |\n", model, prec_name, batch);
        return 1;
    }
    printf("| %s | %s | %s | %.0f | %.0f | %.0f | %.2fx | %d |\n", model, prec_name, batch, one, comm, many, many / one,
           buckets);
    return 0;
}

/* Under mpirun: this process is one rank of an N-GPU cell; rank 0 prints
 * the N-GPU images/s (the MPI communicator lives for one cell). */
static int mpi_cell(const cell *proto, const char *model, const char *batch, const char *prec_name) {
    cell c = *proto;
    c.model = model, c.batch = atoi(batch);
    if (mp_precision_parse(prec_name, &c.prec) != MP_OK) {
        fprintf(stderr, "gpu_scaling: %s\n", mp_last_error());
        return 2;
    }
    mp_dist *d = NULL;
    rank_job j = {.c = &c};
    j.s = mp_dist_mpi_create(120, &d);
    if (j.s == MP_OK) {
        j.rank = mp_dist_rank(d), c.world = mp_dist_world(d);
        j.s = rank_train(&j, d);
    }
    if (j.s != MP_OK) fprintf(stderr, "gpu_scaling: rank %d: %s\n", j.rank, mp_last_error());
    const double t = mp_median_double(j.window_s, c.repeats);
    if (j.s == MP_OK && j.rank == 0)
        printf("| %s | %s | %s | %d processes (mpirun) | %.0f images/s | %.3f ms/step |\n", model, prec_name, batch,
               c.world, (double)c.world * c.batch * c.steps / t, 1e3 * t / c.steps);
    mp_dist_destroy(d);
    return j.s == MP_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *models = "resnet18,cnn10", *precisions = "amp-bf16", *batches = "512,128", *wire = NULL;
    int steps = 30, repeats = 5, gpus = 2;
    double bucket_mb = 0;
    bool f32_wgrad = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--precisions") && i + 1 < argc) precisions = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gpus") && i + 1 < argc) gpus = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--allreduce") && i + 1 < argc) wire = argv[++i];
        else if (!strcmp(argv[i], "--bucket-mb") && i + 1 < argc) bucket_mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--f32-weight-grads")) f32_wgrad = true;
        else {
            fprintf(stderr, "usage: gpu_scaling [--models a,b] [--precisions p,q] [--batches 512,128] (per GPU) "
                            "[--steps N] [--repeats R] [--gpus N] [--allreduce fp32|fp16|bf16] [--bucket-mb X] "
                            "[--f32-weight-grads]\n");
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (steps < 1 || repeats < 1 || repeats > MAX_REPEATS) {
        fprintf(stderr, "gpu_scaling: need --steps >= 1 and --repeats 1..%d\n", MAX_REPEATS);
        return 2;
    }
    int mpi_world = 0, mpi_rank = 0;
    bool mpi = false;
    if (mp_dist_mpi_env(&mpi, &mpi_world, &mpi_rank) != MP_OK) {
        fprintf(stderr, "gpu_scaling: %s\n", mp_last_error());
        return 2;
    }
    if (mpi) {
        if (strchr(models, ',') || strchr(batches, ',') || strchr(precisions, ',')) {
            fprintf(stderr, "gpu_scaling: under mpirun, name one model, one batch and one precision\n");
            return 2;
        }
        cell proto = {.steps = steps, .repeats = repeats, .wire = wire, .bucket_mb = bucket_mb,
                      .f32_wgrad = f32_wgrad};
        return mpi_cell(&proto, models, batches, precisions);
    }
    int found = mp_cuda_device_count();
    if (gpus < 1 || gpus > MAX_RANKS || gpus > found) {
        fprintf(stderr, "gpu_scaling: need --gpus 1..%d (found %d GPUs: %s)\n",
                found < MAX_RANKS ? found : MAX_RANKS, found, mp_cuda_device_list());
        return 2;
    }
    printf("| model | precision | batch/GPU | 1 GPU images/s | 1 GPU + 1-rank all-reduce | %d GPUs images/s | speed-up "
           "| buckets |\n", gpus);
    printf("|---|---|---|---|---|---|---|---|\n");
    cell proto = {.steps = steps, .repeats = repeats, .wire = wire, .bucket_mb = bucket_mb, .world = gpus,
                  .f32_wgrad = f32_wgrad};
    int failures = bench_for_each_cell("gpu_scaling", models, batches, precisions, scaling_row, &proto);
    return failures < 0 ? 2 : failures ? 1 : 0;
}
