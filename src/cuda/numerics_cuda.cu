// numerics_cuda.cu — numerics statistics on the GPU (numerics_cuda.h): one
// grid-stride kernel per tensor. Each thread classifies its values by the
// shared rule (amp/numerics_bounds.h); counts are summed per warp by shuffles
// and per block in shared memory, the octave histogram per warp in shared
// memory (lanes that hit the same bin add once, by __match_any_sync); each
// block then adds its non-zero totals to the slot in global memory, one
// atomic per count and bin.
#include <stdlib.h>
#include <string.h>

#include "amp/numerics_bounds.h"
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/numerics_cuda.h"

namespace {

enum { C_NAN, C_INF, C_ZERO, C_OVF16, C_OVBF16, C_UNF16, C_UNBF16, C_SUBF16, C_SUBBF16, N_COUNTS };

// One tensor's statistics as the device accumulates them.
struct dev_stats {
    unsigned long long count[N_COUNTS];
    unsigned int amax_bits;     // largest finite |x| (0: none)
    unsigned int amin_inverted; // MP_NB_F32_INF - smallest finite non-zero |x| bits (0: none)
    unsigned long long hist[MP_NUMERICS_HIST_BINS];
};

constexpr int WARPS = MP_CUDA_THREADS / 32;

__global__ void stats_kernel(const void *x, mp_dtype dt, long long n, dev_stats *out) {
    __shared__ unsigned int hist[WARPS][MP_NUMERICS_HIST_BINS];
    __shared__ unsigned int warp_count[WARPS][N_COUNTS + 2]; // the counts, then amax and amin
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int b = threadIdx.x; b < WARPS * MP_NUMERICS_HIST_BINS; b += blockDim.x) (&hist[0][0])[b] = 0;
    __syncthreads();
    unsigned int count[N_COUNTS] = {0};
    unsigned int amax = 0, amin = MP_NB_F32_INF;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // every lane of a warp runs the same number of iterations (for __match_any_sync)
    for (long long base = (long long)blockIdx.x * blockDim.x; base < n; base += stride) {
        const long long i = base + threadIdx.x;
        int bin = -1;
        if (i < n) {
            const uint32_t a = __float_as_uint(mp_ld(x, dt, i)) & 0x7fffffffu;
            if (a > MP_NB_F32_INF) count[C_NAN]++;
            else if (a == MP_NB_F32_INF) count[C_INF]++;
            else if (a == 0) count[C_ZERO]++;
            else {
                amax = max(amax, a);
                amin = min(amin, a);
                bin = mp_nb_octave(a) - MP_NUMERICS_HIST_MIN;
                const mp_nb_class h = mp_nb_classify_fp16(a), b = mp_nb_classify_bf16(a);
                count[C_OVF16] += h == MP_NB_OVERFLOW;
                count[C_UNF16] += h == MP_NB_UNDERFLOW;
                count[C_SUBF16] += h == MP_NB_SUBNORMAL;
                count[C_OVBF16] += b == MP_NB_OVERFLOW;
                count[C_UNBF16] += b == MP_NB_UNDERFLOW;
                count[C_SUBBF16] += b == MP_NB_SUBNORMAL;
            }
        }
        const unsigned int peers = __match_any_sync(0xffffffffu, bin);
        if (bin >= 0 && lane == __ffs(peers) - 1) hist[warp][bin] += __popc(peers);
        __syncwarp();
    }
    for (int off = 16; off > 0; off /= 2) {
        for (int c = 0; c < N_COUNTS; c++) count[c] += __shfl_down_sync(0xffffffffu, count[c], off);
        amax = max(amax, __shfl_down_sync(0xffffffffu, amax, off));
        amin = min(amin, __shfl_down_sync(0xffffffffu, amin, off));
    }
    if (lane == 0) {
        for (int c = 0; c < N_COUNTS; c++) warp_count[warp][c] = count[c];
        warp_count[warp][N_COUNTS] = amax;
        warp_count[warp][N_COUNTS + 1] = amin;
    }
    __syncthreads();
    if (threadIdx.x < N_COUNTS) { // one global atomic per block and count
        unsigned long long sum = 0;
        for (int w = 0; w < WARPS; w++) sum += warp_count[w][threadIdx.x];
        if (sum) atomicAdd(&out->count[threadIdx.x], sum);
    } else if (threadIdx.x == N_COUNTS) {
        unsigned int hi = 0, lo = MP_NB_F32_INF;
        for (int w = 0; w < WARPS; w++) hi = max(hi, warp_count[w][N_COUNTS]), lo = min(lo, warp_count[w][N_COUNTS + 1]);
        if (hi) atomicMax(&out->amax_bits, hi);
        if (lo < MP_NB_F32_INF) atomicMax(&out->amin_inverted, MP_NB_F32_INF - lo);
    }
    for (int b = threadIdx.x; b < MP_NUMERICS_HIST_BINS; b += blockDim.x) {
        unsigned long long sum = 0;
        for (int w = 0; w < WARPS; w++) sum += hist[w][b];
        if (sum) atomicAdd(&out->hist[b], sum);
    }
}

} // namespace

struct mp_cuda_numerics {
    mp_cuda_ctx *ctx;
    int slots;
    dev_stats *dev;  // slots
    dev_stats *host; // pinned, slots
    cudaEvent_t copied;
    bool pending;    // a readback was queued and not yet seen finished
};

extern "C" mp_status mp_cuda_numerics_create(mp_cuda_ctx *ctx, int slots, mp_cuda_numerics **out) {
    *out = NULL;
    if (slots < 1) slots = 1;
    mp_cuda_numerics *n = (mp_cuda_numerics *)calloc(1, sizeof *n);
    if (!n) return mp_error(MP_ERR_NOMEM, "numerics statistics: out of host memory");
    n->ctx = ctx;
    n->slots = slots;
    const size_t bytes = (size_t)slots * sizeof(dev_stats);
    cudaError_t e = cudaMalloc((void **)&n->dev, bytes);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&n->host, bytes);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&n->copied, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        mp_cuda_numerics_destroy(n);
        return mp_error(e == cudaErrorMemoryAllocation ? MP_ERR_NOMEM : MP_ERR_INTERNAL,
                        "numerics statistics: %zu bytes for %d tensors: %s", bytes, slots, cudaGetErrorString(e));
    }
    *out = n;
    return MP_OK;
}

extern "C" void mp_cuda_numerics_destroy(mp_cuda_numerics *n) {
    if (!n) return;
    if (n->pending) cudaEventSynchronize(n->copied);
    cudaFree(n->dev);
    if (n->host) cudaFreeHost(n->host);
    if (n->copied) cudaEventDestroy(n->copied);
    free(n);
}

extern "C" mp_status mp_cuda_numerics_clear(mp_cuda_numerics *n) {
    return mp_cuda_check(cudaMemsetAsync(n->dev, 0, (size_t)n->slots * sizeof(dev_stats), n->ctx->stream),
                         "cudaMemsetAsync", "numerics statistics");
}

extern "C" mp_status mp_cuda_numerics_tensor(mp_cuda_numerics *n, int slot, const void *x, mp_dtype dt,
                                             int64_t numel) {
    if (slot < 0 || slot >= n->slots)
        return mp_error(MP_ERR_INTERNAL, "numerics statistics: slot %d of %d", slot, n->slots);
    if (!mp_cuda_float_dtype(dt))
        return mp_error(MP_ERR_INVALID_ARG, "numerics statistics: dtype %s is not f32, f16 or bf16", mp_dtype_name(dt));
    if (numel <= 0) return MP_OK;
    /* few blocks, many values per thread: every block ends in ~25 global atomics on the slot's few addresses */
    const long long per_block = (long long)MP_CUDA_THREADS * 16, cap = 4LL * (n->ctx->sm_count > 0 ? n->ctx->sm_count : 132);
    long long blocks = (numel + per_block - 1) / per_block;
    if (blocks > cap) blocks = cap;
    stats_kernel<<<(unsigned)blocks, MP_CUDA_THREADS, 0, n->ctx->stream>>>(x, dt, numel, n->dev + slot);
    return mp_cuda_check(cudaGetLastError(), "stats_kernel", "numerics statistics");
}

extern "C" mp_status mp_cuda_numerics_readback(mp_cuda_numerics *n, int count) {
    if (count < 0 || count > n->slots)
        return mp_error(MP_ERR_INTERNAL, "numerics statistics: %d slots read of %d", count, n->slots);
    if (count) MP_CUDA_TRY(cudaMemcpyAsync(n->host, n->dev, (size_t)count * sizeof(dev_stats), cudaMemcpyDeviceToHost,
                                           n->ctx->stream), "numerics statistics to the host");
    MP_CUDA_TRY(cudaEventRecord(n->copied, n->ctx->stream), "numerics statistics to the host");
    n->pending = true;
    return MP_OK;
}

extern "C" mp_status mp_cuda_numerics_ready(mp_cuda_numerics *n, bool wait, bool *ready) {
    *ready = !n->pending;
    if (!n->pending) return MP_OK;
    const cudaError_t e = wait ? cudaEventSynchronize(n->copied) : cudaEventQuery(n->copied);
    if (e == cudaErrorNotReady) return MP_OK;
    MP_CUDA_TRY(e, "numerics statistics to the host");
    n->pending = false;
    *ready = true;
    return MP_OK;
}

extern "C" void mp_cuda_numerics_get(const mp_cuda_numerics *n, int slot, int64_t numel, mp_tensor_stats *out) {
    const dev_stats *d = &n->host[slot];
    memset(out, 0, sizeof *out);
    out->numel = numel;
    out->nan = (int64_t)d->count[C_NAN];
    out->inf = (int64_t)d->count[C_INF];
    out->zero = (int64_t)d->count[C_ZERO];
    out->overflow[MP_NUMERICS_FP16] = (int64_t)d->count[C_OVF16];
    out->overflow[MP_NUMERICS_BF16] = (int64_t)d->count[C_OVBF16];
    out->underflow[MP_NUMERICS_FP16] = (int64_t)d->count[C_UNF16];
    out->underflow[MP_NUMERICS_BF16] = (int64_t)d->count[C_UNBF16];
    out->subnormal[MP_NUMERICS_FP16] = (int64_t)d->count[C_SUBF16];
    out->subnormal[MP_NUMERICS_BF16] = (int64_t)d->count[C_SUBBF16];
    float f;
    memcpy(&f, &d->amax_bits, sizeof f);
    out->amax = f;
    const uint32_t amin = d->amin_inverted ? MP_NB_F32_INF - d->amin_inverted : 0;
    memcpy(&f, &amin, sizeof f);
    out->amin = f;
    for (int b = 0; b < MP_NUMERICS_HIST_BINS; b++) out->hist[b] = (int64_t)d->hist[b];
}
