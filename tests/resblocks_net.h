/* resblocks_net.h — a small residual net whose block tails a plan fuses
 * into their batch norms (graph/plan_fuse.h), shared by the tests of that
 * fusion on GPU plans (gpu/test_cuda_bn_add_relu.c) and CPU plans
 * (test_bn_add_cpu.c). One static function per test program. */
#ifndef MP_TESTS_RESBLOCKS_NET_H
#define MP_TESTS_RESBLOCKS_NET_H

#include "models/models.h"

/* Adds of resblocks that a plan fuses into a batch norm (a_add, m_add,
 * b_add, t_add; "late" adds two ReLU outputs). */
enum { RESBLOCKS_FUSED_ADDS = 4 };

/* input -> stem conv+BN+ReLU r0 -> [conv+BN + r0, ReLU] r1 -> late = r1 + r0
 * -> mid = conv+BN + late (no ReLU) -> [conv+BN+ReLU s2 of mid, conv+BN +
 * projection conv+BN of late, ReLU] t -> conv+BN + t (no ReLU) -> gap -> fc.
 * r0 is read by the late add after the fused one, late by the projection
 * after mid's: their gradients are written there first and the fused
 * backwards add to them. */
static mp_status resblocks(mp_model *m, int c, int h, int w, int classes) {
    mp_graph *g = m->g;
    mp_node x = m->input = mp_graph_input(g, "input", c, h, w);
    mp_node r0 = mp_conv_bn_relu(g, "stem", x, 20, 3, 1);
    mp_node a = mp_conv_bn(g, "a_conv", r0, (mp_conv_opts){.out_channels = 20, .kernel = 3, .padding = 1});
    mp_node r1 = mp_relu(g, "a_relu", mp_add(g, "a_add", a, r0));
    mp_node late = mp_add(g, "late", r1, r0);
    mp_node mb = mp_conv_bn(g, "m_conv", late, (mp_conv_opts){.out_channels = 20, .kernel = 3, .padding = 1});
    mp_node mid = mp_add(g, "m_add", mb, late);
    mp_node b = mp_conv_bn_relu(g, "b_conv1", mid, 40, 3, 2);
    b = mp_conv_bn(g, "b_conv2", b, (mp_conv_opts){.out_channels = 40, .kernel = 3, .padding = 1});
    mp_node sc = mp_conv_bn(g, "b_shortcut", late, (mp_conv_opts){.out_channels = 40, .kernel = 1, .stride = 2});
    mp_node y = mp_relu(g, "b_relu", mp_add(g, "b_add", b, sc));
    mp_node t = mp_conv_bn(g, "t_conv", y, (mp_conv_opts){.out_channels = 40, .kernel = 3, .padding = 1});
    y = mp_add(g, "t_add", t, y);
    y = mp_global_avgpool(g, "gap", y);
    y = mp_linear(g, "fc", y, (mp_linear_opts){.out_features = classes, .bias = true});
    return mp_model_finish(m, y);
}

#endif
