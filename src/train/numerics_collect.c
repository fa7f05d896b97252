/* numerics_collect.c — a trainer's numerics statistics: the selection, the
 * records of the newest collection, and the hooks (numerics_collect.h).
 * On the CPU each tensor is measured as the step writes it. On a GPU each
 * measurement is a kernel queued (or captured: a collecting step replays a
 * graph of its own, cuda/step_cuda.c) into a device slot; the records a
 * launch of each kind measures are its layout (slot j = record j), built when
 * the step's code runs and kept for replays; after the launch the slots are
 * copied to pinned memory and read once that copy is seen finished. */
#include "train/numerics_collect.h"

#include <stdlib.h>
#include <string.h>

#include "graph/exec_backend.h"
#include "graph/plan.h"
#include "graph/plan_fuse.h"
#include "train/trainer.h"
#ifdef MP_HAVE_CUDA
#include "cuda/cuda_plan.h"
#include "cuda/numerics_cuda.h"
#endif

/* The records one launch measures (on a GPU: slot j is record j). */
typedef struct {
    mp_numerics_record *rec;
    int n, cap;
} record_list;

struct mp_numerics_state {
    int every;
    unsigned kinds;
    bool *node_on;            /* (n_nodes) */
    record_list done;         /* the newest finished collection */
    int64_t step;             /* the step `done` belongs to; 0: none yet */
    bool done_read;           /* `done` was returned: a newer one may replace it */
    bool collecting;
    float scale;              /* the loss scale of the collecting step */
    bool gpu;
#ifdef MP_HAVE_CUDA
    mp_cuda_numerics *dev;    /* device slots (GPU) */
    const void *dev_ctx;      /* the plan context they were made for */
    record_list layout[MP_LAUNCH_KINDS]; /* per launch kind, from the last run of the step's code */
    record_list build;        /* the layout this launch's code is making */
    int kind;                 /* of the collecting launch */
    int64_t pending_step;     /* a readback queued for this step, not yet in `done`; 0: none */
    int pending_kind;
    float pending_scale;
#endif
};

void mp_numerics_state_free(mp_numerics_state *s) {
    if (!s) return;
    free(s->node_on);
    free(s->done.rec);
#ifdef MP_HAVE_CUDA
    mp_cuda_numerics_destroy(s->dev);
    for (int k = 0; k < MP_LAUNCH_KINDS; k++) free(s->layout[k].rec);
    free(s->build.rec);
#endif
    free(s);
}

/* Room for one more record in l. */
static mp_status grow(record_list *l) {
    if (l->n < l->cap) return MP_OK;
    const int cap = l->cap ? 2 * l->cap : 32;
    mp_numerics_record *r = realloc(l->rec, (size_t)cap * sizeof *r);
    if (!r) return mp_error(MP_ERR_NOMEM, "numerics: out of memory");
    l->rec = r, l->cap = cap;
    return MP_OK;
}

/* Mark the nodes named in "a,b,c" (NULL or "": all; no empty name, a
 * trailing comma's included). */
static mp_status select_nodes(const mp_graph *g, const char *list, bool *on) {
    const bool all = !list || !*list;
    for (int i = 0; i < g->n_nodes; i++) on[i] = all;
    for (const char *p = all ? NULL : list; p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[MP_NAME_MAX];
        if (len == 0 || len >= sizeof name)
            return mp_error(MP_ERR_INVALID_ARG, "numerics: node list '%s': empty or too long name", list);
        memcpy(name, p, len);
        name[len] = '\0';
        const mp_node n = mp_graph_find(g, name);
        if (n < 0) return mp_error(MP_ERR_INVALID_ARG, "numerics: no node named '%s' in the model", name);
        on[n] = true;
        p = end ? end + 1 : NULL;
    }
    return MP_OK;
}

/* A node named in the list whose value the plan never stores (an add fused
 * between a batch norm and its ReLU) would give no record: refused. */
static mp_status check_selected_stored(const mp_trainer *t, const bool *on) {
    const mp_plan *p = t->plan;
    for (int i = 0; p && i < p->n; i++) {
        const int producer = mp_plan_fused_producer(p, i);
        if (on[i] && producer >= 0 && !mp_plan_fused_value_stored(p, i))
            return mp_error(MP_ERR_INVALID_ARG,
                            "numerics: '%s' is fused between batch norm '%s' and its ReLU on this plan, so its output "
                            "is never stored: select the ReLU after it (MIXPREC_FUSE_BN_ADD_RELU=0 or "
                            "MIXPREC_NO_FUSION=1 keeps it apart)",
                            t->g->nodes[i].name, t->g->nodes[producer].name);
    }
    return MP_OK;
}

/* The selection changes: graphs captured for the old one go first. */
static void replace_state(mp_trainer *t, mp_numerics_state *s) {
    if (t->numerics && t->be && t->be->numerics_changed) t->be->numerics_changed(t);
    mp_numerics_state_free(t->numerics);
    t->numerics = s;
}

mp_status mp_trainer_numerics_enable(mp_trainer *t, const mp_numerics_opts *o) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "numerics: null trainer");
    MP_TRY(mp_trainer_need_plan(t));
    if (!o) {
        replace_state(t, NULL);
        return MP_OK;
    }
    if (o->every < 0) return mp_error(MP_ERR_INVALID_ARG, "numerics: every %d must be >= 1", o->every);
    if (o->kinds & ~(unsigned)MP_NUMERICS_ALL)
        return mp_error(MP_ERR_INVALID_ARG, "numerics: kinds 0x%x has unknown flags", o->kinds);
    mp_numerics_state *s = calloc(1, sizeof *s);
    if (s) s->node_on = calloc((size_t)t->g->n_nodes + 1, sizeof *s->node_on);
    if (!s || !s->node_on) {
        mp_numerics_state_free(s);
        return mp_error(MP_ERR_NOMEM, "numerics: out of memory");
    }
    mp_status st = select_nodes(t->g, o->nodes, s->node_on);
    if (st == MP_OK && o->nodes && *o->nodes) st = check_selected_stored(t, s->node_on);
    if (st != MP_OK) {
        mp_numerics_state_free(s);
        return st;
    }
    s->gpu = t->o.device.kind != MP_DEVICE_CPU;
    s->every = o->every ? o->every : 1;
    s->kinds = o->kinds ? o->kinds : MP_NUMERICS_ALL;
    replace_state(t, s);
    return MP_OK;
}

/* GPU: a finished readback into `done` (waiting for it when wait). */
static mp_status fetch(mp_numerics_state *s, bool wait) {
#ifdef MP_HAVE_CUDA
    if (!s->pending_step) return MP_OK;
    bool ready = false;
    MP_TRY(mp_cuda_numerics_ready(s->dev, wait, &ready));
    if (!ready) return MP_OK;
    const record_list *l = &s->layout[s->pending_kind];
    s->done.n = 0;
    for (int j = 0; j < l->n; j++) {
        MP_TRY(grow(&s->done));
        mp_numerics_record *r = &s->done.rec[s->done.n++];
        *r = l->rec[j];
        if (r->kind == MP_NUMERICS_GRAD || r->kind == MP_NUMERICS_PARAM_GRAD) r->scale = s->pending_scale;
        mp_cuda_numerics_get(s->dev, j, r->stats.numel, &r->stats);
    }
    s->step = s->pending_step;
    s->done_read = false;
    s->pending_step = 0;
#else
    (void)s, (void)wait;
#endif
    return MP_OK;
}

mp_status mp_trainer_numerics(mp_trainer *t, const mp_numerics_record **records, int *n, int64_t *step) {
    if (!t || !records || !n || !step) return mp_error(MP_ERR_INVALID_ARG, "numerics: null argument");
    mp_numerics_state *s = t->numerics;
    /* one not yet returned goes first, so that a reader calling after every step sees every collection */
    if (s && s->gpu && (s->done_read || !s->step)) MP_TRY(fetch(s, false));
    const bool have = s && s->step > 0 && !s->collecting;
    if (have) s->done_read = true;
    *records = have ? s->done.rec : NULL;
    *n = have ? s->done.n : 0;
    *step = have ? s->step : 0;
    return MP_OK;
}

/* Measure one tensor: on the CPU now, on a GPU by a kernel into the next slot. */
static mp_status add(mp_trainer *t, mp_numerics_kind kind, mp_node node, int param, const char *name,
                     const void *data, mp_dtype dtype, int64_t numel, float scale) {
    mp_numerics_state *s = t->numerics;
    record_list *l = &s->done;
#ifdef MP_HAVE_CUDA
    if (s->gpu) l = &s->build;
#endif
    MP_TRY(grow(l));
    mp_numerics_record *r = &l->rec[l->n];
    *r = (mp_numerics_record){.kind = kind, .node = node, .param = param, .name = name, .dtype = dtype, .scale = scale};
    r->stats.numel = numel;
#ifdef MP_HAVE_CUDA
    if (s->gpu) MP_TRY(mp_cuda_numerics_tensor(s->dev, l->n, data, dtype, numel));
    else
#endif
        MP_TRY(mp_tensor_stats_compute(data, dtype, numel, &r->stats));
    l->n++;
    return MP_OK;
}

static bool is_float(mp_dtype d) { return d == MP_DTYPE_F32 || d == MP_DTYPE_F16 || d == MP_DTYPE_BF16; }

/* The plan's observer: node i's output after its forward, or its output's
 * gradient before its backward. */
static mp_status observe(void *arg, int i, bool grad, const mp_tensor *x) {
    mp_trainer *t = arg;
    mp_numerics_state *s = t->numerics;
    if (!s || !s->node_on[i] || !x->data || !is_float(x->dtype)) return MP_OK;
    if (!(s->kinds & (grad ? MP_NUMERICS_GRAD : MP_NUMERICS_OUTPUT))) return MP_OK;
    /* a fused node runs nothing: the last of a chain is measured as its
     * producer's output (or gradient), which holds the fused result, under
     * its own name; an add inside batch norm + add + ReLU has no stored value */
    const int producer = mp_plan_fused_producer(t->plan, i);
    if (producer >= 0 && !mp_plan_fused_value_stored(t->plan, i)) return MP_OK;
    if (producer >= 0) x = grad ? &t->plan->nodes[producer].call.d_out : &t->plan->nodes[producer].call.out;
    if (!x->data) return MP_OK;
    return add(t, grad ? MP_NUMERICS_GRAD : MP_NUMERICS_OUTPUT, i, -1, t->g->nodes[i].name, x->data, x->dtype,
               mp_tensor_numel(x), grad ? s->scale : 1.0f);
}

#ifdef MP_HAVE_CUDA
/* GPU: device slots for every tensor a launch can measure, on the plan's device. */
static mp_status open_device(mp_trainer *t) {
    mp_numerics_state *s = t->numerics;
    const void *ctx = mp_cuda_plan_ctx(t->plan);
    if (s->dev && s->dev_ctx == ctx) return MP_OK;
    mp_cuda_numerics_destroy(s->dev);
    s->dev = NULL;
    for (int k = 0; k < MP_LAUNCH_KINDS; k++) s->layout[k].n = 0; /* a new plan: new graphs, new layouts */
    s->pending_step = 0;
    MP_TRY(mp_cuda_numerics_create(mp_cuda_plan_ctx(t->plan), 2 * t->g->n_nodes + 2 * t->g->n_params, &s->dev));
    s->dev_ctx = ctx;
    return MP_OK;
}
#endif

mp_status mp_numerics_launch_begin(mp_trainer *t, int kind) {
    mp_numerics_state *s = t->numerics;
    if (!s || !(kind & MP_LAUNCH_LAST) || (t->steps + 1) % s->every != 0) return MP_OK;
#ifdef MP_HAVE_CUDA
    if (s->gpu) {
        MP_TRY(open_device(t));
        /* the host copy is about to be reused: wait for the last one, except
         * on a data-parallel rank, which never waits outside the watchdog
         * (a dead peer would hang it): that rank skips this collection */
        MP_TRY(fetch(s, !t->o.dist));
        if (s->pending_step) return MP_OK;
        MP_TRY(mp_cuda_numerics_clear(s->dev));
        s->build.n = 0;
        s->kind = kind;
    }
#endif
    if (!s->gpu) {
        s->done.n = 0;
        s->step = 0;
    }
    s->collecting = true;
    s->scale = mp_scaler_scale(&t->scaler);
    t->plan->observe = observe;
    t->plan->observe_arg = t;
    return MP_OK;
}

bool mp_numerics_collecting(const mp_trainer *t) { return t->numerics && t->numerics->collecting; }

mp_status mp_numerics_params(mp_trainer *t) {
    mp_numerics_state *s = t->numerics;
    if (!s || !s->collecting || !(s->kinds & MP_NUMERICS_PARAM)) return MP_OK;
    const mp_graph *g = t->g;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *p = &g->params[k];
        if (!p->spec.trainable || !s->node_on[p->node]) continue;
        const void *data = p->data;
        mp_dtype dtype = MP_DTYPE_F32;
#ifdef MP_HAVE_CUDA
        if (s->gpu) { /* the fp32 master, or the weight itself where a weight has no master */
            data = mp_cuda_plan_param(t->plan, k);
            if (!data) data = mp_cuda_plan_low(t->plan, k, &dtype);
        }
#endif
        if (data) MP_TRY(add(t, MP_NUMERICS_PARAM, p->node, k, p->name, data, dtype, mp_shape_numel(&p->spec.shape), 1.0f));
    }
    return MP_OK;
}

mp_status mp_numerics_launch_end(mp_trainer *t, bool ok) {
    mp_numerics_state *s = t->numerics;
    if (!s || !s->collecting) return MP_OK;
    s->collecting = false;
    if (t->plan) t->plan->observe = NULL;
    if (!ok) return MP_OK;
#ifdef MP_HAVE_CUDA
    if (s->gpu) {
        if (s->build.n > 0) { /* the step's code ran (directly or captured): its layout */
            record_list old = s->layout[s->kind];
            s->layout[s->kind] = s->build;
            s->build = old;
        } /* else a graph replay measured the layout its capture made */
        MP_TRY(mp_cuda_numerics_readback(s->dev, s->layout[s->kind].n));
        s->pending_step = t->steps + 1;
        s->pending_kind = s->kind;
        s->pending_scale = s->scale;
        return MP_OK;
    }
#endif
    s->step = t->steps + 1; /* the launch ended step steps + 1 (counted after this) */
    return MP_OK;
}

mp_status mp_numerics_group_grads(mp_trainer *t, int gi) {
    mp_numerics_state *s = t->numerics;
    if (!s || !s->collecting || !(s->kinds & MP_NUMERICS_PARAM_GRAD)) return MP_OK;
    const mp_optimizer *o = t->groups[gi].opt;
    for (int j = 0; j < o->n; j++) {
        const int k = o->param_index[j];
        const mp_gparam *p = &t->g->params[k];
        void *grad = t->plan->be->param_grad(t->plan, k);
        if (!s->node_on[p->node] || !grad) continue;
        MP_TRY(add(t, MP_NUMERICS_PARAM_GRAD, p->node, k, p->name, grad, mp_plan_grad_dtype(t->plan, k),
                   mp_shape_numel(&p->spec.shape), s->scale));
    }
    return MP_OK;
}
