/* test_native_bf16.c — bf16 nodes run without the staged f32 emulation,
 * against that emulation of the same policy (mp_plan_opts.native_bf16 = MP_NATIVE_OFF):
 *  - BN, ReLU, add, mul and pooling read and write bf16 through our own kernels
 *    on every CPU, computing exactly what the emulation computes: where the
 *    convolutions stay emulated (no bf16 kernels) the bits must match;
 *  - convolutions go to oneDNN's bf16 primitives on CPUs that have bf16
 *    kernels (AVX-512 BF16 / AMX) and must agree with the emulation to bf16
 *    accuracy (losses, every parameter gradient);
 *  - with the f32 math for bf16 convolutions (bf16_conv_math.h: f32
 *    primitives between bf16 tensors, what CPUs with slow bf16 dot products
 *    run) they go native on every CPU with oneDNN, to the same accuracy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "amp/policy.h"
#include "check.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "graph/plan.h"
#include "ops/bf16_conv_math.h"

enum { B = 16 };

typedef struct {
    float loss;
    int native;           /* all native nodes */
    int native_primitive; /* of which convolutions (oneDNN bf16 primitives) */
    float *grads;
    int64_t n_grads;
} result;

static result run(bool native_allowed, mp_precision precision) {
    mp_graph *g = mp_graph_create();
    mp_node x = mp_graph_input(g, "x", 8, 10, 10);
    mp_node c = mp_conv2d(g, "c1", x, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1});
    c = mp_batchnorm2d(g, "bn1", c, (mp_batchnorm_opts){0});
    mp_node r = mp_relu(g, "r1", c);
    mp_node c2 = mp_conv2d(g, "c2", r, (mp_conv_opts){.out_channels = 16, .kernel = 3, .padding = 1, .bias = true});
    mp_node sum = mp_add(g, "sum", c2, r); /* r feeds two consumers: gradients add */
    mp_node prod = mp_mul(g, "prod", sum, c2); /* so does c2 */
    mp_node up = mp_conv_transpose2d(g, "up", prod, (mp_conv_opts){.out_channels = 8, .kernel = 2, .stride = 2});
    mp_node gap = mp_global_avgpool(g, "gap", up);
    mp_node fc = mp_linear(g, "fc", gap, (mp_linear_opts){.out_features = 5, .bias = true});
    mp_node y = mp_graph_labels(g, "y");
    mp_node loss = mp_softmax_cross_entropy(g, "loss", fc, y);
    mp_graph_mark_output(g, loss);
    MP_ASSERT(mp_graph_apply_policy(g, (mp_policy_opts){.precision = precision}) == MP_OK);
    mp_graph_init_params(g, 7);
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(g, (mp_plan_opts){.batch = B, .training = true, .loss = loss,
                                                    .native_bf16 = native_allowed ? MP_NATIVE_ON : MP_NATIVE_OFF},
                                 &p);
    MP_ASSERT(s == MP_OK);
    result res = {0};
    for (int i = 0; i < p->n; i++) {
        mp_op_kind k = g->nodes[i].desc.kind;
        res.native += p->nodes[i].native;
        res.native_primitive += p->nodes[i].native && (k == MP_OP_CONV2D || k == MP_OP_CONV_TRANSPOSE2D);
    }
    mp_rng rng;
    mp_rng_seed(&rng, 3);
    float in[B * 8 * 100];
    int32_t lab[B];
    for (int i = 0; i < B * 800; i++) in[i] = (float)mp_rng_normal(&rng);
    for (int i = 0; i < B; i++) lab[i] = (int32_t)mp_rng_below(&rng, 5);
    mp_plan_set_input(p, x, in, B * 800);
    mp_plan_set_labels(p, y, lab, B);
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    mp_plan_read(p, loss, &res.loss, 1);
    mp_graph_zero_grad(g);
    MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].spec.trainable) res.n_grads += mp_shape_numel(&g->params[i].spec.shape);
    res.grads = malloc((size_t)res.n_grads * sizeof(float));
    int64_t k = 0;
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].spec.trainable)
            for (int64_t j = 0; j < mp_shape_numel(&g->params[i].spec.shape); j++) res.grads[k++] = g->params[i].grad[j];
    mp_plan_destroy(p);
    mp_graph_destroy(g);
    return res;
}

static void compare(mp_precision precision, mp_bf16_math math) {
    const bool f32_math = mp_bf16_math_set(math) == MP_BF16_MATH_F32;
    bool bf16_cpu = mp_cpu_multiplies_bf16() || f32_math;
    result emu = run(false, precision), nat = run(true, precision);
    mp_bf16_math_set(MP_BF16_MATH_AUTO);
    char name[64];
    snprintf(name, sizeof name, "%s, %s", mp_precision_name(precision), mp_bf16_math_name(math));
    CHECK(emu.native == 0, "%s: MP_NATIVE_OFF must keep every node emulated", name);
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < emu.n_grads; i++) {
        d2 += (double)(nat.grads[i] - emu.grads[i]) * (nat.grads[i] - emu.grads[i]);
        r2 += (double)emu.grads[i] * emu.grads[i];
    }
    double rel = sqrt(d2 / fmax(r2, 1e-30));
    printf("%s: %d native bf16 nodes, %d of them convolutions (CPU bf16 kernels or f32 math: %s), loss native %.6f emulated "
           "%.6f, grad rel. diff %.3g\n",
           name, nat.native, nat.native_primitive, bf16_cpu ? "yes" : "no", nat.loss, emu.loss, rel);
    /* bn1, r1, sum, prod and gap run on bf16 kernels everywhere */
    CHECK(nat.native - nat.native_primitive == 5, "%s: %d non-convolution nodes native, expected 5", name,
          nat.native - nat.native_primitive);
    if (!mp_onednn_available() || !bf16_cpu) {
        /* emulated convolutions: the bf16 kernels compute what the emulation does, bit for bit */
        CHECK(nat.native_primitive == 0, "%s: convolutions went native without bf16 kernels", name);
        CHECK(nat.loss == emu.loss && rel == 0, "%s: bf16 kernels must match the emulation exactly (rel %g)", name, rel);
    } else {
        CHECK(nat.native_primitive >= 2, "%s: the bf16 convolutions must run natively on this CPU (%d did)", name,
              nat.native_primitive);
        CHECK(fabsf(nat.loss - emu.loss) <= 1e-2f * fabsf(emu.loss), "%s: loss %g vs %g", name, nat.loss, emu.loss);
        CHECK(rel < 3e-2, "%s: gradients differ by %g (bf16 accuracy expected)", name, rel);
    }
    CHECK(isfinite(nat.loss) && r2 > 0, "%s: finite loss and non-zero gradients", name);
    free(emu.grads);
    free(nat.grads);
}

int main(void) {
    const mp_bf16_math maths[] = {MP_BF16_MATH_DOT, MP_BF16_MATH_F32};
    for (int m = 0; m < 2; m++) {
        compare(MP_PRECISION_AMP_BF16, maths[m]);
        compare(MP_PRECISION_O2_BF16, maths[m]);
        compare(MP_PRECISION_BF16, maths[m]);
    }
    return test_summary("test_native_bf16");
}
