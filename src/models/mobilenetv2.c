/* mobilenetv2.c — MobileNetV2 (Sandler et al. 2018), CIFAR variant: a 3x3
 * stride-1 stem conv(32), 17 inverted residual blocks from the standard
 * (t, c, n, s) table with the first two downsampling strides (the stem's and
 * the 24-channel stage's) set to 1 for 32x32 inputs, as the common CIFAR ports
 * do, a 1x1 conv to 1280, global average pooling and one dense layer. A block
 * expands with a 1x1 conv (skipped when t = 1), filters with a depthwise 3x3
 * conv (groups = channels), projects with a linear 1x1 conv, and adds its
 * input when stride 1 keeps the shape. No classifier dropout.
 *
 * ReLU6 is not an op of the graph: the activations are plain ReLU.
 *
 * Node names (blocks counted from 0 across stages, as Keras does):
 * block3_expand, block3_expand_bn, block3_expand_relu, block3_dw,
 * block3_dw_bn, block3_dw_relu, block3_project, block3_project_bn,
 * block3_add; then conv_last (+_bn, _relu), gap, fc. */
#include <stdio.h>

#include "models/models.h"

typedef struct {
    int expansion, channels, repeats, stride;
} inverted_residual_stage;

static const inverted_residual_stage stages[] = {
    {1, 16, 1, 1},
    {6, 24, 2, 1}, /* stride 2 in the ImageNet model */
    {6, 32, 3, 2},
    {6, 64, 4, 2},
    {6, 96, 3, 1},
    {6, 160, 3, 2},
    {6, 320, 1, 1},
};

static mp_node relu_after(mp_graph *g, const char *conv_name, mp_node x) {
    char name[80];
    snprintf(name, sizeof name, "%s_relu", conv_name);
    return mp_relu(g, name, x);
}

static mp_node inverted_residual(mp_graph *g, int index, mp_node x, int in_channels, int out_channels, int expansion,
                                 int stride) {
    char name[64];
    const int hidden = in_channels * expansion;
    mp_node y = x;
    if (expansion != 1) {
        snprintf(name, sizeof name, "block%d_expand", index);
        y = mp_conv_bn(g, name, y, (mp_conv_opts){.out_channels = hidden, .kernel = 1});
        y = relu_after(g, name, y);
    }
    snprintf(name, sizeof name, "block%d_dw", index);
    y = mp_conv_bn(g, name, y,
                   (mp_conv_opts){.out_channels = hidden, .kernel = 3, .stride = stride, .padding = 1, .groups = hidden});
    y = relu_after(g, name, y);
    snprintf(name, sizeof name, "block%d_project", index);
    y = mp_conv_bn(g, name, y, (mp_conv_opts){.out_channels = out_channels, .kernel = 1});
    if (stride == 1 && in_channels == out_channels) {
        snprintf(name, sizeof name, "block%d_add", index);
        y = mp_add(g, name, y, x);
    }
    return y;
}

mp_status mp_model_mobilenetv2(mp_model *m, int c, int h, int w, int classes) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    x = mp_conv_bn_relu(g, "conv1", x, 32, 3, 1);
    int channels = 32, index = 0;
    for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++) {
        for (int i = 0; i < stages[s].repeats; i++) {
            x = inverted_residual(g, index++, x, channels, stages[s].channels, stages[s].expansion,
                                  i == 0 ? stages[s].stride : 1);
            channels = stages[s].channels;
        }
    }
    x = mp_conv_bn_relu(g, "conv_last", x, 1280, 1, 1);
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, x);
}
