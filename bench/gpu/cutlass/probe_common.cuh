/* probe_common.cuh — what the CUTLASS probes share: resnet18 b512's 3x3 layers,
 * reproducible device fills, error checks and the median timer. Each probe
 * sets probe::tool to its own name (error lines start with it). */
#ifndef MP_BENCH_CUTLASS_PROBE_COMMON_CUH
#define MP_BENCH_CUTLASS_PROBE_COMMON_CUH

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/median.h"
#include "cutlass/cutlass.h" /* cutlass::Status */

/* a named namespace: nvcc's generated host code cannot name kernels of an
 * unnamed one once cute's names are in scope */
namespace probe {

static const char *tool = "probe";

struct Layer {
    const char *name;
    int n, h, w, c, k, r, stride;
};

/* resnet18 at batch 512 on 3x32x32 (the peer's cell): each stage's 3x3
 * convolution with stride 1 (its blocks' second convolution, whose input is
 * relu(bn1(...)): a fusion's place) and each stage's first, strided one. */
static const Layer LAYERS[] = {
    {"layer1 3x3 64 s1", 512, 32, 32, 64, 64, 3, 1},     {"layer2 3x3 128 s1", 512, 16, 16, 128, 128, 3, 1},
    {"layer3 3x3 256 s1", 512, 8, 8, 256, 256, 3, 1},     {"layer4 3x3 512 s1", 512, 4, 4, 512, 512, 3, 1},
    {"layer2_0 3x3 64->128 s2", 512, 32, 32, 64, 128, 3, 2}, {"layer3_0 3x3 128->256 s2", 512, 16, 16, 128, 256, 3, 2},
    {"layer4_0 3x3 256->512 s2", 512, 8, 8, 256, 512, 3, 2},
};

/* Output height or width of an input extent (padding r / 2). */
static inline int out_extent(int in, const Layer &l) { return (in + 2 * (l.r / 2) - l.r) / l.stride + 1; }

/* offset + scale * [-1, 1) from an integer hash: reproducible, no host copy. */
template <class T> __global__ void fill_kernel(T *p, size_t n, unsigned seed, float scale, float offset) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned v = (unsigned)i * 2654435761u ^ seed;
        v ^= v >> 15, v *= 2246822519u, v ^= v >> 13;
        p[i] = T(offset + scale * ((float)(v & 0xFFFF) / 32768.0f - 1.0f));
    }
}

static inline bool check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    fprintf(stderr, "%s: %s: %s\n", tool, what, cudaGetErrorString(e));
    return false;
}

/* Every probe's convolution inputs: x in [-1, 1), w in [-0.05, 0.05). */
template <class T> bool fill_conv_inputs(T *x, size_t nx, T *w, size_t nw) {
    fill_kernel<T><<<1024, 256>>>(x, nx, 1u, 1.0f, 0.0f);
    fill_kernel<T><<<1024, 256>>>(w, nw, 2u, 0.05f, 0.0f);
    return check(cudaDeviceSynchronize(), "fill");
}

/* Median GPU ms of reps runs of launch() (three warm-ups first), which
 * launches on stream; < 0 when a launch fails. queue > 1: each sample times
 * that many launches queued between its two events, divided by queue, so
 * that the host's launch gap before a short kernel is not counted in. */
template <class F> double time_ms(F launch, int reps, int queue = 1, cudaStream_t stream = 0) {
    cudaEvent_t a, b;
    if (!check(cudaEventCreate(&a), "event") || !check(cudaEventCreate(&b), "event")) return -1;
    std::vector<float> t;
    bool ok = true;
    for (int i = 0; ok && i < 3; i++) ok = launch();
    for (int i = 0; ok && i < reps; i++) {
        cudaEventRecord(a, stream);
        for (int q = 0; ok && q < queue; q++) ok = launch();
        cudaEventRecord(b, stream);
        float ms = 0;
        ok = ok && check(cudaEventSynchronize(b), "timed run") && check(cudaEventElapsedTime(&ms, a, b), "event time");
        t.push_back(ms / queue);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (!ok || t.empty()) return -1;
    return mp_median_float(t.data(), (int)t.size());
}

/* Median ms of one CUTLASS device-level operator (2.x or 3.x: both have
 * can_implement, get_workspace_size, initialize, run) on args, with the
 * workspace ws of ws_bytes; < 0 where it cannot run the problem there. */
template <class Op> double time_op(const typename Op::Arguments &args, void *ws, size_t ws_bytes, int reps) {
    Op op;
    if (op.can_implement(args) != cutlass::Status::kSuccess || Op::get_workspace_size(args) > ws_bytes) return -1;
    if (op.initialize(args, ws) != cutlass::Status::kSuccess) return -1;
    return time_ms([&] { return op.run() == cutlass::Status::kSuccess; }, reps);
}

/* The first GPU's properties into *prop, for the sm_90a probes: false, with
 * a line on stderr, where there is no GPU or it is not sm_90. */
static inline bool open_sm90(cudaDeviceProp *prop) {
    if (!check(cudaGetDeviceProperties(prop, 0), "no GPU")) return false;
    if (prop->major == 9) return true;
    fprintf(stderr, "%s: %s is sm_%d%d; these kernels need sm_90\n", tool, prop->name, prop->major, prop->minor);
    return false;
}

/* The probes' command line: --reps N (at least 1; default 20), where layer
 * is non-null --layer TEXT (into *layer; else it stays null), or --help.
 * False when the program should stop with *status (0 after --help, 2 after
 * anything else, with usage, the lines after "usage: <tool>", on stderr). */
static inline bool parse_reps(int argc, char **argv, const char *usage, int *reps, int *status,
                              const char **layer = nullptr) {
    *reps = 20;
    if (layer) *layer = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            *reps = atoi(argv[++i]);
            continue;
        }
        if (layer && !strcmp(argv[i], "--layer") && i + 1 < argc && argv[i + 1][0]) {
            *layer = argv[++i];
            continue;
        }
        fprintf(stderr, "usage: %s [--reps N (>= 1)]%s\n%s", tool,
                layer ? " [--layer TEXT (only the layers whose name holds it)]" : "", usage);
        *status = !strcmp(argv[i], "--help") ? 0 : 2;
        return false;
    }
    return true;
}

} // namespace probe

#endif
