/* bn_pass_rate.c — how fast batch norm's streaming passes (batchnorm2d_fast.h)
 * move their bytes on this GPU, pass by pass, for the layer shapes of the
 * models the peer benchmark runs, at several grid sizes: the statistics
 * pass (reads x), the apply (+ReLU: reads x, writes y), the backward sums
 * (ReLU mask recomputed: reads x, dy) and dx (reads x, dy, writes dx), and
 * the one-kernel forward and backward (batchnorm2d_persist.h), beside a
 * device-to-device copy of the same tensor measured in the same run (the
 * rate a pass cannot beat). Each figure: TB/s of the pass's own reads and
 * writes, from the median of --reps timed launches (CUDA events). The
 * library's pick uses 2 blocks per SM for the three kernels' passes
 * (batchnorm2d_cuda.cu) and one for the one-kernel ones; this table shows
 * what other grids would give. Built only with the CUDA backend. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/batchnorm2d_persist.h"
#include "core/median.h"

typedef struct {
    const char *layer;
    long long M; /* rows: batch x height x width */
    int C;
} bn_shape;

/* resnet18 and mobilenetv2 at batch 512 on 3x32x32 (the peer's cells), and
 * resnet50's at batch 128 (its cell furthest from torch.compile that is not
 * all convolution: many small layers, where a pass's fixed costs count). */
static const bn_shape SHAPES[] = {
    {"resnet18 layer1", 512LL * 32 * 32, 64},        {"resnet18 layer2", 512LL * 16 * 16, 128},
    {"resnet18 layer3", 512LL * 8 * 8, 256},         {"resnet18 layer4", 512LL * 4 * 4, 512},
    {"mobilenetv2 block1_expand", 512LL * 32 * 32, 96}, {"mobilenetv2 block2_expand", 512LL * 32 * 32, 144},
    {"mobilenetv2 block4_expand", 512LL * 16 * 16, 192}, {"mobilenetv2 block11_expand", 512LL * 8 * 8, 576},
    {"resnet50 b128 layer1 conv1/2", 128LL * 32 * 32, 64}, {"resnet50 b128 layer1 conv3", 128LL * 32 * 32, 256},
    {"resnet50 b128 layer2 conv1/2", 128LL * 16 * 16, 128}, {"resnet50 b128 layer2 conv3", 128LL * 16 * 16, 512},
    {"resnet50 b128 layer3 conv1/2", 128LL * 8 * 8, 256}, {"resnet50 b128 layer3 conv3", 128LL * 8 * 8, 1024},
    {"resnet50 b128 layer4 conv1/2", 128LL * 4 * 4, 512}, {"resnet50 b128 layer4 conv3", 128LL * 4 * 4, 2048},
};

/* What one timed pass launches; returns the launch's error. */
typedef cudaError_t (*pass_fn)(const void *ctx);

typedef struct {
    cudaStream_t st;
    mp_dtype dt;
    int sm_count, C, G, max_blocks;
    long long M, R;
    void *x, *y, *dy, *dx;
    float *part, *coef_f, *coef_b, *save, *rmean, *rvar, *gamma, *beta, *dgamma, *dbeta;
} pass_ctx;

static cudaError_t run_stats(const void *p) {
    const pass_ctx *c = p;
    return mp_bn_fast_stats(c->st, c->dt, c->x, c->M, c->C, c->G, c->R, c->part, c->part + (size_t)c->G * c->C);
}
static cudaError_t run_apply(const void *p) {
    const pass_ctx *c = p;
    return mp_bn_fast_apply(c->st, c->dt, c->x, NULL, c->y, c->M, c->C, c->G, c->R, c->coef_f, true);
}
static mp_bn_fast_mask recomputed(const pass_ctx *c) { return (mp_bn_fast_mask){.fwd_mu = c->coef_f, .fwd_scale = c->coef_f + c->C}; }
static cudaError_t run_sums(const void *p) {
    const pass_ctx *c = p;
    return mp_bn_fast_bwd_reduce(c->st, c->dt, c->x, c->dy, recomputed(c), c->coef_f, c->M, c->C, c->G, c->R, c->part,
                                 c->part + (size_t)c->G * c->C);
}
static cudaError_t run_dx(const void *p) {
    const pass_ctx *c = p;
    return mp_bn_fast_dx(c->st, c->dt, c->x, c->dy, recomputed(c), c->dx, false, NULL, false, c->M, c->C, c->G, c->R,
                         c->coef_b);
}
static cudaError_t run_persist_fwd(const void *p) {
    const pass_ctx *c = p;
    const mp_bn_fwd_out out = {c->gamma, c->beta, MP_DTYPE_F32, MP_DTYPE_F32, c->rmean, c->rvar, 1e-5f, 0.1f,
                               c->save, c->save + c->C, c->coef_f};
    return mp_bn_persist_forward(c->st, c->sm_count, c->dt, c->x, NULL, c->y, c->M, c->C, c->max_blocks, c->part,
                                 c->part + (size_t)c->max_blocks * c->C, out, true);
}
static cudaError_t run_persist_bwd(const void *p) {
    const pass_ctx *c = p;
    const mp_bn_bwd_out out = {true, c->save, c->save + c->C, c->rmean, c->rvar, 1e-5f, c->gamma, MP_DTYPE_F32,
                               c->dgamma, c->dbeta, MP_DTYPE_F32, MP_DTYPE_F32, c->coef_b};
    const mp_bn_fast_mask mask = {.fwd_mu = c->save, .fwd_scale = c->save + 2 * c->C};
    return mp_bn_persist_backward(c->st, c->sm_count, c->dt, c->x, c->dy, mask, c->M, c->C, c->max_blocks, c->part,
                                  c->part + (size_t)c->max_blocks * c->C, out, c->dx, false, NULL, false);
}
static cudaError_t run_copy(const void *p) {
    const pass_ctx *c = p;
    return cudaMemcpyAsync(c->y, c->x, (size_t)c->M * c->C * mp_dtype_size(c->dt), cudaMemcpyDeviceToDevice, c->st);
}

/* TB/s of `bytes` moved per launch of f: median of reps timed launches
 * after two untimed; 0 where a launch fails (its error is printed, naming
 * the pass `what`). */
static double rate(const char *what, pass_fn f, const pass_ctx *c, double bytes, int reps, cudaEvent_t *ev) {
    float *ms = malloc((size_t)reps * sizeof *ms);
    cudaError_t e = ms ? cudaSuccess : cudaErrorMemoryAllocation;
    for (int i = 0; e == cudaSuccess && i < 2; i++) e = f(c);
    for (int i = 0; e == cudaSuccess && i < reps; i++) {
        cudaEventRecord(ev[0], c->st);
        e = f(c);
        cudaEventRecord(ev[1], c->st);
        if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
        if (e == cudaSuccess) cudaEventElapsedTime(&ms[i], ev[0], ev[1]);
    }
    double r = 0;
    if (e == cudaSuccess) {
        r = bytes / (mp_median_float(ms, reps) * 1e-3) / 1e12;
    } else {
        fprintf(stderr, "bn_pass_rate: %s, %lld x %d: %s\n", what, c->M, c->C, cudaGetErrorString(e));
        (void)cudaGetLastError();
    }
    free(ms);
    return r;
}

static void usage(FILE *f) {
    fprintf(f, "usage: bn_pass_rate [--dtype bf16|f16|f32] [--reps N] [--device N]\n"
               "  TB/s of batch norm's streaming passes per layer shape and grid (blocks per SM), beside a copy.\n");
}

int main(int argc, char **argv) {
    mp_dtype dt = MP_DTYPE_BF16;
    int reps = 20, device = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        if (!v) return fprintf(stderr, "bn_pass_rate: %s needs a value\n", a), usage(stderr), 2;
        if (!strcmp(a, "--dtype")) {
            dt = !strcmp(v, "bf16") ? MP_DTYPE_BF16 : !strcmp(v, "f16") ? MP_DTYPE_F16
                                                     : !strcmp(v, "f32") ? MP_DTYPE_F32 : MP_DTYPE_I32;
            if (dt == MP_DTYPE_I32) return fprintf(stderr, "bn_pass_rate: --dtype %s: bf16, f16 or f32\n", v), 2;
        } else if (!strcmp(a, "--reps")) {
            reps = atoi(v);
            if (reps < 1) return fprintf(stderr, "bn_pass_rate: --reps %s: a positive count\n", v), 2;
        } else if (!strcmp(a, "--device")) {
            device = atoi(v);
        } else {
            return fprintf(stderr, "bn_pass_rate: unknown option %s\n", a), usage(stderr), 2;
        }
        i++;
    }
    struct cudaDeviceProp prop;
    if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        fprintf(stderr, "bn_pass_rate: --device %d: no usable CUDA device\n", device);
        return 1;
    }
    long long most = 0;
    int widest = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        if (SHAPES[s].M * SHAPES[s].C > most) most = SHAPES[s].M * SHAPES[s].C;
        if (SHAPES[s].C > widest) widest = SHAPES[s].C;
    }
    const int per_sm[] = {1, 2, 4, 8};
    const int max_g = 8 * prop.multiProcessorCount;
    pass_ctx c = {.dt = dt, .sm_count = prop.multiProcessorCount};
    const size_t es = mp_dtype_size(dt), bytes = (size_t)most * es;
    bool ok = cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking) == cudaSuccess &&
              cudaMalloc(&c.x, bytes) == cudaSuccess && cudaMalloc(&c.y, bytes) == cudaSuccess &&
              cudaMalloc(&c.dy, bytes) == cudaSuccess && cudaMalloc(&c.dx, bytes) == cudaSuccess &&
              cudaMalloc((void **)&c.part, 2 * (size_t)max_g * widest * 4) == cudaSuccess;
    float **chan[] = {&c.coef_f, &c.coef_b, &c.save, &c.rmean, &c.rvar, &c.gamma, &c.beta, &c.dgamma, &c.dbeta};
    for (size_t i = 0; ok && i < sizeof chan / sizeof chan[0]; i++)
        ok = cudaMalloc((void **)chan[i], 4 * (size_t)widest * 4) == cudaSuccess &&
             cudaMemset(*chan[i], 0, 4 * (size_t)widest * 4) == cudaSuccess;
    /* inputs: the bytes 0x3C / 0x3B, finite and normal in every dtype (about 0.01 in bf16 and f32, 1 in f16) */
    ok = ok && cudaMemset(c.x, 0x3C, bytes) == cudaSuccess && cudaMemset(c.dy, 0x3B, bytes) == cudaSuccess;
    cudaEvent_t ev[2];
    ok = ok && cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess;
    if (!ok) {
        fprintf(stderr, "bn_pass_rate: device buffers for %lld elements: %s\n", most,
                cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    const bool one_kernel = mp_bn_persist_supported();
    printf("bn_pass_rate on %s (%d SMs), %s, median of %d launches, TB/s of each pass's own reads + writes; %s\n\n",
           prop.name, prop.multiProcessorCount, mp_dtype_name(dt), reps,
           mp_env_get()->no_bn_pipeline ? "each group of rows' loads waits for the previous group's use "
                                          "(MIXPREC_BN_PIPELINE=0)"
                                        : "the next group of rows' loads in flight while a group is used");
    printf("| layer | rows x C | MB | copy | blocks/SM | stats | apply+ReLU | sums | dx | one-kernel fwd | one-kernel bwd |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const bn_shape *sh = &SHAPES[s];
        c.M = sh->M, c.C = sh->C;
        if (!mp_bn_fast_rows_per_pass(dt, sh->C)) continue;
        const double t = (double)sh->M * sh->C * es;
        const double copy = rate("copy", run_copy, &c, 2 * t, reps, ev);
        c.max_blocks = max_g;
        const double pf = one_kernel ? rate("one-kernel forward", run_persist_fwd, &c, 3 * t, reps, ev) : 0;
        const double pb = one_kernel ? rate("one-kernel backward", run_persist_bwd, &c, 5 * t, reps, ev) : 0;
        for (size_t k = 0; k < sizeof per_sm / sizeof per_sm[0]; k++) {
            mp_bn_row_chunks(sh->M, 1, (long long)per_sm[k] * prop.multiProcessorCount, &c.G, &c.R);
            const double st = rate("statistics", run_stats, &c, t, reps, ev),
                         ap = rate("apply", run_apply, &c, 2 * t, reps, ev),
                         su = rate("backward sums", run_sums, &c, 2 * t, reps, ev),
                         dx = rate("dx", run_dx, &c, 3 * t, reps, ev);
            if (k == 0)
                printf("| %s | %lld x %d | %.1f | %.2f | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", sh->layer,
                       sh->M, sh->C, t / 1e6, copy, per_sm[k], st, ap, su, dx, pf, pb);
            else
                printf("| | | | | %d | %.2f | %.2f | %.2f | %.2f | | |\n", per_sm[k], st, ap, su, dx);
        }
    }
    printf("\n(one-kernel passes: as many blocks as the device holds at once, at most one per SM; forward moves 3 x "
           "the tensor (x twice, y), backward 5 x (x, dy twice, dx))\n");
    return 0;
}
