/* conv_wgrad_onednn.h — a CPU conv2d's weight gradient as im2col + oneDNN
 * matmul, for channels-last bf16 activations: per chunk of output rows,
 * the rows' input patches P (rows x KH*KW*C, bf16) are gathered and
 * dW (OC x KH*KW*C, f32) += dY_rows^T x P runs as one matmul (its sum
 * post-op adds the chunks); dW is then permuted to the filter's OIHW.
 * oneDNN 2.6's AMX backward-weights kernel runs small images at a fraction
 * of the matmul's rate (cnn10's 7x7 layers, 2 cores: 340-700 against
 * 830-1 110 GFLOP/s, bench/NOTES.md v0.43), so conv_onednn.c runs this
 * there instead. The same math as the primitive (bf16 products summed in
 * f32), in another order. */
#ifndef MP_OPS_CONV_WGRAD_ONEDNN_H
#define MP_OPS_CONV_WGRAD_ONEDNN_H

#include "ops/op.h"

typedef struct mp_wgrad_gemm mp_wgrad_gemm;

/* Whether conv2d d (groups 1, no bias, channels-last input and output, bf16
 * primitives) takes this form instead of its backward-weights primitive,
 * whose implementation is impl: MIXPREC_CPU_WGRAD_GEMM=1 wherever it can
 * run, =0 never, unset where it measured faster (oneDNN's AMX kernel on
 * outputs of at most 64 pixels). */
bool mp_wgrad_gemm_wanted(const mp_op_desc *d, const mp_op_info *info, const char *impl);
/* Override MIXPREC_CPU_WGRAD_GEMM for the plans created next (mode 0, 1, or
 * -1: where measured faster; -2: the environment's again), for benchmarks
 * that build both kinds of plan in one process; returns the mode before. */
int mp_wgrad_gemm_mode_set(int mode);

/* The matmuls for d's shapes (info: its input and output); *ws_bytes: the
 * workspace a run needs (a chunk's patches, dW before its permutation, the
 * matmul's scratchpad). MP_ERR_UNSUPPORTED when oneDNN has no JIT matmul
 * for them (no bf16 kernels on this CPU). */
mp_status mp_wgrad_gemm_create(const mp_op_desc *d, const mp_op_info *info, mp_wgrad_gemm **out, size_t *ws_bytes);

/* dw (OC, C, KH, KW) f32 = the weight gradient of x (N, H, W, C) and dy
 * (N, OH, OW, OC), both bf16 channels-last; ws: *ws_bytes, 64-byte
 * aligned. */
mp_status mp_wgrad_gemm_run(mp_wgrad_gemm *g, const void *x, const void *dy, float *dw, void *ws);

void mp_wgrad_gemm_destroy(mp_wgrad_gemm *g);

#endif
