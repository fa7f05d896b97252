/* vec16.cuh — f32, f16 and bf16 values widened to float and narrowed back
 * (round to nearest even), one at a time or as 16-byte vectors (four f32 or
 * eight f16/bf16 per load and store), and the C++ type of a dtype
 * (with_type). Shared by the library's kernels
 * (lib_kernels.cu), batch norm's fast kernels and the depthwise
 * convolutions. CUDA only. */
#ifndef MP_CUDA_VEC16_CUH
#define MP_CUDA_VEC16_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "mixprec.h"

/* ---- one value ---------------------------------------------------------- */

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* Call f with a value of the C++ type of dt; false for other dtypes. */
template <typename F> static inline bool with_type(mp_dtype dt, F f) {
    switch (dt) {
    case MP_DTYPE_F32: f(float{}); return true;
    case MP_DTYPE_F16: f(__half{}); return true;
    case MP_DTYPE_BF16: f(__nv_bfloat16{}); return true;
    case MP_DTYPE_F64:
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: return false;
    }
    return false;
}

/* ---- 16-byte vectors of T as floats ------------------------------------- */

template <typename T> struct fast_vec;
template <> struct fast_vec<float> {
    static constexpr int N = 4;
    static __device__ __forceinline__ void widen(uint4 u, float (&v)[4]) {
        v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z),
        v[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ uint4 narrow(const float (&v)[4]) {
        return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    }
    static __device__ __forceinline__ float round(float v) { return v; }
};
/* f16 and bf16: eight values, converted in pairs by the type's intrinsics */
template <typename T> struct fast_pair;
template <> struct fast_pair<__half> {
    using P = __half2;
    static __device__ __forceinline__ float2 widen(P p) { return __half22float2(p); }
    static __device__ __forceinline__ P narrow(float a, float b) { return __floats2half2_rn(a, b); }
    static __device__ __forceinline__ float round(float v) { return __half2float(__float2half_rn(v)); }
};
template <> struct fast_pair<__nv_bfloat16> {
    using P = __nv_bfloat162;
    static __device__ __forceinline__ float2 widen(P p) { return __bfloat1622float2(p); }
    static __device__ __forceinline__ P narrow(float a, float b) { return __floats2bfloat162_rn(a, b); }
    static __device__ __forceinline__ float round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
};
template <typename T> struct fast_vec16 {
    using pair = fast_pair<T>;
    static constexpr int N = 8;
    static __device__ __forceinline__ void widen(uint4 u, float (&v)[8]) {
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 f = pair::widen(*reinterpret_cast<const typename pair::P *>(&w[k]));
            v[2 * k] = f.x, v[2 * k + 1] = f.y;
        }
    }
    static __device__ __forceinline__ uint4 narrow(const float (&v)[8]) {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const typename pair::P h = pair::narrow(v[2 * k], v[2 * k + 1]);
            w[k] = *reinterpret_cast<const uint32_t *>(&h);
        }
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
    static __device__ __forceinline__ float round(float v) { return pair::round(v); }
};
template <> struct fast_vec<__half> : fast_vec16<__half> {};
template <> struct fast_vec<__nv_bfloat16> : fast_vec16<__nv_bfloat16> {};

template <typename T> __device__ __forceinline__ uint4 ld16(const T *p) { return *reinterpret_cast<const uint4 *>(p); }
template <typename T> __device__ __forceinline__ void st16(T *p, uint4 u) { *reinterpret_cast<uint4 *>(p) = u; }

#endif
