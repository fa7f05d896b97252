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

static mp_status build(void *state, const mp_op_desc *d, mp_op_info *info, bool training,
                       const_dnnl_primitive_attr_t attr) {
    mp_pool_dnnl *s = state;
    dnnl_engine_t eng = mp_onednn_engine();
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
    MP_DNNL_PD_TRY(d, dnnl_pooling_v2_forward_desc_init(&pdesc,
                                                        training ? dnnl_forward_training : dnnl_forward_inference,
                                                        alg, &x, &y, strides, kernel, dil, pad, pad));
    MP_DNNL_PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_FWD], &pdesc, attr, eng, NULL));
    MP_TRY(mp_onednn_make_prim(d, s->pd[P_FWD], &s->prim[P_FWD], &s->scratch[P_FWD], &scratch));
    if (training) {
        MP_DNNL_PD_TRY(d, dnnl_pooling_v2_backward_desc_init(&pdesc, alg, &x, &y, strides, kernel, dil, pad, pad));
        MP_DNNL_PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_BWD], &pdesc, attr, eng, s->pd[P_FWD]));
        MP_TRY(mp_onednn_make_prim(d, s->pd[P_BWD], &s->prim[P_BWD], &s->scratch[P_BWD], &scratch));
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

static void destroy_state(void *s) { mp_pool_dnnl_destroy(s); }

mp_status mp_pool_dnnl_create(const mp_op_desc *d, mp_op_info *info, bool training, mp_pool_dnnl **out) {
    void *s = NULL;
    mp_status st = mp_onednn_create(d, info, training, sizeof(mp_pool_dnnl), build, destroy_state, &s);
    *out = s;
    return st;
}

void mp_pool_dnnl_destroy(mp_pool_dnnl *s) {
    if (!s) return;
    mp_onednn_destroy_prims(s->prim, s->pd, s->scratch, P_COUNT);
    dnnl_memory_t mems[] = {s->x, s->y, s->dx, s->dy, s->ws};
    mp_onednn_destroy_mems(mems, 5);
    free(s);
}

bool mp_pool_dnnl_has_backward(const mp_pool_dnnl *s) { return s->prim[P_BWD] != NULL; }

mp_status mp_pool_dnnl_forward(mp_pool_dnnl *s, const mp_op_call *c) {
    dnnl_exec_arg_t args[4];
    int n = 0;
    MP_DNNL_BIND(c, s->x, c->in[0].data);
    MP_DNNL_BIND(c, s->y, c->out.data);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, s->x};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, s->y};
    if (s->ws) {
        MP_DNNL_BIND(c, s->ws, c->saved);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, s->ws};
    }
    return mp_onednn_execute(c, s->prim[P_FWD], s->scratch[P_FWD], args, n);
}

mp_status mp_pool_dnnl_backward(mp_pool_dnnl *s, const mp_op_call *c) {
    dnnl_exec_arg_t args[4];
    int n = 0;
    MP_DNNL_BIND(c, s->dy, c->d_out.data);
    MP_DNNL_BIND(c, s->dx, c->d_in[0].data);
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, s->dy};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, s->dx};
    if (s->ws) {
        MP_DNNL_BIND(c, s->ws, c->saved);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, s->ws};
    }
    return mp_onednn_execute(c, s->prim[P_BWD], s->scratch[P_BWD], args, n);
}

bool mp_pool_dnnl_is_jit(const mp_pool_dnnl *s) {
    return mp_onednn_all_jit(s->pd, P_COUNT);
}
