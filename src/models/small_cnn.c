/* small_cnn.c — the default model: a small CNN that reaches ~90% on
 * Fashion-MNIST in a few epochs on 2 CPU cores. */
#include "models/models.h"

mp_status mp_model_small_cnn(mp_model *m, int c, int h, int w, int classes) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    x = mp_conv_bn_relu(g, "conv1", x, 16, 3, 1);
    x = mp_maxpool2d(g, "pool1", x, (mp_pool_opts){.kernel = 2});
    x = mp_conv_bn_relu(g, "conv2", x, 32, 3, 1);
    x = mp_maxpool2d(g, "pool2", x, (mp_pool_opts){.kernel = 2});
    x = mp_flatten(g, "flatten", x);
    x = mp_linear(g, "fc1", x, (mp_linear_opts){.out_features = 128, .bias = true});
    x = mp_relu(g, "fc1_relu", x);
    x = mp_linear(g, "fc2", x, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, x);
}
