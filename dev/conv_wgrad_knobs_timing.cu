/* conv_wgrad_knobs_timing.cu — whether cuDNN's own backward-filter engines
 * run wrn-28-10's 3x3 layers faster with other knob values than its
 * heuristics give them (split-K, tiles, stages, ...).
 *
 * The library's search times the engine configs cuDNN's heuristics rank
 * (src/cuda/conv_engine.cu), each with the knob values the heuristic chose.
 * wrn-28-10 b128's 160-channel backward-filter runs at 56 % of its forward's
 * rate (bench/NOTES.md v0.57): few output tiles, a long reduction. For
 * those layers and resnet18 b512's and resnet50 b128's 3x3 ones, this
 * program starts from each of the heuristics' first configs (modes A and B)
 * and walks its knobs one at a time over their whole range (min to max by
 * stride, at most 16 values), keeping a value when it is faster, twice
 * over; each result is checked against the first config's dW.
 *
 *   nvcc -O2 -arch=sm_90 dev/conv_wgrad_knobs_timing.cu -lcudnn -o /tmp/knobs
 *   /tmp/knobs          (the 3x3 stride-1 layers of the three unmet cells, bf16 NHWC, f32 sums)
 * Prints per layer: each start's engine and time, the best knob values found
 * and their time (both timed again side by side), and the largest
 * |difference| relative to the largest |dW|. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"

typedef cudnnBackendDescriptor_t Desc;
enum { UID_X = 'x', UID_W = 'w', UID_Y = 'y' };

struct Layer {
    const char *name;
    int n, c, k, h;
};

/* a 4-d channels-last tensor (dims n, c, h, w; strides of NHWC / KRSC) */
static Desc tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
    const cudnnDataType_t dt = CUDNN_DATA_BFLOAT16;
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, align = 16;
    Desc t;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    CKDNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    CKDNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    CKDNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    CKDNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CKDNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CKDNN(cudnnBackendFinalize(t));
    return t;
}

/* the backward-filter graph of a 3x3 stride-1 pad-1 convolution */
static Desc wgrad_graph(cudnnHandle_t h, const Layer &l) {
    const Desc x = tensor(UID_X, l.n, l.c, l.h, l.h), w = tensor(UID_W, l.k, l.c, 3, 3),
               y = tensor(UID_Y, l.n, l.k, l.h, l.h);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, one[2] = {1, 1};
    Desc conv, op, graph;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, one));
    CKDNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, one));
    CKDNN(cudnnBackendFinalize(conv));
    const float alpha = 1, beta = 0;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, &op));
    CKDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CKDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CKDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CKDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CKDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    CKDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    CKDNN(cudnnBackendFinalize(op));
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    CKDNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    CKDNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CKDNN(cudnnBackendFinalize(graph));
    return graph; /* the tensors, conv and op stay alive with it for the program's run */
}

/* An engine (global index) and knob values: what a config is made of. */
struct Choice {
    int64_t engine = -1;
    std::vector<std::pair<cudnnBackendKnobType_t, int64_t>> knobs;
};

/* the heuristic's first config in mode, as a Choice (engine -1 when none) */
static Choice heuristic_first(Desc graph, cudnnBackendHeurMode_t mode) {
    Choice ch;
    Desc heur, cfg, eng;
    int64_t cnt = 0;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CKDNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    CKDNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CKDNN(cudnnBackendFinalize(heur));
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &cfg) ||
        cnt < 1)
        return ch;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    CKDNN(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng));
    CKDNN(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &ch.engine));
    Desc kc[CUDNN_KNOB_TYPE_COUNTS];
    for (Desc &d : kc) CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &d));
    int64_t nk = 0;
    CKDNN(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   CUDNN_KNOB_TYPE_COUNTS, &nk, kc));
    for (int64_t i = 0; i < nk; i++) {
        cudnnBackendKnobType_t t;
        int64_t v;
        CKDNN(cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &t));
        CKDNN(cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &v));
        ch.knobs.push_back({t, v});
    }
    return ch;
}

struct KnobRange {
    cudnnBackendKnobType_t type;
    int64_t lo, hi, stride;
};

/* the engine's knobs and their ranges */
static std::vector<KnobRange> knob_ranges(Desc graph, int64_t engine) {
    std::vector<KnobRange> out;
    Desc eng;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    CKDNN(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    CKDNN(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &engine));
    if (cudnnBackendFinalize(eng)) return out;
    Desc ki[CUDNN_KNOB_TYPE_COUNTS];
    for (Desc &d : ki) CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, &d));
    int64_t nk = 0, cnt;
    CKDNN(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   CUDNN_KNOB_TYPE_COUNTS, &nk, ki));
    for (int64_t i = 0; i < nk; i++) {
        KnobRange r;
        CKDNN(cudnnBackendGetAttribute(ki[i], CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &r.type));
        CKDNN(cudnnBackendGetAttribute(ki[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &r.lo));
        CKDNN(cudnnBackendGetAttribute(ki[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &r.hi));
        CKDNN(cudnnBackendGetAttribute(ki[i], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &cnt, &r.stride));
        if (r.hi > r.lo && r.stride > 0) out.push_back(r);
    }
    return out;
}

/* a finalized plan of the choice, or NULL where cuDNN refuses it; *ws its workspace bytes */
static Desc plan_of(cudnnHandle_t h, Desc graph, const Choice &ch, int64_t *ws) {
    Desc eng, cfg, plan;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    CKDNN(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    CKDNN(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &ch.engine));
    if (cudnnBackendFinalize(eng)) return NULL;
    std::vector<Desc> kc;
    for (const auto &k : ch.knobs) {
        Desc d;
        CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &d));
        CKDNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &k.first));
        CKDNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &k.second));
        CKDNN(cudnnBackendFinalize(d));
        kc.push_back(d);
    }
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    CKDNN(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng));
    if (!kc.empty())
        CKDNN(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                       (int64_t)kc.size(), kc.data()));
    if (cudnnBackendFinalize(cfg)) return NULL;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    CKDNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CKDNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    int64_t cnt;
    if (cudnnBackendFinalize(plan) ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, ws)) {
        cudnnBackendDestroyDescriptor(plan);
        return NULL;
    }
    return plan;
}

struct Buffers {
    __nv_bfloat16 *x, *y, *w;
    void *ws;
    size_t ws_bytes;
};

/* median ms of 9 trials of 4 runs of plan (< 0 where a run fails), dW in b.w */
static float time_plan(cudnnHandle_t h, Desc plan, const Buffers &b) {
    void *ptrs[3] = {b.x, b.w, b.y};
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    Desc vp;
    CKDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CKDNN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    CKDNN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    CKDNN(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.ws));
    CKDNN(cudnnBackendFinalize(vp));
    float result = -1;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    bool ok = cudnnBackendExecute(h, plan, vp) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendExecute(h, plan, vp) == CUDNN_STATUS_SUCCESS;
    std::vector<float> t;
    for (int k = 0; k < 9 && ok; k++) {
        CK(cudaEventRecord(e0));
        for (int r = 0; r < 4 && ok; r++) ok = cudnnBackendExecute(h, plan, vp) == CUDNN_STATUS_SUCCESS;
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms / 4);
    }
    if (ok) std::sort(t.begin(), t.end()), result = t[t.size() / 2];
    cudaEventDestroy(e0), cudaEventDestroy(e1), cudnnBackendDestroyDescriptor(vp);
    return result;
}

/* the choice's time on b, < 0 where cuDNN refuses it or its workspace is over b's */
static float time_choice(cudnnHandle_t h, Desc graph, const Choice &ch, const Buffers &b) {
    int64_t ws = 0;
    const Desc plan = plan_of(h, graph, ch, &ws);
    if (!plan) return -1;
    const float t = ws <= (int64_t)b.ws_bytes ? time_plan(h, plan, b) : -1;
    cudnnBackendDestroyDescriptor(plan);
    return t;
}

/* max |a - b| over max |b| */
static float rel_diff(const __nv_bfloat16 *a, const __nv_bfloat16 *b, size_t n) {
    std::vector<__nv_bfloat16> ha(n), hb(n);
    CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
    float d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        d = fmaxf(d, fabsf(x - y)), m = fmaxf(m, fabsf(y));
    }
    return d / fmaxf(m, 1e-30f);
}

static void print_choice(const Choice &ch) {
    printf("engine %lld", (long long)ch.engine);
    for (const auto &k : ch.knobs) printf(" k%d=%lld", (int)k.first, (long long)k.second);
}

int main() {
    const Layer layers[] = {{"wrn-28-10 b128 layer1 3x3 160 at 32x32", 128, 160, 160, 32},
                            {"wrn-28-10 b128 layer2 3x3 320 at 16x16", 128, 320, 320, 16},
                            {"wrn-28-10 b128 layer3 3x3 640 at 8x8", 128, 640, 640, 8},
                            {"resnet18 b512 layer1 3x3 64 at 32x32", 512, 64, 64, 32},
                            {"resnet18 b512 layer2 3x3 128 at 16x16", 512, 128, 128, 16},
                            {"resnet18 b512 layer3 3x3 256 at 8x8", 512, 256, 256, 8},
                            {"resnet18 b512 layer4 3x3 512 at 4x4", 512, 512, 512, 4},
                            {"resnet50 b128 layer1 3x3 64 at 32x32", 128, 64, 64, 32},
                            {"resnet50 b128 layer2 3x3 128 at 16x16", 128, 128, 128, 16},
                            {"resnet50 b128 layer3 3x3 256 at 8x8", 128, 256, 256, 8},
                            {"resnet50 b128 layer4 3x3 512 at 4x4", 128, 512, 512, 4}};
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("conv_wgrad_knobs_timing on %s, cuDNN %zu: backward-filter, bf16 NHWC, f32 sums; ms, median of 9 trials of "
           "4 runs; knobs as kTYPE=value (cudnnBackendKnobType_t)\n\n",
           prop.name, cudnnGetVersion());
    cudnnHandle_t h;
    CKDNN(cudnnCreate(&h));
    Buffers b{};
    b.ws_bytes = (size_t)512 << 20;
    CK(cudaMalloc(&b.ws, b.ws_bytes));
    for (const Layer &l : layers) {
        const size_t nx = (size_t)l.n * l.h * l.h * l.c, ny = (size_t)l.n * l.h * l.h * l.k, nw = (size_t)l.k * 9 * l.c;
        __nv_bfloat16 *ref;
        CK(cudaMalloc(&b.x, nx * 2));
        CK(cudaMalloc(&b.y, ny * 2));
        CK(cudaMalloc(&b.w, nw * 2));
        CK(cudaMalloc(&ref, nw * 2));
        fill_kernel<<<1024, 256>>>(b.x, (long long)nx, 17u, 1.0f);
        fill_kernel<<<1024, 256>>>(b.y, (long long)ny, 91u, 0.01f);
        CK(cudaGetLastError());
        const Desc graph = wgrad_graph(h, l);
        printf("%s\n", l.name);
        bool have_ref = false;
        float worst = 0;
        for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B}) {
            Choice best = heuristic_first(graph, mode);
            if (best.engine < 0) continue;
            float t_best = time_choice(h, graph, best, b);
            printf("  heuristic %s first: ", mode == CUDNN_HEUR_MODE_A ? "A" : "B");
            print_choice(best);
            printf(": %.4f ms\n", t_best);
            if (t_best < 0) continue;
            if (!have_ref) {
                CK(cudaMemcpy(ref, b.w, nw * 2, cudaMemcpyDeviceToDevice));
                have_ref = true;
            }
            const Choice first = best;
            int tried = 0;
            const std::vector<KnobRange> ranges = knob_ranges(graph, best.engine);
            for (int sweep = 0; sweep < 2; sweep++)
                for (const KnobRange &r : ranges) {
                    const int64_t step = std::max<int64_t>(r.stride, (r.hi - r.lo) / 15 / r.stride * r.stride);
                    for (int64_t v = r.lo; v <= r.hi; v += step) {
                        Choice c = best;
                        bool found = false;
                        for (auto &k : c.knobs)
                            if (k.first == r.type) k.second = v, found = true;
                        if (!found) c.knobs.push_back({r.type, v});
                        const float t = time_choice(h, graph, c, b);
                        tried++;
                        if (t < 0) continue;
                        worst = std::max(worst, rel_diff(b.w, ref, nw));
                        if (t < 0.98f * t_best) best = c, t_best = t;
                    }
                }
            /* the walk kept the lowest of noisy times: both timed again, side by side */
            const float again_first = time_choice(h, graph, first, b), again_best = time_choice(h, graph, best, b);
            printf("  after %d configs (%zu knobs, two sweeps): ", tried, ranges.size());
            print_choice(best);
            printf(": %.4f ms in the walk; timed again: %.4f ms against the first config's %.4f (%.2fx)\n", t_best,
                   again_best, again_first, again_best / again_first);
        }
        printf("  largest |dW - first config's dW| / max |dW| over every config that ran: %.2g\n\n", worst);
        cudaFree(b.x), cudaFree(b.y), cudaFree(b.w), cudaFree(ref);
    }
    return 0;
}
