/* batchnorm2d_pick.h — whose kernels run a batch norm's training passes
 * where cuDNN's NHWC kernels apply (batchnorm2d_cudnn.h): cuDNN's or ours
 * (batchnorm2d_fast.h). Each wins somewhere: cuDNN's persistent kernels do a
 * pass in one launch and lead on small activations, ours move bytes faster
 * and lead on large ones. So, as for the convolutions' algorithms, the
 * choice is timed once per (GPU model, shape, dtype, fusion) and process:
 * forward + backward on scratch tensors of the node's shapes, captured in a
 * CUDA graph as the training step runs them (launch costs as there), the
 * median of three replays of each. As with the convolutions, the choice
 * (and so the last bits of the results: the two round differently) may
 * differ between runs and processes; MIXPREC_CUDNN_BN=1 takes cuDNN's and
 * =0 ours without timing, and MIXPREC_DETERMINISTIC=1 ours (cuDNN's are off
 * there). CUDA only. */
#ifndef MP_CUDA_BATCHNORM2D_PICK_H
#define MP_CUDA_BATCHNORM2D_PICK_H

#include "cuda/cuda_op.h"

/* A batch norm pass (batchnorm2d_cuda.cu's forward or backward). */
typedef mp_status (*mp_bn_pass)(mp_cuda_ctx *ctx, const mp_op_call *c);

typedef struct {
    mp_bn_pass forward, backward;
    void *ours, *cudnn;            /* op states: one that runs our kernels, one cuDNN's */
    size_t workspace, saved;       /* bytes the passes need (prepare's) */
} mp_bn_candidates;

/* True when cuDNN's kernels ran the node's training forward + backward
 * (ReLU, or residual add + ReLU, fused as cfg says) faster than ours, or
 * when the two could not be timed (no memory for the scratch, a failed
 * capture: then cuDNN's, the choice before timing existed; the error is
 * cleared). Prints both times under MIXPREC_CUDNN_DEBUG=1. */
bool mp_bn_pick_cudnn(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                      const mp_bn_candidates *cand);

#endif
