/* onnx_values.c — the importer's table of ONNX values (activations and
 * constants), its messages, the node names it gives mixprec nodes, and the
 * copying of constants into parameters. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_import.h"

mp_status onnx_fail(onnx_ctx *c, mp_status s, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->node) return mp_error(s, "%s: %s", c->path, msg);
    const char *nm = c->node->name && c->node->name[0] ? c->node->name : NULL;
    char idx[32];
    snprintf(idx, sizeof idx, "#%d", c->node_index);
    return mp_error(s, "%s: node '%s' (%s, opset %d): %s", c->path, nm ? nm : idx,
                    c->node->op_type ? c->node->op_type : "?", c->opset, msg);
}

const char *onnx_dims_str(int ndim, const int64_t *dims, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++) {
        if (dims[i] == ONNX_BATCH) k += (size_t)snprintf(buf + k, n - k, "%sN", i ? ", " : "");
        else if (dims[i] == ONNX_DYN) k += (size_t)snprintf(buf + k, n - k, "%s?", i ? ", " : "");
        else k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    }
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

onnx_value *onnx_find(onnx_ctx *c, const char *name) {
    if (!name || !name[0]) return NULL;
    for (int k = c->n_vals - 1; k >= 0; k--)
        if (!strcmp(c->vals[k].name, name)) return &c->vals[k];
    return NULL;
}

mp_status onnx_new(onnx_ctx *c, const char *name, onnx_value **out) {
    *out = NULL;
    if (!name || !name[0]) return onnx_fail(c, MP_ERR_FORMAT, "an output has an empty name");
    if (onnx_find(c, name)) return onnx_fail(c, MP_ERR_FORMAT, "value '%s' is assigned twice", name);
    if (c->n_vals == c->cap_vals) {
        int cap = c->cap_vals ? 2 * c->cap_vals : 64;
        onnx_value *nv = realloc(c->vals, (size_t)cap * sizeof *nv);
        if (!nv) return onnx_fail(c, MP_ERR_NOMEM, "out of memory");
        c->vals = nv;
        c->cap_vals = cap;
    }
    onnx_value *v = &c->vals[c->n_vals];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name) return onnx_fail(c, MP_ERR_NOMEM, "out of memory");
    v->node = -1;
    c->n_vals++;
    *out = v;
    return MP_OK;
}

mp_status onnx_const_alloc(onnx_ctx *c, onnx_value *v, bool is_int, int ndim, const int64_t *dims) {
    if (ndim < 0 || ndim > ONNX_MAX_DIMS)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "constant '%s' has %d dims (at most %d)", v->name, ndim, ONNX_MAX_DIMS);
    /* the product of the non-zero dims is bounded too: an empty constant of
     * [0, 2^62, 4] would overflow the folds' products of its dims */
    int64_t numel = 1, volume = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return onnx_fail(c, MP_ERR_FORMAT, "constant '%s' has a negative dim %d", v->name, i);
        if (dims[i] > 0 && volume > ((int64_t)1 << 31) / dims[i]) {
            char b[ONNX_MAX_DIMS * 22 + 4];
            return onnx_fail(c, MP_ERR_UNSUPPORTED, "constant '%s' of shape %s is too large (its dims multiply to "
                             "more than 2^31, even where one of them is 0)", v->name,
                             onnx_dims_str(ndim, dims, b, sizeof b));
        }
        if (dims[i] > 0) volume *= dims[i];
        numel *= dims[i];
    }
    size_t bytes = (size_t)(numel ? numel : 1) * (is_int ? sizeof(int64_t) : sizeof(float));
    void *p = calloc(1, bytes);
    if (!p)
        return onnx_fail(c, MP_ERR_NOMEM, "out of memory for constant '%s' (%lld elements)", v->name, (long long)numel);
    free(v->f);
    free(v->i);
    v->f = NULL;
    v->i = NULL;
    if (is_int) v->i = p;
    else v->f = p;
    v->kind = ONNX_V_CONST;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->dims[i] = dims[i];
    v->numel = numel;
    v->is_int = is_int;
    return MP_OK;
}

mp_status onnx_new_const(onnx_ctx *c, const char *name, bool is_int, int ndim, const int64_t *dims, onnx_value **out) {
    MP_TRY(onnx_new(c, name, out));
    return onnx_const_alloc(c, *out, is_int, ndim, dims);
}

mp_status onnx_new_act(onnx_ctx *c, const char *name, mp_node node, int ndim, const int64_t *dims) {
    onnx_value *v;
    MP_TRY(onnx_new(c, name, &v));
    v->kind = ONNX_V_ACT;
    v->node = node;
    v->ndim = ndim;
    for (int i = 0; i < ndim && i < ONNX_MAX_DIMS; i++) v->dims[i] = dims[i];
    return MP_OK;
}

mp_status onnx_input(onnx_ctx *c, int k, onnx_value **out) {
    *out = NULL;
    if (k >= (int)c->node->n_input || !c->node->input[k][0]) return MP_OK;
    *out = onnx_find(c, c->node->input[k]);
    if (!*out)
        return onnx_fail(c, MP_ERR_FORMAT,
                         "input %d '%s' is neither an initializer, the graph input nor an earlier node's output", k,
                         c->node->input[k]);
    return MP_OK;
}

mp_status onnx_act(onnx_ctx *c, int k, onnx_value **out) {
    MP_TRY(onnx_input(c, k, out));
    if (!*out) return onnx_fail(c, MP_ERR_FORMAT, "input %d is missing", k);
    if ((*out)->kind != ONNX_V_ACT)
        return onnx_fail(c, MP_ERR_UNSUPPORTED,
                         "input %d '%s' is a constant where mixprec needs an activation (computed from the graph input)",
                         k, (*out)->name);
    return MP_OK;
}

mp_status onnx_const(onnx_ctx *c, int k, onnx_value **out) {
    MP_TRY(onnx_input(c, k, out));
    if (!*out) return onnx_fail(c, MP_ERR_FORMAT, "input %d is missing", k);
    if ((*out)->kind != ONNX_V_CONST)
        return onnx_fail(c, MP_ERR_UNSUPPORTED,
                         "input %d '%s' is computed from the graph input; mixprec needs a constant (an initializer) here",
                         k, (*out)->name);
    return MP_OK;
}

mp_status onnx_built(onnx_ctx *c, mp_node n) {
    if (n >= 0) return MP_OK;
    const mp_status s = mp_graph_status(c->g);
    if (s != MP_OK) return onnx_fail(c, s, "%s", mp_graph_error(c->g)); /* the graph's first error: why n is -1 */
    char msg[600];
    snprintf(msg, sizeof msg, "%s", mp_last_error());
    return onnx_fail(c, MP_ERR_INTERNAL, "%s", msg);
}

mp_status onnx_reshape_node(onnx_ctx *c, const char *name, mp_node x, int ndim, const int64_t *dims, mp_node *out) {
    if (ndim < 2 || ndim > MP_MAX_DIMS)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "a %d-D activation: mixprec's tensors have 2 to %d dims", ndim,
                         MP_MAX_DIMS);
    mp_op_attr a;
    memset(&a, 0, sizeof a);
    a.reshape.ndim = ndim;
    for (int i = 1; i < ndim; i++) {
        if (dims[i] < 1 || dims[i] > (1 << 30))
            return onnx_fail(c, MP_ERR_SHAPE, "dim %d of the shape is %lld", i, (long long)dims[i]);
        a.reshape.dims[i] = (int)dims[i];
    }
    *out = mp_graph_add(c->g, MP_OP_RESHAPE, name, &a, &x, 1);
    return onnx_built(c, *out);
}

mp_status onnx_conform(onnx_ctx *c, onnx_value *v, mp_node *out) {
    const mp_gnode *nd = &c->g->nodes[v->node];
    bool same = nd->sample_shape.ndim == v->ndim;
    for (int i = 1; same && i < v->ndim; i++) same = nd->sample_shape.dims[i] == v->dims[i];
    if (same) {
        *out = v->node;
        return MP_OK;
    }
    char name[MP_NAME_MAX];
    onnx_derived_name(c, nd->name, "_r", name);
    MP_TRY(onnx_reshape_node(c, name, v->node, v->ndim, v->dims, out));
    v->node = *out; /* later readers use the reshaped node */
    return MP_OK;
}

/* [A-Za-z0-9_] only, no leading, trailing or repeated '_'. */
static void sanitize(const char *in, char *out, size_t n) {
    size_t k = 0;
    for (const char *p = in; *p && k + 1 < n; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!ok) ch = '_';
        if (ch == '_' && (k == 0 || out[k - 1] == '_')) continue;
        out[k++] = ch;
    }
    while (k > 0 && out[k - 1] == '_') k--;
    out[k] = 0;
}

void onnx_unique_name(onnx_ctx *c, const char *base, const char *suffix, char out[MP_NAME_MAX]) {
    const char *pre = c->prefix; /* [A-Za-z0-9_], at most ONNX_PREFIX_MAX */
    const size_t pl = strlen(pre);
    char clean[256], b[MP_NAME_MAX];
    sanitize(base ? base : "", clean, sizeof clean);
    if (!clean[0]) snprintf(clean, sizeof clean, "node");
    /* the prefix whole, then the base's last characters (the most specific
     * part of exporters' path-like names), the suffix, room for "_N" */
    const size_t room = MP_NAME_MAX - 1 - pl - 8 - 7, len = strlen(clean);
    const char *tail = len > room ? clean + (len - room) : clean;
    while (*tail == '_' && tail[1]) tail++;
    snprintf(b, sizeof b, "%s%.*s%.8s", pre, (int)room, tail, suffix ? suffix : "");
    char cand[MP_NAME_MAX + 16] = {0};
    snprintf(cand, sizeof cand, "%s", b);
    for (unsigned k = 2; mp_graph_find(c->g, cand) >= 0 || !strcmp(cand, "labels") || !strcmp(cand, "loss"); k++)
        snprintf(cand, sizeof cand, "%s_%u", b, k % 1000000u);
    memcpy(out, cand, MP_NAME_MAX - 1);
    out[MP_NAME_MAX - 1] = 0;
}

void onnx_derived_name(onnx_ctx *c, const char *node_name, const char *suffix, char out[MP_NAME_MAX]) {
    const size_t pl = strlen(c->prefix); /* node_name starts with it: onnx_unique_name made it */
    onnx_unique_name(c, strlen(node_name) >= pl ? node_name + pl : node_name, suffix, out);
}

void onnx_node_name(onnx_ctx *c, char out[MP_NAME_MAX]) {
    char base[160];
    const Onnx__NodeProto *n = c->node;
    char clean[128];
    sanitize(n->name ? n->name : "", clean, sizeof clean);
    if (clean[0]) snprintf(base, sizeof base, "%s", clean);
    else snprintf(base, sizeof base, "%s_%d", n->op_type ? n->op_type : "node", c->node_index);
    onnx_unique_name(c, base, NULL, out);
}

mp_status onnx_set_param(onnx_ctx *c, const char *node, const char *param, const onnx_value *v, const float *data,
                         int64_t n) {
    char full[2 * MP_NAME_MAX + 16];
    snprintf(full, sizeof full, "%s.%s", node, param);
    int k = mp_graph_param_find(c->g, full);
    if (k < 0) return onnx_fail(c, MP_ERR_INTERNAL, "no parameter %s", full);
    char want[96], have[96];
    const mp_shape *s = &c->g->params[k].spec.shape;
    int64_t wd[MP_MAX_DIMS];
    for (int i = 0; i < s->ndim; i++) wd[i] = s->dims[i];
    if (mp_shape_numel(s) != n)
        return onnx_fail(c, MP_ERR_SHAPE, "'%s' has shape %s; mixprec's %s needs %s", v->name,
                         onnx_dims_str(v->ndim, v->dims, have, sizeof have), full,
                         onnx_dims_str(s->ndim, wd, want, sizeof want));
    if (mp_graph_param_set(c->g, full, data, (size_t)n) != MP_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", mp_last_error());
        return onnx_fail(c, MP_ERR_NONFINITE, "'%s': %s", v->name, msg);
    }
    if (c->o.on_param) c->o.on_param(c->o.on_param_arg, full, v->source ? v->source : v->name);
    c->params++;
    return MP_OK;
}

int onnx_consumers(const onnx_ctx *c, const char *name, int *only) {
    int count = 0;
    *only = -1;
    const Onnx__GraphProto *gp = c->graph;
    for (size_t k = 0; k < gp->n_node; k++)
        for (size_t i = 0; i < gp->node[k]->n_input; i++)
            if (!strcmp(gp->node[k]->input[i], name)) {
                count++;
                *only = (int)k;
            }
    for (size_t k = 0; k < gp->n_output; k++)
        if (gp->output[k]->name && !strcmp(gp->output[k]->name, name)) count += 2;
    if (count != 1) *only = -1;
    return count;
}

void onnx_values_free(onnx_ctx *c) {
    for (int k = 0; k < c->n_vals; k++) {
        free(c->vals[k].name);
        free(c->vals[k].f);
        free(c->vals[k].i);
        free(c->vals[k].source);
    }
    free(c->vals);
    c->vals = NULL;
    c->n_vals = c->cap_vals = 0;
}
