/* linear_cuda.h — the state of linear on the GPU (linear_cuda.cu: its three
 * cuBLASLt GEMMs, described there), shared with its tangents
 * (linear_tangent_cuda.cu), which run the same GEMMs on tangents and sum two
 * of them through cuBLASLt's beta = 1. */
#ifndef MP_CUDA_LINEAR_CUDA_H
#define MP_CUDA_LINEAR_CUDA_H

#include <cublasLt.h>

#include "cuda/cuda_op.h"
#include "cuda/lib_kernels.h"

typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
    mp_dtype d_dtype;
} lt_gemm;

typedef struct {
    int n, f, o;
    bool bias, bias_epilogue, training;
    mp_dtype cd;
    lt_gemm fwd, bwd_data, bwd_weight;
    size_t ws_total;
    char what_fwd[256], what_bwd[256];
} linear_cuda;

/* A column-major matrix as cuBLASLt sees it. */
typedef struct {
    uint64_t rows, cols;
    int64_t ld;
} mp_lt_mat;

/* g's descriptors for D (d.rows x d.cols, dtype dd) = op(A) op(B) with A and
 * B of dtype ab, compute type ct and epilogue epi, and of the heuristic's
 * best 8 algorithms (at most 32 MiB of workspace, 16-byte aligned operands;
 * split-K reduced in f32 only when D is f16/bf16) the fastest by timing
 * (lt_pick.h). what names the op in errors. On error g may hold some
 * descriptors: mp_linear_gemm_destroy releases them. */
mp_status mp_linear_gemm_init(mp_cuda_ctx *ctx, lt_gemm *g, cublasComputeType_t ct, mp_dtype ab, mp_dtype dd,
                              cublasOperation_t ta, mp_lt_mat a, cublasOperation_t tb, mp_lt_mat b, mp_lt_mat d,
                              cublasLtEpilogue_t epi, const char *what);

/* Releases g's descriptors (those set; g zeroed before its init). */
void mp_linear_gemm_destroy(lt_gemm *g);

/* D = op(A) op(B) + beta D (C is D) with g's algorithm; ws holds g->workspace bytes. */
mp_status mp_linear_gemm_run(mp_cuda_ctx *ctx, const lt_gemm *g, const void *a, const void *b, void *d, float beta,
                             void *ws, const char *what);

/* The workspace bytes the tangents of a prepared linear need. */
size_t mp_linear_tangent_workspace(const linear_cuda *st);

#endif
