/* test_op_misc.c — add, mul, concat, reshape and dropout: gradient checks in f64
 * on random shapes, f32 kernels against f64, exact layouts, dropout mask
 * statistics and determinism, overwrite (not accumulate) semantics, and the
 * shape/argument errors with the node name in the message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"
#include "core/rng.h"

static double get(const mp_tensor *t, int64_t i) {
    return t->dtype == MP_DTYPE_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static void set(mp_tensor *t, int64_t i, double v) {
    if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

static double rel_diff(const mp_tensor *a, const mp_tensor *b) {
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < mp_tensor_numel(b); i++) {
        double x = get(a, i), y = get(b, i);
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    return sqrt(d2) / fmax(sqrt(r2), 1e-30);
}

/* Run forward+backward in f32 and f64 on the same data: the f32 kernels must
 * agree to float rounding. */
static double f32_vs_f64(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *shapes, bool training) {
    op_fixture a, b;
    MP_ASSERT(op_fixture_init(&a, kind, attr, n_in, shapes, NULL, MP_DTYPE_F32, MP_IMPL_REF, training) == MP_OK);
    MP_ASSERT(op_fixture_init(&b, kind, attr, n_in, shapes, NULL, MP_DTYPE_F64, MP_IMPL_REF, training) == MP_OK);
    op_fixture_randomize(&b, 99);
    op_fixture_copy_data(&a, &b);
    MP_ASSERT(a.vt->forward(&a.call) == MP_OK && b.vt->forward(&b.call) == MP_OK);
    MP_ASSERT(a.vt->backward(&a.call) == MP_OK && b.vt->backward(&b.call) == MP_OK);
    double worst = rel_diff(&a.call.out, &b.call.out);
    for (int i = 0; i < n_in; i++) worst = fmax(worst, rel_diff(&a.call.d_in[i], &b.call.d_in[i]));
    op_fixture_free(&a);
    op_fixture_free(&b);
    return worst;
}

/* backward must overwrite d_in: garbage there beforehand changes nothing, and
 * a NULL d_in[0] is skipped while the other gradients are still written. */
static void check_overwrite(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *shapes, bool training) {
    const char *name = mp_op_lookup(kind)->name;
    op_fixture f;
    MP_ASSERT(op_fixture_init(&f, kind, attr, n_in, shapes, NULL, MP_DTYPE_F64, MP_IMPL_REF, training) == MP_OK);
    op_fixture_randomize(&f, 5);
    MP_ASSERT(f.vt->forward(&f.call) == MP_OK && f.vt->backward(&f.call) == MP_OK);
    double *keep[MP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        size_t bytes = (size_t)mp_tensor_numel(&f.call.d_in[i]) * sizeof(double);
        keep[i] = malloc(bytes);
        memcpy(keep[i], f.call.d_in[i].data, bytes);
        for (int64_t j = 0; j < mp_tensor_numel(&f.call.d_in[i]); j++) set(&f.call.d_in[i], j, 1e30);
    }
    CHECK(f.vt->backward(&f.call) == MP_OK, "%s: second backward", name);
    for (int i = 0; i < n_in; i++) {
        bool same = !memcmp(keep[i], f.call.d_in[i].data, (size_t)mp_tensor_numel(&f.call.d_in[i]) * sizeof(double));
        CHECK(same, "%s: d_in[%d] not overwritten", name, i);
    }
    void *d0 = f.call.d_in[0].data;
    f.call.d_in[0].data = NULL;
    if (n_in > 1) memset(f.call.d_in[n_in - 1].data, 0, (size_t)mp_tensor_numel(&f.call.d_in[n_in - 1]) * sizeof(double));
    CHECK(f.vt->backward(&f.call) == MP_OK, "%s: backward with NULL d_in[0]", name);
    if (n_in > 1) {
        bool same = !memcmp(keep[n_in - 1], f.call.d_in[n_in - 1].data,
                            (size_t)mp_tensor_numel(&f.call.d_in[n_in - 1]) * sizeof(double));
        CHECK(same, "%s: d_in[%d] wrong when d_in[0] is NULL", name, n_in - 1);
    }
    f.call.d_in[0].data = d0;
    for (int i = 0; i < n_in; i++) free(keep[i]);
    op_fixture_free(&f);
}

/* infer must fail with `want`, naming the node and every string in `needles`. */
static void check_infer_error(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *shapes,
                              mp_status want, const char *const *needles, const char *what) {
    op_fixture f;
    mp_status s = op_fixture_init(&f, kind, attr, n_in, shapes, NULL, MP_DTYPE_F64, MP_IMPL_REF, true);
    const char *msg = mp_last_error();
    CHECK(s == want, "%s: status %s, want %s", what, mp_status_name(s), mp_status_name(want));
    CHECK(strstr(msg, "test_op") != NULL, "%s: node name missing in '%s'", what, msg);
    for (int i = 0; needles && needles[i]; i++)
        CHECK(strstr(msg, needles[i]) != NULL, "%s: '%s' missing in '%s'", what, needles[i], msg);
    if (s == MP_OK) op_fixture_free(&f);
}

static int rnd(mp_rng *r, int lo, int hi) { return lo + (int)mp_rng_below(r, (uint64_t)(hi - lo + 1)); }

/* add and mul: same-shape binary ops, checked the same way. */
static void test_binary(mp_rng *r, mp_op_kind kind, uint64_t seed) {
    const char *name = mp_op_lookup(kind)->name;
    mp_op_attr a = {0};
    for (int trial = 0; trial < 3; trial++) {
        mp_shape s = trial == 2 ? mp_shape2(rnd(r, 1, 4), rnd(r, 1, 20))
                                : mp_shape4(rnd(r, 1, 3), rnd(r, 1, 4), rnd(r, 2, 5), rnd(r, 2, 5));
        mp_shape ss[2] = {s, s};
        double e = gradcheck_op(kind, a, 2, ss, NULL, true, seed + (uint64_t)trial, 0);
        CHECK(e < 1e-6, "%s trial %d rel.err %g", name, trial, e);
    }
    mp_shape ss[2] = {mp_shape4(2, 3, 4, 4), mp_shape4(2, 3, 4, 4)};
    CHECK(f32_vs_f64(kind, a, 2, ss, true) < 1e-6, "%s f32 vs f64", name);
    check_overwrite(kind, a, 2, ss, true);
    mp_shape bad[2] = {mp_shape4(2, 3, 4, 4), mp_shape4(2, 3, 4, 5)};
    const char *needles[] = {name, "(2, 3, 4, 4)", "(2, 3, 4, 5)", NULL};
    char what[64];
    snprintf(what, sizeof what, "%s shape mismatch", name);
    check_infer_error(kind, a, 2, bad, MP_ERR_SHAPE, needles, what);
    mp_shape bad2[2] = {mp_shape2(2, 8), mp_shape4(2, 2, 2, 2)};
    const char *needles2[] = {name, NULL};
    snprintf(what, sizeof what, "%s rank mismatch", name);
    check_infer_error(kind, a, 2, bad2, MP_ERR_SHAPE, needles2, what);
    mp_shape one = mp_shape2(2, 8);
    snprintf(what, sizeof what, "%s one input", name);
    check_infer_error(kind, a, 1, &one, MP_ERR_SHAPE, needles2, what);
}

static void test_concat(mp_rng *r) {
    mp_op_attr a = {0};
    for (int n_in = 2; n_in <= 3; n_in++) {
        for (int four = 0; four < 2; four++) {
            mp_shape ss[3];
            int n = rnd(r, 1, 3), h = rnd(r, 2, 4), w = rnd(r, 2, 4);
            for (int i = 0; i < n_in; i++)
                ss[i] = four ? mp_shape4(n, rnd(r, 1, 4), h, w) : mp_shape2(n, rnd(r, 1, 7));
            double e = gradcheck_op(MP_OP_CONCAT, a, n_in, ss, NULL, true, 300 + n_in * 2 + four, 0);
            CHECK(e < 1e-6, "concat %d inputs %s rel.err %g", n_in, four ? "4-D" : "2-D", e);
            CHECK(f32_vs_f64(MP_OP_CONCAT, a, n_in, ss, true) < 1e-6, "concat f32 vs f64");
            check_overwrite(MP_OP_CONCAT, a, n_in, ss, true);
        }
    }
    /* exact layout: out[n] = [a[n], b[n]] per sample, channels then H*W */
    {
        mp_shape ss[2] = {mp_shape4(2, 1, 2, 2), mp_shape4(2, 2, 2, 2)};
        op_fixture f;
        MP_ASSERT(op_fixture_init(&f, MP_OP_CONCAT, a, 2, ss, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK);
        CHECK(mp_shape_equal(&f.info.out, &(mp_shape){4, {2, 3, 2, 2}}), "concat out shape");
        for (int i = 0; i < 8; i++) set(&f.call.in[0], i, 100 + i);
        for (int i = 0; i < 16; i++) set(&f.call.in[1], i, 200 + i);
        MP_ASSERT(f.vt->forward(&f.call) == MP_OK);
        int ok = 1;
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 12; k++) {
                double want = k < 4 ? 100 + n * 4 + k : 200 + n * 8 + (k - 4);
                ok &= get(&f.call.out, n * 12 + k) == want;
            }
        CHECK(ok, "concat layout");
        op_fixture_free(&f);
    }
    mp_shape hw[2] = {mp_shape4(2, 3, 4, 4), mp_shape4(2, 5, 4, 3)};
    const char *n1[] = {"(2, 3, 4, 4)", "(2, 5, 4, 3)", "dim 3", NULL};
    check_infer_error(MP_OP_CONCAT, a, 2, hw, MP_ERR_SHAPE, n1, "concat W mismatch");
    mp_shape bn[3] = {mp_shape2(2, 3), mp_shape2(2, 3), mp_shape2(3, 3)};
    check_infer_error(MP_OP_CONCAT, a, 3, bn, MP_ERR_SHAPE, NULL, "concat N mismatch");
    mp_shape rk[2] = {mp_shape2(2, 3), mp_shape4(2, 3, 1, 1)};
    check_infer_error(MP_OP_CONCAT, a, 2, rk, MP_ERR_SHAPE, NULL, "concat rank mismatch");
    check_infer_error(MP_OP_CONCAT, a, 1, rk, MP_ERR_SHAPE, NULL, "concat one input");
}

static void test_reshape(mp_rng *r) {
    for (int trial = 0; trial < 2; trial++) {
        int n = rnd(r, 1, 3), c = rnd(r, 1, 4), h = rnd(r, 1, 4), w = rnd(r, 1, 4);
        mp_shape s4 = mp_shape4(n, c, h, w), s2 = mp_shape2(n, c * h * w);
        mp_op_attr flat = {.reshape = {2, {0, c * h * w, 1, 1}}};
        mp_op_attr unflat = {.reshape = {4, {0, c, h, w}}};
        double e = gradcheck_op(MP_OP_RESHAPE, flat, 1, &s4, NULL, true, 400 + trial, 0);
        CHECK(e < 1e-6, "reshape 4-D->2-D trial %d rel.err %g", trial, e);
        e = gradcheck_op(MP_OP_RESHAPE, unflat, 1, &s2, NULL, true, 410 + trial, 0);
        CHECK(e < 1e-6, "reshape 2-D->4-D trial %d rel.err %g", trial, e);
        op_fixture f;
        MP_ASSERT(op_fixture_init(&f, MP_OP_RESHAPE, unflat, 1, &s2, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK);
        CHECK(mp_shape_equal(&f.info.out, &s4), "reshape 2-D->4-D out shape");
        op_fixture_free(&f);
        CHECK(f32_vs_f64(MP_OP_RESHAPE, flat, 1, &s4, true) < 1e-6, "reshape f32 vs f64");
        check_overwrite(MP_OP_RESHAPE, flat, 1, &s4, true);
    }
    mp_shape s = mp_shape4(2, 3, 4, 4);
    mp_op_attr bad = {.reshape = {2, {0, 50, 1, 1}}};
    const char *needles[] = {"(2, 3, 4, 4)", "(2, 50)", NULL};
    check_infer_error(MP_OP_RESHAPE, bad, 1, &s, MP_ERR_SHAPE, needles, "reshape size mismatch");
    mp_op_attr bad4 = {.reshape = {4, {0, 3, 4, 5}}};
    const char *needles4[] = {"(2, 3, 4, 4)", "(2, 3, 4, 5)", NULL};
    check_infer_error(MP_OP_RESHAPE, bad4, 1, &s, MP_ERR_SHAPE, needles4, "reshape 4-D size mismatch");
}

/* Run dropout forward in training on n elements with the given seed; copies
 * the mask (y != 0 where x != 0) into mask. */
static void dropout_run(mp_dtype dt, float p, int64_t n, uint64_t seed, uint8_t *mask, int *exact) {
    mp_op_attr a = {.p = p};
    mp_shape s = mp_shape2(1, (int)n);
    op_fixture f;
    MP_ASSERT(op_fixture_init(&f, MP_OP_DROPOUT, a, 1, &s, NULL, dt, MP_IMPL_REF, true) == MP_OK);
    op_fixture_randomize(&f, 17);
    f.call.seed = seed;
    MP_ASSERT(f.vt->forward(&f.call) == MP_OK);
    MP_ASSERT(f.vt->backward(&f.call) == MP_OK);
    double scale64 = 1.0 / (1.0 - (double)p);
    float scale32 = (float)scale64;
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double x = get(&f.call.in[0], i), y = get(&f.call.out, i), dy = get(&f.call.d_out, i);
        double dx = get(&f.call.d_in[0], i);
        mask[i] = y != 0;
        ok &= ((const uint8_t *)f.call.saved)[i] == mask[i];
        if (dt == MP_DTYPE_F64) {
            ok &= mask[i] ? y == x * scale64 && dx == dy * scale64 : dx == 0;
        } else {
            float xf = (float)x, dyf = (float)dy;
            ok &= mask[i] ? (float)y == xf * scale32 && (float)dx == dyf * scale32 : dx == 0;
        }
    }
    *exact = ok;
    op_fixture_free(&f);
}

static void test_dropout(mp_rng *r) {
    for (int trial = 0; trial < 2; trial++) {
        mp_shape s = mp_shape4(rnd(r, 1, 3), rnd(r, 1, 4), rnd(r, 3, 5), rnd(r, 3, 5));
        mp_op_attr a = {.p = 0.3f};
        double e = gradcheck_op(MP_OP_DROPOUT, a, 1, &s, NULL, true, 500 + trial, 0);
        CHECK(e < 1e-6, "dropout training trial %d rel.err %g", trial, e);
        e = gradcheck_op(MP_OP_DROPOUT, a, 1, &s, NULL, false, 510 + trial, 0);
        CHECK(e < 1e-6, "dropout eval trial %d rel.err %g", trial, e);
        CHECK(f32_vs_f64(MP_OP_DROPOUT, a, 1, &s, true) < 1e-6, "dropout f32 vs f64 (training)");
        CHECK(f32_vs_f64(MP_OP_DROPOUT, a, 1, &s, false) < 1e-6, "dropout f32 vs f64 (eval)");
        check_overwrite(MP_OP_DROPOUT, a, 1, &s, true);
        check_overwrite(MP_OP_DROPOUT, a, 1, &s, false);
    }
    /* statistics and exact scaling on 1e5 elements */
    const int64_t n = 100000;
    uint8_t *m1 = malloc((size_t)n), *m2 = malloc((size_t)n), *m3 = malloc((size_t)n);
    mp_dtype dts[2] = {MP_DTYPE_F32, MP_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        for (int pi = 0; pi < 3; pi++) {
            float p = (float[]){0.3f, 0.5f, 0.05f}[pi];
            int exact;
            dropout_run(dts[d], p, n, 1234, m1, &exact);
            int64_t zeros = 0;
            for (int64_t i = 0; i < n; i++) zeros += !m1[i];
            double frac = (double)zeros / (double)n, sigma = sqrt((double)p * (1 - p) / (double)n);
            CHECK(fabs(frac - p) < 4 * sigma, "dropout %s p=%g: zero fraction %g (4 sigma = %g)",
                  mp_dtype_name(dts[d]), (double)p, frac, 4 * sigma);
            CHECK(exact, "dropout %s p=%g: kept values/gradients not scaled exactly by 1/(1-p)",
                  mp_dtype_name(dts[d]), (double)p);
            dropout_run(dts[d], p, n, 1234, m2, &exact);
            CHECK(!memcmp(m1, m2, (size_t)n), "dropout: same seed gave a different mask");
            dropout_run(dts[d], p, n, 1235, m3, &exact);
            int64_t differ = 0;
            for (int64_t i = 0; i < n; i++) differ += m1[i] != m3[i];
            /* independent masks differ in 2p(1-p) of the places */
            CHECK(differ > n * p * (1 - p), "dropout: seeds 1234/1235 masks differ in only %lld places",
                  (long long)differ);
        }
    }
    /* p = 0 in training is the identity */
    {
        int exact;
        dropout_run(MP_DTYPE_F32, 0.0f, 1000, 7, m1, &exact);
        CHECK(exact, "dropout p=0 not the identity");
    }
    free(m1);
    free(m2);
    free(m3);
    mp_shape s = mp_shape2(2, 3);
    const char *needles[] = {"p = 1", NULL};
    check_infer_error(MP_OP_DROPOUT, (mp_op_attr){.p = 1.0f}, 1, &s, MP_ERR_INVALID_ARG, needles, "dropout p=1");
    check_infer_error(MP_OP_DROPOUT, (mp_op_attr){.p = -0.1f}, 1, &s, MP_ERR_INVALID_ARG, NULL, "dropout p<0");
    check_infer_error(MP_OP_DROPOUT, (mp_op_attr){.p = NAN}, 1, &s, MP_ERR_INVALID_ARG, NULL, "dropout p=NaN");
}

int main(void) {
    mp_rng r;
    mp_rng_seed(&r, 11);
    /* strong references: op_table.c refers to these weakly while ops land */
    CHECK(mp_op_lookup(MP_OP_ADD) == &mp_op_add_vt, "add vtable");
    CHECK(mp_op_lookup(MP_OP_MUL) == &mp_op_mul_vt, "mul vtable");
    CHECK(mp_op_lookup(MP_OP_CONCAT) == &mp_op_concat_vt, "concat vtable");
    CHECK(mp_op_lookup(MP_OP_RESHAPE) == &mp_op_reshape_vt, "reshape vtable");
    CHECK(mp_op_lookup(MP_OP_DROPOUT) == &mp_op_dropout_vt, "dropout vtable");
    test_binary(&r, MP_OP_ADD, 200);
    test_binary(&r, MP_OP_MUL, 210);
    test_concat(&r);
    test_reshape(&r);
    test_dropout(&r);
    return test_summary("test_op_misc");
}
