/* probe_check.cuh — what the dev/ GPU probes share: a failing CUDA or cuDNN
 * call ends the program with the call and the library's message, and a
 * kernel fills bf16 inputs with repeatable values in [-scale, scale). */
#ifndef MP_DEV_PROBE_CHECK_CUH
#define MP_DEV_PROBE_CHECK_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>

/* exits with the failing call and its library's message */
static void fail_if(bool bad, const char *file, int line, const char *call, const char *msg) {
    if (!bad) return;
    fprintf(stderr, "%s:%d %s: %s\n", file, line, call, msg);
    exit(1);
}
#define CK(x) \
    do { cudaError_t e_ = (x); fail_if(e_ != cudaSuccess, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); } while (0)
#define CKDNN(x) \
    do { cudnnStatus_t e_ = (x); fail_if(e_ != CUDNN_STATUS_SUCCESS, __FILE__, __LINE__, #x, cudnnGetErrorString(e_)); } while (0)

/* p[i] for i < n: a hash of i and seed, scaled into [-scale, scale) */
__global__ void fill_kernel(__nv_bfloat16 *p, long long n, unsigned seed, float scale) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
        p[i] = __float2bfloat16(scale * ((float)(x & 0xffff) / 32768.0f - 1.0f));
    }
}

#endif
