/* test_cuda_conv_genstats.c — a probe for the next fusion step: does cuDNN's
 * graph API run a convolution forward with batch-norm statistics in its
 * epilogue (CONVOLUTION_FORWARD -> GEN_STATS: per-channel f32 sum and sum of
 * squares of y) on this GPU, for f16 and bf16 channels-last, at resnet18's
 * shapes (batch 512, 32x32 input: 3x3 stride 1 and 2, 1x1 stride-2
 * projection)? For each it prints whether an engine finalized (heuristic
 * mode A, then the fallback list), the fused graph's time beside the plain
 * convolution's (GPU time, median of 5 runs of 5), and checks y's sums
 * against a double-precision sum of y read back (1e-3 of the sum of
 * |y|: y is rounded to f16/bf16, the sums may be of the f32 accumulators;
 * a wrong kernel is O(1)). No engine is reported, not
 * failed (the library does not use this path yet); a wrong sum fails.
 * Needs a GPU: one clear line and exit 2 without one. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "cuda/cuda_ctx.h"

typedef struct {
    const char *name;
    int n, c, h, w, k, r, stride, pad;
} conv_case;

enum { UID_X = 1, UID_W, UID_Y, UID_S, UID_Q, MAX_CFG = 16 };

#define BE(call)                                                                                     \
    do {                                                                                             \
        cudnnStatus_t e_ = (call);                                                                   \
        if (e_ != CUDNN_STATUS_SUCCESS) {                                                            \
            snprintf(why, sizeof why, "%s: %s", #call, cudnnGetErrorString(e_));                     \
            goto out;                                                                                \
        }                                                                                            \
    } while (0)

static char why[512];

static cudnnBackendDescriptor_t tensor(cudnnDataType_t dt, int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, align = 16;
    cudnnBackendDescriptor_t t = NULL;
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    BE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    BE(cudnnBackendFinalize(t));
    return t;
out:
    if (t) cudnnBackendDestroyDescriptor(t);
    return NULL;
}

/* The operation graph: conv forward (x, w -> y), with genstats of y when
 * stats; the plan of the first engine config (mode A, then fallback) that
 * finalizes, and its workspace bytes; NULL (why set) when none does. */
static cudnnBackendDescriptor_t build_plan(cudnnHandle_t h, const conv_case *cc, cudnnDataType_t dt, bool stats,
                                           int64_t *ws, char *engine, size_t elen) {
    const int ho = (cc->h + 2 * cc->pad - cc->r) / cc->stride + 1, wo = (cc->w + 2 * cc->pad - cc->r) / cc->stride + 1;
    cudnnBackendDescriptor_t x = tensor(dt, UID_X, cc->n, cc->c, cc->h, cc->w), wt = tensor(dt, UID_W, cc->k, cc->c, cc->r, cc->r),
                             y = tensor(dt, UID_Y, cc->n, cc->k, ho, wo), s = NULL, q = NULL, conv = NULL, ops[2] = {0},
                             graph = NULL, heur = NULL, plan = NULL, cfg[MAX_CFG] = {0};
    int n_ops = stats ? 2 : 1;
    if (!x || !wt || !y) goto out;
    if (stats && (!(s = tensor(CUDNN_DATA_FLOAT, UID_S, 1, cc->k, 1, 1)) || !(q = tensor(CUDNN_DATA_FLOAT, UID_Q, 1, cc->k, 1, 1))))
        goto out;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t sd = 2, dil[2] = {1, 1}, str[2] = {cc->stride, cc->stride}, pad[2] = {cc->pad, cc->pad};
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BE(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BE(cudnnBackendFinalize(conv));
    const float alpha = 1.f, beta = 0.f;
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &ops[0]));
    BE(cudnnBackendSetAttribute(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    BE(cudnnBackendSetAttribute(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wt));
    BE(cudnnBackendSetAttribute(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    BE(cudnnBackendSetAttribute(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                1, &conv));
    BE(cudnnBackendSetAttribute(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    BE(cudnnBackendSetAttribute(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    BE(cudnnBackendFinalize(ops[0]));
    if (stats) {
        const cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
        BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, &ops[1]));
        BE(cudnnBackendSetAttribute(ops[1], CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm));
        BE(cudnnBackendSetAttribute(ops[1], CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &comp));
        BE(cudnnBackendSetAttribute(ops[1], CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
        BE(cudnnBackendSetAttribute(ops[1], CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &s));
        BE(cudnnBackendSetAttribute(ops[1], CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q));
        BE(cudnnBackendFinalize(ops[1]));
    }
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    BE(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops));
    BE(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BE(cudnnBackendFinalize(graph));
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    snprintf(why, sizeof why, "no engine config finalized");
    for (int m = 0; m < 2 && !plan; m++) {
        int64_t got = 0;
        BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
        BE(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
        BE(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]));
        BE(cudnnBackendFinalize(heur));
        for (int i = 0; i < MAX_CFG; i++) BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
        BE(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_CFG, &got, cfg));
        for (int64_t i = 0; i < got && !plan; i++) {
            cudnnBackendDescriptor_t p = NULL;
            int64_t cnt = 0;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p)) continue;
            if (cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
                cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &cfg[i]) ||
                cudnnBackendFinalize(p) ||
                cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, ws)) {
                cudnnBackendDestroyDescriptor(p);
                continue;
            }
            plan = p;
            snprintf(engine, elen, "%s #%lld", m ? "fallback" : "mode A", (long long)i);
        }
        for (int i = 0; i < MAX_CFG; i++) cudnnBackendDestroyDescriptor(cfg[i]), cfg[i] = NULL;
        cudnnBackendDestroyDescriptor(heur), heur = NULL;
    }
out:
    for (int i = 0; i < MAX_CFG; i++)
        if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
    cudnnBackendDescriptor_t all[] = {heur, graph, ops[1], ops[0], conv, q, s, y, wt, x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) cudnnBackendDestroyDescriptor(all[i]);
    return plan; /* the plan keeps what it needs of the graph once finalized */
}

/* GPU ms of one run: median of 5 trials of 5 runs queued back to back. */
static float run_ms(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void *const *ptrs, const int64_t *uids, int n,
                    void *ws, bool *ok) {
    cudnnBackendDescriptor_t vp = NULL;
    float t[5] = {0};
    *ok = false;
    BE(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    BE(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    BE(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    BE(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    BE(cudnnBackendFinalize(vp));
    BE(cudnnBackendExecute(h, plan, vp));
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    for (int k = 0; k < 5; k++) {
        cudaEventRecord(a, 0);
        for (int r = 0; r < 5; r++) BE(cudnnBackendExecute(h, plan, vp));
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t[k], a, b);
        t[k] /= 5;
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    *ok = cudaDeviceSynchronize() == cudaSuccess;
    for (int i = 0; i < 5; i++) /* sort for the median */
        for (int j = i + 1; j < 5; j++)
            if (t[j] < t[i]) { float z = t[i]; t[i] = t[j]; t[j] = z; }
out:
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return t[2];
}

static void one(cudnnHandle_t h, const conv_case *cc, mp_dtype dt) {
    const cudnnDataType_t cdt = dt == MP_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    const int ho = (cc->h + 2 * cc->pad - cc->r) / cc->stride + 1, wo = (cc->w + 2 * cc->pad - cc->r) / cc->stride + 1;
    const size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w, nw = (size_t)cc->k * cc->c * cc->r * cc->r,
                 ny = (size_t)cc->n * cc->k * ho * wo;
    int64_t ws_f = 0, ws_p = 0;
    char ef[64] = "-", ep[64] = "-";
    cudnnBackendDescriptor_t pf = build_plan(h, cc, cdt, true, &ws_f, ef, sizeof ef);
    char why_f[512];
    snprintf(why_f, sizeof why_f, "%s", why);
    cudnnBackendDescriptor_t pp = build_plan(h, cc, cdt, false, &ws_p, ep, sizeof ep);
    if (!pf) {
        printf("%-22s %-4s conv+genstats: NO ENGINE (%s); plain conv %s\n", cc->name, mp_dtype_name(dt), why_f,
               pp ? ep : "none either");
        if (pp) cudnnBackendDestroyDescriptor(pp);
        return;
    }
    float *hx = malloc(nx * sizeof *hx), *hw = malloc(nw * sizeof *hw), *hy = malloc(ny * sizeof *hy);
    uint16_t *bits = malloc((nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw)) * sizeof *bits);
    mp_rng r;
    mp_rng_seed(&r, 3);
    for (size_t i = 0; i < nx; i++) hx[i] = (float)mp_rng_normal(&r);
    for (size_t i = 0; i < nw; i++) hw[i] = (float)mp_rng_normal(&r) * 0.1f;
    void *dx = NULL, *dw = NULL, *dy = NULL, *dws = NULL;
    float *ds = NULL;
    MP_ASSERT(cudaMalloc(&dx, nx * 2) == cudaSuccess && cudaMalloc(&dw, nw * 2) == cudaSuccess &&
              cudaMalloc(&dy, ny * 2) == cudaSuccess && cudaMalloc((void **)&ds, 2 * cc->k * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&dws, (size_t)(ws_f > ws_p ? ws_f : ws_p) + 16) == cudaSuccess);
    mp_store_f32(bits, dt, hx, (int64_t)nx);
    cudaMemcpy(dx, bits, nx * 2, cudaMemcpyHostToDevice);
    mp_store_f32(bits, dt, hw, (int64_t)nw);
    cudaMemcpy(dw, bits, nw * 2, cudaMemcpyHostToDevice);
    void *ptrs[5] = {dx, dw, dy, ds, ds + cc->k};
    const int64_t uids[5] = {UID_X, UID_W, UID_Y, UID_S, UID_Q};
    bool ok_f = false, ok_p = false;
    const float t_f = run_ms(h, pf, ptrs, uids, 5, dws, &ok_f);
    const float t_p = pp ? run_ms(h, pp, ptrs, uids, 3, dws, &ok_p) : 0;
    CHECK(ok_f, "%s %s: the fused graph finalized but did not run: %s", cc->name, mp_dtype_name(dt), why);
    if (ok_f) {
        const float t_again = run_ms(h, pf, ptrs, uids, 5, dws, &ok_f); /* y and the sums of this last run */
        (void)t_again;
        float *hs = malloc(2 * cc->k * sizeof *hs);
        cudaMemcpy(bits, dy, ny * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(hs, ds, 2 * cc->k * sizeof(float), cudaMemcpyDeviceToHost);
        mp_load_f32(hy, bits, dt, (int64_t)ny);
        double worst = 0;
        for (int k = 0; k < cc->k; k++) {
            double s = 0, q = 0, a = 0;
            for (size_t m = 0; m < ny / cc->k; m++) { /* NHWC: channel k of row m */
                const double v = hy[m * cc->k + k];
                s += v, q += v * v, a += fabs(v);
            }
            const double es = fabs(hs[k] - s) / (a > 0 ? a : 1), eq = fabs(hs[cc->k + k] - q) / (q > 0 ? q : 1);
            if (es > worst) worst = es;
            if (eq > worst) worst = eq;
        }
        printf("%-22s %-4s conv+genstats: %s, %.3f ms (workspace %lld B); plain conv %s %.3f ms; sums vs y read back: "
               "%.2e\n",
               cc->name, mp_dtype_name(dt), ef, t_f, (long long)ws_f, pp ? ep : "none", t_p, worst);
        CHECK(worst <= 1e-3, "%s %s: genstats sums %.3e from y's own (f32 accumulation of %zu rows)", cc->name,
              mp_dtype_name(dt), worst, ny / cc->k);
        free(hs);
    }
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(ds), cudaFree(dws);
    free(hx), free(hw), free(hy), free(bits);
    cudnnBackendDestroyDescriptor(pf);
    if (pp) cudnnBackendDestroyDescriptor(pp);
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
        {"layer4 3x3 512 s1", 512, 512, 4, 4, 512, 3, 1, 1},  {"cnn10-like 3x3 128", 128, 128, 16, 16, 128, 3, 1, 1}};
    const mp_dtype dts[] = {MP_DTYPE_BF16, MP_DTYPE_F16};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t d = 0; d < 2; d++) one(h, &cases[i], dts[d]);
    cudnnDestroy(h);
    return test_summary("test_cuda_conv_genstats");
}
