/* model_parts.c — what the zoo's builders share: convolution + batch norm
 * (+ ReLU) blocks, the labels and loss every classifier ends with, and
 * freeing a built model. */
#include <stdio.h>

#include "models/models.h"

void mp_model_free(mp_model *m) {
    if (!m) return;
    mp_graph_destroy(m->g);
    m->g = NULL;
}

mp_node mp_conv_bn(mp_graph *g, const char *name, mp_node x, mp_conv_opts o) {
    char bn[80];
    snprintf(bn, sizeof bn, "%s_bn", name);
    o.bias = false; /* the BN's shift replaces it */
    x = mp_conv2d(g, name, x, o);
    return mp_batchnorm2d(g, bn, x, (mp_batchnorm_opts){0});
}

mp_node mp_conv_bn_relu(mp_graph *g, const char *name, mp_node x, int out_channels, int kernel, int stride) {
    char relu[80];
    snprintf(relu, sizeof relu, "%s_relu", name);
    x = mp_conv_bn(g, name, x,
                   (mp_conv_opts){.out_channels = out_channels, .kernel = kernel, .stride = stride, .padding = kernel / 2});
    return mp_relu(g, relu, x);
}

mp_status mp_model_finish(mp_model *m, mp_node logits) {
    m->logits = logits;
    m->labels = mp_graph_labels(m->g, "labels");
    m->loss = mp_softmax_cross_entropy(m->g, "loss", logits, m->labels);
    mp_graph_mark_output(m->g, m->logits);
    mp_graph_mark_output(m->g, m->loss);
    return mp_graph_status(m->g);
}
