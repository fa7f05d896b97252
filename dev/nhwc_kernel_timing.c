/* nhwc_kernel_timing.c — throwaway measurement (not built by CMake): batch
 * norm training forward + backward with the ReLU fused, on a
 * (128, 64, 28, 28) activation (cnn10's first stage), f32 and bf16, the NCHW
 * fast kernels (mp_bn_*_cpu) against the channels-last ones
 * (mp_bn_*_cpu_nhwc), median of reps, with the effective bandwidth of the
 * bytes a kernel must move at least (forward: read x, write y; backward:
 * read x, dy and, NCHW, y for the ReLU mask (NHWC computes the mask from x),
 * write dx). Run with OMP_NUM_THREADS set, on an idle machine;
 * CPUTIME=1 times the process's CPU time instead (with OMP_NUM_THREADS=1: a
 * comparison on a loaded machine); FLUSH=1 writes 512 MB before each timed
 * call, so that its arrays come from memory as in a training step.
 * Build: gcc -O2 -fopenmp -Iinclude -Isrc -IBUILD/include dev/nhwc_kernel_timing.c BUILD/libmixprec.a \
 *        -lgomp -lm plus the libraries libmixprec links (-ldnnl -lcjson -lz ...) -o /tmp/nkt */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bf16_inline.h"
#include "ops/batchnorm2d_cpu.h"
#include "ops/cpu_fast.h"

static double now(void) {
    struct timespec t;
    clock_gettime(getenv("CPUTIME") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static char *g_flush;

/* Evicts the arrays from the caches (FLUSH=1). */
static void flush(void) {
    if (!g_flush) return;
    static unsigned char k;
    memset(g_flush, ++k, 512u << 20);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp);
    return t[n / 2];
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15, N = 128, C = 64, H = 28, W = 28;
    const int64_t HW = (int64_t)H * W, M = N * HW, n = M * C;
    if (getenv("FLUSH") && atoi(getenv("FLUSH")) > 0 && !(g_flush = malloc(512u << 20))) {
        fprintf(stderr, "nhwc_kernel_timing: no memory for FLUSH's 512 MB\n");
        return 1;
    }
    printf("batchnorm2d train fwd + bwd, relu fused, %dx%dx%dx%d, %d threads, %s, median of %d\n", N, C, H, W,
           omp_get_max_threads(), mp_fast_isa_name(mp_fast_isa_current()), reps);
    for (int bf = 0; bf < 2; bf++) {
        const mp_dtype dt = bf ? MP_DTYPE_BF16 : MP_DTYPE_F32;
        const size_t es = bf ? 2 : 4;
        void *x = aligned_alloc(64, n * es), *y = aligned_alloc(64, n * es), *dy = aligned_alloc(64, n * es),
             *dx = aligned_alloc(64, n * es), *ws = aligned_alloc(64, mp_bn_nhwc_workspace_bytes(C) + 64);
        for (int64_t i = 0; i < n; i++) {
            const float v = (float)((i * 7919) % 1000) / 500.0f - 1.0f, g = (float)((i * 104729) % 997) / 498.0f - 1;
            if (bf)
                ((uint16_t *)x)[i] = mp_f32_to_bf16_bits(v), ((uint16_t *)dy)[i] = mp_f32_to_bf16_bits(g);
            else
                ((float *)x)[i] = v, ((float *)dy)[i] = g;
        }
        memset(y, 0, n * es), memset(dx, 0, n * es);
        float gamma[64], beta[64], rm[64], rv[64], dg[64], db[64], sc[64], sh[64], mu[64];
        double mean[64], invstd[64];
        for (int c = 0; c < C; c++) gamma[c] = 1, beta[c] = 0.1f, rm[c] = 0, rv[c] = 1;
        for (int layout = 0; layout < 2; layout++) {
            double tf[64], tb[64];
            for (int r = 0; r < reps + 2; r++) { /* two warm-up runs */
                flush();
                double t0 = now();
                if (layout == 0)
                    mp_bn_fwd_train_cpu(dt, x, y, gamma, beta, rm, rv, mean, invstd, N, C, HW, 1e-5, 0.1, true);
                else
                    mp_bn_fwd_train_cpu_nhwc(dt, x, NULL, y, gamma, beta, rm, rv, mean, invstd, sc, sh, mu, M, C, 1e-5,
                                             0.1, true, true, ws);
                double t1 = now();
                flush();
                const double tb0 = now();
                if (layout == 0)
                    mp_bn_bwd_cpu(dt, x, y, dy, dx, gamma, dg, db, true, mean, invstd, rm, rv, N, C, HW, 1e-5);
                else
                    mp_bn_bwd_cpu_nhwc(dt, x, NULL, dy, NULL, dx, NULL, gamma, beta, true, sc, sh, dg, db, true, mean,
                                       invstd, rm, rv, M, C, 1e-5, ws);
                double t2 = now();
                if (r >= 2) tf[r - 2] = 1e3 * (t1 - t0), tb[r - 2] = 1e3 * (t2 - tb0);
            }
            const double f = median(tf, reps), b = median(tb, reps), mb = (double)n * es / 1e6;
            printf("  %-4s %s: fwd %7.2f ms (%5.1f GB/s)  bwd %7.2f ms (%5.1f GB/s)  total %7.2f ms\n",
                   bf ? "bf16" : "f32", layout ? "NHWC" : "NCHW", f, 2 * mb / f, b, (layout ? 3 : 4) * mb / b, f + b);
        }
        free(x), free(y), free(dy), free(dx), free(ws);
    }
    return 0;
}
