/* decode_pool.h — a fixed pool of threads that runs a parallel for: the
 * decoder threads behind the folder loader (one-time decoding of a dataset,
 * and per-batch decoding and augmentation in the loader). The calling
 * thread works too, as worker 0. Results must not depend on which worker
 * runs an index: each index writes its own output. */
#ifndef MP_DATA_DECODE_POOL_H
#define MP_DATA_DECODE_POOL_H

#include "mixprec.h"

typedef struct mp_pool mp_pool;

/* A job: index i of [0, n) on worker `worker` of [0, threads). */
typedef mp_status (*mp_pool_fn)(void *arg, int i, int worker);

/* threads >= 1 (1: everything runs on the caller, no thread is started). */
mp_status mp_pool_create(int threads, mp_pool **out);
int mp_pool_threads(const mp_pool *p);

/* fn for every i in [0, n); returns when all are done. Every index runs
 * even after a failure; the error of the lowest failing index is returned
 * (its message re-raised on the calling thread), so the result does not
 * depend on timing. One run at a time per pool. */
mp_status mp_pool_run(mp_pool *p, int n, mp_pool_fn fn, void *arg);

void mp_pool_destroy(mp_pool *p);

/* The number of online CPUs (at least 1). */
int mp_online_cpus(void);

#endif
