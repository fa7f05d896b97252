/* onnx_write.c — mp_graph_to_onnx and mp_model_export_onnx: the nodes an
 * output depends on, as an ONNX model (opset 17) built with protobuf-c's
 * message structs and packed into one file. Values are named after the
 * mixprec nodes and initializers after the parameters ("conv1.weight"), so
 * that an exported model imports back with the same names. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/output_path.h"
#include "onnx/onnx_metadata.h"
#include "onnx/onnx_write_ops.h"
#include "onnx/onnx_writer.h"

#define EXPORT_OPSET 17
#define EXPORT_IR_VERSION 8 /* the IR of opset 17 */

static mp_status write_file(const char *path, const Onnx__ModelProto *m) {
    const size_t n = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return mp_error(MP_ERR_NOMEM, "%s: out of memory packing %zu bytes", path, n);
    onnx__model_proto__pack(m, buf);
    /* a failed write (a full disk) must not leave an existing model truncated */
    const mp_status s = mp_output_write_atomic(path, NULL, buf, n);
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
    onnx_writer w = {.g = gp, .graph = g, .fp16 = opts.fp16_weights, .n_params = g->n_params,
                     .param_value = calloc((size_t)(g->n_params ? g->n_params : 1), sizeof(char *))};
    if (!w.param_value) w.oom = true;
    m->has_ir_version = true;
    m->ir_version = EXPORT_IR_VERSION;
    m->producer_name = onnx_w_strdup(&w, "mixprec");
    m->producer_version = onnx_w_strdup(&w, MP_VERSION_STRING);
    op->domain = onnx_w_strdup(&w, "");
    op->has_version = true;
    op->version = EXPORT_OPSET;
    ops[0] = op;
    m->opset_import = ops;
    m->n_opset_import = 1;
    m->graph = gp;
    gp->name = onnx_w_strdup(&w, "mixprec");
    gp->input = ins;
    gp->output = outs;

    const int64_t batch = opts.batch > 0 ? opts.batch : -1;
    const mp_shape *is = &g->nodes[input].sample_shape, *os = &g->nodes[output].sample_shape;
    int64_t dims[MP_MAX_DIMS] = {batch};
    for (int k = 1; k < is->ndim; k++) dims[k] = is->dims[k];
    ins[0] = onnx_w_value_info(&w, g->nodes[input].name, is->ndim, dims);
    gp->n_input = ins[0] ? 1 : 0;
    for (int k = 1; k < os->ndim; k++) dims[k] = os->dims[k];
    outs[0] = onnx_w_value_info(&w, g->nodes[output].name, os->ndim, dims);
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
    onnx_w_release(&w);
    free(need);
    return s;
}

mp_status mp_model_export_onnx(const mp_model *m, const char *path, const mp_onnx_export_opts *o) {
    if (!m || !m->g) return mp_error(MP_ERR_INVALID_ARG, "%s: no model to export", path ? path : "ONNX export");
    return mp_graph_to_onnx(m->g, m->input, m->logits, path, o);
}
