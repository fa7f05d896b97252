/* conv_fusion_cutlass.cu — can our own implicit-GEMM convolutions take batch
 * norm's forward apply (relu(x * scale + bias), per input channel) into their
 * mainloop and still run as fast as a plain convolution on this GPU?
 *
 * cuDNN's graph API offers that fusion (ConvBNfprop's forward), but on sm_90
 * it ran 3.3-6.2x slower than the plain convolution (NOTES v0.21), which is why
 * every batch norm of ours still reads and writes its tensor between two
 * convolutions. This program times CUTLASS's Ampere-class implicit GEMM
 * (mma.sync, cp.async multistage; it runs on sm_90) on the 3x3 convolutions of
 * resnet18 at batch 512 on 3x32x32, f16 NHWC in and out, f32 accumulation:
 * plain, and with the scale + bias + ReLU of the input applied in registers
 * between shared memory and the tensor cores (CUTLASS's fprop fusion, whose
 * padding stays zero after the transform). Three threadblock tiles each; the
 * fastest is reported, beside the pass the fusion would remove: the
 * library's own batch-norm apply + ReLU (batchnorm2d_fast.h, its grid).
 * Compare with the library's cuDNN time for the same layer
 * (MIXPREC_CUDNN_DEBUG=1 gpu_train_step, pass 0: `scripts/gpu-check
 * cutlass` prints both). Each fused result is checked against the plain
 * convolution of the input transformed by a separate kernel (same rounding:
 * one f16 fma, then ReLU).
 *
 * Built only with the CUDA backend and CUTLASS's headers (-DMP_CUTLASS_DIR). */
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda/batchnorm2d_fast.h"

/* CUTLASS's headers in the order its own examples include them (the device
 * headers use the problem-size helpers the kernel headers bring) */
#include "cutlass/cutlass.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/conv/kernel/default_conv2d_fprop_fusion.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/device/implicit_gemm_convolution_fusion.h"
#include "cutlass/epilogue/thread/linear_combination.h"

#include "probe_common.cuh"

namespace {

using probe::check;
using probe::Layer;
using probe::LAYERS;
using probe::time_ms;

using Elem = cutlass::half_t;
using Nhwc = cutlass::layout::TensorNHWC;
using Epilogue = cutlass::epilogue::thread::LinearCombination<Elem, 8, float, float>;
using Swizzle = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>;
using Mma = cutlass::gemm::GemmShape<16, 8, 16>;

template <class Tile, class Warp, int Stages>
using PlainConv = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dFprop<
    Elem, Nhwc, Elem, Nhwc, Elem, Nhwc, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, Tile, Warp, Mma,
    Epilogue, Swizzle, Stages, cutlass::arch::OpMultiplyAdd, cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel>;

template <class Tile, class Warp, int Stages>
using FusedConv =
    cutlass::conv::device::ImplicitGemmConvolutionFusion<typename cutlass::conv::kernel::DefaultConv2dFpropFusion<
        Elem, Nhwc, Elem, Nhwc, Elem, cutlass::layout::RowMajor, Elem, Nhwc, float, cutlass::arch::OpClassTensorOp,
        cutlass::arch::Sm80, Tile, Warp, Mma, Epilogue, Swizzle, Stages, cutlass::arch::OpMultiplyAdd,
        cutlass::conv::IteratorAlgorithm::kOptimized>::Kernel>;

struct Buffers {
    Elem *x, *xt, *w, *y, *yref, *scale, *bias;
    float *coef; /* the library's apply pass: mean, scale, shift per channel */
    void *ws;
    size_t ws_bytes;
};

cutlass::conv::Conv2dProblemSize problem_of(const Layer &l) {
    const int pad = l.r / 2, p = probe::out_extent(l.h, l), q = probe::out_extent(l.w, l);
    return cutlass::conv::Conv2dProblemSize({l.n, l.h, l.w, l.c}, {l.k, l.r, l.r, l.c}, {pad, pad, pad, pad},
                                            {l.stride, l.stride}, {1, 1}, {l.n, p, q, l.k},
                                            cutlass::conv::Mode::kCrossCorrelation, 1);
}

/* The fusion's transform as a separate pass: one f16 fma, then ReLU. */
__global__ void transform_kernel(const Elem *x, const Elem *scale, const Elem *bias, Elem *out, size_t n, int c) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        const __half v = __hfma_relu(x[i].to_half(), scale[ch].to_half(), bias[ch].to_half());
        out[i] = Elem(__half2float(v));
    }
}

__global__ void max_diff_kernel(const Elem *a, const Elem *b, size_t n, float *out) {
    float m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(float(a[i]) - float(b[i])));
    atomicMax((int *)out, __float_as_int(m)); /* non-negative floats order like ints */
}

/* Plain convolution y = conv(in, w) with one tile configuration: the median
 * ms, or < 0 where it cannot run this problem. */
template <class Conv> double run_plain(const Layer &l, const Buffers &b, const Elem *in, Elem *y, int reps) {
    const auto ps = problem_of(l);
    typename Conv::Arguments args(ps, {const_cast<Elem *>(in), Nhwc::packed({l.n, l.h, l.w, l.c})},
                                  {b.w, Nhwc::packed({l.k, l.r, l.r, l.c})}, {y, Nhwc::packed(ps.output_extent())},
                                  {y, Nhwc::packed(ps.output_extent())}, {1.0f, 0.0f});
    return probe::time_op<Conv>(args, b.ws, b.ws_bytes, reps);
}

/* The same with relu(in * scale + bias) applied in the mainloop. */
template <class Conv> double run_fused(const Layer &l, const Buffers &b, Elem *y, int reps) {
    const auto ps = problem_of(l);
    typename Conv::Arguments args(ps, {b.x, Nhwc::packed({l.n, l.h, l.w, l.c})},
                                  {b.w, Nhwc::packed({l.k, l.r, l.r, l.c})},
                                  {b.scale, cutlass::layout::RowMajor(l.c)}, {b.bias, cutlass::layout::RowMajor(l.c)},
                                  {y, Nhwc::packed(ps.output_extent())}, {y, Nhwc::packed(ps.output_extent())},
                                  {1.0f, 0.0f});
    return probe::time_op<Conv>(args, b.ws, b.ws_bytes, reps);
}

/* The tile configurations tried: (threadblock, warp, stages). */
using Tile128x128 = cutlass::gemm::GemmShape<128, 128, 32>;
using Tile128x64 = cutlass::gemm::GemmShape<128, 64, 32>;
using Tile256x64 = cutlass::gemm::GemmShape<256, 64, 32>;
using Warp64x64 = cutlass::gemm::GemmShape<64, 64, 32>;
using Warp64x32 = cutlass::gemm::GemmShape<64, 32, 32>;
#define MP_TILES(X)                                                                                                   \
    X(Tile128x128, Warp64x64, 4, "128x128x32/4") X(Tile128x64, Warp64x32, 4, "128x64x32/4")                          \
    X(Tile256x64, Warp64x64, 3, "256x64x32/3")

struct Best {
    double ms = -1;
    const char *tile = "none";
    void take(double t, const char *name) {
        if (t > 0 && (ms < 0 || t < ms)) ms = t, tile = name;
    }
};

double max_diff(const Elem *a, const Elem *b, size_t n, float *d) {
    float h = 0;
    if (!check(cudaMemset(d, 0, sizeof h), "memset")) return -1;
    max_diff_kernel<<<1024, 256>>>(a, b, n, d);
    if (!check(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost), "max difference")) return -1;
    return h;
}

} // namespace

int main(int argc, char **argv) {
    probe::tool = "conv_fusion_cutlass";
    int reps, status;
    if (!probe::parse_reps(argc, argv,
                           "  times CUTLASS's implicit-GEMM convolution of resnet18 b512's 3x3 layers (f16 NHWC),\n"
                           "  plain and with batch norm's scale + bias + ReLU of its input fused into the mainloop\n",
                           &reps, &status))
        return status;
    cudaDeviceProp prop;
    if (!check(cudaGetDeviceProperties(&prop, 0), "no GPU")) return 1;
    size_t most_x = 0, most_y = 0, most_w = 0;
    int widest = 0;
    for (const Layer &l : LAYERS) {
        const auto ps = problem_of(l);
        most_x = std::max(most_x, (size_t)l.n * l.h * l.w * l.c);
        most_y = std::max(most_y, (size_t)ps.output_extent().product());
        most_w = std::max(most_w, (size_t)l.k * l.r * l.r * l.c);
        widest = std::max(widest, l.c);
    }
    Buffers b{};
    b.ws_bytes = 256u << 20;
    float *d = nullptr;
    bool ok = check(cudaMalloc(&b.x, most_x * 2), "x") && check(cudaMalloc(&b.xt, most_x * 2), "transformed x") &&
              check(cudaMalloc(&b.w, most_w * 2), "w") && check(cudaMalloc(&b.y, most_y * 2), "y") &&
              check(cudaMalloc(&b.yref, most_y * 2), "reference y") &&
              check(cudaMalloc(&b.scale, widest * 2), "scale") &&
              check(cudaMalloc(&b.bias, widest * 2), "bias") && check(cudaMalloc(&b.ws, b.ws_bytes), "workspace") &&
              check(cudaMalloc(&d, sizeof *d), "difference") &&
              check(cudaMalloc(&b.coef, 3 * (size_t)widest * sizeof(float)), "coefficients") &&
              check(cudaMemset(b.coef, 0, 3 * (size_t)widest * sizeof(float)), "coefficients");
    if (!ok) return 1;
    probe::fill_kernel<Elem><<<64, 256>>>(b.scale, widest, 3u, 0.5f, 1.0f); /* scale in [0.5, 1.5) */
    probe::fill_kernel<Elem><<<64, 256>>>(b.bias, widest, 4u, 0.5f, 0.0f);
    if (!probe::fill_conv_inputs(b.x, most_x, b.w, most_w)) return 1;

    printf("conv_fusion_cutlass on %s (%d SMs), f16 NHWC, f32 accumulation, median of %d runs, ms\n\n", prop.name,
           prop.multiProcessorCount, reps);
    printf("| layer | GFLOP | our apply + ReLU pass | plain: ms (tile) | fused: ms (tile) | fused / plain | "
           "TFLOP/s fused | max |fused - plain(transformed)| |\n|---|---|---|---|---|---|---|---|\n");
    int failures = 0;
    for (const Layer &l : LAYERS) {
        const auto ps = problem_of(l);
        const size_t nx = (size_t)l.n * l.h * l.w * l.c, ny = (size_t)ps.output_extent().product();
        const double gflop = 2.0 * ny * l.r * l.r * l.c / 1e9;
        /* the library's pass on its own grid (two blocks per SM), then the
         * check's input: the fusion's transform as a kernel of its own */
        const long long rows = (long long)l.n * l.h * l.w;
        const int g = (int)std::min<long long>(2LL * prop.multiProcessorCount, rows);
        const long long r = (rows + g - 1) / g;
        const double t_tr = time_ms([&] { return mp_bn_fast_apply(0, MP_DTYPE_F16, b.x, nullptr, b.xt, rows, l.c,
                                                                   (int)((rows + r - 1) / r), r, b.coef, true) ==
                                                  cudaSuccess; }, reps);
        transform_kernel<<<4 * prop.multiProcessorCount, 256>>>(b.x, b.scale, b.bias, b.xt, nx, l.c);
        if (!check(cudaGetLastError(), "transform")) return 1;
        Best plain, fused;
#define MP_PLAIN(T, W, S, NAME) plain.take(run_plain<PlainConv<T, W, S>>(l, b, b.xt, b.yref, reps), NAME);
#define MP_FUSED(T, W, S, NAME) fused.take(run_fused<FusedConv<T, W, S>>(l, b, b.y, reps), NAME);
        MP_TILES(MP_PLAIN)
        const bool fusion_here = l.stride == 1;
        if (fusion_here) { MP_TILES(MP_FUSED) }
        double diff = -1;
        if (fusion_here && plain.ms > 0 && fused.ms > 0) {
            /* both with the fused run's tile would be bit-comparable; any tile is within f16 rounding of the sum */
            diff = max_diff(b.y, b.yref, ny, d);
            if (diff < 0 || diff > 0.05) failures++;
        }
        if (plain.ms < 0 || (fusion_here && fused.ms < 0)) failures++;
        printf("| %s | %.1f | %.4f | %.4f (%s) |", l.name, gflop, t_tr, plain.ms, plain.tile);
        if (fusion_here)
            printf(" %.4f (%s) | %.2f | %.0f | %.2g |\n", fused.ms, fused.tile, fused.ms / plain.ms, gflop / fused.ms,
                   diff);
        else
            printf(" — | — | — | — |\n");
    }
    printf("\n(our apply + ReLU pass: batch norm's forward apply as the library runs it, what the fusion removes; a "
           "fused convolution pays where it costs less than the library's cuDNN convolution of the layer plus that "
           "pass)\n");
    if (failures) fprintf(stderr, "conv_fusion_cutlass: %d layer(s) failed to run or to match\n", failures);
    return failures ? 1 : 0;
}
