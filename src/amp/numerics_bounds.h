/* numerics_bounds.h — the one classification rule of the numerics statistics
 * (mixprec/numerics.h), shared by the CPU pass (numerics.c) and the GPU
 * kernel (cuda/numerics_cuda.cu). A finite non-negative f32's bit pattern
 * orders like its value, so |x| is classified by comparing its bits with the
 * exact rounding boundaries (round to nearest, ties to even) of each format:
 *   overflow:  |x| >= max + half an ulp of max (the tie rounds to inf, max's
 *              mantissa being odd)
 *   underflow: |x| <= half the smallest subnormal (the tie rounds to 0)
 *   subnormal: below the smallest normal minus half a subnormal ulp (the tie
 *              rounds up to the normal, whose mantissa is even) */
#ifndef MP_AMP_NUMERICS_BOUNDS_H
#define MP_AMP_NUMERICS_BOUNDS_H

#include <stdint.h>

#include "core/hostdev.h"

#define MP_NB_F32_INF 0x7f800000u /* |x| bits above this: NaN */

/* fp16: 65520, 2^-25, 2^-14 - 2^-25; bf16: 0x1.ffp127, 2^-134, 2^-126 - 2^-134 */
#define MP_NB_FP16_OVERFLOW_AT 0x477ff000u
#define MP_NB_FP16_UNDERFLOW_TO 0x33000000u
#define MP_NB_FP16_NORMAL_FROM 0x387fe000u
#define MP_NB_BF16_OVERFLOW_AT 0x7f7f8000u
#define MP_NB_BF16_UNDERFLOW_TO 0x00008000u
#define MP_NB_BF16_NORMAL_FROM 0x007f8000u

/* What rounding a finite non-zero |x| (bits a) to one format does. */
typedef enum { MP_NB_NORMAL = 0, MP_NB_OVERFLOW, MP_NB_UNDERFLOW, MP_NB_SUBNORMAL } mp_nb_class;

static inline MP_HD mp_nb_class mp_nb_classify(uint32_t a, uint32_t overflow_at, uint32_t underflow_to,
                                               uint32_t normal_from) {
    if (a >= overflow_at) return MP_NB_OVERFLOW;
    if (a <= underflow_to) return MP_NB_UNDERFLOW;
    return a < normal_from ? MP_NB_SUBNORMAL : MP_NB_NORMAL;
}
static inline MP_HD mp_nb_class mp_nb_classify_fp16(uint32_t a) {
    return mp_nb_classify(a, MP_NB_FP16_OVERFLOW_AT, MP_NB_FP16_UNDERFLOW_TO, MP_NB_FP16_NORMAL_FROM);
}
static inline MP_HD mp_nb_class mp_nb_classify_bf16(uint32_t a) {
    return mp_nb_classify(a, MP_NB_BF16_OVERFLOW_AT, MP_NB_BF16_UNDERFLOW_TO, MP_NB_BF16_NORMAL_FROM);
}

/* floor(log2 a) of a finite a > 0 given as f32 bits. */
static inline MP_HD int mp_nb_octave(uint32_t a) {
    const int e = (int)(a >> 23);
    if (e) return e - 127;
    int top = 31; /* subnormal: a = m * 2^-149, floor(log2 m) = index of m's top bit */
    while (!(a >> top)) top--;
    return -149 + top;
}

#endif
