/* conv_tangent_cuda.cu — the tangents of conv2d and conv_transpose2d on the
 * GPU, by linearity through the cuDNN passes their forward and backward run
 * (conv_cudnn.h's pass mapping; no new convolutions). With K the op's
 * forward pass, D its data-gradient pass and F its filter-gradient pass:
 *   t_y  = K(t_x, W) + K(x, t_W) + t_b
 *   t_dx = D(t_dy, W) + D(dy, t_W)
 *   t_dW = F(t_x, dy) + F(x, t_dy),   t_db = column sums of t_dy
 * Each pass runs as forward/backward run it (operands staged into the
 * compute dtype cd, the weight and t_W permuted into KRSC slices, dW through
 * st->dw32 when the plan wants an unrounded f32 dW) and writes cd (dW:
 * st->dw_dt). The searched graph-API plans have beta = 0 (only backward-data
 * has a beta = 1 twin, conv_engine.h), so the second pass of
 * a sum writes its own slice and one f32 kernel adds the two and rounds
 * once to the tangent's dtype (the bias added after, in place). */
#include "cuda/conv_cudnn.h"
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/tangent_cuda.h"

static size_t bytes(mp_dtype dt, long long n) { return mp_cuda_lib_bytes(dt, n); }

extern "C" size_t mp_conv_tangent_workspace(const mp_conv_cudnn *st, const mp_op_info *info) {
    const mp_dtype cd = st->cd;
    const long long in_n = mp_shape_numel(&info->in[0]), out_n = mp_shape_numel(&info->out);
    const mp_conv_geom *g = &st->g;
    const long long wn = (long long)g->cy * (g->cx / g->groups) * g->k * g->k;
    const bool conv = st->kind == MP_OP_CONV2D;
    const mp_conv_pass op_fwd = conv ? MP_CONV_FWD : MP_CONV_BWD_DATA, op_bwd = conv ? MP_CONV_BWD_DATA : MP_CONV_FWD;
    const size_t fwd = 2 * st->w_bytes + 2 * bytes(cd, in_n) + 2 * bytes(cd, out_n) + st->algo[op_fwd].workspace;
    size_t bwd = 0;
    if (st->training) {
        size_t lib = st->algo[op_bwd].workspace > st->algo[MP_CONV_BWD_FILTER].workspace
                         ? st->algo[op_bwd].workspace
                         : st->algo[MP_CONV_BWD_FILTER].workspace;
        bwd = 2 * st->w_bytes + 2 * bytes(cd, out_n) + 4 * bytes(cd, in_n) + 2 * st->dw_bytes +
              bytes(MP_DTYPE_F32, wn) + lib + st->dw32_bytes +
              mp_cuda_lib_colsum_workspace((long long)info->out.dims[0] * info->out.dims[2] * info->out.dims[3],
                                           info->out.dims[1]);
    }
    return (fwd > bwd ? fwd : bwd) + 16 * MP_CUDA_WS_SLACK;
}

static mp_status ws_short(const char *what) {
    return mp_error(MP_ERR_INTERNAL, "%s: the workspace is smaller than prepare() asked for (tangents: was the node "
                                     "prepared with cfg.tangents?)", what);
}

/* *p = t (n elements) in cd: itself, or cast into a workspace slice. */
static mp_status stage(mp_cuda_ctx *ctx, const mp_tensor *t, mp_dtype cd, mp_cuda_ws *ws, const void **p,
                       const char *what) {
    *p = t->data;
    if (t->dtype == cd) return MP_OK;
    const long long n = mp_tensor_numel(t);
    void *dst = mp_cuda_ws_take(ws, bytes(cd, n));
    if (!dst) return ws_short(what);
    *p = dst;
    return mp_cuda_lib_cast(ctx, t->data, t->dtype, dst, cd, n, what);
}

/* A filter in the CPU layout (the weight or t_W, any float dtype) as a KRSC
 * slice in cd. */
static mp_status stage_filter(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const mp_tensor *w, mp_cuda_ws *ws,
                              const void **p, const char *what) {
    const mp_conv_geom *g = &st->g;
    void *dst = mp_cuda_ws_take(ws, st->w_bytes);
    if (!dst) return ws_short(what);
    MP_TRY(mp_cuda_lib_filter_to_krsc(ctx, w->data, w->dtype, dst, st->cd, g->cy, g->cx / g->groups, g->k * g->k,
                                      what));
    *p = dst;
    return MP_OK;
}

/* The op's forward pass (data_pass false) or data-gradient pass (true) on
 * (a, w) -> out, all in cd: conv2d FWD / BWD_DATA, conv_transpose2d the
 * other way round. */
static mp_status run_pass(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, bool data_pass, const void *a, const void *w,
                          void *out, void *lib, size_t lib_bytes, const char *what) {
    const bool fwd = (st->kind == MP_OP_CONV2D) != data_pass;
    if (fwd) return mp_conv_cudnn_fwd(ctx, st, a, w, out, lib, lib_bytes, what);
    return mp_conv_cudnn_bwd_data(ctx, st, a, w, out, lib, lib_bytes, what);
}

/* out (its tensor) = P(a1, w1) + P(a2, w2) + bias (a NULL pair skipped; bias
 * NULL: none), P the pass above; nothing left: out = bias or 0. */
static mp_status pass_sum(mp_cuda_ctx *ctx, const mp_op_call *c, const mp_conv_cudnn *st, bool data_pass,
                          const mp_tensor *out, const void *a1, const void *w1, const void *a2, const void *w2,
                          const mp_tensor *bias, void *lib, size_t lib_bytes, mp_cuda_ws *ws, const char *which,
                          const char *what) {
    const mp_dtype cd = st->cd;
    const long long n = mp_tensor_numel(out);
    const mp_shape *s = &out->shape;
    const long long rows = (long long)s->dims[0] * s->dims[2] * s->dims[3];
    const bool has1 = a1 && w1, has2 = a2 && w2;
    const void *b = bias && bias->data ? bias->data : NULL;
    const mp_dtype bdt = b ? bias->dtype : MP_DTYPE_F32;
    if (!has1 && !has2) {
        MP_TRY(mp_cuda_tangent_zero(ctx, c, out, which));
        if (!b) return MP_OK;
        return mp_cuda_lib_add_bias(ctx, out->data, out->dtype, out->data, out->dtype, b, bdt, rows, s->dims[1], what);
    }
    if (!has1) {
        a1 = a2, w1 = w2;
    }
    const bool both = has1 && has2;
    void *r1 = !both && out->dtype == cd ? out->data : mp_cuda_ws_take(ws, bytes(cd, n));
    void *r2 = both ? mp_cuda_ws_take(ws, bytes(cd, n)) : NULL;
    if (!r1 || (both && !r2)) return ws_short(what);
    MP_TRY(run_pass(ctx, st, data_pass, a1, w1, r1, lib, lib_bytes, what));
    if (both) {
        MP_TRY(run_pass(ctx, st, data_pass, a2, w2, r2, lib, lib_bytes, what));
        MP_TRY(mp_cuda_tangent_add(ctx, c, r1, cd, r2, cd, out->data, out->dtype, n, which));
        if (!b) return MP_OK;
        return mp_cuda_lib_add_bias(ctx, out->data, out->dtype, out->data, out->dtype, b, bdt, rows, s->dims[1], what);
    }
    if (r1 == out->data && !b) return MP_OK;
    return mp_cuda_lib_add_bias(ctx, r1, cd, out->data, out->dtype, b, bdt, rows, s->dims[1], what);
}

extern "C" mp_status mp_cuda_conv_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)c->state;
    const char *what = st->what_fwd;
    const mp_tensor *ty = &c->t_out, *tx = &c->t_in[0], *tw = &c->t_param[0];
    if (!ty->data) return MP_OK;
    const bool conv = st->kind == MP_OP_CONV2D;
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const void *w = NULL, *txc = NULL, *x = NULL, *twc = NULL;
    if (tx->data) {
        MP_TRY(stage_filter(ctx, st, &c->param[0], &ws, &w, what));
        MP_TRY(stage(ctx, tx, st->cd, &ws, &txc, what));
    }
    if (tw->data) {
        MP_TRY(stage_filter(ctx, st, tw, &ws, &twc, what));
        MP_TRY(stage(ctx, &c->in[0], st->cd, &ws, &x, what));
    }
    const size_t lib_bytes = st->algo[conv ? MP_CONV_FWD : MP_CONV_BWD_DATA].workspace;
    void *lib = lib_bytes ? mp_cuda_ws_take(&ws, lib_bytes) : NULL;
    if (lib_bytes && !lib) return ws_short(what);
    const mp_tensor *tb = c->desc->attr.conv.bias ? &c->t_param[1] : NULL;
    return pass_sum(ctx, c, st, false, ty, txc, w, x, twc, tb, lib, lib_bytes, &ws, "forward_tangent", what);
}

/* One filter-gradient pass (x, dy in cd, conv view) into a KRSC slice of st->dw_dt. */
static mp_status filter_pass(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, const void *x, const void *dy, void *dw,
                             void *lib, size_t lib_bytes, mp_cuda_ws scratch, const char *what) {
    if (st->dw32) return mp_conv_cudnn_bwd_filter_f32(ctx, st, x, dy, dw, &scratch, what);
    return mp_conv_cudnn_bwd_filter(ctx, st, x, dy, dw, lib, lib_bytes, what);
}

extern "C" mp_status mp_cuda_conv_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    const mp_conv_cudnn *st = (const mp_conv_cudnn *)c->state;
    const char *what = st->what_bwd;
    if (!st->training) return mp_error(MP_ERR_INVALID_ARG, "%s: the node was prepared for inference only", what);
    const mp_conv_geom *g = &st->g;
    const mp_dtype cd = st->cd;
    const bool conv = st->kind == MP_OP_CONV2D;
    const mp_tensor *tdx = &c->t_d_in[0], *tdw = &c->t_d_param[0];
    const mp_tensor *tdb = c->desc->attr.conv.bias ? &c->t_d_param[1] : NULL;
    const mp_tensor *tdy = &c->t_d_out, *tx = &c->t_in[0], *tw = &c->t_param[0];
    const bool want_dx = tdx->data, want_dw = tdw->data, want_db = tdb && tdb->data;
    if (!want_dx && !want_dw && !want_db) return MP_OK;
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    size_t lib_bytes = st->algo[conv ? MP_CONV_BWD_DATA : MP_CONV_FWD].workspace;
    if (st->algo[MP_CONV_BWD_FILTER].workspace > lib_bytes) lib_bytes = st->algo[MP_CONV_BWD_FILTER].workspace;
    void *lib = lib_bytes ? mp_cuda_ws_take(&ws, lib_bytes) : NULL;
    if (lib_bytes && !lib) return ws_short(what);
    const void *dy = NULL, *tdyc = NULL;
    if (want_dx || want_dw) {
        MP_TRY(stage(ctx, &c->d_out, cd, &ws, &dy, what));
        if (tdy->data) MP_TRY(stage(ctx, tdy, cd, &ws, &tdyc, what));
    }
    if (want_dx) {
        const void *w = NULL, *twc = NULL;
        if (tdy->data) MP_TRY(stage_filter(ctx, st, &c->param[0], &ws, &w, what));
        if (tw->data) MP_TRY(stage_filter(ctx, st, tw, &ws, &twc, what));
        MP_TRY(pass_sum(ctx, c, st, true, tdx, tdyc, w, dy, twc, NULL, lib, lib_bytes, &ws, "backward_tangent", what));
    }
    if (want_db) {
        if (tdb->dtype != MP_DTYPE_F32)
            return mp_error(MP_ERR_INVALID_ARG, "%s: backward_tangent: the bias gradient's tangent is %s, expected f32",
                            what, mp_dtype_name(tdb->dtype));
        if (!tdy->data) {
            MP_TRY(mp_cuda_tangent_zero(ctx, c, tdb, "backward_tangent"));
        } else {
            const mp_shape *o = &c->d_out.shape;
            const long long rows = (long long)o->dims[0] * o->dims[2] * o->dims[3];
            void *part = mp_cuda_ws_take(&ws, mp_cuda_lib_colsum_workspace(rows, o->dims[1]));
            if (!part) return ws_short(what);
            MP_TRY(mp_cuda_lib_colsum(ctx, tdy->data, tdy->dtype, rows, o->dims[1], (float *)tdb->data, part, what));
        }
    }
    if (!want_dw) return MP_OK;
    if (!tx->data && !tdy->data) return mp_cuda_tangent_zero(ctx, c, tdw, "backward_tangent");
    /* conv2d: F(x = in, dy = d_out); conv_transpose2d: F(x = d_out, dy = in) */
    const void *x = NULL, *txc = NULL;
    if (tx->data) MP_TRY(stage(ctx, tx, cd, &ws, &txc, what));
    if (tdy->data) MP_TRY(stage(ctx, &c->in[0], cd, &ws, &x, what));
    void *dw1 = mp_cuda_ws_take(&ws, st->dw_bytes);
    void *dw2 = tx->data && tdy->data ? mp_cuda_ws_take(&ws, st->dw_bytes) : NULL;
    if (!dw1 || (tx->data && tdy->data && !dw2)) return ws_short(what);
    void *first = tx->data ? dw1 : NULL, *second = tdy->data ? (first ? dw2 : dw1) : NULL;
    if (first) MP_TRY(filter_pass(ctx, st, conv ? txc : dy, conv ? dy : txc, first, lib, lib_bytes, ws, what));
    if (second) MP_TRY(filter_pass(ctx, st, conv ? x : tdyc, conv ? tdyc : x, second, lib, lib_bytes, ws, what));
    const long long wn = (long long)g->cy * (g->cx / g->groups) * g->k * g->k;
    void *sum = dw1;
    mp_dtype sum_dt = st->dw_dt;
    if (first && second) { /* the two KRSC terms summed in f32 */
        sum = mp_cuda_ws_take(&ws, bytes(MP_DTYPE_F32, wn));
        if (!sum) return ws_short(what);
        sum_dt = MP_DTYPE_F32;
        MP_TRY(mp_cuda_tangent_add(ctx, c, dw1, st->dw_dt, dw2, st->dw_dt, sum, sum_dt, wn, "backward_tangent"));
    }
    return mp_cuda_lib_filter_from_krsc(ctx, sum, sum_dt, tdw->data, tdw->dtype, g->cy, g->cx / g->groups, g->k * g->k,
                                        what);
}
