/* conv_pass_onednn.h — the oneDNN primitive passes conv_onednn.c (and its
 * data-gradient form) run: each argument bound to a plain tensor of the
 * call, with a reorder into the primitive's layout in the op's workspace
 * where the layouts differ, created once at prepare() and pointed at the
 * call's tensors when run. Internal to the conv ops. */
#ifndef MP_OPS_CONV_PASS_ONEDNN_H
#define MP_OPS_CONV_PASS_ONEDNN_H

#include <stddef.h>

#include "ops/onednn_common.h"
#include "ops/op.h"

/* One primitive argument bound to a plain tensor of the call. When the
 * primitive wants another layout, `prim` lives in the workspace at `off` and
 * `reorder` copies user -> prim (inputs) or prim -> user (outputs). An
 * optional output (a gradient the caller may not want) always has a spare
 * region at `off`, written instead when the call passes NULL. */
typedef struct {
    int arg; /* DNNL_ARG_* */
    bool output, optional;
    dnnl_memory_t user;       /* plain layout */
    dnnl_memory_t prim;       /* primitive layout; == user without reorder */
    dnnl_primitive_t reorder; /* NULL when the layouts agree */
    dnnl_memory_t reo_scratch;
    size_t off, reo_scratch_off;
} binding;

typedef struct {
    dnnl_primitive_t prim;
    int nb;
    binding b[4];
    dnnl_memory_t scratch; /* NULL when the primitive needs none */
    size_t scratch_off;
} pass;

/* What the check macro needs to name the node and its shapes. */
typedef struct {
    const mp_op_desc *d;
    const mp_op_info *info;
} conv_ctx;

/* MP_DNNL_CHECK with the shapes in the message. */
#define CONV_CK(x, call)                                                       \
    do {                                                                       \
        dnnl_status_t conv_s_ = (call);                                        \
        if (conv_s_ != dnnl_success) return mp_conv_fail((x), #call, conv_s_); \
    } while (0)

/* The error of a failed oneDNN call, naming the node and its shapes. */
mp_status mp_conv_fail(const conv_ctx *x, const char *call, dnnl_status_t s);

/* Destroys what pass p created (safe on a zeroed pass). */
void mp_conv_pass_release(pass *p);

/* Reserves bytes (rounded up to 64) at *cursor; returns their offset. */
size_t mp_conv_reserve(size_t *cursor, size_t bytes);

/* Binds argument `arg` of pass `p` (primitive descriptor pd, queried with
 * q, qidx) to a plain tensor of layout user_md. share_off != SIZE_MAX places the
 * primitive-layout copy there instead of reserving a new region. */
mp_status mp_conv_bind(const conv_ctx *x, pass *p, const_dnnl_primitive_desc_t pd, dnnl_query_t q, int qidx, int arg,
                       bool output, bool optional, const dnnl_memory_desc_t *user_md, size_t *cursor,
                       size_t share_off);

/* The primitive of pass p and its scratchpad region. */
mp_status mp_conv_finish_pass(const conv_ctx *x, pass *p, const_dnnl_primitive_desc_t pd, size_t *cursor);

/* Primitive descriptor of one pass; *fallback set when oneDNN has none. */
mp_status mp_conv_make_pd(const conv_ctx *x, const_dnnl_op_desc_t od, const_dnnl_primitive_desc_t hint,
                          dnnl_primitive_desc_t *pd, bool *fallback);

/* Runs pass p on the call's tensors ptr[i] (one per binding, NULL for an
 * unwanted optional output); bit i of skip_in skips input i's reorder
 * (its primitive-layout copy is already in the workspace). */
mp_status mp_conv_run_pass(const conv_ctx *x, pass *p, void *const *ptr, char *ws, unsigned skip_in);

#endif
