/* test_optim.c — optimizers against the torch.optim formulas written out
 * again here in double (SGD with momentum / Nesterov / weight decay, Adam,
 * AdamW, tensors with decay = false, tensors large enough for the threaded
 * and blocked paths), SGD momentum kept in f16/bf16 (state_dtype) against a
 * hand-written f32 loop bit for bit, AdamW vs Adam, convergence on a
 * quadratic, option errors, and the learning-rate schedules and their
 * parser. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "core/rng.h"
#include "optim/lr_schedule.h"
#include "optim/optim.h"

#define N_TENSORS 4
/* Small, one not taking weight decay, one crossing Adam's 256-element blocks,
 * one above the threading threshold. */
static const int64_t tensor_n[N_TENSORS] = {13, 5, 300, MP_OPTIM_PAR_MIN + 77};
static const bool tensor_decay[N_TENSORS] = {true, false, true, true};

/* ---- the PyTorch formulas, in double ------------------------------------ */

typedef struct {
    double *p, *buf, *m, *v; // (n) each
    int64_t n;
} ref_tensor;

/* torch.optim.SGD, dampening 0; step is 1-based. */
static void ref_sgd(ref_tensor *r, const float *grad, double lr, double mu, double wd, bool nesterov, int step) {
    for (int64_t i = 0; i < r->n; i++) {
        double g = (double)grad[i];
        if (wd != 0.0) g += wd * r->p[i];
        if (mu != 0.0) {
            if (step == 1) r->buf[i] = g;
            else r->buf[i] = mu * r->buf[i] + g;
            g = nesterov ? g + mu * r->buf[i] : r->buf[i];
        }
        r->p[i] -= lr * g;
    }
}

/* torch.optim.Adam (L2) and AdamW (decoupled); step is 1-based. */
static void ref_adam(ref_tensor *r, const float *grad, double lr, double b1, double b2, double eps, double wd,
                     bool adamw, int step) {
    double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
    for (int64_t i = 0; i < r->n; i++) {
        double g = (double)grad[i];
        if (adamw) r->p[i] *= 1.0 - lr * wd;
        else g += wd * r->p[i];
        r->m[i] = b1 * r->m[i] + (1.0 - b1) * g;
        r->v[i] = b2 * r->v[i] + (1.0 - b2) * g * g;
        double mhat = r->m[i] / bc1, vhat = r->v[i] / bc2;
        r->p[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

/* max |a - b| / max(max |b|, 1e-30): error relative to the tensor's scale. */
static double rel_err(const float *a, const double *b, int64_t n) {
    double num = 0.0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || d != d) num = d != d ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* ---- optimizer vs reference over several steps --------------------------- */

typedef struct {
    float *p[N_TENSORS];
    float *g[N_TENSORS];
    float *target[N_TENSORS], *curv[N_TENSORS];
    ref_tensor ref[N_TENSORS];
    mp_param_ref refs[N_TENSORS];
} fixture;

static void fixture_init(fixture *f, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    static const char *names[N_TENSORS] = {"conv1.weight", "conv1.bias", "fc.weight", "big.weight"};
    for (int t = 0; t < N_TENSORS; t++) {
        int64_t n = tensor_n[t];
        f->p[t] = malloc((size_t)n * sizeof(float));
        f->g[t] = malloc((size_t)n * sizeof(float));
        f->target[t] = malloc((size_t)n * sizeof(float));
        f->curv[t] = malloc((size_t)n * sizeof(float));
        f->ref[t].n = n;
        f->ref[t].p = malloc((size_t)n * sizeof(double));
        f->ref[t].buf = calloc((size_t)n, sizeof(double));
        f->ref[t].m = calloc((size_t)n, sizeof(double));
        f->ref[t].v = calloc((size_t)n, sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            f->p[t][i] = (float)mp_rng_normal(&r);
            f->ref[t].p[i] = f->p[t][i];
            f->target[t][i] = (float)mp_rng_normal(&r);
            f->curv[t][i] = (float)(0.5 + 1.5 * mp_rng_uniform(&r));
        }
        f->refs[t] = (mp_param_ref){.param = f->p[t], .grad = f->g[t], .n = n, .decay = tensor_decay[t],
                                    .name = names[t]};
    }
}

static void fixture_free(fixture *f) {
    for (int t = 0; t < N_TENSORS; t++) {
        free(f->p[t]); free(f->g[t]); free(f->target[t]); free(f->curv[t]);
        free(f->ref[t].p); free(f->ref[t].buf); free(f->ref[t].m); free(f->ref[t].v);
    }
}

/* Gradient of a noisy quadratic at the current fp32 parameters; both the
 * optimizer and the reference read these same fp32 values. */
static void fixture_grads(fixture *f, mp_rng *r) {
    for (int t = 0; t < N_TENSORS; t++)
        for (int64_t i = 0; i < tensor_n[t]; i++)
            f->g[t][i] = f->curv[t][i] * (f->p[t][i] - f->target[t][i]) + (float)(0.3 * mp_rng_normal(r));
}

static void check_against_reference(const char *label, mp_optim_opts o, int steps) {
    fixture f;
    fixture_init(&f, 1234);
    mp_optim *opt = NULL;
    mp_status st = mp_optim_create(o, f.refs, N_TENSORS, &opt);
    CHECK(st == MP_OK, "%s: create: %s", label, mp_last_error());
    if (st != MP_OK) {
        fixture_free(&f);
        return;
    }
    /* The reference reads the same fp32 hyper-parameters, widened. */
    double mu = o.momentum, wd = o.weight_decay;
    double b1 = o.beta1 || o.betas_as_given ? o.beta1 : 0.9f, b2 = o.beta2 || o.betas_as_given ? o.beta2 : 0.999f;
    double eps = o.eps ? o.eps : 1e-8f;
    mp_rng r;
    mp_rng_seed(&r, 99);
    double worst_p = 0.0, worst_s = 0.0;
    for (int k = 1; k <= steps; k++) {
        float lr = (o.kind == MP_OPTIM_SGD ? 0.1f : 0.01f) * (1.0f - 0.1f * (float)k); /* changes every step */
        fixture_grads(&f, &r);
        mp_optim_step(opt, lr);
        CHECK(mp_optim_step_count(opt) == k, "%s: step count %lld after %d steps", label,
              (long long)mp_optim_step_count(opt), k);
        for (int t = 0; t < N_TENSORS; t++) {
            ref_tensor *rt = &f.ref[t];
            double twd = tensor_decay[t] ? wd : 0.0;
            if (o.kind == MP_OPTIM_SGD) ref_sgd(rt, f.g[t], lr, mu, twd, o.nesterov, k);
            else ref_adam(rt, f.g[t], lr, b1, b2, eps, twd, o.kind == MP_OPTIM_ADAMW, k);
            double e = rel_err(f.p[t], rt->p, rt->n);
            if (e > worst_p) worst_p = e;
            CHECK(e < 1e-6, "%s: step %d tensor %d: param rel.err %g", label, k, t, e);
            float *bufs[2] = {NULL, NULL};
            int nb = mp_optim_state_tensors(opt, t, bufs);
            int want_nb = o.kind == MP_OPTIM_SGD ? (mu > 0 ? 1 : 0) : 2;
            CHECK(nb == want_nb, "%s: %d state tensors, want %d", label, nb, want_nb);
            const double *want[2] = {o.kind == MP_OPTIM_SGD ? rt->buf : rt->m, rt->v};
            for (int b = 0; b < nb && b < 2; b++) {
                double es = rel_err(bufs[b], want[b], rt->n);
                if (es > worst_s) worst_s = es;
                CHECK(es < 1e-6, "%s: step %d tensor %d: state %d rel.err %g", label, k, t, b, es);
            }
        }
    }
    printf("%-34s params rel.err %.2e, state rel.err %.2e\n", label, worst_p, worst_s);
    mp_optim_destroy(opt);
    fixture_free(&f);
}

/* ---- SGD momentum kept in f16 / bf16 ------------------------------------ */

/* x rounded to nearest even to dtype (F16, BF16; F32: x), by the scalar conversions. */
static float round_to(float x, mp_dtype dtype) {
    if (dtype == MP_DTYPE_F16) return mp_f16_to_f32(mp_f32_to_f16(x));
    if (dtype == MP_DTYPE_BF16) return mp_bf16_to_f32(mp_f32_to_bf16(x));
    return x;
}

/* The formula of optim.h written out once more, element by element in f32:
 * g = grad + wd*p; b = RNE_dtype(mu*buf + g); buf = b; p -= lr*(nesterov ? g + mu*b : b). */
static void hand_sgd(float *p, const float *grad, float *buf, int64_t n, float lr, float mu, float wd, bool nesterov,
                     mp_dtype dtype) {
    for (int64_t i = 0; i < n; i++) {
        const float g = grad[i] + wd * p[i];
        const float b = round_to(mu * buf[i] + g, dtype);
        buf[i] = b;
        p[i] = p[i] - lr * (nesterov ? g + mu * b : b);
    }
}

static int64_t bits_differ(const float *a, const float *b, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}

/* mp_optim with every tensor's state_dtype = dtype against hand_sgd over 6
 * steps, bit for bit (weights and buffers); the buffers must hold values of
 * dtype, and (F16/BF16) differ from the f32-state run's, or the rounding did
 * nothing. One tensor's gradients are tiny (f16 subnormal momentum); the
 * largest tensor takes the threaded path and a partial last chunk. */
static void test_low_state(const char *label, mp_optim_opts o, mp_dtype dtype) {
    static const float grad_scale[N_TENSORS] = {1.0f, 1e-6f, 0.3f, 1.0f};
    float *p[2][N_TENSORS], *g[N_TENSORS], *hp[N_TENSORS], *hb[N_TENSORS];
    mp_param_ref refs[2][N_TENSORS];
    mp_rng r;
    mp_rng_seed(&r, 31);
    for (int t = 0; t < N_TENSORS; t++) {
        const int64_t n = tensor_n[t];
        g[t] = malloc((size_t)n * sizeof(float));
        hp[t] = malloc((size_t)n * sizeof(float));
        hb[t] = calloc((size_t)n, sizeof(float));
        for (int64_t i = 0; i < n; i++) hp[t][i] = round_to((float)mp_rng_normal(&r), dtype);
        for (int k = 0; k < 2; k++) {
            p[k][t] = malloc((size_t)n * sizeof(float));
            memcpy(p[k][t], hp[t], (size_t)n * sizeof(float));
            refs[k][t] = (mp_param_ref){.param = p[k][t], .grad = g[t], .n = n, .decay = tensor_decay[t],
                                        .name = "w", .state_dtype = k == 0 ? dtype : MP_DTYPE_F32};
        }
    }
    mp_optim *opt[2] = {NULL, NULL}; /* [0]: state in dtype, [1]: f32 state */
    for (int k = 0; k < 2; k++)
        CHECK(mp_optim_create(o, refs[k], N_TENSORS, &opt[k]) == MP_OK, "%s: create: %s", label, mp_last_error());
    if (!opt[0] || !opt[1]) return;
    int64_t differ = 0, unrounded = 0, rounded_away = 0, compared = 0;
    for (int step = 1; step <= 6; step++) {
        const float lr = 0.05f * (1.0f + 0.1f * (float)step);
        for (int t = 0; t < N_TENSORS; t++)
            for (int64_t i = 0; i < tensor_n[t]; i++) g[t][i] = (float)(grad_scale[t] * mp_rng_normal(&r));
        for (int k = 0; k < 2; k++) mp_optim_step(opt[k], lr);
        for (int t = 0; t < N_TENSORS; t++) {
            const int64_t n = tensor_n[t];
            const float wd = tensor_decay[t] ? o.weight_decay : 0.0f;
            hand_sgd(hp[t], g[t], hb[t], n, lr, o.momentum, wd, o.nesterov, dtype);
            float *b[2][2];
            mp_optim_state_tensors(opt[0], t, b[0]);
            mp_optim_state_tensors(opt[1], t, b[1]);
            const int64_t dp = bits_differ(p[0][t], hp[t], n), db = bits_differ(b[0][0], hb[t], n);
            CHECK(dp == 0 && db == 0, "%s: step %d tensor %d: %lld weights and %lld buffer values differ from the "
                  "hand-written loop", label, step, t, (long long)dp, (long long)db);
            differ += dp + db;
            compared += 2 * n;
            for (int64_t i = 0; i < n; i++) {
                unrounded += memcmp(&b[0][0][i], &(float){round_to(b[0][0][i], dtype)}, sizeof(float)) != 0;
                rounded_away += b[1][0][i] != round_to(b[1][0][i], dtype);
            }
        }
    }
    CHECK(unrounded == 0, "%s: %lld buffer values are not %s values", label, (long long)unrounded,
          mp_dtype_name(dtype));
    if (dtype == MP_DTYPE_F32) {
        /* f32 state: the same as an optimizer that never heard of state_dtype */
        for (int t = 0; t < N_TENSORS; t++) {
            float *b[2][2];
            mp_optim_state_tensors(opt[0], t, b[0]);
            mp_optim_state_tensors(opt[1], t, b[1]);
            CHECK(bits_differ(p[0][t], p[1][t], tensor_n[t]) == 0 && bits_differ(b[0][0], b[1][0], tensor_n[t]) == 0,
                  "%s: tensor %d: f32 state differs from the default", label, t);
        }
    } else {
        int64_t apart = 0;
        for (int t = 0; t < N_TENSORS; t++) apart += bits_differ(p[0][t], p[1][t], tensor_n[t]);
        CHECK(rounded_away > compared / 8 && apart > 0, "%s: the f32-state run has only %lld of %lld buffer values "
              "not in %s and %lld weights apart: the rounding is not exercised", label, (long long)rounded_away,
              (long long)compared / 2, mp_dtype_name(dtype), (long long)apart);
    }
    printf("%-34s 6 steps: %lld of %lld values differ from the hand loop; %s buffers\n", label, (long long)differ,
           (long long)compared, mp_dtype_name(dtype));
    for (int k = 0; k < 2; k++) mp_optim_destroy(opt[k]);
    for (int t = 0; t < N_TENSORS; t++) {
        free(p[0][t]); free(p[1][t]); free(g[t]); free(hp[t]); free(hb[t]);
    }
}

/* ---- AdamW vs Adam ------------------------------------------------------- */

/* Run Adam and AdamW side by side on the same fixed gradients. */
static void test_adamw_vs_adam(void) {
    enum { N = 37, STEPS = 6 };
    mp_rng r;
    mp_rng_seed(&r, 5);
    float p0[N], grads[STEPS][N];
    for (int i = 0; i < N; i++) p0[i] = (float)mp_rng_normal(&r);
    for (int k = 0; k < STEPS; k++)
        for (int i = 0; i < N; i++) grads[k][i] = (float)mp_rng_normal(&r);

    /* Three optimizers over two tensors each: [0] takes decay, [1] does not. */
    float p[3][2][N], g[2][N];
    mp_optim *opt[3];
    mp_optim_kind kinds[3] = {MP_OPTIM_ADAM, MP_OPTIM_ADAMW, MP_OPTIM_ADAMW};
    float wds[3] = {0.0f, 0.1f, 0.0f}; /* Adam wd 0, AdamW wd 0.1, AdamW wd 0 */
    for (int o = 0; o < 3; o++) {
        mp_param_ref refs[2];
        for (int t = 0; t < 2; t++) {
            memcpy(p[o][t], p0, sizeof p0);
            refs[t] = (mp_param_ref){.param = p[o][t], .grad = g[t], .n = N, .decay = t == 0, .name = "w"};
        }
        mp_status st = mp_optim_create((mp_optim_opts){.kind = kinds[o], .weight_decay = wds[o]}, refs, 2, &opt[o]);
        CHECK(st == MP_OK, "adamw vs adam: create %d: %s", o, mp_last_error());
        if (st != MP_OK) return;
    }
    /* The decoupled decay alone, in double, replayed from Adam's own updates. */
    double expect[N];
    for (int i = 0; i < N; i++) expect[i] = p0[i];
    for (int k = 0; k < STEPS; k++) {
        float lr = 0.02f + 0.01f * (float)k;
        memcpy(g[0], grads[k], sizeof grads[k]);
        memcpy(g[1], grads[k], sizeof grads[k]);
        float adam_before[N];
        memcpy(adam_before, p[0][0], sizeof adam_before);
        for (int o = 0; o < 3; o++) mp_optim_step(opt[o], lr);
        for (int i = 0; i < N; i++) {
            double update = (double)adam_before[i] - (double)p[0][0][i]; /* Adam's step, grads independent of p */
            expect[i] = expect[i] * (1.0 - (double)lr * 0.1f) - update;
        }
    }
    /* wd = 0: AdamW is Adam, bit for bit, parameters and moments. */
    float *sa[2], *sw[2], *sd[2];
    CHECK(memcmp(p[0], p[2], sizeof p[0]) == 0, "AdamW(wd 0) params differ from Adam(wd 0)");
    mp_optim_state_tensors(opt[0], 0, sa);
    mp_optim_state_tensors(opt[2], 0, sw);
    CHECK(memcmp(sa[0], sw[0], N * sizeof(float)) == 0 && memcmp(sa[1], sw[1], N * sizeof(float)) == 0,
          "AdamW(wd 0) moments differ from Adam(wd 0)");
    /* wd > 0: decoupled decay never enters the moments ... */
    mp_optim_state_tensors(opt[1], 0, sd);
    CHECK(memcmp(sa[0], sd[0], N * sizeof(float)) == 0 && memcmp(sa[1], sd[1], N * sizeof(float)) == 0,
          "AdamW(wd 0.1) moments differ from Adam(wd 0): the decay leaked into the gradient");
    /* ... leaves a decay = false tensor exactly as Adam does ... */
    CHECK(memcmp(p[1][1], p[0][1], sizeof p[0][1]) == 0, "AdamW decayed a decay = false tensor");
    /* ... and only shrinks the parameters by (1 - lr*wd) each step. */
    double e = rel_err(p[1][0], expect, N);
    double diff = 0.0;
    for (int i = 0; i < N; i++) diff = fmax(diff, fabs((double)p[1][0][i] - p[0][0][i]));
    CHECK(e < 1e-6, "AdamW params vs decayed Adam replay: rel.err %g", e);
    CHECK(diff > 1e-3, "AdamW(wd 0.1) barely differs from Adam (%g)", diff);

    /* Adam's L2 decay does enter the moments: m after one step is (1-b1)(g + wd p). */
    float q[N], gq[N];
    memcpy(q, p0, sizeof q);
    memcpy(gq, grads[0], sizeof gq);
    mp_param_ref ref = {.param = q, .grad = gq, .n = N, .decay = true, .name = "q"};
    mp_optim *adam_l2 = NULL;
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_ADAM, .weight_decay = 0.1f}, &ref, 1, &adam_l2) == MP_OK,
          "create adam l2: %s", mp_last_error());
    if (adam_l2) {
        mp_optim_step(adam_l2, 0.01f);
        float *s[2];
        mp_optim_state_tensors(adam_l2, 0, s);
        double worst = 0.0;
        for (int i = 0; i < N; i++) {
            double want = (1.0 - 0.9f) * ((double)gq[i] + 0.1f * (double)p0[i]);
            worst = fmax(worst, fabs(s[0][i] - want) / fmax(fabs(want), 1e-3));
        }
        CHECK(worst < 1e-5, "Adam L2: m after one step rel.err %g", worst);
        mp_optim_destroy(adam_l2);
    }
    for (int o = 0; o < 3; o++) mp_optim_destroy(opt[o]);
}

/* ---- convergence on a quadratic ----------------------------------------- */

/* Minimize 0.5 sum a (p - c)^2 (+ the L2 term wd/2 p^2 on the decayed tensor,
 * whose minimum is a c / (a + wd)) over two tensors, with a cosine schedule. */
static void test_converges(const char *label, mp_optim_opts o, float lr, int steps) {
    enum { N = 16 };
    mp_rng r;
    mp_rng_seed(&r, 77);
    float p[2][N], g[2][N], a[2][N], c[2][N];
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < N; i++) {
            p[t][i] = (float)(2.0 * mp_rng_normal(&r));
            a[t][i] = (float)(0.5 + 1.5 * mp_rng_uniform(&r));
            c[t][i] = (float)mp_rng_normal(&r);
        }
    mp_param_ref refs[2] = {{.param = p[0], .grad = g[0], .n = N, .decay = true, .name = "w"},
                            {.param = p[1], .grad = g[1], .n = N, .decay = false, .name = "b"}};
    mp_optim *opt = NULL;
    if (mp_optim_create(o, refs, 2, &opt) != MP_OK) {
        CHECK(0, "%s: create: %s", label, mp_last_error());
        return;
    }
    mp_lr_schedule s;
    CHECK(mp_lr_schedule_parse("cosine,warmup:10", lr, steps, &s) == MP_OK, "%s: schedule: %s", label,
          mp_last_error());
    for (int k = 0; k < steps; k++) {
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < N; i++) g[t][i] = a[t][i] * (p[t][i] - c[t][i]);
        mp_optim_step(opt, mp_lr_at(&s, mp_optim_step_count(opt)));
    }
    double l2 = o.kind == MP_OPTIM_ADAMW ? 0.0 : o.weight_decay, worst = 0.0;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < N; i++) {
            double opt_p = t == 0 ? a[t][i] * c[t][i] / (a[t][i] + l2) : c[t][i];
            worst = fmax(worst, fabs(p[t][i] - opt_p));
        }
    printf("%-34s %d steps: max |p - p*| %.2e\n", label, steps, worst);
    CHECK(worst < 1e-3, "%s: did not converge: max |p - p*| = %g", label, worst);
    mp_optim_destroy(opt);
}

/* ---- option errors -------------------------------------------------------- */

static void expect_create_error(mp_optim_opts o, const char *want) {
    float p[3] = {0}, g[3] = {0};
    mp_param_ref ref = {.param = p, .grad = g, .n = 3, .decay = true, .name = "w"};
    mp_optim *opt = (mp_optim *)&ref; /* must be reset to NULL on error */
    mp_status st = mp_optim_create(o, &ref, 1, &opt);
    CHECK(st == MP_ERR_INVALID_ARG && opt == NULL && strstr(mp_last_error(), want),
          "want an error with '%s', got status %d, message '%s'", want, (int)st, mp_last_error());
    if (st == MP_OK) mp_optim_destroy(opt);
}

static void test_bad_options(void) {
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 1.5f},
                        "optimizer: --momentum 1.5 must be in [0, 1)");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 1.0f}, "--momentum 1 must be in [0, 1)");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = -0.1f}, "--momentum -0.1");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = NAN}, "--momentum nan");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .nesterov = true}, "--nesterov needs --momentum > 0");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAM, .nesterov = true}, "--nesterov applies to sgd only");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAMW, .momentum = 0.9f}, "--momentum 0.9 applies to sgd");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .beta1 = 0.9f}, "--beta1/--beta2/--eps apply to adam");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .weight_decay = -1e-4f},
                        "--weight-decay -0.0001 must be");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAM, .weight_decay = INFINITY}, "--weight-decay inf");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAM, .beta1 = 1.0f}, "--beta1 1 must be in [0, 1)");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAMW, .beta2 = -0.5f}, "--beta2 -0.5 must be in [0, 1)");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAM, .eps = -1e-8f}, "--eps -1e-08 must be");
    expect_create_error((mp_optim_opts){.kind = (mp_optim_kind)7}, "unknown kind 7");

    /* Parameter lists. */
    float p[3] = {0};
    mp_param_ref bad = {.param = p, .grad = NULL, .n = 3, .name = "fc.bias"};
    mp_optim *opt = NULL;
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD}, &bad, 1, &opt) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "'fc.bias'"),
          "NULL grad: %s", mp_last_error());
    bad = (mp_param_ref){.param = p, .grad = p, .n = 3, .name = "fc.weight", .state_dtype = MP_DTYPE_F64};
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f}, &bad, 1, &opt) ==
                  MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "'fc.weight' has state dtype f64 (f32, f16 or bf16 expected)"),
          "f64 state: %s", mp_last_error());
    bad = (mp_param_ref){.param = p, .grad = p, .n = -2, .name = "neg"};
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD}, &bad, 1, &opt) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "'neg' has n = -2"),
          "negative n: %s", mp_last_error());

    /* Kind names. */
    mp_optim_kind k;
    for (int i = 0; i <= MP_OPTIM_ADAMW; i++)
        CHECK(mp_optim_kind_parse(mp_optim_kind_name((mp_optim_kind)i), &k) == MP_OK && k == (mp_optim_kind)i,
              "kind %d does not round-trip through '%s'", i, mp_optim_kind_name((mp_optim_kind)i));
    CHECK(strcmp(mp_optim_kind_name(MP_OPTIM_ADAMW), "adamw") == 0, "adamw name");
    CHECK(mp_optim_kind_parse("rmsprop", &k) == MP_ERR_INVALID_ARG &&
              strstr(mp_last_error(), "--optimizer 'rmsprop' is not one of sgd, adam, adamw"),
          "bad kind: %s", mp_last_error());
    CHECK(mp_optim_kind_parse("Adam", &k) == MP_ERR_INVALID_ARG, "kind names are lower case");
}

/* ---- betas taken as given ---------------------------------------------- */

/* Adam(beta1 = 0, beta2 = 0.9) with betas_as_given over two steps against
 * the closed form: no momentum, so the first moment is the gradient itself
 * (the default beta1 = 0.9 keeps 0.1 g) and the second step moves along
 * -g2 alone (beta1 = 0.9 would still follow g1). Without the flag the zeros
 * are the defaults. */
static void test_betas_as_given(void) {
    enum { N = 3 };
    const float g1[N] = {1.0f, -2.0f, 0.25f}, g2[N] = {-0.5f, 3.0f, 0.25f}, lr = 0.01f;
    const double b2 = 0.9f, eps = 1e-8f;
    float p[N] = {0.5f, -0.5f, 1.0f}, g[N];
    const float p0[N] = {0.5f, -0.5f, 1.0f};
    mp_param_ref ref = {.param = p, .grad = g, .n = N, .name = "w"};
    mp_optim *o = NULL;
    mp_optim_opts opts = {.kind = MP_OPTIM_ADAM, .beta1 = 0.0f, .beta2 = 0.9f, .betas_as_given = true};
    CHECK(mp_optim_create(opts, &ref, 1, &o) == MP_OK, "betas as given: %s", mp_last_error());
    if (!o) return;
    mp_optim_opts d = mp_optim_options(o);
    CHECK(d.beta1 == 0.0f && d.beta2 == 0.9f, "betas as given became %g/%g", d.beta1, d.beta2);
    memcpy(g, g1, sizeof g);
    mp_optim_step(o, lr);
    float *st[2] = {NULL, NULL};
    CHECK(mp_optim_state_tensors(o, 0, st) == 2, "adam: two buffers");
    double want[N];
    for (int i = 0; i < N; i++) {
        want[i] = p0[i] - lr * g1[i] / (fabs(g1[i]) + eps);
        CHECK(st[0][i] == g1[i], "step 1: first moment %d is %g, want the gradient %g", i, st[0][i], g1[i]);
        CHECK(fabs(p[i] - want[i]) <= 1e-6 * fabs(want[i]), "step 1: param %d is %.9g, want %.9g", i, p[i], want[i]);
    }
    memcpy(g, g2, sizeof g);
    mp_optim_step(o, lr);
    for (int i = 0; i < N; i++) {
        double v = b2 * (1 - b2) * g1[i] * g1[i] + (1 - b2) * g2[i] * g2[i];
        want[i] -= lr * g2[i] / (sqrt(v / (1 - b2 * b2)) + eps);
        CHECK(fabs(p[i] - want[i]) <= 1e-6 * fabs(want[i]), "step 2: param %d is %.9g, want %.9g", i, p[i], want[i]);
    }
    /* step 2 moves element 0 up, to about p0 - 0.36 lr; beta1 = 0.9 would keep it going down, to about
     * p0 - 1.27 lr, as its first moment (0.09 g1 + 0.1 g2) / 0.19 is still positive */
    CHECK(p[0] > p0[0] - 0.5f * lr, "step 2 followed a momentum: param 0 is %.9g", p[0]);
    mp_optim_destroy(o);

    opts.betas_as_given = false; /* the zero beta1 is the default again */
    CHECK(mp_optim_create(opts, &ref, 1, &o) == MP_OK, "%s", mp_last_error());
    d = mp_optim_options(o);
    CHECK(d.beta1 == 0.9f && d.beta2 == 0.9f, "default beta1: %g/%g", d.beta1, d.beta2);
    memcpy(g, g1, sizeof g);
    mp_optim_step(o, lr);
    CHECK(mp_optim_state_tensors(o, 0, st) == 2 && fabsf(st[0][0] - 0.1f * g1[0]) < 1e-7f,
          "default beta1: first moment %g", st[0][0]);
    mp_optim_destroy(o);

    opts = (mp_optim_opts){.kind = MP_OPTIM_ADAMW, .betas_as_given = true}; /* both 0: allowed */
    CHECK(mp_optim_create(opts, &ref, 1, &o) == MP_OK && mp_optim_options(o).beta2 == 0.0f, "betas 0/0: %s",
          mp_last_error());
    mp_optim_destroy(o);
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_SGD, .betas_as_given = true},
                        "--beta1/--beta2/--eps apply to adam and adamw, not sgd (got 0/0/0, betas as given)");
    expect_create_error((mp_optim_opts){.kind = MP_OPTIM_ADAM, .beta2 = 1.0f, .betas_as_given = true},
                        "--beta2 1 must be in [0, 1)");
}

/* ---- state, defaults, step count --------------------------------------- */

static void test_state(void) {
    float w[100], gw[100] = {0}, b[3], gb[3] = {0};
    mp_param_ref refs[2] = {{.param = w, .grad = gw, .n = 100, .decay = true, .name = "w"},
                            {.param = b, .grad = gb, .n = 3, .decay = false, .name = "b"}};
    mp_optim *o = NULL;
    float *s[2] = {NULL, NULL};
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD}, refs, 2, &o) == MP_OK, "%s", mp_last_error());
    CHECK(mp_optim_state_tensors(o, 0, s) == 0 && mp_optim_state_tensors(o, 1, NULL) == 0, "plain sgd has state");
    mp_optim_destroy(o);
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.5f}, refs, 2, &o) == MP_OK, "%s",
          mp_last_error());
    CHECK(mp_optim_state_tensors(o, 1, s) == 1 && s[0] != NULL, "sgd momentum: one buffer");
    mp_optim_destroy(o);

    char name[8] = "w";
    refs[0].name = name;
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_ADAMW, .weight_decay = 0.01f}, refs, 2, &o) == MP_OK,
          "%s", mp_last_error());
    name[0] = 'x'; /* the optimizer keeps its own copy of the names */
    CHECK(strcmp(mp_optim_param(o, 0)->name, "w") == 0 && mp_optim_param_count(o) == 2, "names not copied");
    mp_optim_opts d = mp_optim_options(o);
    CHECK(d.beta1 == 0.9f && d.beta2 == 0.999f && d.eps == 1e-8f && d.weight_decay == 0.01f, "adam defaults");
    float *s0[2], *s1[2];
    CHECK(mp_optim_state_tensors(o, 0, s0) == 2 && mp_optim_state_tensors(o, 1, s1) == 2, "adam: two buffers");
    bool aligned = true, zero = true, disjoint = true;
    float *all[4] = {s0[0], s0[1], s1[0], s1[1]};
    int64_t len[4] = {100, 100, 3, 3};
    for (int i = 0; i < 4; i++) {
        aligned &= ((uintptr_t)all[i] % 64) == 0;
        for (int64_t j = 0; j < len[i]; j++) zero &= all[i][j] == 0.0f;
        for (int k = 0; k < 4; k++)
            if (k != i) disjoint &= all[i] + len[i] <= all[k] || all[k] + len[k] <= all[i];
    }
    CHECK(aligned && zero && disjoint, "state buffers: aligned %d zeroed %d disjoint %d", aligned, zero, disjoint);
    CHECK(mp_optim_step_count(o) == 0, "fresh step count");
    CHECK(mp_optim_set_step_count(o, 41) == MP_OK && mp_optim_step_count(o) == 41, "set step count");
    /* a count from a checkpoint is user data: an error, never an abort */
    CHECK_ERR(mp_optim_set_step_count(o, -1), MP_ERR_INVALID_ARG, "optimizer step count -1 must lie in [0, 2^53)");
    CHECK_ERR(mp_optim_set_step_count(o, (int64_t)1 << 53), MP_ERR_INVALID_ARG, "9007199254740992");
    CHECK(mp_optim_step_count(o) == 41, "a refused count changed the step count");
    mp_optim_destroy(o);
    mp_optim_destroy(NULL);

    /* No parameters at all is valid and steps do nothing. */
    CHECK(mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_ADAM}, NULL, 0, &o) == MP_OK, "%s", mp_last_error());
    mp_optim_step(o, 0.1f);
    CHECK(mp_optim_step_count(o) == 1, "empty optimizer step count");
    mp_optim_destroy(o);
}

/* ---- learning-rate schedules ------------------------------------------- */

static void check_lr(const mp_lr_schedule *s, int64_t step, double want, const char *label) {
    double got = mp_lr_at(s, step);
    CHECK(fabs(got - want) <= 1e-6 * fabs(want) + 1e-12, "%s: lr at step %lld = %.9g, want %.9g", label,
          (long long)step, got, want);
}

static void expect_parse_error(const char *spec, float lr, int total, const char *want) {
    mp_lr_schedule s;
    mp_status st = mp_lr_schedule_parse(spec, lr, total, &s);
    CHECK(st == MP_ERR_INVALID_ARG && strstr(mp_last_error(), want), "'%s': want '%s', got status %d '%s'", spec,
          want, (int)st, mp_last_error());
}

static void test_schedules(void) {
    mp_lr_schedule s;
    CHECK(mp_lr_schedule_parse("constant", 0.1f, 0, &s) == MP_OK && s.kind == MP_LR_CONSTANT && s.warmup_steps == 0,
          "constant: %s", mp_last_error());
    check_lr(&s, 0, 0.1, "constant");
    check_lr(&s, 123456, 0.1, "constant");

    CHECK(mp_lr_schedule_parse("constant,warmup:4", 0.1f, 0, &s) == MP_OK && s.warmup_steps == 4, "%s",
          mp_last_error());
    check_lr(&s, 0, 0.025, "warm-up");
    check_lr(&s, 1, 0.05, "warm-up");
    check_lr(&s, 2, 0.075, "warm-up");
    check_lr(&s, 3, 0.1, "warm-up");
    check_lr(&s, 4, 0.1, "warm-up");

    CHECK(mp_lr_schedule_parse("step:10:0.5", 0.2f, 0, &s) == MP_OK && s.kind == MP_LR_STEP && s.step_size == 10 &&
              s.gamma == 0.5f, "step: %s", mp_last_error());
    check_lr(&s, 0, 0.2, "step");
    check_lr(&s, 9, 0.2, "step");
    check_lr(&s, 10, 0.1, "step");
    check_lr(&s, 19, 0.1, "step");
    check_lr(&s, 20, 0.05, "step");
    check_lr(&s, 35, 0.025, "step");

    CHECK(mp_lr_schedule_parse("step:10:0.1,warmup:5", 1.0f, 0, &s) == MP_OK && s.warmup_steps == 5, "%s",
          mp_last_error());
    check_lr(&s, 0, 0.2, "step+warm-up");
    check_lr(&s, 4, 1.0, "step+warm-up");
    check_lr(&s, 14, 1.0, "step+warm-up");
    check_lr(&s, 15, 0.1, "step+warm-up");
    check_lr(&s, 25, 0.01, "step+warm-up");

    CHECK(mp_lr_schedule_parse("cosine", 1.0f, 100, &s) == MP_OK && s.kind == MP_LR_COSINE && s.min_lr == 0.0f &&
              s.total_steps == 100, "cosine: %s", mp_last_error());
    check_lr(&s, 0, 1.0, "cosine");
    check_lr(&s, 25, 0.5 * (1.0 + sqrt(0.5)), "cosine");
    check_lr(&s, 50, 0.5, "cosine");
    check_lr(&s, 75, 0.5 * (1.0 - sqrt(0.5)), "cosine");
    check_lr(&s, 99, 0.5 * (1.0 + cos(M_PI * 0.99)), "cosine");
    check_lr(&s, 100, 0.0, "cosine");
    check_lr(&s, 150, 0.0, "cosine (clamped after the end)");

    CHECK(mp_lr_schedule_parse("cosine:0.1,warmup:20", 0.5f, 120, &s) == MP_OK && s.min_lr == 0.1f &&
              s.warmup_steps == 20, "cosine:min,warmup: %s", mp_last_error());
    check_lr(&s, 0, 0.025, "cosine+warm-up");
    check_lr(&s, 9, 0.25, "cosine+warm-up");
    check_lr(&s, 19, 0.5, "cosine+warm-up");
    check_lr(&s, 20, 0.5, "cosine+warm-up");
    check_lr(&s, 70, 0.3, "cosine+warm-up midpoint");
    check_lr(&s, 120, 0.1, "cosine+warm-up end");
    check_lr(&s, 500, 0.1, "cosine+warm-up after the end");
    CHECK(strcmp(mp_lr_kind_name(MP_LR_COSINE), "cosine") == 0, "kind name");

    expect_parse_error("linear", 0.1f, 100, "--lr-schedule 'linear': unknown schedule 'linear'");
    expect_parse_error("", 0.1f, 100, "unknown schedule ''");
    expect_parse_error("constant:3", 0.1f, 100, "constant takes no arguments");
    expect_parse_error("step", 0.1f, 100, "want step:STEP_SIZE:GAMMA");
    expect_parse_error("step:10", 0.1f, 100, "want step:STEP_SIZE:GAMMA");
    expect_parse_error("step:10:0.1:3", 0.1f, 100, "want step:STEP_SIZE:GAMMA");
    expect_parse_error("step:0:0.1", 0.1f, 100, "step size '0' must be a positive integer");
    expect_parse_error("step:-5:0.1", 0.1f, 100, "step size '-5'");
    expect_parse_error("step:ten:0.1", 0.1f, 100, "step size 'ten'");
    expect_parse_error("step:10:1.5", 0.1f, 100, "gamma '1.5' must be a number in (0, 1]");
    expect_parse_error("step:10:0", 0.1f, 100, "gamma '0'");
    expect_parse_error("step:10:0.1x", 0.1f, 100, "gamma '0.1x'");
    expect_parse_error("cosine:abc", 0.1f, 100, "min lr 'abc'");
    expect_parse_error("cosine:0.5", 0.1f, 100, "min lr '0.5' must be a number in [0, --lr 0.1]");
    expect_parse_error("cosine", 0.1f, 0, "cosine needs more total steps (0) than warm-up steps (0)");
    expect_parse_error("cosine,warmup:200", 0.1f, 100, "cosine needs more total steps (100) than warm-up steps (200)");
    expect_parse_error("cosine,warmup:x", 0.1f, 100, "--lr-schedule 'cosine,warmup:x': warmup 'x'");
    expect_parse_error("cosine,warmup:-3", 0.1f, 100, "warmup '-3'");
    expect_parse_error("cosine,warmup", 0.1f, 100, "warmup '' must be a non-negative integer");
    expect_parse_error("cosine,warmup:2,warmup:3", 0.1f, 100, "warmup is given twice");
    expect_parse_error("cosine,cooldown:5", 0.1f, 100, "unknown part 'cooldown:5'");
    expect_parse_error("constant", -0.1f, 100, "--lr -0.1 must be");
    expect_parse_error("constant", NAN, 100, "--lr nan");
}

int main(void) {
    check_against_reference("sgd", (mp_optim_opts){.kind = MP_OPTIM_SGD}, 6);
    check_against_reference("sgd wd", (mp_optim_opts){.kind = MP_OPTIM_SGD, .weight_decay = 0.1f}, 6);
    check_against_reference("sgd momentum", (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f}, 6);
    check_against_reference("sgd momentum wd",
                            (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.8f, .weight_decay = 0.05f}, 6);
    check_against_reference("sgd nesterov wd",
                            (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f, .nesterov = true,
                                            .weight_decay = 0.05f}, 6);
    check_against_reference("adam", (mp_optim_opts){.kind = MP_OPTIM_ADAM}, 6);
    check_against_reference("adam wd betas eps",
                            (mp_optim_opts){.kind = MP_OPTIM_ADAM, .weight_decay = 0.1f, .beta1 = 0.8f,
                                            .beta2 = 0.99f, .eps = 1e-3f}, 6);
    check_against_reference("adamw wd", (mp_optim_opts){.kind = MP_OPTIM_ADAMW, .weight_decay = 0.1f}, 6);
    check_against_reference("adamw wd betas",
                            (mp_optim_opts){.kind = MP_OPTIM_ADAMW, .weight_decay = 0.5f, .beta1 = 0.5f,
                                            .beta2 = 0.9f}, 6);
    check_against_reference("adam beta1 0 as given",
                            (mp_optim_opts){.kind = MP_OPTIM_ADAM, .weight_decay = 0.1f, .beta2 = 0.9f,
                                            .betas_as_given = true}, 6);
    check_against_reference("adamw beta1 0 as given",
                            (mp_optim_opts){.kind = MP_OPTIM_ADAMW, .weight_decay = 0.1f, .beta2 = 0.99f, .eps = 1e-3f,
                                            .betas_as_given = true}, 6);
    test_betas_as_given();
    const mp_optim_opts mom = {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.05f};
    const mp_optim_opts nest = {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .nesterov = true, .weight_decay = 0.05f};
    test_low_state("sgd momentum f32 state", mom, MP_DTYPE_F32);
    test_low_state("sgd momentum f16 state", mom, MP_DTYPE_F16);
    test_low_state("sgd momentum bf16 state", mom, MP_DTYPE_BF16);
    test_low_state("sgd nesterov f32 state", nest, MP_DTYPE_F32);
    test_low_state("sgd nesterov f16 state", nest, MP_DTYPE_F16);
    test_low_state("sgd nesterov bf16 state", nest, MP_DTYPE_BF16);
    test_adamw_vs_adam();
    test_converges("converge sgd", (mp_optim_opts){.kind = MP_OPTIM_SGD}, 0.3f, 300);
    test_converges("converge sgd wd", (mp_optim_opts){.kind = MP_OPTIM_SGD, .weight_decay = 0.1f}, 0.3f, 300);
    test_converges("converge sgd momentum", (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f}, 0.05f, 400);
    test_converges("converge sgd nesterov",
                   (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f, .nesterov = true}, 0.05f, 400);
    test_converges("converge adam", (mp_optim_opts){.kind = MP_OPTIM_ADAM}, 0.1f, 1000);
    test_converges("converge adam wd", (mp_optim_opts){.kind = MP_OPTIM_ADAM, .weight_decay = 0.1f}, 0.1f, 1000);
    test_converges("converge adamw", (mp_optim_opts){.kind = MP_OPTIM_ADAMW}, 0.1f, 1000);
    test_bad_options();
    test_state();
    test_schedules();
    return test_summary("test_optim");
}
