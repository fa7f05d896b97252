/* train_gpus.c — see train_gpus.h; also mp_model_spec_build (fit.h),
 * the replica builder of `train` and `bench`. Only rank 0 prints progress,
 * writes the log and checkpoints and evaluates; the others train silently. */
#include "train/train_gpus.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"

mp_status mp_model_spec_build(void *spec, mp_model *out) {
    const mp_model_spec *sp = spec;
    const mp_dataset *d = sp->data;
    MP_TRY(mp_model_build(sp->model, d->c, d->h, d->w, d->classes, out));
    return mp_graph_apply_policy(out->g, sp->policy);
}

typedef struct {
    int rank;
    mp_model *m;
    mp_model replica;  /* ranks > 0 */
    const mp_dataset *train, *test;
    mp_fit_opts o;
    mp_fit_result r;
    mp_dist_group *group;
    mp_status s;
    char msg[1024];
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    mp_dist *d = NULL;
    j->s = mp_dist_group_join(j->group, j->rank, j->rank, &d);
    if (j->s == MP_OK) {
        j->o.trainer.dist = d;
        j->s = mp_fit_rank(j->m, j->train, j->test, &j->o, &j->r);
    }
    if (j->s != MP_OK) snprintf(j->msg, sizeof j->msg, "%s", mp_last_error());
    mp_dist_destroy(d);
    return NULL;
}

mp_status mp_fit_threads(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o,
                         mp_fit_result *r) {
    const int n = o->gpus;
    if (!o->replica) return mp_error(MP_ERR_INVALID_ARG, "--gpus %d: no way to build the model's replicas", n);
    mp_dist_group *group = NULL;
    MP_TRY(mp_dist_group_create(n, o->dist_timeout, &group));
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    mp_status s = jobs && threads ? MP_OK : mp_error(MP_ERR_NOMEM, "--gpus: out of memory");
    for (int i = 0; s == MP_OK && i < n; i++) {
        rank_job *j = &jobs[i];
        *j = (rank_job){.rank = i, .m = m, .train = train, .test = test, .o = *o, .group = group};
        j->o.trainer.device = (mp_device){.kind = MP_DEVICE_CUDA, .index = i};
        if (i > 0) {
            s = o->replica(o->replica_arg, &j->replica);
            j->m = &j->replica;
            j->o.out = NULL;
            j->o.trainer.events = NULL;
            j->o.log_path = NULL;
        }
    }
    int started = 0;
    for (; s == MP_OK && started < n; started++)
        if (pthread_create(&threads[started], NULL, rank_main, &jobs[started]) != 0)
            s = mp_error(MP_ERR_INTERNAL, "--gpus: cannot start the thread of rank %d", started);
    if (s != MP_OK && started < n) /* the started ranks stop instead of waiting for the missing one */
        mp_dist_group_fail(group, started, s);
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    int first = mp_dist_group_failed_rank(group);
    if (s == MP_OK) {
        for (int i = 0; i < n; i++)
            if (jobs[i].s != MP_OK && i != first) fprintf(stderr, "mixprec: rank %d: %s\n", i, jobs[i].msg);
        if (first < 0)
            for (int i = 0; i < n && first < 0; i++)
                if (jobs[i].s != MP_OK) first = i;
        if (first >= 0) s = mp_error(jobs[first].s ? jobs[first].s : MP_ERR_INTERNAL, "rank %d: %s", first,
                                     jobs[first].msg);
        else *r = jobs[0].r;
    }
    for (int i = 1; jobs && i < n; i++) mp_model_free(&jobs[i].replica);
    free(jobs);
    free(threads);
    mp_dist_group_destroy(group);
    return s;
}
