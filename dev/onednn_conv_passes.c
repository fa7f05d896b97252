/* onednn_conv_passes.c — the oneDNN time of cnn10's convolutions per
 * training step (forward, backward data, backward weights of its 9 layers,
 * plus the plain <-> primitive-layout reorders conv_onednn.c runs around
 * them), f32 and bf16, built against oneDNN 2.x or 3.x (the two C APIs
 * differ only in how descriptors are made). To decide whether oneDNN 3.x
 * would speed up the training step before porting the library to it.
 *
 *   cc -O2 dev/onednn_conv_passes.c -I<dnnl include> -L<dnnl lib> -ldnnl -o /tmp/ocp
 *   /tmp/ocp [batch 128] [C 1] [H 28] [reps 5]
 * Prints ms per step per pass and dtype (median of reps), and the
 * implementations oneDNN picked. */
#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnnl_check.h"

#if DNNL_VERSION_MAJOR >= 3
typedef const_dnnl_memory_desc_t md_t;
static md_t md_tag(int nd, const dnnl_dims_t d, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_memory_desc_t m;
    CK(dnnl_memory_desc_create_with_tag(&m, nd, d, dt, tag));
    return m;
}
#else
typedef const dnnl_memory_desc_t *md_t;
static md_t md_tag(int nd, const dnnl_dims_t d, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_memory_desc_t *m = malloc(sizeof *m);
    CK(dnnl_memory_desc_init_by_tag(m, nd, d, dt, tag));
    return m;
}
#endif

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* CPUTIME=1: the process's CPU time instead of wall time, for comparisons
 * on a shared machine (run with OMP_NUM_THREADS=1 then: no thread waits). */
static double now(void) {
    struct timespec t;
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("CPUTIME") != NULL;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { FWD, BWD_D, BWD_W };

/* Scratchpads owned by the caller, as conv_onednn.c does (oneDNN's own
 * would be allocated per call). */
static dnnl_primitive_attr_t user_scratchpad(void) {
    dnnl_primitive_attr_t a;
    CK(dnnl_primitive_attr_create(&a));
    CK(dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user));
    return a;
}

static dnnl_primitive_desc_t make_pd(int pass, md_t src, md_t wei, md_t dst, const dnnl_dims_t st, const dnnl_dims_t dil,
                                     const dnnl_dims_t pad, const_dnnl_primitive_desc_t hint) {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_attr_t attr = user_scratchpad();
#if DNNL_VERSION_MAJOR >= 3
    if (pass == FWD)
        CK(dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_training, dnnl_convolution_direct,
                                                          src, wei, NULL, dst, st, dil, pad, pad, attr));
    else if (pass == BWD_D)
        CK(dnnl_convolution_backward_data_primitive_desc_create(&pd, eng, dnnl_convolution_direct, src, wei, dst, st,
                                                                dil, pad, pad, hint, attr));
    else
        CK(dnnl_convolution_backward_weights_primitive_desc_create(&pd, eng, dnnl_convolution_direct, src, wei, NULL,
                                                                   dst, st, dil, pad, pad, hint, attr));
#else
    dnnl_convolution_desc_t cd;
    if (pass == FWD)
        CK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, src, wei,
                                                      NULL, dst, st, dil, pad, pad));
    else if (pass == BWD_D)
        CK(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, src, wei, dst, st, dil, pad,
                                                            pad));
    else
        CK(dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, src, wei, NULL, dst, st,
                                                               dil, pad, pad));
    CK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, hint));
#endif
    dnnl_primitive_attr_destroy(attr);
    return pd;
}

/* Small values of the memory's dtype (no zeros, no denormals). */
static void fill(void *h, md_t md) {
    size_t bytes = dnnl_memory_desc_get_size(md);
    dnnl_data_type_t dt;
#if DNNL_VERSION_MAJOR >= 3
    CK(dnnl_memory_desc_query(md, dnnl_query_data_type, &dt));
#else
    dt = md->data_type;
#endif
    for (size_t i = 0; i < bytes / (dt == dnnl_bf16 ? 2 : 4); i++) {
        float v = 0.01f * (float)((int)(i % 17) - 8) + 0.001f;
        if (dt == dnnl_bf16) {
            uint32_t u;
            memcpy(&u, &v, 4);
            ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)h)[i] = v;
        }
    }
}

/* A memory of pd's argument (q, idx) and, when its layout differs from plain
 * (tag), a reorder from (input) or to (output) a plain buffer. */
typedef struct {
    dnnl_memory_t prim, plain;
    dnnl_primitive_t reo;
    bool output;
} arg_t;

static arg_t make_arg(const_dnnl_primitive_desc_t pd, dnnl_query_t q, md_t plain_md, bool output) {
    arg_t a = {0};
    a.output = output;
    md_t pm = dnnl_primitive_desc_query_md(pd, q, 0);
    CK(dnnl_memory_create(&a.prim, pm, eng, DNNL_MEMORY_ALLOCATE));
    void *h;
    dnnl_memory_get_data_handle(a.prim, &h);
    fill(h, pm);
    if (dnnl_memory_desc_equal(pm, plain_md)) return a;
    CK(dnnl_memory_create(&a.plain, plain_md, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_memory_get_data_handle(a.plain, &h);
    fill(h, plain_md);
    dnnl_primitive_desc_t rpd;
    CK(output ? dnnl_reorder_primitive_desc_create(&rpd, pm, eng, plain_md, eng, NULL)
              : dnnl_reorder_primitive_desc_create(&rpd, plain_md, eng, pm, eng, NULL));
    /* reorders keep oneDNN's own (small) scratchpads */
    CK(dnnl_primitive_create(&a.reo, rpd));
    dnnl_primitive_desc_destroy(rpd);
    return a;
}

static void reorder(const arg_t *a) {
    if (!a->reo) return;
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->output ? a->prim : a->plain}, {DNNL_ARG_TO, a->output ? a->plain : a->prim}};
    CK(dnnl_primitive_execute(a->reo, strm, 2, r));
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ms of one execution of pass `pass` with its reorders (median of reps);
 * *conv_ms the primitive alone. */
static double time_pass(int pass, dnnl_primitive_desc_t pd, md_t src, md_t wei, md_t dwei, md_t dst, int reps,
                        double *conv_ms, char *impl, size_t n) {
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, n, "%s", name ? name : "?");
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    arg_t a[3];
    int keys[3];
    if (pass == FWD) {
        a[0] = make_arg(pd, dnnl_query_src_md, src, false), keys[0] = DNNL_ARG_SRC;
        a[1] = make_arg(pd, dnnl_query_weights_md, wei, false), keys[1] = DNNL_ARG_WEIGHTS;
        a[2] = make_arg(pd, dnnl_query_dst_md, dst, true), keys[2] = DNNL_ARG_DST;
    } else if (pass == BWD_D) {
        a[0] = make_arg(pd, dnnl_query_diff_dst_md, dst, false), keys[0] = DNNL_ARG_DIFF_DST;
        a[1] = make_arg(pd, dnnl_query_weights_md, wei, false), keys[1] = DNNL_ARG_WEIGHTS;
        a[2] = make_arg(pd, dnnl_query_diff_src_md, src, true), keys[2] = DNNL_ARG_DIFF_SRC;
    } else {
        a[0] = make_arg(pd, dnnl_query_src_md, src, false), keys[0] = DNNL_ARG_SRC;
        a[1] = make_arg(pd, dnnl_query_diff_dst_md, dst, false), keys[1] = DNNL_ARG_DIFF_DST;
        a[2] = make_arg(pd, dnnl_query_diff_weights_md, dwei, true), keys[2] = DNNL_ARG_DIFF_WEIGHTS;
    }
    md_t smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_memory_t scr = NULL;
    if (smd && dnnl_memory_desc_get_size(smd)) CK(dnnl_memory_create(&scr, smd, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_exec_arg_t args[4];
    for (int i = 0; i < 3; i++) args[i] = (dnnl_exec_arg_t){keys[i], a[i].prim};
    args[3] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scr};
    double *t = malloc(sizeof(double) * (size_t)reps), *tc = malloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        for (int i = 0; i < 3; i++)
            if (!a[i].output) reorder(&a[i]);
        CK(dnnl_stream_wait(strm));
        double t1 = now();
        CK(dnnl_primitive_execute(p, strm, scr ? 4 : 3, args));
        CK(dnnl_stream_wait(strm));
        double t2 = now();
        for (int i = 0; i < 3; i++)
            if (a[i].output) reorder(&a[i]);
        CK(dnnl_stream_wait(strm));
        if (r >= 0) t[r] = now() - t0, tc[r] = t2 - t1;
    }
    qsort(t, (size_t)reps, sizeof *t, cmpd);
    qsort(tc, (size_t)reps, sizeof *tc, cmpd);
    double ms = 1e3 * t[reps / 2];
    *conv_ms = 1e3 * tc[reps / 2];
    free(t);
    free(tc);
    for (int i = 0; i < 3; i++) {
        dnnl_memory_destroy(a[i].prim);
        if (a[i].plain) dnnl_memory_destroy(a[i].plain);
        if (a[i].reo) dnnl_primitive_destroy(a[i].reo);
    }
    if (scr) dnnl_memory_destroy(scr);
    dnnl_primitive_destroy(p);
    return ms;
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 128, C0 = argc > 2 ? atoi(argv[2]) : 1, H0 = argc > 3 ? atoi(argv[3]) : 28;
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d, cnn10 convolutions, batch %d, input %dx%dx%d, median of %d\n", v->major, v->minor,
           v->patch, N, C0, H0, H0, reps);
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const dnnl_data_type_t dts[2] = {dnnl_f32, dnnl_bf16};
    const char *pass_name[3] = {"forward", "backward data", "backward weights"};
    for (int di = 0; di < 2; di++) {
        double tot[3] = {0}, conv[3] = {0};
        int c = C0, h = H0;
        char impls[3][128] = {{0}};
        for (int layer = 0; layer < 9; layer++) {
            int k = layer < 3 ? 64 : layer < 6 ? 128 : 256;
            if (layer == 3 || layer == 6) h /= 2;
            dnnl_dims_t sd = {N, c, h, h}, wd = {k, c, 3, 3}, dd = {N, k, h, h};
            dnnl_dims_t st = {1, 1}, dil = {0, 0}, pad = {1, 1};
            dnnl_data_type_t dt = dts[di];
            md_t src = md_tag(4, sd, dt, dnnl_nchw), wei = md_tag(4, wd, dt, dnnl_oihw), dst = md_tag(4, dd, dt, dnnl_nchw);
            md_t dwei = md_tag(4, wd, dnnl_f32, dnnl_oihw);
            md_t src_a = md_tag(4, sd, dt, dnnl_format_tag_any), wei_a = md_tag(4, wd, dt, dnnl_format_tag_any),
                 dst_a = md_tag(4, dd, dt, dnnl_format_tag_any), dwei_a = md_tag(4, wd, dnnl_f32, dnnl_format_tag_any);
            /* conv_onednn.c: plain layouts for a 1-channel input's forward and backward data */
            bool plain = c == 1;
            dnnl_primitive_desc_t fpd = make_pd(FWD, plain ? src : src_a, plain ? wei : wei_a, plain ? dst : dst_a, st,
                                                dil, pad, NULL);
            dnnl_primitive_desc_t dpd = make_pd(BWD_D, plain ? src : src_a, plain ? wei : wei_a, plain ? dst : dst_a,
                                                st, dil, pad, fpd);
            dnnl_primitive_desc_t wpd = make_pd(BWD_W, src_a, dwei_a, dst_a, st, dil, pad, fpd);
            dnnl_primitive_desc_t pds[3] = {fpd, dpd, wpd};
            for (int pass = 0; pass < 3; pass++) {
                if (layer == 0 && pass == BWD_D) continue; /* the input takes no gradient */
                double cm, ms = time_pass(pass, pds[pass], src, wei, dwei, dst, reps, &cm, impls[pass], 128);
                tot[pass] += ms;
                conv[pass] += cm;
                if (getenv("LAYERS"))
                    printf("  layer %d %s %s: %.2f ms (conv %.2f) %s\n", layer, dt == dnnl_f32 ? "f32" : "bf16",
                           pass_name[pass], ms, cm, impls[pass]);
            }
            for (int pass = 0; pass < 3; pass++) dnnl_primitive_desc_destroy(pds[pass]);
            c = k;
        }
        printf("%s: forward %.1f (conv %.1f) ms, backward data %.1f (%.1f), backward weights %.1f (%.1f); "
               "all %.1f ms per step (convolutions alone %.1f)\n",
               di ? "bf16" : "f32", tot[0], conv[0], tot[1], conv[1], tot[2], conv[2], tot[0] + tot[1] + tot[2],
               conv[0] + conv[1] + conv[2]);
        fflush(stdout);
    }
    return 0;
}
