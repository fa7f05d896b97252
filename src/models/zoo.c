/* zoo.c — the model registry. Fixed models are looked up by name; names
 * starting with "wrn" are the wide-ResNet family wrn-D-K, parsed by wrn.c;
 * ONNX files are zoo_onnx.c's. The builders' shared pieces are in
 * model_parts.c. */
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
    {"resnet18", mp_model_resnet18,
     "CIFAR ResNet-18: conv3x3(64) stem, no max pool, basic blocks 2-2-2-2 at 64/128/256/512, global avgpool, dense"},
    {"resnet34", mp_model_resnet34,
     "CIFAR ResNet-34: conv3x3(64) stem, no max pool, basic blocks 3-4-6-3 at 64/128/256/512, global avgpool, dense"},
    {"resnet50", mp_model_resnet50,
     "CIFAR ResNet-50: conv3x3(64) stem, no max pool, bottleneck blocks (x4) 3-4-6-3 at 64/128/256/512, global "
     "avgpool, dense"},
    {"resnet101", mp_model_resnet101,
     "CIFAR ResNet-101: conv3x3(64) stem, no max pool, bottleneck blocks (x4) 3-4-23-3 at 64/128/256/512, global "
     "avgpool, dense"},
    {"mobilenetv2", mp_model_mobilenetv2,
     "CIFAR MobileNetV2: conv3x3(32) stride 1, 17 inverted residual blocks (depthwise 3x3), conv1x1(1280), global "
     "avgpool, dense; ReLU instead of ReLU6"},
    {"convnet256", mp_model_convnet256,
     "seed 004's convnet for 256x256x3: conv5x5/2(32), conv7x7/2(64), conv11x11/2(128), each +ReLU+BN, global "
     "avgpool, dense"},
};

static const char wide_resnet_description[] =
    "wide ResNet wrn-D-K (wrn = wrn-28-10, seed 000): pre-activation BN-ReLU-conv3x3 blocks, (D-4)/6 per stage at "
    "16K/32K/64K, no dropout, global avgpool, dense";

const char *mp_model_list(void) {
    return "small, cnn10, resnet18, resnet34, resnet50, resnet101, wrn (= wrn-28-10; any wrn-D-K with D = 6n+4), "
           "mobilenetv2, convnet256, or a FILE.onnx";
}

static const zoo_entry *find(const char *name) {
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++)
        if (!strcmp(zoo[i].name, name)) return &zoo[i];
    return NULL;
}

static bool is_wide_resnet_name(const char *name) { return !strncmp(name, "wrn", 3); }

const char *mp_model_describe(const char *name) {
    if (!name) return NULL;
    const zoo_entry *e = find(name);
    if (e) return e->description;
    if (mp_model_is_onnx_name(name) && mp_model_onnx_check(name) == MP_OK)
        return "a model imported from an ONNX file (its inference graph and initializers)";
    int depth, widen;
    if (is_wide_resnet_name(name) && mp_wide_resnet_parse(name, &depth, &widen) == MP_OK)
        return wide_resnet_description;
    return NULL;
}

mp_status mp_model_check_name(const char *name) {
    int depth, widen;
    if (!name) return mp_error(MP_ERR_INVALID_ARG, "model: no name (known: %s)", mp_model_list());
    if (find(name)) return MP_OK;
    if (mp_model_is_onnx_name(name)) return mp_model_onnx_check(name);
    if (is_wide_resnet_name(name)) return mp_wide_resnet_parse(name, &depth, &widen);
    return mp_error(MP_ERR_INVALID_ARG, "unknown model '%s' (known: %s)", name, mp_model_list());
}

mp_status mp_model_build(const char *name, int c, int h, int w, int classes, mp_model *m) {
    if (!m) return mp_error(MP_ERR_INVALID_ARG, "model '%s': null output", name ? name : "(null)");
    memset(m, 0, sizeof *m);
    if (!name) return mp_error(MP_ERR_INVALID_ARG, "model: no name (known: %s)", mp_model_list());
    if (mp_model_is_onnx_name(name)) return mp_model_onnx_build(name, c, h, w, classes, m);
    const zoo_entry *e = find(name);
    int depth = 0, widen = 0;
    if (!e) {
        if (!is_wide_resnet_name(name))
            return mp_error(MP_ERR_INVALID_ARG, "unknown model '%s' (known: %s)", name, mp_model_list());
        MP_TRY(mp_wide_resnet_parse(name, &depth, &widen));
    }
    if (classes < 2) return mp_error(MP_ERR_INVALID_ARG, "model %s: needs at least 2 classes, got %d", name, classes);
    m->g = mp_graph_create();
    if (!m->g) return mp_error(MP_ERR_NOMEM, "model %s: out of memory", name);
    mp_status s = e ? e->build(m, c, h, w, classes) : mp_model_wide_resnet(m, depth, widen, c, h, w, classes);
    if (s == MP_OK) s = mp_graph_status(m->g);
    if (s != MP_OK) {
        char msg[512]; /* the graph's first error, else the builder's (mp_last_error, which mp_error rewrites) */
        snprintf(msg, sizeof msg, "%s", mp_graph_status(m->g) != MP_OK ? mp_graph_error(m->g) : mp_last_error());
        mp_model_free(m);
        return mp_error(s, "model %s for %dx%dx%d inputs: %s", name, c, h, w, msg);
    }
    return MP_OK;
}
