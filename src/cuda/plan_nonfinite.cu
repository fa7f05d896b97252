// plan_nonfinite.cu — overflow provenance on the GPU (graph/device.h):
// whether a device tensor (an activation or a gradient, f32, f16 or bf16)
// holds a NaN/inf, by a bit test of every element on the device (an
// all-ones exponent) and one int read back. Runs only while a step that
// overflowed is replayed, never inside a training step.
#include "cuda/cuda_op.h"
#include "cuda/cuda_step.h"
extern "C" {
#include "graph/device.h"
}

template <typename Bits, Bits mask>
static __global__ void any_nonfinite_kernel(const Bits *x, long long n, int *found) {
    bool bad = false;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n && !bad;
         i += (long long)gridDim.x * blockDim.x)
        bad = (x[i] & mask) == mask;
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1;
}

extern "C" mp_status mp_device_tensor_nonfinite(const mp_plan *p, const mp_tensor *t, bool *found) {
    *found = false;
    const long long n = (long long)mp_tensor_numel(t);
    if (n <= 0 || !t->data || (t->dtype != MP_DTYPE_F32 && t->dtype != MP_DTYPE_F16 && t->dtype != MP_DTYPE_BF16))
        return MP_OK; // labels and other non-float tensors cannot overflow
    cudaStream_t stream = mp_cuda_plan_ctx(p)->stream; // after the work that wrote t
    int *flag = NULL, hit = 0;
    MP_CUDA_TRY(cudaMalloc((void **)&flag, sizeof *flag), "overflow provenance");
    cudaError_t e = cudaMemsetAsync(flag, 0, sizeof *flag, stream);
    const int threads = 256, blocks = (int)(n / threads + 1 < 1024 ? n / threads + 1 : 1024);
    if (e == cudaSuccess) {
        if (t->dtype == MP_DTYPE_F32)
            any_nonfinite_kernel<unsigned, 0x7f800000u><<<blocks, threads, 0, stream>>>((const unsigned *)t->data, n, flag);
        else if (t->dtype == MP_DTYPE_F16)
            any_nonfinite_kernel<unsigned short, 0x7c00><<<blocks, threads, 0, stream>>>((const unsigned short *)t->data,
                                                                                       n, flag);
        else
            any_nonfinite_kernel<unsigned short, 0x7f80><<<blocks, threads, 0, stream>>>((const unsigned short *)t->data,
                                                                                       n, flag);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(&hit, flag, sizeof hit, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    cudaFree(flag);
    MP_CUDA_TRY(e, "overflow provenance");
    *found = hit != 0;
    return MP_OK;
}
