/* conv_dgrad_onednn.h — a CPU conv2d's data gradient as the forward
 * convolution of its transpose. At stride 1 and groups 1,
 * dX = conv(dY, W') with W'[c][o][kh][kw] = W[o][c][k-1-kh][k-1-kw] (the
 * filter's channels swapped and its taps reversed), the same dilation and
 * padding dil*(k-1) - pad on each side: the same products, summed in f32
 * as the backward-data primitive sums them. oneDNN 2.6 runs bf16
 * backward data on its older AMX kernel and the forward on its brgconv
 * one, which measured 1.04-1.7x faster on cnn10's 3x3 layers (most on the
 * 7x7 ones; bench/NOTES.md v0.44), so conv_onednn.c runs this form there
 * (its backward-data pass is then this forward primitive, its weights
 * W', written into the workspace each backward). */
#ifndef MP_OPS_CONV_DGRAD_ONEDNN_H
#define MP_OPS_CONV_DGRAD_ONEDNN_H

#include <stddef.h>

#include "ops/op.h"

/* Whether conv2d d can take this form: groups 1, stride 1, a padding of at
 * most dil*(k-1). */
bool mp_dgrad_fwd_possible(const mp_op_desc *d);
/* Whether it does, its backward-data primitive's implementation being
 * impl: MIXPREC_CPU_DGRAD_FWD=1 wherever possible, =0 never, unset where
 * it measured faster (oneDNN's AMX backward-data kernel, channels-last
 * activations, at least 8 input and 8 output channels). */
bool mp_dgrad_fwd_wanted(const mp_op_desc *d, const mp_op_info *info, const char *impl);
/* Whether the form is forced on (MIXPREC_CPU_DGRAD_FWD=1 or the override
 * below): then conv_onednn.c takes it on whatever JIT forward kernel oneDNN
 * picks; unset, only on its brgconv kernel, on channels-last tensors as
 * they are (no reorders). */
bool mp_dgrad_fwd_forced(void);
/* Override MIXPREC_CPU_DGRAD_FWD for the plans created next (mode 0, 1, or
 * -1: where measured faster; -2: the environment's again), for benchmarks
 * and tests that build both kinds of plan in one process; returns the mode
 * before. */
int mp_dgrad_fwd_mode_set(int mode);

/* dst (C, OC, k, k) = W' of src (OC, C, k, k), elements of elem bytes (2
 * or 4). */
void mp_conv_weights_transpose_flip(void *dst, const void *src, int OC, int C, int k, size_t elem);

#endif
