/** @file mixprec/plan.h
 * Compiled plans: a graph compiled for one batch size, mode (training or
 * inference) and device, with every activation, gradient and workspace in an
 * arena planned before the first step. Most programs use a trainer
 * (mixprec/train.h), which makes its plan; plans are the level below it:
 * forward, backward, reading outputs, overflow provenance. */
#ifndef MIXPREC_PLAN_H
#define MIXPREC_PLAN_H

#include "mixprec/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A compiled plan (opaque). */
typedef struct mp_plan mp_plan;
/** A data-parallel communicator (mixprec/dist.h). */
typedef struct mp_dist mp_dist;

/** Loss nodes one plan can start backward from. */
#define MP_MAX_LOSSES 8

/** Whether the CPU runs low-precision nodes natively (oneDNN's bf16 kernels). */
typedef enum {
    MP_NATIVE_AUTO = 0, /**< native where the CPU has bf16 kernels (MIXPREC_NATIVE_BF16 may say otherwise) */
    MP_NATIVE_OFF,      /**< always emulate: f32 kernels on rounded inputs */
    MP_NATIVE_ON,       /**< native wherever a bf16 kernel exists */
} mp_native_mode;

/** Plan options. */
typedef struct {
    int batch;          /**< samples per step */
    bool training;      /**< keep activations for backward, batch statistics */
    mp_node loss;       /**< the node whose gradient seeds backward (training) */
    mp_node losses[MP_MAX_LOSSES]; /**< several losses (a GAN's): backward from any of them */
    int n_losses;       /**< 0: just `loss` */
    bool reference;     /**< the plain-C reference kernels instead of oneDNN */
    mp_native_mode native_bf16; /**< CPU: native bf16 kernels or emulation */
    uint64_t seed;      /**< dropout masks */
    bool profile;       /**< time every node's forward and backward (mp_plan_print_profile) */
    mp_device device;   /**< where the plan runs (default: the CPU) */
    /** Data parallel on GPUs: with sync_bn, training BatchNorm normalizes with
     * the global batch's statistics (every rank of dist), else with this rank's. */
    bool sync_bn;
    mp_dist *dist;      /**< this rank's communicator, for sync_bn */
    /** GPU training plans with one backward pass per forward (one loss, no
     * repeat_backward): parameter gradients live in the
     * activation arena from their node's backward to the step's end (less
     * memory, as PyTorch's zero_grad(set_to_none=True)); every backward writes
     * them afresh, so no accumulation over several backward passes. */
    bool grads_in_arena;
    /** With grads_in_arena under fp16/bf16 (no master weights): a conv/linear
     * weight's gradient is kept in the weight's dtype, as a `.half()` model's;
     * with fp32 master weights, a conv2d filter used by one node computing in
     * f16/bf16 keeps its gradient in that dtype (the library writes it so;
     * not under f32_weight_grads or second_order). Nothing may rescale such
     * a gradient after backward (no loss scaling, clipping, accumulation or
     * data parallelism). */
    bool low_grads;
    /** Weights with an fp32 master: convolution and linear weight gradients are
     * f32 sums, never rounded to f16/bf16 (slower; data-parallel amp reaches
     * one GPU's weights within fp32 tolerance). */
    bool f32_weight_grads;
    /** Keep each batchnorm2d and the ReLU after it apart instead of fusing
     * them into one kernel (for comparisons; MIXPREC_NO_FUSION=1 does it for
     * every plan). */
    bool no_fusion;
    /** Plans fuse each batchnorm2d -> residual add -> ReLU (a ResNet
     * block's tail), and each batchnorm2d -> residual add with no ReLU after
     * it (a MobileNetV2 block's), into one pass each way (CPU plans where
     * the three run natively on the channels-last vector kernels, in f32 or
     * bf16 storage); true keeps them
     * apart (for comparisons; MIXPREC_FUSE_BN_ADD_RELU=0 does it for every
     * plan, and no_fusion implies it). */
    bool no_bn_add_relu_fusion;
    /** GPU training plans: fuse a batchnorm2d + ReLU whose output only a
     * depthwise 3x3 convolution reads (MobileNet's expansion into its
     * filtering layer) into that convolution: its forward and weight
     * gradient apply the batch norm as they load its input, and the batch
     * norm's output is not written (but when an overflow is traced or
     * numerics are collected). Off by default: mobilenetv2 amp-bf16 b512
     * measured 13% slower with it (bench/NOTES.md v0.29).
     * MIXPREC_FUSE_BN_DW=1 turns it on for every plan; no_fusion wins. */
    bool bn_dw_fusion;
    /** Training plans fuse a batchnorm2d + ReLU whose output only a k x k
     * average pool of stride k and no padding reads (cnn10's stage ends)
     * into that pool (on a CPU: 2x2 pools, where both run natively on the
     * vector kernels over channels-last f32 or bf16 activations): the
     * pool applies the batch norm and ReLU as it loads the batch norm's
     * input, the batch norm's backward reads the pool's output gradient
     * directly, and neither the batch norm's output nor the pool's input
     * gradient is written (but when an overflow is traced or numerics are
     * collected). The same values, bit for bit, as the two apart on our
     * batch-norm kernels (on a GPU these batch norms run on ours, not
     * cuDNN's; none is fused under MIXPREC_CUDNN_BN=1). Reading that ReLU's
     * output with mp_plan_read after a training forward is then an error.
     * true keeps them apart (MIXPREC_FUSE_BN_POOL=0 does it for every plan;
     * no_fusion implies it). */
    bool no_bn_pool_fusion;
    /** CPU training plans let a channels-last batchnorm2d's backward write
     * its input gradient over its output gradient where nothing reads the
     * latter afterwards (the batch norm's input has no other consumer; no
     * residual add or pool fused in; not with second_order, input_grad or
     * repeat_backward): the dx pass then writes into the lines it has just
     * read, with no read of fresh memory before each write, and the arena
     * needs one gradient buffer fewer. The same values, bit for bit. true
     * keeps dx in its own buffer (for comparisons; MIXPREC_BN_DX_OVER_DY=0
     * does it for every plan). */
    bool no_bn_dx_over_dy;
    /** Training plans let a residual add hand its output gradient to its
     * inputs without copying it: their gradients are that memory, where
     * nothing sharing it is changed while another still needs its value (a
     * pre-activation block's add(conv(a), x): both; else one input, the
     * other copied); not with second_order, input_grad or repeat_backward,
     * nor where a CPU add runs on staged f32 copies. The same values, bit
     * for bit; two full-size copies fewer per add and step, and the arena
     * needs fewer gradient buffers. true keeps the copies (for comparisons;
     * MIXPREC_ADD_GRAD_ALIAS=0 does it for every plan). */
    bool no_add_grad_alias;
    /** CPU plans store a 4-D activation channels-last (NHWC) where every op
     * writing and reading it works on that layout (oneDNN's convolutions
     * then need no reorders around them); true keeps every activation NCHW
     * (for comparisons; MIXPREC_CPU_CHANNELS_LAST=0 does it for every plan).
     * Arrays in and out of the plan are NCHW either way. */
    bool channels_first;
    /** Second derivatives (mixprec/penalty.h), on the CPU or a GPU: f32
     * tangent buffers for every node and trainable parameter (device memory
     * on a GPU, whose host arrays in and out keep the graph's layout);
     * every activation, saved tensor and gradient keeps its own memory for
     * the whole step (no arena reuse: a second-order arena is the sum of its
     * buffers, often 2-4x a training plan's); no op fusion; on the CPU
     * low-precision nodes run on the staged f32 emulation (no native bf16
     * kernels). */
    bool second_order;
    /** With second_order: backward may also start from node input_grad_of
     * (the sum of its outputs; a logits node or a loss) and stop at node
     * input_grad_wrt (an input, or any node before it), whose output
     * gradient stays readable (mp_plan_backward_input_grad). */
    bool input_grad;
    mp_node input_grad_of;  /**< see input_grad */
    mp_node input_grad_wrt; /**< see input_grad */
    /** Training: several backward passes may run from one loss after one
     * forward (a trainer's optimizer groups sharing that loss): what any
     * backward reads of the forward (outputs, saved tensors) stays for all
     * of them, as a plan with several losses keeps it for one pass per loss;
     * more memory, and parameter gradients outside the arena (no
     * grads_in_arena, no low_grads). Without it a one-loss plan's backward
     * reuses that memory as it goes, and a second backward before the next
     * forward is refused. */
    bool repeat_backward;
} mp_plan_opts;

/** Compile g (its policy applied, parameters initialized) into a plan. */
MP_API mp_status mp_plan_create(mp_graph *g, mp_plan_opts o, mp_plan **out);
/** Frees the plan (NULL is fine); the graph stays. */
MP_API void mp_plan_destroy(mp_plan *p);
/** Copy a batch into an input or target node: data (batch, C, H, W) f32; n
 * must be the node's batch element count. */
MP_API mp_status mp_plan_set_input(mp_plan *p, mp_node input, const float *data, size_t n);
/** Copy batch int32 labels into a label node; each must be a class index the
 * loss reading them accepts. */
MP_API mp_status mp_plan_set_labels(mp_plan *p, mp_node node, const int32_t *labels, size_t n);
/** Run the forward pass. Every input, labels and targets node that a node
 * reads must have had a batch (mp_plan_set_input, mp_plan_set_labels; it
 * stays for later passes until replaced): else MP_ERR_INVALID_ARG naming it. */
MP_API mp_status mp_plan_forward(mp_plan *p);
/** Backward from opts.loss (the first of opts.losses) with d(loss) = seed
 * (finite), after a forward. A plan with one loss runs one backward per
 * forward unless made with repeat_backward or second_order; another is
 * MP_ERR_INVALID_ARG (its backward reused the memory a second one would
 * read), as is a backward without a completed forward, or after an input,
 * labels or targets node was given a new batch since the forward (the
 * gradients would mix two batches; also refused by the second-order and
 * tangent passes), or while a CPU trainer of the graph is in the middle of
 * an accumulated step (its micro-batches' sum lives in the graph's gradient
 * arrays, which this backward would overwrite). The backward computes with the parameters' values as
 * they are when it runs (a trainer's earlier optimizer group may have
 * stepped some); a batch norm's fused ReLU masks where its forward's output
 * was 0 whatever changed since. */
MP_API mp_status mp_plan_backward(mp_plan *p, float seed);
/** Backward from any of the plan's losses (the rules of mp_plan_backward). */
MP_API mp_status mp_plan_backward_from(mp_plan *p, mp_node loss, float seed);
/** Read a node's output as f32 (converted; labels as their values); n is
 * its element count. The plan's memory holds what the step still needs:
 * outputs (mp_graph_mark_output), and inputs, labels and targets, which read
 * at any time once given a batch (before: MP_ERR_INVALID_ARG); any other node reads
 * after mp_plan_forward only if a later node or the backward still reads it,
 * and not after a backward; a batch norm (or add) the plan runs fused with
 * the ReLU after it is not stored apart unless marked an output, and on
 * training plans a batch norm + ReLU fused into the depthwise convolution
 * (GPU) or average pool reading it (bn_dw_fusion, no_bn_pool_fusion) is not
 * stored at all. Elsewhere, or before a forward has completed:
 * MP_ERR_INVALID_ARG naming the node. After
 * mp_plan_find_nonfinite_forward everything reads as after a forward (a
 * batch norm fused into a convolution or pool still does not). */
MP_API mp_status mp_plan_read(const mp_plan *p, mp_node node, float *dst, size_t n);
/** With opts.profile: time per op kind (forward, backward, share) and how
 * its nodes ran (f32, native bf16, staged emulation). */
MP_API void mp_plan_print_profile(const mp_plan *p, FILE *out);
/** With opts.profile: the timed nodes one by one, slowest first (forward and
 * backward together), each with its op, output shape per sample, forward and
 * backward ms and share of all the nodes' time; top > 0 prints that many. */
MP_API void mp_plan_print_profile_nodes(const mp_plan *p, FILE *out, int top);
/** Where the plan's memory goes: the arena at its peak by kind (activations,
 * saved tensors, gradients, workspaces) and on a GPU the parameters' copies
 * (fp32 masters, f16/bf16 casts, gradients outside the arena, the conv
 * filters' KRSC copies). */
MP_API void mp_plan_print_memory(const mp_plan *p, FILE *out);
/** GPU plans keep parameters in device memory: copy them to the graph's host
 * copies (to_host) or from them. No-op on the CPU. */
MP_API mp_status mp_plan_sync_params(mp_plan *p, bool to_host);
/** Element count of a node's output in this plan (0 for a bad node). */
MP_API size_t mp_plan_numel(const mp_plan *p, mp_node node);
/** Forward passes run so far (dropout masks derive from it). */
MP_API uint64_t mp_plan_step(const mp_plan *p);
/** Set the forward count, so a replayed or resumed step sees the same masks. */
MP_API void mp_plan_set_step(mp_plan *p, uint64_t step);
/** Bytes of the activation arena. */
MP_API size_t mp_plan_arena_bytes(const mp_plan *p);
/** Low-precision nodes running natively on bf16 tensors (oneDNN's convolutions
 * where the CPU has bf16 instructions; mixprec's own elementwise, batch norm and
 * pooling kernels) and those emulated in f32 with rounding; either pointer may be
 * NULL. */
MP_API void mp_plan_precision_counts(const mp_plan *p, int *native, int *emulated);
/** Activations a CPU plan stores channels-last (NHWC; see mp_plan_opts.channels_first), of the
 * 4-D activations it has; 0 of them on a GPU plan (whose device tensors are all NHWC) or with NULL. */
MP_API int mp_plan_channels_last(const mp_plan *p, int *activations_4d);

/** Overflow provenance: where a NaN/inf first appeared. */
typedef struct {
    bool found;        /**< a NaN/inf was found */
    bool backward;     /**< false: a forward output; true: a gradient */
    mp_node node;      /**< the op that produced it */
    char what[48];     /**< "output", "grad input 0", "grad weight", ... */
} mp_nonfinite_site;
/** After a forward: the first node (in forward order) whose output holds a
 * NaN/inf, found by replaying that forward with checks (same batch and dropout
 * masks; BN running statistics are updated again). */
MP_API mp_status mp_plan_find_nonfinite_forward(mp_plan *p, mp_nonfinite_site *site);
/** Backward that checks every gradient as it is written and stops at the
 * first non-finite one. */
MP_API mp_status mp_plan_backward_checked(mp_plan *p, float seed, mp_nonfinite_site *site);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_PLAN_H */
