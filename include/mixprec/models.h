/** @file mixprec/models.h
 * The model zoo: ready-made classifiers for any image shape and class count
 * (the seed articles' CNNs, ResNets, MobileNetV2, wide ResNets). */
#ifndef MIXPREC_MODELS_H
#define MIXPREC_MODELS_H

#include "mixprec/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A classifier: its graph and the nodes a trainer needs. */
typedef struct {
    mp_graph *g;     /**< the graph (mp_model_free destroys it) */
    mp_node input;   /**< the image input */
    mp_node labels;  /**< the label input */
    mp_node logits;  /**< the class logits (N, K) */
    mp_node loss;    /**< softmax cross-entropy of logits and labels */
} mp_model;

/** Build model `name` (see mp_model_list) for (c, h, w) inputs and `classes`
 * outputs; on error m->g is NULL and the message names the model. A name
 * ending in ".onnx" is a file imported with mp_model_from_onnx (mixprec/onnx.h;
 * c, h, w fill the dims its input leaves dynamic), whose input shape and
 * class count must then be (c, h, w) and `classes`; for an .onnx file only,
 * `classes` 0 takes the file's own class count (its output width) unchecked. */
MP_API mp_status mp_model_build(const char *name, int c, int h, int w, int classes, mp_model *m);
/** Frees the model's graph (a zeroed model is fine; NULL does nothing). */
MP_API void mp_model_free(mp_model *m);
/** "small, cnn10, resnet18, ..." */
MP_API const char *mp_model_list(void);
/** One line on the model, or NULL for a name mp_model_build rejects. */
MP_API const char *mp_model_describe(const char *name);
/** MP_OK for a name mp_model_build accepts (for a .onnx name: a readable
 * regular file), else the reason. */
MP_API mp_status mp_model_check_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_MODELS_H */
