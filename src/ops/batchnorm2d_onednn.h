/* batchnorm2d_onednn.h — private interface between batchnorm2d.c and its
 * oneDNN fast path (batchnorm2d_onednn.c, f32 batch_normalization), and the
 * layout of the node's saved bytes, which both implementations share. The
 * header itself needs no oneDNN include. */
#ifndef MP_OPS_BATCHNORM2D_ONEDNN_H
#define MP_OPS_BATCHNORM2D_ONEDNN_H

#include "ops/op.h"

/* Saved bytes for C channels:
 *   double mean[C], double invstd[C]   batch statistics backward reads (always written)
 *   float  mean[C], float  var[C]      oneDNN's batch mean and biased variance
 *   float  scale[C], float shift[C]    the CPU channels-last training forward's
 *                                      y = (x - (float)mean) * scale + shift, from
 *                                      which its backward recomputes the ReLU mask */
static inline size_t mp_bn_saved_bytes(int C) { return (size_t)C * 32; }
static inline double *mp_bn_saved_mean(void *saved) { return saved; }
static inline double *mp_bn_saved_invstd(void *saved, int C) { return (double *)saved + C; }
static inline float *mp_bn_saved_mean_f32(void *saved, int C) { return (float *)((double *)saved + 2 * C); }
static inline float *mp_bn_saved_var_f32(void *saved, int C) { return mp_bn_saved_mean_f32(saved, C) + C; }
static inline float *mp_bn_saved_scale_f32(void *saved, int C) { return mp_bn_saved_mean_f32(saved, C) + 2 * C; }
static inline float *mp_bn_saved_shift_f32(void *saved, int C) { return mp_bn_saved_mean_f32(saved, C) + 3 * C; }

typedef struct mp_bn_dnnl mp_bn_dnnl;

/* Build the primitives for these exact shapes: forward training + backward
 * (training) or forward inference with the running statistics, and raise
 * info->workspace_bytes for their scratchpads. *out = NULL with MP_OK when
 * oneDNN has no implementation: the node then runs the reference kernels. */
mp_status mp_bn_dnnl_create(const mp_op_desc *d, mp_op_info *info, bool training, mp_bn_dnnl **out);
void mp_bn_dnnl_destroy(mp_bn_dnnl *s);
/* True when every primitive is a JIT kernel. */
bool mp_bn_dnnl_is_jit(const mp_bn_dnnl *s);
/* Whether the primitives were built for training. */
bool mp_bn_dnnl_training(const mp_bn_dnnl *s);
/* Training forward also fills the double mean/invstd and updates the running
 * statistics (unbiased variance). */
mp_status mp_bn_dnnl_forward(mp_bn_dnnl *s, const mp_op_call *c);
/* Training only, with c->d_in[0].data non-NULL. */
mp_status mp_bn_dnnl_backward(mp_bn_dnnl *s, const mp_op_call *c);

#endif
