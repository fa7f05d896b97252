/* onnx_write.c — mp_graph_to_onnx and mp_model_export_onnx: the nodes an
 * output depends on, as an ONNX model (opset 17) built with protobuf-c's
 * message structs and packed into one file. Values are named after the
 * mixprec nodes and initializers after the parameters ("conv1.weight"), so
 * that an exported model imports back with the same names. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/output_path.h"
#include "onnx/onnx_write.h"

#define EXPORT_OPSET 17
#define EXPORT_IR_VERSION 8 /* the IR of opset 17 */

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

static char *dup(onnx_writer *w, const char *s) {
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
    a->name = dup(w, name);
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
    n->name = dup(w, name);
    n->op_type = dup(w, op);
    for (int k = 0; k < n_in; k++) in[k] = dup(w, inputs[k]);
    n->input = in;
    n->n_input = (size_t)n_in;
    out[0] = dup(w, output);
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
    t->name = dup(w, name);
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
static Onnx__ValueInfoProto *value_info(onnx_writer *w, const char *name, int ndim, const int64_t *dims) {
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
            d->dim_param = dup(w, "N");
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
    v->name = dup(w, name);
    v->type = tp;
    return v;
}

static mp_status write_file(const char *path, const Onnx__ModelProto *m) {
    const size_t n = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return mp_error(MP_ERR_NOMEM, "%s: out of memory packing %zu bytes", path, n);
    onnx__model_proto__pack(m, buf);
    FILE *f = NULL;
    mp_status s = mp_output_open(path, NULL, false, &f);
    if (s == MP_OK && fwrite(buf, 1, n, f) != n) s = mp_error(MP_ERR_IO, "%s: write failed", path);
    if (f) {
        mp_status c = mp_output_close(f, path, NULL);
        if (s == MP_OK) s = c;
    }
    free(buf);
    return s;
}

static mp_status check_args(const mp_graph *g, mp_node input, mp_node output, const char *path) {
    if (!g || !path) return mp_error(MP_ERR_INVALID_ARG, "ONNX export: graph and path are required");
    if (input < 0 || input >= g->n_nodes || g->nodes[input].desc.kind != MP_OP_INPUT)
        return mp_error(MP_ERR_INVALID_ARG, "%s: node %d is not an image input of the graph", path, input);
    if (output < 0 || output >= g->n_nodes)
        return mp_error(MP_ERR_INVALID_ARG, "%s: node %d is not a node of the graph", path, output);
    if (!g->params_initialized && g->n_params > 0)
        return mp_error(MP_ERR_INVALID_ARG, "%s: the graph's parameters were never initialized or loaded", path);
    return MP_OK;
}

mp_status mp_graph_to_onnx(const mp_graph *g, mp_node input, mp_node output, const char *path,
                           const mp_onnx_export_opts *o) {
    MP_TRY(check_args(g, input, output, path));
    const mp_onnx_export_opts opts = o ? *o : (mp_onnx_export_opts){0};
    if (opts.batch < 0) return mp_error(MP_ERR_INVALID_ARG, "%s: batch %d", path, opts.batch);
    /* the nodes the output depends on */
    bool *need = calloc((size_t)g->n_nodes, sizeof *need);
    if (!need) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    need[output] = true;
    for (int i = output; i >= 0; i--)
        if (need[i])
            for (int k = 0; k < g->nodes[i].n_in; k++) need[g->nodes[i].in[k]] = true;
    mp_status s = MP_OK;
    if (!need[input])
        s = mp_error(MP_ERR_INVALID_ARG, "%s: '%s' does not depend on the input '%s'", path, g->nodes[output].name,
                     g->nodes[input].name);
    for (int i = 0; s == MP_OK && i <= output; i++)
        if (need[i] && i != input && g->nodes[i].desc.kind == MP_OP_INPUT)
            s = mp_error(MP_ERR_UNSUPPORTED, "%s: '%s' also depends on the input '%s'; export a graph of one input",
                         path, g->nodes[output].name, g->nodes[i].name);

    Onnx__ModelProto *m = malloc(sizeof *m);
    Onnx__GraphProto *gp = malloc(sizeof *gp);
    Onnx__OperatorSetIdProto *op = malloc(sizeof *op);
    Onnx__OperatorSetIdProto **ops = malloc(sizeof *ops);
    Onnx__ValueInfoProto **ins = malloc(sizeof *ins), **outs = malloc(sizeof *outs);
    if (!m || !gp || !op || !ops || !ins || !outs) {
        free(m), free(gp), free(op), free(ops), free(ins), free(outs), free(need);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    }
    onnx__model_proto__init(m);
    onnx__graph_proto__init(gp);
    onnx__operator_set_id_proto__init(op);
    onnx_writer w = {.g = gp, .fp16 = opts.fp16_weights};
    m->has_ir_version = true;
    m->ir_version = EXPORT_IR_VERSION;
    m->producer_name = dup(&w, "mixprec");
    m->producer_version = dup(&w, MP_VERSION_STRING);
    op->domain = dup(&w, "");
    op->has_version = true;
    op->version = EXPORT_OPSET;
    ops[0] = op;
    m->opset_import = ops;
    m->n_opset_import = 1;
    m->graph = gp;
    gp->name = dup(&w, "mixprec");
    gp->input = ins;
    gp->output = outs;

    const int64_t batch = opts.batch > 0 ? opts.batch : -1;
    const mp_shape *is = &g->nodes[input].sample_shape, *os = &g->nodes[output].sample_shape;
    int64_t dims[MP_MAX_DIMS] = {batch};
    for (int k = 1; k < is->ndim; k++) dims[k] = is->dims[k];
    ins[0] = value_info(&w, g->nodes[input].name, is->ndim, dims);
    gp->n_input = ins[0] ? 1 : 0;
    for (int k = 1; k < os->ndim; k++) dims[k] = os->dims[k];
    outs[0] = value_info(&w, g->nodes[output].name, os->ndim, dims);
    gp->n_output = outs[0] ? 1 : 0;

    if (s == MP_OK) s = onnx_w_normalization(m, opts.norm_channels, opts.norm_mean, opts.norm_std, path);
    for (int i = 0; s == MP_OK && i <= output && !w.oom; i++)
        if (need[i] && i != input) s = onnx_w_op(&w, g, i);
    if (s == MP_OK && w.oom) s = mp_error(MP_ERR_NOMEM, "%s: out of memory building the model", path);
    if (s == MP_OK) s = write_file(path, m);
    if (s != MP_OK && s != MP_ERR_IO) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", mp_last_error());
        if (strncmp(msg, path, strlen(path))) s = mp_error(s, "%s: %s", path, msg);
    }
    onnx__model_proto__free_unpacked(m, NULL);
    free(need);
    return s;
}

mp_status mp_model_export_onnx(const mp_model *m, const char *path, const mp_onnx_export_opts *o) {
    if (!m || !m->g) return mp_error(MP_ERR_INVALID_ARG, "%s: no model to export", path ? path : "ONNX export");
    return mp_graph_to_onnx(m->g, m->input, m->logits, path, o);
}
