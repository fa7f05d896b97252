/* dist_nccl.c — the communicator of dist.h over NCCL: ranks as threads of
 * one process (an mp_dist_group shares the unique id) or as MPI processes
 * (the group then holds the process's one rank). Communicators are created
 * non-blocking and polled, so a rank that never joins cannot hang the
 * others; a watchdog thread per group aborts every communicator of the
 * group when a rank fails, NCCL reports an error, or a wait on the GPU
 * outlasts the timeout. Aborts wait for queued-but-unfinished enqueues
 * (a read-write lock), and nothing is queued after one. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/mpi_bootstrap.h"
#include "nccl/nccl_dist.h"

struct mp_dist {
    mp_dist_group *g;
    int rank, world, device;
    bool mpi;             /* MPI finalizes with the last communicator */
    ncclComm_t comm;      /* NULL once freed */
    bool revoked;         /* stopped by the watchdog; freed by the rank */
    double wait_since;    /* > 0: waiting on the GPU since then (under g->mu) */
};

struct mp_dist_group {
    int world;            /* ranks in the job */
    int n_local;          /* ranks in this process */
    double timeout_s;
    ncclUniqueId id;
    pthread_mutex_t mu;
    pthread_rwlock_t enqueue;
    mp_dist **local;      /* n_local slots, filled as ranks join */
    atomic_bool aborted;
    int failed_rank;      /* -1: none */
    mp_status failed_status;
    char failed_msg[768];
    bool stop;
    pthread_t watchdog;
    bool watchdog_started;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

mp_status mp_nccl_check(ncclResult_t r, const char *call, const char *what) {
    if (r == ncclSuccess || r == ncclInProgress) return MP_OK;
    char name[96];
    size_t n = strcspn(call, "( ");
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, call, n);
    name[n] = '\0';
    return mp_error(r == ncclInvalidArgument || r == ncclInvalidUsage ? MP_ERR_INVALID_ARG : MP_ERR_INTERNAL,
                    "%s: %s failed: %s", what ? what : "nccl", name, ncclGetErrorString(r));
}

_Static_assert(MP_DTYPE_COUNT == 5, "a new dtype needs its row in the NCCL dtype table");

ncclDataType_t mp_nccl_dtype(mp_dtype dt) {
    static const struct {
        bool mapped;
        ncclDataType_t nccl;
    } rows[MP_DTYPE_COUNT] = {[MP_DTYPE_F32] = {true, ncclFloat32}, [MP_DTYPE_F16] = {true, ncclFloat16},
                              [MP_DTYPE_BF16] = {true, ncclBfloat16}, [MP_DTYPE_F64] = {true, ncclFloat64},
                              [MP_DTYPE_I32] = {true, ncclInt32}};
    MP_ASSERT((unsigned)dt < MP_DTYPE_COUNT && rows[dt].mapped);
    return rows[dt].nccl;
}

ncclComm_t mp_dist_comm(const mp_dist *d) { return d ? d->comm : NULL; }

/* A first collective may still be connecting to its peers (ncclInProgress):
 * poll it, but give up when another rank failed or the timeout passed — the
 * caller holds the enqueue lock, which the watchdog needs to stop the group. */
mp_status mp_nccl_enqueued(const mp_dist *d, ncclResult_t r, const char *call, const char *what) {
    MP_TRY(mp_nccl_check(r, call, what));
    const double t0 = r == ncclInProgress ? now_s() : 0;
    while (r == ncclInProgress) {
        if (ncclCommGetAsyncError(d->comm, &r) != ncclSuccess) r = ncclInternalError;
        MP_TRY(mp_nccl_check(r, call, what));
        if (r != ncclInProgress) break;
        pthread_mutex_lock(&d->g->mu);
        const bool failed = d->g->failed_rank >= 0;
        pthread_mutex_unlock(&d->g->mu);
        if (failed)
            return mp_error(MP_ERR_INTERNAL, "%s: rank %d stopped while queueing %s: another rank failed", what,
                            d->rank, call);
        if (now_s() - t0 > d->g->timeout_s)
            return mp_error(MP_ERR_INTERNAL, "%s: rank %d could not queue %s within %.0f s (the other ranks do not "
                                             "answer)", what, d->rank, call, d->g->timeout_s);
        struct timespec nap = {0, 100 * 1000};
        nanosleep(&nap, NULL);
    }
    return MP_OK;
}
int mp_dist_rank(const mp_dist *d) { return d ? d->rank : 0; }
int mp_dist_world(const mp_dist *d) { return d ? d->world : 1; }
int mp_dist_device(const mp_dist *d) { return d ? d->device : 0; }

/* Record the first failure (under g->mu). */
static void note_failure(mp_dist_group *g, int rank, mp_status s, const char *msg) {
    if (g->failed_rank >= 0) return;
    g->failed_rank = rank;
    g->failed_status = s;
    snprintf(g->failed_msg, sizeof g->failed_msg, "%s", msg);
}

/* MIXPREC_DIST_DEBUG=1: the watchdog and the ranks say what they do. */
__attribute__((format(printf, 1, 2))) static void debug(const char *fmt, ...) {
    static int on = -1;
    if (on < 0) on = mp_env_get()->dist_debug;
    if (!on) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[dist] ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ncclCommRevoke (NCCL >= 2.28) stops in-flight operations but keeps the
 * communicator's memory alive, so kernels still queued behind them exit
 * cleanly; each rank frees its communicator itself once its streams have
 * drained. Older NCCL: ncclCommAbort at once. */
typedef ncclResult_t (*revoke_fn)(ncclComm_t, int);
static revoke_fn find_revoke(void) {
    static revoke_fn fn;
    static int looked;
    if (!looked) {
        fn = (revoke_fn)dlsym(RTLD_DEFAULT, "ncclCommRevoke");
        looked = 1;
    }
    return fn;
}

/* Stop every joined communicator; called by the watchdog only. */
static void abort_all(mp_dist_group *g) {
    atomic_store(&g->aborted, true);
    debug("aborting the group (rank %d failed, %d local ranks)", g->failed_rank, g->n_local);
    pthread_rwlock_wrlock(&g->enqueue); /* no rank is queueing work that uses the comms */
    pthread_mutex_lock(&g->mu);
    revoke_fn revoke = find_revoke();
    for (int i = 0; i < g->n_local; i++) {
        mp_dist *d = g->local[i];
        if (!d || !d->comm || d->revoked) continue;
        /* under mu: the rank cannot free the communicator meanwhile */
        ncclComm_t c = d->comm;
        d->revoked = true;
        if (!revoke) d->comm = NULL;
        debug("rank %d: revoking its communicator (ncclCommRevoke available: %d)", d->rank, revoke != NULL);
        if (revoke) revoke(c, 0);
        else ncclCommAbort(c);
        debug("rank %d: communicator stopped", d->rank);
    }
    pthread_mutex_unlock(&g->mu);
    pthread_rwlock_unlock(&g->enqueue);
}

static void *watchdog_main(void *arg) {
    mp_dist_group *g = arg;
    for (;;) {
        struct timespec nap = {0, 100 * 1000 * 1000};
        nanosleep(&nap, NULL);
        bool abort_now = false;
        pthread_mutex_lock(&g->mu);
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        double t = now_s();
        for (int i = 0; i < g->n_local && !atomic_load(&g->aborted); i++) {
            mp_dist *d = g->local[i];
            if (!d) continue;
            char msg[512];
            ncclResult_t async = ncclSuccess;
            if (d->comm) ncclCommGetAsyncError(d->comm, &async);
            if (async != ncclSuccess && async != ncclInProgress) {
                snprintf(msg, sizeof msg, "rank %d: NCCL reported: %s", d->rank, ncclGetErrorString(async));
                note_failure(g, d->rank, MP_ERR_INTERNAL, msg);
            } else if (d->wait_since > 0 && t - d->wait_since > g->timeout_s) {
                snprintf(msg, sizeof msg,
                         "rank %d waited %.0f s for the other ranks (one of them died or hangs); stopping (timeout "
                         "--dist-timeout %.0f s)",
                         d->rank, t - d->wait_since, g->timeout_s);
                note_failure(g, d->rank, MP_ERR_INTERNAL, msg);
            }
        }
        abort_now = g->failed_rank >= 0 && !atomic_load(&g->aborted);
        pthread_mutex_unlock(&g->mu);
        if (abort_now) abort_all(g);
    }
}

static mp_status group_new(int world, int n_local, double timeout_s, mp_dist_group **out) {
    *out = NULL;
    mp_dist_group *g = calloc(1, sizeof *g);
    if (!g || !(g->local = calloc((size_t)n_local, sizeof *g->local))) {
        free(g);
        return mp_error(MP_ERR_NOMEM, "dist: out of memory");
    }
    g->world = world;
    g->n_local = n_local;
    g->timeout_s = timeout_s > 0 ? timeout_s : 300;
    g->failed_rank = -1;
    atomic_init(&g->aborted, false);
    pthread_mutex_init(&g->mu, NULL);
    pthread_rwlock_init(&g->enqueue, NULL);
    if (pthread_create(&g->watchdog, NULL, watchdog_main, g) != 0) {
        mp_dist_group_destroy(g);
        return mp_error(MP_ERR_INTERNAL, "dist: cannot start the watchdog thread");
    }
    g->watchdog_started = true;
    *out = g;
    return MP_OK;
}

mp_status mp_dist_group_create(int world, double timeout_s, mp_dist_group **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_group_create: null output");
    *out = NULL;
    if (world < 1) return mp_error(MP_ERR_INVALID_ARG, "--gpus %d must be at least 1", world);
    int found = 0;
    if (cudaGetDeviceCount(&found) != cudaSuccess) {
        (void)cudaGetLastError();
        found = 0;
    }
    if (world > found)
        return mp_error(MP_ERR_INVALID_ARG, "--gpus %d: only %d GPU%s present", world, found, found == 1 ? "" : "s");
    mp_dist_group *g;
    MP_TRY(group_new(world, world, timeout_s, &g));
    mp_status s = mp_nccl_check(ncclGetUniqueId(&g->id), "ncclGetUniqueId", "dist");
    if (s != MP_OK) {
        mp_dist_group_destroy(g);
        return s;
    }
    *out = g;
    return MP_OK;
}

int mp_dist_group_failed_rank(const mp_dist_group *g) { return g ? g->failed_rank : -1; }

void mp_dist_group_fail(mp_dist_group *g, int rank, mp_status s) {
    if (!g) return;
    char msg[512];
    snprintf(msg, sizeof msg, "rank %d failed: %s", rank, mp_last_error());
    pthread_mutex_lock(&g->mu);
    note_failure(g, rank, s, msg);
    pthread_mutex_unlock(&g->mu);
}

void mp_dist_group_destroy(mp_dist_group *g) {
    if (!g) return;
    if (g->watchdog_started) {
        pthread_mutex_lock(&g->mu);
        g->stop = true;
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->watchdog, NULL);
    }
    pthread_rwlock_destroy(&g->enqueue);
    pthread_mutex_destroy(&g->mu);
    free(g->local);
    free(g);
}

/* Create rank `rank`'s communicator non-blocking and poll it, giving up
 * when the group aborts or the timeout passes. */
static mp_status init_comm(mp_dist_group *g, mp_dist *d, int slot) {
    char what[64];
    snprintf(what, sizeof what, "rank %d (cuda:%d)", d->rank, d->device);
    cudaError_t ce = cudaSetDevice(d->device);
    if (ce != cudaSuccess)
        return mp_error(MP_ERR_INTERNAL, "%s: cudaSetDevice failed: %s", what, cudaGetErrorString(ce));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = NULL;
    MP_TRY(mp_nccl_check(ncclCommInitRankConfig(&comm, g->world, g->id, d->rank, &cfg), "ncclCommInitRankConfig",
                         what));
    double t0 = now_s();
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        if (state != ncclInProgress) break;
        if (atomic_load(&g->aborted) || now_s() - t0 > g->timeout_s) {
            ncclCommAbort(comm);
            return atomic_load(&g->aborted)
                       ? mp_error(MP_ERR_INTERNAL, "%s: stopped while joining: another rank failed", what)
                       : mp_error(MP_ERR_INTERNAL,
                                  "%s: the other ranks did not join within %.0f s (a rank died, or the world size "
                                  "differs between ranks)",
                                  what, g->timeout_s);
        }
        struct timespec nap = {0, 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    if (state != ncclSuccess) {
        ncclCommAbort(comm);
        return mp_nccl_check(state, "ncclCommInitRankConfig", what);
    }
    pthread_mutex_lock(&g->mu);
    d->comm = comm;
    g->local[slot] = d;
    pthread_mutex_unlock(&g->mu);
    return MP_OK;
}

mp_status mp_dist_group_join(mp_dist_group *g, int rank, int device, mp_dist **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_group_join: null output");
    *out = NULL;
    if (!g || rank < 0 || rank >= g->n_local) return mp_error(MP_ERR_INVALID_ARG, "dist: rank %d out of range", rank);
    mp_dist *d = calloc(1, sizeof *d);
    if (!d) return mp_error(MP_ERR_NOMEM, "dist: out of memory");
    *d = (mp_dist){.g = g, .rank = rank, .world = g->world, .device = device};
    mp_status s = init_comm(g, d, rank);
    if (s != MP_OK) {
        mp_dist_fail(d, s);
        free(d);
        return s;
    }
    *out = d;
    return MP_OK;
}

mp_status mp_dist_mpi_create(double timeout_s, mp_dist **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_mpi_create: null output");
    *out = NULL;
    int rank = 0, world = 1, local = 0;
    MP_TRY(mp_mpi_start(&rank, &world, &local));
    int found = 0;
    if (cudaGetDeviceCount(&found) != cudaSuccess) {
        (void)cudaGetLastError();
        found = 0;
    }
    if (local >= found)
        return mp_error(MP_ERR_INVALID_ARG,
                        "rank %d: local rank %d has no GPU of its own (this host has %d GPU%s; start at most that "
                        "many ranks per host)",
                        rank, local, found, found == 1 ? "" : "s");
    mp_dist_group *g;
    MP_TRY(group_new(world, 1, timeout_s, &g));
    mp_status s = MP_OK;
    if (rank == 0) s = mp_nccl_check(ncclGetUniqueId(&g->id), "ncclGetUniqueId", "rank 0");
    /* every rank takes part in the broadcast, so a failure on rank 0 sends
     * zeros and the others fail to join (bounded by the timeout) */
    mp_status b = mp_mpi_bcast_bytes(&g->id, (int)sizeof g->id, 0);
    if (s == MP_OK) s = b;
    mp_dist *d = s == MP_OK ? calloc(1, sizeof *d) : NULL;
    if (s == MP_OK && !d) s = mp_error(MP_ERR_NOMEM, "dist: out of memory");
    if (s == MP_OK) {
        *d = (mp_dist){.g = g, .rank = rank, .world = world, .device = local, .mpi = true};
        s = init_comm(g, d, 0);
    }
    if (s != MP_OK) {
        free(d);
        mp_dist_group_destroy(g);
        return s;
    }
    *out = d;
    return MP_OK;
}

void mp_dist_fail(mp_dist *d, mp_status s) {
    if (d) mp_dist_group_fail(d->g, d->rank, s);
}

mp_status mp_dist_check(mp_dist *d) {
    if (!d) return MP_OK;
    mp_dist_group *g = d->g;
    pthread_mutex_lock(&g->mu);
    mp_status s = MP_OK;
    if (g->failed_rank >= 0 || atomic_load(&g->aborted))
        s = mp_error(g->failed_status ? g->failed_status : MP_ERR_INTERNAL, "rank %d: stopped: %s", d->rank,
                     g->failed_msg);
    pthread_mutex_unlock(&g->mu);
    return s;
}

void mp_dist_wait_begin(mp_dist *d) {
    if (!d) return;
    pthread_mutex_lock(&d->g->mu);
    d->wait_since = now_s();
    pthread_mutex_unlock(&d->g->mu);
}

void mp_dist_wait_end(mp_dist *d) {
    if (!d) return;
    pthread_mutex_lock(&d->g->mu);
    d->wait_since = 0;
    pthread_mutex_unlock(&d->g->mu);
}

mp_status mp_dist_enqueue_begin(mp_dist *d) {
    if (!d) return MP_OK;
    pthread_rwlock_rdlock(&d->g->enqueue);
    if (atomic_load(&d->g->aborted) || !d->comm || d->revoked) {
        debug("rank %d: refusing to queue work after the abort", d->rank);
        pthread_rwlock_unlock(&d->g->enqueue);
        return mp_dist_check(d) != MP_OK ? MP_ERR_INTERNAL
                                         : mp_error(MP_ERR_INTERNAL, "rank %d: the communicator was aborted", d->rank);
    }
    return MP_OK;
}

void mp_dist_enqueue_end(mp_dist *d) {
    if (d) pthread_rwlock_unlock(&d->g->enqueue);
}

void mp_dist_destroy(mp_dist *d) {
    if (!d) return;
    mp_dist_group *g = d->g;
    pthread_mutex_lock(&g->mu);
    ncclComm_t c = d->comm;
    d->comm = NULL;
    for (int i = 0; i < g->n_local; i++)
        if (g->local[i] == d) g->local[i] = NULL;
    bool failed = g->failed_rank >= 0 || d->revoked;
    pthread_mutex_unlock(&g->mu);
    debug("rank %d: freeing its communicator (failed run: %d)", d->rank, failed);
    if (c && !failed) { /* flush, then free; a non-blocking comm reports progress by polling */
        ncclResult_t r = ncclCommFinalize(c), state = ncclInProgress;
        double t0 = now_s();
        while (r == ncclSuccess || r == ncclInProgress) {
            if (ncclCommGetAsyncError(c, &state) != ncclSuccess || state != ncclInProgress) break;
            if (now_s() - t0 > g->timeout_s) break;
            struct timespec nap = {0, 1000 * 1000};
            nanosleep(&nap, NULL);
        }
        if ((r == ncclSuccess || r == ncclInProgress) && state == ncclSuccess) ncclCommDestroy(c);
        else ncclCommAbort(c);
    } else if (c) {
        ncclCommAbort(c);
    }
    if (d->mpi) {
        mp_dist_group_destroy(g);
        if (!failed) mp_mpi_finish();
    }
    free(d);
}

mp_status mp_dist_allgather_f32(mp_dist *d, const float *send, float *recv, size_t n, void *stream) {
    MP_NCCL_QUEUE(d, ncclAllGather(send, recv, n, ncclFloat32, mp_dist_comm(d), (cudaStream_t)stream),
                  "synchronized BatchNorm statistics");
    return MP_OK;
}
