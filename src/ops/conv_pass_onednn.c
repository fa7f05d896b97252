/* conv_pass_onednn.c — see conv_pass_onednn.h. */
#include "ops/conv_pass_onednn.h"

#include <stdint.h>

mp_status mp_conv_fail(const conv_ctx *x, const char *call, dnnl_status_t s) {
    char a[64], w[64], o[64];
    return mp_error(MP_ERR_INTERNAL,
                    "%s '%s': oneDNN call %s failed (status %d; input %s, weight %s, output %s)",
                    mp_op_lookup(x->d->kind)->name, x->d->name ? x->d->name : "?", call, (int)s,
                    mp_shape_str(&x->info->in[0], a, sizeof a),
                    mp_shape_str(&x->info->params[0].shape, w, sizeof w),
                    mp_shape_str(&x->info->out, o, sizeof o));
}

static void binding_release(binding *b) {
    if (b->reorder) dnnl_primitive_destroy(b->reorder);
    if (b->reo_scratch) dnnl_memory_destroy(b->reo_scratch);
    if (b->prim && b->prim != b->user) dnnl_memory_destroy(b->prim);
    if (b->user) dnnl_memory_destroy(b->user);
}

void mp_conv_pass_release(pass *p) {
    for (int i = 0; i < p->nb; i++) binding_release(&p->b[i]);
    if (p->scratch) dnnl_memory_destroy(p->scratch);
    if (p->prim) dnnl_primitive_destroy(p->prim);
}


size_t mp_conv_reserve(size_t *cursor, size_t bytes) {
    size_t off = *cursor;
    *cursor += MP_ALIGN64(bytes);
    return off;
}

mp_status mp_conv_bind(const conv_ctx *x, pass *p, const_dnnl_primitive_desc_t pd, dnnl_query_t q,
                      int qidx, int arg, bool output, bool optional, const dnnl_memory_desc_t *user_md,
                      size_t *cursor, size_t share_off) {
    dnnl_engine_t eng = mp_onednn_engine();
    MP_ASSERT(p->nb < 4);
    binding *b = &p->b[p->nb++];
    b->arg = arg;
    b->output = output;
    b->optional = optional;
    const dnnl_memory_desc_t *prim_md = dnnl_primitive_desc_query_md(pd, q, qidx);
    MP_ASSERT(prim_md);
    CONV_CK(x, dnnl_memory_create(&b->user, user_md, eng, DNNL_MEMORY_NONE));
    if (dnnl_memory_desc_equal(prim_md, user_md)) {
        b->prim = b->user;
        if (optional) b->off = mp_conv_reserve(cursor, dnnl_memory_desc_get_size(user_md));
        return MP_OK;
    }
    CONV_CK(x, dnnl_memory_create(&b->prim, prim_md, eng, DNNL_MEMORY_NONE));
    b->off = share_off != SIZE_MAX ? share_off : mp_conv_reserve(cursor, dnnl_memory_desc_get_size(prim_md));
    dnnl_primitive_attr_t attr;
    CONV_CK(x, mp_onednn_scratchpad_attr_create(&attr));
    dnnl_primitive_desc_t rpd;
    dnnl_status_t s = output ? dnnl_reorder_primitive_desc_create(&rpd, prim_md, eng, user_md, eng, attr)
                             : dnnl_reorder_primitive_desc_create(&rpd, user_md, eng, prim_md, eng, attr);
    dnnl_primitive_attr_destroy(attr);
    CONV_CK(x, s);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        s = dnnl_memory_create(&b->reo_scratch, smd, eng, DNNL_MEMORY_NONE);
        b->reo_scratch_off = mp_conv_reserve(cursor, dnnl_memory_desc_get_size(smd));
    }
    if (s == dnnl_success) s = dnnl_primitive_create(&b->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    CONV_CK(x, s);
    return MP_OK;
}

mp_status mp_conv_finish_pass(const conv_ctx *x, pass *p, const_dnnl_primitive_desc_t pd, size_t *cursor) {
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        CONV_CK(x, dnnl_memory_create(&p->scratch, smd, mp_onednn_engine(), DNNL_MEMORY_NONE));
        p->scratch_off = mp_conv_reserve(cursor, dnnl_memory_desc_get_size(smd));
    }
    CONV_CK(x, dnnl_primitive_create(&p->prim, pd));
    return MP_OK;
}

mp_status mp_conv_make_pd(const conv_ctx *x, const_dnnl_op_desc_t od, const_dnnl_primitive_desc_t hint,
                         dnnl_primitive_desc_t *pd, bool *fallback) {
    dnnl_primitive_attr_t attr;
    CONV_CK(x, mp_onednn_scratchpad_attr_create(&attr));
    dnnl_status_t s = dnnl_primitive_desc_create(pd, od, attr, mp_onednn_engine(), hint);
    dnnl_primitive_attr_destroy(attr);
    *pd = s == dnnl_success ? *pd : NULL;
    if (s == dnnl_unimplemented) {
        *fallback = true;
        return MP_OK;
    }
    CONV_CK(x, s);
    return MP_OK;
}

mp_status mp_conv_run_pass(const conv_ctx *x, pass *p, void *const *ptr, char *ws, unsigned skip_in) {
    dnnl_stream_t strm = mp_onednn_stream();
    dnnl_exec_arg_t args[5];
    int na = 0;
    for (int i = 0; i < p->nb; i++) {
        binding *b = &p->b[i];
        MP_ASSERT(ptr[i] || b->optional);
        if (!b->reorder) {
            CONV_CK(x, dnnl_memory_set_data_handle(b->user, ptr[i] ? ptr[i] : ws + b->off));
        } else {
            CONV_CK(x, dnnl_memory_set_data_handle(b->prim, ws + b->off));
            if (ptr[i]) CONV_CK(x, dnnl_memory_set_data_handle(b->user, ptr[i]));
            if (b->reo_scratch)
                CONV_CK(x, dnnl_memory_set_data_handle(b->reo_scratch, ws + b->reo_scratch_off));
            if (!b->output && !(skip_in >> i & 1)) {
                dnnl_exec_arg_t ra[3] = {{DNNL_ARG_FROM, b->user}, {DNNL_ARG_TO, b->prim},
                                         {DNNL_ARG_SCRATCHPAD, b->reo_scratch}};
                CONV_CK(x, dnnl_primitive_execute(b->reorder, strm, b->reo_scratch ? 3 : 2, ra));
            }
        }
        args[na++] = (dnnl_exec_arg_t){b->arg, b->prim};
    }
    if (p->scratch) {
        CONV_CK(x, dnnl_memory_set_data_handle(p->scratch, ws + p->scratch_off));
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratch};
    }
    CONV_CK(x, dnnl_primitive_execute(p->prim, strm, na, args));
    for (int i = 0; i < p->nb; i++) {
        binding *b = &p->b[i];
        if (!b->output || !b->reorder || !ptr[i]) continue;
        dnnl_exec_arg_t ra[3] = {{DNNL_ARG_FROM, b->prim}, {DNNL_ARG_TO, b->user},
                                 {DNNL_ARG_SCRATCHPAD, b->reo_scratch}};
        CONV_CK(x, dnnl_primitive_execute(b->reorder, strm, b->reo_scratch ? 3 : 2, ra));
    }
    CONV_CK(x, dnnl_stream_wait(strm));
    return MP_OK;
}

