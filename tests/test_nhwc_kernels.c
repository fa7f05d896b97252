/* test_nhwc_kernels.c — the channels-last (NHWC) CPU kernels against their
 * NCHW counterparts, on every fast instruction set this CPU runs, f32 and
 * bf16: random NCHW data is transposed to NHWC, the NHWC kernel runs (every
 * output and the workspace poisoned with NaN bytes first), its results are
 * transposed back and compared with
 *  - batch norm (training and inference forward, ReLU fused or not;
 *    backward with batch or running statistics, masked by a ReLU or not):
 *    the NCHW fast kernels (mp_bn_*_cpu), within 1e-5 (f32; bf16 outputs
 *    1e-3, a rounding apart) — output, input gradient, saved mean / invstd,
 *    running statistics; gamma / beta gradients within 1e-6 of the size of
 *    each channel's sum of absolute terms (cancellation) — a channel at mean 300,
 *    std 0.01 included, C = 1, C not a multiple of 16, C above one tile,
 *    few rows; a second run repeats the first bit for bit, and a call that
 *    wants only some gradients writes the same ones; the fused ReLU's mask
 *    in the backward (computed from x, or read from y) against the
 *    forward's y, bit for bit, with channels on the ReLU's edge (+0, values
 *    bf16 or f16 rounds to +0), also after gamma and beta changed;
 *  - 2x2 stride-2 average pooling: the NCHW fast kernel and the reference,
 *    bit for bit, odd heights and widths included;
 *  - a training batch norm + ReLU fused into that pool (the pool applying
 *    it, the batch norm's backward reading the pool's output gradient)
 *    against the kernels apart, bit for bit, on 1 to 3 threads;
 *  - global average pooling: the reference, within 1e-6 (and how many values
 *    differ at all is printed). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/bf16_inline.h"
#include "core/rng.h"
#include "op_harness.h"
#include "ops/batchnorm2d_cpu.h"
#include "ops/cpu_fast.h"
#include "ops/global_avgpool_cpu.h"
#include "ops/pool2d_cpu.h"

/* the worst error of each kind over the whole run (printed at the end) */
enum { W_Y, W_DX, W_STAT, W_RUN, W_PGRAD, W_GAP, W_COUNT };
static const char *const worst_name[W_COUNT] = {"bn output",          "bn input gradient", "bn mean/invstd",
                                                "bn running stats",   "bn gamma/beta grad*", "global avgpool"};
static double worst[2][W_COUNT]; /* [bf16][kind] */

static size_t esize(mp_dtype dt) { return dt == MP_DTYPE_BF16 ? 2 : 4; }

static double get(mp_dtype dt, const void *p, int64_t i) {
    return dt == MP_DTYPE_BF16 ? mp_bf16_bits_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void put(mp_dtype dt, void *p, int64_t i, float v) {
    if (dt == MP_DTYPE_BF16)
        ((uint16_t *)p)[i] = mp_f32_to_bf16_bits(v);
    else
        ((float *)p)[i] = v;
}

/* NHWC result transposed back to NCHW in a fresh buffer (caller frees) */
static void *back(mp_dtype dt, const void *nhwc, int N, int C, int64_t HW) {
    void *p = check_alloc_poisoned((size_t)N * C * HW * esize(dt));
    mp_transpose_batch(p, nhwc, esize(dt), N, HW, C);
    return p;
}

/* ||a - b|| / ||b||; a NaN or inf in either counts as infinite */
static double rel_l2(mp_dtype dt, const void *a, const void *b, int64_t n) {
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = get(dt, a, i), y = get(dt, b, i);
        if (!isfinite(x) || !isfinite(y)) return INFINITY;
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    return sqrt(d2) / fmax(sqrt(r2), 1e-30);
}

/* max |a - b| / max |b| */
static double rel_max(mp_dtype dt, const void *a, const void *b, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = get(dt, a, i), y = get(dt, b, i);
        if (!isfinite(x) || !isfinite(y)) return INFINITY;
        d = fmax(d, fabs(x - y));
        r = fmax(r, fabs(y));
    }
    return d / fmax(r, 1e-30);
}

/* The largest |a[c] - b[c]| over C per-channel sums, each relative to its
 * own channel's sum of absolute terms (abs_terms[c]): a float sum's rounding
 * error is bounded by that, not by the sum itself, which cancellation can
 * make small (Σ dy over a few elements of either sign) */
static double rel_to_terms(const float *a, const float *b, const double *abs_terms, int C) {
    double worst_c = 0;
    for (int c = 0; c < C; c++) {
        if (!isfinite(a[c]) || !isfinite(b[c])) return INFINITY;
        const double e = fabs((double)a[c] - b[c]) / fmax(abs_terms[c], 1e-30);
        if (e > worst_c) worst_c = e;
    }
    return worst_c;
}

static void note(mp_dtype dt, int kind, double e) {
    double *w = &worst[dt == MP_DTYPE_BF16][kind];
    if (!(e <= *w)) *w = e; /* NaN sticks */
}

typedef struct {
    int N, C, H, W;
    bool shifted; /* last channel: 300 + 0.01 N(0,1) */
} bn_shape;

/* The NHWC backward with the fused ReLU's mask (read from ymask, or
 * computed when ymask is NULL, from scale/shift or the statistics) against
 * no ReLU on dy zeroed where yref <= 0: the same bits of dx, dgamma and
 * dbeta. With ymask (f32): returns whether the mask computed again instead
 * gives another dbeta, as where ymask was rounded to zero after the kernel. */
static bool check_bn_mask(const char *tag, const char *st, mp_dtype dt, const void *xh, const void *yref,
                             const void *ymask, const void *dyh, const float *gamma, const float *beta,
                             const float *scale, const float *shift, bool bs, const double *mean, const double *is,
                             const float *rm, const float *rv, int64_t M, int C, double eps, void *ws, size_t wsb) {
    const int64_t n = M * C;
    const size_t bytes = (size_t)n * esize(dt);
    void *dym = check_alloc_poisoned(bytes), *dxa = check_alloc_poisoned(bytes), *dxb = check_alloc_poisoned(bytes);
    float *dga = check_alloc_poisoned(C * 4), *dba = check_alloc_poisoned(C * 4), *dgb = check_alloc_poisoned(C * 4),
          *dbb = check_alloc_poisoned(C * 4);
    int64_t masked = 0;
    for (int64_t i = 0; i < n; i++) {
        const bool off = get(dt, yref, i) <= 0;
        masked += off;
        put(dt, dym, i, off ? 0.0f : get(dt, dyh, i));
    }
    memset(ws, 0xFF, wsb);
    mp_bn_bwd_cpu_nhwc(dt, xh, ymask, dyh, NULL, dxa, NULL, gamma, beta,
                       true, scale, shift, dga, dba, bs, mean, is, rm, rv,
                       M, C, eps, ws);
    mp_bn_bwd_cpu_nhwc(dt, xh, NULL, dym, NULL, dxb, NULL, gamma, beta,
                       false, NULL, NULL, dgb, dbb, bs, mean, is, rm, rv, M,
                       C, eps, ws);
    CHECK(!memcmp(dxa, dxb, bytes) && !memcmp(dga, dgb, C * 4) && !memcmp(dba, dbb, C * 4),
          "%s backward (%s): the ReLU mask differs from y's (%lld of %lld masked)", tag, st, (long long)masked,
          (long long)n);
    if (C >= 8) /* the edge channels' zeros are masked, the rest of the data half masked */
        CHECK(masked > 0 && masked < n, "%s backward (%s): %lld of %lld masked, none or all", tag, st,
              (long long)masked, (long long)n);
    bool differ = false;
    if (ymask && dt == MP_DTYPE_F32) {
        memset(ws, 0xFF, wsb);
        mp_bn_bwd_cpu_nhwc(dt, xh, NULL, dyh, NULL, dxb, NULL, gamma, beta,
                           true, scale, shift, dgb, dbb, bs, mean, is, rm,
                           rv, M, C, eps, ws);
        differ = memcmp(dba, dbb, C * 4) != 0;
    }
    free(dym), free(dxa), free(dxb), free(dga), free(dba), free(dgb), free(dbb);
    return differ;
}

/* One shape, dtype and relu setting: train forward, eval forward, backward
 * (batch statistics or running ones) — NHWC against NCHW, the NCHW backward
 * masked by its forward's y when relu, the NHWC one computing the mask; then
 * (relu) that mask against the NHWC forward's own y, bit for bit, from the
 * saved scale and shift, from the statistics, and read from a y rounded to
 * f16 after the kernel (a staged call). */
static void check_bn(bn_shape sh, mp_dtype dt, bool relu, uint64_t seed) {
    const int N = sh.N, C = sh.C;
    const int64_t HW = (int64_t)sh.H * sh.W, M = N * HW, n = M * C;
    const size_t es = esize(dt), bytes = (size_t)n * es;
    const double eps = 1e-5, mom = 0.1;
    const char *isa = mp_fast_isa_name(mp_fast_isa_current());
    char tag[128];
    snprintf(tag, sizeof tag, "bn %s %dx%dx%dx%d%s%s on %s", mp_dtype_name(dt), N, C, sh.H, sh.W,
             sh.shifted ? " (mean-300 channel)" : "", relu ? " +relu" : "", isa);
    /* tolerances: f32 float arithmetic summed in another order; bf16 outputs a rounding apart */
    const double tol = 1e-5, tol_act = dt == MP_DTYPE_F32 ? 1e-5 : 1e-3;

    mp_rng g;
    mp_rng_seed(&g, seed);
    void *x = check_alloc_poisoned(bytes), *dy = check_alloc_poisoned(bytes), *xh = check_alloc_poisoned(bytes),
         *dyh = check_alloc_poisoned(bytes);
    for (int64_t i = 0; i < n; i++) put(dt, x, i, (float)(mp_rng_normal(&g) * 2.0 + 0.5));
    for (int64_t i = 0; i < n; i++) put(dt, dy, i, (float)mp_rng_normal(&g));
    if (sh.shifted)
        for (int k = 0; k < N; k++)
            for (int64_t i = 0; i < HW; i++)
                put(dt, x, ((int64_t)k * C + C - 1) * HW + i, (float)(300.0 + 0.01 * mp_rng_normal(&g)));
    float *gamma = malloc(C * 4), *beta = malloc(C * 4), *rm0 = malloc(C * 4), *rv0 = malloc(C * 4);
    for (int c = 0; c < C; c++) {
        gamma[c] = (float)(1.0 + 0.5 * mp_rng_normal(&g));
        beta[c] = (float)(0.3 * mp_rng_normal(&g));
        rm0[c] = (float)mp_rng_normal(&g);
        rv0[c] = (float)(0.2 + 2 * mp_rng_uniform(&g));
    }
    if (C >= 8) /* channels whose every output sits on the ReLU's edge: 0, positive values that bf16 rounds to
                 * +0 (bits <= 0x8000, 2^-134) or not (just above), and one that f16 storage rounds to +0; the
                 * backward's mask must follow the forward's y there too */
        for (int c = 0; c < 5; c++)
            gamma[c] = 0, beta[c] = (const float[]){0.0f, 0x1p-134f, 0x1.02p-134f, -0.0f, 0x1p-26f}[c];
    mp_transpose_batch(xh, x, es, N, C, HW);
    mp_transpose_batch(dyh, dy, es, N, C, HW);

    const size_t wsb = mp_bn_nhwc_workspace_bytes(C);
    void *ws = check_alloc_poisoned(wsb);
    float *rm1 = malloc(C * 4), *rv1 = malloc(C * 4), *rm2 = malloc(C * 4), *rv2 = malloc(C * 4);
    double *mean1 = check_alloc_poisoned(C * 8), *is1 = check_alloc_poisoned(C * 8);
    double *mean2 = check_alloc_poisoned(C * 8), *is2 = check_alloc_poisoned(C * 8);
    /* the forward's scale, shift and float mean */
    float *sc2 = check_alloc_poisoned(C * 4), *sh2 = check_alloc_poisoned(C * 4), *mu2 = check_alloc_poisoned(C * 4);
    void *y1 = check_alloc_poisoned(bytes), *y2h = check_alloc_poisoned(bytes);

    /* training forward */
    memcpy(rm1, rm0, C * 4), memcpy(rv1, rv0, C * 4), memcpy(rm2, rm0, C * 4), memcpy(rv2, rv0, C * 4);
    mp_bn_fwd_train_cpu(dt, x, y1, gamma, beta, rm1, rv1, mean1, is1, N, C, HW, eps, mom, relu);
    mp_bn_fwd_train_cpu_nhwc(dt, xh, NULL, y2h, gamma, beta, rm2, rv2, mean2, is2, sc2, sh2, mu2, M, C, eps, mom, relu,
                             true, ws);
    void *y2 = back(dt, y2h, N, C, HW);
    double e = rel_l2(dt, y2, y1, n), em = rel_max(dt, y2, y1, n);
    note(dt, W_Y, dt == MP_DTYPE_F32 ? fmax(e, em) : e);
    CHECK(e < tol_act, "%s training: output rel. diff %g (tolerance %g)", tag, e, tol_act);
    if (dt == MP_DTYPE_F32) CHECK(em < tol, "%s training: output max rel. diff %g (tolerance %g)", tag, em, tol);
    double es_ = 0, er = 0;
    for (int c = 0; c < C; c++) {
        /* the mean in units of the channel's standard deviation, invstd relative */
        es_ = fmax(es_, fabs(mean2[c] - mean1[c]) * is1[c]);
        es_ = fmax(es_, fabs(is2[c] - is1[c]) / is1[c]);
        if (isnan(mean2[c]) || isnan(is2[c])) es_ = INFINITY;
        er = fmax(er, fabs((double)rm2[c] - rm1[c]) / (fabs(rm1[c]) + 1 / is1[c]));
        er = fmax(er, fabs((double)rv2[c] - rv1[c]) / fabs(rv1[c]));
        if (isnan(rm2[c]) || isnan(rv2[c])) er = INFINITY;
    }
    note(dt, W_STAT, es_);
    note(dt, W_RUN, er);
    CHECK(es_ < tol, "%s training: saved mean/invstd differ by %g (tolerance %g)", tag, es_, tol);
    CHECK(er < tol, "%s training: running mean/var differ by %g (tolerance %g)", tag, er, tol);
    /* again: the same bits (fixed thread count) */
    {
        void *y3h = check_alloc_poisoned(bytes);
        double *mean3 = check_alloc_poisoned(C * 8), *is3 = check_alloc_poisoned(C * 8);
        float *sc3 = check_alloc_poisoned(C * 4), *sh3 = check_alloc_poisoned(C * 4),
              *mu3 = check_alloc_poisoned(C * 4);
        memcpy(rm2, rm0, C * 4), memcpy(rv2, rv0, C * 4);
        memset(ws, 0xFF, wsb);
        mp_bn_fwd_train_cpu_nhwc(dt, xh, NULL, y3h, gamma, beta, rm2, rv2, mean3, is3, sc3, sh3, mu3, M, C, eps, mom,
                                 relu, true, ws);
        CHECK(!memcmp(y3h, y2h, bytes) && !memcmp(mean3, mean2, C * 8) && !memcmp(is3, is2, C * 8) &&
                  !memcmp(sc3, sc2, C * 4) && !memcmp(sh3, sh2, C * 4) && !memcmp(mu3, mu2, C * 4),
              "%s training: a second run differs", tag);
        for (int c = 0; c < C; c++)
            CHECK(mu2[c] == (float)mean2[c], "%s training: channel %d's float mean %.9g is not its mean %.17g rounded",
                  tag, c, mu2[c], mean2[c]);
        free(y3h), free(mean3), free(is3), free(sc3), free(sh3), free(mu3);
    }

    /* inference forward */
    void *y4h = check_alloc_poisoned(bytes);
    mp_bn_fwd_eval_cpu(dt, x, y1, gamma, beta, rm0, rv0, N, C, HW, eps, relu);
    mp_bn_fwd_eval_cpu_nhwc(dt, xh, NULL, y4h, gamma, beta, rm0, rv0, M, C, eps, relu);
    void *y4 = back(dt, y4h, N, C, HW);
    e = rel_l2(dt, y4, y1, n), em = rel_max(dt, y4, y1, n);
    note(dt, W_Y, dt == MP_DTYPE_F32 ? fmax(e, em) : e);
    CHECK(e < tol_act, "%s inference: output rel. diff %g (tolerance %g)", tag, e, tol_act);
    if (dt == MP_DTYPE_F32) CHECK(em < tol, "%s inference: output max rel. diff %g (tolerance %g)", tag, em, tol);

    /* backward: both from the NCHW forward's statistics (training: batch statistics; inference: the running
     * ones), the NCHW kernels masked by that forward's y, the NHWC ones recomputing the mask */
    mp_bn_fwd_train_cpu(dt, x, y1, gamma, beta, rm1, rv1, mean1, is1, N, C, HW, eps, mom, relu);
    void *yev = check_alloc_poisoned(bytes);
    mp_bn_fwd_eval_cpu(dt, x, yev, gamma, beta, rm0, rv0, N, C, HW, eps, relu);
    for (int bs = 1; bs >= 0; bs--) {
        void *dx1 = check_alloc_poisoned(bytes), *dx2h = check_alloc_poisoned(bytes),
             *dx3h = check_alloc_poisoned(bytes);
        float *dg1 = check_alloc_poisoned(C * 4), *db1 = check_alloc_poisoned(C * 4);
        float *dg2 = check_alloc_poisoned(C * 4), *db2 = check_alloc_poisoned(C * 4);
        float *dg3 = check_alloc_poisoned(C * 4), *db3 = check_alloc_poisoned(C * 4);
        memset(ws, 0xFF, wsb);
        mp_bn_bwd_cpu(dt, x, relu ? (bs ? y1 : yev) : NULL, dy, dx1, gamma, dg1, db1, bs, mean1, is1, rm0, rv0, N, C,
                      HW, eps);
        mp_bn_bwd_cpu_nhwc(dt, xh, NULL, dyh, NULL, dx2h, NULL, gamma, beta,
                           relu, NULL, NULL, dg2, db2, bs, mean1, is1, rm0,
                           rv0, M, C, eps, ws);
        void *dx2 = back(dt, dx2h, N, C, HW);
        const char *st = bs ? "batch statistics" : "running statistics";
        e = rel_l2(dt, dx2, dx1, n), em = rel_max(dt, dx2, dx1, n);
        note(dt, W_DX, dt == MP_DTYPE_F32 ? fmax(e, em) : e);
        CHECK(e < tol_act, "%s backward (%s): input gradient rel. diff %g (tolerance %g)", tag, st, e, tol_act);
        if (dt == MP_DTYPE_F32)
            CHECK(em < tol, "%s backward (%s): input gradient max rel. diff %g (tolerance %g)", tag, st, em, tol);
        /* Σ |dy| and Σ |dy · xhat| per channel (the mask left out: a bound), with the statistics in use */
        double *abs_db = calloc(C, 8), *abs_dg = calloc(C, 8);
        MP_ASSERT(abs_db && abs_dg);
        for (int k = 0; k < N; k++)
            for (int c = 0; c < C; c++)
                for (int64_t i = 0; i < HW; i++) {
                    const int64_t j = ((int64_t)k * C + c) * HW + i;
                    const double xhat = bs ? (get(dt, x, j) - mean1[c]) * is1[c]
                                           : (get(dt, x, j) - rm0[c]) / sqrt((double)rv0[c] + eps);
                    abs_db[c] += fabs(get(dt, dy, j)), abs_dg[c] += fabs(get(dt, dy, j) * xhat);
                }
        const double eg = rel_to_terms(dg2, dg1, abs_dg, C), eb = rel_to_terms(db2, db1, abs_db, C);
        free(abs_db), free(abs_dg);
        note(dt, W_PGRAD, fmax(eg, eb));
        CHECK(eg < 1e-6, "%s backward (%s): gamma gradient diff %g of its terms' size (tolerance 1e-6)", tag, st, eg);
        CHECK(eb < 1e-6, "%s backward (%s): beta gradient diff %g of its terms' size (tolerance 1e-6)", tag, st, eb);
        /* only some outputs wanted: the same values where written, nothing else */
        mp_bn_bwd_cpu_nhwc(dt, xh, NULL, dyh, NULL, dx3h, NULL, gamma, beta,
                           relu, NULL, NULL, NULL, NULL, bs, mean1, is1,
                           rm0, rv0, M, C, eps, ws);
        mp_bn_bwd_cpu_nhwc(dt, xh, NULL, dyh, NULL, NULL, NULL, gamma, beta,
                           relu, NULL, NULL, dg3, db3, bs, mean1, is1, rm0,
                           rv0, M, C, eps, ws);
        CHECK(!memcmp(dx3h, dx2h, bytes), "%s backward (%s): dx alone differs", tag, st);
        CHECK(!memcmp(dg3, dg2, C * 4) && !memcmp(db3, db2, C * 4),
              "%s backward (%s): dgamma/dbeta alone differ", tag, st);
        if (relu) { /* the NHWC backward's mask is the NHWC forward's y <= 0 (training: with its own statistics),
                     * bit for bit: the same results as no ReLU on dy zeroed there */
            const double *mean = bs ? mean2 : mean1, *is = bs ? is2 : is1;
            void *yh = bs ? y2h : y4h;
            check_bn_mask(tag, st, dt, xh, yh, NULL, dyh, gamma, beta, bs ? sc2 : NULL, bs ? sh2 : NULL, bs, mean, is,
                          rm0, rv0, M, C, eps, ws, wsb);
            if (bs) { /* gamma and beta stepped since the forward (a trainer's earlier group): the mask stays y's */
                float *g2 = malloc(C * 4), *b2 = malloc(C * 4);
                for (int c = 0; c < C; c++) g2[c] = 2 * gamma[c] + 0.5f, b2[c] = beta[c] + 1;
                check_bn_mask(tag, "batch statistics, parameters changed", dt, xh, yh, NULL, dyh, g2, b2, sc2, sh2,
                              true, mean, is, rm0, rv0, M, C, eps, ws, wsb);
                free(g2), free(b2);
            }
            if (bs) /* from the statistics instead of the saved scale and shift */
                check_bn_mask(tag, "batch statistics, constants from them", dt, xh, yh, NULL, dyh, gamma, beta, NULL,
                              NULL, true, mean, is, rm0, rv0, M, C, eps, ws, wsb);
            if (dt == MP_DTYPE_F32) { /* y rounded to f16 after the kernel (staged): the mask read from it */
                void *y16 = check_alloc_poisoned(bytes);
                for (int64_t i = 0; i < n; i++) put(dt, y16, i, mp_f16_to_f32(mp_f32_to_f16(get(dt, yh, i))));
                const bool differ = check_bn_mask(tag, bs ? "batch statistics, y rounded to f16"
                                                              : "running statistics, y rounded to f16",
                                                     dt, xh, y16, y16, dyh, gamma, beta, bs ? sc2 : NULL,
                                                     bs ? sh2 : NULL, bs, mean, is, rm0, rv0, M, C, eps, ws, wsb);
                if (C >= 8) /* the 2^-26 channel: f32 y > 0, stored 0 */
                    CHECK(differ, "%s backward (%s): rounding y to f16 zeroed no positive output", tag, st);
                free(y16);
            }
        }
        free(dx1), free(dx2h), free(dx3h), free(dx2), free(dg1), free(db1), free(dg2), free(db2), free(dg3),
            free(db3);
    }
    free(x), free(dy), free(xh), free(dyh), free(gamma), free(beta), free(rm0), free(rv0), free(ws);
    free(rm1), free(rv1), free(rm2), free(rv2), free(mean1), free(is1), free(mean2), free(is2), free(sc2), free(sh2),
        free(mu2);
    free(y1), free(y2h), free(y2), free(y4h), free(y4), free(yev);
}

/* A pooling op's reference (or NCHW fast path) through its vtable on dt
 * tensors x (NCHW) and dy: writes y and dx. */
static void run_op(mp_op_kind kind, mp_impl impl, mp_shape s, mp_dtype dt, const void *x, const void *dy, void *y,
                   void *dx) {
    op_fixture f;
    const mp_op_attr a = kind == MP_OP_AVGPOOL2D ? (mp_op_attr){.pool = {.kernel = 2, .stride = 2}} : (mp_op_attr){0};
    MP_ASSERT(op_fixture_init(&f, kind, a, 1, &s, NULL, MP_DTYPE_F32, impl, true) == MP_OK);
    mp_op_call c = f.call;
    c.state = NULL; /* a pooling node's oneDNN primitives (f32) would run ahead of the vector path */
    c.in[0] = (mp_tensor){dt, s, (void *)x};
    c.out = (mp_tensor){dt, f.call.out.shape, y};
    c.d_out = (mp_tensor){dt, f.call.out.shape, (void *)dy};
    c.d_in[0] = (mp_tensor){dt, s, dx};
    CHECK(f.vt->forward(&c) == MP_OK, "%s forward: %s", f.vt->name, mp_last_error());
    CHECK(f.vt->backward(&c) == MP_OK, "%s backward: %s", f.vt->name, mp_last_error());
    op_fixture_free(&f);
}

static void fill(mp_dtype dt, void *p, int64_t n, mp_rng *g) {
    for (int64_t i = 0; i < n; i++) put(dt, p, i, (float)mp_rng_normal(g));
}

/* 2x2 stride-2 average pooling: NHWC against the reference and the NCHW fast path, bit for bit */
static void check_pool(int N, int C, int H, int W, mp_dtype dt, uint64_t seed) {
    const int OH = H / 2, OW = W / 2;
    const int64_t nx = (int64_t)N * C * H * W, ny = (int64_t)N * C * OH * OW;
    const size_t es = esize(dt);
    mp_rng g;
    mp_rng_seed(&g, seed);
    void *x = check_alloc_poisoned(nx * es), *dy = check_alloc_poisoned(ny * es), *xh = check_alloc_poisoned(nx * es),
         *dyh = check_alloc_poisoned(ny * es);
    fill(dt, x, nx, &g);
    fill(dt, dy, ny, &g);
    mp_transpose_batch(xh, x, es, N, C, (int64_t)H * W);
    mp_transpose_batch(dyh, dy, es, N, C, (int64_t)OH * OW);
    void *yr = check_alloc_poisoned(ny * es), *dxr = check_alloc_poisoned(nx * es), *yf = check_alloc_poisoned(ny * es),
         *dxf = check_alloc_poisoned(nx * es), *yh = check_alloc_poisoned(ny * es),
         *dxh = check_alloc_poisoned(nx * es);
    const mp_shape s = mp_shape4(N, C, H, W);
    run_op(MP_OP_AVGPOOL2D, MP_IMPL_REF, s, dt, x, dy, yr, dxr);
    run_op(MP_OP_AVGPOOL2D, MP_IMPL_AUTO, s, dt, x, dy, yf, dxf);
    mp_avgpool2_fwd_cpu_nhwc(dt, xh, yh, N, C, H, W);
    mp_avgpool2_bwd_cpu_nhwc(dt, dyh, dxh, N, C, H, W);
    void *y = back(dt, yh, N, C, (int64_t)OH * OW), *dx = back(dt, dxh, N, C, (int64_t)H * W);
    const char *isa = mp_fast_isa_name(mp_fast_isa_current());
    int64_t bad_y = 0, bad_dx = 0;
    for (int64_t i = 0; i < ny; i++) bad_y += memcmp((char *)y + i * es, (char *)yr + i * es, es) != 0;
    for (int64_t i = 0; i < nx; i++) bad_dx += memcmp((char *)dx + i * es, (char *)dxr + i * es, es) != 0;
    CHECK(bad_y == 0, "avgpool2 %s %dx%dx%dx%d on %s: %lld of %lld outputs differ from the reference (rel. diff %g)",
          mp_dtype_name(dt), N, C, H, W, isa, (long long)bad_y, (long long)ny, rel_l2(dt, y, yr, ny));
    CHECK(bad_dx == 0,
          "avgpool2 %s %dx%dx%dx%d on %s: %lld of %lld input gradients differ from the reference (rel. diff %g)",
          mp_dtype_name(dt), N, C, H, W, isa, (long long)bad_dx, (long long)nx, rel_l2(dt, dx, dxr, nx));
    CHECK(!memcmp(y, yf, ny * es) && !memcmp(dx, dxf, nx * es),
          "avgpool2 %s %dx%dx%dx%d on %s: differs from the NCHW fast path", mp_dtype_name(dt), N, C, H, W, isa);
    free(x), free(dy), free(xh), free(dyh), free(yr), free(dxr), free(yf), free(dxf), free(yh), free(dxh), free(y),
        free(dx);
}

/* A training batch norm + ReLU fused into the 2x2 average pool reading it
 * (graph/plan_fuse.h), against the two kernels apart, bit for bit, with
 * `threads` threads (the statistics' sums depend on their count): the
 * forward without y gives the same statistics, coefficients and float mean
 * and leaves y unwritten, the pool applying the batch norm gives the same
 * output, and the backward reading the pool's output gradient gives the
 * input, gamma and beta gradients that the pool's backward followed by the
 * batch norm's give. Channels on the ReLU's edge (gamma 0) included. */
static void check_bn_pool(int N, int C, int H, int W, mp_dtype dt, int threads, uint64_t seed) {
    const int OH = H / 2, OW = W / 2;
    const int64_t M = (int64_t)N * H * W, nx = M * C, ny = (int64_t)N * OH * OW * C;
    const size_t es = esize(dt);
    omp_set_num_threads(threads);
    mp_rng g;
    mp_rng_seed(&g, seed);
    void *x = check_alloc_poisoned(nx * es), *pdy = check_alloc_poisoned(ny * es);
    for (int64_t i = 0; i < nx; i++) put(dt, x, i, (float)(mp_rng_normal(&g) * 2 + (double)(i % C % 3)));
    fill(dt, pdy, ny, &g);
    float *gamma = malloc(C * 4), *beta = malloc(C * 4), *rm0 = malloc(C * 4), *rv0 = malloc(C * 4);
    for (int c = 0; c < C; c++) {
        gamma[c] = c % 7 == 3 ? 0.0f : (float)(0.5 + 0.1 * (c % 5));
        beta[c] = c % 7 == 3 ? (const float[]){0.0f, 0x1p-134f, -0.0f}[c % 3] : (float)(0.2 * (c % 4) - 0.3);
        rm0[c] = 0.1f * (float)(c % 3), rv0[c] = 1.0f + 0.1f * (float)(c % 2);
    }
    /* [0]: apart, [1]: fused */
    float *rm[2], *rv[2], *sc[2], *sh[2], *mu[2], *dgamma[2], *dbeta[2];
    double *mean[2], *is[2];
    void *y[2], *pooled[2], *dx[2], *ws[2];
    const size_t wsb = mp_bn_nhwc_pooled_workspace_bytes(C, W);
    for (int k = 0; k < 2; k++) {
        rm[k] = malloc(C * 4), rv[k] = malloc(C * 4);
        memcpy(rm[k], rm0, C * 4), memcpy(rv[k], rv0, C * 4);
        sc[k] = check_alloc_poisoned(C * 4), sh[k] = check_alloc_poisoned(C * 4), mu[k] = check_alloc_poisoned(C * 4);
        dgamma[k] = check_alloc_poisoned(C * 4), dbeta[k] = check_alloc_poisoned(C * 4);
        mean[k] = check_alloc_poisoned(C * 8), is[k] = check_alloc_poisoned(C * 8);
        y[k] = check_alloc_poisoned(nx * es), pooled[k] = check_alloc_poisoned(ny * es),
        dx[k] = check_alloc_poisoned(nx * es);
        ws[k] = check_alloc_poisoned(k ? wsb : mp_bn_nhwc_workspace_bytes(C));
        mp_bn_fwd_train_cpu_nhwc(dt, x, NULL, y[k], gamma, beta, rm[k], rv[k], mean[k], is[k], sc[k], sh[k], mu[k], M,
                                 C, 1e-5, 0.1, true, k == 0, ws[k]);
    }
    void *dy = check_alloc_poisoned(nx * es);
    mp_avgpool2_fwd_cpu_nhwc(dt, y[0], pooled[0], N, C, H, W);
    mp_avgpool2_bwd_cpu_nhwc(dt, pdy, dy, N, C, H, W);
    mp_bn_bwd_cpu_nhwc(dt, x, NULL, dy, NULL, dx[0], NULL, gamma, beta, true, sc[0], sh[0], dgamma[0], dbeta[0], true,
                       mean[0], is[0], rm0, rv0, M, C, 1e-5, ws[0]);
    mp_avgpool2_bn_fwd_cpu_nhwc(dt, x, pooled[1], mu[1], sc[1], sh[1], N, C, H, W);
    const mp_bn_pooled_dy pd = {pdy, H, W};
    mp_bn_bwd_cpu_nhwc(dt, x, NULL, NULL, &pd, dx[1], NULL, gamma, beta, true, sc[1], sh[1], dgamma[1], dbeta[1], true,
                       mean[1], is[1], rm0, rv0, M, C, 1e-5, ws[1]);
    char tag[128];
    snprintf(tag, sizeof tag, "bn + avgpool2 %s %dx%dx%dx%d, %d thread(s), on %s", mp_dtype_name(dt), N, C, H, W,
             threads, mp_fast_isa_name(mp_fast_isa_current()));
    bool y_untouched = true;
    for (int64_t i = 0; i < (int64_t)(nx * es); i++) y_untouched &= ((unsigned char *)y[1])[i] == 0xFF;
    CHECK(y_untouched, "%s: the forward without y wrote y", tag);
    CHECK(!memcmp(mean[0], mean[1], C * 8) && !memcmp(is[0], is[1], C * 8) && !memcmp(sc[0], sc[1], C * 4) &&
              !memcmp(sh[0], sh[1], C * 4) && !memcmp(mu[0], mu[1], C * 4) && !memcmp(rm[0], rm[1], C * 4) &&
              !memcmp(rv[0], rv[1], C * 4),
          "%s: the forward's statistics differ without y", tag);
    int64_t bad_y = 0, bad_dx = 0;
    for (int64_t i = 0; i < ny; i++) bad_y += memcmp((char *)pooled[0] + i * es, (char *)pooled[1] + i * es, es) != 0;
    for (int64_t i = 0; i < nx; i++) bad_dx += memcmp((char *)dx[0] + i * es, (char *)dx[1] + i * es, es) != 0;
    CHECK(bad_y == 0, "%s: %lld of %lld pooled outputs differ from the kernels apart", tag, (long long)bad_y,
          (long long)ny);
    CHECK(bad_dx == 0, "%s: %lld of %lld input gradients differ from the kernels apart", tag, (long long)bad_dx,
          (long long)nx);
    CHECK(!memcmp(dgamma[0], dgamma[1], C * 4) && !memcmp(dbeta[0], dbeta[1], C * 4),
          "%s: gamma or beta gradients differ from the kernels apart", tag);
    double dx2 = 0;
    for (int64_t i = 0; i < nx; i++) dx2 += get(dt, dx[1], i) * get(dt, dx[1], i);
    CHECK(dx2 > 0 && isfinite(dx2), "%s: input gradient all zero or not finite (%g)", tag, dx2);
    for (int k = 0; k < 2; k++) {
        free(rm[k]), free(rv[k]), free(sc[k]), free(sh[k]), free(mu[k]), free(dgamma[k]), free(dbeta[k]);
        free(mean[k]), free(is[k]), free(y[k]), free(pooled[k]), free(dx[k]), free(ws[k]);
    }
    free(x), free(pdy), free(dy), free(gamma), free(beta), free(rm0), free(rv0);
}

/* global average pooling: NHWC against the reference within 1e-6 */
static void check_gap(int N, int C, int H, int W, mp_dtype dt, uint64_t seed) {
    const int64_t HW = (int64_t)H * W, nx = N * HW * C, ny = (int64_t)N * C;
    const size_t es = esize(dt);
    mp_rng g;
    mp_rng_seed(&g, seed);
    void *x = check_alloc_poisoned(nx * es), *dy = check_alloc_poisoned(ny * es), *xh = check_alloc_poisoned(nx * es);
    fill(dt, x, nx, &g);
    for (int64_t i = 0; i < nx; i++) /* channel means well away from 0 (a relative error means something) */
        put(dt, x, i, (float)(get(dt, x, i) + 1.0 + (double)((i / HW) % C % 5)));
    fill(dt, dy, ny, &g);
    mp_transpose_batch(xh, x, es, N, C, HW);
    void *yr = check_alloc_poisoned(ny * es), *dxr = check_alloc_poisoned(nx * es), *yh = check_alloc_poisoned(ny * es),
         *dxh = check_alloc_poisoned(nx * es);
    run_op(MP_OP_GLOBAL_AVGPOOL, MP_IMPL_REF, mp_shape4(N, C, H, W), dt, x, dy, yr, dxr);
    mp_global_avgpool_fwd_cpu_nhwc(dt, xh, yh, N, C, HW);
    mp_global_avgpool_bwd_cpu_nhwc(dt, dy, dxh, N, C, HW);
    void *dx = back(dt, dxh, N, C, HW);
    const char *isa = mp_fast_isa_name(mp_fast_isa_current());
    double e = 0;
    int64_t differ = 0;
    for (int64_t i = 0; i < ny; i++) { /* y is (N, C) in both layouts */
        const double a = get(dt, yh, i), b = get(dt, yr, i);
        e = isfinite(a) ? fmax(e, fabs(a - b) / fmax(fabs(b), 1e-30)) : INFINITY;
        differ += a != b;
    }
    note(dt, W_GAP, e);
    const double tol = dt == MP_DTYPE_F32 ? 1e-6 : 4e-3; /* bf16: a rounding apart at most */
    CHECK(e < tol, "global avgpool %s %dx%dx%dx%d on %s: output rel. diff %g (tolerance %g)", mp_dtype_name(dt), N,
          C, H, W, isa, e, tol);
    if (differ)
        printf("  global avgpool %s %dx%dx%dx%d on %s: %lld of %lld outputs not the reference's bits\n",
               mp_dtype_name(dt), N, C, H, W, isa, (long long)differ, (long long)ny);
    CHECK(!memcmp(dx, dxr, nx * es), "global avgpool %s %dx%dx%dx%d on %s: input gradient differs from the reference",
          mp_dtype_name(dt), N, C, H, W, isa);
    free(x), free(dy), free(xh), free(yr), free(dxr), free(yh), free(dxh), free(dx);
}

int main(void) {
    const mp_fast_isa best = mp_fast_isa_best();
    printf("fast paths on this CPU: up to %s; %d OpenMP threads\n", mp_fast_isa_name(best), omp_get_max_threads());
    if (best == MP_FAST_NONE) {
        printf("no fast instruction set: the NHWC kernels do not run here\n");
        return test_summary("test_nhwc_kernels");
    }
    CHECK(mp_bn_nhwc_workspace_bytes(0) == 0, "no channels: a workspace of %zu bytes",
          mp_bn_nhwc_workspace_bytes(0));
    const bn_shape bns[] = {
        {2, 1, 3, 5, true},     /* C = 1 (the mean-300 channel) */
        {3, 19, 5, 7, true},    /* C not a multiple of 16 */
        {1, 3, 1, 3, false},    /* M = 3 rows (2: dx is 0 up to rounding) */
        {16, 24, 20, 20, true}, /* rows span several blocks and threads */
        {3, 24, 5, 7, true},    /* 4 rows per kernel row (bnn_wide_rows), one row left over */
        {5, 48, 3, 3, true},    /* 2 rows per kernel row, one left over */
        {4, 64, 14, 14, true},
        {2, 600, 3, 5, true}, /* C above one tile of channels */
    };
    const int n_bns = (int)(sizeof bns / sizeof bns[0]);
    const mp_dtype dts[2] = {MP_DTYPE_F32, MP_DTYPE_BF16};
    int isas = 0;
    for (int isa = best; isa >= MP_FAST_AVX2; isa--, isas++) {
        CHECK(mp_fast_isa_set((mp_fast_isa)isa) == (mp_fast_isa)isa, "cannot select %s",
              mp_fast_isa_name((mp_fast_isa)isa));
        for (int d = 0; d < 2; d++) {
            const uint64_t seed = 1000 * (uint64_t)isa + 100 * (uint64_t)d;
            for (int k = 0; k < n_bns; k++)
                for (int relu = 0; relu < 2; relu++)
                    check_bn(bns[k], dts[d], relu, seed + 10 * (uint64_t)k + (uint64_t)relu);
            check_pool(2, 3, 7, 9, dts[d], seed + 1);  /* odd H and W */
            check_pool(4, 20, 8, 6, dts[d], seed + 2); /* even */
            check_pool(3, 1, 5, 4, dts[d], seed + 3);  /* C = 1, odd H */
            check_pool(2, 33, 2, 3, dts[d], seed + 4); /* one output row, odd W */
            check_pool(8, 64, 28, 28, dts[d], seed + 5);
            const int procs = omp_get_num_procs() < 3 ? omp_get_num_procs() : 3, max_threads = omp_get_max_threads();
            for (int t = 1; t <= procs; t++) { /* 2 threads split 3x5x7's rows inside a window */
                check_bn_pool(3, 16, 5, 7, dts[d], t, seed + 11);   /* odd H and W: a row and a column in no window */
                check_bn_pool(2, 520, 4, 6, dts[d], t, seed + 12);  /* C above one tile of channels */
                check_bn_pool(4, 64, 14, 14, dts[d], t, seed + 13); /* cnn10's second stage end */
                check_bn_pool(3, 64, 5, 7, dts[d], t, seed + 17);   /* one row a kernel row, odd H and W */
                check_bn_pool(1, 3, 3, 2, dts[d], t, seed + 14);    /* C = 3, one window column */
                check_bn_pool(3, 24, 5, 7, dts[d], t, seed + 15);   /* kernel rows of 4 across windows, one left */
                check_bn_pool(2, 48, 6, 3, dts[d], t, seed + 16);   /* kernel rows of 2 across image rows */
            }
            omp_set_num_threads(max_threads);
            check_gap(2, 3, 7, 7, dts[d], seed + 6);
            check_gap(4, 130, 5, 3, dts[d], seed + 7); /* C above one tile */
            check_gap(3, 1, 1, 1, dts[d], seed + 8);   /* HW = 1 */
            check_gap(16, 512, 7, 7, dts[d], seed + 9);
        }
    }
    printf("NHWC kernels checked on %d instruction set(s); worst errors (f32 / bf16):\n", isas);
    for (int k = 0; k < W_COUNT; k++) printf("  %-20s %.3g / %.3g\n", worst_name[k], worst[0][k], worst[1][k]);
    printf("  (* relative to the size of the sums' absolute terms)\n");
    mp_fast_isa_set(best);
    return test_summary("test_nhwc_kernels");
}
