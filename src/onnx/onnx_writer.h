/* onnx_writer.h — the exporter's message builders (onnx_writer.c), which
 * the exporter (onnx_write.c) and its op table (onnx_write_ops.h) share.
 * Every message is malloc'ed, so the whole model is released with
 * onnx__model_proto__free_unpacked; a failed allocation sets oom, checked
 * once at the end. */
#ifndef MP_ONNX_ONNX_WRITER_H
#define MP_ONNX_ONNX_WRITER_H

#include "core/error.h"
#include "graph/graph.h"
#include "onnx.pb-c.h"

typedef struct {
    Onnx__GraphProto *g;
    const mp_graph *graph; /* the graph written: its node names are the values of its nodes' outputs */
    size_t cap_node, cap_init;
    bool oom;
    bool fp16;  /* parameters as fp16 initializers + Cast nodes */
    /* per parameter of the graph written: the value its readers use, once
     * written (parameters shared by several nodes are written once); NULL
     * before */
    char **param_value;
    int n_params;
    char **names; /* the names onnx_w_unique made, in the order made */
    size_t n_names, cap_names;
} onnx_writer;

/* TensorProto data types the exporter writes. */
#define ONNX_T_FLOAT 1
#define ONNX_T_INT64 7
#define ONNX_T_FLOAT16 10

Onnx__AttributeProto *onnx_w_attr_ints(onnx_writer *w, const char *name, const int64_t *v, int n);
Onnx__AttributeProto *onnx_w_attr_int(onnx_writer *w, const char *name, int64_t v);
Onnx__AttributeProto *onnx_w_attr_float(onnx_writer *w, const char *name, float v);
/* A node with one output; takes the attributes. */
void onnx_w_node(onnx_writer *w, const char *op, const char *name, const char *const *inputs, int n_in,
                 const char *output, Onnx__AttributeProto **attrs, int n_attr);
/* An initializer of raw little-endian data. */
void onnx_w_initializer(onnx_writer *w, const char *name, int dtype, int ndim, const int64_t *dims, const void *data,
                        size_t bytes);
/* Frees what the writer holds beside the model (param_value, names). */
void onnx_w_release(onnx_writer *w);
/* A name for a value or node the exporter adds beside the graph's nodes
 * (an initializer, a Cast, a pooled value): base, or base_2, base_3, ...,
 * the first that is neither a node name of the graph nor a name made
 * before. Kept by the writer; NULL when out of memory (oom set). */
const char *onnx_w_unique(onnx_writer *w, const char *base);
/* A copy of s ("" for NULL), or NULL (oom set). */
char *onnx_w_strdup(onnx_writer *w, const char *s);
/* A float tensor's value info of ndim dims (a negative dim: the batch, "N"). */
Onnx__ValueInfoProto *onnx_w_value_info(onnx_writer *w, const char *name, int ndim, const int64_t *dims);

#endif
