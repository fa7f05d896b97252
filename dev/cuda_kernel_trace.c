/* cuda_kernel_trace.c — GPU time per kernel of any CUDA program, for where a
 * step's time goes at full speed (the per-node profile waits after every
 * node; this one watches CUDA-graph replays as they run). Built as a CUDA
 * injection library on CUPTI's activity API:
 *   cc -O2 -shared -fPIC -I$CUDA/include dev/cuda_kernel_trace.c -o kt.so -L<cupti dir> -lcupti -lstdc++
 *   CUDA_INJECTION64_PATH=$PWD/kt.so build-gpu/bench/gpu_train_step --models resnet18 ...
 * Only kernels launched from CUDA graphs are counted (a step's replays, not
 * the algorithm search or the warm-up outside the graph), and of those only
 * the graph(s) replayed most often: the step's, not the few replays of the
 * graphs batch norm's pick times its candidates with. At exit it prints,
 * on stderr, every kernel's GPU time per replay of its graph, largest first:
 * one table per process, so run one cell per process. KERNEL_TRACE_TOP=N
 * caps the rows (default 40). Then the timeline of the (first) graph
 * replayed most, each figure the median over its replays: the span from a
 * replay's first kernel start to its last end, the time some kernel ran,
 * the idle rest split by gap length (launch latency is a few µs; longer
 * gaps are waits), and the longest gaps of the replay in the middle in
 * time, with the kernels on either side. A graph's memsets and copies are
 * recorded beside its kernels (rows "memset 42.0 MB", "memcpy DtoD 1.0 MB":
 * per size, counted as other and as running, not as idle). */
#include <cupti.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

typedef struct {
    const char *name;    /* CUPTI's, valid for the process */
    uint32_t graph;
    double ns;
    long calls;
} kernel_total;

typedef struct {
    uint32_t graph;
    uint32_t last_correlation;
    long launches;       /* distinct correlation ids: one per replay */
} graph_count;

typedef struct {
    const char *name;
    uint32_t graph, correlation; /* a graph's kernels of one replay share the launch's correlation id */
    uint64_t start, end;         /* ns */
} kernel_span;

static kernel_total *totals;
static int n_totals, cap_totals;
static kernel_span *spans;
static long n_spans, cap_spans;
static graph_count graphs[256];
static int n_graphs;
static long ungraphed;

static graph_count *graph_of(uint32_t id) {
    for (int i = 0; i < n_graphs; i++)
        if (graphs[i].graph == id) return &graphs[i];
    if (n_graphs == (int)(sizeof graphs / sizeof graphs[0])) return NULL;
    graphs[n_graphs] = (graph_count){.graph = id};
    return &graphs[n_graphs++];
}

/* One activity of a graph (a kernel, or a memset or copy: !kernel) into the spans and the per-name totals; a
 * graph's replays are counted from its kernels alone. */
static void add_activity(const char *name, bool kernel, uint32_t graph, uint32_t correlation, uint64_t start,
                         uint64_t end) {
    if (!graph) {
        ungraphed += kernel;
        return;
    }
    if (n_spans == cap_spans) {
        cap_spans = cap_spans ? 2 * cap_spans : 4096;
        spans = realloc(spans, (size_t)cap_spans * sizeof *spans);
        if (!spans) abort();
    }
    spans[n_spans++] = (kernel_span){name, graph, correlation, start, end};
    graph_count *g = kernel ? graph_of(graph) : NULL;
    if (g && g->last_correlation != correlation) {
        g->last_correlation = correlation;
        g->launches++;
    }
    for (int i = 0; i < n_totals; i++)
        if (totals[i].graph == graph && (totals[i].name == name || !strcmp(totals[i].name, name))) {
            totals[i].ns += (double)(end - start);
            totals[i].calls++;
            return;
        }
    if (n_totals == cap_totals) {
        cap_totals = cap_totals ? 2 * cap_totals : 256;
        totals = realloc(totals, (size_t)cap_totals * sizeof *totals);
        if (!totals) abort();
    }
    totals[n_totals++] = (kernel_total){.name = name, .graph = graph, .ns = (double)(end - start), .calls = 1};
}

/* A memset's or copy's row name, kept for the process (one per distinct name; past 512 of them, one shared). */
static const char *interned(const char *what, uint64_t bytes) {
    static char *names[512];
    static int n_names;
    char buf[64];
    snprintf(buf, sizeof buf, "%s %.1f MB", what, (double)bytes / 1e6);
    for (int i = 0; i < n_names; i++)
        if (!strcmp(names[i], buf)) return names[i];
    if (n_names == (int)(sizeof names / sizeof names[0])) return "memset or copy (more sizes)";
    if (!(names[n_names] = strdup(buf))) abort();
    return names[n_names++];
}

static const char *copy_kind(uint8_t k) {
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    default: return "memcpy (other kind)";
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel5 *k = (const CUpti_ActivityKernel5 *)rec;
            add_activity(k->name, true, k->graphId, k->correlationId, k->start, k->end);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            add_activity(interned("memset", m->bytes), false, m->graphId, m->correlationId, m->start, m->end);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            add_activity(interned(copy_kind(m->copyKind), m->bytes), false, m->graphId, m->correlationId, m->start,
                         m->end);
        }
    free(buffer);
}

static int by_time(const void *a, const void *b) {
    const kernel_total *x = a, *y = b;
    return (x->ns < y->ns) - (x->ns > y->ns);
}

static long launches_of(uint32_t graph) {
    graph_count *g = graph_of(graph);
    return g && g->launches ? g->launches : 1;
}

/* What a kernel is, from its name: a convolution or GEMM (cuDNN's and
 * cuBLASLt's kernel families, depthwise ones included), batch norm (cuDNN's
 * and ours), or other. */
static int kind_of(const char *name) {
    static const char *const conv[] = {"xmma", "gemm", "nvjet", "cutlass", "convolve", "conv2d", "dgrad", "wgrad",
                                       "cublasLt"};
    static const char *const bn[] = {"batchnorm", "bn_", "fast_stats", "fast_apply", "fast_bwd", "fast_dx", "persist_"};
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++)
        if (strstr(name, conv[i])) return 0;
    for (size_t i = 0; i < sizeof bn / sizeof bn[0]; i++)
        if (strstr(name, bn[i])) return 1;
    return 2;
}

static int by_replay_then_start(const void *a, const void *b) {
    const kernel_span *x = a, *y = b;
    if (x->correlation != y->correlation) return (x->correlation > y->correlation) - (x->correlation < y->correlation);
    return (x->start > y->start) - (x->start < y->start);
}

static int by_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_double);
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

enum { GAP_KINDS = 4, LONGEST = 6 };
static const double gap_edges_us[GAP_KINDS - 1] = {2, 5, 20}; /* up to 2 µs, 2-5, 5-20, longer */

typedef struct {
    double ns;
    long before, after; /* the span that ended last before the gap, the one after it */
} timeline_gap;

typedef struct {
    double span, busy, kernel_sum, gaps[GAP_KINDS];
    int kernels, n_gaps[GAP_KINDS];
    timeline_gap top[LONGEST]; /* the longest gaps, longest first */
    int n_top;
} replay_timeline;

/* One replay's spans s[0..n), sorted by start: its span, the union of their intervals, the idle rest by gap length
 * (ns; a gap is time nothing of the replay runs) and its longest gaps. */
static replay_timeline timeline_of(const kernel_span *s, long n) {
    replay_timeline t = {.kernels = (int)n};
    uint64_t covered_to = s[0].start, last_end = s[0].end;
    long last = 0; /* the span whose end covered_to is */
    for (long i = 0; i < n; i++) {
        t.kernel_sum += (double)(s[i].end - s[i].start);
        if (s[i].start > covered_to) { /* a gap before this span */
            const double gap = (double)(s[i].start - covered_to);
            int k = 0;
            while (k < GAP_KINDS - 1 && gap > gap_edges_us[k] * 1e3) k++;
            t.gaps[k] += gap;
            t.n_gaps[k]++;
            if (t.n_top < LONGEST || gap > t.top[LONGEST - 1].ns) {
                int j = t.n_top < LONGEST ? t.n_top++ : LONGEST - 1;
                for (; j > 0 && t.top[j - 1].ns < gap; j--) t.top[j] = t.top[j - 1];
                t.top[j] = (timeline_gap){gap, last, i};
            }
        }
        if (s[i].end > covered_to) covered_to = s[i].end, last = i;
        if (s[i].end > last_end) last_end = s[i].end;
    }
    t.span = (double)(last_end - s[0].start);
    double idle = 0;
    for (int k = 0; k < GAP_KINDS; k++) idle += t.gaps[k];
    t.busy = t.span - idle;
    return t;
}

/* The longest gaps t found in the replay s (as timeline_of returned them), each with the span that ended last
 * before it and the span after it. */
static void print_longest_gaps(const kernel_span *s, const replay_timeline *t) {
    for (int j = 0; j < t->n_top; j++) {
        int sa = -1, sb = -1;
        char *a = __cxa_demangle(s[t->top[j].before].name, NULL, NULL, &sa);
        char *b = __cxa_demangle(s[t->top[j].after].name, NULL, NULL, &sb);
        fprintf(stderr, "| %.1f µs | %.70s | %.70s |\n", t->top[j].ns / 1e3,
                sa == 0 && a ? a : s[t->top[j].before].name, sb == 0 && b ? b : s[t->top[j].after].name);
        free(a);
        free(b);
    }
}

/* The timeline of graph `graph`'s replays (the step's: replayed most), each figure the median over the replays of
 * its own. */
static void report_timeline(uint32_t graph) {
    qsort(spans, (size_t)n_spans, sizeof *spans, by_replay_then_start);
    int replays = 0;
    for (long i = 0; i < n_spans; i++)
        if (spans[i].graph == graph && (i == 0 || spans[i].correlation != spans[i - 1].correlation)) replays++;
    if (!replays) return;
    enum { SPAN, BUSY, IDLE, SUM, KERNELS, GAPS, BY_LENGTH, N_SERIES = BY_LENGTH + GAP_KINDS };
    double *v[N_SERIES];
    for (int k = 0; k < N_SERIES; k++)
        if (!(v[k] = calloc((size_t)replays, sizeof(double)))) abort();
    long median_from = -1;
    replay_timeline middle = {0};
    int r = 0;
    for (long i = 0; i < n_spans;) {
        long j = i;
        while (j < n_spans && spans[j].correlation == spans[i].correlation) j++;
        if (spans[i].graph == graph) {
            const replay_timeline t = timeline_of(spans + i, j - i);
            v[SPAN][r] = t.span, v[BUSY][r] = t.busy, v[IDLE][r] = t.span - t.busy;
            v[SUM][r] = t.kernel_sum, v[KERNELS][r] = t.kernels;
            v[GAPS][r] = t.n_gaps[0] + t.n_gaps[1] + t.n_gaps[2] + t.n_gaps[3];
            for (int k = 0; k < GAP_KINDS; k++) v[BY_LENGTH + k][r] = t.gaps[k];
            if (r == replays / 2) median_from = i, middle = t; /* the middle replay in time */
            r++;
        }
        i = j;
    }
    const double span = median(v[SPAN], replays), busy = median(v[BUSY], replays), sum = median(v[SUM], replays);
    const double idle = median(v[IDLE], replays);
    const double kernels = median(v[KERNELS], replays), gaps = median(v[GAPS], replays);
    double g[GAP_KINDS];
    for (int k = 0; k < GAP_KINDS; k++) g[k] = median(v[BY_LENGTH + k], replays);
    fprintf(stderr, "\nkernel trace timeline of graph %u, over %d replays, each figure the median of its own: span "
            "%.3f ms (first kernel start to last end), some kernel running %.3f ms, idle %.3f ms (%.1f %% of the "
            "span) in %.0f gaps between %.0f kernels, memsets and copies; idle by gap length: <= 2 µs %.3f ms, "
            "2-5 µs %.3f, 5-20 µs %.3f, > 20 µs %.3f; their times summed %.3f ms (above the running time: "
            "overlapping)\n", graph,
            replays, span / 1e6, busy / 1e6, idle / 1e6, span > 0 ? 100 * idle / span : 0, gaps, kernels, g[0] / 1e6,
            g[1] / 1e6, g[2] / 1e6, g[3] / 1e6, sum / 1e6);
    if (median_from >= 0 && middle.n_top > 0) {
        fprintf(stderr, "| longest gaps of replay %d of %d, the middle one in time (µs) | kernel that ended last "
                "before | kernel after |\n|---|---|---|\n", replays / 2 + 1, replays);
        print_longest_gaps(spans + median_from, &middle);
    }
    for (int k = 0; k < N_SERIES; k++) free(v[k]);
}

static void report(void) {
    cuptiActivityFlushAll(1);
    long most = 0;
    for (int i = 0; i < n_graphs; i++)
        if (graphs[i].launches > most) most = graphs[i].launches;
    double left_out = 0; /* ms per replay of the graphs replayed fewer times */
    int kept = 0;
    for (int i = 0; i < n_totals; i++) {
        totals[i].ns /= (double)launches_of(totals[i].graph);
        if (launches_of(totals[i].graph) == most) totals[kept++] = totals[i];
        else left_out += totals[i].ns;
    }
    n_totals = kept;
    qsort(totals, (size_t)n_totals, sizeof *totals, by_time);
    double all = 0, kinds[3] = {0, 0, 0};
    for (int i = 0; i < n_totals; i++) {
        all += totals[i].ns;
        kinds[kind_of(totals[i].name)] += totals[i].ns;
    }
    const char *top_env = getenv("KERNEL_TRACE_TOP");
    const int top = top_env ? atoi(top_env) : 40;
    int step_graphs = 0;
    for (int i = 0; i < n_graphs; i++) step_graphs += graphs[i].launches == most;
    fprintf(stderr, "\nkernel trace: %d graph(s) replayed %ld times, %d kernels and memset or copy sizes, %.3f ms of "
            "GPU time per replay "
            "(convolutions and GEMMs %.3f, batch norm %.3f, other %.3f); not counted: %d graph(s) replayed fewer "
            "times (%.3f ms per replay of each), %ld kernels outside graphs\n", step_graphs, most, n_totals, all / 1e6,
            kinds[0] / 1e6, kinds[1] / 1e6, kinds[2] / 1e6, n_graphs - step_graphs, left_out / 1e6, ungraphed);
    fprintf(stderr, "| ms per replay | share | calls per replay | kernel |\n|---|---|---|---|\n");
    for (int i = 0; i < n_totals && i < top; i++) {
        int status = -1;
        char *plain = __cxa_demangle(totals[i].name, NULL, NULL, &status);
        const char *name = status == 0 && plain ? plain : totals[i].name;
        fprintf(stderr, "| %.4f | %.1f%% | %.1f | %.110s |\n", totals[i].ns / 1e6, all > 0 ? 100 * totals[i].ns / all : 0,
                (double)totals[i].calls / (double)launches_of(totals[i].graph), name);
        free(plain);
    }
    for (int i = 0; i < n_graphs; i++) /* the first of the graphs replayed most (one per process in a step) */
        if (graphs[i].launches == most) {
            report_timeline(graphs[i].graph);
            break;
        }
}

int InitializeInjection(void) {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel trace: CUPTI's activity API refused; nothing will be traced\n");
        return 0;
    }
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS)
        fprintf(stderr, "kernel trace: CUPTI records no memsets or copies here; they count as idle\n");
    atexit(report);
    return 1;
}
