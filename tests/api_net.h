/* api_net.h — the small classifier the public-API tests (test_api.c,
 * test_api_lifetimes.c) build as a user program would: input (1, 8, 8) ->
 * conv -> bn -> relu -> flatten -> fc (k classes) -> softmax cross-entropy,
 * an SGD optimizer over it, and one batch of 4 images and labels. */
#ifndef MP_TESTS_API_NET_H
#define MP_TESTS_API_NET_H

#include <stdint.h>

#include "core/error.h"
#include "mixprec.h"

typedef struct {
    mp_graph *g;
    mp_node input, labels, logits, loss;
} net;

/* A net's graph, input (1, 8, 8) and labels: what every net here starts from. */
static inline void net_inputs(net *n) {
    *n = (net){.g = mp_graph_create()};
    n->input = mp_graph_input(n->g, "image", 1, 8, 8);
    n->labels = mp_graph_labels(n->g, "label");
}

/* A net's first part: net_inputs, then relu(bn(conv(input))) with
 * out_channels channels (nodes "conv", "bn", "relu"), returned for
 * net_finish to close. */
static inline mp_node net_begin(net *n, int out_channels) {
    net_inputs(n);
    mp_node x = mp_conv2d(n->g, "conv", n->input, (mp_conv_opts){.out_channels = out_channels, .kernel = 3, .padding = 1});
    return mp_relu(n->g, "relu", mp_batchnorm2d(n->g, "bn", x, (mp_batchnorm_opts){0}));
}

/* Its last part: flatten x -> fc (classes) -> softmax cross-entropy, checked
 * and initialized (seed 3). */
static inline net net_finish(net n, mp_node x, int classes) {
    n.logits = mp_linear(n.g, "fc", mp_flatten(n.g, "flat", x), (mp_linear_opts){.out_features = classes, .bias = true});
    n.loss = mp_softmax_cross_entropy(n.g, "loss", n.logits, n.labels);
    MP_ASSERT(mp_graph_status(n.g) == MP_OK);
    mp_graph_init_params(n.g, 3);
    return n;
}

static inline net make_net(int out_channels, int classes) {
    net n;
    const mp_node x = net_begin(&n, out_channels);
    return net_finish(n, x, classes);
}

/* A net whose batch norm + ReLU feed an average pool (the channels-last
 * batch-norm kernels and the pool fusion): conv (16 ch) -> bn -> relu ->
 * 2x2 avgpool -> conv2 -> bn2 -> relu2 -> fc (3 classes). */
static inline net make_pool_net(void) {
    net n;
    mp_node x = net_begin(&n, 16);
    x = mp_avgpool2d(n.g, "pool", x, (mp_pool_opts){.kernel = 2, .stride = 2});
    x = mp_conv2d(n.g, "conv2", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1});
    x = mp_relu(n.g, "relu2", mp_batchnorm2d(n.g, "bn2", x, (mp_batchnorm_opts){0}));
    return net_finish(n, x, 3);
}

/* A net, its optimizer and trainer, and one batch of 4 images and labels:
 * what the API tests step. */
typedef struct {
    net n;
    mp_optimizer *o;
    mp_trainer *t;
    float x[4 * 64];
    int32_t y[4];
} net_fixture;

/* SGD at 0.1 over every trainable parameter of g. */
static inline mp_optimizer *sgd(mp_graph *g) {
    mp_optimizer *o = NULL;
    MP_ASSERT(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.1f}}, &o) ==
              MP_OK);
    return o;
}

/* One batch of make_net's 4 x (1, 8, 8) images and labels (3 classes). */
static inline void small_batch(float *x, int32_t *y) {
    for (int i = 0; i < 4 * 64; i++) x[i] = (float)((i * 37) % 19) / 9.0f - 1.0f;
    for (int i = 0; i < 4; i++) y[i] = (i * 5) % 3;
}

#endif
