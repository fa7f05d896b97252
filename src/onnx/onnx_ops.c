/* onnx_ops.c — the importer's op table (ONNX op type -> the emitter that adds
 * the mixprec node) and the output helpers every emitter shares. */
#include <string.h>

#include "onnx/onnx_import.h"

typedef struct {
    const char *op;
    onnx_emit_fn emit;
} onnx_op_entry;

static const onnx_op_entry table[] = {
    {"Conv", onnx_emit_conv},
    {"ConvTranspose", onnx_emit_conv_transpose},
    {"BatchNormalization", onnx_emit_batchnorm},
    {"Relu", onnx_emit_relu},
    {"LeakyRelu", onnx_emit_leaky_relu},
    {"Sigmoid", onnx_emit_sigmoid},
    {"Tanh", onnx_emit_tanh},
    {"MaxPool", onnx_emit_maxpool},
    {"AveragePool", onnx_emit_avgpool},
    {"GlobalAveragePool", onnx_emit_global_avgpool},
    {"Gemm", onnx_emit_gemm},
    {"MatMul", onnx_emit_matmul},
    {"Add", onnx_emit_add},
    {"Mul", onnx_emit_mul},
    {"Concat", onnx_emit_concat},
    {"Flatten", onnx_emit_flatten},
    {"Reshape", onnx_emit_reshape},
    {"Dropout", onnx_emit_dropout},
    {"Identity", onnx_emit_identity},
};

onnx_emit_fn onnx_op_lookup(const char *op) {
    for (size_t k = 0; op && k < sizeof table / sizeof table[0]; k++)
        if (!strcmp(table[k].op, op)) return table[k].emit;
    return NULL;
}

const char *onnx_op_list(void) {
    return "Conv, ConvTranspose, BatchNormalization, Relu, LeakyRelu, Sigmoid, Tanh, MaxPool, AveragePool, "
           "GlobalAveragePool, Gemm, MatMul, Add, Mul, Concat, Flatten, Reshape, Dropout, Identity, and constant "
           "chains (Constant, Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Transpose, arithmetic)";
}

mp_status onnx_output(onnx_ctx *c, mp_node node, int ndim, const int64_t *dims) {
    if (c->node->n_output < 1 || !c->node->output[0][0]) return onnx_fail(c, MP_ERR_FORMAT, "the node has no output");
    MP_TRY(onnx_single_output(c));
    return onnx_new_act(c, c->node->output[0], node, ndim, dims);
}

mp_status onnx_alias(onnx_ctx *c, const onnx_value *v, int ndim, const int64_t *dims) {
    int64_t d[ONNX_MAX_DIMS];
    for (int k = 0; k < ndim; k++) d[k] = dims[k];
    return onnx_output(c, v->node, ndim, d); /* copies first: onnx_output may move the table */
}

mp_status onnx_single_output(onnx_ctx *c) {
    for (size_t k = 1; k < c->node->n_output; k++) {
        int only;
        if (c->node->output[k][0] && onnx_consumers(c, c->node->output[k], &only) > 0)
            return onnx_fail(c, MP_ERR_UNSUPPORTED,
                             "output %zu '%s' is used; mixprec computes only this op's first output", k,
                             c->node->output[k]);
    }
    return MP_OK;
}

mp_status onnx_output_node(onnx_ctx *c, mp_node node) {
    MP_TRY(onnx_built(c, node));
    const mp_shape *s = &c->g->nodes[node].sample_shape;
    int64_t dims[ONNX_MAX_DIMS] = {ONNX_BATCH};
    for (int k = 1; k < s->ndim; k++) dims[k] = s->dims[k];
    return onnx_output(c, node, s->ndim, dims);
}
