/* onnx_writer.c — see onnx_writer.h. */
#include "onnx/onnx_writer.h"

#include <stdlib.h>
#include <string.h>

static void *grow(void *p, size_t *cap, size_t n, size_t size, bool *oom) {
    if (n < *cap) return p;
    size_t c = *cap ? 2 * *cap : 16;
    void *q = realloc(p, c * size);
    if (!q) {
        *oom = true;
        return NULL;
    }
    *cap = c;
    return q;
}

void onnx_w_release(onnx_writer *w) {
    for (int k = 0; w->param_value && k < w->n_params; k++) free(w->param_value[k]);
    free(w->param_value);
    w->param_value = NULL;
    for (size_t k = 0; k < w->n_names; k++) free(w->names[k]);
    free(w->names);
    w->names = NULL;
    w->n_names = w->cap_names = 0;
}

static bool name_taken(const onnx_writer *w, const char *s) {
    if (mp_graph_find(w->graph, s) >= 0) return true;
    for (size_t k = 0; k < w->n_names; k++)
        if (!strcmp(w->names[k], s)) return true;
    return false;
}

const char *onnx_w_unique(onnx_writer *w, const char *base) {
    const size_t n = strlen(base) + 16;
    char *s = malloc(n);
    char **names = grow(w->names, &w->cap_names, w->n_names, sizeof *names, &w->oom);
    if (!s || !names) {
        free(s);
        w->oom = true;
        return NULL;
    }
    w->names = names;
    snprintf(s, n, "%s", base);
    for (unsigned k = 2; name_taken(w, s); k++) snprintf(s, n, "%s_%u", base, k);
    w->names[w->n_names++] = s;
    return s;
}

char *onnx_w_strdup(onnx_writer *w, const char *s) {
    char *d = strdup(s ? s : "");
    if (!d) w->oom = true;
    return d;
}

/* A new attribute `name` of that type, or NULL (oom set). */
static Onnx__AttributeProto *new_attr(onnx_writer *w, const char *name, Onnx__AttributeProto__AttributeType type) {
    Onnx__AttributeProto *a = malloc(sizeof *a);
    if (!a) {
        w->oom = true;
        return NULL;
    }
    onnx__attribute_proto__init(a);
    a->name = onnx_w_strdup(w, name);
    a->has_type = true;
    a->type = type;
    return a;
}

Onnx__AttributeProto *onnx_w_attr_ints(onnx_writer *w, const char *name, const int64_t *v, int n) {
    Onnx__AttributeProto *a = new_attr(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *ints = malloc((size_t)(n ? n : 1) * sizeof *ints);
    if (!a || !ints) {
        if (a) onnx__attribute_proto__free_unpacked(a, NULL);
        free(ints);
        w->oom = true;
        return NULL;
    }
    memcpy(ints, v, (size_t)n * sizeof *ints);
    a->ints = ints;
    a->n_ints = (size_t)n;
    return a;
}

Onnx__AttributeProto *onnx_w_attr_int(onnx_writer *w, const char *name, int64_t v) {
    Onnx__AttributeProto *a = new_attr(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->has_i = true, a->i = v;
    return a;
}

Onnx__AttributeProto *onnx_w_attr_float(onnx_writer *w, const char *name, float v) {
    Onnx__AttributeProto *a = new_attr(w, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->has_f = true, a->f = v;
    return a;
}

void onnx_w_node(onnx_writer *w, const char *op, const char *name, const char *const *inputs, int n_in,
                 const char *output, Onnx__AttributeProto **attrs, int n_attr) {
    Onnx__GraphProto *g = w->g;
    Onnx__NodeProto *n = malloc(sizeof *n);
    char **in = malloc((size_t)(n_in ? n_in : 1) * sizeof *in), **out = malloc(sizeof *out);
    Onnx__AttributeProto **at = malloc((size_t)(n_attr ? n_attr : 1) * sizeof *at);
    Onnx__NodeProto **nodes = grow(g->node, &w->cap_node, g->n_node, sizeof *g->node, &w->oom);
    if (!n || !in || !out || !at || !nodes) {
        free(n), free(in), free(out), free(at);
        for (int k = 0; k < n_attr; k++)
            if (attrs[k]) onnx__attribute_proto__free_unpacked(attrs[k], NULL);
        w->oom = true;
        return;
    }
    g->node = nodes;
    onnx__node_proto__init(n);
    n->name = onnx_w_strdup(w, name);
    n->op_type = onnx_w_strdup(w, op);
    for (int k = 0; k < n_in; k++) in[k] = onnx_w_strdup(w, inputs[k]);
    n->input = in;
    n->n_input = (size_t)n_in;
    out[0] = onnx_w_strdup(w, output);
    n->output = out;
    n->n_output = 1;
    int m = 0;
    for (int k = 0; k < n_attr; k++)
        if (attrs[k]) at[m++] = attrs[k];
        else w->oom = true;
    n->attribute = at;
    n->n_attribute = (size_t)m;
    g->node[g->n_node++] = n;
}

void onnx_w_initializer(onnx_writer *w, const char *name, int dtype, int ndim, const int64_t *dims, const void *data,
                        size_t bytes) {
    Onnx__GraphProto *g = w->g;
    Onnx__TensorProto *t = malloc(sizeof *t);
    int64_t *d = malloc((size_t)(ndim ? ndim : 1) * sizeof *d);
    uint8_t *raw = malloc(bytes ? bytes : 1);
    Onnx__TensorProto **inits = grow(g->initializer, &w->cap_init, g->n_initializer, sizeof *inits, &w->oom);
    if (!t || !d || !raw || !inits) {
        free(t), free(d), free(raw);
        w->oom = true;
        return;
    }
    g->initializer = inits;
    onnx__tensor_proto__init(t);
    t->name = onnx_w_strdup(w, name);
    if (ndim) memcpy(d, dims, (size_t)ndim * sizeof *d);
    t->dims = d;
    t->n_dims = (size_t)ndim;
    t->has_data_type = true;
    t->data_type = dtype;
    if (bytes) memcpy(raw, data, bytes); /* little-endian, as ONNX stores raw data (x86, Arm) */
    t->has_raw_data = true;
    t->raw_data.data = raw;
    t->raw_data.len = bytes;
    g->initializer[g->n_initializer++] = t;
}

/* A ValueInfo of a float tensor: dims[0] < 0 is the dynamic batch "N". */
Onnx__ValueInfoProto *onnx_w_value_info(onnx_writer *w, const char *name, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *v = malloc(sizeof *v);
    Onnx__TypeProto *tp = malloc(sizeof *tp);
    Onnx__TypeProto__Tensor *tt = malloc(sizeof *tt);
    Onnx__TensorShapeProto *sh = malloc(sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dd = malloc((size_t)ndim * sizeof *dd);
    if (!v || !tp || !tt || !sh || !dd) {
        free(v), free(tp), free(tt), free(sh), free(dd);
        w->oom = true;
        return NULL;
    }
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    sh->dim = dd;
    for (int k = 0; k < ndim; k++) {
        Onnx__TensorShapeProto__Dimension *d = malloc(sizeof *d);
        if (!d) {
            w->oom = true;
            break;
        }
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[k] < 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = onnx_w_strdup(w, "N");
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[k];
        }
        dd[sh->n_dim++] = d;
    }
    tt->has_elem_type = true;
    tt->elem_type = 1; /* float */
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->name = onnx_w_strdup(w, name);
    v->type = tp;
    return v;
}
