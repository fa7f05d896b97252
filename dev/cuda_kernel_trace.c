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
 * caps the rows (default 40). */
#include <cupti.h>
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

static kernel_total *totals;
static int n_totals, cap_totals;
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

static void add_kernel(const CUpti_ActivityKernel5 *k) {
    if (!k->graphId) {
        ungraphed++;
        return;
    }
    graph_count *g = graph_of(k->graphId);
    if (g && g->last_correlation != k->correlationId) {
        g->last_correlation = k->correlationId;
        g->launches++;
    }
    for (int i = 0; i < n_totals; i++)
        if (totals[i].graph == k->graphId && (totals[i].name == k->name || !strcmp(totals[i].name, k->name))) {
            totals[i].ns += (double)(k->end - k->start);
            totals[i].calls++;
            return;
        }
    if (n_totals == cap_totals) {
        cap_totals = cap_totals ? 2 * cap_totals : 256;
        totals = realloc(totals, (size_t)cap_totals * sizeof *totals);
        if (!totals) abort();
    }
    totals[n_totals++] = (kernel_total){.name = k->name, .graph = k->graphId, .ns = (double)(k->end - k->start), .calls = 1};
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
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
            add_kernel((const CUpti_ActivityKernel5 *)rec);
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
    fprintf(stderr, "\nkernel trace: %d graph(s) replayed %ld times, %d kernels, %.3f ms of GPU time per replay "
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
}

int InitializeInjection(void) {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel trace: CUPTI's activity API refused; nothing will be traced\n");
        return 0;
    }
    atexit(report);
    return 1;
}
