/* test_cuda_shared_weights.c — weights shared between nodes
 * (mp_graph_share_params, as a GAN's discriminator applied to real and to
 * generated images) train on the GPU as on the CPU under the f16/bf16
 * policies: every user of a shared weight reads the cast the optimizer
 * refreshes after each update. Once, only the weight's first user's cast
 * was refreshed and the other users computed with the initial weights for
 * the whole run (the GPU AC-GAN under amp-fp16 never learned).
 * A two-branch network (x -> fc -> tanh and x2 -> fc' -> tanh, fc' sharing
 * fc's weight and bias, summed, then a head and BCE with logits) trains 20
 * SGD steps on a CPU and a GPU trainer from the same weights and batches,
 * in fp32, amp-fp16 and amp-bf16; each parameter's movement (final -
 * initial) agrees within 1e-4 (fp32) or 3e-2 (amp) relative.
 * One line per case; exit 1 on any failure, 2 when no GPU can be opened.
 * Run by scripts/gpu-check on the GPU machine (not by ctest: CI has no GPU):
 *   build-gpu/tests/gpu/test_cuda_shared_weights */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "cuda/cuda_ctx.h"

enum { B = 16, F = 24, H = 32, STEPS = 20 };

typedef struct {
    mp_graph *g;
    mp_node x, x2, t, loss;
    mp_optimizer *opt;
    mp_trainer *t_;
} rig;

static mp_status rig_open(rig *r, mp_precision prec, mp_device dev) {
    mp_graph *g = r->g = mp_graph_create();
    r->x = mp_graph_targets(g, "x", F);
    r->x2 = mp_graph_targets(g, "x2", F);
    const mp_linear_opts lin = {.out_features = H, .bias = true};
    const mp_node a = mp_linear(g, "fc", r->x, lin);
    const mp_node b = mp_linear(g, "fc_shared", r->x2, lin);
    MP_TRY(mp_graph_share_params(g, b, a));
    const mp_node h = mp_add(g, "sum", mp_tanh(g, "ta", a), mp_tanh(g, "tb", b));
    const mp_node out = mp_linear(g, "head", h, (mp_linear_opts){.out_features = 1, .bias = true});
    r->t = mp_graph_targets(g, "t", 1);
    r->loss = mp_bce_with_logits(g, "loss", out, r->t);
    mp_graph_mark_output(g, r->loss);
    MP_TRY(mp_graph_apply_policy(g, (mp_policy_opts){.precision = prec}));
    mp_graph_init_params(g, 11);
    MP_TRY(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.2f}},
                               &r->opt));
    mp_trainer_opts to = {.batch = B, .device = dev, .loss = r->loss, .optimizer = r->opt};
    return mp_trainer_create(g, &to, &r->t_);
}

static void rig_close(rig *r) {
    mp_trainer_destroy(r->t_);
    mp_optimizer_destroy(r->opt);
    mp_graph_destroy(r->g);
}

/* Deterministic inputs and 0/1 targets of step k. */
static mp_status rig_step(rig *r, int k) {
    float x[B * F], x2[B * F], t[B];
    for (int i = 0; i < B * F; i++) {
        x[i] = sinf(0.37f * (float)(i + 13 * k));
        x2[i] = cosf(0.53f * (float)(i + 7 * k));
    }
    for (int i = 0; i < B; i++) t[i] = (float)((i + k) % 2);
    MP_TRY(mp_trainer_set_input(r->t_, r->x, x, B * F));
    MP_TRY(mp_trainer_set_input(r->t_, r->x2, x2, B * F));
    MP_TRY(mp_trainer_set_input(r->t_, r->t, t, B));
    MP_TRY(mp_trainer_step(r->t_, NULL, NULL));
    return mp_trainer_wait(r->t_, NULL);
}

static const char *const PARAMS[] = {"fc.weight", "fc.bias", "head.weight", "head.bias"};
enum { NP = 4, MAXN = H * F };

static double movement_error(const float *c0, const float *c1, const float *g1, int n) {
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        const double mc = (double)c1[i] - c0[i], mg = (double)g1[i] - c0[i];
        d += (mg - mc) * (mg - mc);
        r += mc * mc;
    }
    return r > 0 ? sqrt(d / r) : INFINITY;
}

static void run_case(mp_precision prec) {
    rig rc = {0}, rg = {0};
    const double tol = prec == MP_PRECISION_FP32 ? 1e-4 : 3e-2;
    const char *name = mp_precision_name(prec);
    if (rig_open(&rc, prec, (mp_device){MP_DEVICE_CPU, 0}) != MP_OK ||
        rig_open(&rg, prec, (mp_device){MP_DEVICE_CUDA, 0}) != MP_OK) {
        printf("FAIL %s: trainers: %s\n", name, mp_last_error());
        check_failed++;
        rig_close(&rc), rig_close(&rg);
        return;
    }
    static float init[NP][MAXN], cpu[NP][MAXN], gpu[NP][MAXN];
    int numel[NP];
    for (int p = 0; p < NP; p++) {
        mp_param_info pi;
        MP_ASSERT(mp_graph_param_info(rc.g, mp_graph_param_find(rc.g, PARAMS[p]), &pi) == MP_OK);
        numel[p] = (int)pi.numel;
        MP_ASSERT(mp_trainer_param_get(rc.t_, PARAMS[p], init[p], (size_t)numel[p]) == MP_OK);
    }
    mp_status s = MP_OK;
    for (int k = 0; k < STEPS && s == MP_OK; k++) {
        s = rig_step(&rc, k);
        if (s == MP_OK) s = rig_step(&rg, k);
    }
    CHECK(s == MP_OK, "%s: training: %s", name, mp_last_error());
    double worst = 0;
    for (int p = 0; s == MP_OK && p < NP; p++) {
        MP_ASSERT(mp_trainer_param_get(rc.t_, PARAMS[p], cpu[p], (size_t)numel[p]) == MP_OK);
        MP_ASSERT(mp_trainer_param_get(rg.t_, PARAMS[p], gpu[p], (size_t)numel[p]) == MP_OK);
        const double e = movement_error(init[p], cpu[p], gpu[p], numel[p]);
        CHECK(e <= tol, "%s: %s moved %.3e off the CPU's movement (relative; tolerance %g)", name, PARAMS[p], e, tol);
        worst = fmax(worst, e);
    }
    printf("%s %-8s %d steps: worst movement difference %.2e (tolerance %g)\n", worst <= tol && s == MP_OK ? "ok  " : "FAIL",
           name, STEPS, worst, tol);
    rig_close(&rc), rig_close(&rg);
}

int main(void) {
    if (mp_cuda_device_count() < 1) {
        printf("test_cuda_shared_weights: no CUDA device, nothing tested (%s)\n", mp_cuda_device_list());
        return 2;
    }
    run_case(MP_PRECISION_FP32);
    run_case(MP_PRECISION_AMP_FP16);
    run_case(MP_PRECISION_AMP_BF16);
    return test_summary("test_cuda_shared_weights");
}
