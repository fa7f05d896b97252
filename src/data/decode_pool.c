/* decode_pool.c — see decode_pool.h. Indices are handed out with an atomic
 * counter; a generation number wakes the helpers for each run and a count
 * of busy helpers tells the caller when the run is over. */
#include "data/decode_pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

struct mp_pool {
    int threads;
    pthread_t *tids;     /* threads - 1 helpers */
    int started;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long gen;
    bool stop;
    /* the current run */
    int n, busy;
    int next;            /* atomic */
    mp_pool_fn fn;
    void *arg;
    int err_i;
    mp_status err_s;
    char err_msg[1024];
};

typedef struct {
    mp_pool *p;
    int id;
} helper_arg;

int mp_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

static void work(mp_pool *p, int id) {
    for (;;) {
        const int i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= p->n) break;
        const mp_status s = p->fn(p->arg, i, id);
        if (s == MP_OK) continue;
        pthread_mutex_lock(&p->mu);
        if (i < p->err_i) {
            p->err_i = i;
            p->err_s = s;
            snprintf(p->err_msg, sizeof p->err_msg, "%s", mp_last_error());
        }
        pthread_mutex_unlock(&p->mu);
    }
}

static void *helper(void *arg) {
    helper_arg *h = arg;
    mp_pool *p = h->p;
    const int id = h->id;
    free(h);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        work(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

mp_status mp_pool_create(int threads, mp_pool **out) {
    *out = NULL;
    if (threads < 1 || threads > 1024)
        return mp_error(MP_ERR_INVALID_ARG, "decoder threads: %d is out of range [1, 1024]", threads);
    mp_pool *p = calloc(1, sizeof *p);
    if (!p) return mp_error(MP_ERR_NOMEM, "decoder threads: out of memory");
    p->threads = threads;
    p->tids = calloc((size_t)threads, sizeof *p->tids);
    if (!p->tids || pthread_mutex_init(&p->mu, NULL) || pthread_cond_init(&p->wake, NULL) ||
        pthread_cond_init(&p->done, NULL)) {
        free(p->tids);
        free(p);
        return mp_error(MP_ERR_INTERNAL, "decoder threads: cannot set up the pool");
    }
    for (int t = 1; t < threads; t++) {
        helper_arg *h = malloc(sizeof *h);
        if (h) *h = (helper_arg){p, t};
        if (!h || pthread_create(&p->tids[t - 1], NULL, helper, h) != 0) {
            free(h);
            mp_pool_destroy(p);
            return mp_error(MP_ERR_INTERNAL, "decoder threads: cannot start thread %d of %d", t + 1, threads);
        }
        p->started++;
    }
    *out = p;
    return MP_OK;
}

int mp_pool_threads(const mp_pool *p) { return p->threads; }

mp_status mp_pool_run(mp_pool *p, int n, mp_pool_fn fn, void *arg) {
    if (n <= 0) return MP_OK;
    pthread_mutex_lock(&p->mu);
    p->n = n;
    p->next = 0;
    p->fn = fn;
    p->arg = arg;
    p->err_i = n;
    p->err_s = MP_OK;
    p->busy = p->started;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    work(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    const mp_status s = p->err_s;
    pthread_mutex_unlock(&p->mu);
    if (s != MP_OK) return mp_error(s, "%s", p->err_msg);
    return MP_OK;
}

void mp_pool_destroy(mp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->started; t++) pthread_join(p->tids[t], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->tids);
    free(p);
}
