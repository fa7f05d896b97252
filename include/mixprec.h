/* mixprec.h — public C API of libmixprec: mixed-precision training of CNNs.
 *
 * Objects are opaque handles with create/destroy pairs; options are structs
 * passed with designated initializers; every fallible call returns mp_status
 * and leaves a readable message in mp_last_error(). */
#ifndef MIXPREC_H
#define MIXPREC_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "mixprec/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_VERSION_STRING "0.1.0" /* this header's library version */

/* ---- status and errors -------------------------------------------------- */
/* What a fallible call returns; mp_last_error() then says what went wrong. */
typedef enum {
    MP_OK = 0,           /* success */
    MP_ERR_INVALID_ARG,  /* a bad option or argument */
    MP_ERR_IO,           /* a file could not be opened/read/written */
    MP_ERR_FORMAT,       /* a file is corrupt or not of the expected format */
    MP_ERR_SHAPE,        /* impossible shapes */
    MP_ERR_NOMEM,        /* out of memory */
    MP_ERR_NONFINITE,    /* NaN or inf where finite numbers are required */
    MP_ERR_UNSUPPORTED,  /* valid request this build/machine cannot do */
    MP_ERR_INTERNAL,     /* a library (oneDNN, zlib, ...) failed */
} mp_status;

/* Message describing the last error on this thread ("" if none). */
MP_API const char *mp_last_error(void);
/* A short description of a status, e.g. "invalid argument". */
MP_API const char *mp_status_name(mp_status s);

/* ---- dtypes and storage types ------------------------------------------- */
/* Element types of tensors. */
typedef enum {
    MP_DTYPE_F32 = 0, /* IEEE single precision */
    MP_DTYPE_F16,     /* IEEE half precision */
    MP_DTYPE_BF16,    /* bfloat16: f32's exponent, 8-bit significand */
    MP_DTYPE_F64,     /* IEEE double precision (reference kernels) */
    MP_DTYPE_I32,     /* labels */
    MP_DTYPE_COUNT    /* number of dtypes */
} mp_dtype;

/* An IEEE half-precision number. */
typedef struct {
    uint16_t bits; /* its bit pattern */
} mp_f16;
/* A bfloat16 number (the upper half of an f32). */
typedef struct {
    uint16_t bits; /* its bit pattern */
} mp_bf16;

/* "f32", "f16", "bf16", "f64", "i32". */
MP_API const char *mp_dtype_name(mp_dtype t);
/* Bytes per element. */
MP_API size_t mp_dtype_size(mp_dtype t);

/* f32 to f16, round-to-nearest-even, IEEE NaN/inf/subnormal rules. */
MP_API mp_f16 mp_f32_to_f16(float x);
/* f16 to f32 (exact). */
MP_API float mp_f16_to_f32(mp_f16 h);
/* f32 to bf16, round-to-nearest-even. */
MP_API mp_bf16 mp_f32_to_bf16(float x);
/* bf16 to f32 (exact). */
MP_API float mp_bf16_to_f32(mp_bf16 b);
/* n values f32 to f16: vectorized (F16C, AVX-512 BF16, AVX2) when the CPU
 * has it, chosen at run time; bit-identical to the scalar functions. */
MP_API void mp_convert_f32_to_f16(const float *src, mp_f16 *dst, size_t n);
/* n values f16 to f32, vectorized as mp_convert_f32_to_f16(). */
MP_API void mp_convert_f16_to_f32(const mp_f16 *src, float *dst, size_t n);
/* n values f32 to bf16, vectorized as mp_convert_f32_to_f16(). */
MP_API void mp_convert_f32_to_bf16(const float *src, mp_bf16 *dst, size_t n);
/* n values bf16 to f32, vectorized as mp_convert_f32_to_f16(). */
MP_API void mp_convert_bf16_to_f32(const mp_bf16 *src, float *dst, size_t n);
/* Round f32 values in place to dtype's precision (f16/bf16: round to nearest
 * even through the conversions above; any other dtype: unchanged). */
MP_API void mp_round_f32(float *x, int64_t n, mp_dtype dtype);
/* n elements of any float dtype (F32, F16, BF16) to f32, chunked over all
 * threads when large. */
MP_API void mp_load_f32(float *dst, const void *src, mp_dtype src_dtype, int64_t n);
/* n f32 elements to any float dtype (f16/bf16 round to nearest even),
 * chunked over all threads when large. */
MP_API void mp_store_f32(void *dst, mp_dtype dst_dtype, const float *src, int64_t n);

/* ---- graph construction ------------------------------------------------- */
/* A model: a DAG of op nodes and their parameters. */
typedef struct mp_graph mp_graph;
typedef int mp_node; /* index of a node in its graph; negative = error */

/* An empty graph (NULL when out of memory). */
MP_API mp_graph *mp_graph_create(void);
/* Frees the graph, its parameters and gradients (NULL is a no-op). */
MP_API void mp_graph_destroy(mp_graph *g);
/* The first error met while building (construction calls return -1 then). */
MP_API mp_status mp_graph_status(const mp_graph *g);

/* Image input: per-sample shape (C, H, W); the batch size is chosen when a
 * plan is compiled. */
MP_API mp_node mp_graph_input(mp_graph *g, const char *name, int c, int h, int w);
/* Label input: one int32 class index per sample. */
MP_API mp_node mp_graph_labels(mp_graph *g, const char *name);
/* Dense target input (e.g. 0/1 for BCE): per-sample shape (features). */
MP_API mp_node mp_graph_targets(mp_graph *g, const char *name, int features);

/* Options of mp_conv2d() and mp_conv_transpose2d(). */
typedef struct {
    int out_channels; /* output channels */
    int kernel;       /* square kernel */
    int stride;       /* 0 -> 1 */
    int padding;      /* zero padding on each side */
    int dilation;     /* 0 -> 1 */
    int groups;       /* 0 -> 1; = in_channels for depthwise */
    int output_padding; /* transposed conv only */
    bool bias;        /* add a learned per-channel bias */
} mp_conv_opts;
/* 2-D convolution with PyTorch's semantics; weight (out, C/groups, k, k). */
MP_API mp_node mp_conv2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);
/* 2-D transposed convolution (upsampling, e.g. in a GAN's generator). */
MP_API mp_node mp_conv_transpose2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);

/* Options of mp_batchnorm2d(). */
typedef struct {
    float momentum; /* running-stat update weight, 0 -> 0.1 (PyTorch) */
    float eps;      /* 0 -> 1e-5 */
} mp_batchnorm_opts;
/* Batch normalization over (N, H, W) per channel, learned scale and shift;
 * batch statistics in training plans, running statistics otherwise. */
MP_API mp_node mp_batchnorm2d(mp_graph *g, const char *name, mp_node x, mp_batchnorm_opts o);

/* Options of mp_maxpool2d() and mp_avgpool2d(). */
typedef struct {
    int kernel;  /* square window */
    int stride;  /* 0 -> kernel */
    int padding; /* padding on each side */
} mp_pool_opts;
/* Maximum over each window. */
MP_API mp_node mp_maxpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o);
/* Mean over each window. */
MP_API mp_node mp_avgpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o);
/* Mean over H and W: (N, C, H, W) -> (N, C), so a linear layer can follow. */
MP_API mp_node mp_global_avgpool(mp_graph *g, const char *name, mp_node x);

/* Options of mp_linear(). */
typedef struct {
    int out_features; /* output features */
    bool bias;        /* add a learned bias */
} mp_linear_opts;
/* Fully connected layer y = x W^T + b over per-sample feature vectors. */
MP_API mp_node mp_linear(mp_graph *g, const char *name, mp_node x, mp_linear_opts o);

/* max(x, 0), elementwise. */
MP_API mp_node mp_relu(mp_graph *g, const char *name, mp_node x);
/* x for x > 0, slope * x otherwise. */
MP_API mp_node mp_leaky_relu(mp_graph *g, const char *name, mp_node x, float slope);
/* tanh(x), elementwise. */
MP_API mp_node mp_tanh(mp_graph *g, const char *name, mp_node x);
/* 1 / (1 + exp(-x)), elementwise. */
MP_API mp_node mp_sigmoid(mp_graph *g, const char *name, mp_node x);
/* Elementwise sum of two same-shaped nodes (residual connections). */
MP_API mp_node mp_add(mp_graph *g, const char *name, mp_node a, mp_node b);
/* Elementwise product of two same-shaped nodes. */
MP_API mp_node mp_mul(mp_graph *g, const char *name, mp_node a, mp_node b);
/* Concatenate along channels (axis 1) for 4-D, features for 2-D. */
MP_API mp_node mp_concat(mp_graph *g, const char *name, const mp_node *xs, int n);
/* Per-sample reshape to (c, h, w), or to (c) when h = w = 0; the element
 * count must be kept. */
MP_API mp_node mp_reshape(mp_graph *g, const char *name, mp_node x, int c, int h, int w);
/* Per-sample reshape to (C*H*W). */
MP_API mp_node mp_flatten(mp_graph *g, const char *name, mp_node x);
/* Inverted dropout: in training each element is zeroed with probability p
 * (0 <= p < 1) and the others scaled by 1/(1-p); identity otherwise. */
MP_API mp_node mp_dropout(mp_graph *g, const char *name, mp_node x, float p);
/* Softmax cross-entropy of logits against int32 labels: mean over the
 * batch, computed in fp32 whatever the policy (as every loss). */
MP_API mp_node mp_softmax_cross_entropy(mp_graph *g, const char *name, mp_node logits, mp_node labels);
/* Binary cross-entropy of sigmoid(logits) against dense 0..1 targets, mean
 * over the batch, in fp32. */
MP_API mp_node mp_bce_with_logits(mp_graph *g, const char *name, mp_node logits, mp_node targets);

/* Give every parameter its initial value (He normal for weights, fan-in
 * uniform for biases, BN gamma 1 / beta 0), reproducibly from `seed`. */
MP_API void mp_graph_init_params(mp_graph *g, uint64_t seed);
/* Start a new gradient: the next backward overwrites instead of adding. */
MP_API void mp_graph_zero_grad(mp_graph *g);
/* Weight tying: `node` uses `from`'s parameters (same op and shapes), e.g. a
 * GAN discriminator applied to real and to generated images. Call right
 * after creating `node`. Gradients from both uses add up. */
MP_API mp_status mp_graph_share_params(mp_graph *g, mp_node node, mp_node from);
/* Keep this node's output readable after a step (logits, loss). */
MP_API void mp_graph_mark_output(mp_graph *g, mp_node n);

/* Floating-point operations of one step (convolutions and dense layers,
 * 2 per multiply-add; training adds the data and weight gradients). */
MP_API double mp_graph_flops(const mp_graph *g, int batch, bool training);

/* Number of nodes (0 for NULL). */
MP_API int mp_graph_node_count(const mp_graph *g);
/* The node of that name, or -1. */
MP_API mp_node mp_graph_find(const mp_graph *g, const char *name);
/* A node's name (NULL when out of range). */
MP_API const char *mp_graph_node_name(const mp_graph *g, mp_node n);
/* A node's op, e.g. "conv2d" (NULL when out of range). */
MP_API const char *mp_graph_node_op(const mp_graph *g, mp_node n);
/* Number of trainable parameters (elements). */
MP_API int64_t mp_graph_param_count(const mp_graph *g);

/* ---- devices -------------------------------------------------------------- */
/* Kinds of device a plan runs on. */
typedef enum {
    MP_DEVICE_CPU = 0, /* the host's cores (oneDNN or the reference kernels) */
    MP_DEVICE_CUDA = 1 /* an NVIDIA GPU (the CUDA backend) */
} mp_device_kind;
/* A device: its kind and, for a GPU, its number. */
typedef struct {
    mp_device_kind kind; /* zero-initialized options mean the CPU */
    int index;           /* CUDA device number */
} mp_device;
/* "cpu", "cuda" (= cuda:0), "cuda:N", or "auto" (cuda:0 when this build has
 * the CUDA backend and a GPU is present, else the CPU). Errors name the text;
 * a missing GPU is reported when a plan opens it, listing those found. */
MP_API mp_status mp_device_parse(const char *text, mp_device *out);
/* Writes the device's name ("cpu", "cuda:0") into buf and returns buf. */
MP_API const char *mp_device_name(mp_device d, char *buf, size_t len);
/* GPUs this build can use here (0 without the CUDA backend, a driver or a GPU). */
MP_API int mp_device_gpu_count(void);

/* ---- compiled plans ----------------------------------------------------- */
/* A graph compiled for one batch size, device and mode: memory planned,
 * ready to run forward and backward. */
typedef struct mp_plan mp_plan;
#define MP_MAX_LOSSES 8 /* loss nodes one plan can start backward from */
/* Options of mp_plan_create(). */
typedef struct {
    int batch;          /* samples per step */
    bool training;      /* keep activations for backward, batch statistics */
    mp_node loss;       /* node whose gradient seeds backward (training) */
    mp_node losses[MP_MAX_LOSSES]; /* several losses (a GAN's): backward from any of them */
    int n_losses;       /* 0: just `loss` */
    bool use_onednn;    /* heavy ops through oneDNN when built with it (default on) */
    bool reference;     /* force the plain-C reference kernels */
    uint64_t seed;      /* dropout masks */
    bool profile;       /* time every node's forward and backward (mp_plan_print_profile) */
    mp_device device;   /* where the plan runs (default: the CPU) */
    /* data parallel on GPUs: with sync_bn, training BatchNorm normalizes with
     * the statistics of the global batch (every rank of sync_dist, an
     * mp_dist from src/dist/dist.h), else with this rank's own */
    bool sync_bn;
    void *sync_dist; /* the communicator of sync_bn's ranks */
    /* GPU training plans with one loss: the parameters' gradients (f32, or
     * see low_grads) live in the activation arena, from their node's backward
     * to the step's end, instead of in memory of their own (less peak memory: PyTorch's
     * zero_grad(set_to_none=True)). Every backward then writes them afresh
     * (as after mp_graph_zero_grad), and they are gone once the next forward
     * runs: no gradient accumulation over several backward passes
     * (mp_cuda_step refuses accumulate > 1). */
    bool grads_in_arena;
    /* With grads_in_arena, under the policies without master weights (fp16,
     * bf16): the gradient of a convolution's or linear layer's weight that
     * has no fp32 master (mp_graph_param_low_only) is stored in the weight's
     * f16/bf16 dtype, as a PyTorch `.half()` model's (half the bytes). The
     * CPU's emulation of those layers rounds such gradients to that dtype too
     * (oneDNN's native bf16 convolutions write them in f32); a run that
     * rescales gradients in place would round them twice, so the GPU step
     * refuses it with loss scaling, clipping or data parallelism. */
    bool low_grads;
    /* Weights with an fp32 master (amp-*, o2-*): their convolutions' and
     * linear layers' gradients are the f32 sums, never rounded to f16/bf16
     * (by default a convolution's is, as cuDNN's fast kernels and PyTorch's
     * autocast give it). Then how a batch is split over GPUs or micro-batches
     * changes the gradients by f32 summation order only, not by a bf16 ulp
     * of each part's sum: data-parallel amp-bf16 reaches one GPU's weights
     * within fp32 tolerance. The GPU computes those passes in f32 (TF32
     * tensor cores, exact on f16/bf16 values) on f32 copies: slower (bench
     * notes v0.14). mp_plan_f32_weight_grad says which parameters it covers. */
    bool f32_weight_grads;
} mp_plan_opts;

/* Compiles g into *out: checks the losses, plans the arena and prepares the
 * kernels (and the device, for a GPU plan). The graph must outlive the plan. */
MP_API mp_status mp_plan_create(mp_graph *g, mp_plan_opts o, mp_plan **out);
/* Frees the plan and its device memory (NULL is a no-op). */
MP_API void mp_plan_destroy(mp_plan *p);
/* Copy a batch in. data: (batch, C, H, W) f32, n its element count. */
MP_API mp_status mp_plan_set_input(mp_plan *p, mp_node input, const float *data, size_t n);
/* Copy a batch's labels in: n = batch int32 class indices. */
MP_API mp_status mp_plan_set_labels(mp_plan *p, mp_node node, const int32_t *labels, size_t n);
/* Runs every node forward on the batch set in. */
MP_API mp_status mp_plan_forward(mp_plan *p);
/* Backward from opts.loss (the first of opts.losses) with d(loss) = seed
 * (1 without loss scaling), or from any of the plan's losses. A plan with
 * one loss runs one backward per forward; with several, one per loss. */
MP_API mp_status mp_plan_backward(mp_plan *p, float seed);
/* Backward from one of the plan's losses (opts.losses), as mp_plan_backward(). */
MP_API mp_status mp_plan_backward_from(mp_plan *p, mp_node loss, float seed);
/* Read a node's output as f32 (converted); n is the element count. */
MP_API mp_status mp_plan_read(const mp_plan *p, mp_node node, float *dst, size_t n);
/* With opts.profile: a table of the time spent per op kind (forward,
 * backward, share of the total) and how its nodes ran (f32, native bf16,
 * staged emulation), accumulated since the plan was created. */
MP_API void mp_plan_print_profile(const mp_plan *p, FILE *out);
/* Where the plan's memory goes: the arena and, at the step where most of it
 * is alive, those bytes by kind (activations, saved for backward, activation
 * and parameter gradients, workspaces, scratch) and the node running then;
 * on a GPU also the parameters' device copies (fp32 masters, f16/bf16 casts,
 * gradients outside the arena). Two or three lines starting "memory:". */
MP_API void mp_plan_print_memory(const mp_plan *p, FILE *out);
/* Plans on a GPU keep the parameters (fp32 masters, gradients) in device
 * memory: copy them to the graph's host copies (to_host, e.g. before saving
 * a checkpoint) or from them (after loading one). A training plan under
 * fp16/bf16 holds a weight of one low node only in that dtype: it comes back
 * as its f32 value and goes over rounded to nearest even. No-op on the CPU. */
MP_API mp_status mp_plan_sync_params(mp_plan *p, bool to_host);
/* Elements of a node's output for the whole batch (0 when out of range). */
MP_API size_t mp_plan_numel(const mp_plan *p, mp_node node);
/* Forward passes run so far (dropout masks derive from it); settable so a
 * replayed or resumed step sees the same masks. */
MP_API uint64_t mp_plan_step(const mp_plan *p);
/* Sets the count mp_plan_step() returns. */
MP_API void mp_plan_set_step(mp_plan *p, uint64_t step);

/* Overflow provenance: where a NaN/inf first appeared. */
typedef struct {
    bool found;        /* a NaN/inf was found; the fields below say where */
    bool backward;     /* false: a forward output; true: a gradient */
    mp_node node;      /* the op that produced it */
    char what[48];     /* "output", "grad input 0", "grad weight", ... */
} mp_nonfinite_site;
/* After a forward: the first node (in forward order) whose output holds a
 * NaN/inf. Replays that forward (same batch and dropout masks) checking each
 * output as it is written, since the arena reuses dead activations; BN
 * running statistics are updated again (callers that care restore them). */
MP_API mp_status mp_plan_find_nonfinite_forward(mp_plan *p, mp_nonfinite_site *site);
/* Backward that checks every gradient as it is written and stops at the
 * first non-finite one (used to replay a step that overflowed). */
MP_API mp_status mp_plan_backward_checked(mp_plan *p, float seed, mp_nonfinite_site *site);
/* Bytes of the plan's activation arena. */
MP_API size_t mp_plan_arena_bytes(const mp_plan *p);
/* Nodes whose low-precision math runs natively (bf16 library kernels) and
 * nodes emulated in f32 with rounding (low-precision storage or compute). */
MP_API void mp_plan_precision_counts(const mp_plan *p, int *native, int *emulated);

/* ---- process set-up ------------------------------------------------------ */
/* Re-execute the program once with OMP_WAIT_POLICY=passive unless the
 * environment already sets it (idle OpenMP threads then sleep instead of
 * spinning, which matters on small shared machines). Call first in main(). */
MP_API void mp_prefer_passive_openmp(char **argv);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_H */
