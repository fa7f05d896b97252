/* bn_add_relu_cuda.cu — see bn_add_relu_cuda.h. */
#include "cuda/bn_add_relu_cuda.h"

template <int VEC>
__global__ void bn_add_relu_apply_kernel(const void *x, mp_dtype xdt, const void *r, mp_dtype rdt, void *z,
                                         mp_dtype zdt, long long M, int C, const float *coef, bool relu) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / VEC) return;
    float mu[VEC], sc[VEC], sh[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const int c = g * VEC + k;
        mu[k] = coef[c], sc[k] = coef[C + c], sh[k] = coef[2 * C + c];
    }
    for (long long row = (long long)blockIdx.y * blockDim.y + threadIdx.y; row < M;
         row += (long long)gridDim.y * blockDim.y) {
        const long long at = row * C + (long long)g * VEC;
        float v[VEC], rv[VEC];
        mp_ldv<VEC>(x, xdt, at, v);
        mp_ldv<VEC>(r, rdt, at, rv);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float s = mp_round_as(zdt, (v[k] - mu[k]) * sc[k] + sh[k]) + rv[k];
            v[k] = relu && s < 0.f ? 0.f : s; /* NaN passes */
        }
        mp_stv<VEC>(z, zdt, at, v);
    }
}

template <int VEC>
__global__ void bn_add_relu_dx_kernel(const void *x, mp_dtype xdt, const void *dz, mp_dtype dzdt, const void *z,
                                      mp_dtype zdt, void *dx, mp_dtype dxdt, void *dr, mp_dtype drdt, bool dr_add,
                                      long long M, int C, const float *coef) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= C / VEC) return;
    float mu[VEC], kk[VEC], a[VEC], b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const int c = g * VEC + k;
        mu[k] = coef[c], kk[k] = coef[C + c], a[k] = coef[2 * C + c], b[k] = coef[3 * C + c];
    }
    for (long long row = (long long)blockIdx.y * blockDim.y + threadIdx.y; row < M;
         row += (long long)gridDim.y * blockDim.y) {
        const long long at = row * C + (long long)g * VEC;
        float gv[VEC];
        mp_ldv<VEC>(dz, dzdt, at, gv);
        if (z) { /* the ReLU's mask */
            float zv[VEC];
            mp_ldv<VEC>(z, zdt, at, zv);
#pragma unroll
            for (int k = 0; k < VEC; k++) gv[k] = zv[k] <= 0.f ? 0.f : gv[k];
        }
        if (dr) {
            float rv[VEC];
            if (dr_add) {
                mp_ldv<VEC>(dr, drdt, at, rv);
#pragma unroll
                for (int k = 0; k < VEC; k++) rv[k] += gv[k];
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++) rv[k] = gv[k];
            }
            mp_stv<VEC>(dr, drdt, at, rv);
        }
        if (dx) {
            float xv[VEC];
            mp_ldv<VEC>(x, xdt, at, xv);
#pragma unroll
            for (int k = 0; k < VEC; k++) gv[k] = kk[k] * (gv[k] - a[k] - (xv[k] - mu[k]) * b[k]);
            mp_stv<VEC>(dx, dxdt, at, gv);
        }
    }
}

cudaError_t mp_bn_add_relu_apply(cudaStream_t st, dim3 grid, dim3 block, int vec, const mp_tensor *x,
                                 const mp_tensor *r, const mp_tensor *z, long long M, int C, const float *coef,
                                 bool relu) {
    if (vec == 8)
        bn_add_relu_apply_kernel<8><<<grid, block, 0, st>>>(x->data, x->dtype, r->data, r->dtype, z->data, z->dtype,
                                                            M, C, coef, relu);
    else
        bn_add_relu_apply_kernel<1><<<grid, block, 0, st>>>(x->data, x->dtype, r->data, r->dtype, z->data, z->dtype,
                                                            M, C, coef, relu);
    return cudaGetLastError();
}

cudaError_t mp_bn_add_relu_dx(cudaStream_t st, dim3 grid, dim3 block, int vec, const mp_tensor *x,
                              const mp_tensor *dz, const mp_tensor *z, void *dx, mp_dtype dx_dt, void *dr,
                              mp_dtype dr_dt, bool dr_add, long long M, int C, const float *coef) {
    const void *mask = z ? z->data : NULL;
    const mp_dtype mask_dt = z ? z->dtype : dz->dtype;
    if (vec == 8)
        bn_add_relu_dx_kernel<8><<<grid, block, 0, st>>>(x->data, x->dtype, dz->data, dz->dtype, mask, mask_dt, dx,
                                                         dx_dt, dr, dr_dt, dr_add, M, C, coef);
    else
        bn_add_relu_dx_kernel<1><<<grid, block, 0, st>>>(x->data, x->dtype, dz->data, dz->dtype, mask, mask_dt, dx,
                                                         dx_dt, dr, dr_dt, dr_add, M, C, coef);
    return cudaGetLastError();
}
