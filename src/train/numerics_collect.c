/* numerics_collect.c — a CPU trainer's numerics statistics: the selection,
 * the records of the newest collection, and the hooks (numerics_collect.h). */
#include "train/numerics_collect.h"

#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"

struct mp_numerics_state {
    int every;
    unsigned kinds;
    bool *node_on;            /* (n_nodes) */
    mp_numerics_record *rec;  /* the newest collection (or the one being made) */
    int n, cap;
    int64_t step;             /* the step rec belongs to; 0: none yet */
    bool collecting;
    float scale;              /* the loss scale of the collecting step */
};

void mp_numerics_state_free(mp_numerics_state *s) {
    if (!s) return;
    free(s->node_on);
    free(s->rec);
    free(s);
}

/* Mark the nodes named in "a,b,c" (NULL or "": all). */
static mp_status select_nodes(const mp_graph *g, const char *list, bool *on) {
    const bool all = !list || !*list;
    for (int i = 0; i < g->n_nodes; i++) on[i] = all;
    for (const char *p = list; p && *p;) {
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

mp_status mp_trainer_numerics_enable(mp_trainer *t, const mp_numerics_opts *o) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "numerics: null trainer");
    if (!o) {
        mp_numerics_state_free(t->numerics);
        t->numerics = NULL;
        return MP_OK;
    }
    if (t->o.device.kind != MP_DEVICE_CPU)
        return mp_error(MP_ERR_UNSUPPORTED, "numerics statistics are collected on the CPU only for now (the trainer "
                                            "runs on a GPU)");
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
    if (st != MP_OK) {
        mp_numerics_state_free(s);
        return st;
    }
    s->every = o->every ? o->every : 1;
    s->kinds = o->kinds ? o->kinds : MP_NUMERICS_ALL;
    mp_numerics_state_free(t->numerics);
    t->numerics = s;
    return MP_OK;
}

mp_status mp_trainer_numerics(mp_trainer *t, const mp_numerics_record **records, int *n, int64_t *step) {
    if (!t || !records || !n || !step) return mp_error(MP_ERR_INVALID_ARG, "numerics: null argument");
    const mp_numerics_state *s = t->numerics;
    const bool have = s && s->step > 0 && !s->collecting;
    *records = have ? s->rec : NULL;
    *n = have ? s->n : 0;
    *step = have ? s->step : 0;
    return MP_OK;
}

/* Append the statistics of one tensor. */
static mp_status add(mp_numerics_state *s, mp_numerics_kind kind, mp_node node, int param, const char *name,
                     const void *data, mp_dtype dtype, int64_t numel, float scale) {
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 32;
        mp_numerics_record *r = realloc(s->rec, (size_t)cap * sizeof *r);
        if (!r) return mp_error(MP_ERR_NOMEM, "numerics: out of memory");
        s->rec = r, s->cap = cap;
    }
    mp_numerics_record *r = &s->rec[s->n];
    *r = (mp_numerics_record){.kind = kind, .node = node, .param = param, .name = name, .dtype = dtype, .scale = scale};
    MP_TRY(mp_tensor_stats_compute(data, dtype, numel, &r->stats));
    s->n++;
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
    return add(s, grad ? MP_NUMERICS_GRAD : MP_NUMERICS_OUTPUT, i, -1, t->g->nodes[i].name, x->data, x->dtype,
               mp_tensor_numel(x), grad ? s->scale : 1.0f);
}

mp_status mp_numerics_launch_begin(mp_trainer *t, int kind) {
    mp_numerics_state *s = t->numerics;
    if (!s || !(kind & MP_LAUNCH_LAST) || (t->steps + 1) % s->every != 0) return MP_OK;
    s->n = 0;
    s->step = 0;
    s->collecting = true;
    s->scale = mp_scaler_scale(&t->scaler);
    t->plan->observe = observe;
    t->plan->observe_arg = t;
    if (!(s->kinds & MP_NUMERICS_PARAM)) return MP_OK;
    const mp_graph *g = t->g;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *p = &g->params[k];
        if (!p->spec.trainable || !s->node_on[p->node]) continue;
        MP_TRY(add(s, MP_NUMERICS_PARAM, p->node, k, p->name, p->data, MP_DTYPE_F32, mp_shape_numel(&p->spec.shape), 1.0f));
    }
    return MP_OK;
}

void mp_numerics_launch_end(mp_trainer *t) {
    mp_numerics_state *s = t->numerics;
    if (!s || !s->collecting) return;
    s->collecting = false;
    s->step = t->steps + 1; /* the launch ended step steps + 1 (counted after this) */
    if (t->plan) t->plan->observe = NULL;
}

mp_status mp_numerics_group_grads(mp_trainer *t, int gi) {
    mp_numerics_state *s = t->numerics;
    if (!s || !s->collecting || !(s->kinds & MP_NUMERICS_PARAM_GRAD)) return MP_OK;
    const mp_optimizer *o = t->groups[gi].opt;
    for (int j = 0; j < o->n; j++) {
        const int k = o->param_index[j];
        const mp_gparam *p = &t->g->params[k];
        if (!s->node_on[p->node] || !p->grad) continue;
        MP_TRY(add(s, MP_NUMERICS_PARAM_GRAD, p->node, k, p->name, p->grad, MP_DTYPE_F32,
                   mp_shape_numel(&p->spec.shape), s->scale));
    }
    return MP_OK;
}
