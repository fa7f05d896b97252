/* batchnorm2d_onednn.c — oneDNN fast path of batchnorm2d (f32):
 * batch_normalization with scale and shift on plain NCHW / NC tensors.
 * Training: forward_training writes the batch mean and biased variance into
 * the saved bytes, a small loop here updates the running statistics and
 * fills the double mean/invstd; backward computes diff_src, diff_scale and
 * diff_shift. Inference: use_global_stats with the running statistics. */
#include <math.h>
#include <stdlib.h>

#include "ops/batchnorm2d_onednn.h"
#include "ops/onednn_common.h"

enum { P_FWD, P_BWD, P_COUNT };
enum { W_GAMMA, W_BETA, W_RMEAN, W_RVAR };

struct mp_bn_dnnl {
    bool training;
    int C;
    double count; /* N*H*W values per channel */
    dnnl_primitive_desc_t pd[P_COUNT];
    dnnl_primitive_t prim[P_COUNT];
    dnnl_memory_t scratch[P_COUNT]; /* NULL when the primitive needs none */
    dnnl_memory_t x, y, dx, dy;     /* handles set per call */
    dnnl_memory_t scale, shift, mean, var, dscale, dshift;
    size_t sink_off; /* workspace offset of diff_scale/diff_shift sinks */
};

static mp_status build(void *state, const mp_op_desc *d, mp_op_info *info, bool training,
                       const_dnnl_primitive_attr_t attr) {
    mp_bn_dnnl *s = state;
    dnnl_engine_t eng = mp_onednn_engine();
    const mp_shape *xs = &info->in[0];
    s->training = training;
    s->C = xs->dims[1];
    s->count = (double)xs->dims[0] * (xs->ndim == 4 ? (double)xs->dims[2] * xs->dims[3] : 1.0);
    dnnl_memory_desc_t x, c1;
    MP_DNNL_CHECK(d, mp_onednn_plain_md(&x, xs, dnnl_f32));                             // (N, C, H, W) / (N, C)
    MP_DNNL_CHECK(d, mp_onednn_plain_md(&c1, &(mp_shape){1, {s->C, 1, 1, 1}}, dnnl_f32)); // (C)
    float eps = d->attr.bn.eps;
    unsigned flags = dnnl_use_scale | dnnl_use_shift;

    size_t scratch = 0;
    dnnl_batch_normalization_desc_t bd;
    if (training) {
        MP_DNNL_PD_TRY(d, dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_training, &x, eps, flags));
        MP_DNNL_PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_FWD], &bd, attr, eng, NULL));
        MP_TRY(mp_onednn_make_prim(d, s->pd[P_FWD], &s->prim[P_FWD], &s->scratch[P_FWD], &scratch));
        MP_DNNL_PD_TRY(d, dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &x, &x, eps, flags));
        MP_DNNL_PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_BWD], &bd, attr, eng, s->pd[P_FWD]));
        MP_TRY(mp_onednn_make_prim(d, s->pd[P_BWD], &s->prim[P_BWD], &s->scratch[P_BWD], &scratch));
    } else {
        MP_DNNL_PD_TRY(d, dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_inference, &x, eps,
                                                                     flags | dnnl_use_global_stats));
        MP_DNNL_PD_TRY(d, dnnl_primitive_desc_create(&s->pd[P_FWD], &bd, attr, eng, NULL));
        MP_TRY(mp_onednn_make_prim(d, s->pd[P_FWD], &s->prim[P_FWD], &s->scratch[P_FWD], &scratch));
    }
    /* scale/shift/mean/variance are 1-D (C) f32 in oneDNN 2.6 */
    const int args[] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (int i = 0; i < 4; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(s->pd[P_FWD], dnnl_query_exec_arg_md, args[i]);
        if (!md || !dnnl_memory_desc_equal(md, &c1))
            return mp_error(MP_ERR_UNSUPPORTED, "batchnorm2d '%s': oneDNN wants another layout for argument %d",
                            d->name, args[i]);
    }
    dnnl_memory_t *mems[] = {&s->x,     &s->y,    &s->dx,  &s->dy,     &s->scale,
                             &s->shift, &s->mean, &s->var, &s->dscale, &s->dshift};
    for (int i = 0; i < 10; i++)
        MP_DNNL_CHECK(d, dnnl_memory_create(mems[i], i < 4 ? &x : &c1, eng, DNNL_MEMORY_NONE));

    s->sink_off = MP_ALIGN64(scratch);
    size_t ws = s->sink_off + (training ? 2 * (size_t)s->C * sizeof(float) : 0);
    if (ws > info->workspace_bytes) info->workspace_bytes = ws;
    return MP_OK;
}

static void destroy_state(void *s) { mp_bn_dnnl_destroy(s); }

mp_status mp_bn_dnnl_create(const mp_op_desc *d, mp_op_info *info, bool training, mp_bn_dnnl **out) {
    void *s = NULL;
    mp_status st = mp_onednn_create(d, info, training, sizeof(mp_bn_dnnl), build, destroy_state, &s);
    *out = s;
    return st;
}

void mp_bn_dnnl_destroy(mp_bn_dnnl *s) {
    if (!s) return;
    mp_onednn_destroy_prims(s->prim, s->pd, s->scratch, P_COUNT);
    dnnl_memory_t mems[] = {s->x, s->y, s->dx, s->dy, s->scale, s->shift, s->mean, s->var, s->dscale, s->dshift};
    mp_onednn_destroy_mems(mems, 10);
    free(s);
}

bool mp_bn_dnnl_training(const mp_bn_dnnl *s) { return s->training; }

mp_status mp_bn_dnnl_forward(mp_bn_dnnl *s, const mp_op_call *c) {
    int C = s->C;
    float *bmean = mp_bn_saved_mean_f32(c->saved, C), *bvar = mp_bn_saved_var_f32(c->saved, C); // (C)
    MP_DNNL_BIND(c, s->x, c->in[0].data);
    MP_DNNL_BIND(c, s->y, c->out.data);
    MP_DNNL_BIND(c, s->scale, c->param[W_GAMMA].data);
    MP_DNNL_BIND(c, s->shift, c->param[W_BETA].data);
    MP_DNNL_BIND(c, s->mean, s->training ? bmean : c->param[W_RMEAN].data);
    MP_DNNL_BIND(c, s->var, s->training ? bvar : c->param[W_RVAR].data);
    dnnl_exec_arg_t args[7] = {
        {DNNL_ARG_SRC, s->x},     {DNNL_ARG_DST, s->y},  {DNNL_ARG_SCALE, s->scale},
        {DNNL_ARG_SHIFT, s->shift}, {DNNL_ARG_MEAN, s->mean}, {DNNL_ARG_VARIANCE, s->var},
    };
    MP_TRY(mp_onednn_execute(c, s->prim[P_FWD], s->scratch[P_FWD], args, 6));
    if (!s->training) return MP_OK;
    /* running statistics (unbiased variance) and the double copies backward reads */
    double mom = c->desc->attr.bn.momentum, eps = c->desc->attr.bn.eps, unbias = s->count / (s->count - 1);
    float *rmean = c->param[W_RMEAN].data, *rvar = c->param[W_RVAR].data; // (C)
    double *mean = mp_bn_saved_mean(c->saved), *invstd = mp_bn_saved_invstd(c->saved, C); // (C)
    for (int ch = 0; ch < C; ch++) {
        mean[ch] = bmean[ch];
        invstd[ch] = 1.0 / sqrt((double)bvar[ch] + eps);
        rmean[ch] = (float)((1 - mom) * rmean[ch] + mom * bmean[ch]);
        rvar[ch] = (float)((1 - mom) * rvar[ch] + mom * bvar[ch] * unbias);
    }
    return MP_OK;
}

mp_status mp_bn_dnnl_backward(mp_bn_dnnl *s, const mp_op_call *c) {
    int C = s->C;
    float *sink = (float *)((char *)c->workspace + s->sink_off); // (2, C)
    void *dg = c->d_param[W_GAMMA].data, *db = c->d_param[W_BETA].data;
    MP_DNNL_BIND(c, s->x, c->in[0].data);
    MP_DNNL_BIND(c, s->dy, c->d_out.data);
    MP_DNNL_BIND(c, s->dx, c->d_in[0].data);
    MP_DNNL_BIND(c, s->scale, c->param[W_GAMMA].data);
    MP_DNNL_BIND(c, s->shift, c->param[W_BETA].data); /* oneDNN 2.6 wants it as an argument (unused) */
    MP_DNNL_BIND(c, s->mean, mp_bn_saved_mean_f32(c->saved, C));
    MP_DNNL_BIND(c, s->var, mp_bn_saved_var_f32(c->saved, C));
    MP_DNNL_BIND(c, s->dscale, dg ? dg : (void *)sink);
    MP_DNNL_BIND(c, s->dshift, db ? db : (void *)(sink + C));
    dnnl_exec_arg_t args[10] = {
        {DNNL_ARG_SRC, s->x},          {DNNL_ARG_DIFF_DST, s->dy},      {DNNL_ARG_MEAN, s->mean},
        {DNNL_ARG_VARIANCE, s->var},   {DNNL_ARG_SCALE, s->scale},      {DNNL_ARG_DIFF_SRC, s->dx},
        {DNNL_ARG_DIFF_SCALE, s->dscale}, {DNNL_ARG_DIFF_SHIFT, s->dshift}, {DNNL_ARG_SHIFT, s->shift},
    };
    return mp_onednn_execute(c, s->prim[P_BWD], s->scratch[P_BWD], args, 9);
}

bool mp_bn_dnnl_is_jit(const mp_bn_dnnl *s) {
    return mp_onednn_all_jit(s->pd, P_COUNT);
}
