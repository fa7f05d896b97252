/* grad_ulp_spread.c — throwaway measurement (not built by CMake): how far
 * the fp32 CPU oracle's one-step gradients (oneDNN, the batch and weights of
 * tests/gpu/test_cuda_plan's one-step case) move when every input (and, with
 * PERTURB_W=1, every weight) moves one ulp at random, and with the reference
 * kernels' summation order. The moves are discrete (an element next to a
 * ReLU's zero or a max-pool tie flips); they set the fp32 tolerance of
 * test_cuda_plan (bench/NOTES.md v0.10).
 * Build (after cmake --build build):
 *   gcc -O2 -fopenmp -std=gnu11 -Isrc -Itests -Iinclude dev/grad_ulp_spread.c -o /tmp/gus \
 *     build/libmixprec.a -lm -ldnnl -lcjson -lpng -lz   (plus the CUDA/NCCL/MPI libraries of a CUDA build)
 * Run:   /tmp/gus [resnet18|cnn10|small]                                  */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "amp/policy.h"
#include "check.h"
#include "core/rng.h"
#include "graph/plan.h"
#include "models/models.h"
enum { B = 16 };
static mp_model build(const char *name, int c, int h, int w) {
    mp_model m;
    MP_ASSERT(mp_model_build(name, c, h, w, 10, &m) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_FP32}) == MP_OK);
    mp_graph_init_params(m.g, 5);
    return m;
}
static double grel(const mp_graph *a, const mp_graph *b) {
    double d2 = 0, r2 = 0;
    for (int k = 0; k < b->n_params; k++) {
        if (!b->params[k].spec.trainable) continue;
        for (int64_t i = 0; i < mp_shape_numel(&b->params[k].spec.shape); i++) {
            double d = (double)a->params[k].grad[i] - b->params[k].grad[i];
            d2 += d * d; r2 += (double)b->params[k].grad[i] * b->params[k].grad[i];
        }
    }
    return sqrt(d2 / r2);
}
static void grads(mp_model *m, const float *x, size_t n, const int32_t *y, bool onednn) {
    mp_plan *p = NULL;
    MP_ASSERT(mp_plan_create(m->g, (mp_plan_opts){.batch = B, .training = true, .loss = m->loss, .use_onednn = onednn},
                             &p) == MP_OK);
    mp_plan_set_input(p, m->input, x, n);
    mp_plan_set_labels(p, m->labels, y, B);
    MP_ASSERT(mp_plan_forward(p) == MP_OK);
    mp_graph_zero_grad(m->g);
    MP_ASSERT(mp_plan_backward(p, 1.0f) == MP_OK);
    mp_plan_destroy(p);
}
int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "resnet18";
    size_t n = (size_t)B * 3 * 32 * 32;
    float *x = malloc(n * 4), *xp = malloc(n * 4);
    int32_t y[B];
    mp_rng r; mp_rng_seed(&r, 9);
    for (size_t i = 0; i < n; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < B; i++) y[i] = (int32_t)mp_rng_below(&r, 10);
    mp_model o = build(name, 3, 32, 32); grads(&o, x, n, y, true);
    mp_model a = build(name, 3, 32, 32); grads(&a, x, n, y, false);
    printf("%s ref kernels vs onednn: %.3e\n", name, grel(a.g, o.g));
    for (int t = 0; t < 8; t++) {
        mp_rng q; mp_rng_seed(&q, 100 + t);
        for (size_t i = 0; i < n; i++) xp[i] = nextafterf(x[i], mp_rng_below(&q, 2) ? INFINITY : -INFINITY);
        mp_model b = build(name, 3, 32, 32);
        if (getenv("PERTURB_W"))
            for (int k = 0; k < b.g->n_params; k++) {
                mp_gparam *gp = &b.g->params[k];
                if (!gp->spec.trainable) continue;
                for (int64_t i = 0; i < mp_shape_numel(&gp->spec.shape); i++)
                    gp->data[i] = nextafterf(gp->data[i], mp_rng_below(&q, 2) ? INFINITY : -INFINITY);
            }
        grads(&b, xp, n, y, true);
        printf("%s %s moved 1 ulp, trial %d: %.3e\n", name, getenv("PERTURB_W") ? "inputs+weights" : "inputs", t,
               grel(b.g, o.g));
        mp_model_free(&b);
    }
    return 0;
}
