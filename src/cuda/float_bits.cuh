/* float_bits.cuh — device ports of the CPU's bit-level float helpers: the
 * non-finite test on the exponent bits (amp/scaler.c) and f32 -> f16 / bf16
 * round-to-nearest-even with the CPU's NaN rules (core/dtype_convert.c), so
 * device casts equal mp_convert_f32_to_{f16,bf16} bit for bit. Plus f32
 * arithmetic that is never contracted into FMA, to follow the CPU's
 * operation order and rounding. */
#ifndef MP_CUDA_FLOAT_BITS_CUH
#define MP_CUDA_FLOAT_BITS_CUH

#include <cuda_fp16.h>

#include "mixprec.h"

__device__ __forceinline__ unsigned mp_dev_nonfinite(float x) {
    return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

__device__ __forceinline__ unsigned short mp_dev_f32_to_f16_bits(float x) {
    const unsigned u = __float_as_uint(x);
    const unsigned sign = (u >> 16) & 0x8000u;
    const unsigned a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (unsigned short)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN */
    if (a >= 0x477FF000u) return (unsigned short)(sign | 0x7C00u); /* >= 65520 and inf -> inf */
    if (a >= 0x38800000u) { /* normal f16: rebias 127 -> 15, round at bit 13 */
        const unsigned r = a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u);
        return (unsigned short)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return (unsigned short)sign; /* < 2^-25: rounds to zero */
    const unsigned e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    const unsigned s = 126 - e; /* 14..24 */
    unsigned q = m >> s;
    const unsigned rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (unsigned short)(sign | q);
}

__device__ __forceinline__ unsigned short mp_dev_f32_to_bf16_bits(float x) {
    const unsigned u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)((u >> 16) | 0x40u); /* NaN */
    return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* The f32 value (exact) of f16 / bf16 bits b (dtype MP_DTYPE_F16 / _BF16). */
__device__ __forceinline__ float mp_dev_low_bits_to_f32(unsigned short b, int dtype) {
    switch ((mp_dtype)dtype) {
    case MP_DTYPE_F16: return __half2float(__ushort_as_half(b));
    case MP_DTYPE_BF16: return __uint_as_float((unsigned)b << 16);
    case MP_DTYPE_F32:
    case MP_DTYPE_F64:
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: break;
    }
    __trap(); /* not a 16-bit float dtype: a caller's bug */
    return 0.0f;
}

/* x rounded to nearest even in dtype (MP_DTYPE_F16 / _BF16), as its bits. */
__device__ __forceinline__ unsigned short mp_dev_f32_to_low_bits(float x, int dtype) {
    switch ((mp_dtype)dtype) {
    case MP_DTYPE_F16: return mp_dev_f32_to_f16_bits(x);
    case MP_DTYPE_BF16: return mp_dev_f32_to_bf16_bits(x);
    case MP_DTYPE_F32:
    case MP_DTYPE_F64:
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: break;
    }
    __trap(); /* not a 16-bit float dtype: a caller's bug */
    return 0;
}

/* Element i of a low-precision array of dtype (MP_DTYPE_F16 / _BF16) := x;
 * returns the value stored, as an f32 (exact). */
__device__ __forceinline__ float mp_dev_store_low(void *low, int dtype, long long i, float x) {
    const unsigned short b = mp_dev_f32_to_low_bits(x, dtype);
    ((unsigned short *)low)[i] = b;
    return mp_dev_low_bits_to_f32(b, dtype);
}

/* Element i of a low-precision array of dtype (MP_DTYPE_F16 / _BF16), as an f32 (exact). */
__device__ __forceinline__ float mp_dev_load_low(const void *low, int dtype, long long i) {
    return mp_dev_low_bits_to_f32(((const unsigned short *)low)[i], dtype);
}

/* Element i of an array of dtype (MP_DTYPE_F32, _F16 or _BF16) as an f32,
 * and its store (rounded to nearest even) returning the value stored. */
__device__ __forceinline__ float mp_dev_load_any(const void *a, int dtype, long long i) {
    return dtype == MP_DTYPE_F32 ? ((const float *)a)[i] : mp_dev_load_low(a, dtype, i);
}
__device__ __forceinline__ float mp_dev_store_any(void *a, int dtype, long long i, float x) {
    if (dtype != MP_DTYPE_F32) return mp_dev_store_low(a, dtype, i, x);
    ((float *)a)[i] = x;
    return x;
}

/* IEEE single operations, rounded to nearest, never fused. */
#define MP_FMUL(a, b) __fmul_rn((a), (b))
#define MP_FADD(a, b) __fadd_rn((a), (b))
#define MP_FSUB(a, b) __fsub_rn((a), (b))
#define MP_FDIV(a, b) __fdiv_rn((a), (b))

#endif
