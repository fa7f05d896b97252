/* conv_bn_stats_chunk_timing.c — whether a batch norm's statistics pass gets
 * cheaper when it reads its convolution's output while that is still in
 * cache: a 3x3 stride-1 pad-1 bf16 convolution (channels-last) run on the
 * whole batch and then a per-channel sum + sum of squares pass over its
 * output (what a CPU plan does), against the convolution run on chunks of
 * images with the pass over each chunk right after it. The same pass (a
 * plain vectorized loop, not the library's kernel) in both. For deciding
 * whether to build a conv -> batch-norm-statistics fusion into CPU plans
 * (bench/NOTES.md v0.44).
 *
 *   cc -O3 -march=native -fopenmp dev/conv_bn_stats_chunk_timing.c -ldnnl -o /tmp/cbs
 *   /tmp/cbs N C OC H chunk [reps 9]
 * Prints the medians (ms) of conv, pass and both, whole batch and chunked. */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnnl_timing.h"

/* s, ss (C floats each, one pair per thread in part) += the sums of rows
 * [0, M) of y (M x C bf16). */
static void stats(const uint16_t *y, int64_t M, int C, float *part) {
#pragma omp parallel
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        float *s = part + 2 * (int64_t)C * t, *ss = s + C;
        for (int64_t r = M * t / T; r < M * (t + 1) / T; r++) {
            const uint16_t *yr = y + r * C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                uint32_t u = (uint32_t)yr[c] << 16;
                float v;
                memcpy(&v, &u, 4);
                s[c] += v;
                ss[c] += v * v;
            }
        }
    }
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp);
    return t[n / 2];
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s N C OC H chunk [reps]\n", argv[0]);
        return 2;
    }
    const int N = atoi(argv[1]), C = atoi(argv[2]), OC = atoi(argv[3]), H = atoi(argv[4]), chunk = atoi(argv[5]);
    const int reps = argc > 6 && atoi(argv[6]) > 0 && atoi(argv[6]) < 64 ? atoi(argv[6]) : 9;
    if (N <= 0 || C <= 0 || OC <= 0 || H <= 0 || chunk <= 0 || N % chunk) {
        fprintf(stderr, "%s: N C OC H chunk must be positive, chunk dividing N\n", argv[0]);
        return 2;
    }
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const int64_t px = (int64_t)H * H, nx = (int64_t)N * px * C, ny = (int64_t)N * px * OC;
    uint16_t *x = malloc(nx * 2), *y = malloc(ny * 2);
    float *part = calloc((size_t)2 * OC * omp_get_max_threads(), sizeof *part);
    for (int64_t i = 0; i < nx; i++) x[i] = bf16(0.01f * (float)((int)(i % 17) - 8));
    dnnl_primitive_desc_t fpd, cpd;
    const dnnl_memory_desc_t *wmd, *cwmd;
    dnnl_primitive_t full = conv3x3_forward(N, C, OC, H, dnnl_bf16, &fpd, &wmd),
                     part_conv = conv3x3_forward(chunk, C, OC, H, dnnl_bf16, &cpd, &cwmd);
    if (!dnnl_memory_desc_equal(wmd, cwmd)) fprintf(stderr, "note: the chunk's weights layout differs\n");
    dnnl_memory_t mw = mem(wmd, NULL);
    void *wh = NULL;
    CK(dnnl_memory_get_data_handle(mw, &wh));
    memset(wh, 0x3c, dnnl_memory_desc_get_size(wmd));
    const dnnl_memory_desc_t *sd = dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0),
                             *dd = dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0),
                             *csd = dnnl_primitive_desc_query_md(cpd, dnnl_query_src_md, 0),
                             *cdd = dnnl_primitive_desc_query_md(cpd, dnnl_query_dst_md, 0);
    dnnl_memory_t ms = mem(sd, x), md = mem(dd, y), mcs = mem(csd, x), mcd = mem(cdd, y);
    double tc[64], ts[64], tw[64], uc[64], us[64], uw[64];
    for (int r = 0; r < reps; r++) {
        /* whole batch: the convolution, then the pass */
        double t0 = now();
        dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
        CK(dnnl_primitive_execute(full, strm, 3, a));
        CK(dnnl_stream_wait(strm));
        double t1 = now();
        stats(y, (int64_t)N * px, OC, part);
        double t2 = now();
        tc[r] = 1e3 * (t1 - t0), ts[r] = 1e3 * (t2 - t1), tw[r] = 1e3 * (t2 - t0);
        /* chunked: each chunk's convolution, then its pass */
        double c_conv = 0, c_stats = 0;
        for (int n0 = 0; n0 < N; n0 += chunk) {
            double c0 = now();
            CK(dnnl_memory_set_data_handle(mcs, x + (int64_t)n0 * px * C));
            CK(dnnl_memory_set_data_handle(mcd, y + (int64_t)n0 * px * OC));
            dnnl_exec_arg_t b[] = {{DNNL_ARG_SRC, mcs}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mcd}};
            CK(dnnl_primitive_execute(part_conv, strm, 3, b));
            CK(dnnl_stream_wait(strm));
            double c1 = now();
            stats(y + (int64_t)n0 * px * OC, (int64_t)chunk * px, OC, part);
            double c2 = now();
            c_conv += c1 - c0, c_stats += c2 - c1;
        }
        uc[r] = 1e3 * c_conv, us[r] = 1e3 * c_stats, uw[r] = 1e3 * (c_conv + c_stats);
    }
    printf("N %d C %d OC %d H %d, chunks of %d, %d threads (%s): whole batch conv %.2f + pass %.2f = %.2f ms; "
           "chunked conv %.2f + pass %.2f = %.2f ms (%.2fx)\n",
           N, C, OC, H, chunk, omp_get_max_threads(), impl(fpd), median(tc, reps), median(ts, reps),
           median(tw, reps), median(uc, reps), median(us, reps), median(uw, reps),
           median(tw, reps) / median(uw, reps));
    return 0;
}
