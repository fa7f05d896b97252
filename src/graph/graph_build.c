/* graph_build.c — the public constructors (mp_conv2d, mp_relu, ...): apply
 * option defaults, then add the node. Shape checks happen in each op's infer,
 * which runs at once, so a bad model fails where it is built. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

static mp_node source(mp_graph *g, mp_op_kind kind, const char *name, mp_shape s) {
    if (!g) return -1;
    if (g->status != MP_OK) return -1;
    for (int i = 1; i < s.ndim; i++)
        if (s.dims[i] <= 0 || s.dims[i] > (1 << 20))
            return mp_graph_fail(g, mp_error(MP_ERR_SHAPE, "input '%s': dimension %d is %d (must be 1..%d)",
                                             name ? name : "?", i, s.dims[i], 1 << 20));
    const int64_t per = mp_shape_sample_numel(&s); /* at most 2^60: no overflow */
    if (per > MP_SAMPLE_NUMEL_MAX)
        return mp_graph_fail(g, mp_error(MP_ERR_SHAPE, "input '%s': %lld elements per sample, more than the limit %d",
                                         name ? name : "?", (long long)per, MP_SAMPLE_NUMEL_MAX));
    mp_op_attr a;
    memset(&a, 0, sizeof a);
    a.reshape = s;
    return mp_graph_add(g, kind, name, &a, NULL, 0);
}

mp_node mp_graph_input(mp_graph *g, const char *name, int c, int h, int w) {
    return source(g, MP_OP_INPUT, name, mp_shape4(1, c, h, w));
}

mp_node mp_graph_labels(mp_graph *g, const char *name) {
    mp_node id = source(g, MP_OP_LABELS, name, mp_shape1(1));
    return id;
}

mp_node mp_graph_targets(mp_graph *g, const char *name, int features) {
    return source(g, MP_OP_TARGETS, name, mp_shape2(1, features));
}

static mp_conv_opts conv_defaults(mp_conv_opts o) {
    if (o.stride == 0) o.stride = 1;
    if (o.dilation == 0) o.dilation = 1;
    if (o.groups == 0) o.groups = 1;
    return o;
}

mp_node mp_conv2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o) {
    mp_op_attr a = {.conv = conv_defaults(o)};
    return mp_graph_add(g, MP_OP_CONV2D, name, &a, &x, 1);
}

mp_node mp_conv_transpose2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o) {
    mp_op_attr a = {.conv = conv_defaults(o)};
    return mp_graph_add(g, MP_OP_CONV_TRANSPOSE2D, name, &a, &x, 1);
}

mp_node mp_batchnorm2d(mp_graph *g, const char *name, mp_node x, mp_batchnorm_opts o) {
    if (o.momentum == 0) o.momentum = 0.1f;
    if (o.eps == 0) o.eps = 1e-5f;
    mp_op_attr a = {.bn = o};
    return mp_graph_add(g, MP_OP_BATCHNORM2D, name, &a, &x, 1);
}

mp_node mp_maxpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o) {
    if (o.stride == 0) o.stride = o.kernel;
    mp_op_attr a = {.pool = o};
    return mp_graph_add(g, MP_OP_MAXPOOL2D, name, &a, &x, 1);
}

mp_node mp_avgpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o) {
    if (o.stride == 0) o.stride = o.kernel;
    mp_op_attr a = {.pool = o};
    return mp_graph_add(g, MP_OP_AVGPOOL2D, name, &a, &x, 1);
}

mp_node mp_global_avgpool(mp_graph *g, const char *name, mp_node x) {
    return mp_graph_add(g, MP_OP_GLOBAL_AVGPOOL, name, NULL, &x, 1);
}

mp_node mp_linear(mp_graph *g, const char *name, mp_node x, mp_linear_opts o) {
    mp_op_attr a = {.linear = o};
    return mp_graph_add(g, MP_OP_LINEAR, name, &a, &x, 1);
}

mp_node mp_relu(mp_graph *g, const char *name, mp_node x) {
    return mp_graph_add(g, MP_OP_RELU, name, NULL, &x, 1);
}

mp_node mp_leaky_relu(mp_graph *g, const char *name, mp_node x, float slope) {
    mp_op_attr a = {.slope = slope};
    return mp_graph_add(g, MP_OP_LEAKY_RELU, name, &a, &x, 1);
}

mp_node mp_tanh(mp_graph *g, const char *name, mp_node x) {
    return mp_graph_add(g, MP_OP_TANH, name, NULL, &x, 1);
}

mp_node mp_sigmoid(mp_graph *g, const char *name, mp_node x) {
    return mp_graph_add(g, MP_OP_SIGMOID, name, NULL, &x, 1);
}

mp_node mp_add(mp_graph *g, const char *name, mp_node a, mp_node b) {
    mp_node in[2] = {a, b};
    return mp_graph_add(g, MP_OP_ADD, name, NULL, in, 2);
}

mp_node mp_mul(mp_graph *g, const char *name, mp_node a, mp_node b) {
    mp_node in[2] = {a, b};
    return mp_graph_add(g, MP_OP_MUL, name, NULL, in, 2);
}

mp_node mp_concat(mp_graph *g, const char *name, const mp_node *xs, int n) {
    return mp_graph_add(g, MP_OP_CONCAT, name, NULL, xs, n);
}

mp_node mp_reshape(mp_graph *g, const char *name, mp_node x, int c, int h, int w) {
    mp_op_attr a;
    memset(&a, 0, sizeof a);
    a.reshape = (h == 0 && w == 0) ? mp_shape2(1, c) : mp_shape4(1, c, h, w);
    return mp_graph_add(g, MP_OP_RESHAPE, name, &a, &x, 1);
}

mp_node mp_flatten(mp_graph *g, const char *name, mp_node x) {
    if (!g || x < 0 || x >= g->n_nodes) return mp_graph_add(g, MP_OP_RESHAPE, name, NULL, &x, 1);
    if (g->status != MP_OK) return -1;
    const mp_shape *s = &g->nodes[x].sample_shape;
    int64_t f = 1; /* per-sample dims are ints: the product of three fits in int64 only checked */
    for (int i = 1; i < s->ndim; i++) {
        f *= s->dims[i];
        if (f > MP_SAMPLE_NUMEL_MAX) {
            char sh[64];
            return mp_graph_fail(g, mp_error(MP_ERR_SHAPE, "flatten '%s': input '%s' %s has more than %d elements per "
                                             "sample, the limit",
                                             name ? name : "?", g->nodes[x].name, mp_shape_str(s, sh, sizeof sh),
                                             MP_SAMPLE_NUMEL_MAX));
        }
    }
    return mp_reshape(g, name, x, (int)f, 0, 0);
}

mp_node mp_dropout(mp_graph *g, const char *name, mp_node x, float p) {
    mp_op_attr a = {.p = p};
    return mp_graph_add(g, MP_OP_DROPOUT, name, &a, &x, 1);
}

mp_node mp_softmax_cross_entropy(mp_graph *g, const char *name, mp_node logits, mp_node labels) {
    mp_node in[2] = {logits, labels};
    return mp_graph_add(g, MP_OP_SOFTMAX_CE, name, NULL, in, 2);
}

mp_node mp_bce_with_logits(mp_graph *g, const char *name, mp_node logits, mp_node targets) {
    mp_node in[2] = {logits, targets};
    return mp_graph_add(g, MP_OP_BCE_LOGITS, name, NULL, in, 2);
}
