/* linear_onednn.h — private interface between linear.c and its oneDNN fast
 * path (linear_onednn.c, f32 inner_product). Only used under MP_HAVE_ONEDNN;
 * the header itself needs no oneDNN include. */
#ifndef MP_OPS_LINEAR_ONEDNN_H
#define MP_OPS_LINEAR_ONEDNN_H

#include "ops/op.h"

typedef struct mp_linear_dnnl mp_linear_dnnl;

/* Build the primitives for these exact shapes (forward; backward data and
 * weights when training) and raise info->workspace_bytes for their
 * scratchpads. *out = NULL with MP_OK when oneDNN has no implementation: the
 * node then runs the reference kernels. */
mp_status mp_linear_dnnl_create(const mp_op_desc *d, mp_op_info *info, bool training,
                                mp_linear_dnnl **out);
void mp_linear_dnnl_destroy(mp_linear_dnnl *s);
mp_status mp_linear_dnnl_forward(mp_linear_dnnl *s, const mp_op_call *c);
/* False when prepared for inference: backward then uses the reference. */
bool mp_linear_dnnl_has_backward(const mp_linear_dnnl *s);
mp_status mp_linear_dnnl_backward(mp_linear_dnnl *s, const mp_op_call *c);

#endif
