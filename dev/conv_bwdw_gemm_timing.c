/* conv_bwdw_gemm_timing.c — a 3x3 stride-1 pad-1 convolution's weight
 * gradient on the CPU two ways, bf16 activations, channels-last: oneDNN
 * 2.x's backward-weights primitive (what conv_onednn.c runs), and im2col
 * in chunks of rows + oneDNN's matmul (dW (OC x 9C, f32) += dY^T x P, the
 * chunks summed by the matmul's sum post-op). To decide whether the second
 * is worth building into the library for the AMX kernels' slow
 * backward-weights on small images (bench/NOTES.md v0.43).
 *
 *   cc -O2 -fopenmp dev/conv_bwdw_gemm_timing.c -ldnnl -o /tmp/bwdw
 *   /tmp/bwdw N C OC H [reps 7, at most 63] [chunk rows 4096]
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

int main(int argc, char **argv) {
    const int N = argc > 1 ? atoi(argv[1]) : 128, C = argc > 2 ? atoi(argv[2]) : 256, OC = argc > 3 ? atoi(argv[3]) : 256,
              H = argc > 4 ? atoi(argv[4]) : 7,
              reps = argc > 5 && atoi(argv[5]) > 0 && atoi(argv[5]) < 64 ? atoi(argv[5]) : 7,
              chunk = argc > 6 ? atoi(argv[6]) : 4096;
    const int W = H, K = 9 * C;
    const int64_t M = (int64_t)N * H * W;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    uint16_t *x = malloc((size_t)M * C * 2), *dy = malloc((size_t)M * OC * 2);
    for (int64_t i = 0; i < M * C; i++) x[i] = bf16(0.01f * (float)((int)(i % 17) - 8) + 0.001f);
    for (int64_t i = 0; i < M * OC; i++) dy[i] = bf16(0.02f * (float)((int)(i % 13) - 6) + 0.003f);

    /* 1: the convolution's backward weights, NHWC activations, OIHW f32 weights as the library keeps them */
    dnnl_memory_desc_t xd, dyd, wd, wany, wfwd;
    const dnnl_dims_t xdims = {N, C, H, W}, ydims = {N, OC, H, W}, wdims = {OC, C, 3, 3};
    CK(dnnl_memory_desc_init_by_tag(&xd, 4, xdims, dnnl_bf16, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&dyd, 4, ydims, dnnl_bf16, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&wd, 4, wdims, dnnl_f32, dnnl_oihw));
    CK(dnnl_memory_desc_init_by_tag(&wany, 4, wdims, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&wfwd, 4, wdims, dnnl_bf16, dnnl_format_tag_any)); /* the forward's hint */
    const dnnl_dims_t st = {1, 1}, dil = {0, 0}, pad = {1, 1};
    dnnl_convolution_desc_t fd, bd;
    CK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &xd, &wfwd, NULL,
                                                  &dyd, st, dil, pad, pad));
    dnnl_primitive_desc_t fpd, bpd;
    CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    CK(dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &xd, &wany, NULL, &dyd, st,
                                                           dil, pad, pad));
    CK(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    const dnnl_memory_desc_t *wbmd = dnnl_primitive_desc_query_md(bpd, dnnl_query_diff_weights_md, 0);
    dnnl_primitive_t bw, reo;
    CK(dnnl_primitive_create(&bw, bpd));
    dnnl_memory_t mx = mem(&xd, x), mdy = mem(&dyd, dy), mwb = mem(wbmd, NULL), mw = mem(&wd, NULL);
    dnnl_primitive_desc_t rpd;
    CK(dnnl_reorder_primitive_desc_create(&rpd, wbmd, eng, &wd, eng, NULL));
    CK(dnnl_primitive_create(&reo, rpd));
    dnnl_exec_arg_t bargs[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mwb}};
    dnnl_exec_arg_t rargs[] = {{DNNL_ARG_FROM, mwb}, {DNNL_ARG_TO, mw}};

    /* 2: im2col chunks + matmul: dst (OC x K) += dY_chunk^T (OC x rows) x P (rows x K) */
    uint16_t *P = malloc((size_t)chunk * K * 2);
    float *dw2 = malloc((size_t)OC * K * 4);
    dnnl_primitive_t mm[2];
    dnnl_primitive_desc_t mpd[2];
    const int64_t tail = M % chunk;
    dnnl_post_ops_t po;
    CK(dnnl_post_ops_create(&po));
    CK(dnnl_post_ops_append_sum(po, 1.0f));
    dnnl_primitive_attr_t attr;
    CK(dnnl_primitive_attr_create(&attr));
    CK(dnnl_primitive_attr_set_post_ops(attr, po));
    for (int k = 0; k < 2; k++) {
        const int64_t rows = k ? tail : chunk;
        if (!rows) {
            mm[k] = NULL;
            continue;
        }
        dnnl_memory_desc_t a, b, d;
        const dnnl_dims_t ad = {OC, rows}, as = {1, OC}, bdm = {rows, K}, dd = {OC, K};
        CK(dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as));
        CK(dnnl_memory_desc_init_by_tag(&b, 2, bdm, dnnl_bf16, dnnl_ab));
        CK(dnnl_memory_desc_init_by_tag(&d, 2, dd, dnnl_f32, dnnl_ab));
        dnnl_matmul_desc_t md;
        CK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &d));
        CK(dnnl_primitive_desc_create(&mpd[k], &md, attr, eng, NULL));
        CK(dnnl_primitive_create(&mm[k], mpd[k]));
    }
    double t1[64], t2[64];
    for (int r = 0; r < reps + 1 && r < 64; r++) {
        double t0 = now();
        dnnl_primitive_execute(bw, strm, 3, bargs);
        dnnl_primitive_execute(reo, strm, 2, rargs);
        dnnl_stream_wait(strm);
        t1[r] = 1e3 * (now() - t0);
        t0 = now();
        memset(dw2, 0, (size_t)OC * K * 4);
        for (int64_t m0 = 0; m0 < M; m0 += chunk) {
            const int64_t rows = M - m0 < chunk ? M - m0 : chunk;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < rows; i++) {
                const int64_t m = m0 + i, n = m / (H * W), oh = m / W % H, ow = m % W;
                uint16_t *pr = P + i * K;
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++) {
                        const int ih = (int)oh + kh - 1, iw = (int)ow + kw - 1;
                        uint16_t *dst = pr + (kh * 3 + kw) * C;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                            memset(dst, 0, (size_t)C * 2);
                        else
                            memcpy(dst, x + ((n * H + ih) * W + iw) * C, (size_t)C * 2);
                    }
            }
            const int k = rows == chunk ? 0 : 1;
            dnnl_memory_t ma, mb, md;
            CK(dnnl_memory_create(&ma, dnnl_primitive_desc_query_md(mpd[k], dnnl_query_src_md, 0), eng,
                                  dy + m0 * OC));
            CK(dnnl_memory_create(&mb, dnnl_primitive_desc_query_md(mpd[k], dnnl_query_weights_md, 0), eng, P));
            CK(dnnl_memory_create(&md, dnnl_primitive_desc_query_md(mpd[k], dnnl_query_dst_md, 0), eng, dw2));
            dnnl_exec_arg_t margs[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, md}};
            CK(dnnl_primitive_execute(mm[k], strm, 3, margs));
            dnnl_stream_wait(strm);
            dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(md);
        }
        t2[r] = 1e3 * (now() - t0);
    }
    /* compare: the conv's OIHW against the GEMM's (oc, kh, kw, c) */
    float *dw1 = NULL;
    CK(dnnl_memory_get_data_handle(mw, (void **)&dw1));
    double dmax = 0, vmax = 0;
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++)
            for (int kk = 0; kk < 9; kk++) {
                const double a = dw1[((int64_t)o * C + c) * 9 + kk], b = dw2[(int64_t)o * K + kk * C + c];
                dmax = fmax(dmax, fabs(a - b));
                vmax = fmax(vmax, fabs(a));
            }
    qsort(t1 + 1, reps, sizeof *t1, cmp);
    qsort(t2 + 1, reps, sizeof *t2, cmp);
    const double gflop = 2.0 * (double)M * OC * K / 1e9;
    printf("N %d C %d OC %d H %d, %d threads, chunk %d: conv bwd-weights %.2f ms (%s, + reorder), im2col + matmul "
           "%.2f ms (%s) -> %.2fx; %.1f / %.1f GFLOP/s; max diff %.2g of %.3g\n",
           N, C, OC, H, omp_get_max_threads(), chunk, t1[1 + reps / 2], impl(bpd), t2[1 + reps / 2], impl(mpd[0]),
           t1[1 + reps / 2] / t2[1 + reps / 2], gflop / t1[1 + reps / 2] * 1e3, gflop / t2[1 + reps / 2] * 1e3, dmax,
           vmax);
    return 0;
}
