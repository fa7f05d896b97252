/* onednn_common.h — the one oneDNN CPU engine and stream shared by every op's
 * fast path, check macros that turn a dnnl_status_t into mp_status naming the
 * op, the node and the call, and the glue the ops' oneDNN states share:
 * creation with a user-scratchpad attribute and the reference fallback,
 * primitives with their scratchpads, execution and destruction.
 * Only *_onednn.c files include this. */
#ifndef MP_OPS_ONEDNN_COMMON_H
#define MP_OPS_ONEDNN_COMMON_H

#include <oneapi/dnnl/dnnl.h>

#include "ops/op.h"

/* Created on first use (thread-safe), destroyed at exit. NULL on failure. */
dnnl_engine_t mp_onednn_engine(void);
dnnl_stream_t mp_onednn_stream(void);
/* A memory descriptor for a plain row-major tensor of dims (1-4 dims). */
dnnl_status_t mp_onednn_plain_md(dnnl_memory_desc_t *md, const mp_shape *s, dnnl_data_type_t dt);
dnnl_data_type_t mp_onednn_dt(mp_dtype t);
/* Implementation name of a primitive descriptor ("brg:avx512_core_amx", ...). */
const char *mp_onednn_impl_name(const_dnnl_primitive_desc_t pd);
/* True when pd runs a JIT-generated kernel (not a generic reference one). */
bool mp_onednn_is_jit(const_dnnl_primitive_desc_t pd);
/* True when every non-NULL pd[0..n) runs a JIT-generated kernel. */
bool mp_onednn_all_jit(const dnnl_primitive_desc_t *pd, int n);

/* Return mp_error(err, "<op> '<node>': " fmt " (status N)", text) when call
 * does not return dnnl_success; fmt has one %s for text (the call's source). */
#define MP_DNNL_RETURN_IF_FAILED_(err, fmt, desc, call, text)                            \
    do {                                                                                 \
        dnnl_status_t mp_dnnl_s_ = (call);                                               \
        if (mp_dnnl_s_ != dnnl_success)                                                  \
            return mp_error((err), "%s '%s': " fmt " (status %d)",                       \
                            mp_op_lookup((desc)->kind)->name, (desc)->name, (text),      \
                            (int)mp_dnnl_s_);                                            \
    } while (0)

/* A oneDNN call that must succeed (MP_ERR_INTERNAL). */
#define MP_DNNL_CHECK(desc, call) \
    MP_DNNL_RETURN_IF_FAILED_(MP_ERR_INTERNAL, "oneDNN call %s failed", desc, call, #call)

/* A call that creates a descriptor: failing means oneDNN has no fast path
 * here (MP_ERR_UNSUPPORTED: the node runs the reference kernels). */
#define MP_DNNL_PD_TRY(desc, call) \
    MP_DNNL_RETURN_IF_FAILED_(MP_ERR_UNSUPPORTED, "oneDNN: %s failed", desc, call, #call)

/* Point memory object m at ptr, a tensor of call c. */
#define MP_DNNL_BIND(c, m, ptr) MP_DNNL_CHECK((c)->desc, dnnl_memory_set_data_handle((m), (ptr)))

/* A primitive attribute with scratchpad mode user (the op's workspace holds
 * the scratchpad). On failure *attr is NULL. */
dnnl_status_t mp_onednn_scratchpad_attr_create(dnnl_primitive_attr_t *attr);
/* The same, failing with MP_ERR_UNSUPPORTED naming the node. */
mp_status mp_onednn_user_scratchpad_attr(const mp_op_desc *d, dnnl_primitive_attr_t *attr);

/* Fills a zeroed state of an op's fast path for these exact shapes, creating
 * every primitive descriptor with attr. MP_ERR_UNSUPPORTED: no fast path. */
typedef mp_status (*mp_onednn_build_fn)(void *state, const mp_op_desc *d, mp_op_info *info, bool training,
                                        const_dnnl_primitive_attr_t attr);
/* Allocates a zeroed state of state_bytes and builds it. *out = NULL with
 * MP_OK when there is no engine or build() fails with MP_ERR_UNSUPPORTED:
 * the node then keeps the reference kernels. destroy() frees a state in any
 * stage of building. */
mp_status mp_onednn_create(const mp_op_desc *d, mp_op_info *info, bool training, size_t state_bytes,
                           mp_onednn_build_fn build, void (*destroy)(void *state), void **out);

/* The primitive of pd and, when pd wants a scratchpad, a memory object
 * *scratch for it (else *scratch is left alone: NULL in a zeroed state);
 * raises *scratch_bytes to the scratchpad size. */
mp_status mp_onednn_make_prim(const mp_op_desc *d, const_dnnl_primitive_desc_t pd, dnnl_primitive_t *prim,
                              dnnl_memory_t *scratch, size_t *scratch_bytes);
/* Destroys the non-NULL prim[i], pd[i], scratch[i] for i in [0, n). */
void mp_onednn_destroy_prims(dnnl_primitive_t *prim, dnnl_primitive_desc_t *pd, dnnl_memory_t *scratch, int n);
/* Destroys the non-NULL mems[0..n). */
void mp_onednn_destroy_mems(dnnl_memory_t *mems, int n);

/* Executes prim with args[0..n) on the shared stream and waits. A non-NULL
 * scratch is bound to c->workspace and appended to args, which must have room
 * for one more argument. */
mp_status mp_onednn_execute(const mp_op_call *c, dnnl_primitive_t prim, dnnl_memory_t scratch,
                            dnnl_exec_arg_t *args, int n);

#endif
