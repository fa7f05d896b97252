/* test_cuda_conv_genstats.c — a probe for fusing batch norm into convolutions
 * with cuDNN's graph API, at resnet18's shapes (batch 512, 32x32 input: 3x3
 * stride 1 and 2, 1x1 stride-2 projection, the deeper layers) and
 * wrn-28-10's 3x3 ones (batch 128), f16 and bf16 channels-last. For each
 * shape and dtype it builds four graphs:
 *   conv               CONVOLUTION_FORWARD (x, w -> y);
 *   conv+genstats      conv -> GEN_STATS (per-channel f32 sum and sum of
 *                      squares of y: batch norm's statistics in the epilogue);
 *   sbr+conv+genstats  relu(x * scale + bias) -> conv -> GEN_STATS, the
 *                      forward half of cuDNN's ConvBNfprop fusion (the previous
 *                      batch norm's apply and ReLU in the prologue, per-channel
 *                      scale and bias, virtual intermediates). The dtypes of its
 *                      added tensors are tried in the order of sbr_try until
 *                      one has an engine that runs.
 *   conv+add           conv -> ADD z (a residual input of y's shape): the
 *                      residual add of a pre-activation block (wrn-28-10)
 *                      in the convolution's epilogue; the conv's output
 *                      virtual, f32 first, then in the I/O type.
 * Each graph is searched as the library searches a convolution (conv_engine.cu),
 * over more configs: every one among heuristic mode A's first 16 (the
 * library's default is 12, MIXPREC_CUDNN_ENGINE_CANDIDATES; the fallback
 * list's first 4 only when none of those runs) whose numerical notes the library allows is
 * finalized and timed (a warm-up, then the median of 3 trials of 4 runs queued
 * back to back, GPU time; a warm-up over 4x the best so far, twice (a
 * first run may compile the kernels), ends that candidate), and the
 * fastest is kept. Judging a fusion by the first config
 * that finalizes measures the heuristics' first guess, not the fusion. The
 * searches share a wall-clock budget (MP_TEST_SEARCH_SECONDS, default 60) so
 * that runtime-compiled engines cannot stretch the probe; candidates it leaves
 * untried are counted in the output. MP_TEST_GRAPHS (names, comma-separated)
 * keeps the plain convolution and the graphs named, so that a question about
 * one fusion gets the whole budget.
 * Checks, where an engine ran: the fused graphs' sums against a double sum of
 * their y read back (1e-3 of the sum of |y|: y is rounded to f16/bf16, the sums
 * may be of the f32 accumulators; a wrong kernel is O(1)), and sbr's y against
 * the plain convolution's of relu(x * scale + bias) computed on the host and
 * rounded to the dtype (relative L2 error 2e-3 f16, 1e-2 bf16: a few roundings
 * of y). No engine is reported, not failed; a wrong result fails, and so do
 * configs that finalize of which none runs.
 * Needs a GPU: one clear line and exit 2 without one. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"
#include "cuda/cudnn_plans.h"

typedef struct {
    const char *name;
    int n, c, h, w, k, r, stride, pad;
} conv_case;

typedef enum { G_CONV, G_STATS, G_SBR, G_ADD, N_GRAPHS } graph_kind;
static const char *const graph_name[N_GRAPHS] = {"conv", "conv+genstats", "sbr+conv+genstats", "conv+add"};

/* The dtypes of the sbr graph's added tensors, each in the I/O dtype when set,
 * else f32: scale and bias; x * scale and + bias; relu's output, the
 * convolution's input. cuDNN's samples of this pattern give scale and bias the
 * I/O dtype and the intermediates f32 (C++) or the I/O dtype (Python). */
typedef struct {
    const char *name;
    bool io_affine, io_mid, io_conv_in;
} sbr_types;
static const sbr_types sbr_try[] = {
    {"f32 scale/bias, f32 intermediates", false, false, false},
    {"f32 scale/bias, f32 intermediates but the conv's input in the I/O type", false, false, true},
    {"I/O-type scale/bias, f32 intermediates", true, false, false},
    {"I/O-type scale/bias and intermediates", true, true, true},
};
/* conv+add's conv output (io_mid), the only added dtype it has */
static const sbr_types add_try[] = {
    {"f32 conv output", false, false, false},
    {"I/O-type conv output", false, true, false},
};
enum { N_SBR_TRY = sizeof sbr_try / sizeof sbr_try[0], N_ADD_TRY = sizeof add_try / sizeof add_try[0] };

/* Tensor slots; slot i has unique id i + 1. */
enum { T_X, T_W, T_Y, T_SUM, T_SQSUM, T_SCALE, T_BIAS, T_XS, T_XB, T_XR, T_Z, T_YC, N_TENSORS };
enum { MODE_A_CAP = 16, FALLBACK_CAP = 4, MAX_OPS = 5 };

#define BE(call)                                                                                     \
    do {                                                                                             \
        cudnnStatus_t e_ = (call);                                                                   \
        if (e_ != CUDNN_STATUS_SUCCESS) {                                                            \
            snprintf(why, sizeof why, "%s: %s", #call, cudnnGetErrorString(e_));                     \
            goto out;                                                                                \
        }                                                                                            \
    } while (0)

static char why[512];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void out_hw(const conv_case *cc, int *ho, int *wo) {
    *ho = (cc->h + 2 * cc->pad - cc->r) / cc->stride + 1;
    *wo = (cc->w + 2 * cc->pad - cc->r) / cc->stride + 1;
}

/* A 4-d channels-last tensor (dims n, c, h, w; strides of NHWC / KRSC). */
static cudnnBackendDescriptor_t tensor(cudnnDataType_t dt, int slot, int64_t n, int64_t c, int64_t h, int64_t w,
                                       bool virt) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, align = 16, uid = slot + 1;
    cudnnBackendDescriptor_t t = NULL;
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
    BE(cudnnBackendFinalize(t));
    return t;
out:
    if (t) cudnnBackendDestroyDescriptor(t);
    return NULL;
}

/* Every descriptor of one graph, kept until its plans are gone (a plan may
 * keep pointers into the descriptors it was built from). */
typedef struct {
    cudnnBackendDescriptor_t t[N_TENSORS], pw[3], conv, op[MAX_OPS], graph;
} op_graph;

static void graph_free(op_graph *g) {
    if (g->graph) cudnnBackendDestroyDescriptor(g->graph);
    for (int i = MAX_OPS - 1; i >= 0; i--)
        if (g->op[i]) cudnnBackendDestroyDescriptor(g->op[i]);
    for (int i = 2; i >= 0; i--)
        if (g->pw[i]) cudnnBackendDestroyDescriptor(g->pw[i]);
    if (g->conv) cudnnBackendDestroyDescriptor(g->conv);
    for (int i = N_TENSORS - 1; i >= 0; i--)
        if (g->t[i]) cudnnBackendDestroyDescriptor(g->t[i]);
    memset(g, 0, sizeof *g);
}

/* One pointwise operation y = mode(x) or mode(x, b), computed in f32 with
 * alpha1 = alpha2 = 1; *pw and *op are left for the caller to destroy. */
static bool pointwise(cudnnBackendDescriptor_t *pw, cudnnBackendDescriptor_t *op, cudnnPointwiseMode_t mode,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    const float one = 1.f;
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, pw));
    BE(cudnnBackendSetAttribute(*pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    BE(cudnnBackendSetAttribute(*pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    if (mode == CUDNN_POINTWISE_RELU_FWD) { /* max(x, 0): clip below at 0 with slope 0, above at f32's largest */
        const double lower = 0, upper = FLT_MAX, slope = 0;
        BE(cudnnBackendSetAttribute(*pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &lower));
        BE(cudnnBackendSetAttribute(*pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &upper));
        BE(cudnnBackendSetAttribute(*pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &slope));
    }
    BE(cudnnBackendFinalize(*pw));
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op));
    BE(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                pw));
    BE(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (b)
        BE(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    BE(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    BE(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one));
    BE(cudnnBackendSetAttribute(*op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one));
    BE(cudnnBackendFinalize(*op));
    return true;
out:
    return false;
}

/* The graph of kind for the case in I/O dtype io (st: the sbr and add graphs'
 * added dtypes); false (why set, nothing left) when cuDNN refuses it. */
static bool build_graph(cudnnHandle_t h, const conv_case *cc, cudnnDataType_t io, graph_kind kind,
                        const sbr_types *st, op_graph *g) {
    int ho, wo, n_ops = 0;
    out_hw(cc, &ho, &wo);
    memset(g, 0, sizeof *g);
    cudnnBackendDescriptor_t *t = g->t;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    if (!(t[T_X] = tensor(io, T_X, cc->n, cc->c, cc->h, cc->w, false)) ||
        !(t[T_W] = tensor(io, T_W, cc->k, cc->c, cc->r, cc->r, false)) ||
        !(t[T_Y] = tensor(io, T_Y, cc->n, cc->k, ho, wo, false)))
        goto out;
    if (kind == G_ADD && (!(t[T_Z] = tensor(io, T_Z, cc->n, cc->k, ho, wo, false)) ||
                          !(t[T_YC] = tensor(st->io_mid ? io : f32, T_YC, cc->n, cc->k, ho, wo, true))))
        goto out;
    if ((kind == G_STATS || kind == G_SBR) && (!(t[T_SUM] = tensor(f32, T_SUM, 1, cc->k, 1, 1, false)) ||
                           !(t[T_SQSUM] = tensor(f32, T_SQSUM, 1, cc->k, 1, 1, false))))
        goto out;
    if (kind == G_SBR) { /* x -> * scale -> + bias -> relu -> the convolution's input */
        const cudnnDataType_t affine = st->io_affine ? io : f32, mid = st->io_mid ? io : f32,
                              conv_in = st->io_conv_in ? io : f32;
        if (!(t[T_SCALE] = tensor(affine, T_SCALE, 1, cc->c, 1, 1, false)) ||
            !(t[T_BIAS] = tensor(affine, T_BIAS, 1, cc->c, 1, 1, false)) ||
            !(t[T_XS] = tensor(mid, T_XS, cc->n, cc->c, cc->h, cc->w, true)) ||
            !(t[T_XB] = tensor(mid, T_XB, cc->n, cc->c, cc->h, cc->w, true)) ||
            !(t[T_XR] = tensor(conv_in, T_XR, cc->n, cc->c, cc->h, cc->w, true)))
            goto out;
        if (!pointwise(&g->pw[0], &g->op[n_ops++], CUDNN_POINTWISE_MUL, t[T_X], t[T_SCALE], t[T_XS]) ||
            !pointwise(&g->pw[1], &g->op[n_ops++], CUDNN_POINTWISE_ADD, t[T_XS], t[T_BIAS], t[T_XB]) ||
            !pointwise(&g->pw[2], &g->op[n_ops++], CUDNN_POINTWISE_RELU_FWD, t[T_XB], NULL, t[T_XR]))
            goto out;
    }
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t sd = 2, dil[2] = {1, 1}, str[2] = {cc->stride, cc->stride}, pad[2] = {cc->pad, cc->pad};
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BE(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BE(cudnnBackendFinalize(g->conv));
    const float alpha = 1.f, beta = 0.f;
    cudnnBackendDescriptor_t *conv_op = &g->op[n_ops++];
    const cudnnBackendDescriptor_t conv_x = t[kind == G_SBR ? T_XR : T_X];
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, conv_op));
    BE(cudnnBackendSetAttribute(*conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &conv_x));
    BE(cudnnBackendSetAttribute(*conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &t[T_W]));
    BE(cudnnBackendSetAttribute(*conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &t[kind == G_ADD ? T_YC : T_Y]));
    BE(cudnnBackendSetAttribute(*conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv));
    BE(cudnnBackendSetAttribute(*conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    BE(cudnnBackendSetAttribute(*conv_op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    BE(cudnnBackendFinalize(*conv_op));
    if (kind == G_ADD && !pointwise(&g->pw[0], &g->op[n_ops++], CUDNN_POINTWISE_ADD, t[T_YC], t[T_Z], t[T_Y]))
        goto out;
    if (kind == G_STATS || kind == G_SBR) {
        const cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
        cudnnBackendDescriptor_t *gs = &g->op[n_ops++];
        BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, gs));
        BE(cudnnBackendSetAttribute(*gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm));
        BE(cudnnBackendSetAttribute(*gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32));
        BE(cudnnBackendSetAttribute(*gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &t[T_Y]));
        BE(cudnnBackendSetAttribute(*gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &t[T_SUM]));
        BE(cudnnBackendSetAttribute(*gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &t[T_SQSUM]));
        BE(cudnnBackendFinalize(*gs));
    }
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph));
    BE(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, g->op));
    BE(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BE(cudnnBackendFinalize(g->graph));
    return true;
out:
    graph_free(g);
    return false;
}

/* The device pointers of a graph's non-virtual tensors, by unique id. */
typedef struct {
    void *ptr[7];
    int64_t uid[7];
    int n;
} bindings;

static void bind(bindings *b, int slot, void *p) {
    b->ptr[b->n] = p;
    b->uid[b->n++] = slot + 1;
}

/* A workspace that grows to what the candidates need, up to a cap. */
typedef struct {
    void *p;
    size_t bytes;
} workspace;

static bool ws_fit(workspace *ws, int64_t need) {
    const size_t cap = (size_t)4 << 30;
    if ((size_t)need <= ws->bytes) return true;
    if ((size_t)need > cap) return false;
    cudaFree(ws->p);
    ws->p = NULL, ws->bytes = 0;
    if (cudaMalloc(&ws->p, (size_t)need) != cudaSuccess) {
        (void)cudaGetLastError();
        ws->p = NULL;
        return false;
    }
    ws->bytes = (size_t)need;
    return true;
}

/* One run of plan, finished; false when it fails. */
static bool run_once(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const bindings *b, void *ws) {
    cudnnBackendDescriptor_t vp = NULL;
    const bool ok = mp_cudnn_variant_pack(&vp, b->n, b->ptr, b->uid, ws) == CUDNN_STATUS_SUCCESS &&
                    cudnnBackendExecute(h, plan, vp) == CUDNN_STATUS_SUCCESS && cudaDeviceSynchronize() == cudaSuccess;
    if (vp) cudnnBackendDestroyDescriptor(vp);
    if (!ok) (void)cudaGetLastError();
    return ok;
}

/* What a graph's search found: the fastest plan (NULL when none ran) and
 * the counts of its configs. */
typedef struct {
    cudnnBackendDescriptor_t plan;
    float ms;
    int64_t engine, ws;
    bool fallback, runtime_compiled;
    int listed, skipped, finalized, ran, over_ws, untried;
    char heur_why[2][200]; /* mode A's and the fallback list's error, when the heuristic had no answer */
    double seconds;
} search_result;

static void result_free(search_result *r) {
    if (r->plan) cudnnBackendDestroyDescriptor(r->plan);
    memset(r, 0, sizeof *r);
}

/* The wall-clock seconds the searches may still spend, and how many remain. */
static double budget_s;
static bool graph_wanted[N_GRAPHS]; /* MP_TEST_GRAPHS */
static int searches_left;

/* Every allowed config of mode A's first MODE_A_CAP (the fallback list's
 * first FALLBACK_CAP when none of those runs) finalized and timed; the
 * fastest kept. Once this search's share of the budget is spent and a plan
 * runs, the rest are counted untried. */
static void search(cudnnHandle_t h, const op_graph *g, const bindings *b, workspace *ws, search_result *r) {
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    static const int caps[2] = {MODE_A_CAP, FALLBACK_CAP};
    memset(r, 0, sizeof *r);
    const double t0 = now_s(), share = budget_s / (searches_left > 0 ? searches_left : 1);
    for (int m = 0; m < 2 && !r->plan; m++) {
        cudnnBackendDescriptor_t cfg[MODE_A_CAP];
        int n = 0;
        if (mp_cudnn_heuristic_configs(g->graph, modes[m], caps[m], cfg, &n, "probe") != MP_OK) {
            snprintf(r->heur_why[m], sizeof r->heur_why[m], "%s", mp_last_error());
            mp_clear_error();
        }
        r->listed += n;
        for (int i = 0; i < n; i++) {
            mp_cudnn_engine_notes nt;
            cudnnBackendDescriptor_t plan = NULL;
            int64_t need = 0;
            if (r->plan && now_s() - t0 > share) r->untried++;
            else if (!mp_cudnn_engine_notes_of(cfg[i], &nt) || nt.reduced || nt.down_convert) r->skipped++;
            else if ((plan = mp_cudnn_finalize_plan(h, cfg[i], &need)) && !ws_fit(ws, need))
                r->finalized++, r->over_ws++;
            else if (plan) {
                r->finalized++;
                const float ms =
                    mp_cudnn_time_plan(h, 0, plan, b->n, b->ptr, b->uid, ws->p, r->plan ? 4.f * r->ms : 0.f);
                if (ms >= 0) r->ran++;
                if (ms >= 0 && (!r->plan || ms < r->ms)) {
                    if (r->plan) cudnnBackendDestroyDescriptor(r->plan);
                    r->plan = plan, plan = NULL;
                    r->ms = ms, r->engine = nt.id, r->ws = need, r->fallback = m == 1;
                    r->runtime_compiled = nt.runtime_compiled;
                }
            }
            if (plan) cudnnBackendDestroyDescriptor(plan);
            cudnnBackendDestroyDescriptor(cfg[i]);
        }
    }
    r->seconds = now_s() - t0;
    budget_s -= r->seconds;
}

/* One line on a search: the fastest, or why there is none. */
static void report(const conv_case *cc, mp_dtype dt, graph_kind kind, const char *variant, const search_result *r) {
    printf("%-22s %-4s %-17s ", cc->name, mp_dtype_name(dt), graph_name[kind]);
    if (r->plan)
        printf("%.3f ms, engine %lld%s (%s), workspace %lld B;", (double)r->ms, (long long)r->engine,
               r->runtime_compiled ? " runtime-compiled" : "", r->fallback ? "fallback list" : "mode A",
               (long long)r->ws);
    else {
        printf("NO ENGINE");
        for (int m = 0; m < 2; m++)
            if (r->heur_why[m][0]) printf(" (%s heuristic: %s)", m ? "fallback" : "mode A", r->heur_why[m]);
        printf(";");
    }
    printf(" %d listed, %d skipped for reduced-precision/down-convert notes, %d finalized, %d ran", r->listed,
           r->skipped, r->finalized, r->ran);
    if (r->over_ws) printf(", %d over 4 GiB of workspace", r->over_ws);
    if (r->untried) printf(", %d untried (time budget)", r->untried);
    printf("; %.1f s", r->seconds);
    if (variant) printf("; %s", variant);
    printf("\n");
}

/* The largest of the per-channel errors of sums (k sums of y's channels, then
 * k sums of their squares) against double sums of y (NHWC: rows of k). */
static double sums_error(const float *y, const float *sums, size_t rows, int k) {
    double *acc = calloc(3 * (size_t)k, sizeof *acc), worst = 0; /* sum, sum of squares, sum of |y| */
    MP_ASSERT(acc);
    for (size_t m = 0; m < rows; m++)
        for (int c = 0; c < k; c++) {
            const double v = y[m * k + c];
            acc[c] += v, acc[k + c] += v * v, acc[2 * k + c] += fabs(v);
        }
    for (int c = 0; c < k; c++) {
        const double s = acc[c], q = acc[k + c], a = acc[2 * k + c];
        const double es = fabs(sums[c] - s) / (a > 0 ? a : 1), eq = fabs(sums[k + c] - q) / (q > 0 ? q : 1);
        if (es > worst) worst = es;
        if (eq > worst) worst = eq;
    }
    free(acc);
    return worst;
}

/* Graph kind with the added dtypes st built, searched and reported into
 * *r (the graph kept in *g where a plan runs); where cuDNN refuses the graph
 * that is said and *r left as it was. */
static void search_variant(cudnnHandle_t h, const conv_case *cc, cudnnDataType_t io, mp_dtype dt, graph_kind kind,
                           const sbr_types *st, op_graph *g, const bindings *b, workspace *ws, search_result *r) {
    if (!build_graph(h, cc, io, kind, st, g)) {
        printf("%-22s %-4s %-17s NO GRAPH (%s): %s\n", cc->name, mp_dtype_name(dt), graph_name[kind], st->name, why);
        return;
    }
    result_free(r);
    search(h, g, b, ws, r);
    report(cc, dt, kind, st->name, r);
    CHECK(r->plan || !r->finalized, "%s %s %s (%s): %d configs finalized, none ran", cc->name, mp_dtype_name(dt),
          graph_name[kind], st->name, r->finalized);
    if (!r->plan) graph_free(g);
}

/* The relative L2 distance of y from want, and what a fused graph's y may
 * be from the plain convolution's: a few roundings of y in dtype dt. */
static double rel_l2(const float *y, const float *want, size_t n) {
    double e2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)y[i] - want[i];
        e2 += e * e, r2 += (double)want[i] * want[i];
    }
    return sqrt(e2 / (r2 > 0 ? r2 : 1));
}
static double y_tolerance(mp_dtype dt) { return dt == MP_DTYPE_F16 ? 2e-3 : 1e-2; }

/* The host data of one case, shared by both dtypes: x, w, the residual z
 * (y's shape), and per-channel scale in [0.5, 1.5) and bias in [-0.5, 0.5),
 * both multiples of 1/64 so that f16, bf16 and f32 hold them exactly. */
typedef struct {
    float *x, *w, *z, *scale, *bias;
    size_t nx, nw, ny;
} case_data;

typedef struct {
    const char *name, *dtype;
    float ms[N_GRAPHS]; /* 0: no engine */
} table_row;

static void one(cudnnHandle_t h, const conv_case *cc, const case_data *d, mp_dtype dt, table_row *row) {
    const cudnnDataType_t io = dt == MP_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    const size_t nx = d->nx, nw = d->nw, ny = d->ny, rows = ny / (size_t)cc->k;
    size_t nbits = nx > nw ? nx : nw;
    nbits = nbits > ny ? nbits : ny;
    float *hy = malloc(ny * sizeof *hy), *hs = malloc(2 * (size_t)cc->k * sizeof *hs), *xr = malloc(nx * sizeof *xr);
    uint16_t *bits = malloc(nbits * sizeof *bits), affine_bits[2][1024];
    MP_ASSERT(hy && hs && xr && bits && cc->c <= 1024);
    void *dx = NULL, *dxr = NULL, *dw = NULL, *dy = NULL, *dz = NULL, *dscale = NULL, *dbias = NULL;
    float *dsum = NULL;
    MP_ASSERT(cudaMalloc(&dx, nx * 2) == cudaSuccess && cudaMalloc(&dxr, nx * 2) == cudaSuccess &&
              cudaMalloc(&dw, nw * 2) == cudaSuccess && cudaMalloc(&dy, ny * 2) == cudaSuccess &&
              cudaMalloc(&dz, ny * 2) == cudaSuccess &&
              cudaMalloc((void **)&dsum, 2 * (size_t)cc->k * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&dscale, (size_t)cc->c * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&dbias, (size_t)cc->c * sizeof(float)) == cudaSuccess);
    mp_store_f32(bits, dt, d->w, (int64_t)nw);
    cudaMemcpy(dw, bits, nw * 2, cudaMemcpyHostToDevice);
    mp_store_f32(bits, dt, d->z, (int64_t)ny);
    cudaMemcpy(dz, bits, ny * 2, cudaMemcpyHostToDevice);
    mp_store_f32(bits, dt, d->x, (int64_t)nx);
    cudaMemcpy(dx, bits, nx * 2, cudaMemcpyHostToDevice);
    mp_load_f32(xr, bits, dt, (int64_t)nx); /* x as the GPU holds it, then x' = relu(x * scale + bias) */
    for (size_t i = 0; i < nx; i++) {
        const float a = xr[i] * d->scale[i % (size_t)cc->c] + d->bias[i % (size_t)cc->c];
        xr[i] = a > 0 ? a : 0;
    }
    mp_store_f32(bits, dt, xr, (int64_t)nx);
    cudaMemcpy(dxr, bits, nx * 2, cudaMemcpyHostToDevice);
    mp_store_f32(affine_bits[0], dt, d->scale, cc->c);
    mp_store_f32(affine_bits[1], dt, d->bias, cc->c);

    workspace ws = {NULL, 0};
    op_graph g[N_GRAPHS];
    search_result r[N_GRAPHS];
    bindings b[N_GRAPHS] = {{{0}, {0}, 0}};
    memset(g, 0, sizeof g);
    memset(r, 0, sizeof r);
    for (int k = 0; k < N_GRAPHS; k++) {
        bind(&b[k], T_X, dx), bind(&b[k], T_W, dw), bind(&b[k], T_Y, dy);
        if (k == G_STATS || k == G_SBR) bind(&b[k], T_SUM, dsum), bind(&b[k], T_SQSUM, dsum + cc->k);
        if (k == G_SBR) bind(&b[k], T_SCALE, dscale), bind(&b[k], T_BIAS, dbias);
        if (k == G_ADD) bind(&b[k], T_Z, dz);
    }
    for (int k = G_CONV; k <= G_STATS; k++) {
        if (!graph_wanted[k]) continue;
        if (build_graph(h, cc, io, (graph_kind)k, NULL, &g[k])) {
            search(h, &g[k], &b[k], &ws, &r[k]);
            report(cc, dt, (graph_kind)k, NULL, &r[k]);
            CHECK(k == G_CONV || r[k].plan || !r[k].finalized, "%s %s %s: %d configs finalized, none ran", cc->name,
                  mp_dtype_name(dt), graph_name[k], r[k].finalized);
        } else
            printf("%-22s %-4s %-17s NO GRAPH: %s\n", cc->name, mp_dtype_name(dt), graph_name[k], why);
        searches_left--;
    }
    for (int v = 0; v < N_SBR_TRY && graph_wanted[G_SBR] && !r[G_SBR].plan; v++) {
        const sbr_types *st = &sbr_try[v];
        if (st->io_affine) {
            cudaMemcpy(dscale, affine_bits[0], (size_t)cc->c * 2, cudaMemcpyHostToDevice);
            cudaMemcpy(dbias, affine_bits[1], (size_t)cc->c * 2, cudaMemcpyHostToDevice);
        } else {
            cudaMemcpy(dscale, d->scale, (size_t)cc->c * sizeof(float), cudaMemcpyHostToDevice);
            cudaMemcpy(dbias, d->bias, (size_t)cc->c * sizeof(float), cudaMemcpyHostToDevice);
        }
        search_variant(h, cc, io, dt, G_SBR, st, &g[G_SBR], &b[G_SBR], &ws, &r[G_SBR]);
    }
    searches_left -= graph_wanted[G_SBR];
    for (int v = 0; v < N_ADD_TRY && graph_wanted[G_ADD] && !r[G_ADD].plan; v++)
        search_variant(h, cc, io, dt, G_ADD, &add_try[v], &g[G_ADD], &b[G_ADD], &ws, &r[G_ADD]);
    searches_left -= graph_wanted[G_ADD];

    if (r[G_STATS].plan && run_once(h, r[G_STATS].plan, &b[G_STATS], ws.p)) { /* the sums of its y */
        cudaMemcpy(bits, dy, ny * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(hs, dsum, 2 * (size_t)cc->k * sizeof(float), cudaMemcpyDeviceToHost);
        mp_load_f32(hy, bits, dt, (int64_t)ny);
        const double worst = sums_error(hy, hs, rows, cc->k);
        printf("%-22s %-4s %-17s sums vs y read back %.2e\n", cc->name, mp_dtype_name(dt), graph_name[G_STATS], worst);
        CHECK(worst <= 1e-3, "%s %s: genstats sums %.3e from y's own (f32 accumulation of %zu rows)", cc->name,
              mp_dtype_name(dt), worst, rows);
    } else if (r[G_STATS].plan)
        CHECK(false, "%s %s conv+genstats: its fastest plan did not run again", cc->name, mp_dtype_name(dt));

    if (r[G_SBR].plan) { /* y against the plain convolution's of x', and the sums of its y */
        float *ref = NULL;
        bindings bx = b[G_CONV];
        bx.ptr[0] = dxr; /* slot T_X */
        if (r[G_CONV].plan && run_once(h, r[G_CONV].plan, &bx, ws.p)) {
            ref = malloc(ny * sizeof *ref);
            MP_ASSERT(ref);
            cudaMemcpy(bits, dy, ny * 2, cudaMemcpyDeviceToHost);
            mp_load_f32(ref, bits, dt, (int64_t)ny);
        }
        const bool ran = run_once(h, r[G_SBR].plan, &b[G_SBR], ws.p);
        CHECK(ran, "%s %s sbr+conv+genstats: its fastest plan did not run again", cc->name, mp_dtype_name(dt));
        if (ran) {
            cudaMemcpy(bits, dy, ny * 2, cudaMemcpyDeviceToHost);
            cudaMemcpy(hs, dsum, 2 * (size_t)cc->k * sizeof(float), cudaMemcpyDeviceToHost);
            mp_load_f32(hy, bits, dt, (int64_t)ny);
            const double worst = sums_error(hy, hs, rows, cc->k), tol = y_tolerance(dt);
            const double rel = ref ? rel_l2(hy, ref, ny) : 0;
            if (ref)
                printf("%-22s %-4s %-17s sums vs y read back %.2e; y vs conv(relu(x*scale+bias)) rel L2 %.2e\n",
                       cc->name, mp_dtype_name(dt), graph_name[G_SBR], worst, rel);
            else
                printf("%-22s %-4s %-17s sums vs y read back %.2e; y unchecked (no plain convolution ran)\n",
                       cc->name, mp_dtype_name(dt), graph_name[G_SBR], worst);
            CHECK(worst <= 1e-3, "%s %s: sbr genstats sums %.3e from y's own (f32 accumulation of %zu rows)",
                  cc->name, mp_dtype_name(dt), worst, rows);
            CHECK(!ref || rel <= tol, "%s %s: sbr y %.3e (relative L2) from conv(relu(x*scale+bias)), over %.0e",
                  cc->name, mp_dtype_name(dt), rel, tol);
        }
        free(ref);
    }

    if (r[G_ADD].plan && r[G_CONV].plan) { /* y against the plain convolution's y + z */
        float *ref = malloc(ny * sizeof *ref), *hz = malloc(ny * sizeof *hz);
        MP_ASSERT(ref && hz);
        const bool ran = run_once(h, r[G_CONV].plan, &b[G_CONV], ws.p);
        if (ran) {
            cudaMemcpy(bits, dy, ny * 2, cudaMemcpyDeviceToHost);
            mp_load_f32(ref, bits, dt, (int64_t)ny);
            cudaMemcpy(bits, dz, ny * 2, cudaMemcpyDeviceToHost);
            mp_load_f32(hz, bits, dt, (int64_t)ny);
        }
        const bool ran_add = ran && run_once(h, r[G_ADD].plan, &b[G_ADD], ws.p);
        CHECK(ran_add, "%s %s conv+add: the plain convolution's or its own fastest plan did not run again", cc->name,
              mp_dtype_name(dt));
        if (ran_add) {
            cudaMemcpy(bits, dy, ny * 2, cudaMemcpyDeviceToHost);
            mp_load_f32(hy, bits, dt, (int64_t)ny);
            for (size_t i = 0; i < ny; i++) ref[i] += hz[i]; /* the plain convolution's y + z */
            const double rel = rel_l2(hy, ref, ny), tol = y_tolerance(dt);
            printf("%-22s %-4s %-17s y vs conv(x) + z rel L2 %.2e\n", cc->name, mp_dtype_name(dt), graph_name[G_ADD],
                   rel);
            CHECK(rel <= tol, "%s %s: conv+add y %.3e (relative L2) from conv(x) + z, over %.0e", cc->name,
                  mp_dtype_name(dt), rel, tol);
        }
        free(ref), free(hz);
    } else if (r[G_ADD].plan) /* as sbr's: said, not silently passed */
        printf("%-22s %-4s %-17s y unchecked (no plain convolution ran)\n", cc->name, mp_dtype_name(dt),
               graph_name[G_ADD]);

    row->name = cc->name, row->dtype = mp_dtype_name(dt);
    for (int k = 0; k < N_GRAPHS; k++) {
        row->ms[k] = r[k].plan ? r[k].ms : 0;
        result_free(&r[k]); /* the plans before the graphs they were built from */
        graph_free(&g[k]);
    }
    cudaFree(ws.p);
    cudaFree(dx), cudaFree(dxr), cudaFree(dw), cudaFree(dy), cudaFree(dz), cudaFree(dsum), cudaFree(dscale);
    cudaFree(dbias);
    free(hy), free(hs), free(xr), free(bits);
}

/* graph_wanted from MP_TEST_GRAPHS (NULL or empty: every graph); false,
 * with the error printed, on a name that is not a graph's. */
static bool want_graphs(const char *list) {
    for (int k = 0; k < N_GRAPHS; k++) graph_wanted[k] = !list || !*list || k == G_CONV;
    for (const char *p = list; p && *p;) {
        const size_t len = strcspn(p, ",");
        int found = -1;
        for (int k = 0; k < N_GRAPHS; k++)
            if (strlen(graph_name[k]) == len && strncmp(p, graph_name[k], len) == 0) found = k;
        if (found < 0) {
            fprintf(stderr, "test_cuda_conv_genstats: MP_TEST_GRAPHS: unknown graph '%.*s' (conv, conv+genstats, "
                            "sbr+conv+genstats, conv+add)\n", (int)len, p);
            return false;
        }
        graph_wanted[found] = true;
        p += len + (p[len] == ',');
    }
    return true;
}

int main(void) {
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_conv_genstats: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    cudnnHandle_t h;
    MP_ASSERT(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
    printf("cuDNN %zu\n", cudnnGetVersion());
    const conv_case cases[] = {
        {"layer1 3x3 64 s1", 512, 64, 32, 32, 64, 3, 1, 1},   {"layer2 3x3 64->128 s2", 512, 64, 32, 32, 128, 3, 2, 1},
        {"layer2 1x1 shortcut s2", 512, 64, 32, 32, 128, 1, 2, 0}, {"layer3 3x3 256 s1", 512, 256, 8, 8, 256, 3, 1, 1},
        {"layer4 3x3 512 s1", 512, 512, 4, 4, 512, 3, 1, 1},  {"cnn10-like 3x3 128", 128, 128, 16, 16, 128, 3, 1, 1},
        {"wrn b128 3x3 160", 128, 160, 32, 32, 160, 3, 1, 1}, {"wrn b128 3x3 320", 128, 320, 16, 16, 320, 3, 1, 1},
        {"wrn b128 3x3 640", 128, 640, 8, 8, 640, 3, 1, 1}};
    const mp_dtype dts[] = {MP_DTYPE_BF16, MP_DTYPE_F16};
    enum { N_CASES = sizeof cases / sizeof cases[0], N_DTYPES = sizeof dts / sizeof dts[0] };
    const char *budget = getenv("MP_TEST_SEARCH_SECONDS");
    budget_s = budget && atof(budget) > 0 ? atof(budget) : 60;
    if (!want_graphs(getenv("MP_TEST_GRAPHS"))) return 2;
    int n_wanted = 0;
    for (int k = 0; k < N_GRAPHS; k++) n_wanted += graph_wanted[k];
    searches_left = N_CASES * N_DTYPES * n_wanted;
    table_row rows[N_CASES * N_DTYPES];
    const double t0 = now_s();
    for (size_t i = 0; i < N_CASES; i++) {
        const conv_case *cc = &cases[i];
        int ho, wo;
        out_hw(cc, &ho, &wo);
        case_data d = {.nx = (size_t)cc->n * cc->c * cc->h * cc->w,
                       .nw = (size_t)cc->k * cc->c * cc->r * cc->r,
                       .ny = (size_t)cc->n * cc->k * ho * wo};
        d.x = malloc(d.nx * sizeof *d.x), d.w = malloc(d.nw * sizeof *d.w), d.z = malloc(d.ny * sizeof *d.z);
        d.scale = malloc((size_t)cc->c * sizeof *d.scale), d.bias = malloc((size_t)cc->c * sizeof *d.bias);
        MP_ASSERT(d.x && d.w && d.z && d.scale && d.bias);
        mp_rng rng;
        mp_rng_seed(&rng, 3 + i);
        for (size_t j = 0; j < d.nx; j++) d.x[j] = (float)mp_rng_normal(&rng);
        for (size_t j = 0; j < d.nw; j++) d.w[j] = (float)mp_rng_normal(&rng) * 0.1f;
        for (size_t j = 0; j < d.ny; j++) d.z[j] = (float)mp_rng_normal(&rng);
        for (int j = 0; j < cc->c; j++) {
            d.scale[j] = 0.5f + (float)mp_rng_below(&rng, 64) / 64;
            d.bias[j] = ((float)mp_rng_below(&rng, 64) - 32) / 64;
        }
        for (size_t k = 0; k < N_DTYPES; k++) one(h, cc, &d, dts[k], &rows[i * N_DTYPES + k]);
        free(d.x), free(d.w), free(d.z), free(d.scale), free(d.bias);
    }
    printf("\nfastest of each graph (GPU ms; x: over the plain convolution; -: no engine; skipped: not in "
           "MP_TEST_GRAPHS), %.0f s in all\n",
           now_s() - t0);
    printf("%-22s %-4s %9s %18s %22s %22s\n", "shape", "type", "conv", "conv+genstats", "sbr+conv+genstats",
           "conv+add");
    for (size_t i = 0; i < N_CASES * N_DTYPES; i++) {
        const table_row *t = &rows[i];
        printf("%-22s %-4s ", t->name, t->dtype);
        if (t->ms[G_CONV] > 0) printf("%9.3f", (double)t->ms[G_CONV]);
        else printf("%9s", "-");
        for (int k = G_STATS; k < N_GRAPHS; k++) {
            if (t->ms[k] > 0 && t->ms[G_CONV] > 0)
                printf(" %*.3f (%5.2fx)", k == G_STATS ? 9 : 13, (double)t->ms[k], (double)(t->ms[k] / t->ms[G_CONV]));
            else if (t->ms[k] > 0)
                printf(" %*.3f %8s", k == G_STATS ? 9 : 13, (double)t->ms[k], "");
            else
                printf(" %*s %8s", k == G_STATS ? 9 : 13, graph_wanted[k] ? "-" : "skipped", "");
        }
        printf("\n");
    }
    cudnnDestroy(h);
    return test_summary("test_cuda_conv_genstats");
}
