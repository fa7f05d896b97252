/* cnn10.c — seed 000's 10-layer CNN: three stages of three 3x3
 * conv+BN+ReLU at 64/128/256 channels, 2x2 average pooling between stages,
 * global average pooling and one dense layer (9 convs + 1 dense). */
#include <stdio.h>

#include "models/models.h"

mp_status mp_model_cnn10(mp_model *m, int c, int h, int w, int classes) {
    mp_graph *g = m->g;
    static const int widths[3] = {64, 128, 256};
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    for (int stage = 0; stage < 3; stage++) {
        for (int k = 0; k < 3; k++) {
            char name[32];
            snprintf(name, sizeof name, "conv%d_%d", stage + 1, k + 1);
            x = mp_conv_bn_relu(g, name, x, widths[stage], 3, 1);
        }
        if (stage < 2) {
            char name[32];
            snprintf(name, sizeof name, "pool%d", stage + 1);
            x = mp_avgpool2d(g, name, x, (mp_pool_opts){.kernel = 2});
        }
    }
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, x);
}
