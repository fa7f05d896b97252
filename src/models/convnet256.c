/* convnet256.c — seed 004's Keras convnet for 256x256x3 Imagenette: three
 * strided convs, 5x5/2 x32, 7x7/2 x64, 11x11/2 x128, each with a bias and a
 * ReLU and then BN (Keras: Conv2D(activation="relu") followed by
 * BatchNormalization), global average pooling, one dense layer; the softmax
 * lives in the loss, which is fp32 under every policy. "same" padding is
 * k/2 on each side: the same output sizes as Keras (H/2, H/4, H/8), with
 * symmetric instead of Keras's bottom/right-heavy padding.
 *
 * Node names: conv1, conv1_relu, conv1_bn, conv2, ..., conv3_bn, gap, fc. */
#include <stdio.h>

#include "models/models.h"

static mp_node conv_relu_bn(mp_graph *g, const char *name, mp_node x, int out_channels, int kernel) {
    char relu[80], bn[80];
    snprintf(relu, sizeof relu, "%s_relu", name);
    snprintf(bn, sizeof bn, "%s_bn", name);
    x = mp_conv2d(g, name, x,
                  (mp_conv_opts){.out_channels = out_channels, .kernel = kernel, .stride = 2, .padding = kernel / 2,
                                 .bias = true});
    x = mp_relu(g, relu, x);
    return mp_batchnorm2d(g, bn, x, (mp_batchnorm_opts){0});
}

mp_status mp_model_convnet256(mp_model *m, int c, int h, int w, int classes) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    x = conv_relu_bn(g, "conv1", x, 32, 5);
    x = conv_relu_bn(g, "conv2", x, 64, 7);
    x = conv_relu_bn(g, "conv3", x, 128, 11);
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, x);
}
