/* onednn_common_onednn.c — shared oneDNN engine/stream, descriptors and the
 * state glue of the ops' fast paths (creation with the reference fallback,
 * primitives, execution, destruction).
 * (File name ends in _onednn.c so builds without oneDNN leave it out.) */
#include "ops/onednn_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void destroy_engine(void) {
    if (stream) dnnl_stream_destroy(stream);
    if (engine) dnnl_engine_destroy(engine);
}

static void create_engine(void) {
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        return;
    }
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) stream = NULL;
    atexit(destroy_engine);
}

dnnl_engine_t mp_onednn_engine(void) {
    pthread_once(&once, create_engine);
    return engine;
}

dnnl_stream_t mp_onednn_stream(void) {
    pthread_once(&once, create_engine);
    return stream;
}

_Static_assert(MP_DTYPE_COUNT == 5, "a new dtype needs its row in the oneDNN dtype table");

dnnl_data_type_t mp_onednn_dt(mp_dtype t) {
    static const dnnl_data_type_t rows[MP_DTYPE_COUNT] = {
        [MP_DTYPE_F32] = dnnl_f32, [MP_DTYPE_F16] = dnnl_f16, [MP_DTYPE_BF16] = dnnl_bf16,
        [MP_DTYPE_F64] = dnnl_data_type_undef, /* oneDNN computes no f64: the reference kernels do */
        [MP_DTYPE_I32] = dnnl_s32};
    return (unsigned)t < MP_DTYPE_COUNT ? rows[t] : dnnl_data_type_undef;
}

dnnl_status_t mp_onednn_plain_md(dnnl_memory_desc_t *md, const mp_shape *s, dnnl_data_type_t dt) {
    dnnl_dims_t dims;
    for (int i = 0; i < s->ndim; i++) dims[i] = s->dims[i];
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
    return dnnl_memory_desc_init_by_tag(md, s->ndim, dims, dt, tags[s->ndim]);
}

bool mp_onednn_is_jit(const_dnnl_primitive_desc_t pd) {
    const char *name = mp_onednn_impl_name(pd);
    return strstr(name, "jit") != NULL || strstr(name, "brg") != NULL || strstr(name, "brdgmm") != NULL;
}

const char *mp_onednn_impl_name(const_dnnl_primitive_desc_t pd) {
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success) return "?";
    return name ? name : "?";
}

bool mp_onednn_all_jit(const dnnl_primitive_desc_t *pd, int n) {
    for (int i = 0; i < n; i++)
        if (pd[i] && !mp_onednn_is_jit(pd[i])) return false;
    return true;
}

dnnl_status_t mp_onednn_scratchpad_attr_create(dnnl_primitive_attr_t *attr) {
    dnnl_status_t s = dnnl_primitive_attr_create(attr);
    if (s != dnnl_success) {
        *attr = NULL;
        return s;
    }
    s = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    if (s != dnnl_success) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
    }
    return s;
}

mp_status mp_onednn_user_scratchpad_attr(const mp_op_desc *d, dnnl_primitive_attr_t *attr) {
    if (mp_onednn_scratchpad_attr_create(attr) != dnnl_success)
        return mp_error(MP_ERR_UNSUPPORTED, "%s '%s': oneDNN attributes unavailable", mp_op_lookup(d->kind)->name,
                        d->name);
    return MP_OK;
}

mp_status mp_onednn_create(const mp_op_desc *d, mp_op_info *info, bool training, size_t state_bytes,
                           mp_onednn_build_fn build, void (*destroy)(void *state), void **out) {
    const char *op = mp_op_lookup(d->kind)->name;
    *out = NULL;
    void *s = calloc(1, state_bytes);
    if (!s) return mp_error(MP_ERR_NOMEM, "%s '%s': out of memory", op, d->name);
    dnnl_primitive_attr_t attr = NULL;
    mp_status st = mp_onednn_user_scratchpad_attr(d, &attr);
    if (st == MP_OK && !mp_onednn_engine())
        st = mp_error(MP_ERR_UNSUPPORTED, "%s '%s': no oneDNN CPU engine", op, d->name);
    if (st == MP_OK) st = build(s, d, info, training, attr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == MP_OK) {
        *out = s;
        return MP_OK;
    }
    destroy(s);
    if (st == MP_ERR_UNSUPPORTED) { /* the node keeps the reference kernels */
        mp_clear_error();
        return MP_OK;
    }
    return st;
}

mp_status mp_onednn_make_prim(const mp_op_desc *d, const_dnnl_primitive_desc_t pd, dnnl_primitive_t *prim,
                              dnnl_memory_t *scratch, size_t *scratch_bytes) {
    MP_DNNL_CHECK(d, dnnl_primitive_create(prim, pd));
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (bytes) MP_DNNL_CHECK(d, dnnl_memory_create(scratch, smd, mp_onednn_engine(), DNNL_MEMORY_NONE));
    if (bytes > *scratch_bytes) *scratch_bytes = bytes;
    return MP_OK;
}

void mp_onednn_destroy_prims(dnnl_primitive_t *prim, dnnl_primitive_desc_t *pd, dnnl_memory_t *scratch, int n) {
    for (int k = 0; k < n; k++) {
        if (prim[k]) dnnl_primitive_destroy(prim[k]);
        if (pd[k]) dnnl_primitive_desc_destroy(pd[k]);
        if (scratch[k]) dnnl_memory_destroy(scratch[k]);
    }
}

void mp_onednn_destroy_mems(dnnl_memory_t *mems, int n) {
    for (int i = 0; i < n; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
}

mp_status mp_onednn_execute(const mp_op_call *c, dnnl_primitive_t prim, dnnl_memory_t scratch,
                            dnnl_exec_arg_t *args, int n) {
    if (scratch) {
        MP_DNNL_CHECK(c->desc, dnnl_memory_set_data_handle(scratch, c->workspace));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch};
    }
    MP_DNNL_CHECK(c->desc, dnnl_primitive_execute(prim, mp_onednn_stream(), n, args));
    MP_DNNL_CHECK(c->desc, dnnl_stream_wait(mp_onednn_stream()));
    return MP_OK;
}
