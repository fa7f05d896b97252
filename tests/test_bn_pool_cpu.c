/* test_bn_pool_cpu.c — a batch norm + ReLU fused into the 2x2 average pool
 * reading it on CPU plans (graph/plan_fuse.h): the pool applies the batch
 * norm as it loads its input, and the batch norm's backward reads the
 * pool's output gradient in place of the one the pool's backward would
 * write (ops/batchnorm2d_nhwc_kernels.inc; test_nhwc_kernels checks the
 * kernels themselves).
 *  1. two training steps of a small net (conv, batch norm + ReLU, 2x2 pool
 *     over 15 x 13, whose last row and column no window reaches, conv,
 *     batch norm + ReLU, 2x2 pool over 7 x 6, global pool, linear) fused
 *     and unfused (mp_plan_opts.no_bn_pool_fusion) in fp32, amp-bf16 and
 *     bf16, on arenas of NaN bytes (a read of something nobody wrote
 *     shows): the same loss, gradients and running statistics bit for bit;
 *     also at batch 5, whose rows two threads split inside a window;
 *  2. the same with each forward replayed by the overflow search and the
 *     backward checked, in both plans (the fused one then writes and reads
 *     the tensors apart; a replay updates the running statistics again):
 *     nothing found, the same values;
 *  3. overflow provenance: a batch norm whose output overflows, fused into
 *     the pool after it, is still the node the forward's replay names;
 *     reading its ReLU's output is an error naming the pool;
 *  4. nothing fused where it cannot run (amp-fp16's staged batch norm,
 *     channels-first plans), in inference plans, or when told not to; those
 *     steps still work. */
#include "bn_pool_common.h"
#include "cpu_fusion_steps.h"

enum { B = 4, BMAX = 5 };

/* 2x2 pools over 15 x 13 (a row and a column in no window) and 7 x 6. */
static const bnp_net NET = {.channels = 16, .H = 15, .W = 13, .pool2_k = 2};
static const mp_device CPU = {MP_DEVICE_CPU, 0};

/* How many batch norms a training plan of prec should fuse: both, where the
 * CPU's fusions run (cpu_fusion_steps.h) and the pool fusion is on. */
static int fused_wanted(mp_precision prec, bool channels_first) {
    return cpu_fusions_run(prec, channels_first) && !mp_env_get()->no_bn_pool_fusion ? 2 : 0;
}

/* Two training steps on the CPU, fused or not (cpu_fusion_steps). */
static mp_status net_steps(mp_model *m, int batch, bool fused, bool checked, bool channels_first, float *loss,
                           int *n_fused, bool *found) {
    MP_ASSERT(batch <= BMAX);
    const size_t nx = (size_t)batch * 3 * NET.H * NET.W;
    float *x = malloc(nx * sizeof *x);
    MP_ASSERT(x);
    int32_t y[BMAX];
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (size_t i = 0; i < nx; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < batch; i++) y[i] = (int32_t)((i * 7 + 3) % 10);
    const mp_plan_opts o = {.batch = batch, .training = true, .loss = m->loss, .no_bn_pool_fusion = !fused,
                            .channels_first = channels_first};
    const mp_status s = cpu_fusion_steps(m, o, x, nx, y, checked, bnp_fused_count, loss, n_fused, found);
    free(x);
    return s;
}

/* The fused plan (as asked) against the unfused one, bit for bit, both
 * stepped alike. */
static void exact_steps(mp_precision prec, bool checked, int batch, bool channels_first) {
    char pn[96];
    snprintf(pn, sizeof pn, "%s, batch %d%s%s", mp_precision_name(prec), batch, checked ? ", checked" : "",
             channels_first ? ", channels-first" : "");
    mp_model a = bnp_build(prec, NET), b = bnp_build(prec, NET);
    float la = 0, lb = 0;
    int na = 0, nb = 0;
    bool fa = false, fb = false;
    const mp_status sa = net_steps(&a, batch, true, checked, channels_first, &la, &na, &fa),
                    sb = net_steps(&b, batch, false, checked, channels_first, &lb, &nb, &fb);
    CHECK(sa == MP_OK && sb == MP_OK, "steps %s: %s", pn, mp_last_error());
    const int want = fused_wanted(prec, channels_first);
    CHECK(na == want && nb == 0, "steps %s: %d (fused) and %d (unfused) batch norms fused, want %d and 0", pn, na, nb,
          want);
    CHECK(!fa, "steps %s: the overflow search found a NaN/inf in finite steps", pn);
    int differ = -1;
    const bool same = sa == MP_OK && sb == MP_OK && cpu_fusion_same(pn, &a, &b, la, lb, &differ);
    printf("%s steps %s, %d batch norms fused: loss %.9g / %.9g, %d of %d parameters differ\n",
           same && !fa && na == want ? "ok  " : "FAIL", pn, na, la, lb, differ, a.g->n_params);
    mp_model_free(&a);
    mp_model_free(&b);
}

int main(void) {
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_BF16, MP_PRECISION_AMP_FP16};
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) exact_steps(precs[i], false, B, false);
    exact_steps(MP_PRECISION_AMP_BF16, false, BMAX, false); /* on two threads, a window's rows split */
    exact_steps(MP_PRECISION_FP32, true, B, false);
    exact_steps(MP_PRECISION_AMP_BF16, true, BMAX, false);
    exact_steps(MP_PRECISION_AMP_BF16, false, B, true); /* channels-first: nothing fused */
    bnp_inference_unfused(NET, CPU);
    /* gamma 3e38 overflows f32 */
    bnp_provenance(NET, MP_PRECISION_FP32, 3e38f, CPU, true, fused_wanted(MP_PRECISION_FP32, false) > 0);
    bnp_provenance(NET, MP_PRECISION_FP32, 3e38f, CPU, false, false);
    return test_summary("test_bn_pool_cpu");
}
