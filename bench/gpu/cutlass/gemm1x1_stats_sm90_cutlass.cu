/* gemm1x1_stats_sm90_cutlass.cu — can batch norm's statistics ride in the
 * epilogue of resnet50's 1x1 convolutions for free?
 *
 * resnet50 spends half its step in batch norm (NOTES v0.26), and two of a
 * bottleneck's three convolutions (and its projection shortcut) are 1x1:
 * plain GEMMs over channels-last rows (M = pixels, K = input channels,
 * N = output channels). A GEMM's epilogue holds every output value in
 * registers, so it could sum y and y * y per channel on the way out and
 * save batch norm's statistics pass (one read of y). That pays only if the
 * GEMM with those sums runs as fast as the plain one cuDNN gives us.
 *
 * Per layer, bf16 in and out, f32 accumulation, median ms:
 *  - cuBLASLt's plain GEMM as the library's linear runs it (linear_cuda.h);
 *  - CUTLASS 3's Hopper GEMM (TMA, warpgroup MMA, warp-specialized,
 *    persistent), plain, the fastest of several tiles;
 *  - the same with an epilogue visitor tree summing the f32 outputs and
 *    their squares per channel, two ways (Sums): each warp adding into
 *    global f32 vectors (atomics), or each CTA storing its tile's sums as a
 *    row, and the library's column sum adding those rows (timed with the
 *    GEMM, and the GEMM with its rows timed alone too);
 *  - the plain GEMM again with A fed to the MMA through registers (FeedA),
 *    the base a batch-norm apply in the GEMM's prologue would start from;
 *  - that register-sourced GEMM with the apply in its prologue ("rmem +
 *    apply", FeedA::rmem_apply, gemm1x1_apply_mainloop.cuh): each k-block's
 *    A fragment, once copied from shared memory to registers, becomes
 *    bf16(max(0, a * scale[k] + bias[k])) before its MMA (the previous
 *    layer's batch norm + ReLU; scale in [0.5, 1.5), bias in [-0.5, 0.5),
 *    so about half of A is clipped), printed with its ratio to the plain
 *    register-sourced column: the apply's own cost;
 *  - the same apply, "prefetched" (FeedA::rmem_apply_prefetch,
 *    ApplySchedule::prefetch): each k tile's k-block 0 is loaded from
 *    shared memory during the k tile before (when its stage is full by
 *    then), so that a k tile's first MMA waits only for the transform,
 *    not for the stage barrier and the load too; with its ratio to the
 *    plain register-sourced column beside the other's;
 *  - the prefetched apply again with batch norm's vectors loaded
 *    kDeepVecAhead k-blocks (4, one k tile) ahead of their transform
 *    instead of 2 (FeedA::rmem_apply_prefetch_deep, ApplyAMainloop's
 *    VecAhead): whether those loads' latency (L2, when they miss L1 under
 *    the TMA traffic) stalls each k-block's transform on the MMA-bound,
 *    large-K layers; only on fastest_apply_tiles' five tiles (the four
 *    that won the apply columns most often and 128x128 coop, to keep the
 *    one TU's build time down), with its
 *    ratio to the plain register-sourced column;
 *  - the same apply done in shared memory instead ("smem apply",
 *    FeedA::smem_apply, gemm1x1_smem_apply_mainloop.cuh): a consumer
 *    mainloop of our own over CUTLASS's shared-memory-sourced collective
 *    (the plain column's), whose MMA warpgroups transform their rows of A
 *    in each stage in place before that k tile's MMAs read it from shared
 *    memory, so that one k tile's transform overlaps the MMAs of the k tile
 *    before and no register operand feeds the MMAs (the register-sourced
 *    apply's per-k-tile bubble, NOTES v0.62); on the same five tiles as
 *    the column before, with its ratio to the CUTLASS plain column (its
 *    shared-memory-sourced analogue);
 *  - the library's batch-norm statistics pass (mp_bn_fast_stats) on y.
 * The saving column is cuBLASLt + statistics pass - the fused form with
 * tile rows: what the fusion would give a layer (> 0: faster). Every
 * result is checked: y against cuBLASLt's y (written over first, so a
 * configuration that leaves y unwritten fails), the fused sums against f64
 * sums of cuBLASLt's y; the four apply columns' y against cuBLASLt's y of x
 * applied beforehand by a plain kernel (x_applied, the same f32 fma and
 * rounding), with the same tolerance. Each timed sample queues 4 launches
 * (no host launch gap inside it, as in the step's CUDA graph). Not covered: the
 * stride-2 shortcuts (not plain GEMMs) and the library's other batch-norm
 * forms (one kernel, cuDNN's).
 *
 * Built only with the CUDA backend, CUTLASS's headers (-DMP_CUTLASS_DIR) and
 * sm_90 among the CUDA architectures (it compiles for sm_90a). */
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <vector>

#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "cuda/batchnorm2d_fast.h"
#include "cuda/lib_kernels.h"
#include "cuda/linear_cuda.h"
#include "gemm1x1_sm90_kernels.cuh"
#include "probe_common.cuh"

namespace probe { /* cute's names come with gemm1x1_sm90_kernels.cuh's */

/* The fused sums' tolerances (sums_error): a sum within 2e-2 of its sum of
 * squares' root (about four of the reference's rounding spreads, the most
 * over 2048 channels), a sum of squares within 1e-3 of itself (the
 * roundings leave ~1e-5). */
constexpr double kSumTolerance = 2e-2, kSquaresTolerance = 1e-3;
constexpr int kQueue = 4; /* launches a timed sample queues (probe_common.cuh's time_ms) */

/* A 1x1 convolution at batch 512 on resnet50's 3x32x32 cell, as a GEMM, and
 * how many of it the net has. */
struct Gemm1x1 {
    const char *name;
    int m, k, n, count;
};

static const Gemm1x1 GEMMS_1X1[] = {
    {"layer1 conv1 256->64", 512 * 32 * 32, 256, 64, 2},
    {"layer1 conv1 (first) 64->64", 512 * 32 * 32, 64, 64, 1},
    {"layer1 conv3/shortcut 64->256", 512 * 32 * 32, 64, 256, 4},
    {"layer2 conv1 (first) 256->128", 512 * 32 * 32, 256, 128, 1},
    {"layer2 conv1 512->128", 512 * 16 * 16, 512, 128, 3},
    {"layer2 conv3 128->512", 512 * 16 * 16, 128, 512, 4},
    {"layer3 conv1 (first) 512->256", 512 * 16 * 16, 512, 256, 1},
    {"layer3 conv1 1024->256", 512 * 8 * 8, 1024, 256, 5},
    {"layer3 conv3 256->1024", 512 * 8 * 8, 256, 1024, 6},
    {"layer4 conv1 (first) 1024->512", 512 * 8 * 8, 1024, 512, 1},
    {"layer4 conv1 2048->512", 512 * 4 * 4, 2048, 512, 2},
    {"layer4 conv3 512->2048", 512 * 4 * 4, 512, 2048, 3},
    /* not resnet50's (count 0: in no saving): M and K off every tile, so that
       the last row tiles and k tiles (the apply mainloops' row >= M and
       k >= K paths) are checked too */
    {"tails 8000 x 1000 -> 256", 8000, 1000, 256, 0},
};

/* Everything runs on the library context's stream st (non-blocking: work
 * on the legacy default stream is not ordered with it). */
struct Buffers {
    mp_cuda_ctx *ctx;
    cudaStream_t st;
    Elem *x, *w, *y, *y_ref;
    float *scale, *bias; /* FeedA::rmem_apply's batch norm, per input channel k */
    Elem *x_applied;     /* bf16(max(0, x * scale[k] + bias[k])), the apply's reference input */
    Elem *y_ref_applied; /* cuBLASLt's y of x_applied */
    float *sums; /* the fused forms' sums, then their sums of squares at squares_at (n, or n padded to tile_n) */
    double *sums_ref; /* the reference kernel's, from cuBLASLt's y */
    float *part;     /* the statistics pass's partials */
    float *tile_part; /* Sums::tile_partials's rows: the sums', then the squares' */
    size_t tile_part_floats; /* of each */
    void *colsum_ws; /* mp_cuda_lib_colsum's workspace, for the tile rows */
    float *worst;
    void *ws;
    size_t ws_bytes;
    int sms;
};

/* Where a configuration leaves its sums of squares in Buffers::sums: after
 * n sums, or for Sums::tile_partials after its padded row's. */
template <class G> int padded_n(const Gemm1x1 &l) { return (l.n + G::TileN - 1) / G::TileN * G::TileN; }
template <class G> int squares_at(const Gemm1x1 &l) {
    return G::Stats == Sums::tile_partials ? padded_n<G>(l) : l.n;
}

/* The sums of a Sums::tile_partials configuration's last run, from its
 * rows, by the library's column sum (lib_kernels.h): the sums' into b.sums,
 * the squares' at squares_at (the padding columns summed too, unread). */
template <class G> bool reduce_partials(const Gemm1x1 &l, const Buffers &b) {
    const long long rows = (l.m + G::TileM - 1) / G::TileM;
    const int stride = padded_n<G>(l);
    if (mp_cuda_lib_colsum(b.ctx, b.tile_part, MP_DTYPE_F32, rows, stride, b.sums, b.colsum_ws, l.name) != MP_OK ||
        mp_cuda_lib_colsum(b.ctx, b.tile_part + b.tile_part_floats, MP_DTYPE_F32, rows, stride,
                           b.sums + squares_at<G>(l), b.colsum_ws, l.name) != MP_OK) {
        fprintf(stderr, "%s: %s\n", tool, mp_last_error());
        return false;
    }
    return true;
}

/* Median ms of one configuration on layer l (< 0 where it cannot run it);
 * with Stats, the sums of its last run are left in b.sums, which is zeroed
 * before that run (Sums::tile_partials: its timed runs include reducing
 * the rows, and the check run's rows are written over with NaN first, so
 * a row left unwritten fails; *gemm_alone gets the median of the GEMM with
 * its rows but without their sum, what a finalize reading the rows would
 * pay). */
template <class G> double run(const Gemm1x1 &l, const Buffers &b, int reps, double *gemm_alone) {
    using Device = typename G::Device;
    using Kernel = typename Device::GemmKernel;
    auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(l.m, l.k, 1));
    auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(l.n, l.k, 1));
    auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(l.m, l.n, 1));
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = b.sms;
    typename Device::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm, {l.m, l.n, l.k, 1}, {}, {{}, nullptr, sd, b.y, sd}, hw};
    args.mainloop.ptr_A = b.x;
    args.mainloop.dA = sa;
    args.mainloop.ptr_B = b.w;
    args.mainloop.dB = sb;
    if constexpr (applies_bn(G::Feeds)) {
        args.mainloop.scale = b.scale;
        args.mainloop.bias = b.bias;
    }
    constexpr bool partials = G::Stats == Sums::tile_partials;
    const size_t part_floats = (size_t)((l.m + G::TileM - 1) / G::TileM) * padded_n<G>(l);
    if constexpr (G::Stats == Sums::none) {
        args.epilogue.thread.alpha = 1.0f;
        args.epilogue.thread.beta = 0.0f;
    } else {
        if (partials && part_floats > b.tile_part_floats) return -1;
        /* children first, then the node: {sum's {acc fetch, sum}, squares' {{acc fetch, square}, sum}, first} */
        args.epilogue.thread = {
            {{}, {partials ? b.tile_part : b.sums, 0.0f, {}}},
            {{{}, {}}, {partials ? b.tile_part + b.tile_part_floats : b.sums + squares_at<G>(l), 0.0f, {}}},
            {}};
    }
    Device op;
    if (op.can_implement(args) != cutlass::Status::kSuccess || Device::get_workspace_size(args) > b.ws_bytes) return -1;
    if (op.initialize(args, b.ws, b.st) != cutlass::Status::kSuccess) return -1;
    const double t = time_ms(
        [&] { return op.run(b.st) == cutlass::Status::kSuccess && (!partials || reduce_partials<G>(l, b)); }, reps,
        kQueue, b.st);
    if (t < 0) return t;
    if (partials) *gemm_alone = time_ms([&] { return op.run(b.st) == cutlass::Status::kSuccess; }, reps, kQueue, b.st);
    /* one more run for the check, from zeroed sums and a y every configuration
     * before wrote over (0x7F7F: 3.4e38 in bf16), so a y left unwritten fails */
    if (!check(cudaMemsetAsync(b.sums, 0, sizeof(float) * (squares_at<G>(l) + l.n), b.st), "sums") ||
        !check(cudaMemsetAsync(b.y, 0x7F, (size_t)l.m * l.n * sizeof(Elem), b.st), "y") ||
        (partials &&
         !check(cudaMemsetAsync(b.tile_part, 0xFF, 2 * b.tile_part_floats * sizeof(float), b.st), "rows")) ||
        op.run(b.st) != cutlass::Status::kSuccess || (partials && !reduce_partials<G>(l, b)) ||
        !check(cudaStreamSynchronize(b.st), "check run"))
        return -1;
    return t;
}

/* The reference: per-channel sums of cuBLASLt's y and of its squares, in
 * f64 (a thread a column, rows split over blocks). They differ from sums of
 * the f32 accumulators only by y's bf16 rounding, which averages out. */
__global__ void reference_sums_kernel(const Elem *y, int m, int n, int rows_per_block, double *sums) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= n) return;
    const int r0 = blockIdx.x * rows_per_block, r1 = min(m, r0 + rows_per_block);
    double s = 0, s2 = 0;
    for (int r = r0; r < r1; r++) {
        const double v = float(y[(size_t)r * n + c]);
        s += v, s2 += v * v;
    }
    atomicAdd(&sums[c], s);
    atomicAdd(&sums[n + c], s2);
}

/* Largest |a - b| / max(1, |b|) over count values of two bf16 arrays; a
 * non-finite difference (a NaN or infinity in a) counts as infinity. */
__global__ void max_rel_diff_kernel(const Elem *a, const Elem *b, size_t count, float *worst) {
    float m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        const float d = fabsf(float(a[i]) - float(b[i])) / fmaxf(1.f, fabsf(float(b[i])));
        m = fmaxf(m, isfinite(d) ? d : INFINITY);
    }
    atomicMax((int *)worst, __float_as_int(m));
}

/* The largest relative difference of y from want (max_rel_diff_kernel). */
static float y_error(const Gemm1x1 &l, const Buffers &b, const Elem *want) {
    float err = -1;
    if (!check(cudaMemsetAsync(b.worst, 0, sizeof(float), b.st), "check")) return -1;
    max_rel_diff_kernel<<<4 * b.sms, 256, 0, b.st>>>(b.y, want, (size_t)l.m * l.n, b.worst);
    if (!check(cudaMemcpyAsync(&err, b.worst, sizeof err, cudaMemcpyDeviceToHost, b.st), "y check") ||
        !check(cudaStreamSynchronize(b.st), "y check"))
        return -1;
    return err;
}

/* The fused sums' largest difference from the reference's, in tolerances
 * (> 1: wrong): each sum of squares (in b.sums from squares_at) against
 * itself, each sum against the root of its sum of squares (a sum of either
 * sign cancels; the reference's bf16 rounding moves it by about 1e-3 of
 * that root). A non-finite sum counts as infinity. */
static float sums_error(const Gemm1x1 &l, const Buffers &b, int squares_at) {
    std::vector<float> got(2 * l.n);
    std::vector<double> want(2 * l.n);
    if (!check(cudaStreamSynchronize(b.st), "sums") ||
        !check(cudaMemcpy(got.data(), b.sums, sizeof(float) * l.n, cudaMemcpyDeviceToHost), "sums") ||
        !check(cudaMemcpy(got.data() + l.n, b.sums + squares_at, sizeof(float) * l.n, cudaMemcpyDeviceToHost),
               "sums") ||
        !check(cudaMemcpy(want.data(), b.sums_ref, 2 * sizeof(double) * l.n, cudaMemcpyDeviceToHost), "sums"))
        return -1;
    double worst = 0;
    for (int c = 0; c < l.n; c++) {
        const double d_sum = fabs(got[c] - want[c]) / (sqrt(want[l.n + c]) + 1e-30) / kSumTolerance;
        const double d_sq = fabs(got[l.n + c] - want[l.n + c]) / (want[l.n + c] + 1e-30) / kSquaresTolerance;
        worst = std::max(worst, std::isfinite(d_sum) ? d_sum : INFINITY);
        worst = std::max(worst, std::isfinite(d_sq) ? d_sq : INFINITY);
    }
    return (float)worst;
}

/* The fastest configuration that ran and matched. */
struct Best {
    /* a column this build does not have: printed as 0 and "-", not a failure */
    static Best skipped() {
        Best b;
        b.ms = 0, b.gemm_alone_ms = 0, b.name = "-";
        return b;
    }
    double ms = -1;
    double gemm_alone_ms = -1; /* Sums::tile_partials: the same configuration without the rows' sum */
    const char *name = "none";
    int wrong = 0;
    template <class G> void take(const Gemm1x1 &l, const Buffers &b, int reps, const char *n) {
        double alone = -1;
        const double t = run<G>(l, b, reps, &alone);
        if (t < 0) return;
        /* the apply's y: against cuBLASLt's on the applied x */
        const float ey = y_error(l, b, applies_bn(G::Feeds) ? b.y_ref_applied : b.y_ref);
        const float es = G::Stats != Sums::none ? sums_error(l, b, squares_at<G>(l)) : 0.f;
        if (!(ey >= 0 && ey <= 2e-2f) || !(es >= 0 && es <= 1.f)) { /* NaN fails too */
            fprintf(stderr, "%s: %s with %s: y relative error %g, sums %g tolerances off\n", tool, l.name, n, ey, es);
            wrong++;
            return;
        }
        if (ms < 0 || t < ms) ms = t, gemm_alone_ms = alone, name = n;
    }
};

/* The library's y = x w^T (linear_cuda.h: cuBLASLt, the fastest of its
 * heuristic's best 8 by the library's own timing) of x into y, the median
 * ms of reps runs; with reps 0, one untimed run (0 when it ran). y holds
 * its result. */
static double cublaslt_ms(const Gemm1x1 &l, const Buffers &b, const Elem *x_in, Elem *y_out, int reps) {
    /* column-major view: y^T (n x m) = w^T (op T of w: k x n) * x^T (k x m) */
    const mp_lt_mat w = {(uint64_t)l.k, (uint64_t)l.n, l.k}, x = {(uint64_t)l.k, (uint64_t)l.m, l.k},
                    y = {(uint64_t)l.n, (uint64_t)l.m, l.n};
    lt_gemm g{};
    double ms = -1;
    if (mp_linear_gemm_init(b.ctx, &g, CUBLAS_COMPUTE_32F, MP_DTYPE_BF16, MP_DTYPE_BF16, CUBLAS_OP_T, w, CUBLAS_OP_N, x,
                            y, CUBLASLT_EPILOGUE_DEFAULT, l.name) != MP_OK)
        fprintf(stderr, "%s: %s\n", tool, mp_last_error());
    else if (g.workspace > b.ws_bytes)
        fprintf(stderr, "%s: %s: cuBLASLt's pick wants %zu bytes of workspace, the probe has %zu\n", tool, l.name,
                g.workspace, b.ws_bytes);
    else {
        auto launch = [&] { return mp_linear_gemm_run(b.ctx, &g, b.w, x_in, y_out, 0.f, b.ws, l.name) == MP_OK; };
        ms = reps > 0 ? time_ms(launch, reps, kQueue, b.st) : 0;
        if (ms >= 0 && !(launch() && check(cudaStreamSynchronize(b.st), "cuBLASLt"))) ms = -1;
    }
    mp_linear_gemm_destroy(&g);
    return ms;
}

/* The apply's reference input: out = bf16(max(0, x * scale[k] + bias[k]))
 * over m rows of k channels, the f32 fma and round-to-nearest the fused
 * mainloop does (gemm1x1_apply_mainloop.cuh's bn_relu_bf16x2). */
__global__ void apply_reference_kernel(const Elem *x, size_t m, int k, const float *scale, const float *bias,
                                       Elem *out) {
    const size_t count = m * (size_t)k;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % (size_t)k);
        out[i] = Elem(fmaxf(0.f, fmaf(float(x[i]), scale[c], bias[c])));
    }
}

/* The library's statistics pass on y, as its fast batch norm launches it
 * (mp_bn_fast_rows_per_pass, mp_bn_fast_chunks). */
static double stats_pass_ms(const Gemm1x1 &l, const Buffers &b, int reps) {
    const int rpp = mp_bn_fast_rows_per_pass(MP_DTYPE_BF16, l.n);
    if (!rpp) return -1;
    int G;
    long long R;
    mp_bn_fast_chunks(l.m, rpp, b.sms, &G, &R);
    return time_ms(
        [&] {
            return check(mp_bn_fast_stats(b.st, MP_DTYPE_BF16, b.y, l.m, l.n, G, R, b.part, b.part + (size_t)G * l.n),
                         "stats pass");
        },
        reps, kQueue, b.st);
}

using C1 = Shape<_1, _1, _1>;
using C2 = Shape<_2, _1, _1>;
using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingEpi = cutlass::epilogue::TmaWarpSpecialized;

/* one tile (M x N x 64) and schedule timed into `best` (in fastest and fastest_apply_tiles) */
#define TRY_TILE(M, N, CL, S, E, NAME) \
    best.take<Sm90Gemm<Shape<_##M, _##N, _64>, CL, S, E, Stats, Feed>>(l, b, reps, NAME);

/* every tile and schedule tried, plain (Sums::none) or with the sums, A fed
 * from shared memory or through registers */
template <Sums Stats, FeedA Feed = FeedA::smem> Best fastest(const Gemm1x1 &l, const Buffers &b, int reps) {
    Best best;
    TRY_TILE(128, 64, C1, Coop, CoopEpi, "128x64 coop")
    TRY_TILE(128, 128, C1, Coop, CoopEpi, "128x128 coop")
    TRY_TILE(128, 256, C1, Coop, CoopEpi, "128x256 coop")
    TRY_TILE(256, 128, C1, Coop, CoopEpi, "256x128 coop")
    TRY_TILE(128, 128, C2, Coop, CoopEpi, "128x128 coop 2x1")
    TRY_TILE(64, 128, C1, Ping, PingEpi, "64x128 pingpong")
    TRY_TILE(64, 256, C1, Ping, PingEpi, "64x256 pingpong")
    return best;
}

/* the four tiles that won the apply columns most often (128x64, 128x256 and
 * 256x128 coop, 64x256 pingpong) and 128x128 coop (the plain column's winner
 * on the largest-K layers): fewer kernels to build for the columns that vary
 * only the apply mainloop (rmem_apply_prefetch_deep, smem_apply) */
template <Sums Stats, FeedA Feed> Best fastest_apply_tiles(const Gemm1x1 &l, const Buffers &b, int reps) {
    Best best;
    TRY_TILE(128, 64, C1, Coop, CoopEpi, "128x64 coop")
    TRY_TILE(128, 128, C1, Coop, CoopEpi, "128x128 coop")
    TRY_TILE(128, 256, C1, Coop, CoopEpi, "128x256 coop")
    TRY_TILE(256, 128, C1, Coop, CoopEpi, "256x128 coop")
    TRY_TILE(64, 256, C1, Ping, PingEpi, "64x256 pingpong")
#undef TRY_TILE
    return best;
}

} // namespace probe

using namespace probe;

/* MP_PROBE_APPLY_ONLY (gemm1x1_apply_sm90_cutlass.cu): only the columns the
 * shared-memory apply is judged by (CUTLASS plain, smem apply; cuBLASLt and
 * the statistics pass need no CUTLASS kernel): 11 GEMM kernels instead of
 * 50, a build of a minute or two instead of six. The other columns print
 * 0 and "-" there and count as neither run nor failed. */
#ifdef MP_PROBE_APPLY_ONLY
constexpr bool kEveryColumn = false;
#else
constexpr bool kEveryColumn = true;
#endif

/* A column this build leaves out: a Best marked skipped. Else fastest<Stats, Feed>, over fastest_apply_tiles'
 * five tiles where ApplyTiles. */
template <Sums Stats, FeedA Feed, bool ApplyTiles = false>
Best column(const Gemm1x1 &l, const Buffers &b, int reps) {
    if constexpr (!kEveryColumn) return Best::skipped();
    else if constexpr (ApplyTiles) return fastest_apply_tiles<Stats, Feed>(l, b, reps);
    else return fastest<Stats, Feed>(l, b, reps);
}

int main(int argc, char **argv) {
    probe::tool = kEveryColumn ? "gemm1x1_stats_sm90_cutlass" : "gemm1x1_apply_sm90_cutlass";
    int reps, status;
    const char *only; /* --layer */
    if (!parse_reps(argc, argv,
                    "  times resnet50 b512's 1x1 convolutions as GEMMs (cuBLASLt; CUTLASS sm_90a plain, with\n"
                    "  batch norm's per-channel sums in the epilogue, plain with A through registers, and A\n"
                    "  through registers with batch norm's apply + ReLU in the prologue, two schedules and a\n"
                    "  deeper prefetch of batch norm's vectors, and A from shared memory with the apply done\n"
                    "  there in place) beside the library's statistics pass; --layer: those layers only (one\n"
                    "  kernel family for a profiler)\n",
                    &reps, &status, &only))
        return status;
    const auto picked = [&](const Gemm1x1 &l) { return !only || strstr(l.name, only); };
    if (std::none_of(std::begin(GEMMS_1X1), std::end(GEMMS_1X1), picked)) {
        fprintf(stderr, "%s: --layer %s: no layer's name holds it\n", tool, only);
        return 2;
    }
    cudaDeviceProp prop;
    if (!open_sm90(&prop)) return 1;
    size_t most_x = 0, most_y = 0, most_w = 0;
    int most_k = 0, most_n = 0, most_padded = 0; /* n, and n padded to the widest tile_n (256) */
    size_t most_rows = 0, most_colsum = 0; /* Sums::tile_partials's, at the smallest tile_m (64) and widest padding */
    for (const Gemm1x1 &l : GEMMS_1X1) {
        most_x = std::max(most_x, (size_t)l.m * l.k);
        most_y = std::max(most_y, (size_t)l.m * l.n);
        most_w = std::max(most_w, (size_t)l.n * l.k);
        most_k = std::max(most_k, l.k);
        most_n = std::max(most_n, l.n);
        most_padded = std::max(most_padded, (l.n + 255) / 256 * 256);
        most_rows = std::max(most_rows, (size_t)(l.m + 63) / 64 * ((l.n + 255) / 256 * 256));
        most_colsum = std::max(most_colsum, mp_cuda_lib_colsum_workspace((l.m + 63) / 64, (l.n + 255) / 256 * 256));
    }
    Buffers b{};
    if (mp_cuda_ctx_create(0, &b.ctx) != MP_OK) {
        fprintf(stderr, "%s: %s\n", tool, mp_last_error());
        return 1;
    }
    b.st = b.ctx->stream;
    b.tile_part_floats = most_rows;
    b.sms = prop.multiProcessorCount;
    b.ws_bytes = 64u << 20;
    if (!check(cudaMalloc(&b.x, most_x * 2), "x") || !check(cudaMalloc(&b.w, most_w * 2), "w") ||
        !check(cudaMalloc(&b.y, most_y * 2), "y") || !check(cudaMalloc(&b.y_ref, most_y * 2), "y_ref") ||
        !check(cudaMalloc(&b.scale, sizeof(float) * most_k), "scale") ||
        !check(cudaMalloc(&b.bias, sizeof(float) * most_k), "bias") ||
        !check(cudaMalloc(&b.x_applied, most_x * 2), "x applied") ||
        !check(cudaMalloc(&b.y_ref_applied, most_y * 2), "y_ref applied") ||
        !check(cudaMalloc(&b.sums, 2 * sizeof(float) * most_padded), "sums") ||
        !check(cudaMalloc(&b.sums_ref, 2 * sizeof(double) * most_n), "sums") ||
        !check(cudaMalloc(&b.part, 2 * sizeof(float) * most_n * 4 * b.sms), "partials") ||
        !check(cudaMalloc(&b.tile_part, 2 * sizeof(float) * most_rows), "tile partials") ||
        !check(cudaMalloc(&b.colsum_ws, most_colsum), "column sums") ||
        !check(cudaMalloc(&b.worst, sizeof(float)), "check") || !check(cudaMalloc(&b.ws, b.ws_bytes), "workspace"))
        return 1;
    if (!fill_conv_inputs(b.x, most_x, b.w, most_w)) return 1; /* legacy stream, then the whole device synchronized */
    /* the apply's batch norm: scale in [0.5, 1.5), bias in [-0.5, 0.5) (fixed seeds), so with x in [-1, 1)
     * the ReLU clips about half of A */
    fill_kernel<float><<<64, 256>>>(b.scale, most_k, 3u, 0.5f, 1.0f);
    fill_kernel<float><<<64, 256>>>(b.bias, most_k, 4u, 0.5f, 0.0f);
    if (!check(cudaDeviceSynchronize(), "fill")) return 1;

    printf("%s on %s (%d SMs), bf16 in and out, f32 accumulation, median of %d runs, ms\n\n", tool, prop.name, b.sms,
           reps);
    printf("| layer (m x k x n) | count | cuBLASLt | CUTLASS plain (tile) | + sums, atomics (tile) | + sums, tile "
           "rows + their sum (tile) | of which the GEMM with its rows | rmem: A through registers (tile) | rmem + "
           "apply (tile) | rmem + apply, prefetched (tile) | rmem + apply, prefetched, vectors %d ahead (tile) | "
           "smem apply (tile) | apply / rmem | prefetched / rmem | vectors %d ahead / rmem | smem apply / plain | "
           "statistics pass | saving a layer | saving x count |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
           kDeepVecAhead, kDeepVecAhead);
    int failures = 0;
    double total = 0;
    for (const Gemm1x1 &l : GEMMS_1X1) {
        if (!picked(l)) continue;
        const double lt_ms = cublaslt_ms(l, b, b.x, b.y_ref, reps);
        if (lt_ms < 0) {
            fprintf(stderr, "%s: %s: no cuBLASLt baseline (see above); layer skipped\n", tool, l.name);
            failures++;
            continue;
        }
        const int rows_per_block = 1024;
        if (!check(cudaMemsetAsync(b.sums_ref, 0, 2 * sizeof(double) * l.n, b.st), "sums")) return 1;
        reference_sums_kernel<<<dim3((l.m + rows_per_block - 1) / rows_per_block, (l.n + 127) / 128), 128, 0, b.st>>>(
            b.y_ref, l.m, l.n, rows_per_block, b.sums_ref);
        if (!check(cudaStreamSynchronize(b.st), "reference sums")) return 1;
        /* the apply's reference: cuBLASLt on x applied beforehand */
        apply_reference_kernel<<<4 * b.sms, 256, 0, b.st>>>(b.x, (size_t)l.m, l.k, b.scale, b.bias, b.x_applied);
        const bool have_applied_ref = check(cudaGetLastError(), "apply reference") &&
                                      cublaslt_ms(l, b, b.x_applied, b.y_ref_applied, 0) >= 0;
        if (!have_applied_ref) fprintf(stderr, "%s: %s: no reference for the apply columns (see above)\n", tool, l.name);
        const Best plain = fastest<Sums::none>(l, b, reps);
        const Best atomic = column<Sums::atomic, FeedA::smem>(l, b, reps);
        const Best fused = column<Sums::tile_partials, FeedA::smem>(l, b, reps);
        const Best rmem = column<Sums::none, FeedA::rmem>(l, b, reps);
        const Best apply = have_applied_ref ? column<Sums::none, FeedA::rmem_apply>(l, b, reps) : Best{};
        const Best prefetch = have_applied_ref ? column<Sums::none, FeedA::rmem_apply_prefetch>(l, b, reps) : Best{};
        const Best deep =
            have_applied_ref ? column<Sums::none, FeedA::rmem_apply_prefetch_deep, true>(l, b, reps) : Best{};
        const Best smem_apply =
            have_applied_ref ? fastest_apply_tiles<Sums::none, FeedA::smem_apply>(l, b, reps) : Best{};
        const double st = stats_pass_ms(l, b, reps);
        failures += plain.wrong + atomic.wrong + fused.wrong + rmem.wrong + (plain.ms < 0) + (atomic.ms < 0) +
                    (fused.ms < 0) + (fused.ms > 0 && fused.gemm_alone_ms < 0) + (rmem.ms < 0) + apply.wrong +
                    (apply.ms < 0) + prefetch.wrong + (prefetch.ms < 0) + deep.wrong + (deep.ms < 0) +
                    smem_apply.wrong + (smem_apply.ms < 0) + (st < 0);
        const double saving = fused.ms > 0 && st > 0 ? lt_ms + st - fused.ms : 0;
        total += saving * l.count;
        const double apply_ratio = apply.ms > 0 && rmem.ms > 0 ? apply.ms / rmem.ms : -1;
        const double prefetch_ratio = prefetch.ms > 0 && rmem.ms > 0 ? prefetch.ms / rmem.ms : -1;
        const double deep_ratio = deep.ms > 0 && rmem.ms > 0 ? deep.ms / rmem.ms : -1;
        /* against the plain shared-memory-sourced GEMM, the mainloop it differs from by the apply alone */
        const double smem_apply_ratio = smem_apply.ms > 0 && plain.ms > 0 ? smem_apply.ms / plain.ms : -1;
        printf("| %s (%d x %d x %d) | %d | %.4f | %.4f (%s) | %.4f (%s) | %.4f (%s) | %.4f | %.4f (%s) | %.4f (%s) | "
               "%.4f (%s) | %.4f (%s) | %.4f (%s) | %.3f | %.3f | %.3f | %.3f | %.4f | %+.4f | %+.4f |\n",
               l.name, l.m, l.k, l.n, l.count, lt_ms, plain.ms, plain.name, atomic.ms, atomic.name, fused.ms,
               fused.name, fused.gemm_alone_ms, rmem.ms, rmem.name, apply.ms, apply.name, prefetch.ms, prefetch.name,
               deep.ms, deep.name, smem_apply.ms, smem_apply.name, apply_ratio, prefetch_ratio, deep_ratio,
               smem_apply_ratio, st, saving, saving * l.count);
    }
    printf("\nsaving over resnet50 b512's 1x1 convolutions (forward only%s): %+.3f ms a step\n",
           only ? ", of the layers --layer picked" : "", total);
    mp_cuda_ctx_destroy(b.ctx);
    if (failures) fprintf(stderr, "%s: %d configuration(s) or layer(s) failed to run or to match\n", tool, failures);
    return failures ? 1 : 0;
}
