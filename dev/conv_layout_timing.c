/* conv_layout_timing.c — throwaway measurement (not built by CMake): for the
 * cnn10 training convolutions (batch 128), the large convolution of
 * bench/cpu_train_step and a few few-channel convolutions/deconvolutions,
 * time oneDNN f32 forward, backward-data and backward-weights with
 *   (a) plain nchw/oihw descriptors on the user tensors, and
 *   (b) format_tag_any, plus the reorders from/to the plain user tensors
 *       that a library keeping plain tensors must pay.
 * Every primitive and reorder is timed on its own (best of `reps`, or the
 * median with MEDIAN=1 in the environment; all of one shape interleaved
 * round-robin so background load hits them alike).
 * Build: gcc -O2 -fopenmp dev/conv_layout_timing.c -o /tmp/clt -ldnnl
 * Run:   /tmp/clt [reps [shape index]]
 * The numbers decided the layouts of src/ops/conv_onednn.c.                */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnnl_check.h"

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct { int n, ci, co, h, w, k, s, p; const char *name; int tr; } shape;

/* output size: convolution or (tr) deconvolution */
static int out_size(const shape *c, int in) {
    return c->tr ? (in - 1) * c->s - 2 * c->p + c->k : (in + 2 * c->p - c->k) / c->s + 1;
}

#define MAXM 64
static dnnl_memory_t mems[MAXM];
static int nmems;
/* A memory object over freshly allocated, filled storage. */
static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
    size_t sz = dnnl_memory_desc_get_size(md);
    float *p = aligned_alloc(64, (sz + 63) & ~(size_t)63);
    for (size_t i = 0; i < sz / 4; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, eng, p));
    mems[nmems++] = m;
    return m;
}

/* One timed unit: a primitive with its arguments. */
typedef struct {
    dnnl_primitive_t p;
    int na;
    dnnl_exec_arg_t a[6];
    double best, worst;
    double t[64]; /* every timed run, for the median */
    int nt;
} task;
#define MAXT 16
static task tasks[MAXT];
static int ntasks;

static int add_task(dnnl_primitive_desc_t pd, int na, const dnnl_exec_arg_t *a) {
    task *t = &tasks[ntasks];
    CK(dnnl_primitive_create(&t->p, pd));
    t->na = na;
    memcpy(t->a, a, sizeof(dnnl_exec_arg_t) * (size_t)na);
    t->best = 1e30;
    t->worst = 0;
    t->nt = 0;
    return ntasks++;
}

/* A reorder task plain <-> blocked; -1 when the layouts agree (free). */
static int reorder_task(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
    if (dnnl_memory_desc_equal(from, to)) return -1;
    dnnl_primitive_desc_t pd;
    CK(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL));
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, mem(from)}, {DNNL_ARG_TO, mem(to)}};
    int t = add_task(pd, 2, a);
    dnnl_primitive_desc_destroy(pd);
    return t;
}
static int use_median; /* report medians instead of minima */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double tt(int t) {
    if (t < 0) return 0;
    task *k = &tasks[t];
    if (!use_median) return k->best;
    qsort(k->t, (size_t)k->nt, sizeof(double), cmp_d);
    return k->t[k->nt / 2];
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
    const char *s = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
    return s ? s : "?";
}

typedef struct { int fwd, bwd_d, bwd_w; char impl[3][32]; } conv_tasks;

/* Creates the three passes; tag_act / tag_w are the requested layouts. */
static conv_tasks make_conv(const shape *c, dnnl_format_tag_t tag_act, dnnl_format_tag_t tag_w,
                            const dnnl_memory_desc_t **md_out /* [9] primitive layouts */) {
    int ho = out_size(c, c->h), wo = out_size(c, c->w);
    dnnl_dims_t sd = {c->n, c->ci, c->h, c->w}, wd = {c->co, c->ci, c->k, c->k},
                dd = {c->n, c->co, ho, wo}, bd = {c->co};
    dnnl_dims_t st = {c->s, c->s}, pl = {c->p, c->p};
    dnnl_memory_desc_t s, w, d, b;
    CK(dnnl_memory_desc_init_by_tag(&s, 4, sd, dnnl_f32, tag_act));
    CK(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, c->tr && tag_w == dnnl_oihw ? dnnl_iohw : tag_w));
    CK(dnnl_memory_desc_init_by_tag(&d, 4, dd, dnnl_f32, tag_act));
    CK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_x));
    dnnl_primitive_attr_t attr;
    CK(dnnl_primitive_attr_create(&attr));
    CK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_convolution_desc_t fd, bdd, bwd;
    if (c->tr) {
        CK(dnnl_deconvolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_deconvolution_direct, &s,
                                                &w, &b, &d, st, pl, pl));
        CK(dnnl_deconvolution_backward_data_desc_init(&bdd, dnnl_deconvolution_direct, &s, &w, &d, st, pl, pl));
        CK(dnnl_deconvolution_backward_weights_desc_init(&bwd, dnnl_deconvolution_direct, &s, &w, &b, &d, st,
                                                         pl, pl));
    } else {
        CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &s,
                                              &w, &b, &d, st, pl, pl));
        CK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &s, &w, &d, st, pl, pl));
        CK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &s, &w, &b, &d, st,
                                                       pl, pl));
    }
    dnnl_primitive_desc_t fpd, dpd, wpd;
    CK(dnnl_primitive_desc_create(&fpd, &fd, attr, eng, NULL));
    CK(dnnl_primitive_desc_create(&dpd, &bdd, attr, eng, fpd));
    CK(dnnl_primitive_desc_create(&wpd, &bwd, attr, eng, fpd));
    conv_tasks r;
    snprintf(r.impl[0], 32, "%s", impl_of(fpd));
    snprintf(r.impl[1], 32, "%s", impl_of(dpd));
    snprintf(r.impl[2], 32, "%s", impl_of(wpd));
#define MD(pd, q) dnnl_primitive_desc_query_md(pd, q, 0)
    const dnnl_memory_desc_t *m[9] = {
        MD(fpd, dnnl_query_src_md), MD(fpd, dnnl_query_weights_md), MD(fpd, dnnl_query_dst_md),
        MD(dpd, dnnl_query_diff_src_md), MD(dpd, dnnl_query_weights_md), MD(dpd, dnnl_query_diff_dst_md),
        MD(wpd, dnnl_query_src_md), MD(wpd, dnnl_query_diff_weights_md), MD(wpd, dnnl_query_diff_dst_md)};
    memcpy(md_out, m, sizeof m);
    dnnl_memory_t mb = mem(&b);
    dnnl_exec_arg_t fa[5] = {{DNNL_ARG_SRC, mem(m[0])}, {DNNL_ARG_WEIGHTS, mem(m[1])},
                             {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, mem(m[2])},
                             {DNNL_ARG_SCRATCHPAD, mem(MD(fpd, dnnl_query_scratchpad_md))}};
    dnnl_exec_arg_t da[4] = {{DNNL_ARG_DIFF_SRC, mem(m[3])}, {DNNL_ARG_WEIGHTS, mem(m[4])},
                             {DNNL_ARG_DIFF_DST, mem(m[5])},
                             {DNNL_ARG_SCRATCHPAD, mem(MD(dpd, dnnl_query_scratchpad_md))}};
    dnnl_exec_arg_t wa[5] = {{DNNL_ARG_SRC, mem(m[6])}, {DNNL_ARG_DIFF_WEIGHTS, mem(m[7])},
                             {DNNL_ARG_DIFF_BIAS, mb}, {DNNL_ARG_DIFF_DST, mem(m[8])},
                             {DNNL_ARG_SCRATCHPAD, mem(MD(wpd, dnnl_query_scratchpad_md))}};
    r.fwd = add_task(fpd, 5, fa);
    r.bwd_d = add_task(dpd, 4, da);
    r.bwd_w = add_task(wpd, 5, wa);
    /* the pds stay alive: md_out points into them (leaked; throwaway tool) */
    dnnl_primitive_attr_destroy(attr);
    return r;
}

static void cleanup(void) {
    for (int i = 0; i < ntasks; i++) dnnl_primitive_destroy(tasks[i].p);
    for (int i = 0; i < nmems; i++) {
        void *p;
        dnnl_memory_get_data_handle(mems[i], &p);
        dnnl_memory_destroy(mems[i]);
        free(p);
    }
    ntasks = nmems = 0;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 6;
    use_median = getenv("MEDIAN") != NULL;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const shape shapes[] = {
        {128, 1, 64, 28, 28, 3, 1, 1, "c1 1->64 28x28", 0},
        {128, 64, 64, 28, 28, 3, 1, 1, "c2 64->64 28x28 (x2)", 0},
        {128, 64, 128, 14, 14, 3, 1, 1, "c4 64->128 14x14", 0},
        {128, 128, 128, 14, 14, 3, 1, 1, "c5 128->128 14x14 (x2)", 0},
        {128, 128, 256, 7, 7, 3, 1, 1, "c7 128->256 7x7", 0},
        {128, 256, 256, 7, 7, 3, 1, 1, "c8 256->256 7x7 (x2)", 0},
        {64, 256, 256, 28, 28, 3, 1, 1, "large 64x256->256 28x28 (bench/cpu_train_step)", 0},
        /* not cnn10: few channels on one side */
        {128, 3, 32, 32, 32, 3, 1, 1, "rgb 3->32 32x32", 0},
        {32, 3, 32, 128, 128, 11, 4, 2, "rgb 3->32 k11 s4 128x128", 0},
        {128, 32, 3, 16, 16, 4, 2, 1, "deconv 32->3 k4 s2 16x16", 1},
        {128, 64, 32, 8, 8, 4, 2, 1, "deconv 64->32 k4 s2 8x8", 1},
    };
    const int mult[] = {1, 2, 1, 2, 1, 2, 0, 0, 0, 0, 0};
    int only = argc > 2 ? atoi(argv[2]) : -1; /* one shape index */
    /* totals over cnn10: [plain, any raw, any+reorders (no reuse), any step (reuse)] x pass */
    double tot[4][3] = {{0}}, totflop = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (only >= 0 && (size_t)only != i) continue;
        const shape *c = &shapes[i];
        int ho = out_size(c, c->h), wo = out_size(c, c->w);
        /* a deconvolution's work is that of the convolution from its output */
        double flop = c->tr ? 2.0 * c->n * c->co * ho * wo * c->ci * c->k * c->k / ((double)ho * wo) * c->h * c->w
                            : 2.0 * c->n * c->co * ho * wo * c->ci * c->k * c->k;
        const dnnl_memory_desc_t *pm[9], *am[9];
        conv_tasks P = make_conv(c, dnnl_nchw, dnnl_oihw, pm);
        conv_tasks A = make_conv(c, dnnl_format_tag_any, dnnl_format_tag_any, am);
        /* reorders a plain-tensor library must do around the 'any' primitives */
        int r_fs = reorder_task(pm[0], am[0]), r_fw = reorder_task(pm[1], am[1]),
            r_fd = reorder_task(am[2], pm[2]);
        int r_ds = reorder_task(am[3], pm[3]), r_dw = reorder_task(pm[4], am[4]),
            r_dd = reorder_task(pm[5], am[5]);
        int r_ws = reorder_task(pm[6], am[6]), r_ww = reorder_task(am[7], pm[7]),
            r_wd = reorder_task(pm[8], am[8]);
        for (int r = 0; r < reps + 1; r++)
            for (int t = 0; t < ntasks; t++) {
                double t0 = now();
                CK(dnnl_primitive_execute(tasks[t].p, strm, tasks[t].na, tasks[t].a));
                CK(dnnl_stream_wait(strm));
                double dt = now() - t0;
                if (r > 0 && dt < tasks[t].best) tasks[t].best = dt;
                if (r > 0 && dt > tasks[t].worst) tasks[t].worst = dt;
                if (r > 0 && tasks[t].nt < 64) tasks[t].t[tasks[t].nt++] = dt;
            }
        double pl[3] = {tt(P.fwd), tt(P.bwd_d), tt(P.bwd_w)};
        double raw[3] = {tt(A.fwd), tt(A.bwd_d), tt(A.bwd_w)};
        double full[3] = {raw[0] + tt(r_fs) + tt(r_fw) + tt(r_fd), raw[1] + tt(r_ds) + tt(r_dw) + tt(r_dd),
                          raw[2] + tt(r_ws) + tt(r_ww) + tt(r_wd)};
        /* a step that keeps blocked src/weights from forward in 'saved' and
         * reorders diff_dst once for both backward passes */
        double step[3] = {full[0], raw[1] + tt(r_ds) + (dnnl_memory_desc_equal(am[4], am[1]) ? 0 : tt(r_dw)) + tt(r_dd),
                          raw[2] + tt(r_ww) + (dnnl_memory_desc_equal(am[6], am[0]) ? 0 : tt(r_ws)) +
                              (dnnl_memory_desc_equal(am[8], am[5]) ? 0 : tt(r_wd))};
        printf("%s  (%.2f GFLOP per pass)  worst run: plain fwd %.1f bwd_d %.1f bwd_w %.1f ms, any fwd %.1f bwd_d %.1f bwd_w %.1f ms\n",
               c->name, flop * 1e-9, tasks[P.fwd].worst * 1e3, tasks[P.bwd_d].worst * 1e3, tasks[P.bwd_w].worst * 1e3,
               tasks[A.fwd].worst * 1e3, tasks[A.bwd_d].worst * 1e3, tasks[A.bwd_w].worst * 1e3);
        static const char *pn[3] = {"fwd", "bwd_d", "bwd_w"};
        for (int p = 0; p < 3; p++) {
            printf("  %-5s plain %7.2f ms %6.1f GF/s [%-12s] | any %7.2f ms %6.1f GF/s [%-8s] "
                   "+reorders %7.2f ms %6.1f GF/s | step-reuse %6.1f GF/s\n",
                   pn[p], pl[p] * 1e3, flop / pl[p] * 1e-9, P.impl[p], raw[p] * 1e3,
                   flop / raw[p] * 1e-9, A.impl[p], full[p] * 1e3, flop / full[p] * 1e-9,
                   flop / step[p] * 1e-9);
            tot[0][p] += mult[i] * pl[p];
            tot[1][p] += mult[i] * raw[p];
            tot[2][p] += mult[i] * full[p];
            tot[3][p] += mult[i] * step[p];
        }
        printf("  reorders ms: fwd src %.2f w %.2f dst %.2f | bwd_d dsrc %.2f w %.2f ddst %.2f | "
               "bwd_w src %.2f dw %.2f ddst %.2f\n",
               tt(r_fs) * 1e3, tt(r_fw) * 1e3, tt(r_fd) * 1e3, tt(r_ds) * 1e3, tt(r_dw) * 1e3,
               tt(r_dd) * 1e3, tt(r_ws) * 1e3, tt(r_ww) * 1e3, tt(r_wd) * 1e3);
        totflop += mult[i] * flop;
        fflush(stdout);
        cleanup();
    }
    static const char *vn[4] = {"plain", "any (raw)", "any+reorders", "any step-reuse"};
    printf("cnn10 conv totals (8 convs x 3 passes, %.1f GFLOP per pass):\n", totflop * 1e-9);
    for (int v = 0; v < 4; v++)
        printf("  %-15s fwd %6.1f ms (%5.1f GF/s)  bwd_d %6.1f ms (%5.1f)  bwd_w %6.1f ms (%5.1f)  "
               "sum %6.1f ms (%5.1f GF/s)\n",
               vn[v], tot[v][0] * 1e3, totflop / tot[v][0] * 1e-9, tot[v][1] * 1e3,
               totflop / tot[v][1] * 1e-9, tot[v][2] * 1e3, totflop / tot[v][2] * 1e-9,
               (tot[v][0] + tot[v][1] + tot[v][2]) * 1e3,
               3 * totflop / (tot[v][0] + tot[v][1] + tot[v][2]) * 1e-9);
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return 0;
}
