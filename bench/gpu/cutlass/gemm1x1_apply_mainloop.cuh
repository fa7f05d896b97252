/* gemm1x1_apply_mainloop.cuh — a Hopper GEMM mainloop that applies the
 * previous layer's batch norm and ReLU to A on its way to the tensor cores:
 * y = a' w^T with a'[m][k] = bf16(max(0, float(a[m][k]) * scale[k] + bias[k])).
 *
 * What it is built on: CUTLASS 4.2's register-sourced warp-specialized
 * collective (MainloopSm90TmaGmmaRmemAWarpSpecialized, assembled by
 * RmemAMainloop in gemm1x1_sm90_kernels.cuh). Its producer side is kept as
 * is (TMA of the A and B tiles into the shared-memory stages: load(),
 * load_tail(), the pipeline, TensorStorage); its consumer side, mma(), is
 * our own, because CUTLASS's copies A from shared memory into registers and
 * hands it to the warpgroup MMA untouched (its TransformA parameter is not
 * applied there). Ours transforms each k-block's A fragment in registers
 * between that copy and its MMA. The batch norm's vectors (f32, length K)
 * ride in the mainloop's Arguments/Params beside the TMA descriptors.
 *
 * Against CUTLASS's mma(): B is K-major bf16 here, so its B-transpose step
 * (for MN-major B of 4-byte and narrower types) and the A/B swap are dropped
 * (asserted off). Kept: the shared-to-register copy of k-block k+1 issued
 * before the MMA of k-block k, at most two MMA batches in flight
 * (warpgroup_wait<2> after each commit), a stage released once the MMAs
 * that read it are done (at k-block 1 of the next k tile), the first k tile
 * peeled off the loop, mma_tail unchanged. Changed, in both of mma()'s
 * schedules (ApplySchedule): k-block 0 of a k tile is transformed at that
 * k tile's start, not copied into the MMA's registers during the k tile
 * before as CUTLASS's does. tile_start also waits for the stage and copies
 * k-block 0 there; prefetch copies it during the k tile before, into the
 * raw registers, when a barrier test (no wait, no branch) finds its stage
 * full by then. Why: with a transform, ptxas serialized all the kernel's
 * wgmmas (C7513, "non wgmma instructions defining input registers of a
 * wgmma between start and end of the pipeline stage") for every order
 * tried in which control flow (a stage wait's mbarrier spin loop, or just
 * an if around a copy) came between a wgmma and the transform defining a
 * later wgmma's A within the k tile, or in which a wgmma's A registers
 * were defined before a stage wait and used after it; bisected on the
 * PTX. Accepted: the transforms of k-blocks 1.. inside a k tile with no
 * control flow in it, and k-block 0's transform after all of the k tile's
 * start's control flow, just before its MMA. No loop
 * body branches at run time but on the stage barriers.
 *
 * The batch norm's scale and bias are loaded from global memory VecAhead
 * k-blocks ahead of their transform into a ring of registers (template
 * parameter, 2 by default; 4 and 8 compiled too on the prefetch schedule,
 * without C75xx notes; see mma() for the ring, and gemm1x1_sm90_kernels.cuh's
 * kDeepVecAhead for where the deeper rings spilled). Above KB (8), the k
 * tile loop also branches between k tiles on whether one follows. */
#ifndef MP_BENCH_GEMM1X1_APPLY_MAINLOOP_CUH
#define MP_BENCH_GEMM1X1_APPLY_MAINLOOP_CUH

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace probe {

using namespace cute;

/* Two k-adjacent bf16 of A (k in the low half, k + 1 in the high half of
 * one register) through max(0, a * s + b) in f32, rounded to bf16 and
 * packed again: 2 integer ops to widen, 2 FFMA, and one cvt that rounds,
 * clamps at zero (.relu) and packs both halves. max(0, round(v)) equals
 * round(max(0, v)): rounding keeps the sign and rounds 0 to 0 (a NaN
 * stays NaN here where fmaxf would give 0; the probe's data has none). */
CUTLASS_DEVICE uint32_t bn_relu_bf16x2(uint32_t a, float2 s, float2 b) {
    const float lo = __uint_as_float(a << 16), hi = __uint_as_float(a & 0xFFFF0000u);
    const float y0 = fmaf(lo, s.x, b.x), y1 = fmaf(hi, s.y, b.y);
    uint32_t r;
    asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y1), "f"(y0)); /* first operand: the high half */
    return r;
}

/* A mainloop's Arguments and Params with the batch norm's vectors (f32,
 * length K) beside Base's TMA descriptors, for both apply mainloops (this
 * file's, and gemm1x1_smem_apply_mainloop.cuh's). VecAlign: the bytes the
 * mainloop reads them in (8: float2 pairs; 16: float4), which the pointers
 * must be aligned to; K is a multiple of 8 by TMA's 16-byte rule, so a pair
 * or a chunk of 8 channels never straddles K. */
template <class Base, int VecAlign> struct WithBnVectors : Base {
    static_assert(cute::is_same_v<typename Base::ElementA, cutlass::bfloat16_t> &&
                      cute::is_same_v<typename Base::ElementB, cutlass::bfloat16_t>,
                  "both apply mainloops' transforms unpack and repack bf16 pairs");

    struct Arguments : Base::Arguments {
        float const *scale = nullptr; /* [K], f32: batch norm's per-channel scale of A's channels */
        float const *bias = nullptr;  /* [K], f32 */
    };

    struct Params : Base::Params {
        float const *scale;
        float const *bias;
        int k; /* the problem's K: the vectors are read only below it */
    };

    template <class ProblemShape>
    static Params to_underlying_arguments(ProblemShape const &problem_shape, Arguments const &args, void *workspace) {
        auto mnkl = append<4>(problem_shape, 1);
        return {Base::to_underlying_arguments(problem_shape, args, workspace), args.scale, args.bias,
                static_cast<int>(get<2>(mnkl))};
    }

    /* Base's TMA alignment checks, and the vectors present and aligned */
    template <class ProblemShape> static bool can_implement(ProblemShape const &problem_shape, Arguments const &args) {
        return Base::can_implement(problem_shape, args) && args.scale && args.bias &&
               reinterpret_cast<uintptr_t>(args.scale) % VecAlign == 0 &&
               reinterpret_cast<uintptr_t>(args.bias) % VecAlign == 0;
    }
};

/* Where a k tile's k-block 0 gets its A: copied from shared memory and
 * transformed at the k tile's start, after waiting for its stage
 * (tile_start), or during the k tile before, so that its MMA issues right
 * after the previous k tile's last one (prefetch). ApplyAMainloop::mma
 * spells out both. */
enum class ApplySchedule { tile_start, prefetch };

/* Base: the CollectiveMma of MainloopSm90TmaGmmaRmemAWarpSpecialized
 * (RmemAMainloop<...>::CollectiveOp). GemmUniversal sees this struct as its
 * CollectiveMainloop: the dispatch policy, shared storage, pipeline,
 * load_init/load/load_tail, mma_tail and prefetch_tma_descriptors come from
 * Base; Arguments, Params, to_underlying_arguments and can_implement from
 * WithBnVectors; mma is ours. */
/* VecAhead: how many k-blocks ahead of its transform a k-block's scale and
 * bias are loaded (the register ring's slots; see mma()). */
template <class Base, ApplySchedule Schedule = ApplySchedule::tile_start, int VecAhead = 2>
struct ApplyAMainloop : WithBnVectors<Base, 8> {
    using typename WithBnVectors<Base, 8>::Params;
    using typename Base::MainloopPipeline;
    using typename Base::PipelineState;
    using typename Base::SmemLayoutA;
    using typename Base::SmemLayoutB;
    using typename Base::SmemCopyAtomA;
    using typename Base::TensorStorage;
    using typename Base::TileShape;
    using typename Base::TiledMma;

    static_assert(!Base::SwapAB && !Base::TransposeB, "B K-major, A not swapped: no B transpose to run");

    /* Consumer side: the MMA warpgroups' loop over k_tile_count k tiles of
     * this output tile (the stages in smem_pipe_read's order), accumulating
     * into accum. Per k tile, KB = BLK_K / 16 k-blocks (one warpgroup MMA
     * each, per MMA_M). g below: the global k-block index.
     *
     * ApplySchedule::tile_start. A k tile starts with
     *   0. wait for its stage; copy k-block 0's A from shared memory to raw
     *      registers and transform it into the MMA's A registers (slot 0);
     * then per k-block kb, in this order:
     *   1. copy k-block kb + 1's A to its raw registers (kb + 1 < KB);
     *   2. the MMA of k-block kb (its A transformed one k-block earlier);
     *   3. load scale/bias of k-block g + VecAhead into ring slot
     *      g % VecAhead, whose values (k-block g's) the transform of slot kb
     *      used already;
     *   4. warpgroup_wait<2>: at most the MMAs of g - 1 and g in flight;
     *   5. transform raw slot kb + 1 into MMA slot kb + 1 (its copy has had
     *      the MMA issue and the wait to land, its vectors VecAhead - 1
     *      k-blocks' time); at kb = 1 (not in the first k tile), release the previous
     *      k tile's stage: its last MMA (g - 2) is done.
     * So between the last MMA of a k tile and the first of the next, the
     * warps wait for the stage, load k-block 0 from shared memory and
     * transform it: a dependent chain (stage barrier, shared-memory load
     * latency, the transform) that only the two MMAs in flight cover.
     *
     * ApplySchedule::prefetch loads k-block 0 during the k tile before,
     * so that when the stage has come in by then, a k tile boundary looks
     * like any other k-block boundary (the next MMA's A transformed from
     * registers loaded a k-block earlier):
     *   0. only where the k tile's k-block 0 was not prefetched (4a): wait
     *      for its stage and copy k-block 0 (as tile_start); then, always,
     *      transform raw slot 0 into MMA slot 0 (no try_wait of the next
     *      stage here, unlike tile_start and CUTLASS: 4a tests it);
     *   steps 1 to 5 as above, and after step 4 at kb = KB - 2:
     *   4a. test the next k tile's stage barrier (mbarrier test_wait: no
     *      wait, no branch); where a k tile follows and every lane of the
     *      warp saw the stage full, copy its k-block 0 into raw slot 0
     *      (prefetched), else this k tile's own k-block 0 again (its stage
     *      is held; unused, written over at the next k tile's step 0). The
     *      stage index is selected, not branched on: control flow inside
     *      the k tile, even just an if around this copy, made ptxas
     *      serialize the wgmmas (C7513, through the transform of slot
     *      KB - 1 after it, wherever the wait went; see the top).
     * When the stage is not full at kb = KB - 2 (memory-bound layers, or
     * the producer behind), step 0 waits and copies as tile_start does.
     * The per-warp vote (__all_sync) keeps step 0's branch from diverging
     * within a warp before the warp-wide wgmma.
     *
     * Why prefetch is race-free:
     *  - raw slot 0 reads the next stage only after this lane's test saw
     *    its phase complete: test_wait acquires (.acquire.cta, its default),
     *    as consumer_wait's try_wait does, so the TMA's bytes are visible;
     *    otherwise it reads the current k tile's stage, full and held;
     *  - stages are released as in tile_start: a stage at kb = 1 of the k
     *    tile after its own, after warpgroup_wait<2>, when the MMAs in
     *    flight are that k tile's k-blocks 0 and 1, so every MMA that read
     *    its B is done; every copy from it (the k tile before's 4a, its own
     *    steps 0 and 1 and 4a) comes before the release in program order,
     *    and the release (an mbarrier arrive, release semantics) orders
     *    them; the wait counts are tile_start's;
     *  - the test only reads a barrier, and its result is used only where
     *    a k tile of this output tile follows, so nothing waits on or reads
     *    a stage the producer fills for another work unit; pipeline states
     *    advance one stage per k tile as before; Base's mma_tail releases
     *    the last stage;
     *  - register slots: raw slot 0, written at kb = KB - 2, was last read
     *    by the transform at this k tile's start; MMA slot 0 as in
     *    tile_start (written at a k tile's start, last read by the MMA of
     *    g - KB + 1 <= g - 2, done); the ring as in tile_start.
     * MMA slot kb + 1 was last read by the MMA of g + 1 - KB, retired by
     * step 4 when KB >= 4; the raw slots are read only by the transform.
     *
     * Where each register's k comes from: an identity tensor over the
     * (BLK_M, BLK_K) tile, partitioned by the same thread slice as A
     * (partition_A), holds each fragment element's (m, k) in the tile; the
     * absolute k adds k_tile * BLK_K, k_tile counted from 0 over the tiles
     * consumed here. That holds because every work unit the persistent tile
     * scheduler hands out starts at k tile 0 (get_work_k_tile_start() == 0;
     * gemm1x1_sm90_kernels.cuh asserts that scheduler); a split-K or
     * stream-K scheduler would have to pass its start in.
     *
     * The scale/bias values: read from global memory (float2: the wgmma A
     * layout gives each thread pairs k, k + 1, asserted below), prefetched
     * into registers VecAhead k-blocks ahead of the MMA that uses them (the
     * load issued at step 3 of k-block g - VecAhead, its first use at step 5
     * of g - 1: VecAhead - 1 k-blocks of MMA issue between), rather
     * than staged per k tile in shared memory: a thread needs only 4
     * distinct k per k-block (k = 2t, 2t + 1, 2t + 8, 2t + 9 for lane t % 4,
     * the same for all its rows: 2 float2 loads of each vector per
     * k-block), the vectors are at most 8 KiB each and stay in L1/L2 across
     * the CTA's tiles, and staging would need the producer warp or a
     * barrier among the consumer warps. Plain loads, not __ldg: its inline
     * asm kept the compiler from folding the equal addresses of a thread's
     * rows (8 loads a k-block instead of 4, seen in the PTX).
     *
     * The ring: VecAhead slots of 2 float2 of each vector (the compiler
     * folds a thread's equal k: 8 registers a slot), slot g % VecAhead for
     * global k-block g, so that a slot is written (step 3 of g) right after
     * its last reader (the transform of g, at step 5 of g - 1 or step 0)
     * and read VecAhead - 1 k-blocks later. Registers cannot be indexed at
     * run time, so every slot index must be a compile-time constant: with
     * VecAhead dividing KB (2, 4 for BLK_K 64), slot kb % VecAhead; with KB
     * dividing VecAhead (8 = two k tiles of 4), the slot depends on the k
     * tile's parity too, (p * KB + kb) % VecAhead with p = k_tile %
     * (VecAhead / KB), and the k tile loop runs VecAhead / KB k tiles a
     * trip (each after the first under an if on k_tile_count, between k
     * tiles like the loop's own branch), each with its parity a constant.
     * Not a ring rotated by register moves at each k tile's end: a move of
     * a register whose load is in flight would wait for the load. Cost:
     * 8 registers a slot (VecAhead 2: 16, 4: 32, 8: 64); the SASS has 4
     * LDG.64 a k-block at any depth, and VecAhead * 4 before the first MMA.
     *
     * Tails: rows of A past M are zero-filled by TMA and transformed too
     * (to max(0, bias[k]), not 0); harmless, their outputs are not stored.
     * Columns k past K (the probe's tails layer) are zero-filled in A and in B: A's become max(0, bias[K - 2 or
     * K - 1]) (the clamped load below), times B's zeros, so they add 0. */
    template <class FrgTensorC>
    CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC &accum,
                            int k_tile_count, int thread_idx, TensorStorage &shared_tensors, Params const &params) {
        static_assert(is_rmem<FrgTensorC>::value, "accumulators in registers");
        constexpr int BlkM = size<0>(TileShape{}), BlkK = size<2>(TileShape{});

        Tensor sA = as_position_independent_swizzle_tensor(
            make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{})); /* (BLK_M, BLK_K, PIPE) */
        Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{}); /* (BLK_N, BLK_K, PIPE) */

        constexpr int WarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
        const int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
        TiledMma tiled_mma;
        auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
        auto wg_mma = tiled_mma.get_slice(make_layout(Int<WarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{})(warp_group));

        Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, Int<0>{})); /* (MMA, MMA_M, MMA_K): KB register slots */
        Tensor tCcA = thr_mma.partition_A(make_identity_tensor(make_shape(Int<BlkM>{}, Int<BlkK>{}))); /* (m, k) */
        Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB)); /* (MMA, MMA_N, MMA_K, PIPE) descriptors */

        auto smem_copy_A = make_tiled_copy_A(SmemCopyAtomA{}, tiled_mma);
        auto thr_copy_A = smem_copy_A.get_thread_slice(thread_idx);
        /* A as copied from shared memory, before the transform: registers of
         * its own (as CUTLASS's mixed-input mainloop keeps), so that the
         * MMA's A registers are written by the transform alone */
        Tensor tCrA_raw = make_fragment_like(tCrA);
        Tensor tArA = thr_copy_A.retile_D(tCrA_raw); /* (CPY, CPY_M, CPY_K) */
        Tensor tAsA = thr_copy_A.partition_S(sA); /* (CPY, CPY_M, CPY_K, PIPE) */

        constexpr int KB = size<2>(tCrA);
        constexpr int Pairs = size(tCrA(_, _, 0)) / 2; /* bf16 pairs a thread holds per k-block */
        static_assert(KB >= 4 && KB % 2 == 0, "slot kb + 1 free once two MMAs are in flight");
        /* the ring's slot of global k-block g is g % VecAhead; with VecAhead
         * and KB powers of two dividing one another, a k tile's slots are
         * (p * KB + kb) % VecAhead for its parity p = k_tile % VecRound, a
         * constant once the k-block loop and VecRound k tiles are unrolled */
        static_assert(VecAhead >= 2 && (VecAhead & (VecAhead - 1)) == 0,
                      "the transform of g + 1 follows the load into slot g: two slots at least");
        static_assert(KB % VecAhead == 0 || VecAhead % KB == 0, "VecAhead and KB divide one another");
        constexpr int VecRound = VecAhead > KB ? VecAhead / KB : 1; /* k tiles before the slots repeat */
        auto vec_slot = [](int parity, int kb) { return (parity * KB + kb) % VecAhead; };
        /* the coordinates index like the fragment: same MMA mode, same M and K counts */
        static_assert(cute::is_same_v<decltype(shape<0>(tCcA)), decltype(shape<0>(tCrA))>);
        CUTE_STATIC_ASSERT_V(size<1>(tCcA) == size<1>(tCrA) && size<2>(tCcA) == size<2>(tCrA));
        CUTE_STATIC_ASSERT_V(size<1>(tCrA) == size<1>(accum));
        CUTE_STATIC_ASSERT_V(size<2>(tAsA) == size<2>(tArA));
        /* elements 2j, 2j + 1 of a slot: one 32-bit register (fragment
         * stride 1) and k, k + 1 (coordinate stride 1 in k) */
        static_assert(size<0, 0>(tCrA) == 2 && stride<0, 0>(tCrA) == 1, "bf16 pairs share a register");
        static_assert(cute::is_same_v<remove_cvref_t<decltype(stride<0, 0>(tCcA))>, ScaledBasis<_1, 1>>,
                      "a register's two bf16 are k and k + 1");

        /* the ring: scale and bias of VecAhead k-blocks, slot g % VecAhead for global k-block g */
        float2 ring_s[VecAhead][Pairs], ring_b[VecAhead][Pairs];
        /* k past K (in the k-blocks prefetched beyond the last k tile, or a
         * K tail) reads channels K - 2, K - 1 instead: in bounds, and unused
         * or multiplied by B's zeros. Unconditional loads, so that the
         * compiler folds the pairs of equal k (rows m and m + 8, and the
         * MMA_M repeats) into one load. */
        auto load_vectors = [&](int slot, int k_tile, int kb) { /* kb: a k-block of k tile k_tile */
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < Pairs; ++j) {
                const int k = min(k_tile * BlkK + get<1>(tCcA(_, _, kb)(2 * j)), params.k - 2);
                ring_s[slot][j] = *reinterpret_cast<float2 const *>(params.scale + k);
                ring_b[slot][j] = *reinterpret_cast<float2 const *>(params.bias + k);
            }
        };
        auto apply = [&](int slot, int kb) { /* raw slot kb -> MMA slot kb */
            uint32_t const *in = reinterpret_cast<uint32_t const *>(raw_pointer_cast(tCrA_raw(_, _, kb).data()));
            uint32_t *out = reinterpret_cast<uint32_t *>(raw_pointer_cast(tCrA(_, _, kb).data()));
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < Pairs; ++j) {
                /* element 2j's register: its offset from the slot's first, in registers */
                const int r = tCrA(_, _, kb).layout()(2 * j) / 2;
                out[r] = bn_relu_bf16x2(in[r], ring_s[slot][j], ring_b[slot][j]);
            }
        };

        constexpr bool Prefetch = Schedule == ApplySchedule::prefetch;
        PipelineState smem_pipe_release = smem_pipe_read;
        tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
        warpgroup_fence_operand(accum);
        auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < VecAhead; ++g) load_vectors(g, g / KB, g % KB); /* slot g: k-block g */
        /* prefetch: whether raw slot 0 holds the current k tile's k-block 0
         * already (its stage was found full during the k tile before) */
        bool prefetched = false;

        /* One k tile. FirstTile: the output tile's first, peeled off the loop
         * (as CUTLASS's mma() does) so that the MMAs' accumulate flag is a
         * constant in both copies and nothing is released yet. Parity:
         * k_tile % VecRound, a constant, so that the ring's slots are. */
        auto k_tile_body = [&](int k_tile, auto first_tile, auto parity) {
            constexpr bool FirstTile = decltype(first_tile)::value;
            constexpr int P = decltype(parity)::value;
            const bool has_next = k_tile + 1 < k_tile_count;
            /* 0. this k tile's stage and k-block 0 (prefetch: unless fetched
             * during the k tile before), transformed */
            const int read_stage = smem_pipe_read.index();
            if constexpr (!Prefetch) {
                pipeline.consumer_wait(smem_pipe_read, barrier_token);
                ++smem_pipe_read; /* from here: the next k tile's stage */
                if (has_next) barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
                copy(smem_copy_A, tAsA(_, _, 0, read_stage), tArA(_, _, 0));
            } else {
                /* no try_wait of the next stage here (a potentially blocking
                 * instruction in front of this k tile's first MMA): 4a tests
                 * it, and a wait here goes without a token (a stale one
                 * could skip it) */
                if (!prefetched) {
                    if constexpr (FirstTile) pipeline.consumer_wait(smem_pipe_read, barrier_token);
                    else pipeline.consumer_wait(smem_pipe_read);
                    copy(smem_copy_A, tAsA(_, _, 0, read_stage), tArA(_, _, 0));
                }
                ++smem_pipe_read; /* from here: the next k tile's stage */
            }
            apply(vec_slot(P, 0), 0);
            warpgroup_fence_operand(accum);
            CUTLASS_PRAGMA_UNROLL
            for (int kb = 0; kb < KB; ++kb) {
                /* 1. */
                if (kb + 1 < KB) copy(smem_copy_A, tAsA(_, _, kb + 1, read_stage), tArA(_, _, kb + 1));
                /* 2. */
                warpgroup_arrive();
                cute::gemm(tiled_mma, tCrA(_, _, kb), tCrB(_, _, kb, read_stage), accum);
                tiled_mma.accumulate_ = GMMA::ScaleOut::One;
                warpgroup_commit_batch();
                /* 3. global k-block g + VecAhead's vectors into g's slot */
                load_vectors(vec_slot(P, kb), k_tile + (kb + VecAhead) / KB, (kb + VecAhead) % KB);
                /* 4. */
                warpgroup_wait<2>();
                /* 4a. (prefetch) the next k tile's k-block 0 into raw slot 0, if its
                 * stage is full already: a test, not a wait (no branch); else
                 * this k tile's own k-block 0 again (held, harmless, unused) */
                if constexpr (Prefetch) {
                    if (kb == KB - 2) {
                        /* per warp (each lane may see the barrier at another time), so
                         * that the branch on it at the next k tile's start does not diverge */
                        const bool full =
                            pipeline.consumer_test_wait(smem_pipe_read) == cutlass::BarrierStatus::WaitDone;
                        prefetched = __all_sync(0xFFFFFFFFu, has_next & full); /* & : no branch around the test */
                        copy(smem_copy_A, tAsA(_, _, 0, prefetched ? smem_pipe_read.index() : read_stage),
                             tArA(_, _, 0));
                    }
                }
                /* 5. */
                if (kb + 1 < KB) apply(vec_slot(P, kb + 1), kb + 1);
                if (!FirstTile && kb == 1) {
                    pipeline.consumer_release(smem_pipe_release); /* the previous k tile's MMAs are done */
                    ++smem_pipe_release;
                }
            }
            warpgroup_fence_operand(accum);
        };

        k_tile_body(0, cute::true_type{}, Int<0>{});
        /* VecRound k tiles a trip (their parities 1, 2, .., 0), each after
         * the first only where it exists: a branch between k tiles, where
         * the loop's own is */
        CUTLASS_PRAGMA_NO_UNROLL
        for (int k_tile = 1; k_tile < k_tile_count; k_tile += VecRound) {
            cute::for_each(make_seq<VecRound>{}, [&](auto u) {
                constexpr int U = decltype(u)::value;
                if (U == 0 || k_tile + U < k_tile_count)
                    k_tile_body(k_tile + U, cute::false_type{}, Int<(1 + U) % VecRound>{});
            });
        }
        warpgroup_fence_operand(accum);
    }
};

} // namespace probe

#endif
