/* onnx_write_ops.c — the exporter's op table: the ONNX node(s) for each
 * mixprec op of an inference graph, and its parameters as initializers (f32,
 * or f16 each widened by a Cast node). BatchNorm is written in inference form
 * with the running statistics; dropout is an identity at inference. */
#include "onnx/onnx_write_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameter p as an initializer (fp16: plus its Cast); *value receives the
 * name ops read it by: the parameter's name, or its Cast's output, made
 * unique against the graph's node names and the other added names. */
static mp_status write_param(onnx_writer *w, const mp_gparam *p, char value[2 * MP_NAME_MAX + 8]) {
    value[0] = '\0';
    int64_t dims[MP_MAX_DIMS];
    for (int d = 0; d < p->spec.shape.ndim; d++) dims[d] = p->spec.shape.dims[d];
    const size_t n = (size_t)mp_shape_numel(&p->spec.shape);
    if (!w->fp16) {
        const char *name = onnx_w_unique(w, p->name);
        if (!name) return MP_OK; /* oom, reported once by the caller */
        onnx_w_initializer(w, name, ONNX_T_FLOAT, p->spec.shape.ndim, dims, p->data, n * sizeof(float));
        snprintf(value, 2 * MP_NAME_MAX + 8, "%s", name);
        return MP_OK;
    }
    mp_f16 *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return mp_error(MP_ERR_NOMEM, "out of memory for %s", p->name);
    for (size_t e = 0; e < n; e++)
        if (fabsf(p->data[e]) > 65504.0f) {
            free(h);
            return mp_error(MP_ERR_UNSUPPORTED, "parameter %s holds %g, beyond fp16's range: export fp32 weights",
                            p->name, (double)p->data[e]);
        }
    mp_convert_f32_to_f16(p->data, h, n);
    char f16base[2 * MP_NAME_MAX + 8];
    snprintf(f16base, sizeof f16base, "%s.f16", p->name);
    const char *f16name = onnx_w_unique(w, f16base), *cast = onnx_w_unique(w, p->name);
    if (f16name && cast) onnx_w_initializer(w, f16name, ONNX_T_FLOAT16, p->spec.shape.ndim, dims, h, n * sizeof *h);
    free(h);
    if (!f16name || !cast) return MP_OK;
    snprintf(value, 2 * MP_NAME_MAX + 8, "%s", cast);
    const char *in[1] = {f16name};
    Onnx__AttributeProto *to[1] = {onnx_w_attr_int(w, "to", ONNX_T_FLOAT)};
    onnx_w_node(w, "Cast", cast, in, 1, cast, to, 1);
    return MP_OK;
}

/* The value node i reads its parameter k by, the parameter written the first
 * time a node reads it: parameters nodes share (mp_graph_share_params) are
 * written once. */
static mp_status param(onnx_writer *w, const mp_graph *g, int i, int k, char value[2 * MP_NAME_MAX + 8]) {
    const mp_gnode *nd = &g->nodes[i];
    if (k >= nd->n_params) return mp_error(MP_ERR_INTERNAL, "%s: no parameter %d", nd->name, k);
    const int idx = nd->first_param + k;
    if (!w->param_value[idx]) {
        MP_TRY(write_param(w, &g->params[idx], value));
        if (w->oom) return MP_OK; /* reported once by the caller */
        w->param_value[idx] = onnx_w_strdup(w, value);
    }
    snprintf(value, 2 * MP_NAME_MAX + 8, "%s", w->param_value[idx] ? w->param_value[idx] : "");
    return MP_OK;
}

static const char *in_name(const mp_graph *g, int i, int k) { return g->nodes[g->nodes[i].in[k]].name; }

static int in_ndim(const mp_graph *g, int i, int k) { return g->nodes[g->nodes[i].in[k]].sample_shape.ndim; }

static void pair(int64_t v, int64_t out[2]) { out[0] = out[1] = v; }

static mp_status write_conv(onnx_writer *w, const mp_graph *g, int i, bool transposed) {
    const mp_gnode *nd = &g->nodes[i];
    const mp_conv_opts *o = &nd->desc.attr.conv;
    char wn[2 * MP_NAME_MAX + 8], bn[2 * MP_NAME_MAX + 8];
    MP_TRY(param(w, g, i, 0, wn));
    if (o->bias) MP_TRY(param(w, g, i, 1, bn));
    const char *in[3] = {in_name(g, i, 0), wn, bn};
    int64_t k[2], s[2], d[2], op[2], pads[4] = {o->padding, o->padding, o->padding, o->padding};
    pair(o->kernel, k), pair(o->stride, s), pair(o->dilation, d), pair(o->output_padding, op);
    Onnx__AttributeProto *a[6] = {onnx_w_attr_ints(w, "kernel_shape", k, 2), onnx_w_attr_ints(w, "strides", s, 2),
                                  onnx_w_attr_ints(w, "pads", pads, 4), onnx_w_attr_ints(w, "dilations", d, 2),
                                  onnx_w_attr_int(w, "group", o->groups),
                                  transposed ? onnx_w_attr_ints(w, "output_padding", op, 2) : NULL};
    onnx_w_node(w, transposed ? "ConvTranspose" : "Conv", nd->name, in, o->bias ? 3 : 2, nd->name, a,
                transposed ? 6 : 5);
    return MP_OK;
}

static mp_status write_batchnorm(onnx_writer *w, const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    char p[4][2 * MP_NAME_MAX + 8];
    for (int k = 0; k < 4; k++) MP_TRY(param(w, g, i, k, p[k]));
    const char *in[5] = {in_name(g, i, 0), p[0], p[1], p[2], p[3]};
    /* ONNX's momentum weighs the running statistics; mixprec's the batch */
    Onnx__AttributeProto *a[2] = {onnx_w_attr_float(w, "epsilon", nd->desc.attr.bn.eps),
                                  onnx_w_attr_float(w, "momentum", 1 - nd->desc.attr.bn.momentum)};
    onnx_w_node(w, "BatchNormalization", nd->name, in, 5, nd->name, a, 2);
    return MP_OK;
}

static mp_status write_pool(onnx_writer *w, const mp_graph *g, int i, bool max) {
    const mp_gnode *nd = &g->nodes[i];
    const mp_pool_opts *o = &nd->desc.attr.pool;
    const int stride = o->stride ? o->stride : o->kernel;
    int64_t k[2], s[2], pads[4] = {o->padding, o->padding, o->padding, o->padding};
    pair(o->kernel, k), pair(stride, s);
    const char *in[1] = {in_name(g, i, 0)};
    Onnx__AttributeProto *a[4] = {onnx_w_attr_ints(w, "kernel_shape", k, 2), onnx_w_attr_ints(w, "strides", s, 2),
                                  onnx_w_attr_ints(w, "pads", pads, 4),
                                  max ? NULL : onnx_w_attr_int(w, "count_include_pad", 1)};
    onnx_w_node(w, max ? "MaxPool" : "AveragePool", nd->name, in, 1, nd->name, a, max ? 3 : 4);
    return MP_OK;
}

/* mixprec's (N, C) output of global pooling: a GlobalAveragePool named
 * after the node, then a Flatten writing the node's value, which the
 * importer folds into the pool: the node keeps its name through an export
 * and import. */
static mp_status write_global_avgpool(onnx_writer *w, const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    char base[MP_NAME_MAX + 8];
    snprintf(base, sizeof base, "%s_pool", nd->name);
    const char *pooled = onnx_w_unique(w, base);
    snprintf(base, sizeof base, "%s_flat", nd->name);
    const char *flat = onnx_w_unique(w, base);
    if (!pooled || !flat) return MP_OK; /* oom, reported once by the caller */
    const char *in[1] = {in_name(g, i, 0)}, *in2[1] = {pooled};
    onnx_w_node(w, "GlobalAveragePool", nd->name, in, 1, pooled, NULL, 0);
    Onnx__AttributeProto *a[1] = {onnx_w_attr_int(w, "axis", 1)};
    onnx_w_node(w, "Flatten", flat, in2, 1, nd->name, a, 1);
    return MP_OK;
}

static mp_status write_linear(onnx_writer *w, const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    char wn[2 * MP_NAME_MAX + 8], bn[2 * MP_NAME_MAX + 8];
    MP_TRY(param(w, g, i, 0, wn));
    if (nd->desc.attr.linear.bias) MP_TRY(param(w, g, i, 1, bn));
    const char *in[3] = {in_name(g, i, 0), wn, bn};
    Onnx__AttributeProto *a[1] = {onnx_w_attr_int(w, "transB", 1)};
    onnx_w_node(w, "Gemm", nd->name, in, nd->desc.attr.linear.bias ? 3 : 2, nd->name, a, 1);
    return MP_OK;
}

/* A per-sample reshape: Flatten to (N, F) when the target is 2-D, else a
 * Reshape to (0 = the batch, dims...) with the shape as an initializer. */
static mp_status write_reshape(onnx_writer *w, const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    const mp_shape *t = &nd->sample_shape;
    const char *x = in_name(g, i, 0);
    if (t->ndim == 2 && in_ndim(g, i, 0) > 2) {
        const char *in[1] = {x};
        Onnx__AttributeProto *a[1] = {onnx_w_attr_int(w, "axis", 1)};
        onnx_w_node(w, "Flatten", nd->name, in, 1, nd->name, a, 1);
        return MP_OK;
    }
    char base[MP_NAME_MAX + 8];
    snprintf(base, sizeof base, "%s.shape", nd->name);
    const char *shape = onnx_w_unique(w, base);
    if (!shape) return MP_OK; /* oom, reported once by the caller */
    int64_t dims[MP_MAX_DIMS] = {0}, n = t->ndim;
    for (int k = 1; k < t->ndim; k++) dims[k] = t->dims[k];
    onnx_w_initializer(w, shape, ONNX_T_INT64, 1, &n, dims, (size_t)n * sizeof *dims);
    const char *in[2] = {x, shape};
    onnx_w_node(w, "Reshape", nd->name, in, 2, nd->name, NULL, 0);
    return MP_OK;
}

static mp_status write_dropout(onnx_writer *w, const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    char base[MP_NAME_MAX + 8];
    snprintf(base, sizeof base, "%s.ratio", nd->name);
    const char *ratio = onnx_w_unique(w, base);
    if (!ratio) return MP_OK; /* oom, reported once by the caller */
    const float p = nd->desc.attr.p;
    onnx_w_initializer(w, ratio, ONNX_T_FLOAT, 0, NULL, &p, sizeof p);
    const char *in[2] = {in_name(g, i, 0), ratio};
    onnx_w_node(w, "Dropout", nd->name, in, 2, nd->name, NULL, 0);
    return MP_OK;
}

static mp_status write_plain(onnx_writer *w, const mp_graph *g, int i, const char *op) {
    const mp_gnode *nd = &g->nodes[i];
    const char *in[MP_MAX_INPUTS];
    for (int k = 0; k < nd->n_in; k++) in[k] = in_name(g, i, k);
    Onnx__AttributeProto *a[1] = {NULL};
    int na = 0;
    if (nd->desc.kind == MP_OP_LEAKY_RELU) a[na++] = onnx_w_attr_float(w, "alpha", nd->desc.attr.slope);
    if (nd->desc.kind == MP_OP_CONCAT) a[na++] = onnx_w_attr_int(w, "axis", 1);
    onnx_w_node(w, op, nd->name, in, nd->n_in, nd->name, a, na);
    return MP_OK;
}

mp_status onnx_w_op(onnx_writer *w, const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    switch (nd->desc.kind) {
    case MP_OP_CONV2D: return write_conv(w, g, i, false);
    case MP_OP_CONV_TRANSPOSE2D: return write_conv(w, g, i, true);
    case MP_OP_BATCHNORM2D: return write_batchnorm(w, g, i);
    case MP_OP_MAXPOOL2D: return write_pool(w, g, i, true);
    case MP_OP_AVGPOOL2D: return write_pool(w, g, i, false);
    case MP_OP_GLOBAL_AVGPOOL: return write_global_avgpool(w, g, i);
    case MP_OP_LINEAR: return write_linear(w, g, i);
    case MP_OP_RESHAPE: return write_reshape(w, g, i);
    case MP_OP_DROPOUT: return write_dropout(w, g, i);
    case MP_OP_RELU: return write_plain(w, g, i, "Relu");
    case MP_OP_LEAKY_RELU: return write_plain(w, g, i, "LeakyRelu");
    case MP_OP_TANH: return write_plain(w, g, i, "Tanh");
    case MP_OP_SIGMOID: return write_plain(w, g, i, "Sigmoid");
    case MP_OP_ADD: return write_plain(w, g, i, "Add");
    case MP_OP_MUL: return write_plain(w, g, i, "Mul");
    case MP_OP_CONCAT: return write_plain(w, g, i, "Concat");
    case MP_OP_INPUT:
    case MP_OP_LABELS:
    case MP_OP_TARGETS:
    case MP_OP_SOFTMAX_CE:
    case MP_OP_BCE_LOGITS:
    case MP_OP_COUNT: break;
    }
    return mp_error(MP_ERR_UNSUPPORTED, "node '%s' (%s) has no ONNX inference form (the exported output must not "
                                        "depend on labels, targets or a loss)", nd->name, mp_op_lookup(nd->desc.kind)->name);
}
