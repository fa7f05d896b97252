/* pool2d_onednn.h — private interface between pool2d.c and its oneDNN fast
 * path (pool2d_onednn.c, f32 pooling_v2). The header itself needs no oneDNN
 * include. */
#ifndef MP_OPS_POOL2D_ONEDNN_H
#define MP_OPS_POOL2D_ONEDNN_H

#include "ops/op.h"

typedef struct mp_pool_dnnl mp_pool_dnnl;

/* Build the primitives for these exact shapes (forward; backward when
 * training) and raise info->workspace_bytes for their scratchpads. Max
 * pooling keeps oneDNN's workspace (the argmax) in the saved bytes. *out =
 * NULL with MP_OK when oneDNN has no implementation, or its workspace would
 * not fit the saved bytes: the node then runs the reference kernels. */
mp_status mp_pool_dnnl_create(const mp_op_desc *d, mp_op_info *info, bool training, mp_pool_dnnl **out);
void mp_pool_dnnl_destroy(mp_pool_dnnl *s);
/* True when every primitive is a JIT kernel. */
bool mp_pool_dnnl_is_jit(const mp_pool_dnnl *s);
mp_status mp_pool_dnnl_forward(mp_pool_dnnl *s, const mp_op_call *c);
/* False when prepared for inference. */
bool mp_pool_dnnl_has_backward(const mp_pool_dnnl *s);
mp_status mp_pool_dnnl_backward(mp_pool_dnnl *s, const mp_op_call *c);

#endif
