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

#define MP_VERSION_STRING "0.1.0"

/* ---- status and errors -------------------------------------------------- */
typedef enum {
    MP_OK = 0,
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
MP_API const char *mp_status_name(mp_status s);

/* ---- dtypes and storage types ------------------------------------------- */
typedef enum {
    MP_DTYPE_F32 = 0,
    MP_DTYPE_F16,
    MP_DTYPE_BF16,
    MP_DTYPE_F64,
    MP_DTYPE_I32, /* labels */
    MP_DTYPE_COUNT
} mp_dtype;

typedef struct { uint16_t bits; } mp_f16;
typedef struct { uint16_t bits; } mp_bf16;

MP_API const char *mp_dtype_name(mp_dtype t);
MP_API size_t mp_dtype_size(mp_dtype t);

/* Scalar conversions, round-to-nearest-even, IEEE NaN/inf/subnormal rules. */
MP_API mp_f16 mp_f32_to_f16(float x);
MP_API float mp_f16_to_f32(mp_f16 h);
MP_API mp_bf16 mp_f32_to_bf16(float x);
MP_API float mp_bf16_to_f32(mp_bf16 b);
/* Array conversions: vectorized (F16C, AVX-512 BF16, AVX2) when the CPU has
 * it, chosen at run time; bit-identical to the scalar functions. */
MP_API void mp_convert_f32_to_f16(const float *src, mp_f16 *dst, size_t n);
MP_API void mp_convert_f16_to_f32(const mp_f16 *src, float *dst, size_t n);
MP_API void mp_convert_f32_to_bf16(const float *src, mp_bf16 *dst, size_t n);
MP_API void mp_convert_bf16_to_f32(const mp_bf16 *src, float *dst, size_t n);
/* Round f32 values in place to dtype's precision (f16/bf16: round to nearest
 * even through the conversions above; any other dtype: unchanged). */
MP_API void mp_round_f32(float *x, int64_t n, mp_dtype dtype);
/* n elements between f32 and any float dtype (F32, F16, BF16; f16/bf16
 * stores round to nearest even), chunked over all threads when large. */
MP_API void mp_load_f32(float *dst, const void *src, mp_dtype src_dtype, int64_t n);
MP_API void mp_store_f32(void *dst, mp_dtype dst_dtype, const float *src, int64_t n);

/* ---- graph construction ------------------------------------------------- */
typedef struct mp_graph mp_graph;
typedef int mp_node; /* index of a node in its graph; negative = error */

MP_API mp_graph *mp_graph_create(void);
MP_API void mp_graph_destroy(mp_graph *g);
/* The first error met while building (construction calls return -1 then). */
MP_API mp_status mp_graph_status(const mp_graph *g);

/* Image input: per-sample shape (C, H, W); the batch size is chosen when a
 * plan is compiled. Label input: one int32 class index per sample. */
MP_API mp_node mp_graph_input(mp_graph *g, const char *name, int c, int h, int w);
MP_API mp_node mp_graph_labels(mp_graph *g, const char *name);
/* Dense target input (e.g. 0/1 for BCE): per-sample shape (features). */
MP_API mp_node mp_graph_targets(mp_graph *g, const char *name, int features);

typedef struct {
    int out_channels;
    int kernel;       /* square kernel */
    int stride;       /* 0 -> 1 */
    int padding;
    int dilation;     /* 0 -> 1 */
    int groups;       /* 0 -> 1; = in_channels for depthwise */
    int output_padding; /* transposed conv only */
    bool bias;
} mp_conv_opts;
MP_API mp_node mp_conv2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);
MP_API mp_node mp_conv_transpose2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);

typedef struct {
    float momentum; /* running-stat update weight, 0 -> 0.1 (PyTorch) */
    float eps;      /* 0 -> 1e-5 */
} mp_batchnorm_opts;
MP_API mp_node mp_batchnorm2d(mp_graph *g, const char *name, mp_node x, mp_batchnorm_opts o);

typedef struct {
    int kernel;
    int stride;  /* 0 -> kernel */
    int padding;
} mp_pool_opts;
MP_API mp_node mp_maxpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o);
MP_API mp_node mp_avgpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o);
MP_API mp_node mp_global_avgpool(mp_graph *g, const char *name, mp_node x);

typedef struct {
    int out_features;
    bool bias;
} mp_linear_opts;
MP_API mp_node mp_linear(mp_graph *g, const char *name, mp_node x, mp_linear_opts o);

MP_API mp_node mp_relu(mp_graph *g, const char *name, mp_node x);
MP_API mp_node mp_leaky_relu(mp_graph *g, const char *name, mp_node x, float slope);
MP_API mp_node mp_tanh(mp_graph *g, const char *name, mp_node x);
MP_API mp_node mp_sigmoid(mp_graph *g, const char *name, mp_node x);
MP_API mp_node mp_add(mp_graph *g, const char *name, mp_node a, mp_node b);
/* Elementwise product of two same-shaped nodes. */
MP_API mp_node mp_mul(mp_graph *g, const char *name, mp_node a, mp_node b);
/* Concatenate along channels (axis 1) for 4-D, features for 2-D. */
MP_API mp_node mp_concat(mp_graph *g, const char *name, const mp_node *xs, int n);
/* Per-sample reshape to (c, h, w), or to (c) when h = w = 0; the element
 * count must be kept. flatten = reshape to (C*H*W). */
MP_API mp_node mp_reshape(mp_graph *g, const char *name, mp_node x, int c, int h, int w);
MP_API mp_node mp_flatten(mp_graph *g, const char *name, mp_node x);
MP_API mp_node mp_dropout(mp_graph *g, const char *name, mp_node x, float p);
/* Losses: mean over the batch, computed in fp32 whatever the policy. */
MP_API mp_node mp_softmax_cross_entropy(mp_graph *g, const char *name, mp_node logits, mp_node labels);
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

MP_API int mp_graph_node_count(const mp_graph *g);
MP_API mp_node mp_graph_find(const mp_graph *g, const char *name);
MP_API const char *mp_graph_node_name(const mp_graph *g, mp_node n);
MP_API const char *mp_graph_node_op(const mp_graph *g, mp_node n);
/* Number of trainable parameters (elements). */
MP_API int64_t mp_graph_param_count(const mp_graph *g);

/* ---- devices -------------------------------------------------------------- */
typedef enum { MP_DEVICE_CPU = 0, MP_DEVICE_CUDA = 1 } mp_device_kind;
typedef struct {
    mp_device_kind kind; /* zero-initialized options mean the CPU */
    int index;           /* CUDA device number */
} mp_device;
/* "cpu", "cuda" (= cuda:0), "cuda:N", or "auto" (cuda:0 when this build has
 * the CUDA backend and a GPU is present, else the CPU). Errors name the text;
 * a missing GPU is reported when a plan opens it, listing those found. */
MP_API mp_status mp_device_parse(const char *text, mp_device *out);
/* "cpu", "cuda:0" */
MP_API const char *mp_device_name(mp_device d, char *buf, size_t len);
/* GPUs this build can use here (0 without the CUDA backend, a driver or a GPU). */
MP_API int mp_device_gpu_count(void);

/* ---- compiled plans ----------------------------------------------------- */
typedef struct mp_plan mp_plan;
#define MP_MAX_LOSSES 8 /* loss nodes one plan can start backward from */
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
    void *sync_dist;
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

MP_API mp_status mp_plan_create(mp_graph *g, mp_plan_opts o, mp_plan **out);
MP_API void mp_plan_destroy(mp_plan *p);
/* Copy a batch in. data: (batch, C, H, W) f32; labels: batch int32. */
MP_API mp_status mp_plan_set_input(mp_plan *p, mp_node input, const float *data, size_t n);
MP_API mp_status mp_plan_set_labels(mp_plan *p, mp_node node, const int32_t *labels, size_t n);
MP_API mp_status mp_plan_forward(mp_plan *p);
/* Backward from opts.loss (the first of opts.losses) with d(loss) = seed
 * (1 without loss scaling), or from any of the plan's losses. A plan with
 * one loss runs one backward per forward; with several, one per loss. */
MP_API mp_status mp_plan_backward(mp_plan *p, float seed);
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
MP_API size_t mp_plan_numel(const mp_plan *p, mp_node node);
/* Forward passes run so far (dropout masks derive from it); settable so a
 * replayed or resumed step sees the same masks. */
MP_API uint64_t mp_plan_step(const mp_plan *p);
MP_API void mp_plan_set_step(mp_plan *p, uint64_t step);

/* Overflow provenance: where a NaN/inf first appeared. */
typedef struct {
    bool found;
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
