/* test_models.c — the model zoo: every model builds with exactly the
 * trainable-parameter count of its published architecture (counted by hand,
 * BN gamma and beta included, running statistics not), has the layers and
 * the node names users pass to --precision-override, and runs one training
 * step (forward, backward) under a precision policy with a finite loss and a
 * non-zero, finite gradient for every parameter tensor. Bad names are
 * rejected with a message naming the model. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/graph.h"
#include "models/models.h"

/* Parameter counts, worked out per layer (conv Cout*Cin/groups*K*K (+Cout
 * bias), BN 2*C, dense In*Out+Out); they match the published figures:
 * CIFAR ResNet-18/34/50/101 11.17M/21.28M/23.52M/42.51M, WRN-28-10 36.5M,
 * WRN-16-4 2.7M, WRN-40-4 8.9M, torchvision's MobileNetV2 (1000 classes)
 * 3,504,872, and seed 004's Keras convnet 1,095,946 trainable. */
typedef struct {
    const char *model;
    int c, h, w, classes;
    int64_t params;
} count_case;

static const count_case counts[] = {
    {"resnet18", 3, 32, 32, 10, 11173962},
    {"resnet18", 1, 28, 28, 10, 11172810}, /* the stem follows the input channels */
    {"resnet34", 3, 32, 32, 10, 21282122},
    {"resnet50", 3, 32, 32, 10, 23520842},
    {"resnet101", 3, 32, 32, 10, 42512970},
    {"wrn", 3, 32, 32, 10, 36479194}, /* = wrn-28-10 */
    {"wrn-28-10", 3, 32, 32, 10, 36479194},
    {"wrn-16-4", 3, 32, 32, 10, 2748890},
    {"wrn-40-4", 3, 32, 32, 10, 8949210},
    {"wrn-10-1", 3, 32, 32, 10, 77850},   /* K = 1: the first stage has no shortcut conv */
    {"wrn-16-8", 3, 32, 32, 100, 11007540},
    {"mobilenetv2", 3, 32, 32, 10, 2236682},
    {"mobilenetv2", 3, 32, 32, 1000, 3504872},
    {"convnet256", 3, 256, 256, 10, 1095946},
};

static int count_ops(const mp_graph *g, const char *op, const char *name_suffix, bool with_suffix) {
    int n = 0;
    for (int i = 0; i < mp_graph_node_count(g); i++) {
        if (strcmp(mp_graph_node_op(g, i), op)) continue;
        const char *name = mp_graph_node_name(g, i);
        size_t ln = strlen(name), ls = strlen(name_suffix);
        bool has = ln >= ls && !strcmp(name + ln - ls, name_suffix);
        if (has == with_suffix) n++;
    }
    return n;
}

static void test_param_counts(void) {
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const count_case *t = &counts[i];
        mp_model m;
        mp_status s = mp_model_build(t->model, t->c, t->h, t->w, t->classes, &m);
        CHECK(s == MP_OK, "build %s: %s", t->model, mp_last_error());
        if (s != MP_OK) continue;
        CHECK(mp_graph_param_count(m.g) == t->params, "%s %dx%dx%d, %d classes: %lld parameters, expected %lld",
              t->model, t->c, t->h, t->w, t->classes, (long long)mp_graph_param_count(m.g), (long long)t->params);
        CHECK(mp_model_describe(t->model) != NULL, "%s has no description", t->model);
        mp_model_free(&m);
    }
}

/* Depth as the papers count it, and the names --precision-override users see. */
static void test_structure(void) {
    static const struct {
        const char *model;
        int depth;     /* convs outside shortcuts + the dense layer */
        int shortcuts; /* projection convs */
        const char *present[6], *absent[3];
    } cases[] = {
        {"resnet18", 18, 3, {"conv1", "layer1_0_add", "layer2_1_conv1", "layer2_0_shortcut", "layer4_1_conv2_bn", "fc"},
         {"layer1_0_shortcut", "layer2_1_shortcut", "maxpool"}},
        {"resnet34", 34, 3, {"layer3_5_conv2", "layer4_0_shortcut_bn", "layer4_2_relu", "gap", "conv1_relu", "fc"},
         {"layer3_6_conv1", "layer3_1_shortcut", NULL}},
        {"resnet50", 50, 4, {"layer1_0_shortcut", "layer2_3_conv3_bn", "layer3_5_conv2", "layer4_2_add", "gap", "fc"},
         {"layer1_1_shortcut", "layer2_4_conv1", NULL}},
        {"resnet101", 101, 4, {"layer3_22_conv3", "layer3_22_relu", "layer4_0_shortcut", "fc", "gap", "conv1_bn"},
         {"layer3_23_conv1", NULL, NULL}},
        /* 3 x 4 blocks x 2 convs + stem + dense, shortcuts at each stage's start (16 -> 160 too) */
        {"wrn-28-10", 26, 3, {"layer1_0_shortcut", "layer1_3_conv2", "layer2_0_bn1", "layer3_3_relu2", "final_bn", "fc"},
         {"layer1_1_shortcut", "layer1_4_conv1", "layer4_0_conv1"}},
        {"wrn-10-1", 8, 2, {"layer1_0_conv1", "layer2_0_shortcut", "layer3_0_shortcut", "final_relu", "gap", "fc"},
         {"layer1_0_shortcut", NULL, NULL}},
        /* stem + 16 expanded blocks x 3 + the first block x 2 + conv_last + dense */
        {"mobilenetv2", 53, 0, {"block0_dw", "block2_add", "block1_expand_relu", "block16_project_bn", "conv_last", "fc"},
         {"block0_expand", "block1_add", "block17_dw"}},
        {"convnet256", 4, 0, {"conv1", "conv1_relu", "conv1_bn", "conv3_bn", "gap", "fc"}, {NULL, NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mp_model m;
        mp_status s = mp_model_build(cases[i].model, 3, 32, 32, 10, &m);
        CHECK(s == MP_OK, "build %s: %s", cases[i].model, mp_last_error());
        if (s != MP_OK) continue;
        int convs = count_ops(m.g, "conv2d", "_shortcut", false), dense = count_ops(m.g, "linear", "", true);
        CHECK(convs + dense == cases[i].depth, "%s: %d convs + %d dense, expected depth %d", cases[i].model, convs,
              dense, cases[i].depth);
        int shortcuts = count_ops(m.g, "conv2d", "_shortcut", true);
        CHECK(shortcuts == cases[i].shortcuts, "%s: %d shortcut convs, expected %d", cases[i].model, shortcuts,
              cases[i].shortcuts);
        for (int k = 0; k < 6; k++)
            CHECK(mp_graph_find(m.g, cases[i].present[k]) >= 0, "%s: no node '%s'", cases[i].model, cases[i].present[k]);
        for (int k = 0; k < 3; k++)
            if (cases[i].absent[k])
                CHECK(mp_graph_find(m.g, cases[i].absent[k]) < 0, "%s: unexpected node '%s'", cases[i].model,
                      cases[i].absent[k]);
        mp_model_free(&m);
    }
    /* Depthwise: groups = channels, so one 3x3 filter per channel. */
    mp_model m;
    MP_ASSERT(mp_model_build("mobilenetv2", 3, 32, 32, 10, &m) == MP_OK);
    mp_node dw = mp_graph_find(m.g, "block3_dw");
    MP_ASSERT(dw >= 0);
    const mp_gnode *n = &m.g->nodes[dw];
    CHECK(n->desc.attr.conv.groups == 144 && n->sample_shape.dims[1] == 144,
          "block3_dw: groups %d, %d channels (expected 144 = 24 x 6)", n->desc.attr.conv.groups,
          n->sample_shape.dims[1]);
    mp_model_free(&m);
}

/* One training step: forward, backward; the loss is finite and every
 * trainable tensor gets a finite gradient that is not all zeros. */
typedef struct {
    const char *model;
    int c, h, w, batch;
    mp_precision precision;
} step_case;

static void test_training_step(const step_case *t) {
    const clock_t t0 = clock();
    const char *pn = mp_precision_name(t->precision);
    mp_model m;
    mp_status s = mp_model_build(t->model, t->c, t->h, t->w, 10, &m);
    if (s == MP_OK) s = mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = t->precision});
    CHECK(s == MP_OK, "build %s (%s): %s", t->model, pn, mp_last_error());
    if (s != MP_OK) return;
    mp_graph_init_params(m.g, 5);
    mp_plan *p = NULL;
    s = mp_plan_create(m.g, (mp_plan_opts){.batch = t->batch, .training = true, .loss = m.loss}, &p);
    CHECK(s == MP_OK, "plan %s (%s): %s", t->model, pn, mp_last_error());
    if (s != MP_OK) {
        mp_model_free(&m);
        return;
    }
    const size_t n = (size_t)t->batch * (size_t)(t->c * t->h * t->w);
    float *x = malloc(n * sizeof *x);
    int32_t y[8];
    MP_ASSERT(x && t->batch <= 8);
    mp_rng r;
    mp_rng_seed(&r, 17);
    for (size_t i = 0; i < n; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < t->batch; i++) y[i] = (3 * i + 1) % 10;
    s = mp_plan_set_input(p, m.input, x, n);
    if (s == MP_OK) s = mp_plan_set_labels(p, m.labels, y, (size_t)t->batch);
    if (s == MP_OK) s = mp_plan_forward(p);
    float loss = NAN;
    if (s == MP_OK) s = mp_plan_read(p, m.loss, &loss, 1);
    mp_graph_zero_grad(m.g);
    if (s == MP_OK) s = mp_plan_backward(p, 1.0f);
    CHECK(s == MP_OK, "step %s (%s): %s", t->model, pn, mp_last_error());
    CHECK(isfinite(loss) && loss > 0, "%s (%s): loss %g", t->model, pn, loss);
    int tensors = 0, zero = 0, nonfinite = 0;
    const char *first_zero = "", *first_nonfinite = "";
    for (int k = 0; s == MP_OK && k < m.g->n_params; k++) {
        const mp_gparam *gp = &m.g->params[k];
        if (!gp->spec.trainable) continue;
        tensors++;
        bool any = false, finite = true;
        for (int64_t i = 0, cnt = mp_shape_numel(&gp->spec.shape); i < cnt; i++) {
            any |= gp->grad[i] != 0.0f;
            finite &= isfinite(gp->grad[i]) != 0;
        }
        if (!any && !zero++) first_zero = gp->name;
        if (!finite && !nonfinite++) first_nonfinite = gp->name;
    }
    CHECK(s != MP_OK || tensors > 0, "%s: no trainable tensors", t->model);
    CHECK(zero == 0, "%s (%s): %d of %d parameter tensors have an all-zero gradient, first %s", t->model, pn, zero,
          tensors, first_zero);
    CHECK(nonfinite == 0, "%s (%s): %d parameter tensors have a NaN/inf gradient, first %s", t->model, pn, nonfinite,
          first_nonfinite);
    printf("  %-12s %-9s %dx%dx%dx%d: loss %.4f, %d tensors, %.2f s cpu\n", t->model, pn, t->batch, t->c, t->h,
           t->w, loss, tensors, (double)(clock() - t0) / CLOCKS_PER_SEC);
    free(x);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

static void test_training_steps(void) {
    /* Each model under one policy, so depthwise convs, residual adds and
     * projection shortcuts each meet low precision somewhere. */
    static const step_case cases[] = {
        {"resnet18", 3, 32, 32, 2, MP_PRECISION_FP32},
        {"resnet18", 3, 32, 32, 2, MP_PRECISION_AMP_FP16},
        {"resnet34", 3, 32, 32, 2, MP_PRECISION_AMP_BF16},
        {"resnet50", 3, 32, 32, 2, MP_PRECISION_O2_BF16},
        {"resnet101", 3, 16, 16, 2, MP_PRECISION_FP32},
        {"wrn-16-4", 3, 32, 32, 2, MP_PRECISION_AMP_FP16},
        {"wrn", 3, 16, 16, 2, MP_PRECISION_BF16},
        {"mobilenetv2", 3, 32, 32, 2, MP_PRECISION_FP32},
        {"mobilenetv2", 3, 32, 32, 2, MP_PRECISION_O2_FP16},
        {"convnet256", 3, 64, 64, 2, MP_PRECISION_AMP_BF16},
        {"convnet256", 1, 28, 28, 2, MP_PRECISION_FP16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_training_step(&cases[i]);
}

static void test_bad_names(void) {
    mp_model m;
    CHECK_ERR(mp_model_build("wrn-27-10", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-27-10", "6n+4");
    CHECK(m.g == NULL, "graph left after an error");
    CHECK_ERR(mp_model_build("wrn-4-10", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-4-10", "6n+4");
    CHECK_ERR(mp_model_build("wrn-28-0", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-28-0", "widening factor");
    CHECK_ERR(mp_model_build("wrn-x", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-x", "wrn-D-K");
    CHECK_ERR(mp_model_build("wrn-28", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-28", "wrn-D-K");
    CHECK_ERR(mp_model_build("wrn-28-10-2", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-28-10-2", "wrn-D-K");
    CHECK_ERR(mp_model_build("wrn-28--10", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn-28--10", "wrn-D-K");
    CHECK_ERR(mp_model_build("wrn28-10", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "wrn28-10", "wrn-D-K");
    CHECK_ERR(mp_model_build("resnet19", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "resnet19", "resnet18", "wrn-D-K");
    CHECK_ERR(mp_model_build("ResNet18", 3, 32, 32, 10, &m), MP_ERR_INVALID_ARG, "ResNet18");
    CHECK_ERR(mp_model_build("resnet50", 3, 32, 32, 1, &m), MP_ERR_INVALID_ARG, "resnet50", "2 classes");
    CHECK_ERR(mp_model_build("wrn-16-2", 3, 0, 32, 10, &m), MP_ERR_SHAPE, "wrn-16-2");
    /* no name, no output */
    CHECK_ERR(mp_model_build(NULL, 1, 28, 28, 10, &m), MP_ERR_INVALID_ARG, "no name", "resnet18");
    CHECK(m.g == NULL, "graph left after an error");
    CHECK_ERR(mp_model_build("small", 1, 28, 28, 10, NULL), MP_ERR_INVALID_ARG, "'small'", "null output");
    CHECK_ERR(mp_model_check_name(NULL), MP_ERR_INVALID_ARG, "no name");
    CHECK(mp_model_describe(NULL) == NULL, "describes NULL");
    mp_model_free(NULL); /* a no-op: the program reaching its summary is the check */
    mp_model zeroed = {0};
    mp_model_free(&zeroed);
    CHECK(zeroed.g == NULL, "freeing a zeroed model");
    CHECK(mp_model_describe("wrn-27-10") == NULL, "describes wrn-27-10");
    CHECK(mp_model_describe("resnet19") == NULL, "describes resnet19");
    CHECK(mp_model_describe("wrn-22-2") != NULL && mp_model_describe("wrn") != NULL, "no description for wrn-22-2");
    CHECK(strstr(mp_model_list(), "mobilenetv2") && strstr(mp_model_list(), "convnet256"), "list: %s",
          mp_model_list());
}

int main(void) {
    test_bad_names();
    test_param_counts();
    test_structure();
    test_training_steps();
    return test_summary("test_models");
}
