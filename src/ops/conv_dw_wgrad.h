/* conv_dw_wgrad.h — a CPU depthwise conv2d's weight gradient (groups = input
 * channels = output channels, no bias) over channels-last f32 or bf16
 * activations, on the vector kernels (conv_dw_wgrad_kernels.inc): dw[c, kh,
 * kw] = sum over n, oh, ow of dy[n, oh, ow, c] * x[n, oh*s - p + kh*d, ow*s -
 * p + kw*d, c]. oneDNN 2.6's channels-last bf16 depthwise backward-weights
 * kernel runs at a fraction of what its bytes allow (and its blocked one
 * needs two full-tensor reorders), so conv_onednn.c runs this instead where
 * it applies. Products summed in float along one output row, the rows in double
 * per thread, the threads in order: results repeat for a thread count. */
#ifndef MP_OPS_CONV_DW_WGRAD_H
#define MP_OPS_CONV_DW_WGRAD_H

#include "ops/op.h"

/* The threads the kernel runs on at most (its workspace holds their sums). */
#define MP_DW_WGRAD_MAX_THREADS 64

/* Whether conv2d d, whose input and output info describes, with dt
 * activations, is a depthwise conv this kernel takes: groups = in = out
 * channels, no bias, 4-D channels-last input and output, a vector
 * instruction set, and bf16 (in f32 oneDNN's channels-last kernel measured
 * as fast: bench/NOTES.md v0.46; the kernel itself computes either). */
bool mp_dw_wgrad_applies(const mp_op_desc *d, const mp_op_info *info, mp_dtype dt);
/* Workspace bytes of a run for d (64-byte aligned by the caller). */
size_t mp_dw_wgrad_workspace_bytes(const mp_op_desc *d, const mp_op_info *info);
/* dw (C, 1, KH, KW) f32 = the weight gradient of x (N, H, W, C) and dy (N,
 * OH, OW, C), both dt (f32 or bf16) channels-last; written, not added. */
void mp_dw_wgrad_run(mp_dtype dt, const mp_op_desc *d, const mp_op_info *info, const void *x, const void *dy,
                     float *dw, void *ws);

#endif
