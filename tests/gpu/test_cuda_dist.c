/* test_cuda_dist.c — data parallelism over NCCL, ranks as threads (one GPU
 * each), on a small CNN without BatchNorm (per-GPU batch statistics make
 * the runs differ by design) unless said:
 *  1. R ranks x batch b reach the same weights after K steps as one GPU x
 *     batch R*b: fp32, and amp-bf16 with f32_weight_grads (weight gradients
 *     that are f32 sums, never rounded to bf16 on a rank), with the f32
 *     all-reduce within fp32 reduction-order tolerance; amp-bf16 by default
 *     (each rank rounds its conv weight gradients to bf16) and with the
 *     bf16 all-reduce it uses by default within one bf16 ulp; every rank
 *     ends with bit-identical weights;
 *     against one GPU accumulating R micro-batches of b (the same
 *     convolutions of b samples: the ranks share one algorithm search,
 *     deterministic ones), amp-bf16 too is within fp32 reduction-order
 *     tolerance, and so are ranks that themselves accumulate 2 micro-batches;
 *  2. small buckets (many all-reduces overlapping backward) give the
 *     weights of one bucket (fp32, within reduction-order tolerance, with
 *     deterministic convolutions; by default the difference is printed);
 *  3. with BatchNorm: synchronized statistics reach one GPU's weights and
 *     running stats, per-GPU statistics (the default) do not;
 *  4. amp-fp16 with an overflow forced on the last rank only (+inf written
 *     into its gradient after the all-reduce, inject.h): every rank skips
 *     that step (found-inf all-reduced), keeps the same loss scale and the
 *     same weights;
 *  5. a rank that fails stops the others with an error within the timeout
 *     (no hang).
 * Every rank and the one-GPU reference train through the public trainer
 * (mp_trainer_opts.dist, .allreduce, .bucket_mb, .sync_bn, .accumulate).
 * The cases under MIXPREC_DETERMINISTIC=1 (all of case 1 for one rank, the
 * accumulating references for more, and case 2's check) run in a child
 * process started with it, as the library reads its environment once.
 * Usage: test_cuda_dist [RANKS [deterministic]] (RANKS default 2; needs that
 * many GPUs; with 1 the communicator has one rank and case 1 must match to
 * 1e-6; "deterministic": only the child's cases, under MIXPREC_DETERMINISTIC=1).
 * Run by scripts/gpu-check. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/policy.h"
#include "check.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cuda_plan.h"
#include "dist/dist.h"
#include "graph/plan.h"
#include "inject.h"
#include "models/models.h"
#include "rerun.h"
#include "small_cnn.h"
#include "train/trainer.h"

enum { GLOBAL_BATCH = 32, C = SMALL_C, H = SMALL_H, W = SMALL_W, CLASSES = SMALL_CLASSES, STEPS = 8, MAX_RANKS = 8 };

typedef struct {
    mp_precision prec;
    mp_dtype wire;
    size_t bucket_bytes;
    int inject_rank;      /* -1: none; else the rank whose step INJECT_STEP overflows */
    int fail_rank;        /* -1: none; else the rank that fails at step 2 */
    bool bn, sync_bn;     /* BatchNorm after each conv; synchronized over the ranks */
    int accumulate;       /* the one-GPU reference: 0 = one batch of GLOBAL_BATCH; n = n micro-batches */
    int rank_micro;       /* micro-batches per rank and step (0: 1) */
    bool f32_wgrad;       /* mp_plan_opts.f32_weight_grads on every rank and the reference */
} run_cfg;
enum { INJECT_STEP = 3 };

typedef struct {
    run_cfg cfg;
    int rank, world;
    mp_dist_group *group;  /* NULL: the one-GPU reference */
    float *params;         /* out: every parameter and buffer, concatenated */
    size_t n_params;
    mp_scaler scaler;
    int buckets;
    mp_status s;
    char msg[512];
    double seconds;
} rank_run;

/* --allreduce's name of an all-reduce dtype. */
static const char *wire_name(mp_dtype wire) {
    return wire == MP_DTYPE_F16 ? "fp16" : wire == MP_DTYPE_BF16 ? "bf16" : "fp32";
}

/* The global batch of step t (the same on every rank). */
static void global_batch(int t, float *x, int32_t *y) { small_cnn_batch(100 + (uint64_t)t, GLOBAL_BATCH, x, y); }

static mp_status train(rank_run *rr, mp_dist *d) {
    const int want = d ? rr->cfg.rank_micro : rr->cfg.accumulate;
    const int k = want > 1 ? want : 1; /* micro-batches per step */
    const int b = GLOBAL_BATCH / rr->world / k;
    const size_t per = (size_t)C * H * W;
    mp_model m = {0};
    mp_optimizer *opt = NULL;
    mp_trainer *t = NULL;
    gpu_inject inj = {0};
    float *x = malloc((size_t)GLOBAL_BATCH * per * sizeof *x);
    int32_t y[GLOBAL_BATCH];
    mp_status s = x ? small_cnn_build(rr->cfg.prec, rr->cfg.bn, &m) : mp_error(MP_ERR_NOMEM, "batch");
    bool scaling = rr->cfg.prec == MP_PRECISION_AMP_FP16;
    if (s == MP_OK)
        s = mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                          .lr = {.base_lr = 0.05f}},
                                &opt);
    if (s == MP_OK)
        s = mp_trainer_create(
            m.g,
            &(mp_trainer_opts){.batch = b, .device = {MP_DEVICE_CUDA, d ? mp_dist_device(d) : 0}, .input = m.input,
                               .labels = m.labels, .loss = m.loss, .optimizer = opt,
                               .loss_scaling = scaling ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_OFF, .dist = d,
                               .allreduce = wire_name(rr->cfg.wire),
                               .bucket_mb = (double)rr->cfg.bucket_bytes / 1048576.0,
                               .sync_bn = rr->cfg.sync_bn, .f32_weight_grads = rr->cfg.f32_wgrad, .accumulate = k},
            &t);
    if (s == MP_OK && rr->cfg.inject_rank >= 0) s = gpu_inject_attach(t, &inj);
    if (s == MP_OK) rr->buckets = mp_cuda_trainer_buckets(t);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; s == MP_OK && step < STEPS; step++) {
        if (rr->cfg.fail_rank == rr->rank && step == 2) {
            s = mp_error(MP_ERR_INTERNAL, "rank %d: injected failure", rr->rank);
            break;
        }
        global_batch(step, x, y);
        if (rr->cfg.inject_rank == rr->rank && step == INJECT_STEP) s = gpu_inject_arm(t, &inj);
        for (int micro = 0; micro < k && s == MP_OK; micro++) { /* rank r's k shards follow rank r-1's */
            const int shard = rr->rank * k + micro;
            s = mp_trainer_step(t, &(mp_batch){.images = x + (size_t)shard * b * per, .labels = y + shard * b, .n = b},
                                NULL);
        }
        if (s == MP_OK) s = mp_trainer_wait(t, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rr->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (s == MP_OK) s = mp_trainer_sync(t, NULL);
    if (s == MP_OK) rr->scaler = t->scaler; /* exact after the sync's wait */
    if (s == MP_OK) rr->params = small_cnn_params(m.g, &rr->n_params);
    if (s != MP_OK) mp_dist_fail(d, s);
    mp_trainer_destroy(t);
    gpu_inject_free(&inj);
    mp_optimizer_destroy(opt);
    if (m.g) mp_model_free(&m);
    free(x);
    return s;
}

static void *rank_main(void *arg) {
    rank_run *rr = arg;
    mp_dist *d = NULL;
    rr->s = rr->group ? mp_dist_group_join(rr->group, rr->rank, rr->rank, &d) : MP_OK;
    if (rr->s == MP_OK) rr->s = train(rr, d);
    if (rr->s != MP_OK) snprintf(rr->msg, sizeof rr->msg, "%s", mp_last_error());
    mp_dist_destroy(d);
    return NULL;
}

/* world ranks (world 0: the one-GPU reference with the whole batch). */
static void run(const run_cfg *cfg, int world, rank_run *out, double timeout_s) {
    const int n = world > 0 ? world : 1;
    mp_dist_group *group = NULL;
    if (world > 0) {
        mp_status s = mp_dist_group_create(world, timeout_s, &group);
        CHECK(s == MP_OK, "group of %d: %s", world, mp_last_error());
        if (s != MP_OK) return;
    }
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        out[r] = (rank_run){.cfg = *cfg, .rank = r, .world = n, .group = group};
        pthread_create(&th[r], NULL, rank_main, &out[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    mp_dist_group_destroy(group);
}

static double rel_diff(const rank_run *a, const rank_run *b) {
    return small_cnn_rel_diff(a->params, b->params, b->n_params);
}

static bool identical(const rank_run *a, const rank_run *b) {
    return a->n_params == b->n_params && !memcmp(a->params, b->params, a->n_params * sizeof(float));
}

static void free_runs(rank_run *r, int n) {
    for (int i = 0; i < n; i++) free(r[i].params);
}

/* R ranks, each with m micro-batches of b per step, against one GPU with
 * one batch of R*m*b or (accumulate) with R*m micro-batches of b. */
static void equivalence(int world, mp_precision prec, mp_dtype wire, bool f32_wgrad, bool accumulate, int m,
                        double tol) {
    run_cfg cfg = {.prec = prec, .wire = wire, .inject_rank = -1, .fail_rank = -1,
                   .accumulate = accumulate ? world * m : 0, .rank_micro = m, .f32_wgrad = f32_wgrad};
    rank_run ref[1], dp[MAX_RANKS];
    run(&cfg, 0, ref, 60);
    run(&cfg, world, dp, 60);
    bool ok = ref[0].s == MP_OK;
    CHECK(ok, "reference run: %s", ref[0].msg);
    for (int r = 0; r < world; r++) {
        CHECK(dp[r].s == MP_OK, "rank %d: %s", r, dp[r].msg);
        ok = ok && dp[r].s == MP_OK;
    }
    if (ok) {
        double e = rel_diff(&dp[0], &ref[0]);
        const int b = GLOBAL_BATCH / world / m;
        char ranks[64], one_gpu[64];
        if (m > 1) snprintf(ranks, sizeof ranks, "%d ranks x %d micro-batches of %d", world, m, b);
        else snprintf(ranks, sizeof ranks, "%d ranks x batch %2d", world, b);
        if (accumulate) snprintf(one_gpu, sizeof one_gpu, "%d micro-batches of %d", world * m, b);
        else snprintf(one_gpu, sizeof one_gpu, "batch %d", GLOBAL_BATCH);
        printf("%-9s %s vs 1 GPU x %s, %s all-reduce%s: weights after %d steps differ by %.2e (tolerance %.0e), "
               "%d bucket(s)\n",
               mp_precision_name(prec), ranks, one_gpu, mp_dtype_name(wire), f32_wgrad ? ", f32 weight grads" : "",
               STEPS, e, tol, dp[0].buckets);
        CHECK(e <= tol, "%s %s: %d ranks differ from one GPU by %g", mp_precision_name(prec), mp_dtype_name(wire),
              world, e);
        for (int r = 1; r < world; r++)
            CHECK(identical(&dp[r], &dp[0]), "%s: rank %d's weights differ from rank 0's", mp_precision_name(prec), r);
        const double moved = small_cnn_moved(prec, ref[0].params, ref[0].n_params); /* the runs trained */
        CHECK(moved > 1e-3, "%s: the weights hardly moved (%g)", mp_precision_name(prec), moved);
    }
    free_runs(ref, 1);
    free_runs(dp, world);
}

/* BatchNorm: synchronized statistics make R ranks x b equal one GPU x R*b;
 * per-GPU statistics (the default) do not. */
static void sync_batchnorm(int world) {
    run_cfg cfg = {.prec = MP_PRECISION_FP32, .wire = MP_DTYPE_F32, .inject_rank = -1, .fail_rank = -1, .bn = true,
                   .sync_bn = true};
    run_cfg per_gpu = cfg;
    per_gpu.sync_bn = false;
    rank_run ref[1], sync[MAX_RANKS], own[MAX_RANKS];
    run(&cfg, 0, ref, 60);
    run(&cfg, world, sync, 60);
    run(&per_gpu, world, own, 60);
    bool ok = ref[0].s == MP_OK;
    for (int r = 0; r < world; r++) ok = ok && sync[r].s == MP_OK && own[r].s == MP_OK;
    CHECK(ok, "BatchNorm runs failed: %s | %s | %s", ref[0].msg, sync[world - 1].msg, own[world - 1].msg);
    if (ok) {
        double e_sync = rel_diff(&sync[0], &ref[0]), e_own = rel_diff(&own[0], &ref[0]);
        printf("BatchNorm, fp32, %d ranks x batch %d vs 1 GPU x batch %d: weights and running stats differ by %.2e "
               "synchronized (tolerance 1e-4), %.2e per GPU\n",
               world, GLOBAL_BATCH / world, GLOBAL_BATCH, e_sync, e_own);
        CHECK(e_sync <= 1e-4, "synchronized BatchNorm: %d ranks differ from one GPU by %g", world, e_sync);
        if (world > 1) CHECK(e_own > 10 * e_sync, "per-GPU BatchNorm should differ (%g vs %g)", e_own, e_sync);
        for (int r = 1; r < world; r++)
            CHECK(identical(&sync[r], &sync[0]), "synchronized BatchNorm: rank %d differs from rank 0", r);
    }
    free_runs(ref, 1);
    free_runs(sync, world);
    free_runs(own, world);
}

/* checked: under MIXPREC_DETERMINISTIC=1 (the child), where only the
 * bucket layout differs between the two runs; else the difference is
 * printed only: a timed convolution pick with atomics makes two runs of the
 * same training differ by itself (4e-5 after 60 steps seen, fp32, 1 rank). */
static void buckets(int world, bool checked) {
    run_cfg one = {.prec = MP_PRECISION_FP32, .wire = MP_DTYPE_F32, .bucket_bytes = 1 << 30, .inject_rank = -1,
                   .fail_rank = -1};
    run_cfg many = one;
    many.bucket_bytes = 256; /* every parameter its own bucket */
    rank_run a[MAX_RANKS], b[MAX_RANKS];
    run(&one, world, a, 60);
    run(&many, world, b, 60);
    bool ok = true;
    for (int r = 0; r < world; r++) ok = ok && a[r].s == MP_OK && b[r].s == MP_OK;
    CHECK(ok, "bucket runs failed: %s %s", a[0].msg, b[0].msg);
    if (ok) {
        double e = rel_diff(&b[0], &a[0]);
        printf("buckets: fp32, %d bucket vs %d buckets (all-reduces overlapping backward)%s: weights differ by %.2e "
               "(%s)\n", a[0].buckets, b[0].buckets, checked ? ", deterministic convolutions" : "", e,
               checked ? "tolerance 1e-5" : "not checked: timed convolution picks may use atomics");
        /* 256-byte buckets close at the first tensor that fills them: fc.w | fc.b conv2.w | conv2.b conv1.w | conv1.b */
        CHECK(a[0].buckets == 1 && b[0].buckets == 4, "bucket counts %d and %d", a[0].buckets, b[0].buckets);
        CHECK(!checked || e <= 1e-5, "many small buckets change the result by %g", e);
    }
    free_runs(a, world);
    free_runs(b, world);
}

static void forced_overflow(int world) {
    run_cfg cfg = {.prec = MP_PRECISION_AMP_FP16, .wire = MP_DTYPE_F16, .inject_rank = world - 1, .fail_rank = -1};
    rank_run dp[MAX_RANKS];
    run(&cfg, world, dp, 60);
    bool ok = true;
    for (int r = 0; r < world; r++) {
        CHECK(dp[r].s == MP_OK, "rank %d: %s", r, dp[r].msg);
        ok = ok && dp[r].s == MP_OK;
    }
    if (ok) {
        printf("forced overflow on rank %d at step %d: ", world - 1, INJECT_STEP + 1);
        for (int r = 0; r < world; r++)
            printf("rank %d skipped %lld, scale %g; ", r, (long long)dp[r].scaler.skipped_steps,
                   (double)mp_scaler_scale(&dp[r].scaler));
        printf("\n");
        for (int r = 0; r < world; r++) {
            CHECK(dp[r].scaler.skipped_steps == 1, "rank %d skipped %lld steps", r,
                  (long long)dp[r].scaler.skipped_steps);
            CHECK(mp_scaler_scale(&dp[r].scaler) == 32768.0f, "rank %d scale %g", r,
                  (double)mp_scaler_scale(&dp[r].scaler));
            CHECK(identical(&dp[r], &dp[0]), "rank %d's weights differ from rank 0's", r);
        }
    }
    free_runs(dp, world);
}

static void failing_rank(int world) {
    run_cfg cfg = {.prec = MP_PRECISION_FP32, .wire = MP_DTYPE_F32, .inject_rank = -1, .fail_rank = world - 1};
    rank_run dp[MAX_RANKS];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run(&cfg, world, dp, 20);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("rank %d fails at step 3: every rank stopped after %.1f s:", world - 1, secs);
    for (int r = 0; r < world; r++) printf(" [rank %d: %s]", r, dp[r].s == MP_OK ? "ok" : dp[r].msg);
    printf("\n");
    for (int r = 0; r < world; r++) {
        CHECK(dp[r].s != MP_OK, "rank %d finished although rank %d failed", r, world - 1);
        CHECK(strstr(dp[r].msg, "injected failure"), "rank %d's error does not name the failure: %s", r, dp[r].msg);
    }
    CHECK(secs < 30, "stopping took %.1f s", secs);
    free_runs(dp, world);
}

/* The cases under MIXPREC_DETERMINISTIC=1: the same micro-batches on one GPU
 * with deterministic convolutions (no atomics), so only the order of f32
 * sums may differ; for one rank, case 1 against one GPU (the same batch
 * through the same plan shape: equal up to f32 reduction order when the
 * algorithms are the same deterministic ones; a timed pick with atomics
 * put amp-bf16 at 5e-4). */
static void deterministic_cases(int world) {
    if (world == 1) {
        equivalence(1, MP_PRECISION_FP32, MP_DTYPE_F32, false, false, 1, 1e-6);
        equivalence(1, MP_PRECISION_AMP_BF16, MP_DTYPE_F32, false, false, 1, 1e-6);
        equivalence(1, MP_PRECISION_AMP_BF16, MP_DTYPE_F32, true, false, 1, 1e-6);
        equivalence(1, MP_PRECISION_AMP_BF16, MP_DTYPE_BF16, false, false, 1, 0x1p-8);
        equivalence(1, MP_PRECISION_BF16, MP_DTYPE_BF16, false, false, 1, 0x1p-8);
        buckets(1, true);
        return;
    }
    equivalence(world, MP_PRECISION_FP32, MP_DTYPE_F32, false, true, 1, 2e-5);
    equivalence(world, MP_PRECISION_AMP_BF16, MP_DTYPE_F32, false, true, 1, 2e-5);
    /* accumulating ranks: all-reduce once, after each rank's last micro-batch */
    equivalence(world, MP_PRECISION_AMP_BF16, MP_DTYPE_F32, false, true, 2, 2e-5);
    buckets(world, true);
}

int main(int argc, char **argv) {
    int world = argc > 1 ? atoi(argv[1]) : 2;
    const bool child = argc > 2 && !strcmp(argv[2], "deterministic");
    if (argc > 2 && !child) {
        fprintf(stderr, "test_cuda_dist: unknown argument '%s' (usage: test_cuda_dist [RANKS [deterministic]])\n",
                argv[2]);
        return 2;
    }
    int found = mp_cuda_device_count();
    if (world < 1 || world > MAX_RANKS || world > found || GLOBAL_BATCH % world) {
        fprintf(stderr, "test_cuda_dist: %d ranks need %d GPUs (found %d: %s)\n", world, world, found,
                mp_cuda_device_list());
        return 2;
    }
    if (child) {
        if (!mp_env_get()->deterministic) {
            fprintf(stderr, "test_cuda_dist %d deterministic: needs MIXPREC_DETERMINISTIC=1 in the environment\n",
                    world);
            return 2;
        }
        deterministic_cases(world);
        return test_summary("test_cuda_dist (MIXPREC_DETERMINISTIC=1)");
    }
    if (world > 1) {
        equivalence(world, MP_PRECISION_FP32, MP_DTYPE_F32, false, false, 1, 2e-5);
        /* amp-bf16 by default: each rank's convolution weight gradient is its
         * batch's sum rounded to bf16 (cuDNN's fast kernels, PyTorch's DDP), so
         * rounding the parts and the whole differ: one bf16 ulp. With
         * f32_weight_grads they are f32 sums, and with the f32 all-reduce only
         * the order of f32 sums differs, as in fp32; the bf16 all-reduce rounds
         * them again: one bf16 ulp */
        equivalence(world, MP_PRECISION_AMP_BF16, MP_DTYPE_F32, false, false, 1, 0x1p-8);
        equivalence(world, MP_PRECISION_AMP_BF16, MP_DTYPE_F32, true, false, 1, 2e-5);
        equivalence(world, MP_PRECISION_AMP_BF16, MP_DTYPE_BF16, false, false, 1, 0x1p-8);
        /* pure bf16: the weights exist only as bf16 on each GPU (no fp32 master), broadcast in bf16 at the
         * start; the bf16 all-reduce rounds the gradients even for one rank (1.1e-3 from one GPU, seen) */
        equivalence(world, MP_PRECISION_BF16, MP_DTYPE_BF16, false, false, 1, 0x1p-8);
    }
    if (!mp_env_get()->deterministic) { /* else this process already is such a run */
        char ranks[16];
        snprintf(ranks, sizeof ranks, "%d", world);
        char *args[] = {argv[0], ranks, "deterministic", NULL};
        const int rc = gpu_test_rerun("MIXPREC_DETERMINISTIC=1", args);
        CHECK(rc == 0, "the cases under MIXPREC_DETERMINISTIC=1 (%s %d deterministic) failed: exit %d", argv[0],
              world, rc);
    } else {
        deterministic_cases(world);
    }
    if (!mp_env_get()->deterministic) buckets(world, false); /* checked in the deterministic cases */
    sync_batchnorm(world);
    forced_overflow(world);
    if (world > 1) failing_rank(world);
    return test_summary("test_cuda_dist");
}
