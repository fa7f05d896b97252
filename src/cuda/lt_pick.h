/* lt_pick.h — choosing a cuBLASLt algorithm by timing, once per GEMM of a
 * plan (each plan times its own: a few milliseconds; not cached across plans).
 * cuBLASLt's first heuristic is not always its fastest: for the small
 * weight-gradient GEMM of a classifier (f16 inputs, f32 output, k = the
 * batch) it picked a kernel ~7x slower than the one it picks for bf16. */
#ifndef MP_CUDA_LT_PICK_H
#define MP_CUDA_LT_PICK_H

#include <cublasLt.h>

#include "cuda/cuda_ctx.h"

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    size_t a_bytes, b_bytes, d_bytes; /* each matrix's storage (ld x cols x element) */
    size_t bias_bytes;                /* > 0: the epilogue reads a bias of this many bytes */
} mp_lt_problem;

/* Of the n heuristic results r, the index of the fastest (median of 3 runs on
 * scratch device buffers, results that fail to run skipped); 0 when n is 1
 * or under MIXPREC_DETERMINISTIC=1 (the pick must not depend on timing
 * there). The bias pointer, when set, is left pointing at freed scratch:
 * the caller sets it before each run. */
mp_status mp_lt_pick_fastest(mp_cuda_ctx *ctx, const mp_lt_problem *pb, const cublasLtMatmulHeuristicResult_t *r,
                             int n, int *best, const char *what);

#endif
