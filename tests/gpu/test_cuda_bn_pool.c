/* test_cuda_bn_pool.c — a batch norm + ReLU fused into the k x k average
 * pool (stride k, no padding) reading it (graph/plan_fuse.h): the pool
 * applies the batch norm as it loads its input, and the batch norm's
 * backward reads the pool's output gradient in place of the one the pool's
 * backward would write.
 *  1. a training step of a small net (conv, batch norm + ReLU, 2x2 pool,
 *     conv, batch norm + ReLU, 3x3 pool over a 10 x 7 image, whose last
 *     row and column no window reaches, global pool, linear) fused and
 *     unfused, in fp32, amp-bf16 and amp-fp16 (also fp32 at 12 channels,
 *     the pool's one-channel kernels, amp-bf16 at batch 48, and amp-bf16
 *     and fp32 on a 21 x 15 input, where pool1's 2x2 windows miss a row
 *     and a column too): the same
 *     loss, running statistics and gradients bit for bit
 *     (MIXPREC_DETERMINISTIC=1: every convolution on an algorithm free of
 *     atomics, the same in both plans; otherwise the first conv's weight
 *     gradient within 1e-5), on an arena of NaN bytes (MIXPREC_POISON_ARENA=1: a read of a
 *     gradient nobody wrote shows). Batch norm runs on our one-kernel
 *     passes (MIXPREC_CUDNN_BN=0, MIXPREC_BN_PERSIST=1) unless the
 *     environment says otherwise: scripts/gpu-check's gpu-bn mode runs this
 *     under the three-kernel passes too;
 *  2. a checked backward (the overflow search's replay) of a finite step
 *     finds nothing and leaves the same gradients: it writes the pool's
 *     input gradient it checks;
 *  3. overflow provenance: a batch norm whose output overflows f16, fused
 *     into the pool after it, is still the node the forward's replay names;
 *     reading its ReLU's output through mp_plan_read is an error naming
 *     the pool;
 *  4. inference plans and plans with no_bn_pool_fusion fuse nothing; where
 *     the batch norm's fast kernels decline its channels (12 in bf16) it
 *     runs apart and the step works.
 * Needs a GPU: one clear line and exit 2 without one. */
#include "bn_pool_common.h"
#include "cuda/cuda_ctx.h"

enum { B = 4, BMAX = 48 };
/* The input: 20 x 14, or 21 x 15 (odd_image: pool1's 2x2 windows reach
 * neither its last row nor its last column). */
static int H = 20, W = 14;

/* A 3x3 pool over 10 x 7 for pool2: row 9 and column 6 in no window. */
static bnp_net net_of(int channels) { return (bnp_net){.channels = channels, .H = H, .W = W, .pool2_k = 3}; }
static const mp_device GPU = {MP_DEVICE_CUDA, 0};

/* One training step on the GPU, fused or not: the loss, and the gradients
 * and running statistics in m's host copies; checked: the backward as the
 * overflow search replays it (*found: what it found). */
static mp_status net_step(mp_model *m, int batch, bool fused, bool checked, float *loss, int *n_fused,
                          bool *found) {
    MP_ASSERT(batch <= BMAX);
    float *x = malloc((size_t)batch * 3 * H * W * sizeof *x);
    if (!x) return mp_error(MP_ERR_NOMEM, "test: out of memory");
    int32_t y[BMAX];
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (int i = 0; i < batch * 3 * H * W; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < batch; i++) y[i] = (int32_t)((i * 7 + 3) % 10);
    mp_plan_opts o = {.batch = batch, .training = true, .loss = m->loss, .no_bn_pool_fusion = !fused,
                      .device = {MP_DEVICE_CUDA, 0}, .grads_in_arena = true};
    mp_plan *p = NULL;
    mp_status s = mp_plan_create(m->g, o, &p);
    *n_fused = s == MP_OK ? bnp_fused_count(p) : -1;
    if (s == MP_OK) s = mp_plan_set_input(p, m->input, x, (size_t)batch * 3 * H * W);
    if (s == MP_OK) s = mp_plan_set_labels(p, m->labels, y, batch);
    if (s == MP_OK) s = mp_plan_forward(p);
    if (s == MP_OK) s = mp_plan_read(p, m->loss, loss, 1);
    mp_graph_zero_grad(m->g);
    mp_nonfinite_site site;
    memset(&site, 0, sizeof site);
    if (s == MP_OK) s = checked ? mp_plan_backward_checked(p, 1.0f, &site) : mp_plan_backward(p, 1.0f);
    *found = site.found;
    if (s == MP_OK) s = mp_plan_sync_params(p, true);
    mp_plan_destroy(p);
    free(x);
    return s;
}

static void exact_step(mp_precision prec, bool checked, int channels, int batch) {
    char pn[64];
    snprintf(pn, sizeof pn, "%s, %d channels, batch %d", mp_precision_name(prec), channels, batch);
    const char *how = checked ? "checked backward" : "backward";
    mp_model a = bnp_build(prec, net_of(channels)), b = bnp_build(prec, net_of(channels));
    float la = 0, lb = 0;
    int na = 0, nb = 0;
    bool fa = false, fb = false;
    const mp_status sa = net_step(&a, batch, true, checked, &la, &na, &fa),
                    sb = net_step(&b, batch, false, false, &lb, &nb, &fb);
    CHECK(sa == MP_OK && sb == MP_OK, "exact step %s (%s): %s", pn, how, mp_last_error());
    const mp_env *env = mp_env_get();
    const int want = env->no_fusion || env->no_bn_fast || env->no_bn_pool_fusion || env->cudnn_bn == 1 ? 0 : 2;
    CHECK(na == want && nb == 0, "exact step %s: %d (fused) and %d (unfused) batch norms fused, want %d and 0", pn,
          na, nb, want);
    CHECK(!fa, "exact step %s: the checked backward found a NaN/inf in a finite step", pn);
    const char *first = "-";
    double rel = 0;
    /* without MIXPREC_DETERMINISTIC the first convolution's weight gradient may be summed with atomics */
    const char *loose = mp_env_get()->deterministic ? NULL : "c1.weight";
    const int differ = sa == MP_OK && sb == MP_OK ? params_differ(&a, &b, loose, &first, &rel) : -1;
    CHECK(!memcmp(&la, &lb, sizeof la), "exact step %s: loss fused %.9g, unfused %.9g", pn, la, lb);
    CHECK(differ == 0, "exact step %s (%s): %d parameters' gradients or running statistics differ (first %s, by %.3g "
          "of its largest value)", pn, how, differ, first, rel);
    printf("%s exact step %s (%s), %d batch norms fused: loss %.9g / %.9g, %d of %d parameters differ\n",
           sa == MP_OK && sb == MP_OK && !differ && la == lb && !fa ? "ok  " : "FAIL", pn, how, na, la, lb, differ,
           a.g->n_params);
    mp_model_free(&a);
    mp_model_free(&b);
}

/* 12 channels, which the batch norm's fast kernels decline in bf16 (not a multiple of 8): nothing fused, and
 * the step works. */
static void declined_step(void) {
    mp_model m = bnp_build(MP_PRECISION_AMP_BF16, net_of(12));
    float loss = 0;
    int n = -1;
    bool found = false;
    const mp_status s = net_step(&m, B, true, false, &loss, &n, &found);
    CHECK(s == MP_OK && n == 0 && isfinite(loss), "declined fusion (12 channels, bf16): %s, %d batch norms fused, "
          "loss %g", s == MP_OK ? "step ran" : mp_last_error(), n, loss);
    printf("%s declined fusion, 12 channels bf16: %d fused, loss %.6g\n",
           s == MP_OK && n == 0 && isfinite(loss) ? "ok  " : "FAIL", n, loss);
    mp_model_free(&m);
}

int main(void) {
    /* exact steps need batch norm on our kernels in both plans; an arena of NaN bytes shows unwritten reads;
     * set before the library first reads its environment; what the environment sets stays */
    setenv("MIXPREC_CUDNN_BN", "0", 0);
    setenv("MIXPREC_DETERMINISTIC", "1", 0); /* the same convolution algorithms, none summing with atomics */
    setenv("MIXPREC_BN_PERSIST", "1", 0);
    setenv("MIXPREC_POISON_ARENA", "1", 0);
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_bn_pool: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    const mp_precision precs[] = {MP_PRECISION_FP32, MP_PRECISION_AMP_BF16, MP_PRECISION_AMP_FP16};
    for (size_t i = 0; i < 3; i++) exact_step(precs[i], false, 16, B);
    exact_step(MP_PRECISION_FP32, false, 12, B); /* f32 groups of 4 channels: the pool's one-channel kernels */
    exact_step(MP_PRECISION_AMP_BF16, false, 16, BMAX); /* many chunks of rows */
    exact_step(MP_PRECISION_AMP_BF16, true, 16, B);
    H = 21, W = 15; /* odd_image */
    exact_step(MP_PRECISION_AMP_BF16, false, 16, BMAX);
    exact_step(MP_PRECISION_FP32, false, 16, B);
    H = 20, W = 14;
    bnp_inference_unfused(net_of(16), GPU);
    declined_step();
    /* gamma 1e6 overflows f16 */
    const mp_env *env = mp_env_get();
    const bool fusing = !env->no_fusion && !env->no_bn_fast && !env->no_bn_pool_fusion && env->cudnn_bn != 1;
    bnp_provenance(net_of(16), MP_PRECISION_FP16, 1e6f, GPU, true, fusing);
    bnp_provenance(net_of(16), MP_PRECISION_FP16, 1e6f, GPU, false, false);
    return test_summary("test_cuda_bn_pool");
}
