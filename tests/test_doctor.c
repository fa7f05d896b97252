/* test_doctor.c — the precision doctor on constructed cases, each probed in
 * fp32, predicted, and the prediction checked by training:
 *   (a) a linear layer with large weights fed unnormalized inputs whose
 *       activations leave fp16's range after some steps: the doctor names
 *       it, plain amp-fp16 stops with the forward-overflow error naming it,
 *       amp-fp16 with the policy trains;
 *   (b) gradients that underflow at a static loss scale of 1: the doctor
 *       reports the share and a scale, and at that scale the trainer's own
 *       statistics show the fp16 gradients no longer round to zero;
 *   (c) a model fp16 suits: amp-fp16 unchanged, no policy changes;
 *   (d) a healthy model whose gradients overflow the default initial scale
 *       2^16: a few start-up back-off skips are harmless (amp-fp16 works
 *       unchanged, and trains skipping that many); more than the run's
 *       divergence bound (5% of the first 100 steps) is a failure the policy's
 *       initial scale fixes (amp-fp16 then stops "diverged", the policy trains).
 * Also: an fp16 overflow is stored as +-inf, not saturated (a ReLU turns
 * -inf into 0 unseen, as fp32 would), the policy file's round trip and its
 * strict reading. MP_TEST_DEVICE=cuda runs the trainers on the first GPU
 * (scripts/gpu-check doctor), where statistics arrive a step late. */
#define _XOPEN_SOURCE 700 /* nftw (scratch_dir.h) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/doctor.h"
#include "amp/policy_file.h"
#include "check.h"
#include "core/error.h"
#include "scratch_dir.h"

#define B 32
#define F 16

typedef struct {
    mp_graph *g;
    mp_node in, y, loss;
} net;

/* x (F) -> fc1 (32) -> relu or leaky ReLU -> fc2 (4) -> softmax
 * cross-entropy. With the leaky ReLU an fp16 overflow in fc1 reaches the
 * loss; the ReLU turns a -inf into 0, as fp32's large negative value would
 * (test_overflow_is_inf). */
static net build_net(float w_scale, bool relu) {
    net n = {.g = mp_graph_create()};
    n.in = mp_graph_input(n.g, "x", F, 1, 1);
    n.y = mp_graph_labels(n.g, "y");
    mp_node h = mp_linear(n.g, "fc1", mp_flatten(n.g, "flat", n.in), (mp_linear_opts){.out_features = 32, .bias = true});
    h = relu ? mp_relu(n.g, "relu", h) : mp_leaky_relu(n.g, "relu", h, 0.1f);
    mp_node logits = mp_linear(n.g, "fc2", h, (mp_linear_opts){.out_features = 4, .bias = true});
    n.loss = mp_softmax_cross_entropy(n.g, "loss", logits, n.y);
    mp_graph_mark_output(n.g, n.loss);
    MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = MP_PRECISION_FP32}) == MP_OK);
    mp_graph_init_params(n.g, 1);
    float w[32 * F];
    MP_ASSERT(mp_graph_param_get(n.g, "fc1.weight", w, 32 * F) == MP_OK);
    for (int i = 0; i < 32 * F; i++) w[i] *= w_scale;
    MP_ASSERT(mp_graph_param_set(n.g, "fc1.weight", w, 32 * F) == MP_OK);
    return n;
}

static net build(float w_scale) { return build_net(w_scale, true); }

/* Batch s: inputs uniform in [lo, hi), random labels (the same for every run). */
static void batch(int s, float lo, float hi, float *x, int32_t *y) {
    uint64_t q = 0x9E3779B97F4A7C15ull * (uint64_t)(s + 1);
    for (int i = 0; i < B; i++) {
        q ^= q << 13, q ^= q >> 7, q ^= q << 17;
        y[i] = (int32_t)(q % 4);
        for (int j = 0; j < F; j++) {
            q ^= q << 13, q ^= q >> 7, q ^= q << 17;
            x[i * F + j] = lo + (hi - lo) * (float)(q >> 40) / (float)(1ull << 24);
        }
    }
}

typedef struct {
    float lr, lo, hi, loss_weight;
    mp_loss_scaling scaling;
    mp_scaler_opts scaler;
} setup;

static mp_device test_device(void) {
    const char *d = getenv("MP_TEST_DEVICE");
    return (mp_device){d && !strcmp(d, "cuda") ? MP_DEVICE_CUDA : MP_DEVICE_CPU, 0};
}

static mp_trainer *trainer(net *n, const setup *su, mp_optimizer **opt) {
    MP_ASSERT(mp_optimizer_create(n->g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                              .lr = {.base_lr = su->lr}}, opt) == MP_OK);
    mp_trainer_opts o = {.batch = B, .device = test_device(), .input = n->in, .labels = n->y,
                         .loss_scaling = su->scaling, .scaler = su->scaler,
                         .events = getenv("MP_TEST_VERBOSE") ? stdout : NULL};
    o.groups[0] = (mp_train_group){.optimizer = *opt, .losses = {n->loss}, .weights = {su->loss_weight}, .n_losses = 1};
    o.n_groups = 1;
    mp_trainer *t = NULL;
    CHECK(mp_trainer_create(n->g, &o, &t) == MP_OK, "%s", mp_last_error());
    return t;
}

/* Train `steps` steps; the first failing status (its message stays in mp_last_error). */
static double fc1_amax;      /* the largest fc1 output the last train() measured */
static int64_t last_skipped; /* the steps the last train() skipped */

static mp_status train(net *n, const setup *su, int steps, mp_doctor *d, double *worst_fp16_underflow) {
    mp_optimizer *opt;
    mp_trainer *t = trainer(n, su, &opt);
    if (!t) return MP_ERR_INTERNAL;
    MP_ASSERT(mp_trainer_numerics_enable(t, &(mp_numerics_opts){.every = 1}) == MP_OK);
    fc1_amax = 0;
    if (worst_fp16_underflow) *worst_fp16_underflow = 0;
    float x[B * F];
    int32_t y[B];
    mp_status s = MP_OK;
    int64_t seen = 0;
    for (int k = 0; k <= steps && s == MP_OK; k++) {
        if (k < steps) {
            batch(k, su->lo, su->hi, x, y);
            s = mp_trainer_step(t, &(mp_batch){.images = x, .labels = y, .n = B}, NULL);
            /* a GPU names the overflowing op only if the host looks before later steps overwrite its batch */
            if (s == MP_OK && test_device().kind == MP_DEVICE_CUDA) s = mp_trainer_wait(t, NULL);
        } else {
            s = mp_trainer_wait(t, NULL); /* a GPU's last collection */
        }
        const mp_numerics_record *rec;
        int nr = 0;
        int64_t step = 0;
        if (s == MP_OK) s = mp_trainer_numerics(t, &rec, &nr, &step);
        if (step <= seen) continue; /* nothing new (a GPU's arrive a step late) */
        seen = step;
        for (int i = 0; s == MP_OK && i < nr; i++)
            if (rec[i].kind == MP_NUMERICS_OUTPUT && !strcmp(rec[i].name, "fc1")) fc1_amax = fmax(fc1_amax, rec[i].stats.amax);
        if (s == MP_OK && d) s = mp_doctor_add(d, step, rec, nr);
        for (int i = 0; s == MP_OK && worst_fp16_underflow && i < nr; i++) {
            /* amp-fp16 computes weight gradients in fp16: what underflowed is zero */
            const mp_tensor_stats *st = &rec[i].stats;
            if (rec[i].kind == MP_NUMERICS_PARAM_GRAD && strstr(rec[i].name, ".weight"))
                *worst_fp16_underflow = fmax(*worst_fp16_underflow, (double)(st->zero + st->underflow[MP_NUMERICS_FP16]) /
                                                                        (double)st->numel);
        }
    }
    last_skipped = mp_trainer_skipped_steps(t);
    mp_trainer_destroy(t);
    mp_optimizer_destroy(opt);
    return s;
}

/* Probe K steps in fp32 (the graph's current policy) and analyze for amp-fp16. */
static void probe(net *n, const setup *su, int K, int64_t T, mp_doctor_report *r) {
    mp_doctor *d;
    MP_ASSERT(mp_doctor_create(n->g, &d) == MP_OK);
    setup fp32 = *su;
    fp32.scaling = MP_LOSS_SCALING_AUTO; /* fp32: unscaled */
    CHECK(train(n, &fp32, K, d, NULL) == MP_OK, "probe: %s", mp_last_error());
    mp_doctor_opts o = {.target = MP_PRECISION_AMP_FP16, .planned_steps = T, .loss_scaling = su->scaling,
                        .scaler = su->scaler, .gpu = test_device().kind == MP_DEVICE_CUDA};
    CHECK(mp_doctor_analyze(d, n->g, &o, r) == MP_OK, "analyze: %s", mp_last_error());
    if (getenv("MP_TEST_VERBOSE")) mp_doctor_print(r, stdout);
    mp_doctor_destroy(d);
}

static const mp_doctor_layer *layer(const mp_doctor_report *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->layers[i].name, name)) return &r->layers[i];
    return NULL;
}

/* An fp16 linear output beyond 65504 is stored as +-inf (not saturated to
 * 65504), by the reference kernels and oneDNN alike, as an fp16 GEMM on the
 * GPU writes it. A ReLU after it turns -inf into 0, which is what fp32's
 * large negative value gives too: the loss stays finite, nothing overflows
 * that the trainer (which checks the loss and the gradients) could see, and
 * the numerics statistics count the infs. */
static void test_overflow_is_inf(void) {
    for (int ref = 0; ref < 2; ref++) {
        net n = build_net(1.0f, true);
        mp_node fc1 = mp_graph_find(n.g, "fc1"), relu = mp_graph_find(n.g, "relu");
        mp_graph_mark_output(n.g, fc1), mp_graph_mark_output(n.g, relu);
        MP_ASSERT(mp_graph_apply_policy(n.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
        float w[32 * F] = {0}, x[B * F], out[B * 32], loss;
        for (int o = 0; o < 32; o++) w[o * F] = -30000.0f; /* fc1 = -30000 x[0] + bias */
        MP_ASSERT(mp_graph_param_set(n.g, "fc1.weight", w, 32 * F) == MP_OK);
        mp_plan *p;
        MP_ASSERT(mp_plan_create(n.g, (mp_plan_opts){.batch = B, .training = true, .loss = n.loss, .reference = ref},
                                 &p) == MP_OK);
        int32_t y[B] = {0};
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: x[0] = +-16.3, fc1 -+4.9e5; pass 1: all rows +16.3, fc1 -4.9e5 */
            for (int i = 0; i < B * F; i++) x[i] = i % F ? 0.0f : pass == 0 && (i / F) % 2 ? -16.3f : 16.3f;
            MP_ASSERT(mp_plan_set_input(p, n.in, x, B * F) == MP_OK && mp_plan_set_labels(p, n.y, y, B) == MP_OK);
            MP_ASSERT(mp_plan_forward(p) == MP_OK);
            MP_ASSERT(mp_plan_read(p, fc1, out, B * 32) == MP_OK);
            int pos = 0, neg = 0, sat = 0, relu_zero = 0;
            for (int i = 0; i < B * 32; i++)
                pos += out[i] == INFINITY, neg += out[i] == -INFINITY, sat += fabsf(out[i]) == 65504.0f;
            const int want_pos = pass == 0 ? B / 2 * 32 : 0;
            CHECK(pos == want_pos && neg == B * 32 - want_pos && sat == 0,
                  "ref %d pass %d: fc1 stores %d +inf, %d -inf, %d at 65504", ref, pass, pos, neg, sat);
            MP_ASSERT(mp_plan_read(p, relu, out, B * 32) == MP_OK);
            for (int i = 0; i < B * 32; i++) relu_zero += out[i] == 0.0f;
            MP_ASSERT(mp_plan_read(p, n.loss, &loss, 1) == MP_OK);
            CHECK(relu_zero == B * 32 - want_pos && (pass == 0 ? !isfinite(loss) : isfinite(loss)),
                  "ref %d pass %d: relu zeroes %d, loss %g", ref, pass, relu_zero, loss);
        }
        mp_plan_destroy(p);
        mp_graph_destroy(n.g);
    }
}

static void test_forward_overflow(const char *dir) {
    const setup su = {.lr = 0.01f, .lo = 0, .hi = 100, .loss_weight = 1};
    net n = build_net(30.0f, false);
    mp_doctor_report r;
    probe(&n, &su, 20, 200, &r);
    const mp_doctor_layer *fc1 = layer(&r, "fc1");
    CHECK(fc1 && fc1->fwd_risk && fc1->fix && !strcmp(fc1->fix, "fp32"), "fc1 is not named");
    CHECK(fc1 && fc1->out_seen < 65504 * 16, "fc1 starts within reach of fp16 (%g)", fc1 ? fc1->out_seen : 0);
    CHECK(!r.target_ok && strstr(r.overrides, "fc1=fp32") && r.precision == MP_PRECISION_AMP_FP16,
          "policy: %s (%s)", r.overrides, r.verdict);
    CHECK(!r.amp_ok && !r.fp16_ok && r.bf16_ok, "amp %d fp16 %d bf16 %d", r.amp_ok, r.fp16_ok, r.bf16_ok);
    /* the policy file says the same */
    char path[600];
    snprintf(path, sizeof path, "%s/policy.json", dir);
    CHECK(mp_policy_file_write(path, &r) == MP_OK, "%s", mp_last_error());
    mp_policy_file pf;
    CHECK(mp_policy_file_read(path, n.g, &pf) == MP_OK, "%s", mp_last_error());
    CHECK(!strcmp(pf.overrides, r.overrides) && pf.has_precision && pf.precision == MP_PRECISION_AMP_FP16,
          "read back '%s'", pf.overrides);
    /* amp-fp16 with the policy's loss scale but not its override: fc1's fp16
     * output overflows, the leaky ReLU passes the inf on to the loss, and the
     * run stops naming fc1 */
    const setup scaled = {.lr = su.lr, .lo = su.lo, .hi = su.hi, .loss_weight = 1,
                          .scaler = {.init_scale = pf.has_scale ? pf.init_scale : 0,
                                     .min_scale = pf.has_scale ? pf.min_scale : 0}};
    net a = build_net(30.0f, false);
    MP_ASSERT(mp_graph_apply_policy(a.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    CHECK_ERR(train(&a, &scaled, 100, NULL, NULL), MP_ERR_NONFINITE, "forward overflows", "fc1 (linear");
    /* with the whole policy it trains, fc1 holding values beyond fp16's range */
    net p = build_net(30.0f, false);
    CHECK(mp_graph_apply_policy(p.g, (mp_policy_opts){.precision = pf.precision, .overrides = pf.overrides}) == MP_OK,
          "%s", mp_last_error());
    CHECK(train(&p, &scaled, 100, NULL, NULL) == MP_OK, "with the policy: %s", mp_last_error());
    CHECK(fc1_amax > 65504 * 2, "fc1 in fp32 reaches %g", fc1_amax);
    mp_doctor_report_free(&r);
    mp_graph_destroy(n.g), mp_graph_destroy(a.g), mp_graph_destroy(p.g);
}

static void test_gradient_underflow(void) {
    const setup su = {.lr = 0.01f, .lo = -1, .hi = 1, .loss_weight = 1e-6f, .scaling = MP_LOSS_SCALING_ON,
                      .scaler = {.static_scale = true, .init_scale = 1}};
    net n = build(1.0f);
    mp_doctor_report r;
    probe(&n, &su, 20, 200, &r);
    CHECK(!r.target_ok && r.under_settle > 0.5, "underflow share at scale 1: %g", r.under_settle);
    CHECK(r.fwd_risks == 0 && r.overrides[0] == '\0', "no forward risk: %s", r.overrides);
    CHECK(r.set_scale && r.policy_static && r.init_scale >= exp2f((float)r.lo_log2) &&
              r.init_scale <= exp2f((float)r.hi_log2) && r.lo_log2 > 0,
          "scale %g in [2^%d, 2^%d]", r.init_scale, r.lo_log2, r.hi_log2);
    /* amp-fp16 at scale 1 loses the gradients; at the doctor's scale it keeps them */
    double lost1 = 0, lost = 0;
    net a = build(1.0f), b = build(1.0f);
    MP_ASSERT(mp_graph_apply_policy(a.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    MP_ASSERT(mp_graph_apply_policy(b.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
    CHECK(train(&a, &su, 10, NULL, &lost1) == MP_OK, "%s", mp_last_error());
    setup fixed = su;
    fixed.scaler.init_scale = r.init_scale;
    CHECK(train(&b, &fixed, 10, NULL, &lost) == MP_OK, "%s", mp_last_error());
    CHECK(lost1 > 0.5 && lost <= 1e-3, "fp16 gradient values rounding to zero: %g at scale 1, %g at %g", lost1, lost,
          r.init_scale);
    mp_doctor_report_free(&r);
    mp_graph_destroy(n.g), mp_graph_destroy(a.g), mp_graph_destroy(b.g);
}

static void test_fp16_fine(void) {
    const setup su = {.lr = 0.01f, .lo = -1, .hi = 1, .loss_weight = 1};
    net n = build(1.0f);
    mp_doctor_report r;
    probe(&n, &su, 20, 200, &r);
    CHECK(r.target_ok && r.amp_ok && r.bf16_ok && r.fwd_risks == 0 && !r.set_scale && r.overrides[0] == '\0' &&
              r.precision == MP_PRECISION_AMP_FP16 && strstr(r.verdict, "works unchanged"),
          "%s", r.verdict);
    mp_doctor_report_free(&r);
    mp_graph_destroy(n.g);
}

/* (d): loss weight w multiplies every gradient (the lr is divided by it, so
 * training is the same): the largest fitting scale falls by log2 w octaves. */
static void test_startup_backoff(void) {
    const bool gpu = test_device().kind == MP_DEVICE_CUDA;
    for (int many = 0; many < 2; many++) {
        /* a GPU keeps parameter gradients in fp32: only activation gradients overflow there, which
         * takes a larger weight to push the start-up skips clearly past the bound */
        const float w = many ? (gpu ? 16384.0f : 1024.0f) : 8.0f;
        const setup su = {.lr = 0.01f / w, .lo = -1, .hi = 1, .loss_weight = w};
        net n = build(1.0f);
        mp_doctor_report r;
        probe(&n, &su, 20, 200, &r);
        net a = build(1.0f);
        MP_ASSERT(mp_graph_apply_policy(a.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
        const mp_status st = train(&a, &su, 150, NULL, NULL);
        if (gpu) { /* fp32 parameter gradients: the prediction, whatever it is, must match the run */
            printf("GPU, loss weight %g: %d start-up skips predicted (%s), the run: %s, %lld skipped\n", w,
                   r.startup_skips, r.startup_harmless ? "harmless" : "beyond the bound", st ? mp_last_error() : "ok",
                   (long long)last_skipped);
            CHECK(r.fwd_risks == 0 && r.overrides[0] == '\0', "w %g: %s", w, r.verdict);
            if (r.startup_harmless || !r.startup_skips)
                CHECK(st == MP_OK && last_skipped <= r.startup_skips + 1 && (r.startup_skips > 0) == (last_skipped > 0),
                      "w %g: %d skips predicted, the run: %s, %lld skipped", w, r.startup_skips,
                      st ? mp_last_error() : "ok", (long long)last_skipped);
            else
                CHECK_ERR(st, MP_ERR_NONFINITE, "diverged");
            mp_doctor_report_free(&r);
            mp_graph_destroy(n.g), mp_graph_destroy(a.g);
            continue;
        }
        CHECK(r.startup_skips > 0 && r.skip_window == 100 && r.fwd_risks == 0 && r.overrides[0] == '\0',
              "w %g: %d start-up skips in %d: %s", w, r.startup_skips, r.skip_window, r.verdict);
        if (!many) {
            CHECK(r.startup_harmless && r.target_ok && !r.set_scale && r.startup_skips <= 5 &&
                      strstr(r.verdict, "works unchanged") && strstr(r.verdict, "harmless"), "%s", r.verdict);
            CHECK(st == MP_OK && last_skipped >= 1 && last_skipped <= r.startup_skips + 1,
                  "amp-fp16 unchanged: %s, %lld skipped (%d predicted)", st ? mp_last_error() : "ok",
                  (long long)last_skipped, r.startup_skips);
        } else {
            CHECK(!r.startup_harmless && !r.target_ok && r.set_scale && !r.policy_static &&
                      r.init_scale <= exp2f((float)r.hi_log2) && strstr(r.verdict, "beyond train's divergence bound"),
                  "%s (init %g)", r.verdict, r.init_scale);
            /* the run's error names the start-up back-off and where to start the scale */
            CHECK_ERR(st, MP_ERR_NONFINITE, "diverged at start-up", "and none since", "--loss-scale dynamic:128 ");
            setup fixed = su;
            fixed.scaler.init_scale = r.init_scale, fixed.scaler.min_scale = r.min_scale;
            net b = build(1.0f);
            MP_ASSERT(mp_graph_apply_policy(b.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16}) == MP_OK);
            CHECK(train(&b, &fixed, 150, NULL, NULL) == MP_OK && last_skipped <= 1, "with the policy's scale %g: %s, "
                  "%lld skipped", r.init_scale, mp_last_error(), (long long)last_skipped);
            mp_graph_destroy(b.g);
        }
        mp_doctor_report_free(&r);
        mp_graph_destroy(n.g), mp_graph_destroy(a.g);
    }
}

/* Bad policy files: one error naming the file and the key. */
static void test_bad_files(const char *dir) {
    net n = build(1.0f);
    const struct {
        const char *text, *needle;
    } rows[] = {
        {"{not json", "not JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"mixprec_policy\": 1, \"overrides\": {\"fc9\": \"fp32\"}}", "overrides.fc9: no layer named 'fc9'"},
        {"{\"mixprec_policy\": 1, \"overrides\": {\"fc1\": \"fp8\"}}", "overrides.fc1: dtype 'fp8' unknown"},
        {"{\"mixprec_policy\": 1, \"overrides\": {\"loss\": \"fp16\"}}", "overrides.loss: 'loss' is a"},
        {"{\"mixprec_policy\": 1, \"precision\": \"fp12\"}", "precision: 'fp12' unknown"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"init\": -3}}", "loss_scale.init: must be a number from"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"init\": 1e-50}}", "loss_scale.init: must be a number from 1.1754"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"init\": 8, \"min\": 1e-50}}",
         "loss_scale.min: must be 0 (none) or a number from 1.17549e-38"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"init\": 8, \"min\": -1e-50}}", "loss_scale.min: must be 0 (none)"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"min\": 1000, \"init\": 128}}",
         "bad.json: loss_scale.min: 1000 is larger than loss_scale.init 128"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {}}", "loss_scale.init: missing"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"mode\": \"static\", \"min\": 4}}", "loss_scale.init: missing"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"mode\": \"auto\"}}", "loss_scale.mode"},
        {"{\"mixprec_policy\": 1, \"extra\": 3}", "extra: unknown key"},
        {"{\"overrides\": {}}", "mixprec_policy: missing"},
        {"{\"mixprec_policy\": 1, \"precision\": \"fp16\", \"precision\": \"fp32\"}",
         "bad.json: precision: given twice"},
        {"{\"mixprec_policy\": 1, \"mixprec_policy\": 1}", "bad.json: mixprec_policy: given twice"},
        {"{\"mixprec_policy\": 1, \"overrides\": {\"fc1\": \"fp32\", \"fc1\": \"fp16\"}}",
         "overrides.fc1: given twice"},
        {"{\"mixprec_policy\": 1, \"loss_scale\": {\"init\": 1024, \"init\": 8}}", "loss_scale.init: given twice"},
        {"{\"mixprec_policy\": 1} x", "unexpected data after the JSON object at byte 22"},
        {"{\"mixprec_policy\": 1}\n{\"precision\": \"fp16\"}", "unexpected data after the JSON object at byte 22"},
    };
    char path[600];
    snprintf(path, sizeof path, "%s/bad.json", dir);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(rows[i].text, f);
        fclose(f);
        mp_policy_file pf;
        CHECK_ERR(mp_policy_file_read(path, n.g, &pf), MP_ERR_FORMAT, "bad.json", rows[i].needle);
    }
    /* a NUL byte after the object is data too; trailing whitespace is not */
    static const char nul[] = "{\"mixprec_policy\": 1}\n\0{\"precision\": \"fp16\"}";
    static const char blank[] = "{\"mixprec_policy\": 1}\n\t \r\n";
    FILE *f = fopen(path, "wb");
    fwrite(nul, 1, sizeof nul - 1, f);
    fclose(f);
    mp_policy_file pf;
    CHECK_ERR(mp_policy_file_read(path, n.g, &pf), MP_ERR_FORMAT, "bad.json: unexpected data after the JSON object at "
              "byte 22");
    f = fopen(path, "wb");
    fputs(blank, f);
    fclose(f);
    CHECK(mp_policy_file_read(path, n.g, &pf) == MP_OK, "trailing whitespace: %s", mp_last_error());
    pf = (mp_policy_file){0};
    snprintf(pf.overrides, sizeof pf.overrides, "fc1=fp32");
    char merged[256];
    CHECK_ERR(mp_policy_file_merge(&pf, "p.json", "fc2=bf16,fc1=bf16", merged, sizeof merged), MP_ERR_INVALID_ARG,
              "p.json: overrides.fc1 conflicts with --precision-override fc1=bf16");
    CHECK(mp_policy_file_merge(&pf, "p.json", "fc2=bf16", merged, sizeof merged) == MP_OK &&
              !strcmp(merged, "fc1=fp32,fc2=bf16"), "merged '%s'", merged);
    mp_graph_destroy(n.g);
}

/* A \u0000 escape or a raw control character in a string cut it short in
 * the C string cJSON gives: "amp-bf16\u0000junk" read as amp-bf16, a key
 * "fc1\u0000x" as layer fc1 (both accepted). Each is one error naming the
 * file and the byte; "\\u0000" (an escaped backslash, then text) is fine. */
static void test_nul_in_strings(const char *dir) {
    net n = build(1.0f);
    static const struct {
        const char *text;
        size_t len;
        const char *needle;
    } rows[] = {
        {"{\"mixprec_policy\": 1, \"precision\": \"amp-bf16\\u0000junk\"}", 0, "(NUL) escape at byte 44"},
        {"{\"mixprec_policy\": 1, \"overrides\": {\"fc1\\u0000x\": \"fp32\"}}", 0, "(NUL) escape at byte 40"},
        {"{\"mixprec_policy\": 1, \"precision\": \"fp32\tx\"}", 0, "control character in a string at byte 40"},
        {"{\"mixprec_policy\": 1, \"precision\": \"fp32\0x\"}", 45, "control character in a string at byte 40"},
    };
    char path[600];
    snprintf(path, sizeof path, "%s/nul.json", dir);
    mp_policy_file pf;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        FILE *f = fopen(path, "wb");
        fwrite(rows[i].text, 1, rows[i].len ? rows[i].len : strlen(rows[i].text), f);
        fclose(f);
        CHECK_ERR(mp_policy_file_read(path, n.g, &pf), MP_ERR_FORMAT, "nul.json", rows[i].needle);
    }
    FILE *f = fopen(path, "wb");
    fputs("{\"mixprec_policy\": 1, \"doctor\": {\"note\": \"a \\\\u0000 b\"}}", f);
    fclose(f);
    CHECK(mp_policy_file_read(path, n.g, &pf) == MP_OK, "an escaped backslash before u0000: %s", mp_last_error());
    mp_graph_destroy(n.g);
}

int main(void) {
    char dir[512];
    scratch_dir_create(dir, sizeof dir, "test_doctor");
    test_overflow_is_inf();
    test_forward_overflow(dir);
    test_gradient_underflow();
    test_fp16_fine();
    test_startup_backoff();
    test_bad_files(dir);
    test_nul_in_strings(dir);
    scratch_dir_remove(dir);
    return test_summary("test_doctor");
}
