/* cuda_op.h — the contract of an op on the GPU. Each op kind has a CUDA
 * implementation (one file pair per op under src/cuda, e.g. relu in
 * activation_cuda.cu) behind this vtable; shape rules are NOT repeated: the
 * CPU vtable's infer() (ops/op.h) already filled mp_op_info.
 *
 * Tensors (mp_op_call, reused from ops/op.h) hold DEVICE pointers:
 *  - 4-D activations and their gradients are channels-last (NHWC) in memory;
 *    mp_tensor.shape stays the logical (N, C, H, W). 2-D (N, F) as on the CPU.
 *  - activations are stored in the node's storage dtype (f32, f16 or bf16);
 *    inputs may be stored in a different dtype than the output when the
 *    policy says so (e.g. BN computing f32 over bf16), see call->in[k].dtype.
 *  - parameters (weights, biases, BN affine and running stats) and their
 *    gradients are f32 master copies; for nodes computing f16/bf16 the
 *    executor passes the weight's low-precision cast (refreshed once per step)
 *    in call->param[k] with that dtype. Parameter gradients are f32, except
 *    a conv/linear weight's under the plan's low_grads (cfg.weight_grad; with
 *    an fp32 master only a conv2d filter's): then in the compute dtype,
 *    call->d_param[0].dtype. An f32 conv weight
 *    gradient is rounded to the compute dtype on the way (cuDNN's fast
 *    kernels write that), except under cfg.weight_grad_unrounded; linear's
 *    cuBLASLt writes f32 sums. A plan may keep a conv2d filter, its cast
 *    and its gradient in KRSC order instead (call->param_krsc, set by the
 *    executor only for conv2d: cuda_plan.c's choose_krsc).
 *  - arithmetic: f16/bf16 inputs on tensor cores with f32 accumulation (the
 *    CPU reference's contract), reductions and statistics in f32, results
 *    rounded once to the storage dtype.
 *  - backward OVERWRITES every gradient given (data non-NULL), like the CPU,
 *    except the inputs marked in call->d_in_add (adds_input_grad below).
 *  - saved: info->saved_bytes of device memory kept from forward to backward
 *    (on the GPU ops may ask for more in prepare: *saved_bytes);
 *    workspace: the arena's shared workspace, *workspace_bytes from prepare.
 *  - no host synchronization and no allocation in forward/backward: they are
 *    captured into CUDA graphs.
 *
 * Second derivatives (forward_tangent / backward_tangent; the tangent fields
 * of mp_op_call and why forward-over-reverse: ops/op.h, ops/tangent.h). Same
 * semantics as the CPU's, on device pointers, with these dtype rules:
 *  - an activation's tangent (t_in, t_out, t_d_out, t_d_in) has the layout
 *    of the tensor it belongs to (NHWC for 4-D) and, as the executor
 *    should give it, its dtype; the kernels read and write any of f32, f16
 *    and bf16 (they convert), and refuse any other dtype with an error
 *    naming the op, the node and the tensor;
 *  - parameters' tangents t_param are f32 like the masters (also for nodes
 *    computing f16/bf16: the op casts t_param to its compute dtype where a
 *    library call needs it, as it receives param already cast); their
 *    gradients' tangents t_d_param are f32, except that a conv/linear
 *    weight's may be in the dtype its d_param has under the plan's
 *    low_grads (cfg.weight_grad);
 *  - arithmetic in f32 (per-channel and loss sums in double), each result
 *    rounded to its tensor's dtype. A tangent that is the sum of two library
 *    calls (conv/linear: K(t_x, W) + K(x, t_W)) rounds each call's result to
 *    the compute dtype, as forward does, then the sum once to the tangent's
 *    dtype: two roundings in f16/bf16, none in f32.
 *  - NULL tangent data is a zero direction (inputs) or not wanted (outputs);
 *    outputs are OVERWRITTEN. Called only after forward and backward ran on
 *    the same call (training; eval for the ops whose forward_tangent needs no
 *    backward pass). No allocation and no host synchronization (captured
 *    into CUDA graphs); scratch is the call's workspace, which prepare()
 *    raises for the tangents when cfg->tangents is set.
 *  - a NULL slot: the op has no GPU tangent (the executor names it); fused
 *    modes an op cannot differentiate return MP_ERR_UNSUPPORTED naming the
 *    op and the node (batchnorm2d with add_after / a residual).
 */
#ifndef MP_CUDA_CUDA_OP_H
#define MP_CUDA_CUDA_OP_H

#include "cuda/cuda_ctx.h"
#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    mp_dtype storage;            /* the node's output dtype */
    mp_dtype in_dtype[MP_MAX_INPUTS];
    mp_dtype compute;            /* F32, F16, BF16; F32 + tf32 below */
    bool tf32;                   /* f32 storage, TF32 tensor cores allowed (conv/linear) */
    bool training;
    int batch;
    bool relu_after;             /* batchnorm2d: applies the ReLU that reads it (graph/plan_fuse.h) */
    bool add_after;              /* batchnorm2d: the residual add of resid_dtype reading it (before that ReLU
                                    where relu_after) */
    mp_dtype resid_dtype;
    bool feeds_loader;           /* batchnorm2d: the depthwise conv2d or average pool reading its fused ReLU
                                    applies both as it loads (mp_op_call.skip_out) on training steps: the batch
                                    norm runs on our kernels, whose backward recomputes the ReLU's mask from x
                                    (and reads the pool's gradient: mp_op_call.pool_dy) */
    bool bn_relu_input;          /* conv2d: reads such a batch norm's input (mp_op_call.bn_x) where its
                                    depthwise kernels take it (mp_conv2d_reads_bn_input); avgpool2d: reads it */
    mp_dtype weight_grad;        /* conv2d/linear: the weight gradient's dtype (F32, or the compute dtype) */
    bool weight_grad_unrounded;  /* conv: an F32 weight_grad straight from f32 sums, never rounded to the
                                    compute dtype (mp_plan_opts.f32_weight_grads; see conv_cudnn.h) */
    bool tangents;               /* the plan calls forward_tangent / backward_tangent: prepare() raises
                                    *workspace_bytes for their scratch too */
    bool input_grad;             /* a backward may ask for input 0's gradient: it lies on a path from a
                                    trainable parameter to a loss, or tangents / input gradients run */
} mp_cuda_node_cfg;

typedef struct {
    const char *name;
    /* Build descriptors / pick algorithms once for these shapes and dtypes.
     * May raise *workspace_bytes (shared scratch) and *saved_bytes. */
    mp_status (*prepare)(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                         const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                         size_t *saved_bytes);
    void (*release)(void *state);
    mp_status (*forward)(mp_cuda_ctx *ctx, const mp_op_call *c);
    mp_status (*backward)(mp_cuda_ctx *ctx, const mp_op_call *c);
    /* Second derivatives (see above); NULL: none on the GPU yet. */
    mp_status (*forward_tangent)(mp_cuda_ctx *ctx, const mp_op_call *c);
    mp_status (*backward_tangent)(mp_cuda_ctx *ctx, const mp_op_call *c);
    /* Whether backward can add its gradient for input k into what d_in[k]
     * holds (mp_op_call.d_in_add), as prepared in state; NULL: never. The
     * executor then skips the scratch copy and the kernel that sums it. */
    bool (*adds_input_grad)(const void *state, int k);
} mp_cuda_op_vtable;

/* A training batchnorm2d's per-channel coefficients of its last forward, in
 * its saved bytes (C channels): bn(x) = (x - *mu) * *scale + *shift. */
void mp_cuda_bn_saved_coef(const void *saved, int C, const float **mu, const float **scale, const float **shift);

/* NULL for kinds with no GPU implementation (input/labels/targets need none). */
const mp_cuda_op_vtable *mp_cuda_op_lookup(mp_op_kind k);

extern const mp_cuda_op_vtable mp_cuda_conv2d_vt, mp_cuda_conv_transpose2d_vt, mp_cuda_linear_vt;
extern const mp_cuda_op_vtable mp_cuda_batchnorm2d_vt, mp_cuda_relu_vt, mp_cuda_leaky_relu_vt, mp_cuda_tanh_vt,
    mp_cuda_sigmoid_vt, mp_cuda_maxpool2d_vt, mp_cuda_avgpool2d_vt, mp_cuda_global_avgpool_vt, mp_cuda_add_vt,
    mp_cuda_mul_vt, mp_cuda_concat_vt, mp_cuda_reshape_vt, mp_cuda_dropout_vt, mp_cuda_softmax_ce_vt,
    mp_cuda_bce_logits_vt;

/* Layout/dtype conversion kernels shared by the executor and tests:
 * host-order NCHW f32 <-> device NHWC in any float dtype (2-D: plain). */
mp_status mp_cuda_nchw_f32_to_device(mp_cuda_ctx *ctx, const float *dev_nchw_f32, const mp_tensor *dst);
mp_status mp_cuda_device_to_nchw_f32(mp_cuda_ctx *ctx, const mp_tensor *src, float *dev_nchw_f32);

#ifdef __cplusplus
}
#endif
#endif
