/* lt_pick.cu — see lt_pick.h: the timing of a GEMM's heuristic candidates
 * and the process-wide table of the choices. */
#include "cuda/lt_pick.h"

#include "cuda/choice_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t gpu_model; /* mp_cuda_gpu_model */
    mp_lt_key problem;
} pick_key; /* int64 fields only: no padding, memcmp compares */

/* The chosen algorithm: plain data, valid for the same problem on the same GPU model. */
static mp_choice_cache cache = MP_CHOICE_CACHE_INIT(pick_key, cublasLtMatmulAlgo_t);

/* The index in r of the algorithm cached under k; -1 when none is, or when
 * it is not among r (then it is timed again and replaced). */
static int cache_find(const pick_key *k, const cublasLtMatmulHeuristicResult_t *r, int n) {
    cublasLtMatmulAlgo_t algo;
    if (!mp_choice_get(&cache, k, &algo)) return -1;
    for (int j = 0; j < n; j++)
        if (!memcmp(&r[j].algo, &algo, sizeof algo)) return j;
    return -1;
}

/* Median ms of 3 runs of algorithm r (after one warm-up); < 0 if it fails. */
static float time_algo(mp_cuda_ctx *ctx, const mp_lt_problem *pb, const cublasLtMatmulHeuristicResult_t *r,
                       const void *a, const void *b, void *d, void *ws, cudaEvent_t ev[2]) {
    const float one = 1.0f, zero = 0.0f;
    float t[3];
    for (int k = -1; k < 3; k++) {
        if (k >= 0 && cudaEventRecord(ev[0], ctx->stream) != cudaSuccess) return -1;
        if (cublasLtMatmul(ctx->lt, pb->op, &one, a, pb->a, b, pb->b, &zero, d, pb->d, d, pb->d, &r->algo, ws,
                           r->workspaceSize, ctx->stream) != CUBLAS_STATUS_SUCCESS)
            return -1;
        if (k < 0) continue;
        if (cudaEventRecord(ev[1], ctx->stream) != cudaSuccess || cudaEventSynchronize(ev[1]) != cudaSuccess ||
            cudaEventElapsedTime(&t[k], ev[0], ev[1]) != cudaSuccess)
            return -1;
    }
    return mp_median_ms(t, 3);
}

/* *best = the fastest of the n results r, -1 when none could be timed. */
static mp_status time_fastest(mp_cuda_ctx *ctx, const mp_lt_problem *pb, const cublasLtMatmulHeuristicResult_t *r,
                              int n, int *best, const char *what) {
    *best = -1;
    size_t ws_bytes = 0;
    for (int i = 0; i < n; i++)
        if (r[i].workspaceSize > ws_bytes) ws_bytes = r[i].workspaceSize;
    void *a = NULL, *b = NULL, *d = NULL, *ws = NULL, *bias = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    mp_status st = MP_OK;
    if (cudaMalloc(&a, pb->a_bytes) != cudaSuccess || cudaMalloc(&b, pb->b_bytes) != cudaSuccess ||
        cudaMalloc(&d, pb->d_bytes) != cudaSuccess || (ws_bytes && cudaMalloc(&ws, ws_bytes) != cudaSuccess) ||
        (pb->bias_bytes && cudaMalloc(&bias, pb->bias_bytes) != cudaSuccess) ||
        cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
        (void)cudaGetLastError(); /* no memory to time in: keep the heuristic's first (clears the alloc error) */
    } else {
        cudaMemsetAsync(a, 0, pb->a_bytes, ctx->stream);
        cudaMemsetAsync(b, 0, pb->b_bytes, ctx->stream);
        if (bias) {
            cudaMemsetAsync(bias, 0, pb->bias_bytes, ctx->stream);
            st = mp_cublas_check(cublasLtMatmulDescSetAttribute(pb->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                                sizeof bias),
                                 "cublasLtMatmulDescSetAttribute", what);
        }
        float best_ms = -1;
        for (int i = 0; i < n && st == MP_OK; i++) {
            float ms = time_algo(ctx, pb, &r[i], a, b, d, ws, ev);
            if (ms >= 0 && (best_ms < 0 || ms < best_ms)) best_ms = ms, *best = i;
        }
        (void)cudaGetLastError(); /* a candidate that failed to launch is skipped, not an error (prepare runs
                                     before any op of the plan, so no earlier error is swallowed here) */
    }
    if (ev[0]) cudaEventDestroy(ev[0]);
    if (ev[1]) cudaEventDestroy(ev[1]);
    cudaStreamSynchronize(ctx->stream);
    cudaFree(a), cudaFree(b), cudaFree(d), cudaFree(ws), cudaFree(bias);
    return st;
}

mp_status mp_lt_pick_fastest(mp_cuda_ctx *ctx, const mp_lt_problem *pb, const cublasLtMatmulHeuristicResult_t *r,
                             int n, int *best, const char *what) {
    *best = 0;
    if (n <= 1 || mp_cuda_deterministic()) return MP_OK;
    const pick_key k = {mp_cuda_gpu_model(ctx), pb->key};
    int i = cache_find(&k, r, n);
    const char *how = "cached";
    mp_status st = MP_OK;
    if (i < 0) {
        pthread_mutex_lock(&cache.search); /* a second rank waits and finds the first one's choice */
        i = cache_find(&k, r, n);
        if (i < 0) {
            st = time_fastest(ctx, pb, r, n, &i, what);
            if (st == MP_OK && i >= 0) mp_choice_put(&cache, &k, &r[i].algo);
            how = i >= 0 ? "timed" : "not timed";
        }
        pthread_mutex_unlock(&cache.search);
    }
    if (st == MP_OK && i >= 0) *best = i;
    if (mp_env_get()->lt_debug) fprintf(stderr, "lt: %s -> candidate %d of %d (%s)\n", what, *best, n, how);
    return st;
}
