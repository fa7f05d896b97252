/* bn_add_relu_cuda.h — the elementwise passes of a batch norm with the
 * residual add (and the ReLU after it, where there is one) fused in
 * (graph/plan_fuse.h), for batchnorm2d_cuda.cu: forward
 * z = relu(round(bn(x)) + r) (or round(bn(x)) + r), backward dx of the batch
 * norm and dr of the add from dz (masked by z with the ReLU), in one pass
 * each.
 * Channels-last rows of C channels, VEC = 8 (16-byte accesses of 16-bit
 * values, C % 8 == 0 and every pointer 16-byte aligned) or 1. CUDA only. */
#ifndef MP_CUDA_BN_ADD_RELU_CUDA_H
#define MP_CUDA_BN_ADD_RELU_CUDA_H

#include "cuda/cuda_kernel_util.cuh"

/* z = relu(round_z(bn) + r) (relu false: round_z(bn) + r), bn =
 * (x - mu) * scale + shift with coef = (mu, scale, shift), C each (f32): the
 * unfused batchnorm2d, add and relu's values, roundings included. */
cudaError_t mp_bn_add_relu_apply(cudaStream_t st, dim3 grid, dim3 block, int vec, const mp_tensor *x,
                                 const mp_tensor *r, const mp_tensor *z, long long M, int C, const float *coef,
                                 bool relu);

/* g = dz where z > 0 (else 0; NaN passes, as relu's backward), g = dz
 * when z is NULL (no ReLU); dx =
 * k * (g - a - (x - mu) * b) with coef = (mu, k, a, b), C each, when dx is
 * non-NULL; dr = g (dr_add: dr + g, one rounding, as the executor's
 * gradient accumulation) when dr is non-NULL. */
cudaError_t mp_bn_add_relu_dx(cudaStream_t st, dim3 grid, dim3 block, int vec, const mp_tensor *x,
                              const mp_tensor *dz, const mp_tensor *z, void *dx, mp_dtype dx_dt, void *dr,
                              mp_dtype dr_dt, bool dr_add, long long M, int C, const float *coef);

#endif
