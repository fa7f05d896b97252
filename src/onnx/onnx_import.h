/* onnx_import.h — the importer's working state, shared by its files: the
 * values of the ONNX graph as the import walks its nodes (activations, which
 * are mixprec nodes with their ONNX shape, and constants known at import
 * time: initializers and what is folded from them), attribute readers, and
 * the op table. The state lives only during one import; the graph gets
 * nodes and parameters, nothing of the parser. */
#ifndef MP_ONNX_ONNX_IMPORT_H
#define MP_ONNX_ONNX_IMPORT_H

#include "core/error.h"
#include "graph/graph.h"
#include "onnx.pb-c.h"

#define ONNX_MAX_DIMS 8
/* Elements of folded integer constants (shapes) that are not numbers at
 * import time: the batch size, and anything else computed from it. */
#define ONNX_BATCH (INT64_MIN + 1)
#define ONNX_DYN INT64_MIN

typedef enum { ONNX_V_ACT = 1, ONNX_V_CONST } onnx_vkind;

typedef struct {
    char *name;                    /* the ONNX value name */
    onnx_vkind kind;
    int ndim;
    int64_t dims[ONNX_MAX_DIMS];   /* the ONNX shape; for activations dims[0] is ONNX_BATCH */
    mp_node node;                  /* ACT: the mixprec node (its sample shape may differ by 1s, see onnx_conform) */
    bool is_int;                   /* CONST: int64 elements in i, else f32 in f */
    float *f;
    int64_t *i;
    int64_t numel;                 /* CONST */
    char *source;                  /* CONST: the initializer or node it came from (messages, on_param) */
} onnx_value;

/* The longest prefix (mp_onnx_opts.prefix): every node name keeps it whole
 * and still has room for 16 characters of its ONNX name and a suffix. */
#define ONNX_PREFIX_MAX 32

typedef struct {
    const char *path;
    mp_graph *g;
    mp_onnx_opts o;                /* o.prefix: prefix below */
    char prefix[ONNX_PREFIX_MAX + 1]; /* the options' prefix, each character outside [A-Za-z0-9_] made '_' */
    int opset;
    int64_t input_batch;           /* the graph input's static batch size, or -1 */
    const Onnx__GraphProto *graph;
    onnx_value *vals;
    int n_vals, cap_vals;
    bool *absorbed;                /* per ONNX node: folded into an earlier one (a bias Add) or dead */
    const Onnx__NodeProto *node;   /* the node being imported, for messages */
    int node_index;
    int params;                    /* parameter tensors set */
} onnx_ctx;

/* Read and unpack an ONNX file (onnx_import.c); errors name the file. Free
 * with onnx__model_proto__free_unpacked. */
mp_status onnx_read_model(const char *path, Onnx__ModelProto **out);

/* ---- messages (onnx_values.c) ---- */
/* mp_error with "<file>: node '<name>' (<op>, opset N): " before the message. */
mp_status onnx_fail(onnx_ctx *c, mp_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "[N, 3, 32, 32]" */
const char *onnx_dims_str(int ndim, const int64_t *dims, char *buf, size_t n);

/* ---- values (onnx_values.c) ---- */
onnx_value *onnx_find(onnx_ctx *c, const char *name);
/* A new value named name (an error when the name is taken: ONNX values are
 * assigned once). */
mp_status onnx_new(onnx_ctx *c, const char *name, onnx_value **out);
/* Make v a constant of that shape with zeroed elements. */
mp_status onnx_const_alloc(onnx_ctx *c, onnx_value *v, bool is_int, int ndim, const int64_t *dims);
/* A new constant of that shape with zeroed elements. */
mp_status onnx_new_const(onnx_ctx *c, const char *name, bool is_int, int ndim, const int64_t *dims, onnx_value **out);
/* A new activation: mixprec node `node` with the ONNX shape (ndim, dims). */
mp_status onnx_new_act(onnx_ctx *c, const char *name, mp_node node, int ndim, const int64_t *dims);
/* Input k of the current node: NULL (and MP_OK) when it is absent or the
 * empty name; an error when it names no value (a missing initializer). */
mp_status onnx_input(onnx_ctx *c, int k, onnx_value **out);
/* Input k, which must be present and an activation / a constant. */
mp_status onnx_act(onnx_ctx *c, int k, onnx_value **out);
mp_status onnx_const(onnx_ctx *c, int k, onnx_value **out);
/* The mixprec node of activation v with exactly v's ONNX shape (inserting a
 * reshape when the node's sample shape differs, e.g. (C) for (N, C, 1, 1)). */
mp_status onnx_conform(onnx_ctx *c, onnx_value *v, mp_node *out);
/* A reshape node `name` of node x to the per-sample shape dims[1 .. ndim). */
mp_status onnx_reshape_node(onnx_ctx *c, const char *name, mp_node x, int ndim, const int64_t *dims, mp_node *out);
/* A mixprec node name that no node has yet: the options' prefix whole, then
 * base (sanitized, its end kept where too long), suffix, "_N" where taken. */
void onnx_unique_name(onnx_ctx *c, const char *base, const char *suffix, char out[MP_NAME_MAX]);
/* As onnx_unique_name for a node derived from node_name, a name made by it
 * (the prefix not repeated). */
void onnx_derived_name(onnx_ctx *c, const char *node_name, const char *suffix, char out[MP_NAME_MAX]);
/* The current node's mixprec name: the prefix and its ONNX name, else op
 * type + index. */
void onnx_node_name(onnx_ctx *c, char out[MP_NAME_MAX]);
/* Copy constant v (n elements, converted to f32) into parameter
 * "<node>.<param>"; reports it to on_param. */
mp_status onnx_set_param(onnx_ctx *c, const char *node, const char *param, const onnx_value *v, const float *data,
                         int64_t n);
/* How many node inputs and graph outputs read value `name`; *only is the
 * index of the node when exactly one node reads it and no graph output. */
int onnx_consumers(const onnx_ctx *c, const char *name, int *only);
void onnx_values_free(onnx_ctx *c);

/* ---- tensors and attributes (onnx_attr.c) ---- */
/* Load a TensorProto into constant v (already named). */
mp_status onnx_tensor_load(onnx_ctx *c, const Onnx__TensorProto *t, onnx_value *v);
const Onnx__AttributeProto *onnx_attr(const onnx_ctx *c, const char *name);
/* Integer / float / string attribute, or the default when absent; a wrong
 * type is an error naming the attribute. */
mp_status onnx_attr_int(onnx_ctx *c, const char *name, int64_t def, int64_t *out);
mp_status onnx_attr_float(onnx_ctx *c, const char *name, float def, float *out);
mp_status onnx_attr_string(onnx_ctx *c, const char *name, const char *def, const char **out);
/* Integer list attribute: *n = -1 when absent; at most max elements. */
mp_status onnx_attr_ints(onnx_ctx *c, const char *name, int64_t *out, int max, int *n);

/* ---- folding of constants (onnx_fold.c) ---- */
/* Whether the current node is one the folder evaluates (its inputs are
 * all constants, or it is a Shape); then it is folded into constants. */
bool onnx_foldable(onnx_ctx *c);
mp_status onnx_fold(onnx_ctx *c);

/* ---- the op table (onnx_ops.c) ---- */
typedef mp_status (*onnx_emit_fn)(onnx_ctx *c, const char *name);
/* The emitter of op type `op`, or NULL. */
onnx_emit_fn onnx_op_lookup(const char *op);
/* "Conv, ConvTranspose, ..." */
const char *onnx_op_list(void);

/* Emitters (onnx_ops_conv.c: convolutions, pools, batch norm). */
mp_status onnx_emit_conv(onnx_ctx *c, const char *name);
mp_status onnx_emit_conv_transpose(onnx_ctx *c, const char *name);
mp_status onnx_emit_batchnorm(onnx_ctx *c, const char *name);
mp_status onnx_emit_maxpool(onnx_ctx *c, const char *name);
mp_status onnx_emit_avgpool(onnx_ctx *c, const char *name);
mp_status onnx_emit_global_avgpool(onnx_ctx *c, const char *name);
/* (onnx_ops_dense.c: Gemm, MatMul, Flatten, Reshape) */
mp_status onnx_emit_gemm(onnx_ctx *c, const char *name);
mp_status onnx_emit_matmul(onnx_ctx *c, const char *name);
mp_status onnx_emit_flatten(onnx_ctx *c, const char *name);
mp_status onnx_emit_reshape(onnx_ctx *c, const char *name);
/* (onnx_ops_elementwise.c: activations, Add, Mul, Concat, Dropout, Identity) */
mp_status onnx_emit_relu(onnx_ctx *c, const char *name);
mp_status onnx_emit_leaky_relu(onnx_ctx *c, const char *name);
mp_status onnx_emit_sigmoid(onnx_ctx *c, const char *name);
mp_status onnx_emit_tanh(onnx_ctx *c, const char *name);
mp_status onnx_emit_add(onnx_ctx *c, const char *name);
mp_status onnx_emit_mul(onnx_ctx *c, const char *name);
mp_status onnx_emit_concat(onnx_ctx *c, const char *name);
mp_status onnx_emit_dropout(onnx_ctx *c, const char *name);
mp_status onnx_emit_identity(onnx_ctx *c, const char *name);

/* ---- shared helpers of the emitters ---- */
/* The current node's single output becomes activation `node` of ONNX shape (ndim, dims). */
mp_status onnx_output(onnx_ctx *c, mp_node node, int ndim, const int64_t *dims);
/* The current node's output is mixprec node `node` (checked: the graph's
 * error when building it failed), with the node's shape as its ONNX shape. */
mp_status onnx_output_node(onnx_ctx *c, mp_node node);
/* The output of a node that creates none: the same mixprec node as `v`, with a new ONNX shape. */
mp_status onnx_alias(onnx_ctx *c, const onnx_value *v, int ndim, const int64_t *dims);
/* Only output 0 may be used (a mask or indices output read by anything is an error). */
mp_status onnx_single_output(onnx_ctx *c);
/* The graph's status as the current node's error when building failed. */
mp_status onnx_built(onnx_ctx *c, mp_node n);

#endif
