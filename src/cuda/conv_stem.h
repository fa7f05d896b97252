/* conv_stem.h — our own kernels for the forward and backward-filter of a
 * dense convolution with few input channels (a network's stem: 3 RGB
 * channels, 3x3, into 64), in the conv view of conv_cudnn.h: NHWC
 * activations, the KRSC filter (cy, k, k, cx), f16 or bf16 throughout, f32
 * sums on the tensor cores.
 *
 * Why: with 27 products per output value such a layer is bound by the
 * memory its output (forward) or output gradient (backward-filter) takes,
 * yet cuDNN's kernels for it run at a third of that rate on sm_90 (cnn10
 * and resnet18 at batch 512: 0.077 and 0.090 ms where the 67 MB they
 * stream need about 0.025). These take 0.050 and 0.053 ms there (H100,
 * their shared-memory rows padded against bank conflicts, bench/NOTES.md
 * v0.51): the search keeps both, still ~2x the bytes' time.
 *
 * Both kernels see the convolution as a GEMM over output pixels p (n, oh,
 * ow) and taps t (r, s, c), c fastest, at most 32 of them (zero-padded to
 * 32): a block builds a tile of 128 pixels' im2col rows in shared memory
 * from x (out-of-image taps 0) and
 *   forward          y[p, :] = im2col[p, :] . W^T   (one rounding to cd)
 *   backward-filter  dW[:, t] = sum over p of dy[p, :] im2col[p, t]: each
 *                    block's f32 sums in the workspace, then summed in
 *                    block order (the same bits every run), rounded once.
 * The backward-data is not theirs (a stem's input needs no gradient).
 *
 * conv_own.h times them beside cuDNN's choice like the depthwise kernels.
 * Every kernel runs on ctx->stream, allocates nothing and never
 * synchronizes. */
#ifndef MP_CUDA_CONV_STEM_H
#define MP_CUDA_CONV_STEM_H

#include "cuda/conv_cudnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the kernels take geometry g in dtype cd: f16 or bf16, groups 1,
 * cx <= 4 input channels, k * k * cx <= 32 taps, cy a multiple of 16 up to
 * 128, any stride, padding and dilation (dilation * (k - 1) < 128),
 * fewer than 2^31 values in x and y, and a window spanning fewer than 2^26
 * of x's values. */
bool mp_stem_applies(const mp_conv_geom *g, mp_dtype cd);

/* Workspace bytes of a pass on ctx: the backward-filter's per-block sums;
 * 0 for the forward. */
size_t mp_stem_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass);

/* y = x (*) w (cross-correlation); y 16-byte aligned. */
mp_status mp_stem_forward(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const void *w, void *y,
                          const char *what);
/* dw (KRSC, cd) from x and dy (16-byte aligned); ws of at least
 * mp_stem_workspace(..., MP_CONV_BWD_FILTER) bytes, 16-byte aligned. */
mp_status mp_stem_backward_filter(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const void *dy,
                                  void *dw, void *ws, size_t ws_bytes, const char *what);

#ifdef __cplusplus
}
#endif
#endif
