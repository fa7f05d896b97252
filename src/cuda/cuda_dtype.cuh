/* cuda_dtype.cuh — device-side loads and stores of activations in any
 * storage dtype (f32, f16, bf16) chosen at run time: every load widens to
 * float exactly, every store rounds once, to nearest even (the CPU's
 * mp_f32_to_f16 / mp_f32_to_bf16, subnormals and overflow to inf included;
 * a NaN stays a NaN, though its payload may differ from the CPU's).
 *
 * The dtype is a kernel argument, so one kernel serves every mix of input
 * and output dtypes; the switch is uniform across a warp. The 8-wide forms
 * move 16 bytes per f16/bf16 access (32 for f32) and need 16-byte aligned
 * pointers and an index that is a multiple of 8 (mp_cuda_aligned16). */
#ifndef MP_CUDA_CUDA_DTYPE_CUH
#define MP_CUDA_CUDA_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "mixprec.h"

static inline bool mp_cuda_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* True for the float storage dtypes the kernels read and write. */
static inline bool mp_cuda_float_dtype(mp_dtype dt) {
    return dt == MP_DTYPE_F32 || dt == MP_DTYPE_F16 || dt == MP_DTYPE_BF16;
}

/* Element i of an activation of dtype dt (f32, f16, bf16) as a float; any
 * other dtype is a bug that stops the kernel (no silent f32 reinterpretation). */
template <typename I>
__device__ __forceinline__ float mp_ld(const void *p, mp_dtype dt, I i) {
    switch (dt) {
    case MP_DTYPE_F32: return static_cast<const float *>(p)[i];
    case MP_DTYPE_F16: return __half2float(static_cast<const __half *>(p)[i]);
    case MP_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case MP_DTYPE_F64:
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: break;
    }
    __trap();
    return 0.0f;
}

/* Element i := v, rounded to nearest even to dtype dt (f32, f16, bf16). */
template <typename I>
__device__ __forceinline__ void mp_st(void *p, mp_dtype dt, I i, float v) {
    switch (dt) {
    case MP_DTYPE_F32: static_cast<float *>(p)[i] = v; return;
    case MP_DTYPE_F16: static_cast<__half *>(p)[i] = __float2half_rn(v); return;
    case MP_DTYPE_BF16: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); return;
    case MP_DTYPE_F64:
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: break;
    }
    __trap();
}

/* v rounded to dtype dt (f32, f16, bf16) and back: what storing and reloading it gives. */
__device__ __forceinline__ float mp_round_as(mp_dtype dt, float v) {
    if (dt == MP_DTYPE_F16) return __half2float(__float2half_rn(v));
    if (dt == MP_DTYPE_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

/* v[0..7] = p[i..i+7]; i % 8 == 0, p 16-byte aligned. */
template <typename I>
__device__ __forceinline__ void mp_ld8(const void *p, mp_dtype dt, I i, float (&v)[8]) {
    if (dt == MP_DTYPE_F32) {
        const float4 *q = reinterpret_cast<const float4 *>(static_cast<const float *>(p) + i);
        float4 a = q[0], b = q[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p) + i);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f;
        if (dt == MP_DTYPE_F16) {
            __half2 h = *reinterpret_cast<const __half2 *>(&w[k]);
            f = __half22float2(h);
        } else {
            __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162 *>(&w[k]);
            f = __bfloat1622float2(h);
        }
        v[2 * k] = f.x, v[2 * k + 1] = f.y;
    }
}

/* p[i..i+7] = round(v[0..7]); i % 8 == 0, p 16-byte aligned. */
template <typename I>
__device__ __forceinline__ void mp_st8(void *p, mp_dtype dt, I i, const float (&v)[8]) {
    if (dt == MP_DTYPE_F32) {
        float4 *q = reinterpret_cast<float4 *>(static_cast<float *>(p) + i);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
        return;
    }
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (dt == MP_DTYPE_F16) {
            __half2 h = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
            w[k] = *reinterpret_cast<const uint32_t *>(&h);
        } else {
            __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
            w[k] = *reinterpret_cast<const uint32_t *>(&h);
        }
    }
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p) + i) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* VEC = 1 or 8 consecutive elements: the scalar or the 16-byte form. */
template <int VEC, typename I>
__device__ __forceinline__ void mp_ldv(const void *p, mp_dtype dt, I i, float (&v)[VEC]) {
    if constexpr (VEC == 8) mp_ld8(p, dt, i, v);
    else {
#pragma unroll
        for (int k = 0; k < VEC; k++) v[k] = mp_ld(p, dt, i + k);
    }
}

template <int VEC, typename I>
__device__ __forceinline__ void mp_stv(void *p, mp_dtype dt, I i, const float (&v)[VEC]) {
    if constexpr (VEC == 8) mp_st8(p, dt, i, v);
    else {
#pragma unroll
        for (int k = 0; k < VEC; k++) mp_st(p, dt, i + k, v[k]);
    }
}

#endif
