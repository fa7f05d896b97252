/* onnx_import.c — mp_graph_from_onnx and mp_model_from_onnx: read and unpack
 * the file (protobuf-c), check its opset, make the graph input, load the
 * initializers, then walk the nodes in order, folding constants and adding a
 * mixprec node per op (onnx_ops*.c), and finally find the output. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/input_file.h"
#include "onnx/onnx_import.h"

#define MAX_FILE_BYTES ((uint64_t)2 << 30) /* protobuf's own limit */

mp_status onnx_read_model(const char *path, Onnx__ModelProto **out) {
    *out = NULL;
    int fd;
    uint64_t size;
    MP_TRY(mp_input_open(path, &fd, &size));
    if (size > MAX_FILE_BYTES) {
        close(fd);
        return mp_error(MP_ERR_UNSUPPORTED, "%s: %llu bytes; an ONNX file holds at most 2 GiB (keep larger weights "
                                            "as external data, which mixprec does not read)", path,
                        (unsigned long long)size);
    }
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory reading %llu bytes", path, (unsigned long long)size);
    }
    uint64_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (uint64_t)r;
    }
    close(fd);
    if (got != size) {
        free(buf);
        return mp_error(MP_ERR_IO, "%s: read %llu of %llu bytes", path, (unsigned long long)got,
                        (unsigned long long)size);
    }
    *out = onnx__model_proto__unpack(NULL, got, buf);
    free(buf);
    if (!*out)
        return mp_error(MP_ERR_FORMAT, "%s: not an ONNX model (not a valid protobuf ModelProto: another format, or a "
                                       "truncated or corrupt file)", path);
    if (!(*out)->graph) {
        onnx__model_proto__free_unpacked(*out, NULL);
        *out = NULL;
        return mp_error(MP_ERR_FORMAT, "%s: not an ONNX model (no graph; an empty, truncated or other protobuf file)",
                        path);
    }
    return MP_OK;
}

static mp_status check_opset(onnx_ctx *c, const Onnx__ModelProto *m) {
    c->opset = -1;
    for (size_t k = 0; k < m->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[k];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) c->opset = o->has_version ? (int)o->version : 0;
    }
    if (c->opset < 0) return mp_error(MP_ERR_FORMAT, "%s: the model imports no opset of the default ONNX domain", c->path);
    if (c->opset < 13 || c->opset > 21)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: opset %d is not supported (mixprec imports opsets 13 to 21; convert "
                                            "the model with onnx.version_converter)", c->path, c->opset);
    return MP_OK;
}

static bool is_initializer(const Onnx__GraphProto *g, const char *name) {
    for (size_t k = 0; k < g->n_initializer; k++)
        if (g->initializer[k]->name && !strcmp(g->initializer[k]->name, name)) return true;
    return false;
}

/* The graph's one input that is not an initializer: an image input (N, C, H,
 * W) or features (N, F), with the options filling dynamic dims. */
static mp_status make_input(onnx_ctx *c, mp_node *input) {
    const Onnx__GraphProto *g = c->graph;
    const Onnx__ValueInfoProto *in = NULL;
    for (size_t k = 0; k < g->n_input; k++) {
        if (!g->input[k]->name || is_initializer(g, g->input[k]->name)) continue;
        if (in)
            return mp_error(MP_ERR_UNSUPPORTED, "%s: the model has several inputs ('%s', '%s'); mixprec imports "
                                                "models with one image input", c->path, in->name, g->input[k]->name);
        in = g->input[k];
    }
    if (!in) return mp_error(MP_ERR_FORMAT, "%s: the graph has no input", c->path);
    /* tensor_type shares a oneof with the sequence, map, optional and sparse
     * types: read it only when the case says that is what the union holds */
    const Onnx__TypeProto__Tensor *t =
        in->type && in->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? in->type->tensor_type : NULL;
    if (!t) return mp_error(MP_ERR_UNSUPPORTED, "%s: input '%s' is not a tensor", c->path, in->name);
    if (t->has_elem_type && t->elem_type != 1)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: input '%s' has element type %d; mixprec feeds float inputs", c->path,
                        in->name, t->elem_type);
    const size_t rank = t->shape ? t->shape->n_dim : 0;
    if (rank != 4 && rank != 2)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: input '%s' has rank %zu; mixprec feeds (N, C, H, W) images or (N, F) "
                                            "features", c->path, in->name, rank);
    int64_t dims[4] = {ONNX_BATCH, 1, 1, 1};
    const int given[4] = {0, c->o.c, c->o.h, c->o.w};
    static const char *const dim_names[4] = {"N", "C", "H", "W"};
    c->input_batch = -1;
    for (size_t k = 0; k < rank; k++) {
        const Onnx__TensorShapeProto__Dimension *d = t->shape->dim[k];
        const bool fixed = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value > 0;
        if (k == 0) {
            c->input_batch = fixed ? d->dim_value : -1;
            continue;
        }
        if (given[k] > 0 && (c->o.override_shape || !fixed)) dims[k] = given[k];
        else if (fixed) dims[k] = d->dim_value;
        else
            return mp_error(MP_ERR_SHAPE, "%s: input '%s' has a dynamic dimension %s ('%s'); give the input shape "
                                          "(--input-shape CxHxW, or mp_onnx_opts c, h, w)", c->path, in->name,
                            dim_names[rank == 2 ? 1 : k],
                            d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param
                                ? d->dim_param : "?");
        if (dims[k] > (1 << 20))
            return mp_error(MP_ERR_SHAPE, "%s: input '%s' dimension %zu is %lld", c->path, in->name, k,
                            (long long)dims[k]);
    }
    if (dims[1] * dims[2] * dims[3] > ((int64_t)1 << 28))
        return mp_error(MP_ERR_SHAPE, "%s: input '%s' of %lldx%lldx%lld is too large (at most 2^28 values per sample)",
                        c->path, in->name, (long long)dims[1], (long long)dims[2], (long long)dims[3]);
    char name[MP_NAME_MAX];
    onnx_unique_name(c, in->name, NULL, name);
    *input = mp_graph_input(c->g, name, (int)dims[1], (int)dims[2], (int)dims[3]);
    if (*input < 0)
        return mp_error(mp_graph_status(c->g), "%s: input '%s': %s", c->path, in->name, mp_graph_error(c->g));
    return onnx_new_act(c, in->name, *input, (int)rank, dims);
}

static mp_status load_initializers(onnx_ctx *c) {
    const Onnx__GraphProto *g = c->graph;
    for (size_t k = 0; k < g->n_initializer; k++) {
        const Onnx__TensorProto *t = g->initializer[k];
        if (!t->name || !t->name[0]) return mp_error(MP_ERR_FORMAT, "%s: initializer %zu has no name", c->path, k);
        onnx_value *v;
        MP_TRY(onnx_new(c, t->name, &v));
        v->source = strdup(t->name);
        MP_TRY(onnx_tensor_load(c, t, v));
    }
    return MP_OK;
}

static mp_status import_node(onnx_ctx *c) {
    const Onnx__NodeProto *n = c->node;
    if (!n->op_type || !n->op_type[0]) return onnx_fail(c, MP_ERR_FORMAT, "the node has no op type");
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx"))
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "op %s of domain '%s' is not supported (mixprec imports ops of the "
                                                "default ONNX domain: %s)", n->op_type, n->domain, onnx_op_list());
    if (n->n_output < 1 || !n->output[0][0]) return onnx_fail(c, MP_ERR_FORMAT, "the node has no output");
    /* which of two values would apply is a guess (the ONNX checker refuses it) */
    for (size_t a = 1; a < n->n_attribute; a++)
        for (size_t b = 0; b < a; b++)
            if (n->attribute[a]->name && n->attribute[b]->name && !strcmp(n->attribute[a]->name, n->attribute[b]->name))
                return onnx_fail(c, MP_ERR_FORMAT, "attribute %s appears twice", n->attribute[a]->name);
    if (onnx_foldable(c)) return onnx_fold(c);
    onnx_emit_fn emit = onnx_op_lookup(n->op_type);
    if (!emit)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "unsupported op %s (mixprec imports %s)", n->op_type, onnx_op_list());
    char name[MP_NAME_MAX];
    onnx_node_name(c, name);
    return emit(c, name);
}

/* Nodes the graph's output does not depend on are skipped (marked in
 * c->absorbed): dead branches would cost every step and may hold ops mixprec
 * does not have. */
static void mark_dead(onnx_ctx *c) {
    const Onnx__GraphProto *g = c->graph;
    const char *out = g->n_output ? g->output[0]->name : NULL;
    for (size_t k = g->n_node; k-- > 0;) {
        const Onnx__NodeProto *n = g->node[k];
        bool live = false;
        for (size_t o = 0; !live && o < n->n_output; o++) {
            if (!n->output[o][0]) continue;
            live = out && !strcmp(n->output[o], out);
            for (size_t j = k + 1; !live && j < g->n_node; j++)
                for (size_t i = 0; !live && !c->absorbed[j] && i < g->node[j]->n_input; i++)
                    live = !strcmp(g->node[j]->input[i], n->output[o]);
        }
        c->absorbed[k] = !live;
    }
}

/* The import proper; *out_ndim / out_dims receive the output's ONNX shape. */
static mp_status import(onnx_ctx *c, mp_onnx_info *info, int *out_ndim, int64_t *out_dims) {
    const Onnx__GraphProto *g = c->graph;
    MP_TRY(load_initializers(c));
    mp_node input = -1;
    MP_TRY(make_input(c, &input));
    c->absorbed = calloc(g->n_node ? g->n_node : 1, sizeof *c->absorbed);
    if (!c->absorbed) return mp_error(MP_ERR_NOMEM, "%s: out of memory", c->path);
    mark_dead(c);
    for (size_t k = 0; k < g->n_node; k++) {
        c->node = g->node[k];
        c->node_index = (int)k;
        if (!c->absorbed[k]) MP_TRY(import_node(c));
    }
    c->node = NULL;
    if (g->n_output != 1 || !g->output[0]->name)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: the graph has %zu outputs; mixprec imports models with one output",
                        c->path, g->n_output);
    onnx_value *out = onnx_find(c, g->output[0]->name);
    if (!out) return mp_error(MP_ERR_FORMAT, "%s: no node computes the output '%s'", c->path, g->output[0]->name);
    if (out->kind != ONNX_V_ACT)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: the output '%s' is a constant", c->path, out->name);
    mp_node y;
    MP_TRY(onnx_conform(c, out, &y));
    mp_graph_mark_output(c->g, y);
    *out_ndim = out->ndim;
    memcpy(out_dims, out->dims, sizeof out->dims);
    *info = (mp_onnx_info){.input = input, .output = y, .opset = c->opset, .onnx_nodes = (int)g->n_node,
                           .params = c->params};
    return mp_graph_status(c->g);
}

/* Options the import cannot honour: a prefix too long for node names to
 * keep whole, a negative input dimension. */
static mp_status check_opts(const char *path, const mp_onnx_opts *o) {
    const int dims[3] = {o->c, o->h, o->w};
    static const char *const names[3] = {"c", "h", "w"};
    for (int k = 0; k < 3; k++)
        if (dims[k] < 0)
            return mp_error(MP_ERR_INVALID_ARG, "%s: mp_onnx_opts.%s = %d is negative (0: the model's own)", path,
                            names[k], dims[k]);
    const char *p = o->prefix ? o->prefix : "";
    if (strlen(p) > ONNX_PREFIX_MAX)
        return mp_error(MP_ERR_INVALID_ARG, "%s: mp_onnx_opts.prefix '%s' is longer than %d characters", path, p,
                        ONNX_PREFIX_MAX);
    return MP_OK;
}

/* The options' prefix as names take it into c->prefix (c->o.prefix then
 * points there): a character outside [A-Za-z0-9_] becomes '_'. */
static void take_prefix(onnx_ctx *c) {
    const char *p = c->o.prefix ? c->o.prefix : "";
    size_t k = 0;
    for (; p[k] && k < ONNX_PREFIX_MAX; k++) {
        const char ch = p[k];
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
        c->prefix[k] = ok ? ch : '_';
    }
    c->prefix[k] = '\0';
    c->o.prefix = c->prefix;
}

static mp_status from_onnx(mp_graph *g, const char *path, const mp_onnx_opts *o, mp_onnx_info *info, int *out_ndim,
                           int64_t *out_dims) {
    memset(info, 0, sizeof *info);
    info->input = info->output = -1;
    if (!g || !path) return mp_error(MP_ERR_INVALID_ARG, "mp_graph_from_onnx: graph and path are required");
    if (mp_graph_status(g) != MP_OK)
        return mp_error(MP_ERR_INVALID_ARG, "%s: the graph already failed: %s", path, mp_graph_error(g));
    onnx_ctx c = {.path = path, .g = g, .input_batch = -1};
    if (o) c.o = *o;
    MP_TRY(check_opts(path, &c.o));
    take_prefix(&c);
    Onnx__ModelProto *m;
    MP_TRY(onnx_read_model(path, &m));
    c.graph = m->graph;
    mp_status s = check_opset(&c, m);
    if (s == MP_OK) s = import(&c, info, out_ndim, out_dims);
    onnx_values_free(&c);
    free(c.absorbed);
    onnx__model_proto__free_unpacked(m, NULL);
    return s;
}

mp_status mp_graph_from_onnx(mp_graph *g, const char *path, const mp_onnx_opts *o, mp_onnx_info *info) {
    mp_onnx_info tmp;
    int nd;
    int64_t dims[ONNX_MAX_DIMS];
    return from_onnx(g, path, o, info ? info : &tmp, &nd, dims);
}

mp_status mp_model_from_onnx(const char *path, const mp_onnx_opts *o, mp_model *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_model_from_onnx: out is NULL");
    memset(out, 0, sizeof *out);
    out->g = mp_graph_create();
    if (!out->g) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path ? path : "?");
    mp_onnx_info info;
    int nd = 0;
    int64_t dims[ONNX_MAX_DIMS];
    mp_status s = from_onnx(out->g, path, o, &info, &nd, dims);
    if (s == MP_OK && nd != 2) {
        char b[96];
        onnx_dims_str(nd, dims, b, sizeof b);
        s = mp_error(MP_ERR_UNSUPPORTED, "%s: the output has shape %s; a classifier's output is its logits (N, K)", path,
                     b);
    }
    if (s == MP_OK) {
        out->input = info.input;
        out->logits = info.output;
        char labels[MP_NAME_MAX], loss[MP_NAME_MAX];
        snprintf(labels, sizeof labels, "labels");
        snprintf(loss, sizeof loss, "loss");
        for (int k = 2; mp_graph_find(out->g, labels) >= 0; k++) snprintf(labels, sizeof labels, "labels_%d", k);
        for (int k = 2; mp_graph_find(out->g, loss) >= 0; k++) snprintf(loss, sizeof loss, "loss_%d", k);
        out->labels = mp_graph_labels(out->g, labels);
        out->loss = mp_softmax_cross_entropy(out->g, loss, out->logits, out->labels);
        mp_graph_mark_output(out->g, out->loss);
        s = mp_graph_status(out->g);
    }
    if (s != MP_OK) mp_model_free(out);
    return s;
}
