/* cuda_ctx.cu — the per-device context of the CUDA backend (see cuda_ctx.h):
 * opening a device with an error that lists the devices found, the stream
 * every call of a plan runs on, the cuDNN handle bound to it, the cuBLASLt
 * handle, the one-line errors of failing CUDA/cuDNN/cuBLAS calls, and the
 * GPU-model key of the algorithm caches. */
#include "cuda/cuda_ctx.h"

#include "cuda/conv_engine.h" /* mp_conv_engine_free_plans */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

int mp_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next caller */
        return 0;
    }
    return n;
}

/* "0: NVIDIA H200 (sm_90, 139.8 GiB), 1: ..." into buf; returns the count. */
static int format_devices(char *buf, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        snprintf(buf, len, "none (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA-capable device");
        return 0;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < len; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            (void)cudaGetLastError();
            at += (size_t)snprintf(buf + at, len - at, "%s%d: (properties unavailable)", i ? ", " : "", i);
            continue;
        }
        at += (size_t)snprintf(buf + at, len - at, "%s%d: %s (sm_%d%d, %.1f GiB)", i ? ", " : "", i, p.name, p.major,
                               p.minor, (double)p.totalGlobalMem / GIB);
    }
    return n;
}

const char *mp_cuda_device_list(void) {
    static thread_local char buf[1024];
    format_devices(buf, sizeof buf);
    return buf;
}

void mp_cuda_ctx_destroy(mp_cuda_ctx *ctx) {
    if (!ctx) return;
    mp_conv_engine_free_plans(ctx);
    if (ctx->lt) cublasLtDestroy(ctx->lt);
    if (ctx->cudnn) cudnnDestroy(ctx->cudnn);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    free(ctx);
}

mp_status mp_cuda_ctx_create(int device, mp_cuda_ctx **out) {
    *out = NULL;
    char list[1024];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return mp_error(MP_ERR_UNSUPPORTED, "--device cuda:%d: no CUDA device: %s", device,
                        e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA-capable device is detected");
    }
    if (device < 0 || device >= n) {
        format_devices(list, sizeof list);
        return mp_error(MP_ERR_INVALID_ARG, "--device cuda:%d: no such GPU (found %d: %s)", device, n, list);
    }
    mp_cuda_ctx *ctx = (mp_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) return mp_error(MP_ERR_NOMEM, "cuda:%d: out of host memory for the context", device);
    ctx->device = device;
    const char *what = "opening the CUDA device";
    mp_status s = MP_OK;
    cudaDeviceProp p;
#define CTX_TRY(check)             \
    do {                           \
        s = (check);               \
        if (s != MP_OK) goto fail; \
    } while (0)
    CTX_TRY(mp_cuda_check(cudaSetDevice(device), "cudaSetDevice", what));
    CTX_TRY(mp_cuda_check(cudaFree(0), "cudaFree(0) (context creation)", what));
    CTX_TRY(mp_cuda_check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties", what));
    CTX_TRY(mp_cuda_check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                          what));
    CTX_TRY(mp_cudnn_check(cudnnCreate(&ctx->cudnn), "cudnnCreate", what));
    CTX_TRY(mp_cudnn_check(cudnnSetStream(ctx->cudnn, ctx->stream), "cudnnSetStream", what));
    CTX_TRY(mp_cublas_check(cublasLtCreate(&ctx->lt), "cublasLtCreate", what));
#undef CTX_TRY
    ctx->sm_major = p.major;
    ctx->sm_minor = p.minor;
    ctx->sm_count = p.multiProcessorCount;
    ctx->mem_total = p.totalGlobalMem;
    p.name[sizeof ctx->name - 1] = '\0'; /* names are short; keep what fits */
    memcpy(ctx->name, p.name, sizeof ctx->name);
    *out = ctx;
    return MP_OK;
fail:
    mp_cuda_ctx_destroy(ctx);
    return s;
}

/* "cudnnConvolutionForward(ctx->cudnn, ...)" -> "cudnnConvolutionForward" */
static void call_name(const char *call, char *buf, size_t len) {
    size_t n = strcspn(call, "( ");
    if (n >= len) n = len - 1;
    memcpy(buf, call, n);
    buf[n] = '\0';
}

mp_status mp_cuda_check(cudaError_t e, const char *call, const char *what) {
    if (e == cudaSuccess) return MP_OK;
    (void)cudaGetLastError(); /* clear non-sticky errors */
    char name[96];
    call_name(call, name, sizeof name);
    mp_status s = e == cudaErrorMemoryAllocation ? MP_ERR_NOMEM : MP_ERR_INTERNAL;
    return mp_error(s, "%s: %s failed: %s (%s)", what ? what : "cuda", name, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

mp_status mp_cudnn_check(cudnnStatus_t st, const char *call, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS) return MP_OK;
    char name[96], detail[512];
    call_name(call, name, sizeof name);
    detail[0] = '\0';
    cudnnGetLastErrorString(detail, sizeof detail);
    for (char *c = detail; *c; c++) /* one line */
        if (*c == '\n' || *c == '\r') *c = ' ';
    mp_status s = st == CUDNN_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM
                  : st == CUDNN_STATUS_NOT_SUPPORTED ? MP_ERR_UNSUPPORTED
                                                     : MP_ERR_INTERNAL;
    return mp_error(s, "%s: %s failed: %s%s%s", what ? what : "cudnn", name, cudnnGetErrorString(st),
                    detail[0] ? ": " : "", detail);
}

mp_status mp_cublas_check(cublasStatus_t st, const char *call, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return MP_OK;
    char name[96];
    call_name(call, name, sizeof name);
    mp_status s = st == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM
                  : st == CUBLAS_STATUS_NOT_SUPPORTED ? MP_ERR_UNSUPPORTED
                                                      : MP_ERR_INTERNAL;
    return mp_error(s, "%s: %s failed: %s (%s)", what ? what : "cublasLt", name, cublasLtGetStatusName(st),
                    cublasLtGetStatusString(st));
}

int mp_cuda_gpu_model(const mp_cuda_ctx *ctx) {
    unsigned h = 2166136261u; /* FNV-1a over the name, then the numbers */
    for (const char *c = ctx->name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    const int nums[3] = {ctx->sm_major, ctx->sm_minor, ctx->sm_count};
    for (int i = 0; i < 3; i++) h = (h ^ (unsigned)nums[i]) * 16777619u;
    return (int)(h & 0x7fffffff);
}

unsigned mp_cuda_blocks(const mp_cuda_ctx *ctx, long long n) {
    const long long per_block = 256;
    long long b = (n + per_block - 1) / per_block;
    long long cap = (long long)(ctx && ctx->sm_count > 0 ? ctx->sm_count : 132) * 16; /* about two waves of 256-thread blocks */
    if (b > cap) b = cap;
    return b < 1 ? 1u : (unsigned)b;
}
