/* test_op_loss.c — softmax cross-entropy and BCE with logits: gradient checks
 * in f64 on random shapes, forward values against hand computations in
 * double (including huge logits), f32 against f64, overwrite semantics, and
 * the label/shape errors with the node name in the message. */
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
    else if (t->dtype == MP_DTYPE_F32) ((float *)t->data)[i] = (float)v;
    else ((int32_t *)t->data)[i] = (int32_t)v;
}

static int rnd(mp_rng *r, int lo, int hi) { return lo + (int)mp_rng_below(r, (uint64_t)(hi - lo + 1)); }

static const mp_dtype ce_dtypes[2] = {MP_DTYPE_F64, MP_DTYPE_I32};

/* Fixture for a loss op in dtype dt with explicit inputs x, y (labels or
 * targets), d_out = seed; runs forward and backward. */
static mp_status run_loss(op_fixture *f, mp_op_kind kind, mp_dtype dt, int n, int k, const double *x,
                          const double *y, double seed) {
    mp_shape ss[2] = {mp_shape2(n, k), kind == MP_OP_SOFTMAX_CE ? mp_shape1(n) : mp_shape2(n, k)};
    mp_dtype dts[2] = {dt, kind == MP_OP_SOFTMAX_CE ? MP_DTYPE_I32 : dt};
    MP_ASSERT(op_fixture_init(f, kind, (mp_op_attr){0}, 2, ss, dts, dt, MP_IMPL_REF, true) == MP_OK);
    for (int i = 0; i < n * k; i++) set(&f->call.in[0], i, x[i]);
    for (int i = 0; i < mp_tensor_numel(&f->call.in[1]); i++) set(&f->call.in[1], i, y[i]);
    set(&f->call.d_out, 0, seed);
    MP_TRY(f->vt->forward(&f->call));
    return f->vt->backward(&f->call);
}

static void test_softmax_ce(mp_rng *r) {
    for (int trial = 0; trial < 4; trial++) {
        mp_shape ss[2];
        int n = rnd(r, 1, 8);
        ss[0] = mp_shape2(n, rnd(r, 2, 12));
        ss[1] = mp_shape1(n);
        double e = gradcheck_op(MP_OP_SOFTMAX_CE, (mp_op_attr){0}, 2, ss, ce_dtypes, true, 600 + trial, 0);
        CHECK(e < 1e-6, "softmax_ce trial %d rel.err %g", trial, e);
    }
    /* 2x3 by hand, in f64 and f32 */
    const double x[6] = {1.0, 2.0, 3.0, -1.0, 0.5, 4.0};
    const double lab[2] = {2, 0};
    double want = 0, p[6];
    for (int i = 0; i < 2; i++) {
        double s = 0;
        for (int j = 0; j < 3; j++) s += exp(x[i * 3 + j]);
        for (int j = 0; j < 3; j++) p[i * 3 + j] = exp(x[i * 3 + j]) / s;
        want += (log(s) - x[i * 3 + (int)lab[i]]) / 2;
    }
    mp_dtype dts[2] = {MP_DTYPE_F64, MP_DTYPE_F32};
    for (int d = 0; d < 2; d++) {
        double tol = dts[d] == MP_DTYPE_F64 ? 1e-14 : 1e-6;
        op_fixture f;
        CHECK(run_loss(&f, MP_OP_SOFTMAX_CE, dts[d], 2, 3, x, lab, 1.7) == MP_OK, "softmax_ce 2x3 run");
        double got = get(&f.call.out, 0);
        CHECK(fabs(got - want) <= tol * want, "softmax_ce 2x3 %s: %.17g want %.17g", mp_dtype_name(dts[d]), got, want);
        for (int i = 0; i < 6; i++) {
            double g = 1.7 * (p[i] - (i % 3 == (int)lab[i / 3])) / 2;
            double an = get(&f.call.d_in[0], i);
            CHECK(fabs(an - g) <= tol, "softmax_ce 2x3 %s: d_logits[%d] %.17g want %.17g", mp_dtype_name(dts[d]), i, an, g);
        }
        op_fixture_free(&f);
    }
    /* huge logits stay finite and exact */
    {
        const double xb[6] = {1000, 0, -1000, -5000, 3000, 2999};
        const double lb[2] = {1, 2};
        double wb = (1000.0 + (3000.0 + log1p(exp(-1.0)) - 2999.0)) / 2;
        for (int d = 0; d < 2; d++) {
            op_fixture f;
            CHECK(run_loss(&f, MP_OP_SOFTMAX_CE, dts[d], 2, 3, xb, lb, 1.0) == MP_OK, "softmax_ce big run");
            double got = get(&f.call.out, 0);
            CHECK(isfinite(got) && fabs(got - wb) <= 1e-6 * wb, "softmax_ce big logits %s: %.17g want %.17g",
                  mp_dtype_name(dts[d]), got, wb);
            int fin = 1;
            for (int i = 0; i < 6; i++) fin &= isfinite(get(&f.call.d_in[0], i));
            CHECK(fin, "softmax_ce big logits %s: non-finite gradient", mp_dtype_name(dts[d]));
            op_fixture_free(&f);
        }
    }
    /* f32 kernels against f64 on a bigger random batch (parallel path) */
    {
        mp_shape ss[2] = {mp_shape2(300, 100), mp_shape1(300)};
        mp_dtype d32[2] = {MP_DTYPE_F32, MP_DTYPE_I32};
        op_fixture a, b;
        MP_ASSERT(op_fixture_init(&a, MP_OP_SOFTMAX_CE, (mp_op_attr){0}, 2, ss, d32, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK);
        MP_ASSERT(op_fixture_init(&b, MP_OP_SOFTMAX_CE, (mp_op_attr){0}, 2, ss, ce_dtypes, MP_DTYPE_F64, MP_IMPL_REF, true) == MP_OK);
        op_fixture_randomize(&b, 3);
        op_fixture_copy_data(&a, &b);
        MP_ASSERT(a.vt->forward(&a.call) == MP_OK && b.vt->forward(&b.call) == MP_OK);
        MP_ASSERT(a.vt->backward(&a.call) == MP_OK && b.vt->backward(&b.call) == MP_OK);
        double lo = get(&b.call.out, 0);
        CHECK(fabs(get(&a.call.out, 0) - lo) <= 1e-6 * lo, "softmax_ce f32 %g vs f64 %g", get(&a.call.out, 0), lo);
        double worst = 0;
        for (int64_t i = 0; i < 300 * 100; i++)
            worst = fmax(worst, fabs(get(&a.call.d_in[0], i) - get(&b.call.d_in[0], i)));
        CHECK(worst < 1e-8, "softmax_ce f32 vs f64 gradient max diff %g", worst);
        /* backward overwrites */
        for (int64_t i = 0; i < 300 * 100; i++) set(&b.call.d_in[0], i, 1e30);
        MP_ASSERT(b.vt->backward(&b.call) == MP_OK);
        worst = 0;
        for (int64_t i = 0; i < 300 * 100; i++)
            worst = fmax(worst, fabs(get(&a.call.d_in[0], i) - get(&b.call.d_in[0], i)));
        CHECK(worst < 1e-8, "softmax_ce: backward did not overwrite d_logits");
        b.call.d_in[0].data = NULL;
        CHECK(b.vt->backward(&b.call) == MP_OK, "softmax_ce backward with NULL d_logits");
        op_fixture_free(&a);
        op_fixture_free(&b);
    }
    /* a label outside [0, K) fails at forward, naming node, sample and label */
    const double badlab[2][2] = {{2, 3}, {-1, 0}};
    const char *needles[2][2] = {{"sample 1", "label 3"}, {"sample 0", "label -1"}};
    for (int t = 0; t < 2; t++) {
        op_fixture f;
        mp_status s = run_loss(&f, MP_OP_SOFTMAX_CE, MP_DTYPE_F64, 2, 3, x, badlab[t], 1.0);
        const char *msg = mp_last_error();
        CHECK(s == MP_ERR_INVALID_ARG, "softmax_ce bad label: status %s", mp_status_name(s));
        CHECK(strstr(msg, "test_op") && strstr(msg, needles[t][0]) && strstr(msg, needles[t][1]),
              "softmax_ce bad label message '%s'", msg);
        op_fixture_free(&f);
    }
    /* infer errors */
    {
        op_fixture f;
        mp_shape ss[2] = {mp_shape2(4, 3), mp_shape1(5)};
        mp_status s = op_fixture_init(&f, MP_OP_SOFTMAX_CE, (mp_op_attr){0}, 2, ss, ce_dtypes, MP_DTYPE_F64, MP_IMPL_REF, true);
        CHECK(s == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "(4, 3)") &&
                  strstr(mp_last_error(), "(5)"),
              "softmax_ce label count mismatch: %s '%s'", mp_status_name(s), mp_last_error());
        ss[1] = mp_shape1(4);
        s = op_fixture_init(&f, MP_OP_SOFTMAX_CE, (mp_op_attr){0}, 2, ss, NULL, MP_DTYPE_F64, MP_IMPL_REF, true);
        CHECK(s == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "int32"),
              "softmax_ce float labels: %s '%s'", mp_status_name(s), mp_last_error());
        mp_shape s4[2] = {mp_shape4(4, 3, 2, 2), mp_shape1(4)};
        s = op_fixture_init(&f, MP_OP_SOFTMAX_CE, (mp_op_attr){0}, 2, s4, ce_dtypes, MP_DTYPE_F64, MP_IMPL_REF, true);
        CHECK(s == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op"), "softmax_ce 4-D logits: %s '%s'",
              mp_status_name(s), mp_last_error());
    }
}

/* the textbook form, fine in double for |x| <= 100 */
static double bce_naive(double x, double t) { return log(1.0 + exp(x)) - x * t; }

static void test_bce(mp_rng *r) {
    for (int trial = 0; trial < 4; trial++) {
        mp_shape s = mp_shape2(rnd(r, 1, 6), rnd(r, 1, 10));
        mp_shape ss[2] = {s, s};
        double e = gradcheck_op(MP_OP_BCE_LOGITS, (mp_op_attr){0}, 2, ss, NULL, true, 700 + trial, 0);
        CHECK(e < 1e-6, "bce trial %d rel.err %g", trial, e);
    }
    const double x[8] = {100, -100, 0.5, -2, 0, 3, 100, -100};
    const double t[8] = {0, 1, 0.3, 1, 0.5, 0.2, 1, 0};
    double want = 0;
    for (int i = 0; i < 8; i++) want += bce_naive(x[i], t[i]) / 8;
    mp_dtype dts[2] = {MP_DTYPE_F64, MP_DTYPE_F32};
    for (int d = 0; d < 2; d++) {
        double tol = dts[d] == MP_DTYPE_F64 ? 1e-14 : 1e-6;
        op_fixture f;
        CHECK(run_loss(&f, MP_OP_BCE_LOGITS, dts[d], 2, 4, x, t, 1.7) == MP_OK, "bce run");
        double got = get(&f.call.out, 0);
        CHECK(isfinite(got) && fabs(got - want) <= tol * want, "bce %s: %.17g want %.17g", mp_dtype_name(dts[d]),
              got, want);
        for (int i = 0; i < 8; i++) {
            double sig = 1.0 / (1.0 + exp(-x[i]));
            double gx = 1.7 * (sig - t[i]) / 8, gt = -1.7 * x[i] / 8;
            double ax = get(&f.call.d_in[0], i), at = get(&f.call.d_in[1], i);
            CHECK(isfinite(ax) && fabs(ax - gx) <= tol * fmax(1, fabs(gx)), "bce %s d_x[%d] %.17g want %.17g",
                  mp_dtype_name(dts[d]), i, ax, gx);
            CHECK(fabs(at - gt) <= tol * fmax(1, fabs(gt)), "bce %s d_t[%d] %.17g want %.17g", mp_dtype_name(dts[d]),
                  i, at, gt);
        }
        /* backward overwrites, and skips a NULL gradient */
        for (int i = 0; i < 8; i++) set(&f.call.d_in[0], i, 1e30);
        void *dt = f.call.d_in[1].data;
        f.call.d_in[1].data = NULL;
        MP_ASSERT(f.vt->backward(&f.call) == MP_OK);
        f.call.d_in[1].data = dt;
        double worst = 0;
        for (int i = 0; i < 8; i++)
            worst = fmax(worst, fabs(get(&f.call.d_in[0], i) - 1.7 * (1.0 / (1.0 + exp(-x[i])) - t[i]) / 8));
        CHECK(worst <= tol, "bce %s: backward did not overwrite d_x (%g)", mp_dtype_name(dts[d]), worst);
        op_fixture_free(&f);
    }
    /* a batch large enough for several partial-sum blocks, f32 vs f64 */
    {
        mp_shape ss[2] = {mp_shape2(64, 1000), mp_shape2(64, 1000)};
        op_fixture a, b;
        MP_ASSERT(op_fixture_init(&a, MP_OP_BCE_LOGITS, (mp_op_attr){0}, 2, ss, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK);
        MP_ASSERT(op_fixture_init(&b, MP_OP_BCE_LOGITS, (mp_op_attr){0}, 2, ss, NULL, MP_DTYPE_F64, MP_IMPL_REF, true) == MP_OK);
        op_fixture_randomize(&b, 4);
        op_fixture_copy_data(&a, &b);
        MP_ASSERT(a.vt->forward(&a.call) == MP_OK && b.vt->forward(&b.call) == MP_OK);
        MP_ASSERT(a.vt->backward(&a.call) == MP_OK && b.vt->backward(&b.call) == MP_OK);
        double lo = get(&b.call.out, 0), direct = 0;
        for (int64_t i = 0; i < 64000; i++) direct += bce_naive(get(&b.call.in[0], i), get(&b.call.in[1], i));
        direct /= 64000;
        CHECK(fabs(lo - direct) <= 1e-12 * direct, "bce blocked sum %.17g vs direct %.17g", lo, direct);
        CHECK(fabs(get(&a.call.out, 0) - lo) <= 1e-6 * lo, "bce f32 %g vs f64 %g", get(&a.call.out, 0), lo);
        double worst = 0;
        for (int k = 0; k < 2; k++)
            for (int64_t i = 0; i < 64000; i++)
                worst = fmax(worst, fabs(get(&a.call.d_in[k], i) - get(&b.call.d_in[k], i)));
        CHECK(worst < 1e-10, "bce f32 vs f64 gradient max diff %g", worst);
        op_fixture_free(&a);
        op_fixture_free(&b);
    }
    {
        op_fixture f;
        mp_shape ss[2] = {mp_shape2(4, 3), mp_shape2(4, 2)};
        mp_status s = op_fixture_init(&f, MP_OP_BCE_LOGITS, (mp_op_attr){0}, 2, ss, NULL, MP_DTYPE_F64, MP_IMPL_REF, true);
        CHECK(s == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "(4, 3)") &&
                  strstr(mp_last_error(), "(4, 2)"),
              "bce shape mismatch: %s '%s'", mp_status_name(s), mp_last_error());
    }
}

int main(void) {
    mp_rng r;
    mp_rng_seed(&r, 13);
    /* strong references: op_table.c refers to these weakly while ops land */
    CHECK(mp_op_lookup(MP_OP_SOFTMAX_CE) == &mp_op_softmax_ce_vt, "softmax_ce vtable");
    CHECK(mp_op_lookup(MP_OP_BCE_LOGITS) == &mp_op_bce_logits_vt, "bce vtable");
    test_softmax_ce(&r);
    test_bce(&r);
    return test_summary("test_op_loss");
}
