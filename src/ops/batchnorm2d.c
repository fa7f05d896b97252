/* batchnorm2d.c — batch normalization over the channels of (N, C, H, W)
 * inputs (and of (N, C) inputs, as BatchNorm1d), with PyTorch's semantics:
 * batch statistics and a momentum update of the running statistics in
 * training, running statistics in inference. Shape rules, parameters and
 * dispatch between the reference kernels, their vectorized instances
 * (batchnorm2d_cpu.c, f32/bf16; what plans run) and oneDNN (f32, for
 * MP_IMPL_ONEDNN, or MP_IMPL_AUTO where no vector instance runs). With
 * c->relu_after the ReLU reading this node is fused in (graph/plan_fuse.h).
 * Channels-last tensors (a CPU plan's, graph/plan_layout.h) run the vector
 * kernels' NHWC instances, which also serve a training batch norm + ReLU
 * fused into the 2x2 average pool after it (c->skip_out: no output stored;
 * c->pool_dy: that pool's output gradient read in place of d_out). */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "ops/batchnorm2d_cpu.h"
#include "ops/batchnorm2d_onednn.h"
#include "ops/cpu_fast.h"
#include "ops/onednn_dispatch.h"
#include "ops/op.h"
#include "ops/tangent.h"

#define MP_REF_TEMPLATE "batchnorm2d_ref.inc"
#include "instantiate_act.inc"
#define MP_REF_TEMPLATE "batchnorm2d_tangent_ref.inc"
#include "instantiate_real.inc"

/* Kernel fn of the reference, or of the fast path (mp_bn_<fn>_cpu) when the
 * call runs it. */
#define BN_CALL(c, fn, ...)                                                                   \
    (mp_fast_use((c), (c)->out.dtype) ? mp_##fn##_cpu((c)->out.dtype, __VA_ARGS__)            \
                                      : MP_ACT_CALL((c)->out.dtype, fn, __VA_ARGS__))

enum { P_WEIGHT, P_BIAS, P_RUNNING_MEAN, P_RUNNING_VAR };

static int64_t spatial(const mp_shape *s) { return s->ndim == 4 ? (int64_t)s->dims[2] * s->dims[3] : 1; }

static mp_status bn_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    const mp_shape *x = &info->in[0];
    if (x->ndim != 4 && x->ndim != 2) {
        char msg[96];
        snprintf(msg, sizeof msg, "expects an (N, C, H, W) or (N, C) input, got %d-D", x->ndim);
        return mp_op_shape_error(d, info, msg);
    }
    const mp_batchnorm_opts *o = &d->attr.bn;
    if (!(o->eps > 0 && isfinite(o->eps)) || !(o->momentum >= 0 && o->momentum <= 1))
        return mp_error(MP_ERR_INVALID_ARG,
                        "batchnorm2d '%s': need a finite eps > 0 and 0 <= momentum <= 1 (got eps %g, momentum %g)",
                        d->name ? d->name : "?", (double)o->eps, (double)o->momentum);
    int C = x->dims[1];
    mp_shape c1 = mp_shape1(C);
    info->out = *x;
    info->n_params = 4;
    info->params[P_WEIGHT] = (mp_param_spec){"weight", c1, true, MP_INIT_ONE, 0};
    info->params[P_BIAS] = (mp_param_spec){"bias", c1, true, MP_INIT_ZERO, 0};
    info->params[P_RUNNING_MEAN] = (mp_param_spec){"running_mean", c1, false, MP_INIT_ZERO, 0};
    info->params[P_RUNNING_VAR] = (mp_param_spec){"running_var", c1, false, MP_INIT_ONE, 0};
    info->saved_bytes = mp_bn_saved_bytes(C);
    info->workspace_bytes = 0;
    return MP_OK;
}

/* The unbiased variance needs two values per channel (PyTorch refuses too). */
static mp_status check_batch(const mp_op_desc *d, const mp_shape *x) {
    if ((int64_t)x->dims[0] * spatial(x) >= 2) return MP_OK;
    char s[64];
    return mp_error(MP_ERR_SHAPE, "batchnorm2d '%s': training needs more than one value per channel (input %s)",
                    d->name ? d->name : "?", mp_shape_str(x, s, sizeof s));
}

static mp_status bn_prepare(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, mp_impl impl, bool training,
                            void **state) {
    *state = NULL;
    if (training) MP_TRY(check_batch(d, &info->in[0]));
    if (info->nhwc) { /* channels-last: the vector kernels, whose threads sum into the workspace */
        const size_t ws = mp_bn_nhwc_workspace_bytes(info->in[0].dims[1]);
        if (ws > info->workspace_bytes) info->workspace_bytes = ws;
        return MP_OK;
    }
#ifdef MP_HAVE_ONEDNN
    /* MP_IMPL_AUTO: the vector kernels beat oneDNN 2.6's plain-layout batch
     * norm (bench/NOTES.md, CPU section) */
    if (mp_onednn_wanted(dt, impl) && !(impl == MP_IMPL_AUTO && mp_fast_isa_current() != MP_FAST_NONE)) {
        mp_bn_dnnl *s = NULL;
        MP_TRY(mp_bn_dnnl_create(d, info, training, &s));
        if (s && impl == MP_IMPL_AUTO && !mp_bn_dnnl_is_jit(s)) {
            mp_bn_dnnl_destroy(s);
            s = NULL;
        }
        *state = s;
    }
#else
    (void)dt, (void)impl;
#endif
    return MP_OK;
}

static void bn_release(void *state) {
#ifdef MP_HAVE_ONEDNN
    mp_bn_dnnl_destroy(state);
#else
    (void)state;
#endif
}

#ifdef MP_HAVE_ONEDNN
/* True when this call runs through oneDNN primitives built for its mode. */
static bool use_dnnl(const mp_op_call *c) {
    return mp_onednn_use(c) && mp_bn_dnnl_training(c->state) == c->training && !c->relu_after;
}
#endif

/* Channels-last tensors (op.h: info->nhwc) as (N*H*W, C) rows, on the vector kernels. */
static mp_status bn_forward_nhwc(const mp_op_call *c) {
    if (!mp_fast_use(c, c->out.dtype)) return mp_op_layout_error(c, "the reference batch-norm kernels");
    const mp_shape *xs = &c->in[0].shape;
    const int C = xs->dims[1];
    const int64_t M = (int64_t)xs->dims[0] * spatial(xs);
    const double eps = c->desc->attr.bn.eps, mom = c->desc->attr.bn.momentum;
    const mp_tensor *p = c->param;
    if (c->training)
        mp_bn_fwd_train_cpu_nhwc(c->out.dtype, c->in[0].data, c->resid.data, c->out.data, p[P_WEIGHT].data,
                                 p[P_BIAS].data,
                                 p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data, mp_bn_saved_mean(c->saved),
                                 mp_bn_saved_invstd(c->saved, C), mp_bn_saved_scale_f32(c->saved, C),
                                 mp_bn_saved_shift_f32(c->saved, C), mp_bn_saved_mean_f32(c->saved, C), M, C, eps, mom,
                                 c->relu_after, !c->skip_out, c->workspace);
    else
        mp_bn_fwd_eval_cpu_nhwc(c->out.dtype, c->in[0].data, c->resid.data, c->out.data, p[P_WEIGHT].data,
                                p[P_BIAS].data,
                                p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data, M, C, eps, c->relu_after);
    return MP_OK;
}

static mp_status bn_backward_nhwc(const mp_op_call *c) {
    if (!mp_fast_use(c, c->out.dtype)) return mp_op_layout_error(c, "the reference batch-norm kernels");
    const mp_shape *xs = &c->in[0].shape;
    const int C = xs->dims[1];
    const mp_tensor *p = c->param;
    /* With the ReLU fused the kernels compute the mask from x and the forward's constants (a training
     * forward's saved scale and shift, which an optimizer step between the forward and this backward, as
     * a trainer's groups take them, does not change), or read it from y where a staged call's y was
     * rounded to another type after the kernel, or where a residual add fused in (graph/plan_fuse.h) came
     * before the ReLU. */
    const bool mask_from_y = c->relu_after && (c->out_staged || c->resid.data);
    /* that add's gradient of its other input, written (or added to) in the dx pass */
    const mp_bn_resid_grad dres = {c->d_resid.data, c->d_resid_add};
    /* a 2x2 average pool fused in (graph/plan_fuse.h): its output gradient in place of dy */
    const mp_bn_pooled_dy pooled = {c->pool_dy.data, xs->dims[2], xs->dims[3]};
    mp_bn_bwd_cpu_nhwc(c->out.dtype, c->in[0].data, mask_from_y ? c->out.data : NULL, c->d_out.data,
                       c->pool_dy.data ? &pooled : NULL, c->d_in[0].data, c->d_resid.data ? &dres : NULL,
                       p[P_WEIGHT].data, p[P_BIAS].data,
                       c->relu_after, c->training ? mp_bn_saved_scale_f32(c->saved, C) : NULL,
                       c->training ? mp_bn_saved_shift_f32(c->saved, C) : NULL, c->d_param[P_WEIGHT].data,
                       c->d_param[P_BIAS].data, c->training, mp_bn_saved_mean(c->saved),
                       mp_bn_saved_invstd(c->saved, C), p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data,
                       (int64_t)xs->dims[0] * spatial(xs), C, (double)c->desc->attr.bn.eps, c->workspace);
    return MP_OK;
}

/* A pool fused in (plan_fuse.h) needs the channels-last kernels of a
 * training batch norm + ReLU, a residual add those kernels: plans fuse only
 * those. */
static mp_status check_fusions(const mp_op_call *c) {
    if (c->resid.data && (!c->info->nhwc || c->out_staged || c->resid.dtype != c->out.dtype))
        return mp_error(MP_ERR_UNSUPPORTED,
                        "batchnorm2d '%s': a residual add fused into it needs the channels-last kernels, run "
                        "natively, the residual in the output's dtype",
                        c->desc->name);
    if (!c->skip_out && !c->pool_dy.data) return MP_OK;
    if (c->info->nhwc && c->training && c->relu_after && c->in[0].shape.ndim == 4 &&
        (!c->pool_dy.data || c->pool_k == 2))
        return MP_OK;
    return mp_error(MP_ERR_UNSUPPORTED,
                    "batchnorm2d '%s': an average pool fused into it needs a channels-last training batch norm + "
                    "ReLU and a 2x2 pool",
                    c->desc->name);
}

/* Element i of a tensor of dtype dt set to a quiet NaN. */
static void store_nan(void *data, mp_dtype dt, int64_t i) {
    switch (dt) {
    case MP_DTYPE_F32: ((float *)data)[i] = NAN; break;
    case MP_DTYPE_F64: ((double *)data)[i] = NAN; break;
    case MP_DTYPE_F16: ((uint16_t *)data)[i] = 0x7e00; break;
    case MP_DTYPE_BF16: ((uint16_t *)data)[i] = 0x7fc0; break;
    case MP_DTYPE_I32: /* no NaN (a batch norm never outputs one) */
    case MP_DTYPE_COUNT: break;
    }
}

/* A training forward whose batch statistics overflow fp32 (inputs past
 * ~1.8e19): where the kernels sum in f32, 1/std is 0 and the channel is
 * normalized to its shift, a finite, silently wrong output; where they sum in
 * double (the reference kernels) the output is right but the f32 running
 * variance becomes inf. Either way such channels (mean or variance beyond
 * FLT_MAX: 1/std below 1/sqrt(FLT_MAX), or not finite) become NaN — the
 * stored output and the saved constants that the backward and a fused pool
 * read — so that the step's overflow check sees them and names this node
 * (mp_trainer: a forward overflow, the step skipped, running statistics
 * restarted). */
static void poison_overflowed_channels(const mp_op_call *c) {
    const mp_shape *xs = &c->in[0].shape;
    const int N = xs->dims[0], C = xs->dims[1];
    const int64_t HW = spatial(xs);
    const double *mean = mp_bn_saved_mean(c->saved), *invstd = mp_bn_saved_invstd(c->saved, C);
    const double min_invstd = 1.0 / sqrt((double)FLT_MAX);
    for (int ch = 0; ch < C; ch++) {
        if (fabs(mean[ch]) <= (double)FLT_MAX && invstd[ch] >= min_invstd && isfinite(invstd[ch])) continue;
        mp_bn_saved_invstd(c->saved, C)[ch] = NAN;
        mp_bn_saved_scale_f32(c->saved, C)[ch] = NAN;
        mp_bn_saved_shift_f32(c->saved, C)[ch] = NAN;
        if (c->skip_out) continue;
        for (int n = 0; n < N; n++)
            for (int64_t k = 0; k < HW; k++)
                store_nan(c->out.data, c->out.dtype,
                          c->info->nhwc ? ((int64_t)n * HW + k) * C + ch : ((int64_t)n * C + ch) * HW + k);
    }
}

static mp_status bn_forward_any(const mp_op_call *c) {
    const mp_shape *xs = &c->in[0].shape;
    if (c->info->nhwc) return bn_forward_nhwc(c);
#ifdef MP_HAVE_ONEDNN
    if (use_dnnl(c)) return mp_bn_dnnl_forward(c->state, c);
#endif
    int N = xs->dims[0], C = xs->dims[1];
    int64_t HW = spatial(xs);
    double eps = c->desc->attr.bn.eps, mom = c->desc->attr.bn.momentum;
    const mp_tensor *p = c->param;
    if (c->training)
        BN_CALL(c, bn_fwd_train, c->in[0].data, c->out.data, p[P_WEIGHT].data, p[P_BIAS].data,
                p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data, mp_bn_saved_mean(c->saved),
                mp_bn_saved_invstd(c->saved, C), N, C, HW, eps, mom, c->relu_after);
    else
        BN_CALL(c, bn_fwd_eval, c->in[0].data, c->out.data, p[P_WEIGHT].data, p[P_BIAS].data,
                p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data, N, C, HW, eps, c->relu_after);
    return MP_OK;
}

static mp_status bn_forward(const mp_op_call *c) {
    if (c->training) MP_TRY(check_batch(c->desc, &c->in[0].shape));
    MP_TRY(check_fusions(c));
    MP_TRY(bn_forward_any(c));
    if (c->training) poison_overflowed_channels(c);
    return MP_OK;
}

static mp_status bn_backward(const mp_op_call *c) {
    MP_TRY(check_fusions(c));
    if (c->info->nhwc) return bn_backward_nhwc(c);
#ifdef MP_HAVE_ONEDNN
    if (use_dnnl(c) && c->training && c->d_in[0].data) return mp_bn_dnnl_backward(c->state, c);
#endif
    const mp_shape *xs = &c->in[0].shape;
    int N = xs->dims[0], C = xs->dims[1];
    const mp_tensor *p = c->param;
    BN_CALL(c, bn_bwd, c->in[0].data, c->relu_after ? c->out.data : NULL, c->d_out.data, c->d_in[0].data,
            p[P_WEIGHT].data, c->d_param[P_WEIGHT].data, c->d_param[P_BIAS].data, c->training,
            mp_bn_saved_mean(c->saved), mp_bn_saved_invstd(c->saved, C), p[P_RUNNING_MEAN].data,
            p[P_RUNNING_VAR].data, N, C, spatial(xs), (double)c->desc->attr.bn.eps);
    return MP_OK;
}

/* Second derivatives (tangent.h, batchnorm2d_tangent_ref.inc): from the
 * statistics forward saved (training; every path saves them in double) or
 * the running ones (eval), with the fused ReLU's mask read from the stored
 * output. The running statistics are neither read in training nor updated. */
static mp_status bn_forward_tangent(const mp_op_call *c) {
    if (c->info->nhwc) return mp_op_layout_error(c, "the tangent kernels");
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    const mp_shape *xs = &c->in[0].shape;
    int N = xs->dims[0], C = xs->dims[1];
    const mp_tensor *p = c->param, *tp = c->t_param;
    MP_REAL_CALL(c->out.dtype, bn_fwd_tangent, c->in[0].data, c->relu_after ? c->out.data : NULL, c->t_in[0].data,
                 p[P_WEIGHT].data, tp[P_WEIGHT].data, tp[P_BIAS].data, c->t_out.data, c->training,
                 mp_bn_saved_mean(c->saved), mp_bn_saved_invstd(c->saved, C), p[P_RUNNING_MEAN].data,
                 p[P_RUNNING_VAR].data, N, C, spatial(xs), (double)c->desc->attr.bn.eps);
    return MP_OK;
}

static mp_status bn_backward_tangent(const mp_op_call *c) {
    if (c->info->nhwc) return mp_op_layout_error(c, "the tangent kernels");
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    const mp_shape *xs = &c->in[0].shape;
    int N = xs->dims[0], C = xs->dims[1];
    const mp_tensor *p = c->param, *tp = c->t_param, *td = c->t_d_param;
    if (!c->t_d_in[0].data && !td[P_WEIGHT].data && !td[P_BIAS].data) return MP_OK;
    MP_REAL_CALL(c->out.dtype, bn_bwd_tangent, c->in[0].data, c->relu_after ? c->out.data : NULL, c->d_out.data,
                 c->t_in[0].data, c->t_d_out.data, p[P_WEIGHT].data, tp[P_WEIGHT].data, c->t_d_in[0].data,
                 td[P_WEIGHT].data, td[P_BIAS].data, c->training, mp_bn_saved_mean(c->saved),
                 mp_bn_saved_invstd(c->saved, C), p[P_RUNNING_MEAN].data, p[P_RUNNING_VAR].data, N, C, spatial(xs),
                 (double)c->desc->attr.bn.eps);
    return MP_OK;
}

/* Channels-last on the vector kernels (plans prepare with MP_IMPL_AUTO). */
static mp_layout_support bn_layouts(const mp_op_desc *d, const mp_op_info *info, const void *state) {
    (void)d, (void)state;
    return info->out.ndim == 4 && mp_fast_isa_current() != MP_FAST_NONE ? MP_LAYOUT_ALIKE : MP_LAYOUT_NCHW_ONLY;
}

const mp_op_vtable mp_op_batchnorm2d_vt = {
    .name = "batchnorm2d",
    .infer = bn_infer,
    .prepare = bn_prepare,
    .release = bn_release,
    .forward = bn_forward,
    .backward = bn_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
    .forward_tangent = bn_forward_tangent,
    .backward_tangent = bn_backward_tangent,
    .layouts = bn_layouts,
};
