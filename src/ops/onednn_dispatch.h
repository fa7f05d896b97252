/* onednn_dispatch.h — when a node runs its op's oneDNN fast path: the two
 * tests shared by the ops that have one (conv2d, conv_transpose2d, linear,
 * batchnorm2d, pool2d). Includes no oneDNN header, so op files include it
 * with and without oneDNN; the calls into a fast path stay under
 * MP_HAVE_ONEDNN. */
#ifndef MP_OPS_ONEDNN_DISPATCH_H
#define MP_OPS_ONEDNN_DISPATCH_H

#include "ops/op.h"

/* prepare(): whether to build oneDNN primitives. Only for f32, and not for
 * MP_IMPL_REF (MP_IMPL_AUTO may still drop them for the reference). */
static inline bool mp_onednn_wanted(mp_dtype dt, mp_impl impl) {
    return impl != MP_IMPL_REF && dt == MP_DTYPE_F32;
}

/* forward()/backward(): whether this call runs through the oneDNN
 * primitives prepare() built (f32, or bf16 where an op prepared bf16). */
static inline bool mp_onednn_use(const mp_op_call *c) {
    return c->state && c->impl != MP_IMPL_REF && (c->out.dtype == MP_DTYPE_F32 || c->out.dtype == MP_DTYPE_BF16);
}

#endif
