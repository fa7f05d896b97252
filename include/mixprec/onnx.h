/** @file mixprec/onnx.h
 * ONNX in and out: import the inference graph of a CNN classifier (or a GAN
 * part) from an .onnx file into a mixprec graph, with its initializers as the
 * parameters, so that a model trained elsewhere evaluates and fine-tunes in
 * any precision policy; and export a mixprec model's inference graph, with its
 * trained weights and BatchNorm running statistics, for any ONNX runtime.
 *
 * Imported ops (default domain, opsets 13 to 21): Conv, ConvTranspose,
 * BatchNormalization, Relu, LeakyRelu, Sigmoid, Tanh, MaxPool, AveragePool,
 * GlobalAveragePool, Gemm, MatMul (+ Add of a bias), Add, Mul, Concat (axis
 * 1), Flatten (axis 1), Reshape (static shapes), Dropout and Identity; the
 * constant chains exporters emit (Constant, Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape, Cast, Squeeze, Slice, integer arithmetic) are folded.
 * Kernels, strides and pads must be square and symmetric (mixprec's ops
 * are); anything else is an error naming the file, the node, the op and the
 * attribute. Built without protobuf-c, every call returns
 * MP_ERR_UNSUPPORTED. */
#ifndef MIXPREC_ONNX_H
#define MIXPREC_ONNX_H

#include "mixprec/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Called once per imported parameter: the mixprec name ("<node>.<param>")
 * and the ONNX initializer (or folded constant) it was copied from. */
typedef void (*mp_onnx_param_fn)(void *arg, const char *param, const char *initializer);

/** Import options; zero fields take the defaults beside them. */
typedef struct {
    /** Per-sample input shape (C, H, W) for the dims the model leaves dynamic
     * (0: none given; a dynamic dim is then an error naming the input;
     * negative: MP_ERR_INVALID_ARG): channels, */
    int c;
    int h; /**< height, */
    int w; /**< and width */
    /** Use c, h, w even where the model fixes them (e.g. a CNN with global
     * pooling exported at 224x224, run at 32x32). */
    bool override_shape;
    /** Prepended whole to every node name (NULL: none), e.g. to import two
     * models into one graph; a character outside [A-Za-z0-9_] becomes '_'.
     * At most 32 characters (MP_ERR_INVALID_ARG otherwise). */
    const char *prefix;
    mp_onnx_param_fn on_param; /**< the parameter mapping (NULL: not reported) */
    void *on_param_arg;        /**< passed to on_param */
} mp_onnx_opts;

/** What mp_graph_from_onnx built. */
typedef struct {
    mp_node input;   /**< the image input node (the model's graph input) */
    mp_node output;  /**< the node computing the model's single output */
    int opset;       /**< the model's default-domain opset */
    int onnx_nodes;  /**< nodes in the file's graph */
    int params;      /**< parameter tensors copied from initializers */
} mp_onnx_info;

/** Add the ONNX model at `path` to g: one input node (the model's graph
 * input, batch dimension free) and its ops, named after the ONNX nodes
 * (sanitized to [A-Za-z0-9_], made unique; op type + index for unnamed
 * ones), every parameter set from its initializer (mp_graph_param_set). No
 * loss is added. o may be NULL. On error (MP_ERR_IO, MP_ERR_FORMAT for a file
 * that is not ONNX or is corrupt or truncated, MP_ERR_UNSUPPORTED for an op,
 * opset or attribute mixprec cannot run, MP_ERR_SHAPE for shapes it cannot
 * resolve) the message names the file and the node, and g may hold part of
 * the model: destroy it. */
MP_API mp_status mp_graph_from_onnx(mp_graph *g, const char *path, const mp_onnx_opts *o, mp_onnx_info *info);

/** A classifier from an ONNX file, as mp_model_build makes one: the imported
 * graph, whose single output must be the logits (N, K), plus a label input
 * and a softmax cross-entropy loss, ready for a trainer (which keeps the
 * imported weights). o may be NULL. On error out->g is NULL. */
MP_API mp_status mp_model_from_onnx(const char *path, const mp_onnx_opts *o, mp_model *out);

/** Export options; zero fields take the defaults beside them. */
typedef struct {
    /** Store the weights as fp16 initializers, each widened by a Cast node
     * (the graph computes in fp32); default fp32 initializers. */
    bool fp16_weights;
    /** A fixed batch size for the input and output (0: a dynamic "N"). */
    int batch;
    /** The input normalization (x - mean) / std the model was trained with,
     * written as the model's metadata "mixprec.norm_mean" and
     * "mixprec.norm_std" (comma-separated decimals, one per channel) so that
     * evaluation elsewhere reproduces its accuracy; 0 writes none. */
    int norm_channels;
    const float *norm_mean; /**< norm_channels means (see norm_channels) */
    const float *norm_std;  /**< norm_channels standard deviations, > 0 */
} mp_onnx_export_opts;

/** Write the inference graph that computes `output` from `input` (an image
 * input node) as an ONNX model (opset 17): every node `output` depends on,
 * with the graph's current parameters as initializers named as in mixprec,
 * BatchNorm in inference form with its running statistics, Dropout as an
 * identity at inference. Labels, targets and losses are left out. o may be
 * NULL. After training on a GPU call mp_trainer_sync first. */
MP_API mp_status mp_graph_to_onnx(const mp_graph *g, mp_node input, mp_node output, const char *path,
                                  const mp_onnx_export_opts *o);

/** mp_graph_to_onnx of a classifier: its input to its logits. */
MP_API mp_status mp_model_export_onnx(const mp_model *m, const char *path, const mp_onnx_export_opts *o);

/** The input normalization an ONNX model's metadata records (as
 * mp_graph_to_onnx writes it): *channels values each into mean and std
 * (room for max_channels), or *channels = 0 when the model records none.
 * A malformed or partial record is an error naming the file and the key. */
MP_API mp_status mp_onnx_read_normalization(const char *path, int max_channels, int *channels, float *mean,
                                            float *std);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_ONNX_H */
