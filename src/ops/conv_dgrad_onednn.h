/* conv_dgrad_onednn.h — a CPU conv2d's data gradient as the forward
 * convolution of its transpose. At stride 1 and groups 1,
 * dX = conv(dY, W') with W'[c][o][kh][kw] = W[o][c][k-1-kh][k-1-kw] (the
 * filter's channels swapped and its taps reversed), the same dilation and
 * padding dil*(k-1) - pad on each side: the same products, summed in f32
 * as the backward-data primitive sums them. oneDNN 2.6 runs bf16
 * backward data on its older AMX kernel and the forward on its brgconv
 * one: on cnn10's 7x7 layers the form took 1.2-1.7x less time, elsewhere
 * from 0.74x (512 channels on 4x4 images) to 1.2x, and with the form on
 * every such conv the step gained on cnn10 at batch 128 and lost on
 * resnet18 (bench/NOTES.md v0.44).
 * So where the form is wanted and not forced, conv_onednn.c builds both
 * and times them once per shape as the plan is created (the choice is
 * kept for the process, so that plans of one process agree; another run
 * may choose otherwise, and the two forms' sums differ in their last bits;
 * MIXPREC_DETERMINISTIC=1 keeps the primitive untimed), keeping the form
 * where it is at least 5 % faster; its backward-data pass is then this
 * forward primitive, its weights W' written into the workspace each
 * backward. */
#ifndef MP_OPS_CONV_DGRAD_ONEDNN_H
#define MP_OPS_CONV_DGRAD_ONEDNN_H

#include <stddef.h>

#include "ops/op.h"

/* Whether conv2d d can take this form: groups 1, stride 1, a padding of at
 * most dil*(k-1). */
bool mp_dgrad_fwd_possible(const mp_op_desc *d);
/* Whether it is built, its backward-data primitive's implementation being
 * impl: MIXPREC_CPU_DGRAD_FWD=1 wherever possible, =0 never, unset where
 * it may be faster (oneDNN's AMX backward-data kernel, channels-last
 * activations, at least 8 input and 8 output channels), to be timed
 * against the primitive — never under MIXPREC_DETERMINISTIC=1. */
bool mp_dgrad_fwd_wanted(const mp_op_desc *d, const mp_op_info *info, const char *impl);
/* Whether the form is forced on (MIXPREC_CPU_DGRAD_FWD=1 or the override
 * below): conv_onednn.c then builds it alone. */
bool mp_dgrad_fwd_forced(void);
/* Whether the form is taken on whatever JIT forward kernel oneDNN picks,
 * on any layout (forced, or the test modes below); else only on its
 * brgconv kernel, on channels-last tensors as they are (no reorders). */
bool mp_dgrad_fwd_any_kernel(void);
/* The choice between the two passes built side by side without timing
 * them: 1 the form, 0 the primitive (the test modes below), -1: time
 * them. */
int mp_dgrad_fwd_untimed_choice(void);
/* Override MIXPREC_CPU_DGRAD_FWD for the plans created next (mode 0, 1, or
 * -1: where measured faster; -2: the environment's again), for benchmarks
 * and tests that build both kinds of plan in one process; returns the mode
 * before. Tests also use 2 and 3: both passes built wherever the form is
 * possible, then the form kept (2) or the primitive (3), untimed — the
 * timed choice's path on any CPU. */
int mp_dgrad_fwd_mode_set(int mode);

/* A conv's shape for the timed choice: N, C, H, W, OC, OH, OW, k, padding,
 * dilation, dtype, compute in f32, layout bits. mp_dgrad_fwd_choice_get:
 * the choice made for it earlier in the process (1: the form, 0: the
 * primitive), or -1; _put records one unless one is there, and returns
 * the one recorded (so that two plans timing one shape at once agree).
 * Thread-safe; past CHOICES shapes (256) nothing more is recorded. */
enum { MP_DGRAD_KEY_INTS = 13 };
int mp_dgrad_fwd_choice_get(const int key[MP_DGRAD_KEY_INTS]);
int mp_dgrad_fwd_choice_put(const int key[MP_DGRAD_KEY_INTS], int choice);

/* dst (C, OC, k, k) = W' of src (OC, C, k, k), elements of elem bytes (2
 * or 4). */
void mp_conv_weights_transpose_flip(void *dst, const void *src, int OC, int C, int k, size_t elem);

#endif
