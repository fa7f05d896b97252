/* small_cnn.h — the small CNN the GPU training-equivalence tests share
 * (test_cuda_dist, test_cuda_accumulate): conv 16 -> [BN] -> ReLU -> max
 * pool -> conv 32 -> [BN] -> ReLU -> global average pool -> linear, on
 * SMALL_C x SMALL_H x SMALL_W inputs and SMALL_CLASSES classes, policy
 * applied and parameters initialized with seed 3; random batches for it, and
 * the comparisons of trained weights the tests make. */
#ifndef MP_TESTS_GPU_SMALL_CNN_H
#define MP_TESTS_GPU_SMALL_CNN_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "core/rng.h"
#include "models/models.h"

enum { SMALL_C = 3, SMALL_H = 16, SMALL_W = 16, SMALL_CLASSES = 10 };

static mp_status small_cnn_build(mp_precision prec, bool bn, mp_model *m) {
    memset(m, 0, sizeof *m);
    m->g = mp_graph_create();
    if (!m->g) return mp_error(MP_ERR_NOMEM, "graph");
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", SMALL_C, SMALL_H, SMALL_W);
    x = mp_conv2d(g, "conv1", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1, .bias = true});
    if (bn) x = mp_batchnorm2d(g, "bn1", x, (mp_batchnorm_opts){0});
    x = mp_relu(g, "relu1", x);
    x = mp_maxpool2d(g, "pool1", x, (mp_pool_opts){.kernel = 2});
    x = mp_conv2d(g, "conv2", x, (mp_conv_opts){.out_channels = 32, .kernel = 3, .padding = 1, .bias = true});
    if (bn) x = mp_batchnorm2d(g, "bn2", x, (mp_batchnorm_opts){0});
    x = mp_relu(g, "relu2", x);
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = SMALL_CLASSES, .bias = true});
    MP_TRY(mp_model_finish(m, x));
    MP_TRY(mp_graph_status(g));
    MP_TRY(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}));
    mp_graph_init_params(g, 3);
    return MP_OK;
}

/* n samples of N(0, 1) pixels and uniform labels, from seed. */
static void small_cnn_batch(uint64_t seed, int n, float *x, int32_t *y) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)n * SMALL_C * SMALL_H * SMALL_W; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < n; i++) y[i] = (int32_t)mp_rng_below(&r, SMALL_CLASSES);
}

/* Every parameter (and buffer) of g's host copies, concatenated; NULL when
 * out of memory. */
static float *small_cnn_params(const mp_graph *g, size_t *n_out) {
    size_t n = 0;
    for (int k = 0; k < g->n_params; k++) n += (size_t)mp_shape_numel(&g->params[k].spec.shape);
    float *out = malloc(n * sizeof *out);
    for (int k = 0, at = 0; out && k < g->n_params; k++) {
        size_t c = (size_t)mp_shape_numel(&g->params[k].spec.shape);
        memcpy(out + at, g->params[k].data, c * sizeof(float));
        at += (int)c;
    }
    *n_out = n;
    return out;
}

/* ||a - ref|| / ||ref||. */
static double small_cnn_rel_diff(const float *a, const float *ref, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    return sqrt(d2 / (r2 > 0 ? r2 : 1e-30));
}

/* How far trained weights moved from the model's initial ones (relative);
 * -1 when the model cannot be built. */
static double small_cnn_moved(mp_precision prec, const float *trained, size_t n) {
    mp_model m;
    if (small_cnn_build(prec, false, &m) != MP_OK) return -1;
    size_t n_init = 0;
    float *init = small_cnn_params(m.g, &n_init);
    double e = init && n_init == n ? small_cnn_rel_diff(trained, init, n) : -1;
    free(init);
    mp_model_free(&m);
    return e;
}

#endif
