/* cpu_train_step.c — CPU training-step throughput of a model (default cnn10,
 * batch 128, fp32) next to the GFLOP/s oneDNN reaches on one large fp32
 * convolution on the same machine, measured side by side in one run.
 *
 *   bench/cpu_train_step [--model cnn10] [--batch 128] [--steps 20] [--shape 1x28x28]
 *                        [--precision fp32,amp-bf16,o2-bf16,bf16] [--threads T] [--reference]
 * Prints a table, one row per precision policy; times are medians over the
 * steps, and each policy's speed is also given relative to fp32's. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "graph/graph.h"
#include "models/models.h"
#include "optim/optim.h"
#include "train/progress.h"

#ifdef MP_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    double sec = median(t, reps);
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
} step_result;

static int time_training_step(const char *model, int c, int h, int w, int batch, int steps, bool reference,
                              bool profile, mp_precision precision, step_result *res) {
    mp_model m;
    if (mp_model_build(model, c, h, w, 10, &m) != MP_OK ||
        mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = precision}) != MP_OK) {
        fprintf(stderr, "cpu_train_step: %s\n", mp_last_error());
        return -1;
    }
    mp_graph_init_params(m.g, 1);
    mp_plan *plan = NULL;
    if (mp_plan_create(m.g, (mp_plan_opts){.batch = batch, .training = true, .loss = m.loss,
                                           .reference = reference, .profile = profile},
                       &plan) != MP_OK) {
        fprintf(stderr, "cpu_train_step: %s\n", mp_last_error());
        mp_model_free(&m);
        return -1;
    }
    mp_graph *g = m.g;
    mp_param_ref *refs = calloc((size_t)g->n_params, sizeof *refs);
    int n = 0;
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].spec.trainable)
            refs[n++] = (mp_param_ref){.param = g->params[i].data, .grad = g->params[i].grad,
                                       .n = mp_shape_numel(&g->params[i].spec.shape), .decay = true,
                                       .name = g->params[i].name, .state_dtype = mp_graph_param_low_only(g, i)};
    mp_optim *opt = NULL;
    mp_optim_create((mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f}, refs, n, &opt);
    size_t in_n = mp_plan_numel(plan, m.input);
    float *x = malloc(in_n * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    mp_rng r;
    mp_rng_seed(&r, 3);
    for (size_t i = 0; i < in_n; i++) x[i] = (float)mp_rng_normal(&r);
    for (int i = 0; i < batch; i++) y[i] = (int32_t)mp_rng_below(&r, 10);
    double *t = malloc((size_t)steps * sizeof *t);
    for (int s = -3; s < steps; s++) {
        double t0 = mp_now_seconds();
        mp_plan_set_input(plan, m.input, x, in_n);
        mp_plan_set_labels(plan, m.labels, y, (size_t)batch);
        mp_plan_forward(plan);
        mp_graph_zero_grad(g);
        mp_plan_backward(plan, 1.0f);
        mp_optim_step(opt, 0.01f);
        if (s >= 0) t[s] = mp_now_seconds() - t0;
    }
    double sec = median(t, steps);
    if (profile) { /* to stderr, so the table on stdout stays one table */
        double all = 0;
        for (int s = 0; s < steps; s++) all += t[s];
        fprintf(stderr, "\nprofile: %s %s, %d steps + 3 warm-up (timed steps: %.1f ms in all)\n", model,
                mp_precision_name(precision), steps, 1e3 * all);
        mp_plan_print_profile(plan, stderr);
        mp_plan_print_memory(plan, stderr);
    }
    res->ms = 1e3 * sec;
    res->images_per_s = batch / sec;
    res->gflops = mp_graph_flops(g, batch, true) / sec / 1e9;
    free(t);
    free(x);
    free(y);
    free(refs);
    mp_optim_destroy(opt);
    mp_plan_destroy(plan);
    mp_model_free(&m);
    return 0;
}

int main(int argc, char **argv) {
    const char *model = "cnn10", *precisions = "fp32";
    int batch = 128, steps = 20, c = 1, h = 28, w = 28, threads = 0;
    bool reference = false, profile = false;
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
        else {
            fprintf(stderr, "usage: cpu_train_step [--model M] [--batch B] [--steps N] [--shape CxHxW] "
                            "[--precision P1,P2,...] [--threads T] [--reference] [--profile]\n");
            return !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (batch < 1 || steps < 1) {
        fprintf(stderr, "cpu_train_step: --batch and --steps must be positive\n");
        return 2;
    }
    if (threads) omp_set_num_threads(threads);
    printf("cpu_train_step: %d threads, median of %d steps\n", omp_get_max_threads(), steps);
    double conv_gflops = -1;
    char impl[128] = "n/a (built without oneDNN)";
#ifdef MP_HAVE_ONEDNN
    conv_gflops = onednn_large_conv_gflops(dnnl_f32, 10, impl, sizeof impl);
    char impl16[128] = "";
    const mp_cpu_features *cpu = mp_cpu_features_get();
    double conv16_gflops = cpu->avx512_bf16 || cpu->amx_bf16 ? onednn_large_conv_gflops(dnnl_bf16, 10, impl16, sizeof impl16) : -1;
#endif
    printf("\n| what | batch | input | ms/step | images/s | GFLOP/s | share of large conv | vs fp32 |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    if (conv_gflops > 0)
        printf("| oneDNN fp32 conv 64x256x28x28, 3x3 -> 256 (%s) | 64 | - | - | - | %.1f | 100%% | - |\n", impl, conv_gflops);
#ifdef MP_HAVE_ONEDNN
    if (conv16_gflops > 0)
        printf("| oneDNN bf16 conv 64x256x28x28, 3x3 -> 256 (%s) | 64 | - | - | - | %.1f | %.0f%% | %.2fx |\n", impl16,
               conv16_gflops, 100.0 * conv16_gflops / conv_gflops, conv16_gflops / conv_gflops);
#endif
    double fp32_ips = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", precisions);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        mp_precision prec;
        if (mp_precision_parse(name, &prec) != MP_OK) {
            fprintf(stderr, "cpu_train_step: %s\n", mp_last_error());
            return 2;
        }
        step_result res;
        if (time_training_step(model, c, h, w, batch, steps, reference, profile, prec, &res)) return 1;
        if (prec == MP_PRECISION_FP32) fp32_ips = res.images_per_s;
        char share[32] = "n/a", rel[32] = "-";
        if (conv_gflops > 0) snprintf(share, sizeof share, "%.1f%%", 100.0 * res.gflops / conv_gflops);
        if (fp32_ips > 0) snprintf(rel, sizeof rel, "%.2fx", res.images_per_s / fp32_ips);
        printf("| %s %s training step%s | %d | %dx%dx%d | %.1f | %.0f | %.1f | %s | %s |\n", model, name,
               reference ? " (reference kernels)" : "", batch, c, h, w, res.ms, res.images_per_s, res.gflops, share, rel);
        fflush(stdout);
    }
    return 0;
}
