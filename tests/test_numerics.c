/* test_numerics.c — per-tensor numerics statistics (mixprec/numerics.h)
 * against an f64 recomputation that rounds every value to fp16 and bf16 by
 * arithmetic (nearest even, with the formats' exponent ranges), for tensors
 * stored in f32, f16 and bf16, over the rounding boundaries (overflow,
 * underflow, subnormal, zero, NaN, inf) and random magnitudes from 2^-149 to
 * 2^127; then the trainer's collection: which steps, which tensors, and
 * gradients carrying the loss scale. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"

/* a rounded to a format with p significand bits and exponents emin..emax;
 * INFINITY when it overflows. Uses the default rounding mode (ties to even). */
static double round_format(double a, int p, int emin, int emax) {
    if (a == 0) return 0;
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
    int exp = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, exp - (p - 1));
    double r = nearbyint(a / q) * q;
    return r >= ldexp(1.0, emax + 1) ? INFINITY : r;
}

typedef struct {
    int64_t nan, inf, zero, over[2], under[2], sub[2], hist[MP_NUMERICS_HIST_BINS];
    double amax, amin;
} oracle;

static void oracle_of(const double *v, int64_t n, oracle *o) {
    memset(o, 0, sizeof *o);
    const int p[2] = {11, 8}, emin[2] = {-14, -126}, emax[2] = {15, 127};
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(v[i]);
        if (isnan(a)) { o->nan++; continue; }
        if (isinf(a)) { o->inf++; continue; }
        if (a == 0) { o->zero++; continue; }
        o->amax = fmax(o->amax, a);
        o->amin = o->amin == 0 ? a : fmin(o->amin, a);
        int e;
        frexp(a, &e);
        o->hist[e - 1 - MP_NUMERICS_HIST_MIN]++;
        for (int f = 0; f < 2; f++) {
            double r = round_format(a, p[f], emin[f], emax[f]);
            if (isinf(r)) o->over[f]++;
            else if (r == 0) o->under[f]++;
            else if (r < ldexp(1.0, emin[f])) o->sub[f]++;
        }
    }
}

static void check_equal(const char *what, const mp_tensor_stats *s, const oracle *o, int64_t n) {
    CHECK(s->numel == n, "%s: numel %lld", what, (long long)s->numel);
    CHECK(s->nan == o->nan && s->inf == o->inf && s->zero == o->zero, "%s: nan %lld/%lld inf %lld/%lld zero %lld/%lld",
          what, (long long)s->nan, (long long)o->nan, (long long)s->inf, (long long)o->inf, (long long)s->zero,
          (long long)o->zero);
    CHECK(s->amax == o->amax && s->amin == o->amin, "%s: amax %g/%g amin %g/%g", what, s->amax, o->amax, s->amin,
          o->amin);
    for (int f = 0; f < 2; f++)
        CHECK(s->overflow[f] == o->over[f] && s->underflow[f] == o->under[f] && s->subnormal[f] == o->sub[f],
              "%s %s: overflow %lld/%lld underflow %lld/%lld subnormal %lld/%lld", what, f ? "bf16" : "fp16",
              (long long)s->overflow[f], (long long)o->over[f], (long long)s->underflow[f], (long long)o->under[f],
              (long long)s->subnormal[f], (long long)o->sub[f]);
    int bad = 0;
    for (int k = 0; k < MP_NUMERICS_HIST_BINS; k++) bad += s->hist[k] != o->hist[k];
    CHECK(bad == 0, "%s: %d histogram bins differ", what, bad);
}

/* The boundaries of both formats, each just below, at and just above, both signs. */
static int edge_values(float *x) {
    const float at[] = {65504.0f, 65519.996f, 65520.0f, 0x1p-25f, 0x1p-24f, 0x1p-14f - 0x1p-25f, 0x1p-14f,
                        0x1.7p-25f, 0x1.ffp127f, 0x1.fep127f, FLT_MAX, 0x1p-134f, 0x1p-133f, 0x1p-126f - 0x1p-134f,
                        0x1p-126f, FLT_MIN, 0x1p-149f, 1.0f, 3.0f, 0.1f};
    int n = 0;
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        for (int s = 0; s < 2; s++) {
            const float v = s ? -at[i] : at[i];
            x[n++] = nextafterf(v, 0.0f);
            x[n++] = v;
            x[n++] = nextafterf(v, s ? -INFINITY : INFINITY);
        }
    x[n++] = 0.0f, x[n++] = -0.0f, x[n++] = NAN, x[n++] = INFINITY, x[n++] = -INFINITY;
    return n;
}

static void test_against_f64(void) {
    const int64_t n = 200000;
    float *x = malloc((size_t)n * sizeof *x);
    double *v = malloc((size_t)n * sizeof *v);
    void *stored = malloc((size_t)n * 4);
    uint64_t r = 88172645463325252ull;
    int e = edge_values(x);
    for (int64_t i = e; i < n; i++) { /* log-uniform magnitudes, random signs */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double u = (double)(r >> 11) / 9007199254740992.0;
        x[i] = (float)((r & 1 ? -1 : 1) * ldexp(1.0 + u, (int)(r % 277) - 149));
    }
    const mp_dtype dts[3] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};
    for (int d = 0; d < 3; d++)
        for (int small = 0; small < 2; small++) { /* the serial and the parallel pass */
            const int64_t m = small ? e : n;
            mp_store_f32(stored, dts[d], x, m); /* the tensor as that dtype stores it */
            for (int64_t i = 0; i < m; i++) {
                if (dts[d] == MP_DTYPE_F32) v[i] = ((float *)stored)[i];
                else if (dts[d] == MP_DTYPE_F16) v[i] = mp_f16_to_f32(((mp_f16 *)stored)[i]);
                else v[i] = mp_bf16_to_f32(((mp_bf16 *)stored)[i]);
            }
            mp_tensor_stats s;
            oracle o;
            CHECK(mp_tensor_stats_compute(stored, dts[d], m, &s) == MP_OK, "%s", mp_last_error());
            oracle_of(v, m, &o);
            char what[64];
            snprintf(what, sizeof what, "%s, %lld values", mp_dtype_name(dts[d]), (long long)m);
            check_equal(what, &s, &o, m);
            if (d == 0 && small) { /* the edges alone: each class is present */
                CHECK(s.overflow[0] > 0 && s.underflow[0] > 0 && s.subnormal[0] > 0 && s.overflow[1] > 0 &&
                          s.underflow[1] > 0 && s.subnormal[1] > 0 && s.nan == 1 && s.inf >= 2 && s.zero >= 2,
                      "edge values miss a class");
            }
            /* shares at a power-of-two scale from the histogram: exact at power-of-two bounds */
            for (int k = -20; k <= 20; k += 5) {
                int64_t want = 0;
                for (int64_t i = 0; i < m; i++)
                    if (isfinite(v[i]) && v[i] != 0 && ldexp(fabs(v[i]), k) < 0x1p-24) want++;
                CHECK(mp_tensor_stats_below(&s, k, -24) == want, "%s: below 2^-24 at scale 2^%d: %lld, want %lld", what,
                      k, (long long)mp_tensor_stats_below(&s, k, -24), (long long)want);
            }
        }
    mp_tensor_stats s;
    CHECK(mp_tensor_stats_compute(x, MP_DTYPE_I32, 4, &s) == MP_ERR_INVALID_ARG, "i32 accepted");
    CHECK(mp_tensor_stats_compute(NULL, MP_DTYPE_F32, 4, &s) == MP_ERR_INVALID_ARG, "NULL data accepted");
    CHECK(mp_tensor_stats_compute(NULL, MP_DTYPE_F32, 0, &s) == MP_OK && s.numel == 0, "empty tensor");
    free(x);
    free(v);
    free(stored);
}

/* input -> fc (linear) -> loss, trained with a static loss scale of 1024. */
static void test_trainer_collection(void) {
    mp_graph *g = mp_graph_create();
    mp_node in = mp_graph_input(g, "x", 4, 1, 1), y = mp_graph_labels(g, "y");
    mp_node fc = mp_linear(g, "fc", mp_flatten(g, "flat", in), (mp_linear_opts){.out_features = 3, .bias = true});
    mp_node loss = mp_softmax_cross_entropy(g, "loss", fc, y);
    mp_graph_mark_output(g, fc);
    CHECK(mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK, "%s", mp_last_error());
    mp_optimizer *opt;
    CHECK(mp_optimizer_create(g, &(mp_optimizer_opts){.lr = {.base_lr = 0.1f}}, &opt) == MP_OK, "%s", mp_last_error());
    mp_trainer *t;
    CHECK(mp_trainer_create(g, &(mp_trainer_opts){.batch = 8, .input = in, .labels = y, .loss = loss, .optimizer = opt,
                                                   .loss_scaling = MP_LOSS_SCALING_ON,
                                                   .scaler = {.static_scale = true, .init_scale = 1024}},
                            &t) == MP_OK, "%s", mp_last_error());
    CHECK_ERR(mp_trainer_numerics_enable(t, &(mp_numerics_opts){.nodes = "fc,nope"}), MP_ERR_INVALID_ARG, "'nope'");
    /* an empty name anywhere, a trailing comma's too, is the same error */
    static const char *const empty[] = {"fc,,loss", ",fc", "fc,", ","};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
        CHECK_ERR(mp_trainer_numerics_enable(t, &(mp_numerics_opts){.nodes = empty[i]}), MP_ERR_INVALID_ARG,
                  "node list '", empty[i], "empty");
    CHECK(mp_trainer_numerics_enable(t, &(mp_numerics_opts){.every = 2, .nodes = "fc,loss"}) == MP_OK, "%s",
          mp_last_error());
    float xs[32];
    int32_t ys[8];
    for (int i = 0; i < 32; i++) xs[i] = (float)((i * 7) % 11) - 5.0f;
    for (int i = 0; i < 8; i++) ys[i] = i % 3;
    const mp_numerics_record *rec;
    int n;
    int64_t step;
    for (int k = 1; k <= 4; k++) {
        CHECK(mp_trainer_step(t, &(mp_batch){.images = xs, .labels = ys, .n = 8}, NULL) == MP_OK, "%s", mp_last_error());
        CHECK(mp_trainer_numerics(t, &rec, &n, &step) == MP_OK, "numerics");
        CHECK(step == (k < 2 ? 0 : k / 2 * 2), "after step %d the newest collection is step %lld", k, (long long)step);
    }
    /* step 4's records: fc.weight, fc.bias (params); fc output; loss output;
     * loss grad; fc grad; fc.weight, fc.bias grads */
    int seen[16] = {0};
    float out[24], grad[12];
    CHECK(mp_trainer_read(t, fc, out, 24) == MP_OK, "%s", mp_last_error());
    CHECK(mp_trainer_grad_get(t, "fc.weight", grad, 12) == MP_OK, "%s", mp_last_error());
    for (int i = 0; i < n; i++) {
        const mp_numerics_record *r = &rec[i];
        seen[r->kind]++;
        if (r->kind == MP_NUMERICS_OUTPUT && r->node == fc) {
            mp_tensor_stats s;
            mp_tensor_stats_compute(out, MP_DTYPE_F32, 24, &s);
            CHECK(r->dtype == MP_DTYPE_F32 && r->stats.amax == s.amax && r->stats.numel == 24,
                  "fc output amax %g, read back %g", r->stats.amax, s.amax);
        }
        if (r->kind == MP_NUMERICS_GRAD && r->node == loss)
            CHECK(r->stats.amax == 1024 && r->scale == 1024, "the loss's gradient is the scale: %g", r->stats.amax);
        if (r->kind == MP_NUMERICS_PARAM_GRAD && !strcmp(r->name, "fc.weight")) {
            double amax = 0;
            for (int j = 0; j < 12; j++) amax = fmax(amax, fabs(grad[j]));
            CHECK(fabs(r->stats.amax - 1024 * amax) <= 1e-6 * r->stats.amax && r->scale == 1024,
                  "fc.weight's gradient is measured scaled: %g vs 1024 x %g", r->stats.amax, amax);
        }
    }
    CHECK(seen[MP_NUMERICS_PARAM] == 2 && seen[MP_NUMERICS_OUTPUT] == 2 && seen[MP_NUMERICS_GRAD] == 2 &&
              seen[MP_NUMERICS_PARAM_GRAD] == 2,
          "records by kind: %d params, %d outputs, %d grads, %d param grads", seen[MP_NUMERICS_PARAM],
          seen[MP_NUMERICS_OUTPUT], seen[MP_NUMERICS_GRAD], seen[MP_NUMERICS_PARAM_GRAD]);
    CHECK(mp_trainer_numerics_enable(t, NULL) == MP_OK, "off");
    CHECK(mp_trainer_numerics(t, &rec, &n, &step) == MP_OK && n == 0 && step == 0, "off: no records");
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_graph_destroy(g);
}

/* mp_tensor_stats_below at the ints' limits: the exponents' sum does not
 * overflow (3e38 times 2^INT_MAX is not below 1, 1e-45 times 2^-INT_MAX is),
 * and a NULL s counts nothing instead of crashing. */
static void test_below_extremes(void) {
    const float tiny = 1e-45f, big = 3e38f, one = 1;
    mp_tensor_stats s;
    CHECK(mp_tensor_stats_compute(&tiny, MP_DTYPE_F32, 1, &s) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tensor_stats_below(&s, -INT_MAX, 0) == 1, "1e-45 * 2^-INT_MAX below 1: %lld",
          (long long)mp_tensor_stats_below(&s, -INT_MAX, 0));
    CHECK(mp_tensor_stats_below(&s, INT_MIN, INT_MAX) == 1, "1e-45 * 2^INT_MIN below 2^INT_MAX: %lld",
          (long long)mp_tensor_stats_below(&s, INT_MIN, INT_MAX));
    CHECK(mp_tensor_stats_compute(&big, MP_DTYPE_F32, 1, &s) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tensor_stats_below(&s, INT_MAX, 0) == 0, "3e38 * 2^INT_MAX below 1: %lld",
          (long long)mp_tensor_stats_below(&s, INT_MAX, 0));
    CHECK(mp_tensor_stats_compute(&one, MP_DTYPE_F32, 1, &s) == MP_OK, "%s", mp_last_error());
    CHECK(mp_tensor_stats_below(&s, 10, INT_MAX) == 1 && mp_tensor_stats_below(&s, 0, INT_MIN) == 0,
          "1 at the limits of below_log2: %lld %lld", (long long)mp_tensor_stats_below(&s, 10, INT_MAX),
          (long long)mp_tensor_stats_below(&s, 0, INT_MIN));
    CHECK(mp_tensor_stats_below(NULL, 0, 0) == 0, "NULL statistics");
}

/* A ReLU fused into its batch norm (CPU plans fuse it) selected alone: it is
 * measured as the batch norm's output, which holds the ReLU's result, and
 * its records carry its own name and node, forward and gradient. */
static void test_fused_node(void) {
    enum { NB = 2, HW = 8 };
    mp_model m;
    MP_ASSERT(mp_model_build("small", 1, HW, HW, 3, &m) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_FP32}) == MP_OK);
    mp_graph_init_params(m.g, 3);
    mp_optimizer *opt;
    MP_ASSERT(mp_optimizer_create(m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}}, &opt) == MP_OK);
    const mp_node relu = mp_graph_find(m.g, "conv1_relu");
    MP_ASSERT(relu >= 0);
    mp_graph_mark_output(m.g, relu); /* read back below (still fused: the batch norm is not an output) */
    mp_trainer *t;
    MP_ASSERT(mp_trainer_create(m.g, &(mp_trainer_opts){.batch = NB, .loss = m.loss, .optimizer = opt,
                                                        .input = m.input, .labels = m.labels}, &t) == MP_OK);
    MP_ASSERT(mp_trainer_numerics_enable(t, &(mp_numerics_opts){.nodes = "conv1_relu"}) == MP_OK);
    float img[NB * HW * HW];
    for (int i = 0; i < NB * HW * HW; i++) img[i] = sinf((float)i * 0.37f);
    int32_t lab[NB] = {0, 2};
    CHECK(mp_trainer_step(t, &(mp_batch){img, lab, NB}, NULL) == MP_OK, "%s", mp_last_error());
    const mp_numerics_record *rec;
    int n = 0;
    int64_t step;
    CHECK(mp_trainer_numerics(t, &rec, &n, &step) == MP_OK && n == 2 && step == 1, "fused ReLU: %d records", n);
    bool out = false, grad = false;
    for (int i = 0; i < n; i++) {
        CHECK(rec[i].node == relu && !strcmp(rec[i].name, "conv1_relu"), "record %d is node %d '%s'", i, rec[i].node,
              rec[i].name);
        out |= rec[i].kind == MP_NUMERICS_OUTPUT, grad |= rec[i].kind == MP_NUMERICS_GRAD;
        if (rec[i].kind != MP_NUMERICS_OUTPUT) continue;
        const int64_t numel = rec[i].stats.numel;
        float *y = malloc((size_t)numel * sizeof *y);
        mp_tensor_stats s;
        CHECK(mp_trainer_read(t, relu, y, (size_t)numel) == MP_OK && mp_tensor_stats_compute(y, MP_DTYPE_F32, numel,
              &s) == MP_OK, "%s", mp_last_error());
        CHECK(rec[i].stats.amax == s.amax && rec[i].stats.zero == s.zero && s.zero > 0, "fused ReLU output: amax %g "
              "and %lld zeros, read back %g and %lld", rec[i].stats.amax, (long long)rec[i].stats.zero, s.amax,
              (long long)s.zero);
        free(y);
    }
    CHECK(out && grad, "fused ReLU: output record %d, gradient record %d", out, grad);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    mp_model_free(&m);
}

int main(void) {
    test_against_f64();
    test_below_extremes();
    test_trainer_collection();
    test_fused_node();
    return test_summary("test_numerics");
}
