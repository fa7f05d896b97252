/* conv_depthwise.h — our own kernels for depthwise 3x3 convolutions (groups
 * = input channels = output channels: MobileNet's filtering layers), in the
 * conv view of conv_cudnn.h: NHWC activations, the KRSC filter (C, 3, 3, 1),
 * one dtype cd (f32, f16 or bf16) throughout, f32 sums.
 *
 * Why: a depthwise convolution is memory-bound, and cuDNN's backward-data
 * for it streams at 1.3 TB/s on sm_90 (mobilenetv2's large layers; the copy
 * rate is 3.3, bench/NOTES.md v0.27). These kernels read 16-byte channel
 * vectors (8-byte ones of 4 channels in the stride-1 f16/bf16 forward and
 * backward-data) and keep each thread's input window in registers as it rolls
 * down a band of output rows (a strip of outputs along the width; 2 x 2
 * blocks of dx for a strided backward-data).
 *
 * conv_own.h times them for each pass beside cuDNN's choice, with the stem
 * kernels (conv_stem.h), whose geometries are not these.
 *
 * Passes, with the tensors in the roles of conv_engine.h (x, w, y):
 *   forward          y = x (*) w                    (cross-correlation)
 *   backward-data    dx = dy (*) w flipped, or dx += that (add)
 *   backward-filter  dW[c, r, s] = sum over n, oh, ow of x * dy: partial sums
 *                    of each block in the workspace, then summed in block
 *                    order (the same bits every run), rounded once to cd.
 * Every kernel runs on ctx->stream, allocates nothing and never
 * synchronizes. */
#ifndef MP_CUDA_CONV_DEPTHWISE_H
#define MP_CUDA_CONV_DEPTHWISE_H

#include "cuda/conv_cudnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A batch norm and the ReLU after it, applied to x as the forward and
 * backward-filter load it, so that the batch norm's output need never be
 * stored (graph/plan_fuse.h): x' = relu((x - mu[c]) * scale[c] + shift[c])
 * rounded to cd, bit for bit what batchnorm2d_fast.h's apply stores; the
 * padding stays zero. Per channel, f32, on the device. */
typedef struct {
    const float *mu, *scale, *shift;
} mp_dw_bn_relu;

/* Whether the kernels take geometry g in dtype cd: groups = cx = cy <= 1024,
 * a multiple of 8 (f16, bf16) or 4 (f32); kernel 3, stride 1 or 2,
 * dilation 1, padding 0..2. */
bool mp_dw_applies(const mp_conv_geom *g, mp_dtype cd);

/* Workspace bytes of a pass on ctx (the backward-filter's partial sums;
 * 0 for the others). */
size_t mp_dw_workspace(const mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, mp_conv_pass pass);

/* bn: NULL, or applied to x (above). */
mp_status mp_dw_forward(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x, const mp_dw_bn_relu *bn,
                        const void *w, void *y, const char *what);
/* add: dx += the result (one rounding of the sum), else dx = it. */
mp_status mp_dw_backward_data(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *dy, const void *w,
                              void *dx, bool add, const char *what);
/* dw (KRSC, cd); ws of at least mp_dw_workspace(..., MP_CONV_BWD_FILTER) bytes; bn as the forward's. */
mp_status mp_dw_backward_filter(mp_cuda_ctx *ctx, const mp_conv_geom *g, mp_dtype cd, const void *x,
                                const mp_dw_bn_relu *bn, const void *dy, void *dw, void *ws, size_t ws_bytes,
                                const char *what);

#ifdef __cplusplus
}
#endif
#endif
