/* flops.c — arithmetic of a graph: floating-point operations of the
 * convolutions and dense layers (2 per multiply-add), the usual basis for
 * GFLOP/s figures. Backward costs two such passes (data and weights), except
 * the data gradient of a layer fed directly by the input. */
#include "graph/graph.h"

static double node_macs(const mp_graph *g, int i) {
    const mp_gnode *nd = &g->nodes[i];
    const mp_shape *out = &nd->sample_shape;
    switch (nd->desc.kind) {
    case MP_OP_CONV2D: {
        const mp_conv_opts *c = &nd->desc.attr.conv;
        int cin = g->nodes[nd->in[0]].sample_shape.dims[1];
        return (double)out->dims[1] * out->dims[2] * out->dims[3] * (cin / c->groups) * c->kernel * c->kernel;
    }
    case MP_OP_CONV_TRANSPOSE2D: {
        const mp_conv_opts *c = &nd->desc.attr.conv;
        const mp_shape *in = &g->nodes[nd->in[0]].sample_shape;
        return (double)in->dims[1] * in->dims[2] * in->dims[3] * (out->dims[1] / c->groups) * c->kernel * c->kernel;
    }
    case MP_OP_LINEAR: return (double)g->nodes[nd->in[0]].sample_shape.dims[1] * out->dims[1];
    default: return 0;
    }
}

double mp_graph_flops(const mp_graph *g, int batch, bool training) {
    double total = 0;
    for (int i = 0; g && i < g->n_nodes; i++) {
        double f = 2.0 * node_macs(g, i) * batch;
        if (training) {
            bool from_input = g->nodes[g->nodes[i].in[0]].desc.kind == MP_OP_INPUT;
            total += f * (from_input ? 2 : 3);
        } else {
            total += f;
        }
    }
    return total;
}
