/* conv_cudnn.cu — descriptors, passes and the staged forward/backward of
 * conv2d and conv_transpose2d on cuDNN (see conv_cudnn.h for the layouts,
 * the dtype staging and the pass mapping of the two ops). */
#include "cuda/conv_cudnn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/conv_depthwise.h"
#include "cuda/conv_engine.h"
#include "cuda/conv_own.h"
#include "cuda/lib_kernels.h"

static const float one = 1.0f, zero = 0.0f; /* alpha/beta: float for every data type */


/* "conv2d 'c1' forward [in (2, 3, 9, 9) bf16 -> out (2, 16, 9, 9) bf16, kernel 3 stride 1 pad 1
 *  dilation 1 groups 1, compute bf16]" */
static void describe(char *buf, size_t len, const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                     const char *dir) {
    const mp_conv_opts *o = &d->attr.conv;
    char in[64], out[64];
    snprintf(buf, len, "%s '%s' %s [in %s %s -> out %s %s, kernel %d stride %d pad %d dilation %d groups %d%s, compute %s%s]",
             d->kind == MP_OP_CONV2D ? "conv2d" : "conv_transpose2d", d->name ? d->name : "?", dir,
             mp_shape_str(&info->in[0], in, sizeof in), mp_dtype_name(cfg->in_dtype[0]),
             mp_shape_str(&info->out, out, sizeof out), mp_dtype_name(cfg->storage), o->kernel, o->stride, o->padding,
             o->dilation, o->groups, o->bias ? ", bias" : "", mp_dtype_name(cfg->compute), cfg->tf32 ? "+tf32" : "");
}

/* One warning line per layer name and process: cuDNN's tensor-core kernels
 * want channel counts in multiples of 8 in NHWC. Not for a layer whose
 * every pass that runs the search gave to our kernels (a stem's: forward
 * and weight gradient, conv_own.h). */
static void warn_channels(const mp_op_desc *d, const mp_conv_geom *g, mp_dtype cd) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char warned[64][64];
    static int n_warned;
    const int cin = d->kind == MP_OP_CONV2D ? g->cx : g->cy, cout = d->kind == MP_OP_CONV2D ? g->cy : g->cx;
    if (cin % 8 == 0 && cout % 8 == 0) return;
    const char *name = d->name ? d->name : "?";
    pthread_mutex_lock(&lock);
    bool seen = false;
    for (int i = 0; i < n_warned && !seen; i++) seen = !strncmp(warned[i], name, sizeof warned[i] - 1);
    if (!seen && n_warned < 64) snprintf(warned[n_warned++], sizeof warned[0], "%s", name);
    pthread_mutex_unlock(&lock);
    if (!seen)
        fprintf(stderr,
                "mixprec: warning: %s '%s' in %s: %d input / %d output channels are not both multiples of 8; "
                "tensor cores run it padded or not at all (slower)\n",
                d->kind == MP_OP_CONV2D ? "conv2d" : "conv_transpose2d", name, mp_dtype_name(cd), cin, cout);
}

void mp_conv_cudnn_release(void *state) {
    mp_conv_cudnn *st = (mp_conv_cudnn *)state;
    if (!st) return;
    for (int p = 0; p < MP_CONV_NPASS; p++)
        if (st->conv[p]) cudnnDestroyConvolutionDescriptor(st->conv[p]);
    if (st->x_desc) cudnnDestroyTensorDescriptor(st->x_desc);
    if (st->y_desc) cudnnDestroyTensorDescriptor(st->y_desc);
    if (st->w_desc) cudnnDestroyFilterDescriptor(st->w_desc);
    mp_conv_cudnn_release(st->dw32);
    free(st);
}

static mp_status create_descriptors(mp_conv_cudnn *st, const bool need[MP_CONV_NPASS], const mp_op_desc *d,
                                    const char *what) {
    const mp_conv_geom *g = &st->g;
    const cudnnDataType_t dt = mp_cudnn_data_type(st->cd);
    MP_CUDNN_TRY(cudnnCreateTensorDescriptor(&st->x_desc), what);
    MP_CUDNN_TRY(cudnnSetTensor4dDescriptor(st->x_desc, CUDNN_TENSOR_NHWC, dt, g->n, g->cx, g->hx, g->wx), what);
    MP_CUDNN_TRY(cudnnCreateTensorDescriptor(&st->y_desc), what);
    MP_CUDNN_TRY(cudnnSetTensor4dDescriptor(st->y_desc, CUDNN_TENSOR_NHWC, dt, g->n, g->cy, g->hy, g->wy), what);
    MP_CUDNN_TRY(cudnnCreateFilterDescriptor(&st->w_desc), what);
    MP_CUDNN_TRY(cudnnSetFilter4dDescriptor(st->w_desc, dt, CUDNN_TENSOR_NHWC, g->cy, g->cx / g->groups, g->k, g->k),
                 what);
    for (int p = 0; p < MP_CONV_NPASS; p++) {
        if (!need[p]) continue;
        MP_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&st->conv[p]), what);
        MP_CUDNN_TRY(cudnnSetConvolution2dDescriptor(st->conv[p], g->pad, g->pad, g->stride, g->stride, g->dil,
                                                     g->dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                     what);
        MP_CUDNN_TRY(cudnnSetConvolutionGroupCount(st->conv[p], g->groups), what);
        MP_CUDNN_TRY(cudnnSetConvolutionMathType(st->conv[p], st->math), what);
    }
    /* cuDNN's output shape must be ours (mp_conv_geom_of of the op's infer). */
    const int p0 = need[MP_CONV_FWD] ? MP_CONV_FWD : need[MP_CONV_BWD_DATA] ? MP_CONV_BWD_DATA : MP_CONV_BWD_FILTER;
    int n, c, h, w;
    MP_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(st->conv[p0], st->x_desc, st->w_desc, &n, &c, &h, &w), what);
    if (n != g->n || c != g->cy || h != g->hy || w != g->wy)
        return mp_error(MP_ERR_INTERNAL, "%s: cuDNN computes the conv-view output (%d, %d, %d, %d), not (%d, %d, %d, %d)",
                        what, n, c, h, w, g->n, g->cy, g->hy, g->wy);
    (void)d;
    return MP_OK;
}

/* backward-filter with an f32 dW from f16/bf16 x and dy: the pass in f32
 * (TF32 tensor cores: f16 and bf16 values are exact in TF32, their products
 * exact, the sums f32) on f32 copies of x and dy. cuDNN 9's one graph-API
 * engine taking bf16 x, dy and writing an f32 dW (runtime-compiled) ran
 * cnn10's 128-channel 16x16 layer at batch 512 in 0.66 ms, its bf16 engines
 * in 0.066 ms, and whole steps at half the images/s of this pass (bench
 * notes v0.14). */
static mp_status prepare_dw32(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info, mp_conv_cudnn *st) {
    mp_cuda_node_cfg f32;
    memset(&f32, 0, sizeof f32); /* every dtype F32 */
    f32.tf32 = f32.training = true;
    const bool need[MP_CONV_NPASS] = {false, false, true};
    size_t ws = 0;
    MP_TRY(mp_conv_cudnn_prepare(ctx, d, info, &f32, need, &st->dw32, &ws));
    const mp_conv_geom *g = &st->g;
    st->dw32_bytes = mp_cuda_lib_bytes(MP_DTYPE_F32, (long long)g->n * g->cx * g->hx * g->wx) +
                     mp_cuda_lib_bytes(MP_DTYPE_F32, (long long)g->n * g->cy * g->hy * g->wy) +
                     st->dw32->algo[MP_CONV_BWD_FILTER].workspace + 2 * MP_CUDA_WS_SLACK;
    return MP_OK;
}

mp_status mp_conv_cudnn_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                const mp_cuda_node_cfg *cfg, const bool need[MP_CONV_NPASS], mp_conv_cudnn **out,
                                size_t *workspace_bytes) {
    *out = NULL;
    const mp_dtype cd = cfg->compute;
    if (cd != MP_DTYPE_F32 && cd != MP_DTYPE_F16 && cd != MP_DTYPE_BF16)
        return mp_error(MP_ERR_UNSUPPORTED, "%s '%s': compute dtype %s not supported on the GPU (f32, f16, bf16)",
                        d->kind == MP_OP_CONV2D ? "conv2d" : "conv_transpose2d", d->name ? d->name : "?",
                        mp_dtype_name(cd));
    mp_conv_cudnn *st = (mp_conv_cudnn *)calloc(1, sizeof *st);
    if (!st) return mp_error(MP_ERR_NOMEM, "conv '%s': out of host memory", d->name ? d->name : "?");
    st->g = mp_conv_geom_of(d, &info->in[0], &info->out);
    st->kind = d->kind;
    st->training = cfg->training;
    st->cd = cd;
    st->math = cd != MP_DTYPE_F32 ? CUDNN_TENSOR_OP_MATH : cfg->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    st->dw_dt = cfg->weight_grad_unrounded && cd != MP_DTYPE_F32 && need[MP_CONV_BWD_FILTER] ? MP_DTYPE_F32 : cd;
    bool need_cd[MP_CONV_NPASS]; /* the passes in cd: backward-filter goes to dw32 for an f32 dW */
    memcpy(need_cd, need, sizeof need_cd);
    if (st->dw_dt != cd) need_cd[MP_CONV_BWD_FILTER] = false;
    describe(st->what_fwd, sizeof st->what_fwd, d, info, cfg, "forward");
    describe(st->what_bwd, sizeof st->what_bwd, d, info, cfg, "backward");
    const bool conv = d->kind == MP_OP_CONV2D;
    const mp_conv_pass op_fwd = conv ? MP_CONV_FWD : MP_CONV_BWD_DATA, op_bwd = conv ? MP_CONV_BWD_DATA : MP_CONV_FWD;
    mp_status s = create_descriptors(st, need_cd, d, st->what_fwd);
    /* a fused batch norm's input (cfg->bn_relu_input): forward and backward-filter on our depthwise kernels,
       which apply it as they load; untimed (they replace the batch norm's pass over its output too) */
    st->bn_input = conv && cfg->bn_relu_input && st->training && cfg->in_dtype[0] == cd && st->dw_dt == cd &&
                   need_cd[MP_CONV_FWD] && need_cd[MP_CONV_BWD_FILTER] && mp_dw_applies(&st->g, cd) &&
                   mp_env_get()->conv_own != 0;
    for (int p = 0; p < MP_CONV_NPASS && s == MP_OK; p++)
        if (st->bn_input && p != MP_CONV_BWD_DATA) {
            st->algo[p] = mp_conv_algo_own(ctx, st, (mp_conv_pass)p, -1.f);
            st->has[p] = true;
        } else if (need_cd[p]) {
            s = mp_conv_algo_choose(ctx, st, (mp_conv_pass)p, p == op_fwd ? st->what_fwd : st->what_bwd);
            st->has[p] = s == MP_OK;
        }
    if (s == MP_OK && st->dw_dt != cd) s = prepare_dw32(ctx, d, info, st);
    const mp_conv_geom *g = &st->g;
    const long long wn = (long long)g->cy * (g->cx / g->groups) * g->k * g->k;
    st->w_bytes = mp_cuda_lib_bytes(cd, wn);
    st->dw_bytes = mp_cuda_lib_bytes(st->dw_dt, wn);
    if (s != MP_OK) {
        mp_conv_cudnn_release(st);
        return s;
    }
    /* Workspace: the KRSC filter, dtype staging slices and the cuDNN
     * workspace of the passes of one call. */
    const long long in_n = mp_shape_numel(&info->in[0]), out_n = mp_shape_numel(&info->out);
    st->in_cast_bytes = cfg->in_dtype[0] != cd ? mp_cuda_lib_bytes(cd, in_n) : 0;
    st->out_cast_bytes = cfg->storage != cd ? mp_cuda_lib_bytes(cd, out_n) : 0;
    size_t fwd = st->w_bytes + st->in_cast_bytes + st->out_cast_bytes + st->algo[op_fwd].workspace;
    size_t bwd = 0;
    if (st->training) {
        const long long rows = (long long)info->out.dims[0] * info->out.dims[2] * info->out.dims[3];
        size_t lib = st->algo[op_bwd].workspace > st->algo[MP_CONV_BWD_FILTER].workspace
                         ? st->algo[op_bwd].workspace
                         : st->algo[MP_CONV_BWD_FILTER].workspace;
        bwd = 2 * st->in_cast_bytes + st->out_cast_bytes + st->w_bytes + st->dw_bytes + lib + st->dw32_bytes +
              (d->attr.conv.bias ? mp_cuda_lib_colsum_workspace(rows, info->out.dims[1]) : 0);
    }
    const size_t total = (fwd > bwd ? fwd : bwd) + 8 * MP_CUDA_WS_SLACK; /* alignment of each slice */
    st->ws_total = total;
    if (*workspace_bytes < total) *workspace_bytes = total;
    /* a pass of this layer that runs on cuDNN, not on our kernels (which need no multiple of 8); the input
       gradient's pass runs only where a backward asks for it (a network's stem: never) */
    bool cudnn_runs = false;
    for (int p = 0; p < MP_CONV_NPASS; p++)
        cudnn_runs = cudnn_runs || (st->has[p] && !st->algo[p].own && (p != op_bwd || cfg->input_grad));
    if (cd != MP_DTYPE_F32 && cudnn_runs) warn_channels(d, g, cd);
    *out = st;
    return MP_OK;
}

/* ---- the three passes ----------------------------------------------------- */

mp_status mp_conv_cudnn_fwd(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *w_krsc, void *y,
                            void *ws, size_t ws_bytes, const char *what) {
    if (st->algo[MP_CONV_FWD].own)
        return mp_own_run(ctx, &st->g, st->cd, MP_CONV_FWD, (void *)x, w_krsc, y, false, ws, ws_bytes, what);
    if (st->plan[MP_CONV_FWD]) return mp_conv_engine_run(ctx, st->plan[MP_CONV_FWD], x, w_krsc, y, ws, what);
    MP_CUDNN_TRY(cudnnConvolutionForward(ctx->cudnn, &one, st->x_desc, x, st->w_desc, w_krsc,
                                         st->conv[MP_CONV_FWD], (cudnnConvolutionFwdAlgo_t)st->algo[MP_CONV_FWD].algo,
                                         ws, ws_bytes, &zero, st->y_desc, y),
                 what);
    return MP_OK;
}

static mp_status bwd_data(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *dy, const void *w_krsc, void *dx,
                          void *ws, size_t ws_bytes, bool add, const char *what) {
    if (st->algo[MP_CONV_BWD_DATA].own)
        return mp_own_run(ctx, &st->g, st->cd, MP_CONV_BWD_DATA, dx, w_krsc, (void *)dy, add, ws, ws_bytes, what);
    const cudnnBackendDescriptor_t plan = add ? st->plan_add_dx : st->plan[MP_CONV_BWD_DATA];
    if (st->plan[MP_CONV_BWD_DATA]) {
        if (!plan) return mp_error(MP_ERR_INTERNAL, "%s: backward-data asked to add, and its engine has no plan for it", what);
        return mp_conv_engine_run(ctx, plan, dx, w_krsc, dy, ws, what);
    }
    MP_CUDNN_TRY(cudnnConvolutionBackwardData(ctx->cudnn, &one, st->w_desc, w_krsc, st->y_desc, dy,
                                              st->conv[MP_CONV_BWD_DATA],
                                              (cudnnConvolutionBwdDataAlgo_t)st->algo[MP_CONV_BWD_DATA].algo, ws,
                                              ws_bytes, add ? &one : &zero, st->x_desc, dx),
                 what);
    return MP_OK;
}

mp_status mp_conv_cudnn_bwd_data(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *dy, const void *w_krsc,
                                 void *dx, void *ws, size_t ws_bytes, const char *what) {
    return bwd_data(ctx, st, dy, w_krsc, dx, ws, ws_bytes, false, what);
}

mp_status mp_conv_cudnn_bwd_data_add(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *dy, const void *w_krsc,
                                     void *dx, void *ws, size_t ws_bytes, const char *what) {
    if (!st->adds_dx) return mp_error(MP_ERR_INTERNAL, "%s: backward-data cannot add into dx here", what);
    return bwd_data(ctx, st, dy, w_krsc, dx, ws, ws_bytes, true, what);
}

bool mp_conv_cudnn_adds_input_grad(const void *state, int k) {
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)state;
    return st && k == 0 && st->adds_dx && st->kind == MP_OP_CONV2D && st->in_cast_bytes == 0;
}

mp_status mp_conv_cudnn_bwd_filter(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *dy,
                                   void *dw_krsc, void *ws, size_t ws_bytes, const char *what) {
    if (st->algo[MP_CONV_BWD_FILTER].own)
        return mp_own_run(ctx, &st->g, st->cd, MP_CONV_BWD_FILTER, (void *)x, dw_krsc, (void *)dy, false, ws, ws_bytes,
                          what);
    if (st->plan[MP_CONV_BWD_FILTER])
        return mp_conv_engine_run(ctx, st->plan[MP_CONV_BWD_FILTER], x, dw_krsc, dy, ws, what);
    MP_CUDNN_TRY(cudnnConvolutionBackwardFilter(ctx->cudnn, &one, st->x_desc, x, st->y_desc, dy,
                                                st->conv[MP_CONV_BWD_FILTER],
                                                (cudnnConvolutionBwdFilterAlgo_t)st->algo[MP_CONV_BWD_FILTER].algo, ws,
                                                ws_bytes, &zero, st->w_desc, dw_krsc),
                 what);
    return MP_OK;
}

/* ---- staged forward / backward of both ops -------------------------------- */

static mp_status ws_short(const char *what) {
    return mp_error(MP_ERR_INTERNAL, "%s: the workspace is smaller than prepare() asked for", what);
}

/* *p = t's data in dtype cd: t itself, or t cast into a workspace slice. */
static mp_status stage_in(mp_cuda_ctx *ctx, const mp_tensor *t, mp_dtype cd, mp_cuda_ws *ws, const void **p,
                          const char *what) {
    if (t->dtype == cd) {
        *p = t->data;
        return MP_OK;
    }
    void *dst = mp_cuda_ws_take(ws, mp_cuda_lib_bytes(cd, mp_tensor_numel(t)));
    if (!dst) return ws_short(what);
    MP_TRY(mp_cuda_lib_cast(ctx, t->data, t->dtype, dst, cd, mp_tensor_numel(t), what));
    *p = dst;
    return MP_OK;
}

/* The weight in KRSC and cd: param[0] itself where the plan keeps it in KRSC
 * (param_krsc; cast into a workspace slice if it is not in cd), the plan's
 * copy (weight_krsc), else param[0] (CPU layout) permuted and cast into a
 * workspace slice; an error when the workspace is short. */
static mp_status stage_weight(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const mp_op_call *c, mp_cuda_ws *ws,
                              const void **w, const char *what) {
    if (c->param_krsc && c->param[0].dtype == st->cd) {
        *w = c->param[0].data;
        return MP_OK;
    }
    if (c->weight_krsc) { /* the plan's copy of this step (filter_krsc_batch.h) */
        *w = c->weight_krsc;
        return MP_OK;
    }
    const mp_conv_geom *g = &st->g;
    void *dst = mp_cuda_ws_take(ws, st->w_bytes);
    if (!dst) return ws_short(what);
    *w = dst;
    if (c->param_krsc) return mp_cuda_lib_cast(ctx, c->param[0].data, c->param[0].dtype, dst, st->cd,
                                               mp_tensor_numel(&c->param[0]), what);
    return mp_cuda_lib_filter_to_krsc(ctx, c->param[0].data, c->param[0].dtype, dst, st->cd, g->cy,
                                      g->cx / g->groups, g->k * g->k, what);
}

bool mp_conv2d_krsc_job(const void *state, mp_krsc_job *job) {
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)state;
    if (!st || st->kind != MP_OP_CONV2D) return false;
    const mp_conv_geom *g = &st->g;
    job->k = g->cy, job->c = g->cx / g->groups, job->rs = g->k * g->k;
    job->ddt = st->cd;
    return true;
}

/* Where a result in cd goes: t's data, or a workspace slice (then committed). */
static void *result_slot(const mp_tensor *t, mp_dtype cd, mp_cuda_ws *ws) {
    return t->dtype == cd ? t->data : mp_cuda_ws_take(ws, mp_cuda_lib_bytes(cd, mp_tensor_numel(t)));
}

bool mp_conv2d_reads_bn_input(const void *state) {
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)state;
    return st && st->bn_input;
}

/* The call's fused batch norm (mp_op_call.bn_x) where st takes it: its coefficients in *bn. */
static bool fused_bn(const mp_conv_cudnn *st, const mp_op_call *c, mp_dw_bn_relu *bn) {
    *bn = (mp_dw_bn_relu){c->bn_mu, c->bn_scale, c->bn_shift};
    return st->bn_input && c->bn_x.data;
}

mp_status mp_conv_cudnn_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)c->state;
    const char *what = st->what_fwd;
    const mp_dtype cd = st->cd;
    const bool conv = st->kind == MP_OP_CONV2D;
    const mp_conv_pass pass = conv ? MP_CONV_FWD : MP_CONV_BWD_DATA;
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const void *w = NULL, *x = NULL;
    MP_TRY(stage_weight(ctx, st, c, &ws, &w, what));
    mp_dw_bn_relu bn;
    const bool fused = fused_bn(st, c, &bn);
    if (fused) x = c->bn_x.data;
    else MP_TRY(stage_in(ctx, &c->in[0], cd, &ws, &x, what));
    void *y = result_slot(&c->out, cd, &ws);
    const size_t lib_bytes = st->algo[pass].workspace;
    void *lib = lib_bytes ? mp_cuda_ws_take(&ws, lib_bytes) : NULL;
    if (!y || (lib_bytes && !lib)) return ws_short(what);
    if (fused) MP_TRY(mp_dw_forward(ctx, &st->g, cd, x, &bn, w, y, what));
    else if (conv) MP_TRY(mp_conv_cudnn_fwd(ctx, st, x, w, y, lib, lib_bytes, what));
    else MP_TRY(mp_conv_cudnn_bwd_data(ctx, st, x, w, y, lib, lib_bytes, what));
    const bool bias = c->desc->attr.conv.bias;
    if (!bias && y == c->out.data) return MP_OK;
    const mp_shape *o = &c->out.shape;
    return mp_cuda_lib_add_bias(ctx, y, cd, c->out.data, c->out.dtype, bias ? c->param[1].data : NULL,
                                bias ? c->param[1].dtype : MP_DTYPE_F32, (long long)o->dims[0] * o->dims[2] * o->dims[3],
                                o->dims[1], what);
}

mp_status mp_conv_cudnn_bwd_filter_f32(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *dy, void *dw,
                                mp_cuda_ws *ws, const char *what) {
    const mp_conv_geom *g = &st->g;
    const long long xn = (long long)g->n * g->cx * g->hx * g->wx, yn = (long long)g->n * g->cy * g->hy * g->wy;
    const size_t lib_bytes = st->dw32->algo[MP_CONV_BWD_FILTER].workspace;
    void *x32 = mp_cuda_ws_take(ws, mp_cuda_lib_bytes(MP_DTYPE_F32, xn));
    void *y32 = mp_cuda_ws_take(ws, mp_cuda_lib_bytes(MP_DTYPE_F32, yn));
    void *lib = lib_bytes ? mp_cuda_ws_take(ws, lib_bytes) : NULL;
    if (!x32 || !y32 || (lib_bytes && !lib)) return ws_short(what);
    MP_TRY(mp_cuda_lib_cast(ctx, x, st->cd, x32, MP_DTYPE_F32, xn, what));
    MP_TRY(mp_cuda_lib_cast(ctx, dy, st->cd, y32, MP_DTYPE_F32, yn, what));
    return mp_conv_cudnn_bwd_filter(ctx, st->dw32, x32, y32, dw, lib, lib_bytes, what);
}

mp_status mp_conv_cudnn_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)c->state;
    const char *what = st->what_bwd;
    if (!st->training) return mp_error(MP_ERR_INVALID_ARG, "%s: the node was prepared for inference only", what);
    const mp_conv_geom *g = &st->g;
    const mp_dtype cd = st->cd;
    const bool conv = st->kind == MP_OP_CONV2D;
    const bool want_dx = c->d_in[0].data != NULL, want_dw = c->d_param[0].data != NULL;
    const bool want_db = c->desc->attr.conv.bias && c->d_param[1].data;
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const void *dy = NULL, *x = NULL, *w = NULL;
    if (want_dx) MP_TRY(stage_weight(ctx, st, c, &ws, &w, what));
    if (want_dx || want_dw) MP_TRY(stage_in(ctx, &c->d_out, cd, &ws, &dy, what));
    mp_dw_bn_relu bn;
    const bool fused = want_dw && fused_bn(st, c, &bn);
    if (fused) x = c->bn_x.data;
    else if (want_dw) MP_TRY(stage_in(ctx, &c->in[0], cd, &ws, &x, what));
    void *dx = want_dx ? result_slot(&c->d_in[0], cd, &ws) : NULL;
    /* dW straight into the gradient where the plan keeps it in KRSC and in the dtype cuDNN writes */
    const bool dw_direct = want_dw && c->param_krsc && c->d_param[0].dtype == st->dw_dt;
    void *dw = dw_direct ? c->d_param[0].data : want_dw ? mp_cuda_ws_take(&ws, st->dw_bytes) : NULL;
    if ((want_dx && !dx) || (want_dw && !dw)) return ws_short(what);
    size_t lib_bytes = 0;
    if (want_dx) lib_bytes = st->algo[conv ? MP_CONV_BWD_DATA : MP_CONV_FWD].workspace;
    if (want_dw && st->algo[MP_CONV_BWD_FILTER].workspace > lib_bytes) lib_bytes = st->algo[MP_CONV_BWD_FILTER].workspace;
    void *lib = lib_bytes ? mp_cuda_ws_take(&ws, lib_bytes) : NULL;
    if (lib_bytes && !lib) return ws_short(what);
    const bool add_dx = (c->d_in_add & 1u) != 0;
    if (add_dx && (!want_dx || !mp_conv_cudnn_adds_input_grad(st, 0) || dx != c->d_in[0].data))
        return mp_error(MP_ERR_INTERNAL, "%s: asked to add into d_in, which this node's backward-data cannot", what);
    if (want_dx) {
        /* conv2d: dx = BWD_DATA(dy) (or dx += under d_in_add); conv_transpose2d: d_in = FWD(x = d_out) */
        if (add_dx) MP_TRY(mp_conv_cudnn_bwd_data_add(ctx, st, dy, w, dx, lib, lib_bytes, what));
        else if (conv) MP_TRY(mp_conv_cudnn_bwd_data(ctx, st, dy, w, dx, lib, lib_bytes, what));
        else MP_TRY(mp_conv_cudnn_fwd(ctx, st, dy, w, dx, lib, lib_bytes, what));
        if (dx != c->d_in[0].data)
            MP_TRY(mp_cuda_lib_cast(ctx, dx, cd, c->d_in[0].data, c->d_in[0].dtype, mp_tensor_numel(&c->d_in[0]), what));
    }
    if (want_dw) {
        const mp_dtype gd = c->d_param[0].dtype; /* f32, or cd under the plan's low_grads */
        const bool low_ok = st->dw_dt == cd && cd != MP_DTYPE_F32; /* not when prepared for an f32 dW */
        if (gd != MP_DTYPE_F32 && !(low_ok && gd == cd))
            return mp_error(MP_ERR_INVALID_ARG, "%s: the weight gradient must be f32%s%s, got %s", what,
                            low_ok ? " or " : "", low_ok ? mp_dtype_name(cd) : "", mp_dtype_name(gd));
        /* conv2d: dW = BWD_FILTER(x = in, dy = d_out); transposed: x = d_out, dy = in */
        const void *fx = conv ? x : dy, *fy = conv ? dy : x;
        if (fused) MP_TRY(mp_dw_backward_filter(ctx, g, cd, x, &bn, dy, dw, lib, lib_bytes, what));
        else if (st->dw32) MP_TRY(mp_conv_cudnn_bwd_filter_f32(ctx, st, fx, fy, dw, &ws, what));
        else MP_TRY(mp_conv_cudnn_bwd_filter(ctx, st, fx, fy, dw, lib, lib_bytes, what));
        if (!c->param_krsc) /* the gradient in the CPU layout */
            MP_TRY(mp_cuda_lib_filter_from_krsc(ctx, dw, st->dw_dt, c->d_param[0].data, gd, g->cy, g->cx / g->groups,
                                                g->k * g->k, what));
        else if (!dw_direct)
            MP_TRY(mp_cuda_lib_cast(ctx, dw, st->dw_dt, c->d_param[0].data, gd, mp_tensor_numel(&c->d_param[0]), what));
    }
    if (want_db) {
        if (c->d_param[1].dtype != MP_DTYPE_F32)
            return mp_error(MP_ERR_INVALID_ARG, "%s: the bias gradient must be f32, got %s", what,
                            mp_dtype_name(c->d_param[1].dtype));
        const mp_shape *o = &c->d_out.shape;
        const long long rows = (long long)o->dims[0] * o->dims[2] * o->dims[3];
        void *part = mp_cuda_ws_take(&ws, mp_cuda_lib_colsum_workspace(rows, o->dims[1]));
        if (!part) return ws_short(what);
        MP_TRY(mp_cuda_lib_colsum(ctx, c->d_out.data, c->d_out.dtype, rows, o->dims[1], (float *)c->d_param[1].data,
                                  part, what));
    }
    return MP_OK;
}
