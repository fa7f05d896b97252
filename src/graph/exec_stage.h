/* exec_stage.h — running a node whose tensors are stored in fp16/bf16 or
 * that computes in low precision, on the f32 kernels, the way a tensor core
 * does it: low-precision inputs and weights, fp32 accumulation, output
 * rounded to the storage dtype; gradients stored in their tensor's dtype. */
#ifndef MP_GRAPH_EXEC_STAGE_H
#define MP_GRAPH_EXEC_STAGE_H

#include "graph/plan.h"

/* Bytes of f32 staging node i needs (forward or backward, whichever is more). */
size_t mp_stage_bytes(const mp_plan *p, int i);
/* Cast every trainable parameter used in low precision from its fp32 master. */
void mp_stage_refresh_weights(mp_plan *p);
mp_status mp_stage_forward(mp_plan *p, int i);
/* Backward of node i; taken[k]: input k's gradient already holds a value
 * (add to it); fresh[k]: param k's gradient is unwritten (overwrite it). */
mp_status mp_stage_backward(mp_plan *p, int i, const bool *taken, const bool *fresh);

/* dst += src, n elements of f32 or f64 (gradient accumulation). */
void mp_tensor_add(mp_dtype dt, void *dst, const void *src, int64_t n);

#endif
