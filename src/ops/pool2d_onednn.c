/* pool2d_onednn.c — oneDNN fast path of maxpool2d / avgpool2d (f32):
 * pooling_v2 (max; avg_include_padding) on plain NCHW tensors. Training max
 * pooling writes oneDNN's workspace (its argmax) into the node's saved
 * bytes, which backward reads. */
#include <stdlib.h>

#include "ops/onednn_common.h"
#include "ops/pool2d_onednn.h"

enum { P_FWD, P_BWD, P_COUNT };

struct mp_pool_dnnl {
    bool max;
    dnnl_primitive_desc_t pd[P_COUNT];
    dnnl_primitive_t prim[P_COUNT];
    dnnl_memory_t scratch[P_COUNT]; /* NULL when the primitive needs none */
    dnnl_memory_t x, y, dx, dy, ws; /* handles set per call; ws NULL unless max + training */
};

#define PD_TRY(d, call)                                                                   \
    do {                                                                                  \
        dnnl_status_t pd_s_ = (call);                                                     \
        if (pd_s_ != dnnl_success)                                                        \
            return mp_error(MP_ERR_UNSUPPORTED, "%s '%s': oneDNN: %s failed (status %d)", \
                            mp_op_lookup((d)->kind)->name, (d)->name, #call, (int)pd_s_); \
    } while (0)

static mp_status make_prim(const mp_op_desc *d, mp_pool_dnnl *s, int k, size_t *scratch_bytes) {
    MP_DNNL_CHECK(d, dnnl_primitive_create(&s->prim[k], s->pd[k]));
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(s->pd[k], dnnl_query_scratchpad_md, 0);
    size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (bytes) MP_DNNL_CHECK(d, dnnl_memory_create(&s->scratch[k], smd, mp_onednn_engine(), DNNL_MEMORY_NONE));
    if (bytes > *scratch_bytes) *scratch_bytes = bytes;
    return MP_OK;
}

static mp_status build(mp_pool_dnnl *s, const mp_op_desc *d, mp_op_info *info, bool training,
                       const_dnnl_primitive_attr_t attr) {
    dnnl_engine_t eng = mp_onednn_engine();
    if (!eng)
        return mp_error(MP_ERR_UNSUPPORTED, "%s '%s': no oneDNN CPU engine", mp_op_lookup(d->kind)->name, d->name);
    s->max = d->kind == MP_OP_MAXPOOL2D;
    dnnl_memory_desc_t x, y;
    MP_DNNL_CHECK(d, mp_onednn_plain_md(&x, &info->in[0], dnnl_f32)); // (N, C, H, W)
    MP_DNNL_CHECK(d, mp_onednn_plain_md(&y, &info->out, dnnl_f32));   // (N, C, OH, OW)
    const mp_pool_opts *o = &d->attr.pool;
    /* symmetric padding: (H + 2p - k) / s + 1 is the output size in both conventions */
    dnnl_dims_t strides = {o->stride, o->stride}, kernel = {o->kernel, o->kernel}, dil = {0, 0},
                pad = {o->padding, o->padding};
    dnnl_alg_kind_t alg = s->max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;

    size_t scratch = 0;
    dnnl_pooling_v2_desc_t pdesc;
    PD_TRY(d, dnnl_pooling_v2_forward_desc_init(&pdesc, training ? dnnl_forward_training : dnnl_forward_inference,
                                                alg, &x, &y, strides, kernel, dil, pad, pad));
    PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_FWD], &pdesc, attr, eng, NULL));
    MP_TRY(make_prim(d, s, P_FWD, &scratch));
    if (training) {
        PD_TRY(d, dnnl_pooling_v2_backward_desc_init(&pdesc, alg, &x, &y, strides, kernel, dil, pad, pad));
        PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_BWD], &pdesc, attr, eng, s->pd[P_FWD]));
        MP_TRY(make_prim(d, s, P_BWD, &scratch));
        const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(s->pd[P_FWD], dnnl_query_workspace_md, 0);
        size_t wbytes = wmd ? dnnl_memory_desc_get_size(wmd) : 0;
        if (wbytes > info->saved_bytes)
            return mp_error(MP_ERR_UNSUPPORTED, "%s '%s': oneDNN workspace of %zu bytes exceeds the saved %zu",
                            mp_op_lookup(d->kind)->name, d->name, wbytes, info->saved_bytes);
        if (wbytes) MP_DNNL_CHECK(d, dnnl_memory_create(&s->ws, wmd, eng, DNNL_MEMORY_NONE));
    }
    dnnl_memory_t *mems[] = {&s->x, &s->y, &s->dx, &s->dy};
    const dnnl_memory_desc_t *mds[] = {&x, &y, &x, &y};
    for (int i = 0; i < 4; i++) MP_DNNL_CHECK(d, dnnl_memory_create(mems[i], mds[i], eng, DNNL_MEMORY_NONE));
    if (scratch > info->workspace_bytes) info->workspace_bytes = scratch;
    return MP_OK;
}

mp_status mp_pool_dnnl_create(const mp_op_desc *d, mp_op_info *info, bool training, mp_pool_dnnl **out) {
    *out = NULL;
    mp_pool_dnnl *s = calloc(1, sizeof *s);
    if (!s) return mp_error(MP_ERR_NOMEM, "%s '%s': out of memory", mp_op_lookup(d->kind)->name, d->name);
    dnnl_primitive_attr_t attr = NULL;
    mp_status st = MP_OK;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
        st = mp_error(MP_ERR_UNSUPPORTED, "%s '%s': oneDNN attributes unavailable", mp_op_lookup(d->kind)->name,
                      d->name);
    if (st == MP_OK) st = build(s, d, info, training, attr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == MP_OK) {
        *out = s;
        return MP_OK;
    }
    mp_pool_dnnl_destroy(s);
    if (st == MP_ERR_UNSUPPORTED) { /* the node keeps the reference kernels */
        mp_clear_error();
        return MP_OK;
    }
    return st;
}

void mp_pool_dnnl_destroy(mp_pool_dnnl *s) {
    if (!s) return;
    for (int k = 0; k < P_COUNT; k++) {
        if (s->prim[k]) dnnl_primitive_destroy(s->prim[k]);
        if (s->pd[k]) dnnl_primitive_desc_destroy(s->pd[k]);
        if (s->scratch[k]) dnnl_memory_destroy(s->scratch[k]);
    }
    dnnl_memory_t mems[] = {s->x, s->y, s->dx, s->dy, s->ws};
    for (int i = 0; i < 5; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    free(s);
}

bool mp_pool_dnnl_has_backward(const mp_pool_dnnl *s) { return s->prim[P_BWD] != NULL; }

static mp_status run(const mp_op_call *c, mp_pool_dnnl *s, int k, dnnl_exec_arg_t *args, int n) {
    if (s->scratch[k]) {
        MP_DNNL_CHECK(c->desc, dnnl_memory_set_data_handle(s->scratch[k], c->workspace));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, s->scratch[k]};
    }
    MP_DNNL_CHECK(c->desc, dnnl_primitive_execute(s->prim[k], mp_onednn_stream(), n, args));
    MP_DNNL_CHECK(c->desc, dnnl_stream_wait(mp_onednn_stream()));
    return MP_OK;
}

#define BIND(m, ptr) MP_DNNL_CHECK(c->desc, dnnl_memory_set_data_handle((m), (ptr)))

mp_status mp_pool_dnnl_forward(mp_pool_dnnl *s, const mp_op_call *c) {
    dnnl_exec_arg_t args[4];
    int n = 0;
    BIND(s->x, c->in[0].data);
    BIND(s->y, c->out.data);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, s->x};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, s->y};
    if (s->ws) {
        BIND(s->ws, c->saved);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, s->ws};
    }
    return run(c, s, P_FWD, args, n);
}

mp_status mp_pool_dnnl_backward(mp_pool_dnnl *s, const mp_op_call *c) {
    dnnl_exec_arg_t args[4];
    int n = 0;
    BIND(s->dy, c->d_out.data);
    BIND(s->dx, c->d_in[0].data);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, s->dy};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, s->dx};
    if (s->ws) {
        BIND(s->ws, c->saved);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, s->ws};
    }
    return run(c, s, P_BWD, args, n);
}

bool mp_pool_dnnl_is_jit(const mp_pool_dnnl *s) {
    for (int i = 0; i < P_COUNT; i++)
        if (s->pd[i] && !mp_onednn_is_jit(s->pd[i])) return false;
    return true;
}
