/* filter_krsc_batch.cu — see filter_krsc_batch.h. The batch is cut into
 * units at build time, each a tile of at most KRSC_TILE elements that is
 * contiguous in the (K, C, R, S) source: whole (C, R, S) filters of several
 * output channels where they fit, otherwise a run of input channels of one
 * output channel. A block reads its tile in order into shared memory
 * (coalesced loads) and writes it out in KRSC order (coalesced stores, runs
 * of the tile's channels), so the permutation costs about its bytes. */
#include "cuda/filter_krsc_batch.h"
#include "cuda/cuda_dtype.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { KRSC_THREADS = 256, KRSC_TILE = 4096 };

__global__ void krsc_batch_kernel(const mp_krsc_job *jobs, const mp_krsc_unit *units, int n_units) {
    __shared__ float tile[KRSC_TILE];
    for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
        const mp_krsc_unit un = units[u];
        const mp_krsc_job &j = jobs[un.job];
        const int per_k = un.nc * j.rs, count = un.nk * per_k; /* <= KRSC_TILE */
        __syncthreads(); /* the previous unit's readers of tile are done */
        const int src0 = (un.k0 * j.c + un.c0) * j.rs; /* per k: per_k contiguous elements, a filter apart */
        for (int e = threadIdx.x; e < count; e += KRSC_THREADS) {
            const int kk = e / per_k, rem = e - kk * per_k;
            tile[e] = mp_ld(j.src, j.sdt, src0 + kk * j.c * j.rs + rem);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < count; e += KRSC_THREADS) { /* e: (kk, r, c) of the tile */
            const int kk = e / per_k, rem = e - kk * per_k;
            const int r = rem / un.nc, ci = rem - r * un.nc;
            mp_st(j.dst, j.ddt, ((un.k0 + kk) * j.rs + r) * j.c + un.c0 + ci, tile[kk * per_k + ci * j.rs + r]);
        }
    }
}

/* The units of one job, appended to *units (NULL: counted only). */
static long long job_units(const mp_krsc_job *jb, int job, mp_krsc_unit *units) {
    const int filter = jb->c * jb->rs;
    long long m = 0;
    if (filter <= KRSC_TILE) { /* whole filters, as many output channels as fit */
        const int per = KRSC_TILE / filter;
        for (int k0 = 0; k0 < jb->k; k0 += per, m++)
            if (units) units[m] = (mp_krsc_unit){job, k0, jb->k - k0 < per ? jb->k - k0 : per, 0, jb->c};
        return m;
    }
    const int per = KRSC_TILE / jb->rs; /* input channels of one output channel */
    for (int k0 = 0; k0 < jb->k; k0++)
        for (int c0 = 0; c0 < jb->c; c0 += per, m++)
            if (units) units[m] = (mp_krsc_unit){job, k0, 1, c0, jb->c - c0 < per ? jb->c - c0 : per};
    return m;
}

mp_status mp_krsc_batch_build(mp_cuda_ctx *ctx, mp_krsc_job *jobs, int n, mp_krsc_batch *out, const char *what) {
    memset(out, 0, sizeof *out);
    long long total = 0, n_units = 0;
    for (int i = 0; i < n; i++) {
        if (!mp_cuda_float_dtype(jobs[i].sdt) || !mp_cuda_float_dtype(jobs[i].ddt) || jobs[i].k <= 0 ||
            jobs[i].c <= 0 || jobs[i].rs <= 0 || jobs[i].rs > KRSC_TILE ||
            (long long)jobs[i].k * jobs[i].c * jobs[i].rs > INT_MAX)
            return mp_error(MP_ERR_INTERNAL, "%s: filter %d of the KRSC batch: %s -> %s, (%d, %d, %d)", what, i,
                            mp_dtype_name(jobs[i].sdt), mp_dtype_name(jobs[i].ddt), jobs[i].k, jobs[i].c, jobs[i].rs);
        jobs[i].start = total;
        total += (long long)jobs[i].k * jobs[i].c * jobs[i].rs;
        n_units += job_units(&jobs[i], i, NULL);
    }
    if (!n) return MP_OK;
    if (n_units > INT_MAX)
        return mp_error(MP_ERR_INTERNAL, "%s: the KRSC batch has %lld tiles, more than one launch takes", what,
                        n_units);
    mp_krsc_unit *units = (mp_krsc_unit *)malloc((size_t)n_units * sizeof *units);
    if (!units) return mp_error(MP_ERR_NOMEM, "%s: the KRSC batch's %lld tiles", what, n_units);
    for (int i = 0, m = 0; i < n; i++) m += (int)job_units(&jobs[i], i, units + m);
    const size_t job_bytes = ((size_t)n * sizeof *jobs + 15) / 16 * 16;
    char *dev = NULL;
    cudaError_t e = cudaMalloc((void **)&dev, job_bytes + (size_t)n_units * sizeof *units);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dev, jobs, (size_t)n * sizeof *jobs, cudaMemcpyHostToDevice, ctx->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dev + job_bytes, units, (size_t)n_units * sizeof *units, cudaMemcpyHostToDevice,
                            ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    free(units);
    if (e != cudaSuccess) {
        cudaFree(dev);
        return mp_cuda_check(e, "the KRSC batch's job list", what);
    }
    out->jobs = (mp_krsc_job *)dev;
    out->units = (mp_krsc_unit *)(dev + job_bytes);
    out->n = n;
    out->n_units = (int)n_units;
    out->total = total;
    return MP_OK;
}

mp_status mp_krsc_batch_run(mp_cuda_ctx *ctx, const mp_krsc_batch *b) {
    if (!b->n) return MP_OK;
    const unsigned blocks = b->n_units < 65535 * 8 ? (unsigned)b->n_units : 65535u * 8;
    krsc_batch_kernel<<<blocks, KRSC_THREADS, 0, ctx->stream>>>(b->jobs, b->units, b->n_units);
    return mp_cuda_check(cudaGetLastError(), "krsc_batch_kernel", "the conv filters' KRSC copies");
}

void mp_krsc_batch_free(mp_krsc_batch *b) {
    cudaFree(b->jobs); /* the units share its allocation */
    memset(b, 0, sizeof *b);
}
