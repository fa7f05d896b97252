/* graph_params.c — the public view of a graph's parameters and gradients
 * (mixprec/graph.h): by index or by name, with shapes and the dtype the
 * precision pass gave each one. Copies are exact-size: n must be the
 * parameter's element count. */
#include <math.h>
#include <string.h>

#include "graph/graph.h"

int mp_graph_param_tensors(const mp_graph *g) { return g ? g->n_params : 0; }

mp_status mp_graph_param_info(const mp_graph *g, int k, mp_param_info *out) {
    if (!g || !out) return mp_error(MP_ERR_INVALID_ARG, "param_info: null %s", !g ? "graph" : "output");
    if (k < 0 || k >= g->n_params)
        return mp_error(MP_ERR_INVALID_ARG, "parameter %d: not a parameter of the graph (it has %d)", k, g->n_params);
    const mp_gparam *p = &g->params[k];
    mp_param_info in = {.name = p->name, .node = p->node, .ndim = p->spec.shape.ndim,
                        .numel = mp_shape_numel(&p->spec.shape), .trainable = p->spec.trainable,
                        .master = p->round_dtype == MP_DTYPE_F32, .dtype = p->round_dtype};
    for (int i = 0; i < in.ndim && i < MP_PARAM_MAX_DIMS; i++) in.dims[i] = p->spec.shape.dims[i];
    *out = in;
    return MP_OK;
}

int mp_graph_param_find(const mp_graph *g, const char *name) {
    for (int k = 0; g && name && k < g->n_params; k++)
        if (!strcmp(g->params[k].name, name)) return k;
    return -1;
}

/* Parameter `name`, with n its element count and buf the caller's array;
 * errors name it and the sizes. */
static mp_status lookup(const mp_graph *g, const char *name, size_t n, const void *buf, const char *what,
                        mp_gparam **out) {
    if (!g) return mp_error(MP_ERR_INVALID_ARG, "%s: null graph", what);
    const int k = mp_graph_param_find(g, name);
    if (k < 0) return mp_error(MP_ERR_INVALID_ARG, "%s: the graph has no parameter named '%s'", what, name ? name : "");
    if (!buf) return mp_error(MP_ERR_INVALID_ARG, "%s '%s': null buffer", what, name);
    mp_gparam *p = &g->params[k];
    const size_t have = (size_t)mp_shape_numel(&p->spec.shape);
    if (n != have)
        return mp_error(MP_ERR_SHAPE, "%s '%s': %zu values given, it has %zu", what, name, n, have);
    *out = p;
    return MP_OK;
}

/* Value v as parameter p keeps it (rounded to the dtype it trains in when it
 * has no fp32 master, as mp_graph_round_low_weights does). */
static float as_kept(const mp_gparam *p, float v) {
    mp_round_f32(&v, 1, p->round_dtype); /* a no-op for F32 */
    return v;
}

mp_status mp_graph_check_param_values(const mp_graph *g, const char *where) {
    for (int k = 0; k < g->n_params; k++)
        MP_TRY(mp_gparam_check_values(&g->params[k], g->params[k].data, mp_shape_numel(&g->params[k].spec.shape),
                                      where));
    return MP_OK;
}

bool mp_gparam_running_stat(const mp_gparam *p, float *initial) {
    const bool var = !strcmp(p->spec.name, "running_var");
    if (p->spec.trainable || (!var && strcmp(p->spec.name, "running_mean"))) return false;
    if (initial) *initial = var ? 1.0f : 0.0f;
    return true;
}

mp_status mp_gparam_check_values(const mp_gparam *p, const float *v, int64_t n, const char *where) {
    const bool variance = !strcmp(p->spec.name, "running_var");
    for (int64_t i = 0; i < n; i++) {
        const float kept = as_kept(p, v[i]);
        if (!isfinite(v[i]))
            return mp_error(MP_ERR_NONFINITE, "%s: tensor '%s' holds %g at element %lld", where, p->name, (double)v[i],
                            (long long)i);
        if (!isfinite(kept))
            return mp_error(MP_ERR_NONFINITE, "%s: tensor '%s' holds %g at element %lld, %g in %s, the dtype it trains "
                            "in (no fp32 master)", where, p->name, (double)v[i], (long long)i, (double)kept,
                            mp_dtype_name(p->round_dtype));
        if (variance && v[i] < 0)
            return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' is a variance but holds %g at element %lld", where, p->name,
                            (double)v[i], (long long)i);
    }
    return MP_OK;
}

mp_status mp_graph_param_get(const mp_graph *g, const char *name, float *dst, size_t n) {
    mp_gparam *p = NULL;
    MP_TRY(lookup(g, name, n, dst, "param_get", &p));
    memcpy(dst, p->data, n * sizeof(float));
    return MP_OK;
}

mp_status mp_graph_param_set(mp_graph *g, const char *name, const float *src, size_t n) {
    mp_gparam *p = NULL;
    MP_TRY(lookup(g, name, n, src, "param_set", &p));
    MP_TRY(mp_gparam_check_values(p, src, (int64_t)n, "param_set"));
    memcpy(p->data, src, n * sizeof(float));
    g->params_initialized = true;
    return MP_OK;
}

mp_status mp_graph_grad_get(const mp_graph *g, const char *name, float *dst, size_t n) {
    mp_gparam *p = NULL;
    MP_TRY(lookup(g, name, n, dst, "grad_get", &p));
    if (!p->grad) return mp_error(MP_ERR_INVALID_ARG, "grad_get '%s': a buffer has no gradient", name);
    if (!g->backward_ran)
        return mp_error(MP_ERR_INVALID_ARG, "grad_get '%s': no plan of the graph has run a backward yet", name);
    memcpy(dst, p->grad, n * sizeof(float));
    return MP_OK;
}

mp_status mp_graph_node_sample_shape(const mp_graph *g, mp_node n, int *ndim, int64_t dims[3]) {
    if (!g || n < 0 || n >= g->n_nodes) return mp_error(MP_ERR_INVALID_ARG, "node %d is not in the graph", n);
    if (!ndim || !dims)
        return mp_error(MP_ERR_INVALID_ARG, "node_sample_shape '%s': null ndim or dims", g->nodes[n].name);
    const mp_shape s = g->nodes[n].sample_shape; /* (1, ...) */
    *ndim = s.ndim - 1;
    for (int i = 1; i < s.ndim && i <= 3; i++) dims[i - 1] = s.dims[i];
    return MP_OK;
}
