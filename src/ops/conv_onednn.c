/* conv_onednn.c — oneDNN fast path (f32, or bf16 on CPUs that have bf16
 * kernels) of conv2d (convolution primitives)
 * and conv_transpose2d (deconvolution primitives), shared by both ops.
 *
 * Layout: weights are plain OIHW, activations NCHW or, where the plan stores
 * them channels-last (op.h: info->nhwc), NHWC. The primitives are created
 * with format_tag_any for NCHW activations and the weights, and the call's
 * tensors are reordered into (and out of) the layouts oneDNN picks, in the
 * op's workspace; NHWC activations are computed on as they are. Measured over the
 * cnn10 training convolutions (dev/conv_layout_timing.c, 2-core AVX2 EPYC,
 * batch 128), blocked jit:avx2 + reorders against plain-layout gemm:
 * forward 131 vs 99 GFLOP/s, backward data 144 vs 87, backward weights
 * 105 vs 92 when the machine is quiet, and the gemm backward weights
 * collapses (10-300x slower) when another process competes for the cores.
 * The reorders cost 2-10% of the convolution. The exceptions (few input
 * channels) are in build().
 *
 * On small channels-last bf16 images the weight gradient runs as im2col +
 * matmul instead of oneDNN's AMX backward-weights kernel (conv_wgrad_onednn.h);
 * where oneDNN's backward-data primitive is its AMX kernel, the data gradient
 * runs as the forward convolution of the transposed filter
 * (conv_dgrad_onednn.h); a channels-last bf16 depthwise conv's weight
 * gradient runs on our vector kernel (conv_dw_wgrad.h).
 *
 * Everything is created once in prepare(); forward/backward only point the
 * memory objects at the call's tensors and the workspace, then execute
 * (backward first writes the transposed filter there, in the forward form).
 * Workspace, forward:  [src' | weights' | dst' | reorder scratch | scratchpad]
 * backward: [diff_dst' | backward-data: (W' plain,) weights', diff_src', ...]
 *           [diff_dst' | backward-weights: src', diff_weights', ...        ]
 *           or, after backward data, the im2col + matmul's (or the
 *           depthwise kernel's sums) from offset 0
 * diff_dst' is shared by both backward passes when they want the same layout
 * (reordered once); primes mark the copies in the primitives' layouts. */
#include "ops/conv_onednn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/host_mem.h"
#include "ops/bf16_conv_math.h"
#include "ops/conv_dgrad_onednn.h"
#include "ops/conv_dw_wgrad.h"
#include "ops/conv_pass_onednn.h"
#include "ops/conv_wgrad_onednn.h"
#include "ops/cpu_fast.h"
#include "ops/onednn_common.h"

typedef struct {
    pass fwd, bwd_d, bwd_w;
    bool has_bwd;
    bool ddst_shared;      /* bwd_w's diff_dst' is bwd_d's: reorder once */
    mp_wgrad_gemm *wgrad;  /* the weight gradient as im2col + matmul instead of bwd_w (conv_wgrad_onednn.h) */
    bool dw_wgrad;         /* a depthwise weight gradient on our vector kernel instead of bwd_w (conv_dw_wgrad.h) */
    bool dgrad_fwd;        /* bwd_d is the transposed filter's forward (conv_dgrad_onednn.h): */
    size_t flip_off;       /* its plain filter W' in the workspace, */
    size_t flip_elem;      /* of elements of this many bytes */
    pass bwd_t;            /* prepare() times it against bwd_d, keeps the faster in bwd_d, and releases it */
    bool dgrad_timed;      /* the form or the primitive was chosen by timing (this plan's or an earlier one's) */
} conv_state;

void mp_conv_onednn_release(void *state) {
    conv_state *st = state;
    if (!st) return;
    mp_conv_pass_release(&st->fwd);
    mp_conv_pass_release(&st->bwd_d);
    mp_conv_pass_release(&st->bwd_w);
    mp_conv_pass_release(&st->bwd_t);
    mp_wgrad_gemm_destroy(st->wgrad);
    free(st);
}

/* Memory descriptors of the plain tensors, in oneDNN's view of the op:
 * src = op input, dst = op output, weights (G, O/G, I/G, K, K) or (O, I, K, K)
 * laid out as PyTorch stores them, in the tensors' dtype; the *_any and
 * plain *_p ones in the dtype the primitive computes in (bf16_conv_math.h:
 * f32 for bf16 tensors where bf16 dot products are slow; the reorders then
 * convert). */
typedef struct {
    dnnl_memory_desc_t src, dst, wei, bias, src_any, dst_any, wei_any, src_p, dst_p, wei_p;
    dnnl_memory_desc_t dwei, dwei_any; /* weight gradients: always f32 */
    dnnl_dims_t strides, dilates, pad_l, pad_r;
    bool keep_nhwc; /* in: compute on channels-last tensors as they are; out: there are some */
} conv_mds;

/* An activation's memory descriptor: NCHW, or NHWC (channels-last). */
static dnnl_status_t activation_md(dnnl_memory_desc_t *md, const mp_shape *s, dnnl_data_type_t dt, bool nhwc) {
    if (!nhwc) return mp_onednn_plain_md(md, s, dt);
    dnnl_dims_t dims = {s->dims[0], s->dims[1], s->dims[2], s->dims[3]};
    return dnnl_memory_desc_init_by_tag(md, 4, dims, dt, dnnl_nhwc);
}

static mp_status make_mds(const conv_ctx *x, conv_mds *m, dnnl_data_type_t dt, dnnl_data_type_t ct, bool *fallback) {
    const mp_op_desc *d = x->d;
    const mp_op_info *info = x->info;
    const mp_conv_opts *o = &d->attr.conv;
    const bool tr = d->kind == MP_OP_CONV_TRANSPOSE2D;
    const mp_shape *in = &info->in[0], *out = &info->out;
    const int g = o->groups, cin = in->dims[1], cout = out->dims[1], k = o->kernel;
    dnnl_dims_t sd = {in->dims[0], cin, in->dims[2], in->dims[3]};
    dnnl_dims_t dd = {out->dims[0], cout, out->dims[2], out->dims[3]};
    /* a channels-last tensor of the plan (op.h: info->nhwc) is bound as such,
     * and with m->keep_nhwc the primitive computes on it in place (no reorder
     * but a dtype's); a tensor of one channel or one pixel is the same bytes
     * in either layout, so it follows the other one */
    bool nhwc_in = mp_info_nhwc_in(info, 0), nhwc_out = mp_info_nhwc_out(info);
    if (nhwc_out && mp_shape_layout_free(in)) nhwc_in = true;
    if (nhwc_in && mp_shape_layout_free(out)) nhwc_out = true;
    m->keep_nhwc = m->keep_nhwc && (nhwc_in || nhwc_out);
    CONV_CK(x, activation_md(&m->src, in, dt, nhwc_in));
    CONV_CK(x, activation_md(&m->src_p, in, ct, nhwc_in));
    CONV_CK(x, activation_md(&m->dst, out, dt, nhwc_out));
    CONV_CK(x, activation_md(&m->dst_p, out, ct, nhwc_out));
    if (m->keep_nhwc && nhwc_in) m->src_any = m->src_p;
    else CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->src_any, 4, sd, ct, dnnl_format_tag_any));
    if (m->keep_nhwc && nhwc_out) m->dst_any = m->dst_p;
    else CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->dst_any, 4, dd, ct, dnnl_format_tag_any));
    if (g > 1) {
        dnnl_dims_t wd = {g, cout / g, cin / g, k, k};
        dnnl_format_tag_t tag = tr ? dnnl_giohw : dnnl_goihw;
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->wei, 5, wd, dt, tag));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->wei_p, 5, wd, ct, tag));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->wei_any, 5, wd, ct, dnnl_format_tag_any));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->dwei, 5, wd, dnnl_f32, tag));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->dwei_any, 5, wd, dnnl_f32, dnnl_format_tag_any));
    } else {
        dnnl_dims_t wd = {cout, cin, k, k};
        dnnl_format_tag_t tag = tr ? dnnl_iohw : dnnl_oihw;
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->wei, 4, wd, dt, tag));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->wei_p, 4, wd, ct, tag));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->wei_any, 4, wd, ct, dnnl_format_tag_any));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->dwei, 4, wd, dnnl_f32, tag));
        CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->dwei_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    }
    dnnl_dims_t bd = {cout};
    CONV_CK(x, dnnl_memory_desc_init_by_tag(&m->bias, 1, bd, dnnl_f32, dnnl_x));
    for (int i = 0; i < 2; i++) {
        m->strides[i] = o->stride;
        m->dilates[i] = o->dilation - 1; /* oneDNN counts the gaps */
        m->pad_l[i] = o->padding;
        /* deconvolution: right padding absorbs output_padding; oneDNN needs
         * pad_r + stride > 0 (else the reference runs this node) */
        m->pad_r[i] = tr ? o->padding - o->output_padding : o->padding;
        if (m->pad_r[i] + o->stride <= 0) *fallback = true;
    }
    return MP_OK;
}

/* dgrad_forward_pd's primitive descriptor, once the form is wanted. */
static mp_status dgrad_forward_try(const conv_ctx *x, const conv_mds *m, dnnl_data_type_t dt, dnnl_data_type_t ct,
                                   const dnnl_memory_desc_t *sD, const dnnl_memory_desc_t *dD,
                                   dnnl_primitive_desc_t *tpd, dnnl_memory_desc_t *wt) {
    const mp_conv_opts *o = &x->d->attr.conv;
    const int k = o->kernel, cin = x->info->in[0].dims[1], cout = x->info->out.dims[1];
    const dnnl_dims_t wd = {cin, cout, k, k};
    dnnl_memory_desc_t wany;
    CONV_CK(x, dnnl_memory_desc_init_by_tag(wt, 4, wd, dt, dnnl_oihw));
    CONV_CK(x, dnnl_memory_desc_init_by_tag(&wany, 4, wd, ct, dnnl_format_tag_any));
    dnnl_dims_t pad;
    for (int i = 0; i < 2; i++) pad[i] = o->dilation * (k - 1) - o->padding;
    dnnl_convolution_desc_t td;
    CONV_CK(x, dnnl_dilated_convolution_forward_desc_init(&td, dnnl_forward_training, dnnl_convolution_direct, dD,
                                                          &wany, NULL, sD, m->strides, m->dilates, pad, pad));
    bool none = false;
    MP_TRY(mp_conv_make_pd(x, &td, NULL, tpd, &none));
    /* unless forced: only on oneDNN's brgconv forward kernel, on the tensors as they are (what was measured) */
    const bool keep = !none && mp_onednn_is_jit(*tpd) &&
                      (mp_dgrad_fwd_any_kernel() || (m->keep_nhwc && strstr(mp_onednn_impl_name(*tpd), "brg")));
    if (!keep && *tpd) dnnl_primitive_desc_destroy(*tpd); /* the backward-data primitive stays */
    if (!keep) *tpd = NULL;
    return MP_OK;
}

/* The data gradient's forward form (conv_dgrad_onednn.h), where it is wanted
 * instead of backward-data primitive dpd: *tpd (NULL where not wanted, or
 * oneDNN has no JIT kernel for it, or building it failed) and, in *wt, the plain (C, OC, k, k)
 * filter W' it reads, in the tensors' dtype dt. sD, dD: the layouts of the
 * conv's input and output that backward data uses (the forward's dst and
 * src). */
static mp_status dgrad_forward_pd(const conv_ctx *x, const conv_mds *m, const_dnnl_primitive_desc_t dpd,
                                  dnnl_data_type_t dt, dnnl_data_type_t ct, const dnnl_memory_desc_t *sD,
                                  const dnnl_memory_desc_t *dD, dnnl_primitive_desc_t *tpd, dnnl_memory_desc_t *wt) {
    *tpd = NULL;
    if (!mp_dgrad_fwd_wanted(x->d, x->info, mp_onednn_impl_name(dpd))) return MP_OK;
    if (dgrad_forward_try(x, m, dt, ct, sD, dD, tpd, wt) == MP_OK) return MP_OK;
    mp_clear_error(); /* the form is optional: its failure keeps the backward-data primitive */
    if (*tpd) dnnl_primitive_desc_destroy(*tpd);
    *tpd = NULL;
    return MP_OK;
}

/* Binds backward-data pass p from workspace offset 0, diff_dst' first: the
 * primitive pd, or (t) the forward form pd, reading W' (plain wt) from the
 * workspace at *flip_off (reserved here). *after_ddst: where diff_dst'
 * ends; *end: where the pass's regions end. */
static mp_status bind_dgrad(const conv_ctx *x, conv_state *st, pass *p, const_dnnl_primitive_desc_t pd, bool t,
                            const conv_mds *m, const dnnl_memory_desc_t *wt, size_t *after_ddst, size_t *end) {
    size_t cur = 0;
    mp_status rc = mp_conv_bind(x, p, pd, t ? dnnl_query_src_md : dnnl_query_diff_dst_md, 0, t ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST,
                        false, false, &m->dst, &cur, SIZE_MAX);
    *after_ddst = cur;
    if (t) {
        st->flip_off = mp_conv_reserve(&cur, dnnl_memory_desc_get_size(wt));
        st->flip_elem = dnnl_memory_desc_get_size(wt) / (size_t)mp_shape_numel(&x->info->params[0].shape);
    }
    if (rc == MP_OK)
        rc = mp_conv_bind(x, p, pd, dnnl_query_weights_md, 0, DNNL_ARG_WEIGHTS, false, false, t ? wt : &m->wei, &cur,
                  SIZE_MAX);
    if (rc == MP_OK)
        rc = mp_conv_bind(x, p, pd, t ? dnnl_query_dst_md : dnnl_query_diff_src_md, 0, t ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC,
                  true, false, &m->src, &cur, SIZE_MAX);
    if (rc == MP_OK) rc = mp_conv_finish_pass(x, p, pd, &cur);
    *end = cur;
    return rc;
}

static mp_status build(const conv_ctx *x, conv_state *st, dnnl_data_type_t dt, dnnl_data_type_t ct, bool training,
                       bool jit_only, bool keep_nhwc, bool *fallback, size_t *ws_bytes) {
    const bool tr = x->d->kind == MP_OP_CONV_TRANSPOSE2D;
    const bool bias = x->d->attr.conv.bias;
    conv_mds m = {.keep_nhwc = keep_nhwc};
    MP_TRY(make_mds(x, &m, dt, ct, fallback));
    if (*fallback) return MP_OK;
    const dnnl_memory_desc_t *bmd = bias ? &m.bias : NULL;
    /* Layouts of each pass (F forward, D backward data, W backward weights):
     * format_tag_any (blocked jit kernels plus reorders), except where the
     * plain gemm kernels measured faster: forward of a conv2d on one input
     * channel, backward data of a conv2d on fewer input channels than the
     * AVX2 channel block of 8. Never for backward weights: oneDNN's gemm
     * backward-weights kernel slows down 10-300x (to seconds per call) as
     * soon as another process competes for the cores; jit:avx2 does not. */
    const int cin = x->info->in[0].dims[1];
    const bool nchw = x->info->nhwc == 0; /* (oneDNN has no gemm kernels on mixed layouts) */
    const bool plain_f = nchw && !tr && x->d->attr.conv.groups == 1 && cin == 1;
    const bool plain_d = nchw && !tr && x->d->attr.conv.groups == 1 && cin < 8;
    const dnnl_memory_desc_t *sF = plain_f ? &m.src_p : &m.src_any, *wF = plain_f ? &m.wei_p : &m.wei_any,
                             *dF = plain_f ? &m.dst_p : &m.dst_any;
    const dnnl_memory_desc_t *sD = plain_d ? &m.src_p : &m.src_any, *wD = plain_d ? &m.wei_p : &m.wei_any,
                             *dD = plain_d ? &m.dst_p : &m.dst_any;
    const dnnl_memory_desc_t *sW = &m.src_any, *wW = &m.dwei_any, *dW = &m.dst_any;
    dnnl_convolution_desc_t fd, bdd, bwd; /* dnnl_deconvolution_desc_t is the same type */
    dnnl_prop_kind_t prop = training ? dnnl_forward_training : dnnl_forward_inference;
    if (tr) {
        CONV_CK(x, dnnl_dilated_deconvolution_forward_desc_init(&fd, prop, dnnl_deconvolution_direct, sF, wF, bmd,
                                                                dF, m.strides, m.dilates, m.pad_l, m.pad_r));
    } else {
        CONV_CK(x, dnnl_dilated_convolution_forward_desc_init(&fd, prop, dnnl_convolution_direct, sF, wF, bmd, dF,
                                                              m.strides, m.dilates, m.pad_l, m.pad_r));
    }
    if (training) {
        if (tr) {
            CONV_CK(x, dnnl_dilated_deconvolution_backward_data_desc_init(
                           &bdd, dnnl_deconvolution_direct, sD, wD, dD, m.strides, m.dilates, m.pad_l, m.pad_r));
            CONV_CK(x, dnnl_dilated_deconvolution_backward_weights_desc_init(
                           &bwd, dnnl_deconvolution_direct, sW, wW, bmd, dW, m.strides, m.dilates, m.pad_l,
                           m.pad_r));
        } else {
            CONV_CK(x, dnnl_dilated_convolution_backward_data_desc_init(
                           &bdd, dnnl_convolution_direct, sD, wD, dD, m.strides, m.dilates, m.pad_l, m.pad_r));
            CONV_CK(x, dnnl_dilated_convolution_backward_weights_desc_init(
                           &bwd, dnnl_convolution_direct, sW, wW, bmd, dW, m.strides, m.dilates, m.pad_l,
                           m.pad_r));
        }
    }
    /* from here on every error path destroys the primitive descriptors */
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL, tpd = NULL;
    dnnl_memory_desc_t wt; /* tpd's plain filter W' */
    memset(&wt, 0, sizeof wt);
    mp_status rc = mp_conv_make_pd(x, &fd, NULL, &fpd, fallback);
    if (rc == MP_OK && !*fallback && training) rc = mp_conv_make_pd(x, &bdd, fpd, &dpd, fallback);
    if (rc == MP_OK && !*fallback && training) rc = mp_conv_make_pd(x, &bwd, fpd, &wpd, fallback);
    /* MP_IMPL_AUTO: oneDNN's generic (non-JIT) kernels lose to ours */
    if (rc == MP_OK && !*fallback && jit_only)
        *fallback = !mp_onednn_is_jit(fpd) || (dpd && !mp_onednn_is_jit(dpd)) || (wpd && !mp_onednn_is_jit(wpd));
    if (rc == MP_OK && !*fallback && training && !tr) rc = dgrad_forward_pd(x, &m, dpd, dt, ct, sD, dD, &tpd, &wt);
    if (rc == MP_OK && !*fallback) {
        /* forward */
        size_t cur = 0;
        pass *p = &st->fwd;
        rc = mp_conv_bind(x, p, fpd, dnnl_query_src_md, 0, DNNL_ARG_SRC, false, false, &m.src, &cur, SIZE_MAX);
        if (rc == MP_OK)
            rc = mp_conv_bind(x, p, fpd, dnnl_query_weights_md, 0, DNNL_ARG_WEIGHTS, false, false, &m.wei, &cur, SIZE_MAX);
        if (rc == MP_OK && bias)
            rc = mp_conv_bind(x, p, fpd, dnnl_query_weights_md, 1, DNNL_ARG_BIAS, false, false, &m.bias, &cur, SIZE_MAX);
        if (rc == MP_OK)
            rc = mp_conv_bind(x, p, fpd, dnnl_query_dst_md, 0, DNNL_ARG_DST, true, false, &m.dst, &cur, SIZE_MAX);
        if (rc == MP_OK) rc = mp_conv_finish_pass(x, p, fpd, &cur);
        *ws_bytes = cur;
    }
    if (rc == MP_OK && !*fallback && training) {
        /* backward data: diff_dst' first, so that backward weights can share it; in the forward form (tpd)
         * diff_dst is its src, W' its weights and diff_src its dst. Forced, the form is bwd_d; wanted and not
         * forced, it is bwd_t beside the primitive, for prepare() to time both */
        const bool t = st->dgrad_fwd = tpd && mp_dgrad_fwd_forced();
        const_dnnl_primitive_desc_t bpd = t ? tpd : dpd;
        const dnnl_query_t ddst_q = t ? dnnl_query_src_md : dnnl_query_diff_dst_md;
        size_t after_ddst = 0, need = 0, after_ddst_t = 0, end_t = 0;
        rc = bind_dgrad(x, st, &st->bwd_d, bpd, t, &m, &wt, &after_ddst, &need);
        if (rc == MP_OK && tpd && !t &&
            bind_dgrad(x, st, &st->bwd_t, tpd, true, &m, &wt, &after_ddst_t, &end_t) != MP_OK) {
            mp_conv_pass_release(&st->bwd_t); /* the form is optional: the primitive stays */
            memset(&st->bwd_t, 0, sizeof st->bwd_t);
            mp_clear_error();
            end_t = 0;
        }
        if (end_t > need) need = end_t;
        /* backward weights, from the end of bwd_d's diff_dst' (bwd_t, if kept, has none that bwd_w shares) */
        size_t cur = after_ddst;
        pass *p = &st->bwd_w;
        const binding *ddst = &st->bwd_d.b[0];
        const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(wpd, dnnl_query_diff_dst_md, 0);
        const dnnl_memory_desc_t *dmd = dnnl_primitive_desc_query_md(bpd, ddst_q, 0);
        st->ddst_shared = rc == MP_OK && ddst->reorder && dnnl_memory_desc_equal(wmd, dmd);
        if (rc == MP_OK)
            rc = mp_conv_bind(x, p, wpd, dnnl_query_src_md, 0, DNNL_ARG_SRC, false, false, &m.src, &cur, SIZE_MAX);
        if (rc == MP_OK)
            rc = mp_conv_bind(x, p, wpd, dnnl_query_diff_dst_md, 0, DNNL_ARG_DIFF_DST, false, false, &m.dst, &cur,
                      st->ddst_shared ? ddst->off : SIZE_MAX);
        if (rc == MP_OK)
            rc = mp_conv_bind(x, p, wpd, dnnl_query_diff_weights_md, 0, DNNL_ARG_DIFF_WEIGHTS, true, true, &m.dwei, &cur,
                      SIZE_MAX);
        if (rc == MP_OK && bias)
            rc = mp_conv_bind(x, p, wpd, dnnl_query_diff_weights_md, 1, DNNL_ARG_DIFF_BIAS, true, true, &m.bias, &cur,
                      SIZE_MAX);
        if (rc == MP_OK) rc = mp_conv_finish_pass(x, p, wpd, &cur);
        if (cur > need) need = cur;
        if (need > *ws_bytes) *ws_bytes = need;
        st->has_bwd = rc == MP_OK;
    }
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (dpd) dnnl_primitive_desc_destroy(dpd);
    if (wpd) dnnl_primitive_desc_destroy(wpd);
    if (tpd) dnnl_primitive_desc_destroy(tpd);
    return rc;
}

/* Where bwd_t was built beside bwd_d: times both on this conv's shapes (or
 * takes the untimed choice, or the one an earlier plan made for them) and
 * keeps the faster in bwd_d (below, after run_pass). */
static void dgrad_choose(const conv_ctx *x, conv_state *st, mp_dtype dt, bool f32_math, size_t ws_bytes);

mp_status mp_conv_onednn_prepare(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, bool training,
                                 bool jit_only, void **state) {
    *state = NULL;
    conv_ctx x = {d, info};
    if (!mp_onednn_engine() || !mp_onednn_stream())
        return mp_error(MP_ERR_INTERNAL, "%s '%s': cannot create the oneDNN CPU engine",
                        mp_op_lookup(d->kind)->name, d->name ? d->name : "?");
    conv_state *st = calloc(1, sizeof *st);
    if (!st)
        return mp_error(MP_ERR_NOMEM, "%s '%s': out of memory", mp_op_lookup(d->kind)->name, d->name ? d->name : "?");
    bool fallback = false;
    size_t ws = 0;
    /* bf16 tensors: bf16 primitives, or f32 ones where bf16 dot products are slow */
    const bool f32_math = dt == MP_DTYPE_BF16 && mp_bf16_math_current() == MP_BF16_MATH_F32;
    mp_status rc = build(&x, st, mp_onednn_dt(dt), f32_math ? dnnl_f32 : mp_onednn_dt(dt), training, jit_only,
                         true, &fallback, &ws);
    if (rc == MP_OK && fallback && info->nhwc) {
        /* no JIT kernel on these channels-last tensors as they are: the
         * layouts oneDNN picks, with reorders, as for NCHW ones */
        mp_conv_onednn_release(st);
        if (!(st = calloc(1, sizeof *st)))
            return mp_error(MP_ERR_NOMEM, "%s '%s': out of memory", mp_op_lookup(d->kind)->name,
                            d->name ? d->name : "?");
        fallback = false;
        ws = 0;
        rc = build(&x, st, mp_onednn_dt(dt), f32_math ? dnnl_f32 : mp_onednn_dt(dt), training, jit_only, false,
                   &fallback, &ws);
    }
    if (rc == MP_OK && !fallback && st->has_bwd && dt == MP_DTYPE_BF16 && !f32_math) {
        /* oneDNN's AMX backward weights is slow on small images: im2col + matmul there (runs after backward
         * data, whose workspace regions are then free) */
        const_dnnl_primitive_desc_t wpd = NULL;
        const char *impl = dnnl_primitive_get_primitive_desc(st->bwd_w.prim, &wpd) == dnnl_success
                               ? mp_onednn_impl_name(wpd)
                               : NULL;
        size_t wg = 0;
        if (mp_wgrad_gemm_wanted(d, info, impl) && mp_wgrad_gemm_create(d, info, &st->wgrad, &wg) != MP_OK) {
            mp_clear_error(); /* no (fast) matmul for these shapes: the primitive stays */
            wg = 0;
        }
        if (wg > ws) ws = wg;
    }
    if (rc == MP_OK && !fallback && st->has_bwd && mp_dw_wgrad_applies(d, info, dt)) {
        st->dw_wgrad = true; /* runs after backward data, whose workspace regions are then free */
        const size_t b = mp_dw_wgrad_workspace_bytes(d, info);
        if (b > ws) ws = b;
    }
    if (rc != MP_OK || fallback) {
        mp_conv_onednn_release(st);
        return rc;
    }
    if (st->bwd_t.prim) dgrad_choose(&x, st, dt, f32_math, ws);
    if (ws > info->workspace_bytes) info->workspace_bytes = ws;
    *state = st;
    return MP_OK;
}

bool mp_conv_onednn_has_backward(const void *state) {
    return state && ((const conv_state *)state)->has_bwd;
}

bool mp_conv_onednn_dgrad_is_forward(const void *state) {
    return state && ((const conv_state *)state)->dgrad_fwd;
}

bool mp_conv_onednn_dgrad_timed(const void *state) {
    return state && ((const conv_state *)state)->dgrad_timed;
}

bool mp_conv_onednn_wgrad_is_dw(const void *state) { return state && ((const conv_state *)state)->dw_wgrad; }

bool mp_conv_onednn_wgrad_is_gemm(const void *state) {
    return state && ((const conv_state *)state)->wgrad;
}

/* Runs backward-data pass p on dy and the filter w into dx; t: p is the
 * forward form, W' written first from w (this step's filter). */
static mp_status run_dgrad(const conv_ctx *x, conv_state *st, pass *p, bool t, void *dy, void *w, void *dx,
                           void *ws) {
    if (t) {
        const mp_shape *f = &x->info->params[0].shape;
        void *wt = (char *)ws + st->flip_off;
        mp_conv_weights_transpose_flip(wt, w, f->dims[0], f->dims[1], f->dims[2], st->flip_elem);
        w = wt;
    }
    void *ptr[3] = {dy, w, dx};
    return mp_conv_run_pass(x, p, ptr, ws, 0);
}

static void dgrad_choose(const conv_ctx *x, conv_state *st, mp_dtype dt, bool f32_math, size_t ws_bytes) {
    const mp_op_info *in = x->info;
    const mp_conv_opts *o = &x->d->attr.conv;
    const int key[MP_DGRAD_KEY_INTS] = {
        in->in[0].dims[0], in->in[0].dims[1], in->in[0].dims[2], in->in[0].dims[3], in->out.dims[1],
        in->out.dims[2],   in->out.dims[3],   o->kernel,         o->padding,        o->dilation,
        (int)dt,           (int)f32_math,     (int)in->nhwc};
    int choice = mp_dgrad_fwd_untimed_choice();
    st->dgrad_timed = choice < 0;
    if (choice < 0) choice = mp_dgrad_fwd_choice_get(key);
    if (choice < 0) {
        const size_t es = mp_dtype_size(dt), wsb = MP_ALIGN64(ws_bytes),
                     ny = MP_ALIGN64((size_t)mp_shape_numel(&in->out) * es),
                     nx = MP_ALIGN64((size_t)mp_shape_numel(&in->in[0]) * es),
                     nw = MP_ALIGN64((size_t)mp_shape_numel(&in->params[0].shape) * es);
        char *buf = NULL;
        choice = 0; /* without memory to time them, or if a run fails: the primitive */
        mp_host_mem host; /* more than the host can give would be an OOM kill at the memset, not a NULL */
        const bool fits = !mp_host_mem_available(&host) || wsb + ny + nx + nw <= host.bytes;
        if (fits && posix_memalign((void **)&buf, 64, wsb + ny + nx + nw) == 0) {
            memset(buf, 0, wsb + ny + nx + nw);
            char *dy = buf + wsb, *dx = dy + ny, *w = dx + nx;
            double best[2] = {INFINITY, INFINITY};
            bool ok = true;
            for (int r = 0; r < 4 && ok; r++) /* a first run each, then three, alternating */
                for (int v = 0; v < 2 && ok; v++) {
                    const double t0 = mp_now_seconds();
                    ok = run_dgrad(x, st, v ? &st->bwd_t : &st->bwd_d, v == 1, dy, w, dx, buf) == MP_OK;
                    const double t = mp_now_seconds() - t0;
                    if (r > 0 && t < best[v]) best[v] = t;
                }
            if (ok) choice = best[1] < 0.95 * best[0];
            else mp_clear_error();
            free(buf);
        }
        choice = mp_dgrad_fwd_choice_put(key, choice); /* another plan's, if it recorded one meanwhile */
    }
    if (choice == 1) { /* bwd_w shares no diff_dst' with the form (it reorders its own where it needs one) */
        mp_conv_pass_release(&st->bwd_d);
        st->bwd_d = st->bwd_t;
        st->dgrad_fwd = true;
        st->ddst_shared = false;
    } else {
        mp_conv_pass_release(&st->bwd_t);
    }
    memset(&st->bwd_t, 0, sizeof st->bwd_t);
}

mp_status mp_conv_onednn_forward(void *state, const mp_op_call *c) {
    conv_state *st = state;
    conv_ctx x = {c->desc, c->info};
    void *ptr[4];
    int n = 0;
    ptr[n++] = c->in[0].data;
    ptr[n++] = c->param[0].data;
    if (c->desc->attr.conv.bias) ptr[n++] = c->param[1].data;
    ptr[n++] = c->out.data;
    MP_ASSERT(n == st->fwd.nb);
    return mp_conv_run_pass(&x, &st->fwd, ptr, c->workspace, 0);
}

mp_status mp_conv_onednn_backward(void *state, const mp_op_call *c) {
    conv_state *st = state;
    MP_ASSERT(st->has_bwd);
    conv_ctx x = {c->desc, c->info};
    const bool bias = c->desc->attr.conv.bias;
    const bool need_d = c->d_in[0].data != NULL;
    const bool need_w = c->d_param[0].data || (bias && c->d_param[1].data);
    if (need_d)
        MP_TRY(run_dgrad(&x, st, &st->bwd_d, st->dgrad_fwd, c->d_out.data, c->param[0].data, c->d_in[0].data,
                         c->workspace));
    if (need_w && st->wgrad) return mp_wgrad_gemm_run(st->wgrad, c->in[0].data, c->d_out.data, c->d_param[0].data,
                                                      c->workspace);
    if (need_w && st->dw_wgrad && c->in[0].dtype == MP_DTYPE_BF16 && c->d_out.dtype == MP_DTYPE_BF16 &&
        mp_fast_use(c, MP_DTYPE_BF16)) {
        mp_dw_wgrad_run(c->in[0].dtype, c->desc, c->info, c->in[0].data, c->d_out.data, c->d_param[0].data,
                        c->workspace);
        return MP_OK;
    }
    if (need_w) {
        void *ptr[4] = {c->in[0].data, c->d_out.data, c->d_param[0].data, bias ? c->d_param[1].data : NULL};
        /* binding 1 is diff_dst: already reordered by backward data */
        unsigned skip = need_d && st->ddst_shared ? 1u << 1 : 0;
        MP_TRY(mp_conv_run_pass(&x, &st->bwd_w, ptr, c->workspace, skip));
    }
    return MP_OK;
}
