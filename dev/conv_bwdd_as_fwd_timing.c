/* conv_bwdd_as_fwd_timing.c — a 3x3 stride-1 pad-1 convolution's data
 * gradient on the CPU two ways, bf16 activations, channels-last: oneDNN
 * 2.x's backward-data primitive (what conv_onednn.c runs), and the forward
 * primitive of the transposed convolution (dX = conv(dY, W') with
 * W'[c][o][kh][kw] = W[o][c][2-kh][2-kw], the same padding), each with the
 * weights' reorder from OIHW bf16 that a training step pays (the second
 * also the flip). To decide whether the second is worth building into the
 * library for the AMX kernels' slow backward-data on small images
 * (bench/NOTES.md v0.44).
 *
 *   cc -O2 -fopenmp dev/conv_bwdd_as_fwd_timing.c -ldnnl -o /tmp/bwdd
 *   /tmp/bwdd N C OC H [reps 7, at most 63] [f32]
 * (f32: f32 activations and weights instead of bf16)
 * Prints both medians (ms), the implementations, and the largest difference
 * between the two results relative to the largest value. */
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnnl_timing.h"

static dnnl_data_type_t dt = dnnl_bf16;
static size_t es = 2;

static float f32(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Element i of an array of dt. */
static void put(char *a, int64_t i, float v) {
    if (es == 4) memcpy(a + 4 * i, &v, 4);
    else {
        const uint16_t b = bf16(v);
        memcpy(a + 2 * i, &b, 2);
    }
}

static float get(const char *a, int64_t i) {
    float v;
    uint16_t b;
    if (es == 4) memcpy(&v, a + 4 * i, 4);
    else memcpy(&b, a + 2 * i, 2), v = f32(b);
    return v;
}

/* A forward primitive (src ic channels -> dst oc channels) on NHWC bf16 with
 * the weights' layout left to oneDNN; its reorder from plain OIHW bf16. */
static void forward(int N, int ic, int oc, int H, dnnl_primitive_desc_t *pd, dnnl_primitive_t *p,
                    dnnl_primitive_t *reo, const dnnl_memory_desc_t **wmd) {
    *p = conv3x3_forward(N, ic, oc, H, dt, pd, wmd);
    dnnl_memory_desc_t wplain;
    const dnnl_dims_t wdims = {oc, ic, 3, 3};
    CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wdims, dt, dnnl_oihw));
    dnnl_primitive_desc_t rpd;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, *wmd, eng, NULL));
    CK(dnnl_primitive_create(reo, rpd));
}

int main(int argc, char **argv) {
    const int N = argc > 1 ? atoi(argv[1]) : 128, C = argc > 2 ? atoi(argv[2]) : 256, OC = argc > 3 ? atoi(argv[3]) : 256,
              H = argc > 4 ? atoi(argv[4]) : 7,
              reps = argc > 5 && atoi(argv[5]) > 0 && atoi(argv[5]) < 64 ? atoi(argv[5]) : 7;
    const int64_t M = (int64_t)N * H * H, nw = (int64_t)OC * C * 9;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    if (argc > 6 && !strcmp(argv[6], "f32")) dt = dnnl_f32, es = 4;
    char *dy = malloc((size_t)M * OC * es), *w = malloc((size_t)nw * es), *wt = malloc((size_t)nw * es);
    char *dx1 = malloc((size_t)M * C * es), *dx2 = malloc((size_t)M * C * es);
    for (int64_t i = 0; i < M * OC; i++) put(dy, i, 0.02f * (float)((int)(i % 13) - 6) + 0.003f);
    for (int64_t i = 0; i < nw; i++) put(w, i, 0.01f * (float)((int)(i % 17) - 8) + 0.001f);

    /* 1: the backward-data primitive with the forward (C -> OC) as its hint */
    dnnl_primitive_desc_t fpd, bpd, tpd;
    dnnl_primitive_t fp, freo, bp, breo, tp, treo;
    const dnnl_memory_desc_t *fwmd, *twmd;
    forward(N, C, OC, H, &fpd, &fp, &freo, &fwmd);
    dnnl_memory_desc_t dxd, dyd, wany, wplain;
    const dnnl_dims_t xdims = {N, C, H, H}, ydims = {N, OC, H, H}, wdims = {OC, C, 3, 3};
    CK(dnnl_memory_desc_init_by_tag(&dxd, 4, xdims, dt, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&dyd, 4, ydims, dt, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&wany, 4, wdims, dt, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&wplain, 4, wdims, dt, dnnl_oihw));
    const dnnl_dims_t st = {1, 1}, dil = {0, 0}, pad = {1, 1};
    dnnl_convolution_desc_t bd;
    CK(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &dxd, &wany, &dyd, st, dil, pad,
                                                        pad));
    CK(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    CK(dnnl_primitive_create(&bp, bpd));
    const dnnl_memory_desc_t *bwmd = dnnl_primitive_desc_query_md(bpd, dnnl_query_weights_md, 0);
    dnnl_primitive_desc_t rpd;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &wplain, eng, bwmd, eng, NULL));
    CK(dnnl_primitive_create(&breo, rpd));
    dnnl_memory_t mw = mem(&wplain, w), mbw = mem(bwmd, NULL), mdy = mem(&dyd, dy), mdx1 = mem(&dxd, dx1);
    dnnl_exec_arg_t brargs[] = {{DNNL_ARG_FROM, mw}, {DNNL_ARG_TO, mbw}};
    dnnl_exec_arg_t bargs[] = {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mbw}, {DNNL_ARG_DIFF_SRC, mdx1}};

    /* 2: the transposed convolution's forward (OC -> C) */
    forward(N, OC, C, H, &tpd, &tp, &treo, &twmd);
    dnnl_memory_desc_t wtplain;
    const dnnl_dims_t wtdims = {C, OC, 3, 3};
    CK(dnnl_memory_desc_init_by_tag(&wtplain, 4, wtdims, dt, dnnl_oihw));
    dnnl_memory_t mwt = mem(&wtplain, wt), mtw = mem(twmd, NULL), mdx2 = mem(&dxd, dx2);
    dnnl_exec_arg_t trargs[] = {{DNNL_ARG_FROM, mwt}, {DNNL_ARG_TO, mtw}};
    dnnl_exec_arg_t targs[] = {{DNNL_ARG_SRC, mdy}, {DNNL_ARG_WEIGHTS, mtw}, {DNNL_ARG_DST, mdx2}};

    double t1[64], t2[64];
    for (int r = 0; r < reps + 1 && r < 64; r++) {
        double t0 = now();
        CK(dnnl_primitive_execute(breo, strm, 2, brargs));
        CK(dnnl_primitive_execute(bp, strm, 3, bargs));
        CK(dnnl_stream_wait(strm));
        t1[r] = 1e3 * (now() - t0);
        t0 = now();
#pragma omp parallel for schedule(static)
        for (int c = 0; c < C; c++)
            for (int o = 0; o < OC; o++)
                for (int k = 0; k < 9; k++)
                    memcpy(wt + (((int64_t)c * OC + o) * 9 + k) * es, w + (((int64_t)o * C + c) * 9 + 8 - k) * es, es);
        CK(dnnl_primitive_execute(treo, strm, 2, trargs));
        CK(dnnl_primitive_execute(tp, strm, 3, targs));
        CK(dnnl_stream_wait(strm));
        t2[r] = 1e3 * (now() - t0);
    }
    double dmax = 0, vmax = 0;
    for (int64_t i = 0; i < M * C; i++) {
        dmax = fmax(dmax, fabs((double)get(dx1, i) - (double)get(dx2, i)));
        vmax = fmax(vmax, fabs((double)get(dx1, i)));
    }
    qsort(t1 + 1, reps, sizeof *t1, cmp);
    qsort(t2 + 1, reps, sizeof *t2, cmp);
    const double a = t1[1 + reps / 2], b = t2[1 + reps / 2], gflop = 2.0 * (double)M * OC * C * 9 / 1e9;
    printf("N %d C %d OC %d H %d %s, %d threads: backward-data %.2f ms (%s), transposed forward %.2f ms (%s) -> %.2fx; "
           "%.0f / %.0f GFLOP/s; max diff %.2g of %.3g\n",
           N, C, OC, H, es == 4 ? "f32" : "bf16", omp_get_max_threads(), a, impl(bpd), b, impl(tpd), a / b, gflop / a * 1e3, gflop / b * 1e3,
           dmax, vmax);
    return 0;
}
