/* gemm1x1_sm90_kernels.cuh — the CUTLASS 3 Hopper GEMMs the 1x1 probe
 * (gemm1x1_stats_sm90_cutlass.cu) times: y = x w^T in bf16 with f32
 * accumulation, x rows of input channels (K-major), w [N][K] (a 1x1
 * filter's KRSC), y rows of output channels; the epilogue plain or summing
 * y and y * y per channel (Sums), the mainloop feeding A to the warpgroup
 * MMA from shared memory, through registers, or through registers with
 * batch norm's apply on the way, or from shared memory with the apply done
 * there in place (FeedA). Types only: the probe sets up, runs and checks
 * them. */
#ifndef MP_BENCH_GEMM1X1_SM90_KERNELS_CUH
#define MP_BENCH_GEMM1X1_SM90_KERNELS_CUH

#include <type_traits>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include "gemm1x1_apply_mainloop.cuh"
#include "gemm1x1_smem_apply_mainloop.cuh"

namespace probe {

using namespace cute;
using Elem = cutlass::bfloat16_t;
constexpr int kAlign = 8; /* 16 bytes */
using LayoutA = cutlass::layout::RowMajor;    /* x: rows of input channels */
using LayoutB = cutlass::layout::ColumnMajor; /* w: [N][K], K contiguous (KRSC of a 1x1 filter) */
using LayoutD = cutlass::layout::RowMajor;    /* y: rows of output channels */

/* The visitor tree's root: y is its first child (the accumulators after the
 * sum's pass-through), the second (the squares' sum) only has to run. */
template <class T> struct first_of {
    CUTLASS_HOST_DEVICE T operator()(T const &a, T const &) const { return a; }
};

template <class T> struct square_of {
    CUTLASS_HOST_DEVICE T operator()(T const &a) const { return cutlass::multiplies<T>{}(a, a); }
};

/* How a configuration sums y and y * y per channel, if at all:
 *  - atomic: each warp adds its rows' sums into the global vectors
 *    (atomics; v0.53 measured these at 1.5-7.1x the plain GEMM's time:
 *    every warp of every tile adds into the same n addresses);
 *  - tile_partials: each CTA sums its tile's rows through shared memory and
 *    stores one row of partial sums per M tile (ceil(m / tile_m) rows of n
 *    rounded up to tile_n, n contiguous); reduce_partials then sums those
 *    rows, as batch norm's finalize would. */
enum class Sums { none, atomic, tile_partials };

template <class Tile> using AtomicSum =
    cutlass::epilogue::fusion::Sm90RowReduction<cutlass::plus, cutlass::plus, cutlass::atomic_add, 0, Tile, float,
                                                float, cutlass::FloatRoundStyle::round_to_nearest>;
template <class Tile> using TilePartialSum =
    cutlass::epilogue::fusion::Sm90RowReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0, Tile, float, float,
                                                cutlass::FloatRoundStyle::round_to_nearest, Stride<_0, _1, _0>, 4,
                                                true, /* FinalReduction */ false>;

/* y = acc; sum[c] += acc; sumsq[c] += acc * acc (c: the column, N) */
template <class SumNode> using StatsEvt = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<first_of, Elem, float, cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90EVT<SumNode, cutlass::epilogue::fusion::Sm90AccFetch>,
    cutlass::epilogue::fusion::Sm90EVT<
        SumNode,
        cutlass::epilogue::fusion::Sm90EVT<
            cutlass::epilogue::fusion::Sm90Compute<square_of, float, float,
                                                   cutlass::FloatRoundStyle::round_to_nearest>,
            cutlass::epilogue::fusion::Sm90AccFetch>>>;

/* How the mainloop feeds A (x) to the warpgroup MMA: straight from shared
 * memory (what CUTLASS's builder picks for bf16 K-major operands), or
 * through registers (A copied from shared memory into registers before each
 * MMA: where a per-channel transform of x, batch norm's scale + bias + ReLU
 * of the layer before, would fit). The builder assembles the
 * register-sourced mainloop only for mixed or transposed inputs, so
 * RmemAMainloop assembles it from the same parts. rmem_apply: the same
 * mainloop's producer with our own consumer (ApplyAMainloop,
 * gemm1x1_apply_mainloop.cuh), which transforms A in registers to
 * max(0, a * scale[k] + bias[k]) before each MMA (the mainloop's arguments
 * take the two f32 vectors). rmem_apply_prefetch: the same with the next
 * k tile's k-block 0 fetched and transformed during the k tile before
 * (ApplySchedule::prefetch) instead of at its own start.
 * rmem_apply_prefetch_deep: rmem_apply_prefetch with batch norm's vectors
 * loaded kDeepVecAhead k-blocks ahead of their transform instead of 2
 * (ApplyAMainloop's VecAhead; Sm90Gemm's DeepVecAhead overrides it).
 * smem_apply: the shared-memory-sourced mainloop's producer with our own
 * consumer (SmemApplyMainloop, gemm1x1_smem_apply_mainloop.cuh), which
 * applies the same transform to A in its shared-memory stage, in place,
 * before the k tile's MMAs read it from there (no register operand in the
 * way: the transform of one k tile overlaps the MMAs of the one before). */
enum class FeedA { smem, rmem, rmem_apply, rmem_apply_prefetch, rmem_apply_prefetch_deep, smem_apply };

/* One k tile of 4 k-blocks (BLK_K 64): the deepest ring that compiled
 * without spills or C75xx notes on all four tiles the probe runs it on
 * (nvcc 13.0, -Xptxas -v). 8 (two k tiles: the k tile loop runs two a
 * trip) compiled without C75xx notes but spilled on 256x128 coop (104
 * bytes) and 64x256 pingpong (116 bytes); 128x64 and 128x256 coop were
 * clean at 8. */
constexpr int kDeepVecAhead = 4;

/* whether a FeedA's mainloop applies batch norm + ReLU to A (its arguments
 * take the two vectors, its reference is the GEMM of A applied beforehand) */
constexpr bool applies_bn(FeedA f) {
    return f == FeedA::rmem_apply || f == FeedA::rmem_apply_prefetch || f == FeedA::rmem_apply_prefetch_deep ||
           f == FeedA::smem_apply;
}

template <class Tile, class Cluster, class Schedule, int CarveoutBytes> struct RmemAMainloop {
    using AtomLayout = std::conditional_t<std::is_same_v<Schedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
                                          Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _1, _1>>>;
    using TiledMma = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Elem, Elem, float, Tile, GMMA::Major::K, GMMA::Major::K>(), AtomLayout{}));
    using SmemAtomA = decltype(cutlass::gemm::collective::detail::rs_smem_selector<
                               GMMA::Major::K, Elem, decltype(get<0>(Tile{})), decltype(get<2>(Tile{})), false>());
    using SmemAtomB = decltype(cutlass::gemm::collective::detail::rs_smem_selector<
                               GMMA::Major::K, Elem, decltype(get<1>(Tile{})), decltype(get<2>(Tile{})), false>());
    static constexpr int SmemAlignment = static_cast<int>(cute::max(
        cutlass::detail::alignment_for_swizzle(SmemAtomA{}), cutlass::detail::alignment_for_swizzle(SmemAtomB{})));
    static constexpr int Stages = cutlass::gemm::collective::detail::compute_stage_count_or_override<
        cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, Elem, Elem, Tile, CarveoutBytes, SmemAlignment>(
        cutlass::gemm::collective::StageCountAutoCarveout<CarveoutBytes>{});
    using CollectiveOp = cutlass::gemm::collective::CollectiveMma<
        cutlass::gemm::MainloopSm90TmaGmmaRmemAWarpSpecialized<Stages, Cluster, Schedule>, Tile, Elem,
        cutlass::detail::TagToStrideA_t<LayoutA>, Elem, cutlass::detail::TagToStrideB_t<LayoutB>, TiledMma,
        decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<1>(Cluster{}))), SmemAtomA,
        Copy_Atom<AutoVectorizingCopy, Elem>, cute::identity,
        decltype(cutlass::gemm::collective::detail::sm90_cluster_shape_to_tma_atom(shape<0>(Cluster{}))), SmemAtomB,
        void, cute::identity>;
};

template <class Tile, class Cluster, class MainSchedule, class EpiSchedule, Sums WithSums, FeedA Feed = FeedA::smem,
          int DeepVecAhead = kDeepVecAhead>
struct Sm90Gemm {
    static constexpr Sums Stats = WithSums;
    static constexpr FeedA Feeds = Feed;
    static constexpr int TileM = size<0>(Tile{}), TileN = size<1>(Tile{});
    using Fusion = std::conditional_t<
        WithSums == Sums::atomic, StatsEvt<AtomicSum<Tile>>,
        std::conditional_t<WithSums == Sums::tile_partials, StatsEvt<TilePartialSum<Tile>>,
                           cutlass::epilogue::fusion::LinearCombination<Elem, float, void, float>>>;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlign, Elem, LayoutD, kAlign,
        EpiSchedule, Fusion>::CollectiveOp;
    static constexpr int Carveout = static_cast<int>(sizeof(typename Epilogue::SharedStorage));
    using RmemA = typename RmemAMainloop<Tile, Cluster, MainSchedule, Carveout>::CollectiveOp;
    /* what CUTLASS's builder assembles for bf16 K-major A and B: the
     * shared-memory-sourced mainloop (MainloopSm90TmaGmmaWarpSpecialized) */
    using SsA = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Elem, LayoutA, kAlign, Elem, LayoutB, kAlign, float, Tile,
        Cluster, cutlass::gemm::collective::StageCountAutoCarveout<Carveout>, MainSchedule>::CollectiveOp;
    using Mainloop = std::conditional_t<
        Feed == FeedA::rmem, RmemA,
        std::conditional_t<
            Feed == FeedA::rmem_apply, ApplyAMainloop<RmemA, ApplySchedule::tile_start>,
            std::conditional_t<
                Feed == FeedA::rmem_apply_prefetch, ApplyAMainloop<RmemA, ApplySchedule::prefetch>,
                std::conditional_t<
                    Feed == FeedA::rmem_apply_prefetch_deep,
                    ApplyAMainloop<RmemA, ApplySchedule::prefetch, DeepVecAhead>,
                    std::conditional_t<Feed == FeedA::smem_apply, SmemApplyMainloop<SsA>, SsA>>>>>;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
    using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    /* ApplyAMainloop and SmemApplyMainloop count k tiles from 0 for each
     * output tile: true of the persistent scheduler's work units (all of K),
     * not of split-K/stream-K */
    static_assert(!applies_bn(Feed) ||
                      std::is_same_v<typename Kernel::TileScheduler, cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90>,
                  "the apply mainloop needs work units that start at k tile 0");
};

} // namespace probe

#endif
