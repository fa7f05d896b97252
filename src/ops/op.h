/* op.h — the op table. Every op is a hand-written forward/backward pair behind
 * this interface; the graph executor, the gradient checker and (later) the
 * CUDA backend all drive ops through it.
 *
 * Contract for an op:
 *  - infer() validates the attributes against the input shapes (already filled
 *    in info->in[]), sets the output shape, the parameter specs and the bytes it
 *    needs kept from forward to backward (saved) and as scratch (workspace).
 *    Errors name the op kind, the node name, the shapes and the attribute.
 *  - prepare() (optional) builds library primitives (oneDNN) for these exact
 *    shapes once, before any step runs; it may raise info->workspace_bytes.
 *  - forward()/backward() never allocate. backward() OVERWRITES every
 *    gradient it is given (d_in[i].data / d_param[i].data non-NULL); the
 *    executor accumulates when a tensor has several consumers.
 *  - Every tensor of one call has the same real dtype (F32 or F64), except
 *    labels (I32). F64 is used by the gradient checker with impl = REF.
 */
#ifndef MP_OPS_OP_H
#define MP_OPS_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" { /* CUDA sources (C++) include this header */
#endif

#define MP_MAX_INPUTS 8
#define MP_MAX_PARAMS 4

typedef enum {
    MP_OP_INPUT = 0,   /* image/feature input (no compute) */
    MP_OP_LABELS,      /* int32 class labels (no compute) */
    MP_OP_TARGETS,     /* dense float targets (no compute) */
    MP_OP_CONV2D,
    MP_OP_CONV_TRANSPOSE2D,
    MP_OP_BATCHNORM2D,
    MP_OP_RELU,
    MP_OP_LEAKY_RELU,
    MP_OP_TANH,
    MP_OP_SIGMOID,
    MP_OP_MAXPOOL2D,
    MP_OP_AVGPOOL2D,
    MP_OP_GLOBAL_AVGPOOL,
    MP_OP_LINEAR,
    MP_OP_ADD,
    MP_OP_MUL,
    MP_OP_CONCAT,
    MP_OP_RESHAPE,
    MP_OP_DROPOUT,
    MP_OP_SOFTMAX_CE,
    MP_OP_BCE_LOGITS,
    MP_OP_COUNT
} mp_op_kind;

/* Attributes; which member is valid depends on the kind. Zero fields already
 * replaced by their defaults (stride 1, groups 1, ...) at graph build time. */
typedef union {
    mp_conv_opts conv;        /* CONV2D, CONV_TRANSPOSE2D */
    mp_batchnorm_opts bn;     /* BATCHNORM2D */
    mp_pool_opts pool;        /* MAXPOOL2D, AVGPOOL2D */
    mp_linear_opts linear;    /* LINEAR */
    float slope;              /* LEAKY_RELU */
    float p;                  /* DROPOUT: probability of zeroing */
    mp_shape reshape;         /* RESHAPE: per-sample shape, dims[0] unused */
} mp_op_attr;

typedef struct {
    mp_op_kind kind;
    const char *name; /* node name, for messages */
    mp_op_attr attr;
} mp_op_desc;

typedef enum {
    MP_INIT_ZERO = 0,
    MP_INIT_ONE,
    MP_INIT_HE_NORMAL,     /* N(0, 2/fan_in): conv/linear weights feeding ReLUs */
    MP_INIT_UNIFORM_FAN_IN /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): biases */
} mp_param_init;

typedef struct {
    const char *name;  /* "weight", "bias", "running_mean", "running_var" */
    mp_shape shape;
    bool trainable;    /* false: a buffer (BN running stats), no gradient */
    mp_param_init init;
    int fan_in;
} mp_param_spec;

typedef struct {
    int n_in;
    mp_shape in[MP_MAX_INPUTS];   /* filled by the caller */
    mp_dtype in_dtype[MP_MAX_INPUTS];
    mp_shape out;                 /* filled by infer */
    int n_params;
    mp_param_spec params[MP_MAX_PARAMS];
    size_t saved_bytes;     /* forward -> backward (masks, argmax, mean/invstd) */
    size_t workspace_bytes; /* scratch within one forward or backward call */
    /* scratch within one forward_tangent or backward_tangent call: their
     * c->workspace holds workspace_bytes (64-aligned; the op's own kernels,
     * which a tangent may run, use it) followed by tangent_workspace_bytes */
    size_t tangent_workspace_bytes;
    /* Storage layout of the 4-D activations (CPU plans, graph/plan_layout.c):
     * bit k set, input k (and its gradient) is channels-last, (N, H, W, C) in
     * memory; MP_NHWC_OUT, the output (and its gradient). 0 (every op test,
     * every GPU plan's host view): NCHW. Set before prepare(). */
    unsigned nhwc;
} mp_op_info;

#define MP_NHWC_OUT (1u << MP_MAX_INPUTS)

/* REF: the plain-C reference kernels. ONEDNN: oneDNN wherever the op has a
 * path (tests use it to check that path). AUTO (plans): oneDNN where it is
 * an optimized (JIT) kernel for these shapes, else the reference, which beats
 * oneDNN's generic plain-layout kernels (measured: bench/NOTES.md). */
typedef enum { MP_IMPL_REF = 0, MP_IMPL_ONEDNN, MP_IMPL_AUTO } mp_impl;

typedef struct {
    const mp_op_desc *desc;
    const mp_op_info *info;
    void *state;            /* from prepare(), or NULL */
    mp_impl impl;
    bool training;          /* batch statistics, dropout active */
    bool relu_after;        /* batchnorm2d: also applies the ReLU that reads it
                               (graph/plan_fuse.h; on a GPU only where prepared
                               so too: false leaves it out, as the forward's
                               overflow replay does, graph/exec.c); backward
                               masks d_out where out is 0 (the CPU's
                               channels-last kernels compute that from the
                               input unless out_staged) */
    uint64_t seed;          /* dropout: differs per node and per step */
    /* batchnorm2d with the residual add after it fused in, and that add's
     * ReLU where relu_after (graph/plan_fuse.h): out =
     * relu(bn(x) + resid) (or bn(x) + resid), the bn value rounded to out's
     * dtype before the add as the unfused ops round it; backward also writes d_resid, the add's gradient to resid
     * (added to what it holds when d_resid_add). resid.data NULL: none. */
    mp_tensor resid;
    mp_tensor d_resid;      /* data NULL = not needed */
    bool d_resid_add;
    /* A batch norm + ReLU whose output only a depthwise conv2d reads, fused
     * into that conv (GPU training plans, graph/plan_fuse.h). The conv2d:
     * bn_x is the batch norm's input and bn_mu, bn_scale, bn_shift its
     * per-channel coefficients of this step (the batch norm's saved), which
     * the conv's forward and backward-filter apply as they load bn_x
     * instead of reading in[0]; bn_x.data NULL: none. The batch norm:
     * skip_out, its output is not stored in this call (its backward
     * recomputes the ReLU's mask from x). */
    mp_tensor bn_x;
    const float *bn_mu, *bn_scale, *bn_shift;
    bool skip_out;
    /* The same for a k x k average pool of stride k and no padding that is
     * such a ReLU's only reader (training plans, graph/plan_fuse.h; on a CPU
     * 2x2 pools over channels-last f32 or bf16): the avgpool2d reads bn_x
     * as the depthwise conv does, and the batch norm's backward reads
     * pool_dy, the pool's output gradient, spread over each window as the
     * pool's backward (which does not run) would have written it to d_out;
     * pool_dy.data NULL: it reads d_out. */
    mp_tensor pool_dy;
    int pool_k;
    /* GPU plans: bit k set, backward ADDS its gradient for input k into
     * d_in[k] (another consumer's gradient is there) instead of overwriting
     * it; only for inputs the op's mp_cuda_op_vtable.adds_input_grad takes. */
    unsigned d_in_add;
    /* GPU conv2d nodes of a plan: param[0] already permuted to KRSC in the
     * compute dtype, refreshed at the start of every forward pass and after
     * an optimizer group's update that another group's backward follows
     * (cuda/filter_krsc_batch.h); NULL: the op reads param[0] as it is
     * under param_krsc, else permutes it itself. */
    const void *weight_krsc;
    /* On a GPU: param[0] and its gradient d_param[0] are in KRSC order as the
     * plan keeps the conv2d filter (cuda/cuda_plan.c: choose_krsc); the op
     * reads and writes them as they are. */
    bool param_krsc;
    int n_in;
    mp_tensor in[MP_MAX_INPUTS];
    mp_tensor out;
    mp_tensor param[MP_MAX_PARAMS];   /* same order as info->params */
    /* backward only: */
    mp_tensor d_out;                  /* for loss ops: shape (1), the seed */
    mp_tensor d_in[MP_MAX_INPUTS];    /* data NULL = not needed */
    mp_tensor d_param[MP_MAX_PARAMS]; /* data NULL = not needed (or buffer) */
    /* Tangents, for second derivatives (forward-over-reverse: a direction
     * is pushed through the forward and then through the backward, so the
     * parameter gradients' tangents are Hessian-vector products). Same
     * shapes and dtype as the primal tensors they belong to.
     * forward_tangent reads t_in/t_param (data NULL = zero direction) and
     * writes t_out = J_forward * (t_in, t_param).
     * backward_tangent reads the primal call (in, param, out, d_out, saved)
     * plus t_in, t_param, t_out and t_d_out (data NULL = zero) and writes
     * t_d_in / t_d_param (data NULL = not needed), OVERWRITING them: the
     * derivative of backward's outputs along (t_in, t_param, t_d_out). For
     * loss ops d_out is the seed, whose tangent is zero.
     * Why forward-over-reverse, and the helpers the ops share: tangent.h.
     * What the tangent calls read of the primal call is what backward reads
     * (bwd_skips holds for them too; neither writes saved or the running
     * statistics), with two additions: backward_tangent of tanh and sigmoid
     * reads t_out (as backward reads out), and maxpool2d's forward_tangent
     * reads its input when its forward ran oneDNN (saved then holds oneDNN's
     * workspace, not the argmax). Tangents run in f32 or f64 only. */
    mp_tensor t_in[MP_MAX_INPUTS];
    mp_tensor t_param[MP_MAX_PARAMS];
    mp_tensor t_out;
    mp_tensor t_d_out;
    mp_tensor t_d_in[MP_MAX_INPUTS];
    mp_tensor t_d_param[MP_MAX_PARAMS];
    /* staged backward only (graph/exec_stage.c): out holds f32 copies of the
     * node's output, which is stored in a lower precision, so what the op
     * computes again in f32 from its inputs may round to other values than
     * out holds. False in every other call. */
    bool out_staged;
    void *saved;            /* info->saved_bytes, aligned to 64 */
    void *workspace;        /* info->workspace_bytes, aligned to 64 */
} mp_op_call;

/* Which storage layouts of its 4-D activations an op reads and writes on
 * the CPU (graph/plan_layout.h decides a plan's from these). */
typedef enum {
    MP_LAYOUT_NCHW_ONLY = 0, /* NCHW only */
    MP_LAYOUT_EACH,          /* each tensor NCHW or NHWC on its own (oneDNN convolutions, the input) */
    MP_LAYOUT_ALIKE          /* NCHW or NHWC, all its 4-D tensors the same */
} mp_layout_support;

typedef struct {
    const char *name; /* "conv2d", ... */
    mp_status (*infer)(const mp_op_desc *d, mp_op_info *info);
    /* Optional. state is released with release(). */
    mp_status (*prepare)(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, mp_impl impl,
                         bool training, void **state);
    void (*release)(void *state);
    mp_status (*forward)(const mp_op_call *c);
    mp_status (*backward)(const mp_op_call *c);
    /* What backward does NOT read (MP_BWD_SKIPS_*), on every backend: the
     * planner frees those activations after forward. 0 (the default) keeps
     * the inputs and the output for backward. */
    unsigned bwd_skips;
    /* Second derivatives (see the tangent fields of mp_op_call); NULL: the op
     * has none yet, and a plan that needs them names the op in its error.
     * Called only after forward and backward ran on the same call. */
    mp_status (*forward_tangent)(const mp_op_call *c);
    mp_status (*backward_tangent)(const mp_op_call *c);
    /* Optional: the layouts this node, prepared (state from prepare(), with
     * impl MP_IMPL_AUTO), can run on; NULL: MP_LAYOUT_NCHW_ONLY. The op's
     * forward and backward then take info->nhwc as the planner sets it. */
    mp_layout_support (*layouts)(const mp_op_desc *d, const mp_op_info *info, const void *state);
} mp_op_vtable;

#define MP_BWD_SKIPS_INPUTS 1u /* backward reads no input (relu/tanh/sigmoid read their output) */
#define MP_BWD_SKIPS_OUTPUT 2u /* backward reads no output (conv/linear/BN read their input) */
#define MP_BWD_SKIPS_BOTH (MP_BWD_SKIPS_INPUTS | MP_BWD_SKIPS_OUTPUT) /* shapes, d_out and saved only */

const mp_op_vtable *mp_op_lookup(mp_op_kind k);

/* A shape whose NCHW and NHWC layouts are the same bytes: not 4-D, one
 * channel or one pixel per sample. */
static inline bool mp_shape_layout_free(const mp_shape *s) {
    return s->ndim != 4 || s->dims[1] == 1 || (int64_t)s->dims[2] * s->dims[3] == 1;
}

/* Input, labels and targets nodes: no compute, filled with a batch by
 * mp_plan_set_input / mp_plan_set_labels. */
static inline bool mp_op_is_source(mp_op_kind k) { return k == MP_OP_INPUT || k == MP_OP_LABELS || k == MP_OP_TARGETS; }

/* Whether input k / the output of a call (or of an op being prepared) is stored channels-last. */
static inline bool mp_info_nhwc_in(const mp_op_info *info, int k) { return (info->nhwc >> k & 1u) != 0; }
static inline bool mp_info_nhwc_out(const mp_op_info *info) { return (info->nhwc & MP_NHWC_OUT) != 0; }

/* The vtables, one per op file. */
extern const mp_op_vtable mp_op_input_vt, mp_op_labels_vt, mp_op_targets_vt;
extern const mp_op_vtable mp_op_conv2d_vt, mp_op_conv_transpose2d_vt, mp_op_batchnorm2d_vt;
extern const mp_op_vtable mp_op_relu_vt, mp_op_leaky_relu_vt, mp_op_tanh_vt, mp_op_sigmoid_vt;
extern const mp_op_vtable mp_op_maxpool2d_vt, mp_op_avgpool2d_vt, mp_op_global_avgpool_vt;
extern const mp_op_vtable mp_op_linear_vt, mp_op_add_vt, mp_op_mul_vt, mp_op_concat_vt, mp_op_reshape_vt;
extern const mp_op_vtable mp_op_dropout_vt, mp_op_softmax_ce_vt, mp_op_bce_logits_vt;

/* Helpers for op files. */
mp_status mp_op_shape_error(const mp_op_desc *d, const mp_op_info *info, const char *what);
/* layouts() of the elementwise ops: either layout, all tensors alike. */
mp_layout_support mp_op_layouts_alike(const mp_op_desc *d, const mp_op_info *info, const void *state);
/* A call whose tensors are channels-last (info->nhwc) reaching kernels that
 * read NCHW only (the planner never plans one: a guard, named). */
mp_status mp_op_layout_error(const mp_op_call *c, const char *kernels);
/* infer() of the same-shape binary ops (add, mul): two inputs of identical
 * shape, the output of that shape; the error names the op, node and shapes. */
mp_status mp_op_infer_same_shape2(const mp_op_desc *d, mp_op_info *info);
/* True when oneDNN is compiled in. */
bool mp_onednn_available(void);

#define MP_ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* Dispatch a templated kernel on the call's real dtype:
 *   MP_REAL_CALL(c->out.dtype, relu_fwd, args...) -> relu_fwd_f32 / relu_fwd_f64 */
#define MP_REAL_CALL(dt, fn, ...) \
    ((dt) == MP_DTYPE_F64 ? fn##_f64(__VA_ARGS__) : fn##_f32(__VA_ARGS__))

#ifdef __cplusplus
}
#endif
#endif
