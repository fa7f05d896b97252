/* batchnorm2d_cpu_math.h — the value a CPU batch norm stores, shared by its
 * vector kernels (batchnorm2d_cpu.c) and by the channels-last average pool
 * that applies a batch norm + ReLU fused into it as it loads its input
 * (pool2d_cpu.c, graph/plan_fuse.h): both must produce the same bits.
 * BN_STORE_RELU expands LD and ST, so it is used inside a kernel template
 * (instantiate_fast.inc), where they name the activation type's load and
 * store. */
#ifndef MP_OPS_BATCHNORM2D_CPU_MATH_H
#define MP_OPS_BATCHNORM2D_CPU_MATH_H

#include <math.h>

/* The normalized value before the ReLU, (x - muf) * gf + bf, as one fused
 * multiply-add in every kernel: the channels-last backward computes it again
 * for its ReLU mask and must get the forward's bits. */
#define BN_PRE(xv, muf, gf, bf) fmaf((xv) - (muf), (gf), (bf))

/* v stored in the activation type, with the fused ReLU when relu: a value
 * that rounds below 0 stores as +0 (rounding keeps the sign, NaN passes). */
#define BN_STORE_RELU(v, relu) (((int)(relu) & (LD(ST(v)) < 0)) ? ST(0) : ST(v))

#endif
