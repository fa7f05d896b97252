// plan_nonfinite.cu — overflow provenance on the GPU (cuda_exec.h):
// whether a device tensor (an activation or a gradient, f32, f16 or bf16)
// holds a NaN/inf, by the scaler's bit test (float_bits.cuh) of every
// element widened to f32 (exact: f16/bf16 inf and NaN stay inf and NaN) and
// one int read back. Runs only while a step that overflowed is replayed,
// never inside a training step.
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/cuda_plan.h"
#include "cuda/float_bits.cuh"
extern "C" {
#include "cuda/cuda_exec.h"
}

static __global__ void any_nonfinite_kernel(const void *x, mp_dtype dt, long long n, int *found) {
    bool bad = false;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n && !bad;
         i += (long long)gridDim.x * blockDim.x)
        bad = mp_dev_nonfinite(mp_ld(x, dt, i));
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1;
}

extern "C" mp_status mp_device_tensor_nonfinite(const mp_plan *p, const mp_tensor *t, bool *found) {
    *found = false;
    const long long n = (long long)mp_tensor_numel(t);
    if (n <= 0 || !t->data || !mp_cuda_float_dtype(t->dtype)) return MP_OK; // labels cannot overflow
    cudaStream_t stream = mp_cuda_plan_ctx(p)->stream; // after the work that wrote t
    int *flag = NULL, hit = 0;
    MP_CUDA_TRY(cudaMalloc((void **)&flag, sizeof *flag), "overflow provenance");
    cudaError_t e = cudaMemsetAsync(flag, 0, sizeof *flag, stream);
    const int threads = 256, blocks = (int)(n / threads + 1 < 1024 ? n / threads + 1 : 1024);
    if (e == cudaSuccess) {
        any_nonfinite_kernel<<<blocks, threads, 0, stream>>>(t->data, t->dtype, n, flag);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(&hit, flag, sizeof hit, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    cudaFree(flag);
    MP_CUDA_TRY(e, "overflow provenance");
    *found = hit != 0;
    return MP_OK;
}
