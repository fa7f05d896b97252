/* lt_pick.h — choosing a cuBLASLt algorithm by timing, once per GEMM problem
 * per process: the choice is kept in a process-wide table keyed by the GPU
 * model and the problem (mp_lt_key), as conv_algo_cache.cu keeps cuDNN's, so
 * plans rebuilt for the same shapes (the trainer's evaluation plan, every
 * epoch) and equal layers time once, and ranks that are threads of one
 * process on equal GPUs share one timing (timings take turns) and so compute
 * alike. cuBLASLt's first heuristic is not always its fastest: for the small
 * weight-gradient GEMM of a classifier (f16 inputs, f32 output, k = the
 * batch) it picked a kernel ~7x slower than the one it picks for bf16.
 * MIXPREC_LT_DEBUG=1 prints each pick (timed or cached) on stderr. */
#ifndef MP_CUDA_LT_PICK_H
#define MP_CUDA_LT_PICK_H

#include <stdint.h>

#include <cublasLt.h>

#include "cuda/cuda_ctx.h"

/* What the matmul is, as the caller set it in op and the layouts a, b, d (C
 * is D): the cache's key, int64 fields only (compared with memcmp). The
 * caller's heuristic preference (workspace cap, alignments) is not in it: a
 * cached choice is taken only when it is among this call's heuristic results. */
typedef struct {
    int64_t compute, scale, epilogue, trans_a, trans_b; /* cublasComputeType_t, cudaDataType_t, ... */
    int64_t a_type, a_rows, a_cols, lda;                /* types: cudaDataType_t */
    int64_t b_type, b_rows, b_cols, ldb;
    int64_t d_type, d_rows, d_cols, ldd;
} mp_lt_key;

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    size_t a_bytes, b_bytes, d_bytes; /* each matrix's storage (ld x cols x element) */
    size_t bias_bytes;                /* > 0: the epilogue reads a bias of this many bytes */
    mp_lt_key key;
} mp_lt_problem;

/* Of the n heuristic results r, the index of the fastest (median of 3 runs on
 * scratch device buffers, results that fail to run skipped), or of the one
 * cached for this GPU model and pb->key when it is among r; 0 when n is 1 or
 * under MIXPREC_DETERMINISTIC=1 (the pick must not depend on timing there;
 * such picks neither read nor fill the table). A timing that could not run
 * (no memory for the scratch) keeps 0 and is not cached. The bias pointer,
 * when set, is left pointing at freed scratch: the caller sets it before each
 * run. */
mp_status mp_lt_pick_fastest(mp_cuda_ctx *ctx, const mp_lt_problem *pb, const cublasLtMatmulHeuristicResult_t *r,
                             int n, int *best, const char *what);

#endif
