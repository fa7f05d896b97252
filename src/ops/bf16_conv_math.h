/* bf16_conv_math.h — how bf16 convolutions compute on this CPU. oneDNN's
 * bf16 primitives multiply with bf16 dot products (AVX-512 BF16's
 * vdpbf16ps, AMX tiles). Where those run slower than f32 FMAs (measured on
 * a Xeon without AMX: vdpbf16ps at ~0.45x the FMA rate, so bf16 primitives
 * at ~0.6x the f32 ones), the convolution is built as an f32 primitive
 * instead, and the reorders around it widen the bf16 tensors on the way in
 * and round the results once on the way out: the same bf16 inputs, f32
 * accumulation and rounded output, at the f32 kernels' rate. */
#ifndef MP_OPS_BF16_CONV_MATH_H
#define MP_OPS_BF16_CONV_MATH_H

#include <stdbool.h>

typedef enum {
    MP_BF16_MATH_AUTO = 0, /* F32 on CPUs with AVX-512 BF16, no AMX and bf16 dot products slower than
                              f32 FMAs; else DOT (oneDNN's bf16 kernels where it has them) */
    MP_BF16_MATH_DOT,      /* oneDNN's bf16 primitives */
    MP_BF16_MATH_F32       /* f32 primitives between bf16 tensors */
} mp_bf16_math;

/* The math bf16 convolutions prepared now use (DOT or F32): what
 * mp_bf16_math_set chose, else the CPU's (measured once). Read by prepare()
 * only; a prepared node keeps its math. */
mp_bf16_math mp_bf16_math_current(void);
/* Tests and benchmarks: force DOT or F32 for the nodes prepared next; AUTO
 * returns to the CPU's choice. Returns the math in use afterwards. */
mp_bf16_math mp_bf16_math_set(mp_bf16_math m);
/* The measured rate of bf16 dot products (vdpbf16ps, 512-bit, one thread)
 * over that of f32 FMAs, in flops; 0 without AVX-512 BF16, or in builds
 * that cannot compile the probe (AUTO is DOT there). */
double mp_bf16_dot_rate(void);
const char *mp_bf16_math_name(mp_bf16_math m);
/* Whether bf16 convolutions may run on oneDNN primitives rather than the
 * staged f32 emulation: the CPU multiplies bf16 in hardware (AVX-512 BF16,
 * AMX), or the math is F32. Elsewhere oneDNN's bf16 kernels (it has JIT ones
 * for AVX-512 CPUs without BF16) emulate the dot products: measured at 0.31x
 * the fp32 step, where the staged emulation runs at fp32's speed. */
bool mp_bf16_conv_primitives_pay(void);

#endif
