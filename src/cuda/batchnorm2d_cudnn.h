/* batchnorm2d_cudnn.h — batchnorm2d's training passes on cuDNN's NHWC
 * batch-norm kernels (cudnnBatchNormalization{ForwardTraining,Backward}Ex in
 * CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, the fused ReLU as its activation),
 * the kernels PyTorch runs for f16 channels-last batch norm (and we for bf16). On one H200,
 * resnet18 at batch 2048: PyTorch's f16 batch norm took 5.7 ms per step with
 * them and 11.8 ms in bf16 with its own kernels (bench notes v0.11).
 *
 * Where they apply (else batchnorm2d_cuda.cu's kernels run): training, 4-d
 * f16 or bf16 input and output (one dtype), f32 compute, f32 parameters and running stats,
 * channels a multiple of 8, fewer than 2^31 elements and at most 880 801 samples (PyTorch's
 * limits for them), eps >= CUDNN_BN_MIN_EPSILON, no synchronized BatchNorm, not under
 * MIXPREC_DETERMINISTIC=1, MIXPREC_CUDNN_BN is not 0, and (unless it is 1) they
 * timed faster than ours for the layer (batchnorm2d_pick.h). cuDNN 9 runs them in bf16 too
 * on the H200: resnet18 b512 amp-bf16 68.7k -> 84.5k images/s, level with f16 (bench
 * notes v0.18); a shape cuDNN refuses at prepare() stays on our kernels.
 *
 * Same contract as our kernels: saved holds the batch mean and 1/std (f32,
 * C each) where our backward reads them, then cuDNN's reserve space (where
 * our forward keeps its scale and shift: a backward after cuDNN's forward
 * reads the ReLU's mask from the output, never recomputes it); the
 * running variance moves towards the unbiased batch variance; the ReLU lets
 * NaN through (CUDNN_PROPAGATE_NAN). With a residual add fused in
 * (cfg->add_after, graph/plan_fuse.h) and the ReLU after it, the ops are
 * CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION (cuDNN has no add without the
 * activation: that fusion runs on our kernels): z = the f16 residual forward, dz
 * its gradient backward (written, so a call that must add to it, or whose
 * residual is not f16, runs on our kernels). */
#ifndef MP_CUDA_BATCHNORM2D_CUDNN_H
#define MP_CUDA_BATCHNORM2D_CUDNN_H

#include "cuda/cuda_op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_bn_cudnn mp_bn_cudnn;

/* *out = NULL (and MP_OK) where cuDNN's kernels do not apply; else their
 * state, with *workspace_bytes and *saved_bytes raised to what they need. */
mp_status mp_bn_cudnn_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                              const mp_cuda_node_cfg *cfg, bool relu, mp_bn_cudnn **out, size_t *workspace_bytes,
                              size_t *saved_bytes);
void mp_bn_cudnn_release(mp_bn_cudnn *st);

/* Whether this call's tensors are the ones prepare() described (training,
 * f16 or bf16 activations of prepare()'s dtype, f32 parameters); when not,
 * our kernels run it. */
bool mp_bn_cudnn_fits(const mp_bn_cudnn *st, const mp_op_call *c, bool backward);

/* Whether backward can add its dx into a gradient another consumer of x
 * already wrote (mp_op_call.d_in_add bit 0: cuDNN's betaDataDiff = 1, one
 * rounding of the sum): plain batch norm and BN + ReLU, not the fused
 * residual add (whose calls may need our kernels), and not under
 * MIXPREC_CUDNN_ADD_DX=0. */
bool mp_bn_cudnn_adds_dx(const mp_bn_cudnn *st);

mp_status mp_bn_cudnn_forward(mp_cuda_ctx *ctx, const mp_bn_cudnn *st, const mp_op_call *c);
mp_status mp_bn_cudnn_backward(mp_cuda_ctx *ctx, const mp_bn_cudnn *st, const mp_op_call *c);

#ifdef __cplusplus
}
#endif
#endif
