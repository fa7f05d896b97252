/* models.h — the model zoo: each builder makes a graph for a given input
 * shape and class count and returns its input, labels, logits and loss nodes. */
#ifndef MP_MODELS_MODELS_H
#define MP_MODELS_MODELS_H

#include "mixprec.h"

typedef struct {
    mp_graph *g;
    mp_node input, labels, logits, loss;
} mp_model;

typedef mp_status (*mp_model_builder)(mp_model *m, int c, int h, int w, int classes);

/* Build model `name` (see mp_model_list) for (c, h, w) inputs and `classes`
 * outputs; on error m->g is NULL and the message names the model. */
mp_status mp_model_build(const char *name, int c, int h, int w, int classes, mp_model *m);
void mp_model_free(mp_model *m);
/* "small, cnn10, resnet18, ..." */
const char *mp_model_list(void);
/* One line on the model, or NULL for a name mp_model_build rejects. */
const char *mp_model_describe(const char *name);
/* MP_OK for a name mp_model_build accepts, else the reason (unknown model
 * and the list, or the wrn-D-K rule it breaks). */
mp_status mp_model_check_name(const char *name);

/* Builders (one file each). */
mp_status mp_model_small_cnn(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_cnn10(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet18(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet34(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet50(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_resnet101(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_mobilenetv2(mp_model *m, int c, int h, int w, int classes);
mp_status mp_model_convnet256(mp_model *m, int c, int h, int w, int classes);
/* Wide ResNets: "wrn" (= wrn-28-10) or "wrn-D-K" -> depth D and widening
 * factor K, or MP_ERR_INVALID_ARG with a message naming the model. */
mp_status mp_wide_resnet_parse(const char *name, int *depth, int *widen);
mp_status mp_model_wide_resnet(mp_model *m, int depth, int widen, int c, int h, int w, int classes);

/* Shared by builders: conv (no bias, the options' stride, padding, groups) +
 * batchnorm named <name>, <name>_bn. */
mp_node mp_conv_bn(mp_graph *g, const char *name, mp_node x, mp_conv_opts o);
/* conv (no bias, padding kernel/2) + batchnorm + relu named <name>,
 * <name>_bn, <name>_relu. */
mp_node mp_conv_bn_relu(mp_graph *g, const char *name, mp_node x, int out_channels, int kernel, int stride);
/* Attach labels + softmax cross-entropy to logits and mark outputs. */
mp_status mp_model_finish(mp_model *m, mp_node logits);

#endif
