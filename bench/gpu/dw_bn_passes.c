/* dw_bn_passes.c — what fusing a batch norm + ReLU into the depthwise
 * convolution after it (mp_plan_opts.bn_dw_fusion, graph/plan_fuse.h) costs
 * and saves, pass by pass, on mobilenetv2's depthwise layers (CIFAR variant,
 * 3x32x32): our forward and backward-filter (src/cuda/conv_depthwise.h) on
 * the stored batch-norm output, the same two applying the batch norm as they
 * load its input (at stride 1 in f16/bf16 the forward on the stored output
 * is the 4-channel kernel, the fused one the 8-channel kernel, so the
 * difference includes theirs), and the batch norm's apply + ReLU (batchnorm2d_fast.h)
 * that the fusion removes. GPU milliseconds, the median of --reps timed
 * launches each (CUDA events). The last column is fused minus apart
 * (forward + backward-filter + apply), times the layer's count in the model:
 * below 0 the fusion wins that layer. cuDNN's passes, which the unfused step
 * may pick instead of ours, are not in the table (scripts/gpu-check
 * depthwise lists them). Built only with the CUDA backend. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda/batchnorm2d_fast.h"
#include "cuda/conv_depthwise.h"
#include "cuda/cuda_ctx.h"
#include "core/median.h"

typedef struct {
    const char *layer;
    int c, hw, stride, count; /* channels, input height = width, stride, layers of this shape */
} dw_layer;

/* mobilenetv2's 17 depthwise convolutions on 32x32 inputs (src/models/mobilenetv2.c), same shapes merged. */
static const dw_layer LAYERS[] = {
    {"block0_dw", 32, 32, 1, 1},  {"block1_dw", 96, 32, 1, 1},   {"block2_dw", 144, 32, 1, 1},
    {"block3_dw", 144, 32, 2, 1}, {"block4_dw", 192, 16, 1, 2},  {"block6_dw", 192, 16, 2, 1},
    {"block7_dw", 384, 8, 1, 4},  {"block11_dw", 576, 8, 1, 2},  {"block13_dw", 576, 8, 2, 1},
    {"block14_dw", 960, 4, 1, 3},
};

typedef struct {
    mp_cuda_ctx *ctx;
    mp_conv_geom g;
    mp_dtype dt;
    void *x, *y, *w, *out, *dy, *dw, *ws;
    size_t ws_bytes;
    float *coef; /* mu, scale, shift: C each */
} bench;

enum { FWD, FWD_BN, APPLY, WGRAD, WGRAD_BN, PASSES };

static mp_status run(const bench *b, int pass) {
    const mp_dw_bn_relu bn = {b->coef, b->coef + b->g.cx, b->coef + 2 * b->g.cx};
    const long long rows = (long long)b->g.n * b->g.hx * b->g.wx;
    switch (pass) {
    case FWD: return mp_dw_forward(b->ctx, &b->g, b->dt, b->y, NULL, b->w, b->out, "forward");
    case FWD_BN: return mp_dw_forward(b->ctx, &b->g, b->dt, b->x, &bn, b->w, b->out, "forward, fused");
    case APPLY: { /* two chunks of rows per SM, as the library's passes */
        const long long per = (rows + 2LL * b->ctx->sm_count - 1) / (2LL * b->ctx->sm_count);
        const int chunks = (int)((rows + per - 1) / per);
        return mp_cuda_check(mp_bn_fast_apply(b->ctx->stream, b->dt, b->x, NULL, b->y, rows, b->g.cx, chunks, per,
                                              b->coef, true),
                             "mp_bn_fast_apply", "apply");
    }
    case WGRAD:
        return mp_dw_backward_filter(b->ctx, &b->g, b->dt, b->y, NULL, b->out, b->dw, b->ws, b->ws_bytes, "wgrad");
    default:
        return mp_dw_backward_filter(b->ctx, &b->g, b->dt, b->x, &bn, b->out, b->dw, b->ws, b->ws_bytes,
                                     "wgrad, fused");
    }
}

/* Median ms of reps timed launches of pass (after two untimed), or -1 with the error printed. */
static double time_pass(const bench *b, int pass, int reps, cudaEvent_t *ev) {
    float *ms = malloc((size_t)reps * sizeof *ms);
    mp_status s = ms ? MP_OK : MP_ERR_NOMEM;
    for (int i = 0; s == MP_OK && i < 2; i++) s = run(b, pass);
    for (int i = 0; s == MP_OK && i < reps; i++) {
        cudaEventRecord(ev[0], b->ctx->stream);
        s = run(b, pass);
        cudaEventRecord(ev[1], b->ctx->stream);
        if (s == MP_OK) s = mp_cuda_check(cudaEventSynchronize(ev[1]), "cudaEventSynchronize", "timing");
        if (s == MP_OK) cudaEventElapsedTime(&ms[i], ev[0], ev[1]);
    }
    const double r = s == MP_OK ? mp_median_float(ms, reps) : -1;
    if (s != MP_OK) fprintf(stderr, "dw_bn_passes: pass %d: %s\n", pass, mp_last_error());
    free(ms);
    return r;
}

/* n values of dt on the device: normal, times scale, plus shift. */
static bool fill(void *d, mp_dtype dt, size_t n, mp_rng *r, double scale, double shift) {
    float *h = malloc(n * sizeof *h);
    void *hd = malloc(n * mp_dtype_size(dt));
    bool ok = h && hd;
    for (size_t i = 0; ok && i < n; i++) h[i] = (float)(shift + scale * mp_rng_normal(r));
    if (ok) mp_store_f32(hd, dt, h, (int64_t)n);
    ok = ok && cudaMemcpy(d, hd, n * mp_dtype_size(dt), cudaMemcpyHostToDevice) == cudaSuccess;
    free(h), free(hd);
    return ok;
}

static void usage(FILE *f) {
    fprintf(f, "usage: dw_bn_passes [--batch N] [--dtype bf16|f16|f32] [--reps N]\n"
               "  GPU ms of mobilenetv2's depthwise passes with the batch norm before them fused in and apart.\n");
}

int main(int argc, char **argv) {
    int batch = 512, reps = 20;
    mp_dtype dt = MP_DTYPE_BF16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        const bool known = !strcmp(a, "--batch") || !strcmp(a, "--reps") || !strcmp(a, "--dtype");
        if (!known) return fprintf(stderr, "dw_bn_passes: unknown option %s\n", a), usage(stderr), 2;
        if (!v) return fprintf(stderr, "dw_bn_passes: %s needs a value\n", a), usage(stderr), 2;
        if (!strcmp(a, "--batch")) {
            if ((batch = atoi(v)) < 1) return fprintf(stderr, "dw_bn_passes: --batch %s: a positive count\n", v), 2;
        } else if (!strcmp(a, "--reps")) {
            if ((reps = atoi(v)) < 1) return fprintf(stderr, "dw_bn_passes: --reps %s: a positive count\n", v), 2;
        } else if (!strcmp(a, "--dtype")) {
            dt = !strcmp(v, "bf16") ? MP_DTYPE_BF16 : !strcmp(v, "f16") ? MP_DTYPE_F16
                                                     : !strcmp(v, "f32") ? MP_DTYPE_F32 : MP_DTYPE_I32;
            if (dt == MP_DTYPE_I32) return fprintf(stderr, "dw_bn_passes: --dtype %s: bf16, f16 or f32\n", v), 2;
        }
        i++;
    }
    bench b = {.dt = dt};
    if (mp_cuda_ctx_create(0, &b.ctx) != MP_OK) {
        fprintf(stderr, "dw_bn_passes: %s\n", mp_last_error());
        return 1;
    }
    cudaEvent_t ev[2];
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
        fprintf(stderr, "dw_bn_passes: cudaEventCreate failed\n");
        return 1;
    }
    printf("dw_bn_passes on %s (%d SMs), mobilenetv2 %s batch %d, median of %d launches, ms\n\n", b.ctx->name,
           b.ctx->sm_count, mp_dtype_name(dt), batch, reps);
    printf("| layer | C, size, stride | count | forward | forward fused | apply + ReLU | backward-filter | "
           "backward-filter fused | fused - apart, x count |\n|---|---|---|---|---|---|---|---|---|\n");
    double sum[PASSES] = {0}, gain = 0;
    int rc = 0;
    mp_rng r;
    mp_rng_seed(&r, 17);
    for (size_t l = 0; l < sizeof LAYERS / sizeof LAYERS[0] && !rc; l++) {
        const dw_layer *L = &LAYERS[l];
        mp_conv_geom *g = &b.g;
        memset(g, 0, sizeof *g);
        g->n = batch, g->groups = g->cx = g->cy = L->c, g->hx = g->wx = L->hw;
        g->k = 3, g->stride = L->stride, g->pad = 1, g->dil = 1;
        g->hy = g->wy = (L->hw + 2 - 3) / L->stride + 1;
        const size_t es = mp_dtype_size(dt), xn = (size_t)batch * L->hw * L->hw * L->c,
                     yn = (size_t)batch * g->hy * g->wy * L->c;
        b.ws_bytes = mp_dw_workspace(b.ctx, g, dt, MP_CONV_BWD_FILTER);
        float coef[3 * 1024];
        for (int c = 0; c < L->c; c++)
            coef[c] = (float)(0.1 * mp_rng_normal(&r)), coef[L->c + c] = 1.f, coef[2 * L->c + c] = 0.1f;
        bool ok = cudaMalloc(&b.x, xn * es) == cudaSuccess && cudaMalloc(&b.y, xn * es) == cudaSuccess &&
                  cudaMalloc(&b.out, yn * es) == cudaSuccess && cudaMalloc(&b.w, 9 * (size_t)L->c * es) == cudaSuccess &&
                  cudaMalloc(&b.dw, 9 * (size_t)L->c * es) == cudaSuccess &&
                  cudaMalloc(&b.ws, b.ws_bytes) == cudaSuccess &&
                  cudaMalloc((void **)&b.coef, 3 * (size_t)L->c * sizeof(float)) == cudaSuccess &&
                  cudaMemcpy(b.coef, coef, 3 * (size_t)L->c * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
                  fill(b.x, dt, xn, &r, 1.0, 0.0) && fill(b.w, dt, 9 * (size_t)L->c, &r, 0.3, 0.0) &&
                  fill(b.out, dt, yn, &r, 1.0, 0.0);
        double t[PASSES];
        /* the apply first: the unfused passes read its output */
        const int order[PASSES] = {APPLY, FWD, FWD_BN, WGRAD, WGRAD_BN};
        for (int k = 0; ok && k < PASSES; k++) ok = (t[order[k]] = time_pass(&b, order[k], reps, ev)) >= 0;
        if (!ok) {
            fprintf(stderr, "dw_bn_passes: %s, batch %d: %s\n", L->layer, batch, mp_last_error());
            rc = 1;
        } else {
            const double d = L->count * (t[FWD_BN] + t[WGRAD_BN] - t[FWD] - t[WGRAD] - t[APPLY]);
            for (int k = 0; k < PASSES; k++) sum[k] += L->count * t[k];
            gain += d;
            printf("| %s | %d, %dx%d, s%d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %+.3f |\n", L->layer, L->c, L->hw,
                   L->hw, L->stride, L->count, t[FWD], t[FWD_BN], t[APPLY], t[WGRAD], t[WGRAD_BN], d);
        }
        cudaFree(b.x), cudaFree(b.y), cudaFree(b.out), cudaFree(b.w), cudaFree(b.dw), cudaFree(b.ws), cudaFree(b.coef);
        b.x = b.y = b.out = b.w = b.dw = b.ws = NULL, b.coef = NULL; /* a failed allocation frees no stale one */
    }
    if (!rc)
        printf("| all 17, x count | | | %.3f | %.3f | %.3f | %.3f | %.3f | %+.3f |\n", sum[FWD], sum[FWD_BN],
               sum[APPLY], sum[WGRAD], sum[WGRAD_BN], gain);
    mp_cuda_ctx_destroy(b.ctx);
    return rc;
}
