/** @file mixprec/graph.h
 * Building a model: a graph (DAG) of op nodes, its parameters and their
 * gradients. Nodes are created in topological order; every node has a unique
 * name, and a parameter is named "<node>.<param>" ("conv1.weight",
 * "bn1.running_mean"), in the graph, in checkpoints and in weight files.
 * Every node is added before an optimizer, plan or trainer is made from the
 * graph: they hold its node and parameter lists, so a later node is refused
 * (mp_graph_error names it). */
#ifndef MIXPREC_GRAPH_H
#define MIXPREC_GRAPH_H

#include "mixprec/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A model graph (opaque). */
typedef struct mp_graph mp_graph;
/** Index of a node in its graph; negative = an error (see mp_graph_status). */
typedef int mp_node;

/** An empty graph, or NULL when out of memory. */
MP_API mp_graph *mp_graph_create(void);
/** Frees the graph and its parameters (NULL is fine). While plans, trainers
 * or optimizers made from it are alive it is freed when the last of them is
 * destroyed. */
MP_API void mp_graph_destroy(mp_graph *g);
/** The first error met while building (construction calls return -1 after it). */
MP_API mp_status mp_graph_status(const mp_graph *g);
/** That error's message ("" where the graph has none), which plans,
 * trainers, optimizers and policies made from the graph quote when they
 * refuse it; "null graph" for NULL. Valid while g lives. */
MP_API const char *mp_graph_error(const mp_graph *g);

/** Image input: per-sample shape (C, H, W); the batch size is chosen when a
 * plan or trainer is made. */
MP_API mp_node mp_graph_input(mp_graph *g, const char *name, int c, int h, int w);
/** Label input: one int32 class index per sample. */
MP_API mp_node mp_graph_labels(mp_graph *g, const char *name);
/** Dense target input (e.g. 0/1 for BCE): per-sample shape (features). */
MP_API mp_node mp_graph_targets(mp_graph *g, const char *name, int features);

/** Convolution options; zero fields take the default beside them. */
typedef struct {
    int out_channels;   /**< output channels */
    int kernel;         /**< square kernel */
    int stride;         /**< 0 -> 1 */
    int padding;        /**< zeros added on every side */
    int dilation;       /**< 0 -> 1 */
    int groups;         /**< 0 -> 1; = in_channels for depthwise */
    int output_padding; /**< transposed convolution only */
    bool bias;          /**< add a per-channel bias */
} mp_conv_opts;
/** 2-D convolution (NCHW), weight (out, in/groups, k, k). */
MP_API mp_node mp_conv2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);
/** 2-D transposed convolution, weight (in, out/groups, k, k) as PyTorch's. */
MP_API mp_node mp_conv_transpose2d(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);

/** Batch-norm options. */
typedef struct {
    float momentum; /**< running-statistics update weight, 0 -> 0.1 (PyTorch) */
    float eps;      /**< 0 -> 1e-5 */
} mp_batchnorm_opts;
/** Batch normalization over (N, H, W) per channel: weight, bias and the
 * running_mean / running_var buffers. */
MP_API mp_node mp_batchnorm2d(mp_graph *g, const char *name, mp_node x, mp_batchnorm_opts o);

/** Pooling options. */
typedef struct {
    int kernel;  /**< square window */
    int stride;  /**< 0 -> kernel */
    int padding; /**< on every side */
} mp_pool_opts;
/** Max pooling. */
MP_API mp_node mp_maxpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o);
/** Average pooling (padding counted, as PyTorch's count_include_pad). */
MP_API mp_node mp_avgpool2d(mp_graph *g, const char *name, mp_node x, mp_pool_opts o);
/** Mean over H and W: (N, C, H, W) -> (N, C). */
MP_API mp_node mp_global_avgpool(mp_graph *g, const char *name, mp_node x);

/** Dense layer options. */
typedef struct {
    int out_features; /**< outputs per sample */
    bool bias;        /**< add a bias */
} mp_linear_opts;
/** y = x W^T + b, weight (out, in) as PyTorch's nn.Linear. */
MP_API mp_node mp_linear(mp_graph *g, const char *name, mp_node x, mp_linear_opts o);

/** max(x, 0). */
MP_API mp_node mp_relu(mp_graph *g, const char *name, mp_node x);
/** x > 0 ? x : slope * x. */
MP_API mp_node mp_leaky_relu(mp_graph *g, const char *name, mp_node x, float slope);
/** tanh(x). */
MP_API mp_node mp_tanh(mp_graph *g, const char *name, mp_node x);
/** 1 / (1 + exp(-x)). */
MP_API mp_node mp_sigmoid(mp_graph *g, const char *name, mp_node x);
/** Elementwise a + b of two same-shaped nodes. */
MP_API mp_node mp_add(mp_graph *g, const char *name, mp_node a, mp_node b);
/** Elementwise a * b of two same-shaped nodes. */
MP_API mp_node mp_mul(mp_graph *g, const char *name, mp_node a, mp_node b);
/** Concatenate n nodes along channels (axis 1) for 4-D, features for 2-D. */
MP_API mp_node mp_concat(mp_graph *g, const char *name, const mp_node *xs, int n);
/** Per-sample reshape to (c, h, w), or to (c) when h = w = 0; keeps the element count. */
MP_API mp_node mp_reshape(mp_graph *g, const char *name, mp_node x, int c, int h, int w);
/** Reshape to (C*H*W) per sample. */
MP_API mp_node mp_flatten(mp_graph *g, const char *name, mp_node x);
/** Inverted dropout with drop probability p while training; identity otherwise. */
MP_API mp_node mp_dropout(mp_graph *g, const char *name, mp_node x, float p);
/** Softmax cross-entropy of logits (N, K) against int32 labels, mean over the
 * batch, computed in fp32 whatever the policy. */
MP_API mp_node mp_softmax_cross_entropy(mp_graph *g, const char *name, mp_node logits, mp_node labels);
/** Binary cross-entropy with logits against dense targets of the logits' shape (N, F), mean over all N x F
 * elements (PyTorch's BCEWithLogitsLoss default reduction), fp32. */
MP_API mp_node mp_bce_with_logits(mp_graph *g, const char *name, mp_node logits, mp_node targets);

/** How mp_graph_init_params_scheme draws conv, conv_transpose and linear
 * weights (biases, batch norm and the rest are the same in both). */
typedef enum {
    MP_INIT_SCHEME_HE = 0, /**< He normal, N(0, 2 / fan_in): mp_graph_init_params' (and the CLI's) default */
    /** PyTorch's default for Conv2d / ConvTranspose2d / Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), a standard
     * deviation sqrt(6) below He's; a model ported from PyTorch then starts where it did there */
    MP_INIT_SCHEME_TORCH
} mp_init_scheme;
/** Give every parameter its initial value (He normal for weights, fan-in
 * uniform for biases, BN gamma 1 / beta 0), reproducibly from seed. */
MP_API void mp_graph_init_params(mp_graph *g, uint64_t seed);
/** The same with the weights drawn as `scheme` says; MP_ERR_INVALID_ARG
 * (nothing changed) for a scheme that is not one of mp_init_scheme's. */
MP_API mp_status mp_graph_init_params_scheme(mp_graph *g, uint64_t seed, mp_init_scheme scheme);
/** "he" or "torch" into *out; MP_ERR_INVALID_ARG naming the text otherwise. */
MP_API mp_status mp_init_scheme_parse(const char *text, mp_init_scheme *out);
/** Start a new gradient: the next backward overwrites instead of adding
 * (NULL: nothing to do). */
MP_API void mp_graph_zero_grad(mp_graph *g);
/** Weight tying: `node` uses `from`'s parameters (same op and shapes), e.g. a
 * GAN discriminator applied to real and to generated images. Call right
 * after creating `node`, once, before any plan or trainer of the graph
 * exists; gradients from both uses add up. MP_ERR_INVALID_ARG, nothing
 * changed, when `node` already shares (or another node uses its parameters)
 * or while a plan or trainer of g is alive (destroy those first). */
MP_API mp_status mp_graph_share_params(mp_graph *g, mp_node node, mp_node from);
/** Keep this node's output readable after a step (logits, loss). */
MP_API void mp_graph_mark_output(mp_graph *g, mp_node n);

/** Floating-point operations of one step (convolutions and dense layers, 2
 * per multiply-add; training adds the data and weight gradients). */
MP_API double mp_graph_flops(const mp_graph *g, int batch, bool training);
/** Number of nodes. */
MP_API int mp_graph_node_count(const mp_graph *g);
/** The node named name, or -1. */
MP_API mp_node mp_graph_find(const mp_graph *g, const char *name);
/** A node's name (NULL for a bad index). */
MP_API const char *mp_graph_node_name(const mp_graph *g, mp_node n);
/** A node's op ("conv2d", "relu", ...; NULL for a bad index). */
MP_API const char *mp_graph_node_op(const mp_graph *g, mp_node n);
/** A node's per-sample output shape: up to 3 dims (C, H, W), or (features). */
MP_API mp_status mp_graph_node_sample_shape(const mp_graph *g, mp_node n, int *ndim, int64_t dims[3]);
/** Number of trainable parameter elements. */
MP_API int64_t mp_graph_param_count(const mp_graph *g);

/* ---- parameters and gradients ------------------------------------------- */

/** Rank of the largest parameter tensor. */
#define MP_PARAM_MAX_DIMS 4

/** One parameter tensor of a graph. */
typedef struct {
    const char *name;   /**< "<node>.<param>", as in checkpoints; valid while the graph lives */
    mp_node node;       /**< the node that owns it */
    int ndim;           /**< rank of the shape */
    int64_t dims[MP_PARAM_MAX_DIMS]; /**< the shape, PyTorch's layout */
    int64_t numel;      /**< elements */
    bool trainable;     /**< false: a buffer (BatchNorm running statistics) */
    bool master;        /**< kept as an fp32 master while training (set by the precision policy) */
    mp_dtype dtype;     /**< the dtype it is trained in: F32 with a master, else its node's F16/BF16 */
} mp_param_info;

/** Number of parameter tensors (trainable ones and buffers). */
MP_API int mp_graph_param_tensors(const mp_graph *g);
/** Parameter tensor k (0 <= k < mp_graph_param_tensors). */
MP_API mp_status mp_graph_param_info(const mp_graph *g, int k, mp_param_info *out);
/** Index of the parameter named name, or -1. */
MP_API int mp_graph_param_find(const mp_graph *g, const char *name);
/** Copy parameter `name` (n = its element count) out of / into the graph's
 * host copy. After training on a GPU call mp_trainer_sync first, or use
 * mp_trainer_param_get / _set, which do. */
MP_API mp_status mp_graph_param_get(const mp_graph *g, const char *name, float *dst, size_t n);
/** See mp_graph_param_get; the values must be finite. */
MP_API mp_status mp_graph_param_set(mp_graph *g, const char *name, const float *src, size_t n);
/** The gradient of trainable parameter `name` after the last backward
 * (unscaled once a training step ran); MP_ERR_INVALID_ARG before any plan
 * of the graph ran a backward. */
MP_API mp_status mp_graph_grad_get(const mp_graph *g, const char *name, float *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_GRAPH_H */
