/* batchnorm2d_pick.h — whose kernels run a batch norm's training passes:
 * cuDNN's NHWC kernels where they apply (batchnorm2d_cudnn.h), our fast
 * kernels three per pass (batchnorm2d_fast.h) or as one cooperative kernel
 * per pass (batchnorm2d_persist.h). Each wins somewhere: cuDNN's and our
 * one-kernel passes spend less on launches and barriers at small
 * activations, our three-kernel passes move bytes fastest at large ones.
 * So, as for the convolutions' algorithms, the choice is timed once per
 * (GPU model, shape, dtype, fusion, candidates) and process: forward +
 * backward on scratch tensors of the node's shapes, captured in a CUDA graph
 * as the training step runs them (launch costs as there), the median of
 * three replays of each. As with the convolutions, the choice (and so the
 * last bits of the results: each rounds and sums differently) may differ
 * between runs and processes. MIXPREC_CUDNN_BN=1 takes cuDNN's and =0 ours,
 * MIXPREC_BN_PERSIST=0 our three-kernel passes and =1 our one-kernel ones
 * (what is left is timed), and MIXPREC_DETERMINISTIC=1 our three-kernel
 * passes (one-kernel under MIXPREC_BN_PERSIST=1), without timing.
 * CUDA only. */
#ifndef MP_CUDA_BATCHNORM2D_PICK_H
#define MP_CUDA_BATCHNORM2D_PICK_H

#include "cuda/cuda_op.h"

/* A batch norm pass (batchnorm2d_cuda.cu's forward or backward). */
typedef mp_status (*mp_bn_pass)(mp_cuda_ctx *ctx, const mp_op_call *c);

typedef struct {
    mp_bn_pass forward, backward;
    void *three, *one, *cudnn;     /* op states that run our three-kernel passes, our one-kernel passes and
                                      cuDNN's; NULL: not a candidate (at least two are) */
    size_t workspace, saved;       /* bytes the passes need (prepare's) */
} mp_bn_candidates;

typedef enum { MP_BN_RUN_THREE, MP_BN_RUN_ONE, MP_BN_RUN_CUDNN } mp_bn_run;

typedef struct {
    mp_bn_run run; /* the fastest candidate */
    bool ours_one; /* of our passes offered, the one-kernel ones were faster (or the only ones): what runs the
                      calls cuDNN's kernels do not take */
} mp_bn_choice;

/* The candidates' training forward + backward (ReLU, or residual add +
 * ReLU, fused as cfg says) timed; the fastest of those that could be timed.
 * Where none could (no memory for the scratch, failed captures): cuDNN's if
 * it is a candidate (the choice before timing existed), else our
 * three-kernel passes if they are one, else our one-kernel passes. Errors
 * are cleared; the choice is kept for the process where at least two
 * candidates were timed. Prints the times under MIXPREC_CUDNN_DEBUG=1. */
mp_bn_choice mp_bn_pick(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                        const mp_bn_candidates *cand);

#endif
