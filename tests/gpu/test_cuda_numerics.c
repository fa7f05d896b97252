/* test_cuda_numerics.c — numerics statistics on the GPU (mixprec/numerics.h,
 * cuda/numerics_cuda.h):
 *  1. the kernel equals the CPU pass field for field (counts, amax, amin,
 *     the octave histogram) on f32, f16 and bf16 values that cover every
 *     class: NaN, +-inf, +-0, f32 subnormals, every format boundary and its
 *     neighbours a bit either side, and a million log-uniform magnitudes
 *     from 2^-150 to 2^128 (many blocks, a ragged last warp); two tensors in
 *     two slots of one collection stay apart;
 *  2. a GPU trainer's collection equals a CPU trainer's on the same small
 *     CNN, weights and batches in fp32: the same records (kind, node,
 *     parameter, numel), no NaN/inf, amax within 2e-3, zero counts within 1%
 *     of the values (ReLU outputs near 0 may round either way), except the
 *     gradients of the conv biases before batch norms, zero up to rounding;
 *  3. collecting every 3rd step while the step replays its CUDA graphs:
 *     exactly steps 3, 6, 9, 12 arrive (reading after every step, never
 *     waiting, and the last after mp_trainer_wait), each once, and the
 *     parameter statistics change between them (replays measure the current
 *     values, not the captured ones); a new selection (one node) is
 *     recaptured and measures only that node; stopping leaves the step
 *     running;
 *  4. an unknown node is an error naming it;
 *  5. a residual add the GPU plan fuses between a batch norm and its ReLU
 *     (its sum never stored) has no records, naming it alone is refused, and
 *     the ReLU after it is measured (zeros in its output); a CPU plan on the
 *     reference kernels, which keeps the add apart, measures the add when
 *     named; one on the vector kernels, which fuses it where the three run
 *     natively channels-last, refuses it as the GPU plan does.
 * Needs a GPU: one clear line and exit 2 without one. Run by scripts/gpu-check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "cuda/numerics_cuda.h"
#include "graph/plan.h"
#include "mixprec/numerics.h"
#include "small_cnn.h"
#include "train/trainer.h"

#define CHECK_OK(call) CHECK((call) == MP_OK, "%s", mp_last_error())

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Values covering every class of both formats; n >= 1 << 20. */
static void fill_values(float *x, int64_t n) {
    static const uint32_t edges[] = {0x477ff000u, 0x33000000u, 0x387fe000u, 0x7f7f8000u, 0x00008000u, 0x007f8000u,
                                     0x38800000u, 0x33800000u, 0x477fe000u, 0x00800000u, 0x00000001u, 0x7f7fffffu};
    mp_rng r;
    mp_rng_seed(&r, 41);
    for (int64_t i = 0; i < n; i++) {
        const double e = -150 + 278 * mp_rng_uniform(&r);
        x[i] = (float)((mp_rng_below(&r, 2) ? -1 : 1) * ldexp(1 + mp_rng_uniform(&r), (int)floor(e)));
    }
    int64_t at = 0;
    x[at++] = NAN, x[at++] = -NAN, x[at++] = INFINITY, x[at++] = -INFINITY, x[at++] = 0.0f, x[at++] = -0.0f;
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++)
        for (int d = -2; d <= 2; d++) x[at++] = from_bits(edges[k] + (uint32_t)d) * (d & 1 ? -1 : 1);
    for (int k = 0; k < 1000; k++) x[at++] = 0.0f;
}

static void check_equal(const mp_tensor_stats *g, const mp_tensor_stats *c, const char *what) {
    CHECK(g->numel == c->numel && g->nan == c->nan && g->inf == c->inf && g->zero == c->zero,
          "%s: numel %lld/%lld nan %lld/%lld inf %lld/%lld zero %lld/%lld", what, (long long)g->numel,
          (long long)c->numel, (long long)g->nan, (long long)c->nan, (long long)g->inf, (long long)c->inf,
          (long long)g->zero, (long long)c->zero);
    CHECK(g->amax == c->amax && g->amin == c->amin, "%s: amax %g/%g amin %g/%g", what, g->amax, c->amax, g->amin,
          c->amin);
    for (int f = 0; f < MP_NUMERICS_FORMATS; f++)
        CHECK(g->overflow[f] == c->overflow[f] && g->underflow[f] == c->underflow[f] &&
                  g->subnormal[f] == c->subnormal[f],
              "%s format %d: overflow %lld/%lld underflow %lld/%lld subnormal %lld/%lld", what, f,
              (long long)g->overflow[f], (long long)c->overflow[f], (long long)g->underflow[f],
              (long long)c->underflow[f], (long long)g->subnormal[f], (long long)c->subnormal[f]);
    int bad = -1;
    for (int b = 0; b < MP_NUMERICS_HIST_BINS && bad < 0; b++)
        if (g->hist[b] != c->hist[b]) bad = b;
    CHECK(bad < 0, "%s: histogram bin %d (octave %d): %lld on the GPU, %lld on the CPU", what, bad,
          bad + MP_NUMERICS_HIST_MIN, bad < 0 ? 0LL : (long long)g->hist[bad], bad < 0 ? 0LL : (long long)c->hist[bad]);
}

/* 1. The kernel against the CPU pass. */
static void kernel_equals_cpu(void) {
    const int64_t n = (1 << 20) + 37; /* not a multiple of a warp */
    float *x = malloc((size_t)n * sizeof *x);
    void *low = malloc((size_t)n * sizeof(float));
    mp_cuda_ctx *ctx = NULL;
    mp_cuda_numerics *num = NULL;
    void *dev = NULL;
    CHECK_OK(mp_cuda_ctx_create(0, &ctx));
    CHECK_OK(mp_cuda_numerics_create(ctx, 4, &num));
    CHECK(x && low && cudaMalloc(&dev, (size_t)n * sizeof(float) * 2) == cudaSuccess, "memory");
    if (!x || !low || !ctx || !num || !dev) goto out;
    fill_values(x, n);
    const mp_dtype dts[] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};
    for (size_t d = 0; d < 3; d++) {
        const mp_dtype dt = dts[d];
        const void *host = x;
        if (dt != MP_DTYPE_F32) {
            mp_store_f32(low, dt, x, n);
            host = low;
        }
        const size_t bytes = (size_t)n * mp_dtype_size(dt);
        /* slot 2 gets the first half only: two slots of one collection stay apart */
        CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
        CHECK_OK(mp_cuda_numerics_clear(num));
        CHECK_OK(mp_cuda_numerics_tensor(num, 1, dev, dt, n));
        CHECK_OK(mp_cuda_numerics_tensor(num, 2, dev, dt, n / 2));
        CHECK_OK(mp_cuda_numerics_readback(num, 3));
        bool ready = false;
        CHECK_OK(mp_cuda_numerics_ready(num, true, &ready));
        CHECK(ready, "the readback was waited for");
        mp_tensor_stats gpu, cpu, empty;
        char what[64];
        snprintf(what, sizeof what, "%s, %lld values", mp_dtype_name(dt), (long long)n);
        mp_cuda_numerics_get(num, 1, n, &gpu);
        CHECK_OK(mp_tensor_stats_compute(host, dt, n, &cpu));
        check_equal(&gpu, &cpu, what);
        CHECK(cpu.nan >= 2 && cpu.inf >= 2 && cpu.zero >= 1000 && cpu.subnormal[MP_NUMERICS_FP16] > 0,
              "%s: the values cover every class", what);
        if (dt != MP_DTYPE_F16) /* an f16 tensor holds no value fp16 overflows or flushes */
            CHECK(cpu.overflow[MP_NUMERICS_FP16] > 0 && cpu.underflow[MP_NUMERICS_FP16] > 0,
                  "%s: values fp16 overflows and flushes", what);
        if (dt == MP_DTYPE_F32)
            CHECK(cpu.overflow[MP_NUMERICS_BF16] > 0 && cpu.underflow[MP_NUMERICS_BF16] > 0 &&
                      cpu.subnormal[MP_NUMERICS_BF16] > 0,
                  "f32 values cover every bf16 class");
        snprintf(what, sizeof what, "%s, first %lld values", mp_dtype_name(dt), (long long)(n / 2));
        mp_cuda_numerics_get(num, 2, n / 2, &gpu);
        CHECK_OK(mp_tensor_stats_compute(host, dt, n / 2, &cpu));
        check_equal(&gpu, &cpu, what);
        mp_cuda_numerics_get(num, 0, 0, &gpu); /* untouched slot */
        CHECK_OK(mp_tensor_stats_compute(host, dt, 0, &empty));
        check_equal(&gpu, &empty, "an unused slot");
    }
    CHECK_ERR(mp_cuda_numerics_tensor(num, 0, dev, MP_DTYPE_I32, 4), MP_ERR_INVALID_ARG, "i32");
out:
    cudaFree(dev);
    mp_cuda_numerics_destroy(num);
    mp_cuda_ctx_destroy(ctx);
    free(x);
    free(low);
}

enum { B = 32, STEPS = 12 };

typedef struct {
    mp_model m;
    mp_optimizer *opt;
    mp_trainer *t;
} run;

static mp_status run_open(run *r, mp_device device) {
    memset(r, 0, sizeof *r);
    MP_TRY(small_cnn_build(MP_PRECISION_FP32, true, &r->m));
    MP_TRY(mp_optimizer_create(r->m.g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD, .momentum = 0.9f},
                                                            .lr = {.base_lr = 0.1f}},
                               &r->opt));
    return mp_trainer_create(r->m.g,
                             &(mp_trainer_opts){.batch = B, .device = device, .input = r->m.input,
                                                .labels = r->m.labels, .loss = r->m.loss, .optimizer = r->opt},
                             &r->t);
}

static void run_close(run *r) {
    mp_trainer_destroy(r->t);
    mp_optimizer_destroy(r->opt);
    if (r->m.g) mp_model_free(&r->m);
}

static float xs[STEPS][B * SMALL_C * SMALL_H * SMALL_W];
static int32_t ys[STEPS][B];

static mp_status step(run *r, int k) {
    return mp_trainer_step(r->t, &(mp_batch){.images = xs[k % STEPS], .labels = ys[k % STEPS], .n = B}, NULL);
}

static const mp_numerics_record *find(const mp_numerics_record *rec, int n, const mp_numerics_record *like) {
    for (int i = 0; i < n; i++)
        if (rec[i].kind == like->kind && rec[i].node == like->node && rec[i].param == like->param) return &rec[i];
    return NULL;
}

/* 2. A GPU trainer's collection against a CPU trainer's, step by step. */
static void trainer_equals_cpu(void) {
    run cpu, gpu;
    CHECK_OK(run_open(&cpu, (mp_device){MP_DEVICE_CPU, 0}));
    CHECK_OK(run_open(&gpu, (mp_device){MP_DEVICE_CUDA, 0}));
    if (!cpu.t || !gpu.t) goto out;
    CHECK_OK(mp_trainer_numerics_enable(cpu.t, &(mp_numerics_opts){.every = 1}));
    CHECK_OK(mp_trainer_numerics_enable(gpu.t, &(mp_numerics_opts){.every = 1}));
    for (int k = 0; k < 3; k++) {
        CHECK_OK(step(&cpu, k));
        CHECK_OK(step(&gpu, k));
        CHECK_OK(mp_trainer_wait(gpu.t, NULL));
        const mp_numerics_record *rc, *rg;
        int nc = 0, ng = 0;
        int64_t sc = 0, sg = 0;
        CHECK_OK(mp_trainer_numerics(cpu.t, &rc, &nc, &sc));
        CHECK_OK(mp_trainer_numerics(gpu.t, &rg, &ng, &sg));
        CHECK(sc == k + 1 && sg == k + 1, "step %d: collections of steps %lld (CPU) and %lld (GPU)", k + 1,
              (long long)sc, (long long)sg);
        CHECK(nc == ng && nc > 20, "step %d: %d records on the CPU, %d on the GPU", k + 1, nc, ng);
        int matched = 0, noise = 0;
        for (int i = 0; i < ng; i++) {
            const mp_numerics_record *g = &rg[i], *c = find(rc, nc, g);
            CHECK(c != NULL, "step %d: GPU record '%s' kind %d has no CPU twin", k + 1, g->name, g->kind);
            if (!c) continue;
            matched++;
            const mp_tensor_stats *a = &g->stats, *b = &c->stats;
            CHECK(a->numel == b->numel && a->nan == 0 && a->inf == 0 && b->nan == 0 && b->inf == 0,
                  "'%s' kind %d: numel %lld/%lld, nan %lld, inf %lld", g->name, g->kind, (long long)a->numel,
                  (long long)b->numel, (long long)a->nan, (long long)a->inf);
            if (b->amax < 1e-6 && g->kind == MP_NUMERICS_PARAM_GRAD) { /* a bias before BN: rounding noise */
                noise++;
                continue;
            }
            CHECK(fabs(a->amax - b->amax) <= 2e-3 * b->amax + 1e-30, "'%s' kind %d step %d: amax %g (GPU) vs %g (CPU)",
                  g->name, g->kind, k + 1, a->amax, b->amax);
            CHECK(llabs(a->zero - b->zero) <= a->numel / 100, "'%s' kind %d: %lld zeros (GPU) vs %lld (CPU)", g->name,
                  g->kind, (long long)a->zero, (long long)b->zero);
            CHECK(g->scale == c->scale, "'%s': scale %g vs %g", g->name, g->scale, c->scale);
        }
        CHECK(matched == ng && noise <= 2, "step %d: %d of %d records matched, %d of them noise-level (the two conv "
              "biases before batch norms have zero gradients up to rounding)", k + 1, matched, ng, noise);
    }
out:
    run_close(&cpu);
    run_close(&gpu);
}

/* 3. Collections while the step replays its graphs, a new selection, stop. */
static void replayed_collections(void) {
    run r;
    CHECK_OK(run_open(&r, (mp_device){MP_DEVICE_CUDA, 0}));
    if (!r.t) goto out;
    CHECK_OK(mp_trainer_numerics_enable(r.t, &(mp_numerics_opts){.every = 3, .kinds = MP_NUMERICS_ALL}));
    int64_t seen[STEPS];
    double conv1_amax[STEPS];
    int n_seen = 0, records = 0;
    for (int k = 0; k <= STEPS; k++) {
        if (k < STEPS) CHECK_OK(step(&r, k));
        else CHECK_OK(mp_trainer_wait(r.t, NULL));
        const mp_numerics_record *rec;
        int n = 0;
        int64_t s = 0;
        CHECK_OK(mp_trainer_numerics(r.t, &rec, &n, &s));
        if (s == 0 || (n_seen && s == seen[n_seen - 1])) continue;
        if (n_seen == STEPS) break;
        records = n;
        conv1_amax[n_seen] = -1;
        for (int i = 0; i < n; i++)
            if (rec[i].kind == MP_NUMERICS_PARAM && !strcmp(rec[i].name, "conv1.weight"))
                conv1_amax[n_seen] = rec[i].stats.amax;
        seen[n_seen++] = s;
    }
    CHECK(n_seen == 4, "%d collections arrived, expected 4 (steps 3, 6, 9, 12)", n_seen);
    for (int i = 0; i < n_seen && i < 4; i++)
        CHECK(seen[i] == 3 * (i + 1), "collection %d belongs to step %lld, expected %d", i, (long long)seen[i],
              3 * (i + 1));
    CHECK(records > 20, "%d records per collection", records);
    for (int i = 1; i < n_seen; i++)
        CHECK(conv1_amax[i] > 0 && conv1_amax[i] != conv1_amax[i - 1],
              "conv1.weight amax %g at step %lld, %g before: a replay measured stale values", conv1_amax[i],
              (long long)seen[i], conv1_amax[i - 1]);
    /* a new selection: the collecting graph is captured again, for fc alone */
    CHECK_OK(mp_trainer_numerics_enable(r.t, &(mp_numerics_opts){.every = 1, .nodes = "fc"}));
    const mp_numerics_record *rec;
    int n = 0;
    int64_t s = 0;
    for (int k = 0; k < 3; k++) { /* read after every step, as a log writer does: each arrives, a step late */
        CHECK_OK(step(&r, k));
        CHECK_OK(mp_trainer_numerics(r.t, &rec, &n, &s));
    }
    CHECK_OK(mp_trainer_wait(r.t, NULL));
    CHECK_OK(mp_trainer_numerics(r.t, &rec, &n, &s));
    CHECK(s == STEPS + 3, "newest collection of step %lld, expected %d", (long long)s, STEPS + 3);
    int fc = 0;
    for (int i = 0; i < n; i++) fc += rec[i].node == mp_graph_find(r.m.g, "fc");
    CHECK(n == 6 && fc == n, "the fc selection gave %d records, %d of them fc's (expected 6: output, its gradient, "
          "weight, bias and their gradients)", n, fc);
    CHECK_OK(mp_trainer_numerics_enable(r.t, NULL));
    for (int k = 0; k < 2; k++) CHECK_OK(step(&r, k));
    float loss = NAN;
    CHECK_OK(mp_trainer_loss(r.t, &loss));
    CHECK(isfinite(loss), "the step runs on after statistics stop: loss %g", loss);
    /* 4. */
    CHECK_ERR(mp_trainer_numerics_enable(r.t, &(mp_numerics_opts){.nodes = "fc,nope"}), MP_ERR_INVALID_ARG, "nope");
out:
    run_close(&r);
}

/* input -> stem conv+BN+ReLU r0 -> conv+BN a -> relu(a + r0) -> gap -> fc;
 * reference: the CPU's plain-C kernels (which fuse no residual add) */
static mp_status resblock_open(run *r, mp_device device, bool reference, mp_node *add) {
    memset(r, 0, sizeof *r);
    mp_graph *g = r->m.g = mp_graph_create();
    if (!g) return mp_error(MP_ERR_NOMEM, "graph");
    mp_node x = r->m.input = mp_graph_input(g, "input", SMALL_C, SMALL_H, SMALL_W);
    mp_node r0 = mp_conv_bn_relu(g, "stem", x, 8, 3, 1);
    mp_node a = mp_conv_bn(g, "a_conv", r0, (mp_conv_opts){.out_channels = 8, .kernel = 3, .padding = 1});
    *add = mp_add(g, "a_add", a, r0);
    mp_node y = mp_global_avgpool(g, "gap", mp_relu(g, "a_relu", *add));
    y = mp_linear(g, "fc", y, (mp_linear_opts){.out_features = 10, .bias = true});
    MP_TRY(mp_model_finish(&r->m, y));
    mp_graph_init_params(g, 7);
    MP_TRY(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = {.kind = MP_OPTIM_SGD}, .lr = {.base_lr = 0.01f}},
                               &r->opt));
    return mp_trainer_create(g,
                             &(mp_trainer_opts){.batch = B, .device = device, .input = r->m.input,
                                                .labels = r->m.labels, .loss = r->m.loss, .optimizer = r->opt,
                                                .reference = reference},
                             &r->t);
}

/* 5. */
static void fused_add_records(void) {
    run gpu, cpu, host;
    mp_node add = -1, cpu_add = -1, host_add = -1;
    CHECK_OK(resblock_open(&gpu, (mp_device){MP_DEVICE_CUDA, 0}, false, &add));
    CHECK_OK(resblock_open(&cpu, (mp_device){MP_DEVICE_CPU, 0}, true, &cpu_add));
    CHECK_OK(resblock_open(&host, (mp_device){MP_DEVICE_CPU, 0}, false, &host_add));
    if (!gpu.t || !cpu.t || !host.t) goto out;
    const mp_plan *p = mp_trainer_plan(gpu.t);
    CHECK(p->nodes[add].fused_away, "the GPU plan fuses a_add into a_conv's batch norm");
    CHECK(!mp_trainer_plan(cpu.t)->nodes[cpu_add].fused_away, "the CPU reference plan keeps a_add apart");
    CHECK_ERR(mp_trainer_numerics_enable(gpu.t, &(mp_numerics_opts){.nodes = "a_add"}), MP_ERR_INVALID_ARG,
              "never stored");
    /* a CPU plan on the vector kernels fuses it too (where the three run natively channels-last): refused alike */
    if (mp_trainer_plan(host.t)->nodes[host_add].fused_away)
        CHECK_ERR(mp_trainer_numerics_enable(host.t, &(mp_numerics_opts){.nodes = "a_add"}), MP_ERR_INVALID_ARG,
                  "never stored");
    else
        CHECK_OK(mp_trainer_numerics_enable(host.t, &(mp_numerics_opts){.nodes = "a_add"}));
    printf("ok   the CPU plan on this host %s a_add\n",
           mp_trainer_plan(host.t)->nodes[host_add].fused_away ? "fuses (refused like the GPU's)" : "keeps apart");
    CHECK_OK(mp_trainer_numerics_enable(cpu.t, &(mp_numerics_opts){.nodes = "a_add"}));
    CHECK_OK(mp_trainer_numerics_enable(gpu.t, &(mp_numerics_opts){.every = 1}));
    CHECK_OK(step(&gpu, 0));
    CHECK_OK(step(&cpu, 0));
    CHECK_OK(mp_trainer_wait(gpu.t, NULL));
    const mp_numerics_record *rec;
    int n = 0, adds = 0, relu_out = 0, cpu_adds = 0;
    int64_t s = 0;
    CHECK_OK(mp_trainer_numerics(gpu.t, &rec, &n, &s));
    for (int i = 0; i < n; i++) {
        adds += rec[i].node == add;
        if (rec[i].kind == MP_NUMERICS_OUTPUT && !strcmp(rec[i].name, "a_relu")) {
            relu_out++;
            CHECK(rec[i].stats.zero > 0 && rec[i].stats.amax > 0, "a_relu's output: %lld zeros, amax %g",
                  (long long)rec[i].stats.zero, rec[i].stats.amax);
        }
    }
    CHECK(n > 0 && adds == 0 && relu_out == 1, "GPU: %d records, %d of the fused add (expected none), %d of "
          "a_relu's output (expected 1)", n, adds, relu_out);
    CHECK_OK(mp_trainer_numerics(cpu.t, &rec, &n, &s));
    for (int i = 0; i < n; i++) cpu_adds += rec[i].node == cpu_add;
    CHECK(cpu_adds == 2 && n == 2, "CPU: %d records, %d of a_add (expected its output and gradient)", n, cpu_adds);
out:
    run_close(&gpu);
    run_close(&cpu);
    run_close(&host);
}

int main(void) {
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_numerics: no CUDA device (%s)\n", mp_cuda_device_list());
        return 2;
    }
    for (int k = 0; k < STEPS; k++) small_cnn_batch(500 + (uint64_t)k, B, xs[k], ys[k]);
    kernel_equals_cpu();
    trainer_equals_cpu();
    replayed_collections();
    fused_add_records();
    return test_summary("test_cuda_numerics");
}
