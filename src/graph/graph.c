/* graph.c — building the graph through the C API: nodes, shapes, parameters. */
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host_mem.h"
#include "core/rng.h"

mp_graph *mp_graph_create(void) {
    mp_graph *g = calloc(1, sizeof(mp_graph));
    /* fp32 until a precision policy is applied */
    if (g) g->policy = (mp_policy_info){.low_dtype = MP_DTYPE_F32, .master_weights = true, .allreduce_dtype = MP_DTYPE_F32};
    return g;
}

static void graph_free(mp_graph *g) {
    for (int i = 0; i < g->n_params; i++) {
        free(g->params[i].data);
        free(g->params[i].grad);
    }
    free(g->params);
    free(g->nodes);
    free(g);
}

void mp_graph_destroy(mp_graph *g) {
    if (!g) return;
    if (g->live_plans > 0 || g->live_optimizers > 0) { /* they read it to the end: freed after the last */
        g->orphaned = true;
        return;
    }
    graph_free(g);
}

void mp_graph_user_gone(mp_graph *g) {
    if (g->orphaned && g->live_plans == 0 && g->live_optimizers == 0) graph_free(g);
}

mp_status mp_graph_status(const mp_graph *g) { return g ? g->status : MP_ERR_INVALID_ARG; }

const char *mp_graph_error(const mp_graph *g) { return !g ? "null graph" : g->status != MP_OK ? g->error : ""; }

mp_node mp_graph_fail(mp_graph *g, mp_status s) {
    if (g->status == MP_OK) {
        g->status = s;
        snprintf(g->error, sizeof g->error, "%s", mp_last_error());
    }
    return -1;
}

mp_status mp_graph_check_built(const mp_graph *g, const char *who) {
    if (!g) return mp_error(MP_ERR_INVALID_ARG, "%s: null graph", who);
    if (g->status == MP_OK) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "%s: the graph has a construction error: %s", who, g->error);
}

static float *alloc_floats(int64_t n) {
    size_t bytes = MP_ALIGN64((size_t)n * sizeof(float));
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

static mp_status add_params(mp_graph *g, int node, const mp_op_info *info) {
    mp_gnode *nd = &g->nodes[node];
    nd->first_param = g->n_params;
    nd->n_params = info->n_params;
    for (int p = 0; p < info->n_params; p++) {
        if (g->n_params == g->cap_params) {
            int cap = g->cap_params ? 2 * g->cap_params : 32;
            mp_gparam *np = realloc(g->params, (size_t)cap * sizeof *np);
            if (!np) return mp_error(MP_ERR_NOMEM, "graph: out of memory adding parameters of '%s'", nd->name);
            g->params = np;
            g->cap_params = cap;
        }
        mp_gparam *gp = &g->params[g->n_params];
        memset(gp, 0, sizeof *gp);
        snprintf(gp->name, sizeof gp->name, "%s.%s", nd->name, info->params[p].name);
        gp->node = node;
        gp->spec = info->params[p];
        int64_t n = mp_shape_numel(&gp->spec.shape);
        MP_TRY(mp_host_mem_check(MP_ALIGN64((size_t)n * sizeof(float)) * (gp->spec.trainable ? 2 : 1), NULL,
                                 "parameter %s (%lld floats%s)", gp->name, (long long)n,
                                 gp->spec.trainable ? " and their gradient" : ""));
        gp->data = alloc_floats(n);
        gp->grad = gp->spec.trainable ? alloc_floats(n) : NULL;
        if (!gp->data || (gp->spec.trainable && !gp->grad)) {
            free(gp->data);
            free(gp->grad);
            return mp_error(MP_ERR_NOMEM, "graph: out of memory for parameter %s (%lld floats)", gp->name,
                            (long long)n);
        }
        gp->grad_fresh = true;
        g->n_params++;
    }
    return MP_OK;
}

/* The first control character of name (saved weights, reports and policy
 * files cannot carry one), or -1; *shown gets the name with them escaped. */
static int control_char(const char *name, char *shown, size_t cap) {
    int at = -1;
    size_t o = 0;
    for (int i = 0; name[i] && o + 5 < cap; i++) {
        const unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f) {
            if (at < 0) at = i;
            o += (size_t)snprintf(shown + o, cap - o, "\\x%02x", c);
        } else {
            shown[o++] = (char)c;
        }
    }
    shown[o] = '\0';
    return at;
}

/* An input that is the int32 labels node: only a loss's labels input
 * (softmax_cross_entropy's second) reads one; float ops would read its bits. */
static mp_status check_labels_use(const mp_graph *g, mp_op_kind kind, const char *name, const mp_node *inputs,
                                  int n_in) {
    for (int i = 0; i < n_in; i++) {
        const mp_gnode *src = &g->nodes[inputs[i]];
        if (src->desc.kind == MP_OP_LABELS && !(kind == MP_OP_SOFTMAX_CE && i == 1))
            return mp_error(MP_ERR_INVALID_ARG,
                            "%s '%s': input %d is the int32 labels node '%s'; only softmax_cross_entropy's "
                            "labels input (its second) reads labels",
                            mp_op_lookup(kind)->name, name, i, src->name);
    }
    return MP_OK;
}

mp_node mp_graph_add(mp_graph *g, mp_op_kind kind, const char *name, const mp_op_attr *attr,
                     const mp_node *inputs, int n_in) {
    if (!g) return -1;
    if (g->status != MP_OK) return -1; /* keep the first error */
    if (!name || !*name || strlen(name) >= MP_NAME_MAX)
        return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG, "graph: node name must be 1..%d characters",
                                         MP_NAME_MAX - 1));
    char shown[4 * MP_NAME_MAX + 1];
    const int bad = control_char(name, shown, sizeof shown);
    if (bad >= 0)
        return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG,
                                         "graph: node %d's name \"%s\" has a control character at byte %d",
                                         g->n_nodes, shown, bad));
    if (g->live_plans > 0 || g->live_optimizers > 0)
        return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG,
                                         "graph: node '%s' added after %d plan(s) or trainer(s) and %d optimizer(s) "
                                         "were made from the graph (they hold its nodes and parameters); add every "
                                         "node first, or destroy them",
                                         name, g->live_plans, g->live_optimizers));
    if (mp_graph_find(g, name) >= 0)
        return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG, "graph: duplicate node name '%s'", name));
    if (n_in < 0 || n_in > MP_MAX_INPUTS)
        return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG, "%s '%s': %d inputs (at most %d)",
                                         mp_op_lookup(kind)->name, name, n_in, MP_MAX_INPUTS));
    if (n_in > 0 && !inputs)
        return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG, "%s '%s': %d inputs given as a null array",
                                         mp_op_lookup(kind)->name, name, n_in));
    for (int i = 0; i < n_in; i++)
        if (inputs[i] < 0 || inputs[i] >= g->n_nodes)
            return mp_graph_fail(g, mp_error(MP_ERR_INVALID_ARG, "%s '%s': input %d is not a node of this graph",
                                             mp_op_lookup(kind)->name, name, i));
    mp_status ls = check_labels_use(g, kind, name, inputs, n_in);
    if (ls != MP_OK) return mp_graph_fail(g, ls);
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 32;
        mp_gnode *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return mp_graph_fail(g, mp_error(MP_ERR_NOMEM, "graph: out of memory adding node '%s'", name));
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    int id = g->n_nodes;
    mp_gnode *nd = &g->nodes[id];
    memset(nd, 0, sizeof *nd);
    snprintf(nd->name, sizeof nd->name, "%s", name);
    nd->desc.kind = kind;
    nd->desc.name = NULL; /* set when used: nodes[] may move on realloc */
    if (attr) nd->desc.attr = *attr;
    nd->n_in = n_in;
    nd->compute_dtype = MP_DTYPE_F32;
    nd->storage_dtype = kind == MP_OP_LABELS ? MP_DTYPE_I32 : MP_DTYPE_F32;

    mp_op_info info;
    memset(&info, 0, sizeof info);
    info.n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        nd->in[i] = inputs[i];
        info.in[i] = g->nodes[inputs[i]].sample_shape;
        info.in_dtype[i] = g->nodes[inputs[i]].storage_dtype;
    }
    mp_op_desc d = nd->desc;
    d.name = nd->name;
    mp_status s = mp_op_lookup(kind)->infer(&d, &info);
    if (s != MP_OK) return mp_graph_fail(g, s);
    nd->sample_shape = info.out;
    g->n_nodes++;
    for (int i = 0; i < n_in; i++) g->nodes[inputs[i]].n_consumers++;
    s = add_params(g, id, &info);
    if (s != MP_OK) return mp_graph_fail(g, s);
    return id;
}

mp_status mp_init_scheme_parse(const char *text, mp_init_scheme *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "initialization '%s': null output", text ? text : "(null)");
    if (text && !strcmp(text, "he")) *out = MP_INIT_SCHEME_HE;
    else if (text && !strcmp(text, "torch")) *out = MP_INIT_SCHEME_TORCH;
    else return mp_error(MP_ERR_INVALID_ARG, "unknown initialization '%s' (he, torch)", text ? text : "(null)");
    return MP_OK;
}

void mp_graph_init_params(mp_graph *g, uint64_t seed) {
    (void)mp_graph_init_params_scheme(g, seed, MP_INIT_SCHEME_HE);
}

mp_status mp_graph_init_params_scheme(mp_graph *g, uint64_t seed, mp_init_scheme scheme) {
    if (!g) return mp_error(MP_ERR_INVALID_ARG, "init_params: no graph");
    if (scheme != MP_INIT_SCHEME_HE && scheme != MP_INIT_SCHEME_TORCH)
        return mp_error(MP_ERR_INVALID_ARG, "init_params: unknown initialization scheme %d (MP_INIT_SCHEME_HE, "
                        "MP_INIT_SCHEME_TORCH)", (int)scheme);
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int i = 0; i < g->n_params; i++) {
        mp_gparam *p = &g->params[i];
        int64_t n = mp_shape_numel(&p->spec.shape);
        double fan = p->spec.fan_in > 0 ? p->spec.fan_in : 1;
        for (int64_t j = 0; j < n; j++) {
            double v = 0;
            switch (p->spec.init) {
            case MP_INIT_ZERO: v = 0; break;
            case MP_INIT_ONE: v = 1; break;
            case MP_INIT_HE_NORMAL:
                v = scheme == MP_INIT_SCHEME_TORCH ? (2 * mp_rng_uniform(&r) - 1) / sqrt(fan)
                                                   : mp_rng_normal(&r) * sqrt(2.0 / fan);
                break;
            case MP_INIT_UNIFORM_FAN_IN: v = (2 * mp_rng_uniform(&r) - 1) / sqrt(fan); break;
            }
            p->data[j] = (float)v;
        }
    }
    g->params_initialized = true;
    return MP_OK;
}

mp_status mp_graph_share_params(mp_graph *g, mp_node node, mp_node from) {
    if (!g || node < 0 || node >= g->n_nodes || from < 0 || from >= g->n_nodes || node == from)
        return mp_error(MP_ERR_INVALID_ARG, "share_params: bad nodes %d, %d", node, from);
    mp_gnode *a = &g->nodes[node];
    const mp_gnode *b = &g->nodes[from];
    if (a->desc.kind != b->desc.kind || a->n_params != b->n_params || a->n_params == 0)
        return mp_error(MP_ERR_INVALID_ARG, "share_params: '%s' (%s) cannot use the parameters of '%s' (%s)", a->name,
                        mp_op_lookup(a->desc.kind)->name, b->name, mp_op_lookup(b->desc.kind)->name);
    if (g->live_plans > 0 || g->live_optimizers > 0)
        return mp_error(MP_ERR_INVALID_ARG, "share_params: '%s': %d plan(s) and %d optimizer(s) of this graph are "
                        "alive; destroy the plans, trainers and optimizers first", a->name, g->live_plans,
                        g->live_optimizers);
    if (mp_graph_param_users(g, a->first_param) > 1)
        return mp_error(MP_ERR_INVALID_ARG, "share_params: '%s' already shares its parameters with another node",
                        a->name);
    if (a->first_param + a->n_params != g->n_params)
        return mp_error(MP_ERR_INVALID_ARG, "share_params: call it right after creating '%s'", a->name);
    for (int k = 0; k < a->n_params; k++) {
        const mp_param_spec *x = &g->params[a->first_param + k].spec, *y = &g->params[b->first_param + k].spec;
        if (strcmp(x->name, y->name) || !mp_shape_equal(&x->shape, &y->shape)) {
            char s1[64], s2[64];
            return mp_error(MP_ERR_SHAPE, "share_params: %s.%s %s differs from %s.%s %s", a->name, x->name,
                            mp_shape_str(&x->shape, s1, sizeof s1), b->name, y->name,
                            mp_shape_str(&y->shape, s2, sizeof s2));
        }
    }
    for (int k = 0; k < a->n_params; k++) {
        free(g->params[a->first_param + k].data);
        free(g->params[a->first_param + k].grad);
    }
    g->n_params -= a->n_params;
    a->first_param = b->first_param;
    return MP_OK;
}

void mp_graph_zero_grad(mp_graph *g) {
    for (int i = 0; g && i < g->n_params; i++) g->params[i].grad_fresh = true;
}

void mp_graph_mark_output(mp_graph *g, mp_node n) {
    if (g && n >= 0 && n < g->n_nodes) g->nodes[n].is_output = true;
}

mp_shape mp_graph_node_shape(const mp_graph *g, mp_node n, int batch) {
    mp_shape s = g->nodes[n].sample_shape;
    if (g->nodes[n].desc.kind == MP_OP_SOFTMAX_CE || g->nodes[n].desc.kind == MP_OP_BCE_LOGITS) return s;
    s.dims[0] = batch;
    return s;
}

int mp_graph_node_count(const mp_graph *g) { return g ? g->n_nodes : 0; }

mp_node mp_graph_find(const mp_graph *g, const char *name) {
    for (int i = 0; g && name && i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

const char *mp_graph_node_name(const mp_graph *g, mp_node n) {
    return g && n >= 0 && n < g->n_nodes ? g->nodes[n].name : NULL;
}

const char *mp_graph_node_op(const mp_graph *g, mp_node n) {
    return g && n >= 0 && n < g->n_nodes ? mp_op_lookup(g->nodes[n].desc.kind)->name : NULL;
}

int64_t mp_graph_param_count(const mp_graph *g) {
    int64_t n = 0;
    for (int i = 0; g && i < g->n_params; i++)
        if (g->params[i].spec.trainable) n += mp_shape_numel(&g->params[i].spec.shape);
    return n;
}

int mp_graph_param_users(const mp_graph *g, int k) {
    int users = 0;
    for (int i = 0; i < g->n_nodes; i++)
        users += k >= g->nodes[i].first_param && k < g->nodes[i].first_param + g->nodes[i].n_params;
    return users;
}

void mp_graph_round_low_weights(mp_graph *g, bool (*select)(const void *arg, int k), const void *arg) {
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *p = &g->params[k];
        if (p->round_dtype != MP_DTYPE_F32 && (!select || select(arg, k)))
            mp_round_f32(p->data, mp_shape_numel(&p->spec.shape), p->round_dtype);
    }
}

mp_dtype mp_graph_param_low_only(const mp_graph *g, int k) { return g->params[k].low_only; }
