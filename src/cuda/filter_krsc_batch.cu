/* filter_krsc_batch.cu — see filter_krsc_batch.h. One grid-stride pass over
 * the concatenated destinations: a block finds the job of its first element
 * by binary search over the jobs' starts, its threads step forward from
 * there (a block's 256 elements span a few jobs at most), write their KRSC
 * element in order (coalesced stores) and read the (K, C, R, S) source
 * element, with 32-bit index arithmetic inside a filter. */
#include "cuda/filter_krsc_batch.h"
#include "cuda/cuda_dtype.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { KRSC_THREADS = 256 };

__global__ void krsc_batch_kernel(const mp_krsc_job *jobs, int n, long long total) {
    __shared__ int first;
    for (long long t0 = blockIdx.x * (long long)KRSC_THREADS; t0 < total; t0 += (long long)gridDim.x * KRSC_THREADS) {
        __syncthreads(); /* the previous iteration's readers of first are done */
        if (threadIdx.x == 0) {
            int lo = 0, hi = n - 1; /* the last job starting at or before t0 */
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (jobs[mid].start <= t0) lo = mid;
                else hi = mid - 1;
            }
            first = lo;
        }
        __syncthreads();
        const long long t = t0 + threadIdx.x;
        if (t >= total) continue;
        int jn = first;
        while (jn + 1 < n && jobs[jn + 1].start <= t) jn++;
        const mp_krsc_job &j = jobs[jn];
        const int i = (int)(t - j.start); /* KRSC index ((k * rs) + r) * c + ci; < 2^31 (build checks) */
        const int ci = i % j.c, kr = i / j.c;
        const int r = kr % j.rs, k = kr / j.rs;
        mp_st(j.dst, j.ddt, i, mp_ld(j.src, j.sdt, (k * j.c + ci) * j.rs + r));
    }
}

mp_status mp_krsc_batch_build(mp_cuda_ctx *ctx, mp_krsc_job *jobs, int n, mp_krsc_batch *out, const char *what) {
    memset(out, 0, sizeof *out);
    long long total = 0;
    for (int i = 0; i < n; i++) {
        if (!mp_cuda_float_dtype(jobs[i].sdt) || !mp_cuda_float_dtype(jobs[i].ddt) || jobs[i].k <= 0 ||
            jobs[i].c <= 0 || jobs[i].rs <= 0 || (long long)jobs[i].k * jobs[i].c * jobs[i].rs > INT_MAX)
            return mp_error(MP_ERR_INTERNAL, "%s: filter %d of the KRSC batch: %s -> %s, (%d, %d, %d)", what, i,
                            mp_dtype_name(jobs[i].sdt), mp_dtype_name(jobs[i].ddt), jobs[i].k, jobs[i].c, jobs[i].rs);
        jobs[i].start = total;
        total += (long long)jobs[i].k * jobs[i].c * jobs[i].rs;
    }
    if (!n) return MP_OK;
    MP_CUDA_TRY(cudaMalloc((void **)&out->jobs, (size_t)n * sizeof *jobs), what);
    cudaError_t e = cudaMemcpyAsync(out->jobs, jobs, (size_t)n * sizeof *jobs, cudaMemcpyHostToDevice, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) {
        cudaFree(out->jobs);
        out->jobs = NULL;
        return mp_cuda_check(e, "the KRSC batch's job list", what);
    }
    out->n = n;
    out->total = total;
    return MP_OK;
}

mp_status mp_krsc_batch_run(mp_cuda_ctx *ctx, const mp_krsc_batch *b) {
    if (!b->n) return MP_OK;
    krsc_batch_kernel<<<mp_cuda_blocks(ctx, b->total), KRSC_THREADS, 0, ctx->stream>>>(b->jobs, b->n, b->total);
    return mp_cuda_check(cudaGetLastError(), "krsc_batch_kernel", "the conv filters' KRSC copies");
}

void mp_krsc_batch_free(mp_krsc_batch *b) {
    cudaFree(b->jobs);
    memset(b, 0, sizeof *b);
}
