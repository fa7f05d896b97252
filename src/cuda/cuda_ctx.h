/* cuda_ctx.h — the CUDA backend's per-device context (stream, cuDNN and
 * cuBLASLt handles, device properties) and the error helpers every CUDA file
 * uses: a failing CUDA/cuDNN/cuBLAS call becomes one mp_error line naming the
 * op (node name and kind), the call, the library's message and, where given,
 * the shapes and dtypes. Only files under src/cuda include CUDA headers; the
 * rest of the library sees the backend through cuda_backend.h. */
#ifndef MP_CUDA_CUDA_CTX_H
#define MP_CUDA_CUDA_CTX_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_cuda_ctx {
    int device;
    cudaStream_t stream;      /* every kernel and library call of a plan runs here */
    cudnnHandle_t cudnn;      /* bound to stream */
    cublasLtHandle_t lt;
    int sm_major, sm_minor;   /* compute capability */
    int sm_count;
    size_t mem_total;
    char name[128];
    /* synchronized BatchNorm (plan opts sync_bn): statistics gathered from
     * every rank of dist (an mp_dist); NULL: per GPU */
    void *dist;
    int sync_world;
    void *conv_plans; /* cuDNN graph-API execution plans built on this context (conv_engine.cu) */
} mp_cuda_ctx;

/* Open device `device` (0-based): a clear error listing the devices found
 * when it does not exist or no GPU/driver is present. */
mp_status mp_cuda_ctx_create(int device, mp_cuda_ctx **out);
void mp_cuda_ctx_destroy(mp_cuda_ctx *ctx);
/* Number of CUDA devices (0 without a driver or GPU); never fails. */
int mp_cuda_device_count(void);
/* "0: NVIDIA H200 (sm_90, 139.8 GiB), 1: ..." or "none (<reason>)". */
const char *mp_cuda_device_list(void);

/* what: "conv2d 'conv1_1' forward" etc. Return MP_OK or the mp_error. */
mp_status mp_cuda_check(cudaError_t e, const char *call, const char *what);
mp_status mp_cudnn_check(cudnnStatus_t s, const char *call, const char *what);
mp_status mp_cublas_check(cublasStatus_t s, const char *call, const char *what);

#define MP_CUDA_TRY(call, what) MP_TRY(mp_cuda_check((call), #call, (what)))
#define MP_CUDNN_TRY(call, what) MP_TRY(mp_cudnn_check((call), #call, (what)))
#define MP_CUBLAS_TRY(call, what) MP_TRY(mp_cublas_check((call), #call, (what)))

/* GPUs that answer the same to this (name, compute capability, SM count) are
 * one model: a search's choice (cuDNN convolution, cuBLASLt GEMM) made on one
 * holds on the others, so the process-wide choice caches key on it. */
int mp_cuda_gpu_model(const mp_cuda_ctx *ctx);

/* Launch-configuration helper: blocks of 256 covering n elements, capped
 * at a few waves per SM (kernels use grid-stride loops). */
unsigned mp_cuda_blocks(const mp_cuda_ctx *ctx, long long n);

/* The CUDA libraries' names for a dtype (cuda_dtype_table.c). */
cudaDataType_t mp_cuda_data_type(mp_dtype t);
cudnnDataType_t mp_cudnn_data_type(mp_dtype t);

#ifdef __cplusplus
}
#endif
#endif
