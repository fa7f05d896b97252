/* resnet.c — CIFAR ResNets (He et al. 2016, as in the common CIFAR ports):
 * a 3x3 stride-1 stem conv(64)+BN+ReLU without max pooling, four stages at
 * 64/128/256/512 channels (stride 2 at the start of stages 2-4), a 1x1
 * conv+BN projection shortcut where the shape changes, global average pooling
 * and one dense layer. resnet18/34 use basic blocks (two 3x3 convs),
 * resnet50/101 bottleneck blocks (1x1, 3x3, 1x1 with expansion 4).
 *
 * Node names follow torchvision's parameter names with '_' for '.', blocks
 * counted from 0: layer2_0_conv1, layer2_0_conv1_bn, layer2_0_conv1_relu,
 * layer2_0_shortcut, layer2_0_shortcut_bn, layer2_0_add, layer2_0_relu. */
#include <stdio.h>

#include "models/models.h"

#define BOTTLENECK_EXPANSION 4

typedef struct {
    int blocks[4];   /* blocks per stage */
    bool bottleneck;
} resnet_config;

/* One residual block named `block` (e.g. "layer2_0"); returns its output. */
static mp_node residual_block(mp_graph *g, const char *block, mp_node x, int in_channels, int planes, int stride,
                              bool bottleneck) {
    char name[64];
    const int out_channels = bottleneck ? planes * BOTTLENECK_EXPANSION : planes;
    mp_node y;
    if (bottleneck) {
        snprintf(name, sizeof name, "%s_conv1", block);
        y = mp_conv_bn_relu(g, name, x, planes, 1, 1);
        snprintf(name, sizeof name, "%s_conv2", block);
        y = mp_conv_bn_relu(g, name, y, planes, 3, stride);
        snprintf(name, sizeof name, "%s_conv3", block);
        y = mp_conv_bn(g, name, y, (mp_conv_opts){.out_channels = out_channels, .kernel = 1});
    } else {
        snprintf(name, sizeof name, "%s_conv1", block);
        y = mp_conv_bn_relu(g, name, x, planes, 3, stride);
        snprintf(name, sizeof name, "%s_conv2", block);
        y = mp_conv_bn(g, name, y, (mp_conv_opts){.out_channels = out_channels, .kernel = 3, .padding = 1});
    }
    mp_node shortcut = x;
    if (stride != 1 || in_channels != out_channels) {
        snprintf(name, sizeof name, "%s_shortcut", block);
        shortcut = mp_conv_bn(g, name, x, (mp_conv_opts){.out_channels = out_channels, .kernel = 1, .stride = stride});
    }
    snprintf(name, sizeof name, "%s_add", block);
    y = mp_add(g, name, y, shortcut);
    snprintf(name, sizeof name, "%s_relu", block);
    return mp_relu(g, name, y);
}

static mp_status resnet(mp_model *m, resnet_config cfg, int c, int h, int w, int classes) {
    static const int stage_planes[4] = {64, 128, 256, 512};
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    x = mp_conv_bn_relu(g, "conv1", x, 64, 3, 1);
    int channels = 64;
    for (int stage = 0; stage < 4; stage++) {
        for (int i = 0; i < cfg.blocks[stage]; i++) {
            char block[32];
            snprintf(block, sizeof block, "layer%d_%d", stage + 1, i);
            const int stride = (stage > 0 && i == 0) ? 2 : 1;
            x = residual_block(g, block, x, channels, stage_planes[stage], stride, cfg.bottleneck);
            channels = cfg.bottleneck ? stage_planes[stage] * BOTTLENECK_EXPANSION : stage_planes[stage];
        }
    }
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, x);
}

mp_status mp_model_resnet18(mp_model *m, int c, int h, int w, int classes) {
    return resnet(m, (resnet_config){.blocks = {2, 2, 2, 2}, .bottleneck = false}, c, h, w, classes);
}

mp_status mp_model_resnet34(mp_model *m, int c, int h, int w, int classes) {
    return resnet(m, (resnet_config){.blocks = {3, 4, 6, 3}, .bottleneck = false}, c, h, w, classes);
}

mp_status mp_model_resnet50(mp_model *m, int c, int h, int w, int classes) {
    return resnet(m, (resnet_config){.blocks = {3, 4, 6, 3}, .bottleneck = true}, c, h, w, classes);
}

mp_status mp_model_resnet101(mp_model *m, int c, int h, int w, int classes) {
    return resnet(m, (resnet_config){.blocks = {3, 4, 23, 3}, .bottleneck = true}, c, h, w, classes);
}
