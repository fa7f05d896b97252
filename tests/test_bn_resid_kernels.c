/* test_bn_resid_kernels.c — the channels-last batch-norm kernels with a
 * residual add (+ ReLU) fused in (ops/batchnorm2d_cpu.h, res and dres;
 * graph/plan_fuse.h) against the same kernels without it followed by the
 * add and the ReLU as their own ops compute them (ops/add_ref.inc,
 * ops/activation_ref.inc) and the residual's gradient as the ReLU's and the
 * add's backwards write it (dy's bits where it passes) or as a second
 * consumer's is added (rounded through f32), bit for bit: the training and
 * inference forward, the backward's dx, gamma and beta gradients and the
 * residual's gradient, written or added to, with dx NULL too; every fast
 * instruction set this CPU runs, f32 and bf16, 1 to 3 threads, C = 1, 19,
 * 64 and 520 (above an inference tile of channels), fewer rows than
 * threads; NaN, infinities, -0 and denormals in the residual, in dy and in
 * the gradient added to (sums over NaNs need only be NaN in both); every
 * output poisoned with NaN bytes first. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/bf16_inline.h"
#include "core/rng.h"
#include "ops/batchnorm2d_cpu.h"
#include "ops/cpu_fast.h"

enum { DRES_NONE, DRES_WRITE, DRES_ADD };

static size_t esize(mp_dtype dt) { return dt == MP_DTYPE_BF16 ? 2 : 4; }

static float ld(mp_dtype dt, const void *p, int64_t i) {
    return dt == MP_DTYPE_BF16 ? mp_bf16_bits_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void st(mp_dtype dt, void *p, int64_t i, float v) {
    if (dt == MP_DTYPE_BF16)
        ((uint16_t *)p)[i] = mp_f32_to_bf16_bits(v);
    else
        ((float *)p)[i] = v;
}

static void copy1(mp_dtype dt, void *d, const void *s, int64_t i) {
    memcpy((char *)d + i * esize(dt), (const char *)s + i * esize(dt), esize(dt));
}

/* A normal value, or (specials) one time in four a value on an edge. */
static float value(mp_rng *g, bool specials) {
    static const float edge[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 0x1p-130f, -0x1p-140f, 1e-40f};
    if (specials && mp_rng_below(g, 4) == 0) return edge[mp_rng_below(g, 8)];
    return (float)mp_rng_normal(g);
}

static bool same(mp_dtype dt, const void *a, const void *b, int64_t n) { return !memcmp(a, b, (size_t)n * esize(dt)); }

/* Bit for bit, or both NaN: what a sum over NaNs gives. Adding two NaNs
 * keeps one operand's payload and sign, and which one is the compiler's
 * operand order, which may differ between the kernels' two instances (the
 * masks from y and none); a sanitizer build showed it. */
static bool same_or_nan(mp_dtype dt, const void *a, const void *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * esize(dt), (const char *)b + i * esize(dt), esize(dt)) &&
            !(isnan(ld(dt, a, i)) && isnan(ld(dt, b, i))))
            return false;
    return true;
}

static void check_case(mp_dtype dt, int64_t M, int C, bool relu, int dres_mode, bool want_dx, bool specials,
                       uint64_t seed) {
    const int64_t n = M * C;
    const size_t bytes = (size_t)n * esize(dt);
    char tag[160];
    snprintf(tag, sizeof tag, "%s M=%lld C=%d%s dres %s%s%s on %s, %d threads", mp_dtype_name(dt), (long long)M, C,
             relu ? " +relu" : "", dres_mode == DRES_NONE ? "none" : dres_mode == DRES_WRITE ? "written" : "added",
             want_dx ? "" : ", no dx", specials ? ", edge values" : "", mp_fast_isa_name(mp_fast_isa_current()),
             omp_get_max_threads());
    mp_rng g;
    mp_rng_seed(&g, seed);
    void *x = malloc(bytes), *r = malloc(bytes), *dy = malloc(bytes), *d0 = malloc(bytes);
    void *yb = check_alloc_poisoned(bytes), *yref = malloc(bytes), *yf = check_alloc_poisoned(bytes),
         *gm = malloc(bytes);
    void *ye = check_alloc_poisoned(bytes), *yef = check_alloc_poisoned(bytes);
    void *dxref = check_alloc_poisoned(bytes), *dxf = check_alloc_poisoned(bytes), *dref = malloc(bytes),
         *df = malloc(bytes);
    float *gamma = malloc(C * 4), *beta = malloc(C * 4), *rm = malloc(C * 4), *rv = malloc(C * 4);
    float *sc = malloc(C * 4), *sh = malloc(C * 4), *mu = malloc(C * 4);
    float *dg[2] = {malloc(C * 4), malloc(C * 4)}, *db[2] = {malloc(C * 4), malloc(C * 4)};
    double *mean = malloc(C * 8), *is = malloc(C * 8);
    void *ws = check_alloc_poisoned(mp_bn_nhwc_workspace_bytes(C));
    MP_ASSERT(x && r && dy && d0 && yref && gm && dref && df && gamma && beta && rm && rv && sc && sh && mu && dg[0] &&
              dg[1] && db[0] && db[1] && mean && is);
    for (int c = 0; c < C; c++) gamma[c] = (float)(0.5 + mp_rng_uniform(&g)), beta[c] = (float)mp_rng_normal(&g);
    for (int64_t i = 0; i < n; i++) {
        st(dt, x, i, (float)mp_rng_normal(&g));
        st(dt, r, i, value(&g, specials));
        st(dt, dy, i, value(&g, specials));
        st(dt, d0, i, value(&g, specials));
    }
    /* apart: the batch norm, then the add, then the ReLU */
    for (int c = 0; c < C; c++) rm[c] = 0.1f, rv[c] = 1.2f;
    mp_bn_fwd_train_cpu_nhwc(dt, x, NULL, yb, gamma, beta, rm, rv, mean, is, sc, sh, mu, M, C, 1e-5, 0.1, false, true,
                             ws);
    for (int64_t i = 0; i < n; i++) {
        st(dt, yref, i, ld(dt, yb, i) + ld(dt, r, i));
        if (relu && ld(dt, yref, i) < 0) st(dt, yref, i, 0.0f);
    }
    /* fused: the saved statistics and constants are the same (this is their second update of rm, rv) */
    mp_bn_fwd_train_cpu_nhwc(dt, x, r, yf, gamma, beta, rm, rv, mean, is, sc, sh, mu, M, C, 1e-5, 0.1, relu, true, ws);
    CHECK(same(dt, yf, yref, n), "%s: training forward differs from batch norm, add, ReLU apart", tag);
    mp_bn_fwd_eval_cpu_nhwc(dt, x, NULL, ye, gamma, beta, rm, rv, M, C, 1e-5, false);
    for (int64_t i = 0; i < n; i++) {
        st(dt, ye, i, ld(dt, ye, i) + ld(dt, r, i));
        if (relu && ld(dt, ye, i) < 0) st(dt, ye, i, 0.0f);
    }
    mp_bn_fwd_eval_cpu_nhwc(dt, x, r, yef, gamma, beta, rm, rv, M, C, 1e-5, relu);
    CHECK(same(dt, yef, ye, n), "%s: inference forward differs from batch norm, add, ReLU apart", tag);
    /* backward apart: the ReLU's (dy where y > 0, NaN y passing), the add's copies, the batch norm's */
    memcpy(dref, d0, bytes), memcpy(df, d0, bytes);
    for (int64_t i = 0; i < n; i++) {
        if (relu && ld(dt, yref, i) <= 0)
            st(dt, gm, i, 0.0f);
        else
            copy1(dt, gm, dy, i);
        if (dres_mode == DRES_WRITE) copy1(dt, dref, gm, i);
        if (dres_mode == DRES_ADD) st(dt, dref, i, ld(dt, dref, i) + ld(dt, gm, i));
    }
    mp_bn_bwd_cpu_nhwc(dt, x, NULL, gm, NULL, want_dx ? dxref : NULL, NULL, gamma, beta, false, sc, sh, dg[0], db[0],
                       true, mean, is, rm, rv, M, C, 1e-5, ws);
    const mp_bn_resid_grad dres = {df, dres_mode == DRES_ADD};
    mp_bn_bwd_cpu_nhwc(dt, x, yf, dy, NULL, want_dx ? dxf : NULL, dres_mode == DRES_NONE ? NULL : &dres, gamma, beta,
                       relu, sc, sh, dg[1], db[1], true, mean, is, rm, rv, M, C, 1e-5, ws);
    CHECK(!want_dx || same_or_nan(dt, dxf, dxref, n), "%s: input gradient differs", tag);
    CHECK(same_or_nan(MP_DTYPE_F32, dg[0], dg[1], C) && same_or_nan(MP_DTYPE_F32, db[0], db[1], C),
          "%s: gamma or beta gradient differs", tag);
    CHECK(same(dt, df, dref, n), "%s: the residual's gradient differs", tag);
    void *ptrs[] = {x, r, dy, d0, yb, yref, yf, gm, ye, yef, dxref, dxf, dref, df, gamma, beta, rm, rv, sc, sh, mu,
                    dg[0], dg[1], db[0], db[1], mean, is, ws};
    for (size_t k = 0; k < sizeof ptrs / sizeof ptrs[0]; k++) free(ptrs[k]);
}

int main(void) {
    const mp_fast_isa best = mp_fast_isa_best();
    if (best == MP_FAST_NONE) {
        printf("no fast instruction set: the channels-last kernels do not run here\n");
        return test_summary("test_bn_resid_kernels");
    }
    const struct {
        int64_t M;
        int C;
    } shapes[] = {{2, 19}, {37, 1}, {130, 64}, {9, 520}};
    const int procs = omp_get_num_procs() < 3 ? omp_get_num_procs() : 3, max_threads = omp_get_max_threads();
    const mp_dtype dts[2] = {MP_DTYPE_F32, MP_DTYPE_BF16};
    int cases = 0;
    for (int isa = best; isa >= MP_FAST_AVX2; isa--) {
        CHECK(mp_fast_isa_set((mp_fast_isa)isa) == (mp_fast_isa)isa, "cannot select %s",
              mp_fast_isa_name((mp_fast_isa)isa));
        for (int t = 1; t <= procs; t++) {
            omp_set_num_threads(t);
            for (int d = 0; d < 2; d++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                    for (int relu = 0; relu < 2; relu++)
                        for (int mode = DRES_NONE; mode <= DRES_ADD; mode++)
                            for (int v = 0; v < 3; v++) /* dx; no dx; dx with edge values */
                                check_case(dts[d], shapes[s].M, shapes[s].C, relu, mode, v != 1, v == 2,
                                           (uint64_t)(1000 * isa + 100 * t + 10 * s + mode)), cases++;
        }
    }
    omp_set_num_threads(max_threads);
    mp_fast_isa_set(best);
    printf("fused batch norm + residual add kernels: %d cases on %s and below\n", cases, mp_fast_isa_name(best));
    return test_summary("test_bn_resid_kernels");
}
