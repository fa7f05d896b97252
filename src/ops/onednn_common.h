/* onednn_common.h — the one oneDNN CPU engine and stream shared by every op's
 * fast path, and a check macro that turns a dnnl_status_t into mp_status
 * naming the op, the node and the call. Only *_onednn.c files include this. */
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

#define MP_DNNL_CHECK(desc, call)                                                      \
    do {                                                                               \
        dnnl_status_t mp_dnnl_s_ = (call);                                             \
        if (mp_dnnl_s_ != dnnl_success)                                                \
            return mp_error(MP_ERR_INTERNAL, "%s '%s': oneDNN call %s failed (status %d)", \
                            mp_op_lookup((desc)->kind)->name, (desc)->name, #call,    \
                            (int)mp_dnnl_s_);                                          \
    } while (0)

#endif
