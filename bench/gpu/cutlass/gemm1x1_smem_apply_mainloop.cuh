/* gemm1x1_smem_apply_mainloop.cuh — a Hopper GEMM mainloop that applies the
 * previous layer's batch norm and ReLU to A in shared memory, in place,
 * before the warpgroup MMAs read it from there:
 * y = a' w^T with a'[m][k] = bf16(max(0, float(a[m][k]) * scale[k] + bias[k])).
 *
 * Why a second apply mainloop: the register-sourced one
 * (gemm1x1_apply_mainloop.cuh) costs 1.19-1.52x its plain GEMM on the
 * MMA-bound layers (NOTES v0.62). There the transform sits on the register
 * path between the shared-to-register copy and the wgmma that reads those
 * registers, and ptxas's C7513 rule (no control flow between a wgmma and
 * the instructions defining a later wgmma's A registers) leaves a bubble at
 * every k tile. Here the wgmmas read A from shared memory, as in the plain
 * GEMM; no register feeds them but the accumulators, so the transform of
 * k tile t + 1 can run while the asynchronous wgmmas of k tile t execute.
 *
 * What it is built on: CUTLASS 4.2's shared-memory-sourced warp-specialized
 * collective (MainloopSm90TmaGmmaWarpSpecialized, as the collective builder
 * assembles it for the probe's plain columns: Sm90Gemm's SsA). Its producer
 * side is kept as is (TMA of the A and B tiles into the stages: load(),
 * load_tail(), the pipeline, TensorStorage), and so is mma_tail(); mma() is
 * our own, modelled on the collective's: per k tile, wait for the stage;
 * then (ours) each MMA warpgroup rewrites the rows of A in that stage that
 * its own wgmmas read, fences them to the async proxy and meets its other
 * warps at a named barrier; then the k tile's wgmmas issue from shared
 * memory (the k tile before's may still be running), and once those of the
 * k tile before are done, its stage is released. The batch norm's
 * vectors (f32, length K) ride in the mainloop's Arguments/Params beside the
 * TMA descriptors, as in ApplyAMainloop. */
#ifndef MP_BENCH_GEMM1X1_SMEM_APPLY_MAINLOOP_CUH
#define MP_BENCH_GEMM1X1_SMEM_APPLY_MAINLOOP_CUH

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

#include "gemm1x1_apply_mainloop.cuh" /* bn_relu_bf16x2: the same f32 fma, ReLU and rounding */

namespace probe {

using namespace cute;

/* 16 bytes of shared memory at a shared-window address, as volatile asm:
 * the pipeline's stage wait is a volatile asm without a memory clobber, so
 * a plain C++ load could be hoisted above it; volatile asms keep their
 * order. */
CUTLASS_DEVICE uint4 ld_shared_16(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr));
    return v;
}

CUTLASS_DEVICE void st_shared_16(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

/* Batch norm's scale and bias of the 8 consecutive channels of one 16-byte
 * chunk of A: s[0] holds k0 .. k0 + 3, s[1] k0 + 4 .. k0 + 7. */
struct ChunkVectors {
    float4 s[2], b[2];
};

/* The 8 bf16 of one chunk (k0 .. k0 + 7, the lower address the lower k, so
 * each 32-bit word holds k in its low half) through bn_relu_bf16x2. */
CUTLASS_DEVICE uint4 bn_relu_chunk(uint4 a, ChunkVectors const &v) {
    a.x = bn_relu_bf16x2(a.x, make_float2(v.s[0].x, v.s[0].y), make_float2(v.b[0].x, v.b[0].y));
    a.y = bn_relu_bf16x2(a.y, make_float2(v.s[0].z, v.s[0].w), make_float2(v.b[0].z, v.b[0].w));
    a.z = bn_relu_bf16x2(a.z, make_float2(v.s[1].x, v.s[1].y), make_float2(v.b[1].x, v.b[1].y));
    a.w = bn_relu_bf16x2(a.w, make_float2(v.s[1].z, v.s[1].w), make_float2(v.b[1].z, v.b[1].w));
    return a;
}

/* Base: the CollectiveMma of MainloopSm90TmaGmmaWarpSpecialized for bf16,
 * A and B K-major (the builder's, Sm90Gemm's SsA). GemmUniversal sees this
 * struct as its CollectiveMainloop: dispatch policy, shared storage,
 * pipeline, load_init/load/load_tail, mma_tail and prefetch_tma_descriptors
 * come from Base; Arguments, Params, to_underlying_arguments and
 * can_implement from WithBnVectors; mma is ours. */
template <class Base> struct SmemApplyMainloop : WithBnVectors<Base, 16> {
    using typename WithBnVectors<Base, 16>::Params;
    using typename Base::MainloopPipeline;
    using typename Base::PipelineState;
    using typename Base::SmemLayoutA;
    using typename Base::SmemLayoutB;
    using typename Base::TensorStorage;
    using typename Base::TileShape;
    using typename Base::TiledMma;

    /* the stage layout this mainloop's addressing assumes: K-major bf16 in
     * the 128-byte swizzle atom (8 rows of 64 k, 16-byte chunks permuted
     * within each 128-byte row by the row's index mod 8), a stage of
     * BLK_M x 64 */
    static_assert(cute::is_same_v<typename Base::SmemLayoutAtomA, GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>>,
                  "A's stages in the K-major 128-byte swizzle");
    /* Base's mma_tail waits for all wgmmas and releases the one stage
     * (K_PIPE_MMAS) that mma() leaves held: mma() must release the others */
    static_assert(Base::K_PIPE_MMAS == 1, "mma() keeps one k tile's wgmmas in flight, as Base's");

    static constexpr int BlkM = size<0>(TileShape{}), BlkK = size<2>(TileShape{});
    static constexpr int WarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    static constexpr int AtomM = 64;                     /* rows of one warpgroup MMA (m64nNk16) */
    static constexpr int ChunkElems = 8;                 /* bf16 in a 16-byte chunk: the swizzle's unit */
    static constexpr int ChunkCols = BlkK / ChunkElems;  /* chunks in a row of a k tile: 8 */
    static constexpr int RowStep = cutlass::NumThreadsPerWarpGroup / ChunkCols; /* rows a warpgroup pass covers: 16 */
    static constexpr int MmaM = BlkM / (AtomM * WarpGroups); /* a warpgroup's 64-row blocks */
    static constexpr int Chunks = MmaM * (AtomM / RowStep);  /* a thread's chunks a k tile: 4 or 8 */
    static_assert(BlkK == 64, "one swizzle atom wide: the addressing below assumes the 128-byte atom spans the k tile");
    static_assert(MmaM * AtomM * WarpGroups == BlkM, "the warpgroups' MMAs tile BLK_M in 64-row blocks");

    /* The stage layout, (BLK_M, BLK_K, PIPE) -> element offset: the
     * swizzle (layout_a) over the linear layout (layout_b). The hardware
     * (TMA, wgmma) swizzles the absolute shared-memory byte address, and
     * this collective aligns smem_A to 128 bytes only, not to the swizzle's
     * span (1024), so the swizzle is applied to each chunk's absolute byte
     * address (swizzle_bytes), never to an offset from smem_A. */
    using StageLayout = decltype(as_position_independent_swizzle_layout(SmemLayoutA{}));
    using StageSwizzle = remove_cvref_t<decltype(StageLayout{}.layout_a())>;
    static constexpr int SwizzleSpan = 1 << (StageSwizzle::num_base + StageSwizzle::num_bits + StageSwizzle::num_shft);
    /* where stage 1 starts, before the swizzle (the stage mode is linear: stage s at s times this), in elements */
    static constexpr int StageStride = decltype(StageLayout{}.layout_b()(_0{}, _0{}, _1{}))::value;
    /* so that stage s's offsets are stage 0's + s * StageStride (the swizzle
     * neither reads nor writes the bits a stage adds), and a chunk's 8
     * elements stay together and in order (the swizzle moves whole chunks) */
    static_assert(StageStride % SwizzleSpan == 0, "a stage starts on a whole swizzle span");
    static_assert((1 << StageSwizzle::num_base) == ChunkElems, "the swizzle permutes 16-byte chunks");

    /* The stage's swizzle on a shared-window byte address (bf16: the
     * element swizzle's shifts one bit up), as TMA and wgmma apply it. */
    CUTE_HOST_DEVICE static uint32_t swizzle_bytes(uint32_t addr) {
        constexpr int base = StageSwizzle::num_base + 1, shift = StageSwizzle::num_shft;
        constexpr uint32_t mask = (1u << StageSwizzle::num_bits) - 1;
        return addr ^ (((addr >> (base + shift)) & mask) << base);
    }

    /* Which chunks of a stage a thread transforms: thread t of warpgroup wg
     * takes chunk column c = t % 8 (channels 8c .. 8c + 7 of the k tile) of
     * rows t / 8 + 16 i (i < 4) of each 64-row block that wg's wgmmas read.
     * Those blocks come from the tiled MMA's own partition of the tile (an
     * identity tensor partitioned as the wgmmas partition A): one block of
     * 64 in ping-pong and in 128-row cooperative tiles, two interleaved ones
     * (rows 0-63 and 128-191, or 64-127 and 192-255) in 256-row cooperative
     * tiles. A warp's 8 consecutive threads cover one row's 8 chunks, 128
     * bytes: no bank conflict. Offsets: elements into stage 0 before the
     * swizzle (StageLayout's linear part; mma() swizzles the absolute
     * address). Host and device: a host check can compare them with the
     * hardware's swizzle. */
    CUTE_HOST_DEVICE static void chunk_offsets(int warp_group, int t, int (&offset)[Chunks]) {
        TiledMma tiled_mma;
        auto wg_mma = tiled_mma.get_slice(warp_group * cutlass::NumThreadsPerWarpGroup);
        /* (MMA = (64, 16), MMA_M, MMA_K): the (m, k) in the tile of each element of A the warpgroup's wgmmas read */
        Tensor tCcA = wg_mma.partition_A(make_identity_tensor(make_shape(Int<BlkM>{}, Int<BlkK>{})));
        static_assert(cute::is_same_v<remove_cvref_t<decltype(shape<0>(tCcA))>, Shape<Int<AtomM>, _16>>,
                      "a wgmma reads A as 64 rows x 16 k");
        CUTE_STATIC_ASSERT_V(size<1>(tCcA) == Int<MmaM>{});
        const int c = t % ChunkCols;
        CUTLASS_PRAGMA_UNROLL
        for (int mm = 0; mm < MmaM; ++mm) {
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < AtomM / RowStep; ++i) {
                const int row = get<0>(tCcA(make_coord(t / ChunkCols + RowStep * i, 0), mm, 0));
                offset[mm * (AtomM / RowStep) + i] = StageLayout{}.layout_b()(row, c * ChunkElems, 0);
            }
        }
    }

    /* Consumer side: the MMA warpgroups' loop over k_tile_count k tiles of
     * this output tile (the stages in smem_pipe_read's order), accumulating
     * into accum. Per k tile t:
     *   1. wait for t's stage (the TMA's bytes of A and B have landed);
     *   2. transform this thread's chunks of t's A in place: 16-byte loads,
     *      bn_relu_chunk with the vectors loaded one k tile before, 16-byte
     *      stores to the same addresses;
     *   3. fence.proxy.async.shared::cta: these generic-proxy stores become
     *      visible to the async proxy, through which the wgmmas read;
     *   4. a named barrier over the warpgroup's 128 threads: a wgmma is
     *      issued by the whole warpgroup and reads all of its 64-row blocks,
     *      which all 4 warps wrote;
     *   5. load the vectors of t + 1 (hidden behind the k tile's MMAs and
     *      the next stage's wait: they are used only at t + 1's step 2);
     *   6. issue t's wgmmas (BLK_K / 16, from shared memory, as Base's), commit;
     *   7. warpgroup_wait<1>: the wgmmas of t - 1 are done (t's may run on),
     *      so release t - 1's stage to the producer, as Base's mma() does.
     * So steps 1-4 of k tile t + 1 run while t's wgmmas are in flight; the
     * tensor cores idle only where a transform takes longer than a k tile's
     * MMAs (or the stage comes late). The first k tile is peeled off (as in
     * Base's mma()) for the accumulate flag; it releases nothing. Base's
     * mma_tail waits for the last k tile's wgmmas and releases its stage.
     *
     * Why in place is safe: each stage is read by one output tile's wgmmas
     * (ping-pong: by one warpgroup's; cooperative: each warpgroup's wgmmas
     * read only its own 64-row blocks of A, which only it rewrites, and B,
     * which nobody does). The producer refills a stage only after every
     * consumer thread released it, after the wgmmas reading it completed;
     * our stores to it precede that release, and the fence orders them
     * before the async proxy's later accesses (the wgmmas', the next TMA's).
     *
     * The named barrier: one per warpgroup, user id
     * canonical_warp_group_idx() (1 and 2 for the two MMA warpgroups of
     * either kernel: hardware ids 9 and 10). CUTLASS reserves hardware ids
     * 0-7 for itself (ReservedNamedBarriers; of those these kernels use only
     * the epilogue's, 1) and uses none above; the ping-pong kernel orders
     * its two warpgroups with mbarriers in shared memory, not named
     * barriers. Distinct ids per warpgroup, although ping-pong's order
     * barrier already keeps the two warpgroups' mma() apart. The id is a
     * run-time value, so ptxas reserves all 16 named barriers for the
     * kernel ("used 16 barriers"): harmless with one CTA an SM, which the
     * stages' shared memory allows anyway.
     *
     * The k of a chunk: k_tile * BLK_K + 8c, k_tile counted from 0 over the
     * k tiles of this output tile: every work unit of the persistent tile
     * scheduler starts at k tile 0 (gemm1x1_sm90_kernels.cuh asserts that
     * scheduler). Chunks at k >= K (the vectors of the k tile after the
     * last, or a K tail) get scale 0 and bias 0, so A's zero fill stays 0.
     * Rows past M (zero-filled by TMA) are transformed too, to max(0,
     * bias[k]); harmless, their outputs are not stored. */
    template <class FrgTensorC>
    CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC &accum,
                            int k_tile_count, int thread_idx, TensorStorage &shared_tensors, Params const &params) {
        static_assert(is_rmem<FrgTensorC>::value, "accumulators in registers");
        assert(k_tile_count >= 1);

        Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{}); /* (BLK_M, BLK_K, PIPE) */
        Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{}); /* (BLK_N, BLK_K, PIPE) */

        /* thread_idx: 0 .. size(TiledMma) - 1 (cooperative: two warpgroups;
         * ping-pong: each warpgroup its own mma(), from 0) */
        const int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
        const int wg_thread = thread_idx % cutlass::NumThreadsPerWarpGroup;
        TiledMma tiled_mma;
        auto wg_mma = tiled_mma.get_slice(warp_group * cutlass::NumThreadsPerWarpGroup);
        Tensor tCrA = wg_mma.make_fragment_A(wg_mma.partition_A(sA)); /* (MMA, MMA_M, MMA_K, PIPE) descriptors */
        Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB)); /* (MMA, MMA_N, MMA_K, PIPE) descriptors */
        CUTE_STATIC_ASSERT_V(size<1>(tCrA) == size<1>(accum));
        CUTE_STATIC_ASSERT_V(size<1>(tCrB) == size<2>(accum));
        constexpr int KB = size<2>(tCrA);

        /* this thread's chunks: shared-window byte addresses in stage 0,
         * swizzled as absolute addresses (stage s's: + s * StageBytes, a
         * whole number of swizzle spans, which the swizzle leaves alone) */
        int offset[Chunks];
        chunk_offsets(warp_group, wg_thread, offset);
        const uint32_t smem_a = cute::cast_smem_ptr_to_uint(shared_tensors.smem_A.data());
        uint32_t chunk_addr[Chunks];
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < Chunks; ++i)
            chunk_addr[i] = swizzle_bytes(smem_a + offset[i] * uint32_t(sizeof(cutlass::bfloat16_t)));
        constexpr uint32_t StageBytes = StageStride * sizeof(cutlass::bfloat16_t);
        const int k_in_tile = (wg_thread % ChunkCols) * ChunkElems;
        const cutlass::arch::NamedBarrier wg_barrier(cutlass::NumThreadsPerWarpGroup,
                                                     static_cast<uint32_t>(cutlass::canonical_warp_group_idx()));

        /* the chunk's scale and bias in k tile k_tile; 0 past K */
        auto load_vectors = [&](int k_tile) {
            ChunkVectors v;
            const int k0 = k_tile * BlkK + k_in_tile;
            const bool in_k = k0 < params.k;
            CUTLASS_PRAGMA_UNROLL
            for (int h = 0; h < 2; ++h) {
                v.s[h] = in_k ? *reinterpret_cast<float4 const *>(params.scale + k0 + 4 * h) : make_float4(0, 0, 0, 0);
                v.b[h] = in_k ? *reinterpret_cast<float4 const *>(params.bias + k0 + 4 * h) : make_float4(0, 0, 0, 0);
            }
            return v;
        };
        /* steps 2-4: this thread's chunks of the stage, transformed in place
         * (all loads first, then the math, then the stores: the loads'
         * latency overlaps), then published to the warpgroup's wgmmas */
        auto transform_stage = [&](int stage, ChunkVectors const &v) {
            const uint32_t stage_base = stage * StageBytes;
            uint4 a[Chunks];
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < Chunks; ++i) a[i] = ld_shared_16(chunk_addr[i] + stage_base);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < Chunks; ++i) a[i] = bn_relu_chunk(a[i], v);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < Chunks; ++i) st_shared_16(chunk_addr[i] + stage_base, a[i]);
            cutlass::arch::fence_view_async_shared();
            wg_barrier.arrive_and_wait();
        };
        auto issue_mmas = [&](int stage) {
            warpgroup_arrive();
            CUTLASS_PRAGMA_UNROLL
            for (int kb = 0; kb < KB; ++kb) {
                cute::gemm(tiled_mma, tCrA(_, _, kb, stage), tCrB(_, _, kb, stage), accum);
                tiled_mma.accumulate_ = GMMA::ScaleOut::One;
            }
            warpgroup_commit_batch();
        };

        PipelineState smem_pipe_release = smem_pipe_read;
        ChunkVectors vectors = load_vectors(0);
        tiled_mma.accumulate_ = GMMA::ScaleOut::Zero; /* the first k-block overwrites the accumulators */
        warpgroup_fence_operand(accum);
        { /* k tile 0: steps 1-6 */
            auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
            pipeline.consumer_wait(smem_pipe_read, barrier_token);
            const int read_stage = smem_pipe_read.index();
            transform_stage(read_stage, vectors);
            vectors = load_vectors(1);
            issue_mmas(read_stage);
            ++smem_pipe_read;
        }
        warpgroup_fence_operand(accum);
        CUTLASS_PRAGMA_NO_UNROLL
        for (int k_tile = 1; k_tile < k_tile_count; ++k_tile) {
            auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
            pipeline.consumer_wait(smem_pipe_read, barrier_token);
            const int read_stage = smem_pipe_read.index();
            transform_stage(read_stage, vectors); /* k tile - 1's wgmmas in flight meanwhile */
            vectors = load_vectors(k_tile + 1);
            warpgroup_fence_operand(accum);
            issue_mmas(read_stage);
            warpgroup_wait<1>(); /* k tile - 1's wgmmas done */
            warpgroup_fence_operand(accum);
            pipeline.consumer_release(smem_pipe_release); /* k tile - 1's stage */
            ++smem_pipe_read;
            ++smem_pipe_release;
        }
        warpgroup_fence_operand(accum);
    }
};

} // namespace probe

#endif
