/* filter_krsc_batch.cu — see filter_krsc_batch.h. The batch is cut into
 * tiles at build time: whole filters of several output channels where
 * c * rs fits a tile, else a run of input channels of one output channel.
 * Either way the tile is one contiguous run of the (K, C, RS) source, which
 * a block copies into shared memory in order (coalesced, unrolled loads in
 * flight together), then writes out in KRSC order: rows of the tile's input
 * channels, coalesced stores, with the row/column digits carried forward
 * instead of divided per element. */
#include "cuda/filter_krsc_batch.h"
#include "cuda/cuda_dtype.cuh"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { KRSC_THREADS = 256, KRSC_TILE = MP_KRSC_BATCH_MAX_RS /* elements: f32 in shared memory, 16 KiB */ };

/* Block u permutes tile u (a grid of n_units blocks, at most INT_MAX). */
__global__ void krsc_batch_kernel(const mp_krsc_job *jobs, const mp_krsc_unit *units) {
    __shared__ float tile[KRSC_TILE]; /* the tile in source order: [kk][ci][r] */
    const mp_krsc_unit t = units[blockIdx.x];
    const mp_krsc_job &j = jobs[t.job];
    const int rs = j.rs, count = t.nk * t.nc * rs;
    const int src0 = (t.k0 * j.c + t.c0) * rs; /* contiguous: nk > 1 only where nc is all of c */
#pragma unroll 4
    for (int e = threadIdx.x; e < count; e += KRSC_THREADS) tile[e] = mp_ld(j.src, j.sdt, src0 + e);
    __syncthreads();
    /* this thread's (kk, r, ci) digits of flat destination index threadIdx.x, + KRSC_THREADS, ... */
    const int row = rs * t.nc, sa = KRSC_THREADS / row, sb = (KRSC_THREADS - sa * row) / t.nc,
              sc = KRSC_THREADS - sa * row - sb * t.nc;
    int kk = threadIdx.x / row, r = (threadIdx.x - kk * row) / t.nc, ci = threadIdx.x - kk * row - r * t.nc;
    while (kk < t.nk) {
        mp_st(j.dst, j.ddt, ((t.k0 + kk) * rs + r) * j.c + t.c0 + ci, tile[(kk * t.nc + ci) * rs + r]);
        ci += sc;
        if (ci >= t.nc) ci -= t.nc, r++;
        r += sb;
        if (r >= rs) r -= rs, kk++;
        kk += sa;
    }
}

/* The tiles of one job, appended to *units (NULL: counted only). */
static long long job_units(const mp_krsc_job *jb, int job, mp_krsc_unit *units) {
    const int filter = jb->c * jb->rs;
    long long m = 0;
    if (filter <= KRSC_TILE) { /* whole filters, as many output channels as fit */
        const int per = KRSC_TILE / filter;
        for (long long k0 = 0; k0 < jb->k; k0 += per, m++)
            if (units) units[m] = (mp_krsc_unit){job, (int)k0, jb->k - k0 < per ? (int)(jb->k - k0) : per, 0, jb->c};
        return m;
    }
    const int per = KRSC_TILE / jb->rs; /* runs of input channels of one output channel */
    for (int k0 = 0; k0 < jb->k; k0++)
        for (long long c0 = 0; c0 < jb->c; c0 += per, m++)
            if (units) units[m] = (mp_krsc_unit){job, k0, 1, (int)c0, jb->c - c0 < per ? (int)(jb->c - c0) : per};
    return m;
}

mp_status mp_krsc_batch_build(mp_cuda_ctx *ctx, const mp_krsc_job *jobs, int n, mp_krsc_batch *out, const char *what) {
    memset(out, 0, sizeof *out);
    long long n_units = 0;
    for (int i = 0; i < n; i++) {
        if (!mp_cuda_float_dtype(jobs[i].sdt) || !mp_cuda_float_dtype(jobs[i].ddt) || jobs[i].k <= 0 ||
            jobs[i].c <= 0 || jobs[i].rs <= 0 || jobs[i].rs > KRSC_TILE ||
            (long long)jobs[i].k * jobs[i].c * jobs[i].rs > INT_MAX)
            return mp_error(MP_ERR_INTERNAL, "%s: filter %d of the KRSC batch: %s -> %s, (%d, %d, %d)", what, i,
                            mp_dtype_name(jobs[i].sdt), mp_dtype_name(jobs[i].ddt), jobs[i].k, jobs[i].c, jobs[i].rs);
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
    return MP_OK;
}

mp_status mp_krsc_batch_run(mp_cuda_ctx *ctx, const mp_krsc_batch *b) {
    if (!b->n) return MP_OK;
    krsc_batch_kernel<<<(unsigned)b->n_units, KRSC_THREADS, 0, ctx->stream>>>(b->jobs, b->units);
    return mp_cuda_check(cudaGetLastError(), "krsc_batch_kernel", "the conv filters' KRSC copies");
}

void mp_krsc_batch_free(mp_krsc_batch *b) {
    cudaFree(b->jobs); /* the units share its allocation */
    memset(b, 0, sizeof *b);
}
