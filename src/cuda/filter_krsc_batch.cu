/* filter_krsc_batch.cu — see filter_krsc_batch.h. One grid-stride pass over
 * the concatenated destinations: each thread finds its job by binary search
 * over the jobs' starts (a few dozen, cached), writes its KRSC element in
 * order (coalesced stores) and reads the (K, C, R, S) source element. */
#include "cuda/filter_krsc_batch.h"
#include "cuda/cuda_dtype.cuh"

#include <stdlib.h>
#include <string.h>

__global__ void krsc_batch_kernel(const mp_krsc_job *jobs, int n, long long total) {
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        int lo = 0, hi = n - 1; /* the last job starting at or before t */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (jobs[mid].start <= t) lo = mid;
            else hi = mid - 1;
        }
        const mp_krsc_job &j = jobs[lo];
        const long long i = t - j.start; /* KRSC index: ((k * rs) + r) * c + ci */
        const int ci = (int)(i % j.c);
        const long long kr = i / j.c;
        const int r = (int)(kr % j.rs), k = (int)(kr / j.rs);
        mp_st(j.dst, j.ddt, i, mp_ld(j.src, j.sdt, ((long long)k * j.c + ci) * j.rs + r));
    }
}

mp_status mp_krsc_batch_build(mp_cuda_ctx *ctx, mp_krsc_job *jobs, int n, mp_krsc_batch *out, const char *what) {
    memset(out, 0, sizeof *out);
    long long total = 0;
    for (int i = 0; i < n; i++) {
        if (!mp_cuda_float_dtype(jobs[i].sdt) || !mp_cuda_float_dtype(jobs[i].ddt) || jobs[i].k <= 0 ||
            jobs[i].c <= 0 || jobs[i].rs <= 0)
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
    krsc_batch_kernel<<<mp_cuda_blocks(ctx, b->total), 256, 0, ctx->stream>>>(b->jobs, b->n, b->total);
    return mp_cuda_check(cudaGetLastError(), "krsc_batch_kernel", "the conv filters' KRSC copies");
}

void mp_krsc_batch_free(mp_krsc_batch *b) {
    cudaFree(b->jobs);
    memset(b, 0, sizeof *b);
}
