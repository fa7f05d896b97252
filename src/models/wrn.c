/* wrn.c — wide ResNets wrn-D-K (Zagoruyko & Komodakis 2016): a 3x3 stem
 * conv(16), three stages of (D-4)/6 pre-activation blocks (BN-ReLU-conv3x3,
 * BN-ReLU-conv3x3) at 16K/32K/64K channels (stride 2 at the start of stages 2
 * and 3), a 1x1 conv shortcut on the pre-activated input where the shape
 * changes, a final BN-ReLU, global average pooling and one dense layer. No
 * dropout. `wrn` is wrn-28-10, the model of seed 000.
 *
 * Node names (blocks counted from 0): layer2_0_bn1, layer2_0_relu1,
 * layer2_0_conv1, layer2_0_bn2, layer2_0_relu2, layer2_0_conv2,
 * layer2_0_shortcut, layer2_0_add; then final_bn, final_relu, gap, fc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/models.h"

#define WRN_MAX_DEPTH 1000
#define WRN_MAX_WIDEN 64

/* A decimal number in [lo, hi] starting at *s; advances *s past it. */
static bool parse_int(const char **s, int lo, int hi, int *out) {
    if (**s < '0' || **s > '9') return false;
    char *end;
    errno = 0;
    long v = strtol(*s, &end, 10);
    if (errno || v < lo || v > hi) return false;
    *s = end;
    *out = (int)v;
    return true;
}

mp_status mp_wide_resnet_parse(const char *name, int *depth, int *widen) {
    if (!strcmp(name, "wrn")) {
        *depth = 28;
        *widen = 10;
        return MP_OK;
    }
    const char *s = name;
    int d = 0, k = 0;
    bool ok = !strncmp(s, "wrn-", 4);
    if (ok) s += 4;
    ok = ok && parse_int(&s, 0, WRN_MAX_DEPTH, &d) && *s++ == '-';
    ok = ok && parse_int(&s, 0, WRN_MAX_WIDEN, &k) && *s == '\0';
    if (!ok)
        return mp_error(MP_ERR_INVALID_ARG,
                        "model '%s': a wide ResNet is named wrn-D-K, depth D = 6n+4 (10, 16, 22, 28, 40, ... up to %d) "
                        "and widening factor K in 1..%d, e.g. wrn-28-10; plain 'wrn' is wrn-28-10",
                        name, WRN_MAX_DEPTH, WRN_MAX_WIDEN);
    if (d < 10 || (d - 4) % 6)
        return mp_error(MP_ERR_INVALID_ARG,
                        "model '%s': depth %d is not 6n+4 with n >= 1 (10, 16, 22, 28, 34, 40, ...): "
                        "each of the 3 stages has n = (D-4)/6 blocks of two 3x3 convs",
                        name, d);
    if (k < 1) return mp_error(MP_ERR_INVALID_ARG, "model '%s': widening factor %d must be at least 1", name, k);
    *depth = d;
    *widen = k;
    return MP_OK;
}

/* BN-ReLU pre-activation named <block>_bn<i>, <block>_relu<i>. */
static mp_node bn_relu(mp_graph *g, const char *block, int i, mp_node x) {
    char name[64];
    snprintf(name, sizeof name, "%s_bn%d", block, i);
    x = mp_batchnorm2d(g, name, x, (mp_batchnorm_opts){0});
    snprintf(name, sizeof name, "%s_relu%d", block, i);
    return mp_relu(g, name, x);
}

static mp_node conv3x3(mp_graph *g, const char *name, mp_node x, int out_channels, int stride) {
    return mp_conv2d(g, name, x, (mp_conv_opts){.out_channels = out_channels, .kernel = 3, .stride = stride, .padding = 1});
}

static mp_node preact_block(mp_graph *g, const char *block, mp_node x, int in_channels, int out_channels, int stride) {
    char name[64];
    const bool projection = stride != 1 || in_channels != out_channels;
    mp_node a = bn_relu(g, block, 1, x);
    snprintf(name, sizeof name, "%s_conv1", block);
    mp_node y = conv3x3(g, name, a, out_channels, stride);
    y = bn_relu(g, block, 2, y);
    snprintf(name, sizeof name, "%s_conv2", block);
    y = conv3x3(g, name, y, out_channels, 1);
    mp_node shortcut = x;
    if (projection) {
        snprintf(name, sizeof name, "%s_shortcut", block);
        shortcut = mp_conv2d(g, name, a, (mp_conv_opts){.out_channels = out_channels, .kernel = 1, .stride = stride});
    }
    snprintf(name, sizeof name, "%s_add", block);
    return mp_add(g, name, y, shortcut);
}

mp_status mp_model_wide_resnet(mp_model *m, int depth, int widen, int c, int h, int w, int classes) {
    const int blocks = (depth - 4) / 6;
    const int widths[3] = {16 * widen, 32 * widen, 64 * widen};
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    x = conv3x3(g, "conv1", x, 16, 1);
    int channels = 16;
    for (int stage = 0; stage < 3; stage++) {
        for (int i = 0; i < blocks; i++) {
            char block[32];
            snprintf(block, sizeof block, "layer%d_%d", stage + 1, i);
            x = preact_block(g, block, x, channels, widths[stage], (stage > 0 && i == 0) ? 2 : 1);
            channels = widths[stage];
        }
    }
    x = mp_batchnorm2d(g, "final_bn", x, (mp_batchnorm_opts){0});
    x = mp_relu(g, "final_relu", x);
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, x);
}
