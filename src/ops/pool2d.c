/* pool2d.c — 2-D max and average pooling on (N, C, H, W) with PyTorch's
 * rules (floor output size, padding at most half the kernel, max pads with
 * -inf, average counts the padding): shape rules and dispatch between the
 * reference kernels and the oneDNN pooling_v2 fast path (f32). */
#include <stdio.h>
#include <string.h>

#include "ops/cpu_fast.h"
#include "ops/onednn_dispatch.h"
#include "ops/op.h"
#include "ops/tangent.h"
#include "ops/pool2d_cpu.h"
#include "ops/pool2d_onednn.h"

#define MP_REF_TEMPLATE "pool2d_ref.inc"
#include "instantiate_act.inc"
#define MP_REF_TEMPLATE "pool2d_tangent_ref.inc"
#include "instantiate_real.inc"

static mp_status pool_attr_error(const mp_op_desc *d, const mp_op_info *info, const char *what) {
    char s[64];
    const mp_pool_opts *o = &d->attr.pool;
    return mp_error(MP_ERR_INVALID_ARG, "%s '%s': %s (kernel %d, stride %d, padding %d; input shape %s)",
                    mp_op_lookup(d->kind)->name, d->name ? d->name : "?", what, o->kernel, o->stride, o->padding,
                    mp_shape_str(&info->in[0], s, sizeof s));
}

static mp_status pool_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    const mp_shape *x = &info->in[0];
    char msg[160];
    if (x->ndim != 4) {
        snprintf(msg, sizeof msg, "expects an (N, C, H, W) input, got %d-D", x->ndim);
        return mp_op_shape_error(d, info, msg);
    }
    int k = d->attr.pool.kernel, s = d->attr.pool.stride, p = d->attr.pool.padding;
    if (k < 1 || s < 1 || p < 0) return pool_attr_error(d, info, "kernel and stride must be >= 1, padding >= 0");
    if (p > k / 2) return pool_attr_error(d, info, "padding must be at most half the kernel (as in PyTorch)");
    int H = x->dims[2], W = x->dims[3];
    if (H + 2 * p < k || W + 2 * p < k) {
        snprintf(msg, sizeof msg, "kernel %d is larger than the padded input %dx%d (padding %d)", k, H + 2 * p,
                 W + 2 * p, p);
        return mp_op_shape_error(d, info, msg);
    }
    info->out = mp_shape4(x->dims[0], x->dims[1], (H + 2 * p - k) / s + 1, (W + 2 * p - k) / s + 1);
    info->n_params = 0;
    /* max: the argmax (int32 index in the input plane) of every output */
    info->saved_bytes = d->kind == MP_OP_MAXPOOL2D ? (size_t)mp_shape_numel(&info->out) * sizeof(int32_t) : 0;
    info->workspace_bytes = 0;
    /* max, after a oneDNN forward: the argmax found again, and its values */
    info->tangent_workspace_bytes =
        d->kind == MP_OP_MAXPOOL2D ? MP_ALIGN64(info->saved_bytes) + mp_tangent_bytes(mp_shape_numel(&info->out)) : 0;
    return MP_OK;
}

static mp_status pool_prepare(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, mp_impl impl, bool training,
                              void **state) {
    *state = NULL;
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_wanted(dt, impl) && !info->nhwc) { /* channels-last: our 2x2 kernels */
        mp_pool_dnnl *s = NULL;
        MP_TRY(mp_pool_dnnl_create(d, info, training, &s));
        if (s && impl == MP_IMPL_AUTO && !mp_pool_dnnl_is_jit(s)) {
            mp_pool_dnnl_destroy(s);
            s = NULL;
        }
        *state = s;
    }
#else
    (void)d, (void)info, (void)dt, (void)impl, (void)training;
#endif
    return MP_OK;
}

static void pool_release(void *state) {
#ifdef MP_HAVE_ONEDNN
    mp_pool_dnnl_destroy(state);
#else
    (void)state;
#endif
}

typedef struct {
    int64_t planes;
    int H, W, OH, OW, k, s, p;
} pool_geom;

static pool_geom geom_of(const mp_op_call *c) {
    const mp_shape *x = &c->in[0].shape, *y = &c->out.shape;
    const mp_pool_opts *o = &c->desc->attr.pool;
    return (pool_geom){(int64_t)x->dims[0] * x->dims[1], x->dims[2], x->dims[3], y->dims[2], y->dims[3],
                       o->kernel, o->stride, o->padding};
}

static mp_status pool_forward(const mp_op_call *c) {
    if (c->bn_x.data && !(c->info->nhwc && mp_pool_cpu_applies(c))) /* plans fuse only where it does */
        return mp_error(MP_ERR_UNSUPPORTED,
                        "avgpool2d '%s': a batch norm fused into it needs the channels-last 2x2 kernels (f32 or "
                        "bf16 activations on a CPU with AVX2)",
                        c->desc->name);
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c)) return mp_pool_dnnl_forward(c->state, c);
#endif
    if (mp_pool_cpu_applies(c)) { /* vectorized 2x2 average pooling (pool2d_cpu.c) */
        mp_pool_cpu_forward(c);
        return MP_OK;
    }
    if (c->info->nhwc) return mp_op_layout_error(c, "the reference pooling kernels");
    pool_geom g = geom_of(c);
    if (c->desc->kind == MP_OP_MAXPOOL2D)
        MP_ACT_CALL(c->out.dtype, maxpool_fwd, c->in[0].data, c->out.data, c->saved, g.planes, g.H, g.W, g.OH, g.OW,
                     g.k, g.s, g.p);
    else
        MP_ACT_CALL(c->out.dtype, avgpool_fwd, c->in[0].data, c->out.data, g.planes, g.H, g.W, g.OH, g.OW, g.k,
                     g.s, g.p);
    return MP_OK;
}

static mp_status pool_backward(const mp_op_call *c) {
    if (!c->d_in[0].data) return MP_OK;
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c)) {
        if (mp_pool_dnnl_has_backward(c->state)) return mp_pool_dnnl_backward(c->state, c);
        if (c->desc->kind == MP_OP_MAXPOOL2D) /* the inference forward kept no argmax */
            return mp_error(MP_ERR_INVALID_ARG, "maxpool2d '%s': backward on a node prepared for inference",
                            c->desc->name);
    }
#endif
    if (mp_pool_cpu_applies(c)) {
        mp_pool_cpu_backward(c);
        return MP_OK;
    }
    if (c->info->nhwc) return mp_op_layout_error(c, "the reference pooling kernels");
    pool_geom g = geom_of(c);
    if (c->desc->kind == MP_OP_MAXPOOL2D)
        MP_ACT_CALL(c->out.dtype, maxpool_bwd, c->d_out.data, c->saved, c->d_in[0].data, g.planes, g.H, g.W, g.OH,
                     g.OW);
    else
        MP_ACT_CALL(c->out.dtype, avgpool_bwd, c->d_out.data, c->d_in[0].data, g.planes, g.H, g.W, g.OH, g.OW, g.k,
                     g.s, g.p);
    return MP_OK;
}

/* Second derivatives (tangent.h). Average pooling is linear; max pooling is
 * linear with its argmax held fixed (away from ties): t_out gathers t_in at
 * the argmax and backward scatters t_d_out there. The reference forward
 * saved the argmax; oneDNN's saved its own workspace, so after a oneDNN
 * forward the reference kernel finds the argmax again, in the workspace. */
static mp_status maxpool_forward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    if (!c->t_in[0].data) {
        mp_tangent_zero(&c->t_out);
        return MP_OK;
    }
    pool_geom g = geom_of(c);
    const int32_t *arg = c->saved; // (P, OH, OW)
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_use(c)) {
        int32_t *found = c->workspace;
        void *values = (char *)c->workspace + MP_ALIGN64(c->info->saved_bytes);
        MP_ACT_CALL(c->out.dtype, maxpool_fwd, c->in[0].data, values, found, g.planes, g.H, g.W, g.OH, g.OW, g.k, g.s,
                    g.p);
        arg = found;
    }
#endif
    MP_REAL_CALL(c->out.dtype, maxpool_gather, c->t_in[0].data, arg, c->t_out.data, g.planes, (int64_t)g.H * g.W,
                 (int64_t)g.OH * g.OW);
    return MP_OK;
}
static mp_status avgpool_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_linear(c, pool_forward); }
static mp_status pool_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, pool_backward); }

const mp_op_vtable mp_op_maxpool2d_vt = {
    .name = "maxpool2d",
    .infer = pool_infer,
    .prepare = pool_prepare,
    .release = pool_release,
    .forward = pool_forward,
    .backward = pool_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = maxpool_forward_tangent,
    .backward_tangent = pool_backward_tangent,
};
/* Channels-last on the vector 2x2 kernels (plans prepare with MP_IMPL_AUTO;
 * pool_prepare then builds no oneDNN primitive). */
static mp_layout_support avgpool_layouts(const mp_op_desc *d, const mp_op_info *info, const void *state) {
    (void)info, (void)state;
    return mp_pool_cpu_window(d) && mp_fast_isa_current() != MP_FAST_NONE ? MP_LAYOUT_ALIKE : MP_LAYOUT_NCHW_ONLY;
}

const mp_op_vtable mp_op_avgpool2d_vt = {
    .name = "avgpool2d",
    .infer = pool_infer,
    .prepare = pool_prepare,
    .release = pool_release,
    .forward = pool_forward,
    .backward = pool_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = avgpool_forward_tangent,
    .backward_tangent = pool_backward_tangent,
    .layouts = avgpool_layouts,
};
