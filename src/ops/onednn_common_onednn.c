/* onednn_common_onednn.c — shared oneDNN engine/stream and descriptors.
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

dnnl_data_type_t mp_onednn_dt(mp_dtype t) {
    switch (t) {
    case MP_DTYPE_F32: return dnnl_f32;
    case MP_DTYPE_F16: return dnnl_f16;
    case MP_DTYPE_BF16: return dnnl_bf16;
    case MP_DTYPE_I32: return dnnl_s32;
    default: return dnnl_data_type_undef;
    }
}

dnnl_status_t mp_onednn_plain_md(dnnl_memory_desc_t *md, const mp_shape *s, dnnl_data_type_t dt) {
    dnnl_dims_t dims;
    for (int i = 0; i < s->ndim; i++) dims[i] = s->dims[i];
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
    return dnnl_memory_desc_init_by_tag(md, s->ndim, dims, dt, tags[s->ndim]);
}

bool mp_onednn_is_jit(const_dnnl_primitive_desc_t pd) {
    const char *name = mp_onednn_impl_name(pd);
    return strstr(name, "jit") != NULL || strstr(name, "brg") != NULL;
}

const char *mp_onednn_impl_name(const_dnnl_primitive_desc_t pd) {
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success) return "?";
    return name ? name : "?";
}
