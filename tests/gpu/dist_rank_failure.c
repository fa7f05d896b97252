/* dist_rank_failure.c — the no-hang guarantee of data-parallel training, for
 * scripts/gpu-check's dist mode: cnn10 (amp-bf16) trains on synthetic data
 * through mp_fit, over N GPUs as threads of this process (--gpus N) or as one
 * process per rank under mpirun, and rank RANK fails just before its
 * optimizer step STEP (mp_fit_opts.before_step): with an error ("error"), or
 * by dying as a crashed process would ("exit": _exit(3), under mpirun only,
 * since in threads it would end every rank at once). Every other rank must
 * then stop with an error within --dist-timeout instead of waiting forever.
 *
 * Output (stderr), one line per rank that stopped, each starting with the
 * rank: "dist_rank_failure: rank R: ..." (threads: the first rank that
 * failed; the library's "mixprec: rank R: ..." lines name the others), the
 * failing rank's saying it fails on purpose; in threads a last line with
 * the seconds every rank took to stop after the failure. Exit status: 3 for
 * a rank that died, 1 for a rank (or, in threads, a run) that stopped with an
 * error, 0 when the run finished although a rank was to fail (the caller's
 * test fails), 2 for bad arguments.
 * Usage: dist_rank_failure RANK STEP error|exit [--gpus N] [--dist-timeout S] */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "data/dataset.h"
#include "models/models.h"
#include "train/fit.h"

enum { BATCH = 64, SPARE_STEPS = 10 };

typedef struct {
    int rank;          /* the rank that fails */
    int64_t step;      /* before this optimizer step (1-based) */
    bool die;          /* _exit(3) instead of an error */
} failure;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* When the failure happened (threads: every rank is in this process). */
static _Atomic double failed_at = -1;

static mp_status fail_here(void *arg, int rank, int64_t step) {
    const failure *f = arg;
    if (rank != f->rank || step != f->step) return MP_OK;
    if (f->die) {
        fprintf(stderr, "dist_rank_failure: rank %d: dies before optimizer step %lld (_exit(3), as a crashed process "
                        "would)\n", rank, (long long)step);
        _exit(3);
    }
    atomic_store(&failed_at, now_s());
    return mp_error(MP_ERR_INTERNAL, "fails on purpose before optimizer step %lld (dist_rank_failure)",
                    (long long)step);
}

/* Under mpirun the launcher ends the other ranks once one died: they still
 * say why they stop. */
static char sigterm_line[128];
static void on_sigterm(int sig) {
    (void)sig;
    ssize_t w = write(2, sigterm_line, strlen(sigterm_line));
    (void)w;
    _exit(1);
}

static int usage(const char *why) {
    fprintf(stderr, "dist_rank_failure: %s\nusage: dist_rank_failure RANK STEP error|exit [--gpus N] "
                    "[--dist-timeout S]\n", why);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 4) return usage("RANK, STEP and error|exit are needed");
    char *end;
    const long rank_arg = strtol(argv[1], &end, 10);
    if (*end || rank_arg < 0) return usage("RANK must be a rank number >= 0");
    const long long step_arg = strtoll(argv[2], &end, 10);
    if (*end || step_arg < 1 || step_arg > 100000) return usage("STEP must be an optimizer step in 1..100000");
    const bool die = !strcmp(argv[3], "exit");
    if (!die && strcmp(argv[3], "error")) return usage("the third argument must be 'error' or 'exit'");
    int gpus = 0;
    double timeout = 0;
    for (int i = 4; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--gpus")) {
            gpus = (int)strtol(argv[++i], &end, 10);
            if (*end || gpus < 2) return usage("--gpus N needs N >= 2");
        } else if (i + 1 < argc && !strcmp(argv[i], "--dist-timeout")) {
            timeout = strtod(argv[++i], &end);
            if (*end || !(timeout > 0)) return usage("--dist-timeout S needs S > 0 seconds");
        } else {
            char why[256];
            snprintf(why, sizeof why, "unknown argument '%s'", argv[i]);
            return usage(why);
        }
    }
    int world = gpus, mpi_rank = 0;
    bool mpi = false;
    if (mp_dist_mpi_env(&mpi, &world, &mpi_rank) != MP_OK) return usage(mp_last_error());
    if (mpi && gpus && gpus != world) return usage("--gpus N must equal the number of ranks mpirun started");
    if (!mpi && !gpus) return usage("give --gpus N, or start it under mpirun");
    if (rank_arg >= world) return usage("RANK must be below the number of ranks");
    if (die && !mpi) return usage("'exit' ends every rank of this process at once: run it under mpirun");

    failure f = {.rank = (int)rank_arg, .step = step_arg, .die = die};
    mp_dist *dist = NULL;
    if (mpi) {
        snprintf(sigterm_line, sizeof sigterm_line,
                 "dist_rank_failure: rank %d: terminated by the launcher (another rank failed)\n", mpi_rank);
        signal(SIGTERM, on_sigterm);
        if (mp_dist_mpi_create(timeout, &dist) != MP_OK) {
            fprintf(stderr, "dist_rank_failure: rank %d: %s\n", mpi_rank, mp_last_error());
            return 1;
        }
    }
    /* enough samples for every rank's shard to hold the failing step and then some */
    mp_dataset train = {0};
    mp_model m = {0};
    const int max_steps = (int)step_arg + SPARE_STEPS;
    mp_status s = mp_dataset_synthetic(world * BATCH * max_steps, 3, 32, 32, 10, 1, &train);
    mp_model_spec spec = {.model = "cnn10", .data = &train, .policy = {.precision = MP_PRECISION_AMP_BF16}};
    if (s == MP_OK) s = mp_model_spec_build(&spec, &m);
    mp_fit_opts o = {.model_name = "cnn10", .data_name = "synthetic", .epochs = 1, .max_steps = max_steps,
                     .trainer = {.batch = BATCH, .device = {MP_DEVICE_CUDA, dist ? mp_dist_device(dist) : 0},
                                 .dist = dist},
                     .optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f}, .lr = 0.05f, .seed = 1,
                     .gpus = mpi ? 0 : gpus, .dist_timeout = timeout, .replica = mp_model_spec_build,
                     .replica_arg = &spec, .before_step = fail_here, .before_step_arg = &f};
    mp_fit_result r;
    if (s == MP_OK) s = mp_fit(&m, &train, NULL, &o, &r);
    const double stopped = now_s();
    char who[32] = ""; /* one process per rank: its lines start with the rank */
    if (mpi) snprintf(who, sizeof who, "rank %d: ", mpi_rank);
    int rc = 1;
    if (s == MP_OK) {
        fprintf(stderr, "dist_rank_failure: %sthe run finished its %d steps although rank %d was to fail before step "
                        "%lld\n", who, max_steps, f.rank, (long long)f.step);
        rc = 0;
    } else { /* threads: the first failing rank's error, "rank R: ..." */
        fprintf(stderr, "dist_rank_failure: %s%s\n", who, mp_last_error());
        const double t0 = atomic_load(&failed_at);
        if (!mpi && t0 >= 0)
            fprintf(stderr, "dist_rank_failure: every rank stopped %.1f s after the failure\n", stopped - t0);
    }
    if (m.g) mp_model_free(&m);
    mp_dataset_free(&train);
    mp_dist_destroy(dist);
    return rc;
}
