/* bf16_inline.h — one bf16 value to and from f32, inlined so that kernels
 * reading and writing bf16 tensors directly (see ops/instantiate_act.inc)
 * vectorize. The same rules as the array conversions in dtype_convert.c:
 * bf16 -> f32 is exact (bits << 16); f32 -> bf16 rounds to nearest even on
 * the bit pattern and keeps NaNs NaN (quiet bit set). */
#ifndef MP_CORE_BF16_INLINE_H
#define MP_CORE_BF16_INLINE_H

#include <stdint.h>

static inline float mp_bf16_bits_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

static inline uint16_t mp_f32_bits_to_bf16(uint32_t u) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN */
    /* RNE on the bit pattern: exact for denormals, carries into the exponent
     * (and into inf past the largest bf16) as IEEE rounding does. */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline uint16_t mp_f32_to_bf16_bits(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    return mp_f32_bits_to_bf16(v.u);
}

#endif
