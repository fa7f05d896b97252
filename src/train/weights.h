/* weights.h — loading parameters from an open safetensors file, shared by
 * weight files (mp_graph_load_weights) and checkpoints read for inference
 * (mp_checkpoint_load_weights). */
#ifndef MP_TRAIN_WEIGHTS_H
#define MP_TRAIN_WEIGHTS_H

#include "graph/graph.h"
#include "io/safetensors.h"

/* As mp_graph_load_weights on the open file f (read from path); tensors
 * whose names start with ignore_prefix (may be NULL) are not "unused". o
 * NULL: every option off, and errors do not suggest mp_weights_opts (the
 * caller, e.g. mp_checkpoint_load_weights, offers none). */
mp_status mp_weights_load_open(mp_graph *g, const mp_st_file *f, const char *path, const mp_weights_opts *o,
                               const char *ignore_prefix);

#endif
