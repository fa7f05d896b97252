/* conv_sm90_cutlass.cu — how fast CUTLASS's Hopper convolutions (CUTLASS 3:
 * TMA im2col loads, warpgroup MMA, warp-specialized) run resnet18's layers
 * at batch 512 on 3x32x32, bf16 NHWC in and out, f32 accumulation: the
 * kernels our own fused convolutions would have to start from.
 *
 * conv_fusion_cutlass measured CUTLASS's Ampere-class kernels (mma.sync) at
 * 1.5-1.9x cuDNN's time on these layers (NOTES v0.26), so a fusion built on
 * them loses before it saves anything. This program asks the same of the
 * sm_90a kernels: plain forward convolutions, several tile shapes and both
 * of CUTLASS's warp-specialized schedules, the fastest reported; compare with
 * the library's cuDNN time for the layer (`scripts/gpu-check cutlass` prints
 * both). Every result is checked against a direct convolution on the GPU
 * (f32 sums of the same bf16 inputs).
 *
 * Built only with the CUDA backend, CUTLASS's headers (-DMP_CUTLASS_DIR) and
 * sm_90 among the CUDA architectures (it compiles for sm_90a). */
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

/* CUTLASS's headers in the order its own examples include them */
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/tensor_ref.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"

#include "probe_common.cuh"

namespace probe { /* probe_common.cuh's namespace (named: see there) */

using namespace cute;
using Elem = cutlass::bfloat16_t;
constexpr int kAlign = 8; /* 16 bytes */
using Nhwc = cutlass::layout::TensorNHWC;

template <class Tile, class Cluster, class MainSchedule, class EpiSchedule> struct Sm90Conv {
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, Elem, Nhwc, kAlign, Elem, Nhwc, kAlign,
        EpiSchedule>::CollectiveOp;
    using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, Elem, Nhwc, kAlign, Elem,
        Nhwc, kAlign, float, Tile, Cluster,
        cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        MainSchedule>::CollectiveOp;
    using Problem = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 2>;
    using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
    using Device = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
};

/* y's largest |y - direct convolution| over every output, f32 sums. */
__global__ void direct_check_kernel(const Elem *x, const Elem *w, const Elem *y, Layer l, int p, int q,
                                    float *worst) {
    const size_t total = (size_t)l.n * p * q * l.k;
    float m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int k = (int)(i % l.k), oq = (int)(i / l.k % q), op = (int)(i / l.k / q % p), n = (int)(i / l.k / q / p);
        float s = 0;
        for (int r = 0; r < l.r; r++)
            for (int t = 0; t < l.r; t++) {
                const int ih = op * l.stride - l.r / 2 + r, iw = oq * l.stride - l.r / 2 + t;
                if (ih < 0 || ih >= l.h || iw < 0 || iw >= l.w) continue;
                const Elem *xp = x + (((size_t)n * l.h + ih) * l.w + iw) * l.c;
                const Elem *wp = w + (((size_t)k * l.r + r) * l.r + t) * l.c;
                for (int c = 0; c < l.c; c++) s += float(xp[c]) * float(wp[c]);
            }
        m = fmaxf(m, fabsf(float(y[i]) - s) / fmaxf(1.f, fabsf(s)));
    }
    atomicMax((int *)worst, __float_as_int(m));
}

struct Buffers {
    Elem *x, *w, *y;
    void *ws;
    size_t ws_bytes;
};

/* One kernel configuration on one layer: the median ms, < 0 where it cannot
 * run the problem. */
template <class C> double run(const Layer &l, const Buffers &b, int reps) {
    using Device = typename C::Device;
    using Problem = typename C::Problem;
    const int pad = l.r / 2;
    Problem ps(cutlass::conv::Mode::kCrossCorrelation, {l.n, l.h, l.w, l.c}, {l.k, l.r, l.r, l.c}, {pad, pad},
               {pad, pad}, {l.stride, l.stride}, {1, 1}, 1);
    typename Device::ConvKernel::StrideC sc;
    cute::for_each(cute::make_seq<cute::rank<0>(typename Device::ConvKernel::StrideC{})>{},
                   [&](auto i) { cute::get<0, i>(sc) = ps.stride_C[Problem::RankT - 2 - i]; });
    typename Device::Arguments args{ps, {b.x, b.w}, {{1.0f, 0.0f}, b.y, sc, b.y, sc}};
    return time_op<Device>(args, b.ws, b.ws_bytes, reps);
}

/* CUTLASS 4.2 runs sm90 convolutions with one schedule only (not
 * persistent); the builders pick it and its epilogue */
using Sched = cutlass::conv::collective::KernelScheduleAuto;
using EpiSched = cutlass::epilogue::collective::EpilogueScheduleAuto;
using C1 = Shape<_1, _1, _1>;
using C2 = Shape<_2, _1, _1>;

/* The largest relative error of y against the direct convolution, < 0 when
 * the check could not run. */
float direct_error(const Layer &l, const Buffers &b, float *worst, int sms) {
    float err = -1;
    if (!check(cudaMemset(worst, 0, sizeof *worst), "check")) return -1;
    direct_check_kernel<<<4 * sms, 256>>>(b.x, b.w, b.y, l, out_extent(l.h, l), out_extent(l.w, l), worst);
    if (!check(cudaMemcpy(&err, worst, sizeof err, cudaMemcpyDeviceToHost), "direct check")) return -1;
    return err;
}

/* The fastest configuration that ran and matched; each one's error is
 * checked right after its timed runs. */
struct Best {
    double ms = -1;
    const char *name = "none";
    float err = -1;
    int wrong = 0;
    template <class C> void take(const Layer &l, const Buffers &b, int reps, float *worst, int sms, const char *n) {
        const double t = run<C>(l, b, reps);
        if (t < 0) return;
        const float e = direct_error(l, b, worst, sms);
        if (e < 0 || e > 2e-2f) {
            fprintf(stderr, "conv_sm90_cutlass: %s with %s: relative error %g\n", l.name, n, e);
            wrong++;
            return;
        }
        if (ms < 0 || t < ms) ms = t, name = n, err = e;
    }
};

} // namespace probe

using namespace probe;

int main(int argc, char **argv) {
    probe::tool = "conv_sm90_cutlass";
    int reps, status;
    if (!parse_reps(argc, argv,
                    "  times CUTLASS's sm_90a implicit-GEMM forward convolutions on resnet18 b512's layers\n"
                    "  (bf16 NHWC)\n",
                    &reps, &status))
        return status;
    cudaDeviceProp prop;
    if (!open_sm90(&prop)) return 1;
    size_t most_x = 0, most_y = 0, most_w = 0;
    for (const Layer &l : LAYERS) {
        most_x = std::max(most_x, (size_t)l.n * l.h * l.w * l.c);
        most_y = std::max(most_y, (size_t)l.n * out_extent(l.h, l) * out_extent(l.w, l) * l.k);
        most_w = std::max(most_w, (size_t)l.k * l.r * l.r * l.c);
    }
    Buffers b{};
    b.ws_bytes = 64u << 20;
    float *worst = nullptr;
    if (!check(cudaMalloc(&b.x, most_x * 2), "x") || !check(cudaMalloc(&b.w, most_w * 2), "w") ||
        !check(cudaMalloc(&b.y, most_y * 2), "y") || !check(cudaMalloc(&b.ws, b.ws_bytes), "workspace") ||
        !check(cudaMalloc(&worst, sizeof *worst), "check"))
        return 1;
    if (!fill_conv_inputs(b.x, most_x, b.w, most_w)) return 1;

    printf("conv_sm90_cutlass on %s (%d SMs), bf16 NHWC, f32 accumulation, median of %d runs, ms\n\n", prop.name,
           prop.multiProcessorCount, reps);
    printf("| layer | GFLOP | CUTLASS sm90: ms (tile, cluster) | TFLOP/s | max relative error |\n"
           "|---|---|---|---|---|\n");
    int failures = 0;
    for (const Layer &l : LAYERS) {
        const int p = out_extent(l.h, l), q = out_extent(l.w, l);
        const double gflop = 2.0 * l.n * p * q * l.k * l.r * l.r * l.c / 1e9;
        Best best;
        const int sms = prop.multiProcessorCount;
#define MP_TRY_TILE(M, N, CL, NAME) \
    best.take<Sm90Conv<Shape<_##M, _##N, Shape<_64>>, CL, Sched, EpiSched>>(l, b, reps, worst, sms, NAME);
        MP_TRY_TILE(128, 128, C1, "128x128x64, cluster 1x1")
        MP_TRY_TILE(128, 64, C1, "128x64x64, cluster 1x1")
        MP_TRY_TILE(64, 128, C1, "64x128x64, cluster 1x1")
        MP_TRY_TILE(64, 64, C1, "64x64x64, cluster 1x1")
        MP_TRY_TILE(128, 256, C1, "128x256x64, cluster 1x1")
        MP_TRY_TILE(128, 128, C2, "128x128x64, cluster 2x1")
        MP_TRY_TILE(128, 64, C2, "128x64x64, cluster 2x1")
#undef MP_TRY_TILE
        if (best.ms < 0 || best.wrong) failures++;
        const float err = best.err;
        printf("| %s | %.1f | %.4f (%s) | %.0f | %.2g |\n", l.name, gflop, best.ms, best.name,
               best.ms > 0 ? gflop / best.ms : 0, err);
    }
    printf("\n(the library's cuDNN forward for the same layers: the `cudnn: conv2d ... pass 0` lines of "
           "`scripts/gpu-check cutlass`)\n");
    if (failures) fprintf(stderr, "conv_sm90_cutlass: %d layer(s) failed to run or to match\n", failures);
    return failures ? 1 : 0;
}
