/* zoo.c — model registry and helpers shared by the builders. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "models/models.h"

typedef struct {
    const char *name;
    mp_model_builder build;
    const char *description;
} zoo_entry;

static const zoo_entry zoo[] = {
    {"small", mp_model_small_cnn,
     "default: conv3x3(16)+BN+ReLU, maxpool, conv3x3(32)+BN+ReLU, maxpool, dense 128, dense (trains in minutes on 2 cores)"},
    {"cnn10", mp_model_cnn10,
     "seed 000's 10-layer CNN: 3 stages x 3 conv3x3+BN+ReLU at 64/128/256, avgpool 2x2 between, global avgpool, dense"},
};

const char *mp_model_list(void) { return "small, cnn10"; }

const char *mp_model_describe(const char *name) {
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++)
        if (!strcmp(zoo[i].name, name)) return zoo[i].description;
    return NULL;
}

mp_status mp_model_build(const char *name, int c, int h, int w, int classes, mp_model *m) {
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
        if (strcmp(zoo[i].name, name)) continue;
        if (classes < 2) return mp_error(MP_ERR_INVALID_ARG, "model %s: needs at least 2 classes, got %d", name, classes);
        m->g = mp_graph_create();
        if (!m->g) return mp_error(MP_ERR_NOMEM, "model %s: out of memory", name);
        mp_status s = zoo[i].build(m, c, h, w, classes);
        if (s == MP_OK) s = mp_graph_status(m->g);
        if (s != MP_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mp_last_error());
            mp_model_free(m);
            return mp_error(s, "model %s for %dx%dx%d inputs: %s", name, c, h, w, msg);
        }
        return MP_OK;
    }
    return mp_error(MP_ERR_INVALID_ARG, "unknown model '%s' (known: %s)", name, mp_model_list());
}

void mp_model_free(mp_model *m) {
    mp_graph_destroy(m->g);
    m->g = NULL;
}

mp_node mp_conv_bn_relu(mp_graph *g, const char *name, mp_node x, int out_channels, int kernel, int stride) {
    char bn[80], relu[80];
    snprintf(bn, sizeof bn, "%s_bn", name);
    snprintf(relu, sizeof relu, "%s_relu", name);
    x = mp_conv2d(g, name, x,
                  (mp_conv_opts){.out_channels = out_channels, .kernel = kernel, .stride = stride, .padding = kernel / 2});
    x = mp_batchnorm2d(g, bn, x, (mp_batchnorm_opts){0});
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
