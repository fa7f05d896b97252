/* cpu_train_step.c — CPU training-step throughput of a model (default cnn10,
 * batch 128, fp32) next to the GFLOP/s oneDNN reaches on one large fp32
 * convolution on the same machine, measured side by side in one run.
 *
 *   bench/cpu_train_step [--model cnn10] [--batch 128] [--steps 20] [--shape 1x28x28]
 *                        [--precision fp32,amp-bf16,o2-bf16,bf16] [--threads T] [--reference]
 *                        [--profile] [--profile-nodes N] [--ab] [--ab-layout] [--ab-conv]
 * Prints the CPU model and a table, one row per precision policy; times are
 * medians over the steps. Every policy's plan is built first and their
 * steps run interleaved, round by round, in this one process; "vs fp32" is
 * the median over rounds of fp32's step time over the policy's (load that
 * comes and goes falls on both alike). --profile adds, per policy, where the timed steps went (warm-up
 * steps excluded) and the share of ReLU + batch norm in them (the median of the steps' shares, and of
 * all their time); --profile-nodes N (implies --profile) also the N slowest nodes one by one. --ab also
 * times each policy's step with batch norm and ReLU unfused, and with the
 * scalar reference kernels for ReLU, batch norm and pooling, unfused (as
 * before their vector paths), and the bf16 policies' step with the other
 * math for bf16 convolutions (bf16_conv_math.h), in the same rounds, and
 * each policy's step with every activation NCHW (opts.channels_first;
 * --ab-layout times that one beside the default alone), with every conv
 * weight gradient on oneDNN's primitive (conv_wgrad_onednn.h), and with
 * every conv data gradient on oneDNN's backward-data primitive
 * (conv_dgrad_onednn.h); --ab-conv times those two beside the default
 * alone (for fp32 they are the default plan again: both forms are taken on
 * bf16 kernels only). The table starts with the copy bandwidth of the
 * machine (what the memory-bound ops' bytes take) and the bf16
 * dot-product rate. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "core/cpu_features.h"
#include "ops/bf16_conv_math.h"
#include "ops/cpu_fast.h"
#ifdef MP_HAVE_ONEDNN
#include "ops/conv_dgrad_onednn.h"
#include "ops/conv_wgrad_onednn.h"
#endif
#include "core/rng.h"
#include "graph/graph.h"
#include "graph/plan.h"
#include "models/models.h"
#include "optim/optim.h"
#include "train/progress.h"

#include "core/median.h"

#ifdef MP_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "monitor/onednn_probe.h"
#endif

/* Seconds spent so far in ReLU and batch-norm nodes (a ReLU fused into its
 * batch norm counts there), from opts.profile's per-node times. */
static double relu_bn_seconds(const mp_plan *p) {
    double s = 0;
    for (int i = 0; i < p->n; i++) {
        mp_op_kind k = p->g->nodes[i].desc.kind;
        if (k == MP_OP_RELU || k == MP_OP_BATCHNORM2D) s += p->nodes[i].fwd_seconds + p->nodes[i].bwd_seconds;
    }
    return s;
}

#ifdef MP_HAVE_ONEDNN
static void fill(void *p, dnnl_data_type_t dt, size_t i, float v) {
    if (dt == dnnl_bf16) ((mp_bf16 *)p)[i] = mp_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

#define DNNL_OK(x)                                                             \
    do {                                                                       \
        if ((x) != dnnl_success) {                                             \
            fprintf(stderr, "cpu_train_step: oneDNN call failed: %s\n", #x);   \
            return -1;                                                         \
        }                                                                      \
    } while (0)

/* GFLOP/s of one large forward convolution in f32 or bf16, oneDNN choosing
 * its layout: N=64, 256->256 channels, 3x3, 28x28, padding 1. */
static double onednn_large_conv_gflops(dnnl_data_type_t dt, int reps, char *impl, size_t impl_len) {
    const int N = 64, C = 256, K = 256, H = 28, W = 28;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t src, wei, dst;
    dnnl_dims_t sd = {N, C, H, W}, wd = {K, C, 3, 3}, dd = {N, K, H, W}, strides = {1, 1}, pad = {1, 1};
    DNNL_OK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dt, dnnl_format_tag_any));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dt, dnnl_format_tag_any));
    DNNL_OK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dt, dnnl_format_tag_any));
    dnnl_convolution_desc_t cd;
    DNNL_OK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src, &wei, NULL,
                                               &dst, strides, pad, pad));
    dnnl_primitive_desc_t pd;
    DNNL_OK(dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL));
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, impl_len, "%s", name ? name : "?");
    dnnl_primitive_t conv;
    DNNL_OK(dnnl_primitive_create(&conv, pd));
    dnnl_memory_t ms, mw, md, mscr;
    DNNL_OK(dnnl_memory_create(&ms, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), eng, DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_memory_create(&mw, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), eng, DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_memory_create(&md, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), eng, DNNL_MEMORY_ALLOCATE));
    DNNL_OK(dnnl_memory_create(&mscr, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), eng,
                               DNNL_MEMORY_ALLOCATE));
    /* fill inputs so no denormal/zero shortcuts apply */
    void *p;
    dnnl_memory_get_data_handle(ms, &p);
    for (size_t i = 0; i < (size_t)N * C * H * W; i++) fill(p, dt, i, (float)(i % 17) * 0.01f);
    dnnl_memory_get_data_handle(mw, &p);
    for (size_t i = 0; i < (size_t)K * C * 9; i++) fill(p, dt, i, (float)(i % 13) * 0.001f);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}, {DNNL_ARG_SCRATCHPAD, mscr}};
    double *t = malloc((size_t)reps * sizeof *t);
    for (int r = -2; r < reps; r++) {
        double t0 = mp_now_seconds();
        DNNL_OK(dnnl_primitive_execute(conv, st, 4, args));
        DNNL_OK(dnnl_stream_wait(st));
        if (r >= 0) t[r] = mp_now_seconds() - t0;
    }
    double sec = mp_median_double(t, reps);
    free(t);
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(mw);
    dnnl_memory_destroy(md);
    dnnl_memory_destroy(mscr);
    dnnl_primitive_destroy(conv);
    dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    double flops = 2.0 * N * K * H * W * C * 9;
    return flops / sec / 1e9;
}
#endif

typedef struct {
    double ms, images_per_s, gflops;
    double speedup_vs_first; /* median over rounds of the first trainer's time / this one's */
} step_result;

/* The ways --ab runs the same step, interleaved step by step in one process
 * so that a shared machine's load falls on all of them alike. */
typedef enum {
    V_DEFAULT,  /* vector kernels, batch norm + ReLU fused: what plans run */
    V_UNFUSED,  /* vector kernels, MIXPREC_NO_FUSION=1 */
    V_SCALAR,   /* ReLU, batch norm and pooling without our vector kernels, unfused (as before them; oneDNN's where it applies) */
    V_MATH,     /* bf16 policies: the convolutions on the math AUTO did not choose */
    V_NCHW,     /* every activation NCHW (no channels-last, graph/plan_layout.h) */
    V_WGRAD,    /* every conv weight gradient on oneDNN's backward-weights primitive (no im2col + matmul) */
    V_DGRAD,    /* every conv data gradient on oneDNN's backward-data primitive (not the transposed forward) */
    V_COUNT
} variant;
static const char *variant_name[V_COUNT] = {"", " unfused", " scalar ReLU/BN/pool, unfused", " other conv math: ",
                                            " activations NCHW", " weight gradients by oneDNN's primitive",
                                            " data gradients by oneDNN's primitive"};

/* The bf16 convolution math V_MATH uses. */
static mp_bf16_math other_math(void) {
    mp_bf16_math m = mp_bf16_math_set(MP_BF16_MATH_AUTO);
    return m == MP_BF16_MATH_DOT ? MP_BF16_MATH_F32 : MP_BF16_MATH_DOT;
}

/* Copy bandwidth in GB/s (bytes read + written) of 2 x 256 MiB f32 arrays
 * on all threads, best of reps. */
static double copy_gbps(int reps) {
    const size_t n = (size_t)64 << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 1023), b[i] = 0;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = mp_now_seconds();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        double t = mp_now_seconds() - t0;
        best = t < best ? t : best;
    }
    volatile float sink = b[n / 3];
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)(n * sizeof(float)) / best / 1e9;
}

/* One model, plan, optimizer and batch. */
typedef struct {
    mp_model m;
    mp_plan *plan;
    mp_optim *opt;
    mp_param_ref *refs;
    float *x;
    int32_t *y;
    size_t in_n;
    int batch;
    variant v;
    mp_precision precision;
} trainer;

static void trainer_free(trainer *t) {
    free(t->x);
    free(t->y);
    free(t->refs);
    mp_optim_destroy(t->opt);
    mp_plan_destroy(t->plan);
    if (t->m.g) mp_model_free(&t->m);
}

static int trainer_init(trainer *t, const char *model, int c, int h, int w, int batch, bool reference, bool profile,
                        mp_precision precision, variant v) {
    memset(t, 0, sizeof *t);
    t->batch = batch;
    t->v = v;
    t->precision = precision;
    if (mp_model_build(model, c, h, w, 10, &t->m) != MP_OK ||
        mp_graph_apply_policy(t->m.g, (mp_policy_opts){.precision = precision}) != MP_OK) {
        fprintf(stderr, "cpu_train_step: %s\n", mp_last_error());
        return -1;
    }
    mp_graph_init_params(t->m.g, 1);
    mp_fast_isa_set(v == V_SCALAR ? MP_FAST_NONE : MP_FAST_AVX512); /* prepare() asks too */
    mp_bf16_math_set(v == V_MATH ? other_math() : MP_BF16_MATH_AUTO);
#ifdef MP_HAVE_ONEDNN
    const int wgrad_mode = mp_wgrad_gemm_mode_set(v == V_WGRAD ? 0 : -2);
    const int dgrad_mode = mp_dgrad_fwd_mode_set(v == V_DGRAD ? 0 : -2);
#endif
    mp_status st = mp_plan_create(t->m.g, (mp_plan_opts){.batch = batch, .training = true, .loss = t->m.loss,
                                                         .reference = reference, .profile = profile,
                                                         .no_fusion = v == V_UNFUSED || v == V_SCALAR,
                                                         .channels_first = v == V_NCHW},
                                  &t->plan);
    mp_fast_isa_set(MP_FAST_AVX512);
    mp_bf16_math_set(MP_BF16_MATH_AUTO);
#ifdef MP_HAVE_ONEDNN
    mp_wgrad_gemm_mode_set(wgrad_mode);
    mp_dgrad_fwd_mode_set(dgrad_mode);
#endif
    if (st != MP_OK) {
        fprintf(stderr, "cpu_train_step: %s\n", mp_last_error());
        trainer_free(t);
        return -1;
    }
    mp_graph *g = t->m.g;
    t->refs = calloc((size_t)g->n_params, sizeof *t->refs);
    int n = 0;
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].spec.trainable)
            t->refs[n++] = (mp_param_ref){.param = g->params[i].data, .grad = g->params[i].grad,
                                          .n = mp_shape_numel(&g->params[i].spec.shape), .decay = true,
                                          .name = g->params[i].name, .state_dtype = mp_graph_param_low_only(g, i)};
    mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f}, t->refs, n, &t->opt);
    t->in_n = mp_plan_numel(t->plan, t->m.input);
    t->x = malloc(t->in_n * sizeof *t->x);
    t->y = malloc((size_t)batch * sizeof *t->y);
    mp_rng r;
    mp_rng_seed(&r, 3);
    for (size_t i = 0; i < t->in_n; i++) t->x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < batch; i++) t->y[i] = (int32_t)mp_rng_below(&r, 10);
    return 0;
}

/* One training step; returns its seconds. */
static double trainer_step(trainer *t) {
    mp_fast_isa_set(t->v == V_SCALAR ? MP_FAST_NONE : MP_FAST_AVX512);
    double t0 = mp_now_seconds();
    mp_plan_set_input(t->plan, t->m.input, t->x, t->in_n);
    mp_plan_set_labels(t->plan, t->m.labels, t->y, (size_t)t->batch);
    mp_plan_forward(t->plan);
    mp_graph_zero_grad(t->m.g);
    mp_plan_backward(t->plan, 1.0f);
    mp_optim_step(t->opt, 0.01f);
    double sec = mp_now_seconds() - t0;
    mp_fast_isa_set(MP_FAST_AVX512);
    return sec;
}

static int profile_nodes; /* --profile-nodes: the slowest nodes printed after each profile */

/* Times every trainer's step, the trainers' steps interleaved round by round
 * (so that a shared machine's load falls on all alike; ratios come from the
 * same rounds); res[k] per trainer. --profile prints each V_DEFAULT one's. */
static int time_steps(trainer *tr, int n, int steps, bool profile, const char *model, step_result *res) {
    /* t: each trainer's step times; rb: each step's ReLU + batch norm seconds (profiled trainers) */
    double *t = malloc((size_t)(steps * n) * sizeof *t), *rb = calloc((size_t)(steps * n), sizeof *rb);
    if (!t || !rb) {
        free(t), free(rb);
        return -1;
    }
    for (int s = -3; s < steps; s++) {
        for (int k = 0; k < n; k++) {
            const double rb0 = relu_bn_seconds(tr[k].plan);
            double sec = trainer_step(&tr[k]);
            if (s >= 0) t[k * steps + s] = sec, rb[k * steps + s] = relu_bn_seconds(tr[k].plan) - rb0;
            if (s == -1) /* the profile covers the timed steps only */
                for (int i = 0; i < tr[k].plan->n; i++) tr[k].plan->nodes[i].fwd_seconds = tr[k].plan->nodes[i].bwd_seconds = 0;
        }
    }
    for (int k = 0; k < n; k++) {
        const double *tk = t + k * steps;
        if (profile && tr[k].v == V_DEFAULT) { /* to stderr, so the table on stdout stays one table */
            double all = 0;
            for (int s = 0; s < steps; s++) all += tk[s];
            fprintf(stderr, "\nprofile: %s %s, %d timed steps (%.1f ms in all; 3 warm-up steps not counted)\n", model,
                    mp_precision_name(tr[k].precision), steps, 1e3 * all);
            mp_plan_print_profile(tr[k].plan, stderr);
            if (profile_nodes > 0) mp_plan_print_profile_nodes(tr[k].plan, stderr, profile_nodes);
            /* each step's share, then their median: a step slowed by the machine (shared cores) weighs no
             * more than another, as in the table's median step times */
            double *share = malloc((size_t)steps * sizeof *share), *rbk = malloc((size_t)steps * sizeof *rbk);
            if (!share || !rbk) {
                free(share), free(rbk), free(t), free(rb);
                return -1;
            }
            for (int s = 0; s < steps; s++) share[s] = rb[k * steps + s] / tk[s], rbk[s] = rb[k * steps + s];
            const double med_share = mp_median_double(share, steps), med_ms = 1e3 * mp_median_double(rbk, steps);
            fprintf(stderr,
                    "relu + batchnorm2d: %.1f ms per step (median), %.1f%% of the step (median of the steps' "
                    "shares; %.1f%% of all the timed steps' time)\n",
                    med_ms, 100 * med_share, 100 * relu_bn_seconds(tr[k].plan) / all);
            free(share), free(rbk);
            mp_plan_print_memory(tr[k].plan, stderr);
        }
        double *sorted = malloc((size_t)steps * sizeof *sorted);
        memcpy(sorted, tk, (size_t)steps * sizeof *sorted);
        double sec = mp_median_double(sorted, steps);
        free(sorted);
        res[k].ms = 1e3 * sec;
        res[k].images_per_s = tr[k].batch / sec;
        res[k].gflops = mp_graph_flops(tr[k].m.g, tr[k].batch, true) / sec / 1e9;
    }
    /* each round's time of trainer k over trainer 0's (the first precision's default) */
    for (int k = 1; k < n; k++) {
        double *r = malloc((size_t)steps * sizeof *r);
        for (int s = 0; s < steps; s++) r[s] = t[s] / t[k * steps + s];
        res[k].speedup_vs_first = mp_median_double(r, steps);
        free(r);
    }
    res[0].speedup_vs_first = 1;
    free(t), free(rb);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = "cnn10", *precisions = "fp32";
    int batch = 128, steps = 20, c = 1, h = 28, w = 28, threads = 0;
    bool reference = false, profile = false, ab = false, ab_layout = false, ab_conv = false;
    mp_prefer_passive_openmp(argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) precisions = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%dx%d", &c, &h, &w) != 3) {
                fprintf(stderr, "cpu_train_step: --shape wants CxHxW\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--reference")) reference = true;
        else if (!strcmp(argv[i], "--profile")) profile = true;
        else if (!strcmp(argv[i], "--profile-nodes") && i + 1 < argc) {
            profile = true;
            if ((profile_nodes = atoi(argv[++i])) < 1) {
                fprintf(stderr, "cpu_train_step: --profile-nodes wants a count of nodes, at least 1\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--ab")) ab = true;
        else if (!strcmp(argv[i], "--ab-layout")) ab_layout = true;
        else if (!strcmp(argv[i], "--ab-conv")) ab_conv = true;
        else {
            fprintf(stderr, "usage: cpu_train_step [--model M] [--batch B] [--steps N] [--shape CxHxW] "
                            "[--precision P1,P2,...] [--threads T] [--reference] [--profile] [--profile-nodes N] "
                            "[--ab] [--ab-layout] [--ab-conv]\n");
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (batch < 1 || steps < 1) {
        fprintf(stderr, "cpu_train_step: --batch and --steps must be positive\n");
        return 2;
    }
    if (threads) omp_set_num_threads(threads);
    char dnnl_version[32] = "none";
#ifdef MP_HAVE_ONEDNN
    mp_onednn_probe_version(dnnl_version, sizeof dnnl_version);
#endif
    printf("cpu_train_step: %s, %d threads, oneDNN %s, median of %d steps\n", mp_cpu_model_name(),
           omp_get_max_threads(), dnnl_version, steps);
    double conv_gflops = -1;
    char impl[128] = "n/a (built without oneDNN)";
#ifdef MP_HAVE_ONEDNN
    conv_gflops = onednn_large_conv_gflops(dnnl_f32, 10, impl, sizeof impl);
    char impl16[128] = "";
    double conv16_gflops =
        mp_cpu_multiplies_bf16() ? onednn_large_conv_gflops(dnnl_bf16, 10, impl16, sizeof impl16) : -1;
#endif
    const double gbps = copy_gbps(5);
    /* Without AVX-512 BF16 or AMX no oneDNN bf16 kernel exists: bf16 nodes
     * are emulated (f32 kernels on bf16-rounded copies), whatever the math
     * setting says. */
    const bool bf16_hw = mp_cpu_multiplies_bf16();
    printf("copy bandwidth: %.1f GB/s (read + write, %d threads); bf16 dot products at %.2fx the f32 FMA rate "
           "(1 thread); bf16 convolutions: %s\n",
           gbps, omp_get_max_threads(), mp_bf16_dot_rate(),
           bf16_hw ? mp_bf16_math_name(mp_bf16_math_current()) : "emulated (no bf16 instructions on this CPU)");
    printf("\n| what | batch | input | ms/step | images/s | GFLOP/s | share of large conv | vs fp32 |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    printf("| CPU: %s, %d threads, copy %.1f GB/s, bf16 dot products %.2fx f32 FMA | - | - | - | - | - | - | - |\n",
           mp_cpu_model_name(), omp_get_max_threads(), gbps, mp_bf16_dot_rate());
    if (conv_gflops > 0)
        printf("| oneDNN fp32 conv 64x256x28x28, 3x3 -> 256 (%s) | 64 | - | - | - | %.1f | 100%% | - |\n", impl, conv_gflops);
#ifdef MP_HAVE_ONEDNN
    if (conv16_gflops > 0)
        printf("| oneDNN bf16 conv 64x256x28x28, 3x3 -> 256 (%s) | 64 | - | - | - | %.1f | %.0f%% | %.2fx |\n", impl16,
               conv16_gflops, 100.0 * conv16_gflops / conv_gflops, conv16_gflops / conv_gflops);
#endif
    const int n_var = ab || ab_layout || ab_conv ? V_COUNT : 1;
    enum { MAX_PREC = 8 };
    trainer tr[MAX_PREC * V_COUNT];
    const char *names[MAX_PREC * V_COUNT];
    int n = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", precisions);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        mp_precision prec;
        if (mp_precision_parse(name, &prec) != MP_OK) {
            fprintf(stderr, "cpu_train_step: %s\n", mp_last_error());
            return 2;
        }
        if (n + n_var > MAX_PREC * V_COUNT) {
            fprintf(stderr, "cpu_train_step: --precision: at most %d policies\n", MAX_PREC);
            return 2;
        }
        const bool has_bf16 = strstr(name, "bf16") != NULL;
        for (int v = 0; v < n_var; v++) {
            if (v == V_MATH && !has_bf16) continue; /* no bf16 convolutions */
            if (!ab && v != V_DEFAULT && !(ab_layout && v == V_NCHW) && !(ab_conv && (v == V_WGRAD || v == V_DGRAD)))
                continue;
            names[n] = name;
            if (trainer_init(&tr[n], model, c, h, w, batch, reference, profile && v == V_DEFAULT, prec, (variant)v))
                return 1;
            n++;
        }
    }
    step_result res[MAX_PREC * V_COUNT];
    if (time_steps(tr, n, steps, profile, model, res)) return 1;
    for (int k = 0; k < n; k++) {
        /* "vs fp32": the same variant's fp32 step (V_MATH: the default's), from the same rounds */
        double rel_x = -1;
        for (int j = 0; j < n; j++)
            if (tr[j].v == (tr[k].v == V_MATH ? V_DEFAULT : tr[k].v) && tr[j].precision == MP_PRECISION_FP32)
                rel_x = res[k].speedup_vs_first / res[j].speedup_vs_first;
        char share[32] = "n/a", rel[32] = "-", vs_default[48] = "";
        if (conv_gflops > 0) snprintf(share, sizeof share, "%.1f%%", 100.0 * res[k].gflops / conv_gflops);
        if (rel_x > 0) snprintf(rel, sizeof rel, "%.2fx", rel_x);
        for (int j = 0; j < n && tr[k].v != V_DEFAULT; j++) /* the default variant of this precision */
            if (tr[j].v == V_DEFAULT && tr[j].precision == tr[k].precision)
                snprintf(vs_default, sizeof vs_default, " (%.2fx the default's time)",
                         res[j].speedup_vs_first / res[k].speedup_vs_first);
        printf("| %s %s training step%s%s%s%s | %d | %dx%dx%d | %.1f | %.0f | %.1f | %s | %s |\n", model, names[k],
               reference ? " (reference kernels)" : "", variant_name[tr[k].v],
               tr[k].v == V_MATH ? mp_bf16_math_name(other_math()) : "", vs_default, batch, c, h, w, res[k].ms,
               res[k].images_per_s, res[k].gflops, share, rel);
    }
    for (int k = 0; k < n; k++) trainer_free(&tr[k]);
    return 0;
}
