/* bn_pool_common.h — what the tests of a batch norm + ReLU fused into the
 * average pool reading it share (test_bn_pool_cpu.c on CPU plans,
 * gpu/test_cuda_bn_pool.c on GPU plans; graph/plan_fuse.h): the net, how
 * many batch norms a plan fused, and the inference and overflow-provenance
 * cases. Static functions for one test
 * program each. */
#ifndef MP_TESTS_BN_POOL_COMMON_H
#define MP_TESTS_BN_POOL_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"
#include "models/models.h"
#include "params_differ.h"

/* The net: input (3 x H x W) -> conv (channels) -> "c1_bn" + "c1_relu" ->
 * avgpool 2 "pool1" -> conv -> "c2_bn" + "c2_relu" -> avgpool pool2_k
 * "pool2" -> global pool -> linear (10 classes). */
typedef struct {
    int channels, H, W, pool2_k;
} bnp_net;

static mp_model bnp_build(mp_precision prec, bnp_net s) {
    mp_model m;
    memset(&m, 0, sizeof m);
    m.g = mp_graph_create();
    MP_ASSERT(m.g);
    mp_graph *g = m.g;
    const mp_conv_opts conv = {.out_channels = s.channels, .kernel = 3, .padding = 1};
    mp_node x = m.input = mp_graph_input(g, "input", 3, s.H, s.W);
    x = mp_relu(g, "c1_relu", mp_conv_bn(g, "c1", x, conv));
    x = mp_avgpool2d(g, "pool1", x, (mp_pool_opts){.kernel = 2});
    x = mp_relu(g, "c2_relu", mp_conv_bn(g, "c2", x, conv));
    x = mp_avgpool2d(g, "pool2", x, (mp_pool_opts){.kernel = s.pool2_k});
    x = mp_global_avgpool(g, "gap", x);
    x = mp_linear(g, "fc", x, (mp_linear_opts){.out_features = 10, .bias = true});
    MP_ASSERT(mp_model_finish(&m, x) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}) == MP_OK);
    mp_graph_init_params(g, 11);
    return m;
}

/* Batch norms plan p runs fused into a pool. */
static int bnp_fused_count(const mp_plan *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++) n += p->nodes[i].pool_fused && p->g->nodes[i].desc.kind == MP_OP_BATCHNORM2D;
    return n;
}

/* An inference plan fuses nothing. */
static void bnp_inference_unfused(bnp_net s, mp_device dev) {
    mp_model m = bnp_build(MP_PRECISION_AMP_BF16, s);
    mp_plan *p = NULL;
    const mp_status st =
        mp_plan_create(m.g, (mp_plan_opts){.batch = 2, .training = false, .loss = m.loss, .device = dev}, &p);
    int n = 0;
    for (int i = 0; st == MP_OK && i < p->n; i++) n += p->nodes[i].pool_fused != 0;
    CHECK(st == MP_OK && n == 0, "inference plan: %s, %d nodes marked fused into a pool",
          st == MP_OK ? "created" : mp_last_error(), n);
    printf("%s inference plan: %d nodes fused\n", st == MP_OK && n == 0 ? "ok  " : "FAIL", n);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

/* "c1_bn" with every gamma set to `gamma` overflows prec's storage: the
 * forward's replay must name it, fused into "pool1" (fused: asked for;
 * want_fused: what the plan should then do) or not; the fused ReLU's output
 * cannot be read, the unfused one can. */
static void bnp_provenance(bnp_net s, mp_precision prec, float gamma, mp_device dev, bool fused, bool want_fused) {
    enum { B = 4 };
    mp_model m = bnp_build(prec, s);
    int bn = -1, relu = -1;
    for (int i = 0; i < m.g->n_nodes; i++) {
        if (!strcmp(m.g->nodes[i].name, "c1_bn")) bn = i;
        if (!strcmp(m.g->nodes[i].name, "c1_relu")) relu = i;
    }
    MP_ASSERT(bn >= 0 && relu >= 0);
    float *g = m.g->params[m.g->nodes[bn].first_param].data;
    for (int c = 0; c < s.channels; c++) g[c] = gamma;
    const size_t nx = (size_t)B * 3 * s.H * s.W, nact = (size_t)B * s.channels * s.H * s.W;
    float *x = malloc(nx * sizeof *x), *act = malloc(nact * sizeof *act);
    MP_ASSERT(x && act);
    int32_t y[B] = {1, 2, 3, 4};
    mp_rng r;
    mp_rng_seed(&r, 9);
    for (size_t i = 0; i < nx; i++) x[i] = (float)mp_rng_normal(&r);
    mp_nonfinite_site site;
    memset(&site, 0, sizeof site);
    const mp_plan_opts o = {.batch = B, .training = true, .loss = m.loss, .no_bn_pool_fusion = !fused, .device = dev};
    mp_plan *p = NULL;
    mp_status st = mp_plan_create(m.g, o, &p);
    const bool marked = st == MP_OK && p->nodes[bn].pool_fused != 0;
    if (st == MP_OK) st = mp_plan_set_input(p, m.input, x, nx);
    if (st == MP_OK) st = mp_plan_set_labels(p, m.labels, y, B);
    if (st == MP_OK) st = mp_plan_forward(p);
    if (st == MP_OK) st = mp_plan_find_nonfinite_forward(p, &site);
    const char *named = site.found ? m.g->nodes[site.node].name : "nothing";
    const mp_status rs = st == MP_OK ? mp_plan_read(p, relu, act, nact) : MP_OK;
    if (st == MP_OK && marked)
        CHECK(rs == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "'pool1'"), "reading the fused ReLU's output: %s",
              rs == MP_OK ? "no error" : mp_last_error());
    else if (st == MP_OK)
        CHECK(rs == MP_OK, "reading the unfused ReLU's output: %s", mp_last_error());
    CHECK(st == MP_OK, "provenance (%s): %s", fused ? "fused" : "unfused", mp_last_error());
    CHECK(marked == want_fused, "provenance: the batch norm is %sfused into the pool, want %s", marked ? "" : "not ",
          want_fused ? "fused" : "apart");
    CHECK(site.found && site.node == bn && !site.backward, "provenance (%s): the replay names %s, want c1_bn",
          fused ? "fused" : "unfused", named);
    printf("%s provenance, batch norm %s: the replay names %s (%s)\n", st == MP_OK && site.node == bn ? "ok  " : "FAIL",
           marked ? "fused into the pool" : "apart", named, site.what);
    free(x), free(act);
    mp_plan_destroy(p);
    mp_model_free(&m);
}

#endif
