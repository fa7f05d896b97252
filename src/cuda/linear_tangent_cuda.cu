/* linear_tangent_cuda.cu — the tangents of linear y = x W^T + b on the GPU,
 * by linearity through linear_cuda.cu's own three GEMMs (no new ones):
 *   t_y   = fwd(t_x, W) + fwd(x, t_W) + t_b
 *   t_dx  = bwd_data(t_dy, W) + bwd_data(dy, t_W)
 *   t_dW  = bwd_weight(t_x, dy) + bwd_weight(x, t_dy),   t_db = column sums of t_dy
 * The second GEMM of a sum accumulates into the first's result with
 * cuBLASLt's beta = 1 (C = D), so it is rounded to D's dtype twice in
 * f16/bf16 (each GEMM as forward rounds it), never in f32. Operands go to
 * the compute dtype cd like forward's (t_W arrives f32 and is cast, the
 * weight arrives in cd); a result whose tensor has another dtype than the
 * GEMM's D goes through a workspace slice and one cast. With the bias in
 * the epilogue, the first GEMM adds t_b (cast to cd) and the second a zero
 * bias; else a kernel adds t_b. */
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/linear_cuda.h"
#include "cuda/tangent_cuda.h"

static size_t big(mp_dtype dt, long long n) { return mp_cuda_lib_bytes(dt, n); }

size_t mp_linear_tangent_workspace(const linear_cuda *st) {
    const long long N = st->n, F = st->f, O = st->o;
    const mp_dtype cd = st->cd, f32 = MP_DTYPE_F32;
    size_t lt = st->fwd.workspace;
    if (st->bwd_data.workspace > lt) lt = st->bwd_data.workspace;
    if (st->bwd_weight.workspace > lt) lt = st->bwd_weight.workspace;
    const size_t fwd = 2 * big(cd, N * F) + big(cd, O * F) + big(f32, N * O) + 2 * big(f32, O) + lt;
    const size_t bwd = 2 * big(cd, N * O) + 2 * big(cd, N * F) + big(cd, O * F) + big(f32, N * F) +
                       big(f32, O * F) + lt + (st->bias ? mp_cuda_lib_colsum_workspace(N, (int)O) : 0);
    return (fwd > bwd ? fwd : bwd) + 12 * MP_CUDA_WS_SLACK;
}

static mp_status ws_short(const char *what) {
    return mp_error(MP_ERR_INTERNAL, "%s: the workspace is smaller than prepare() asked for (tangents: was the node "
                                     "prepared with cfg.tangents?)", what);
}

/* *p = (data, dt) in cd: itself, or cast into a workspace slice. */
static mp_status stage(mp_cuda_ctx *ctx, const void *data, mp_dtype dt, long long n, mp_dtype cd, mp_cuda_ws *ws,
                       const void **p, const char *what) {
    *p = data;
    if (dt == cd) return MP_OK;
    void *dst = mp_cuda_ws_take(ws, mp_cuda_lib_bytes(cd, n));
    if (!dst) return ws_short(what);
    *p = dst;
    return mp_cuda_lib_cast(ctx, data, dt, dst, cd, n, what);
}

static mp_status weight_check(const linear_cuda *st, const mp_op_call *c, const char *what) {
    if (c->param[0].dtype == st->cd) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "%s: the weight is %s, expected %s", what, mp_dtype_name(c->param[0].dtype),
                    mp_dtype_name(st->cd));
}

static mp_status set_bias(const lt_gemm *g, const void *b, const char *what) {
    MP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b), what);
    return MP_OK;
}

extern "C" mp_status mp_cuda_linear_forward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    const linear_cuda *st = (const linear_cuda *)c->state;
    const char *what = st->what_fwd;
    const mp_tensor *ty = &c->t_out, *tx = &c->t_in[0], *tw = &c->t_param[0];
    const mp_tensor *tb = st->bias ? &c->t_param[1] : NULL;
    if (!ty->data) return MP_OK;
    MP_TRY(weight_check(st, c, what));
    const mp_dtype cd = st->cd, dd = st->fwd.d_dtype;
    const long long N = st->n, F = st->f, O = st->o;
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const bool direct = ty->dtype == dd;
    void *y = direct ? ty->data : mp_cuda_ws_take(&ws, mp_cuda_lib_bytes(dd, N * O));
    void *lt = st->fwd.workspace ? mp_cuda_ws_take(&ws, st->fwd.workspace) : NULL;
    if (!y || (st->fwd.workspace && !lt)) return ws_short(what);
    /* epilogue biases: t_b in cd for the first GEMM, zeros for the second */
    const void *b_first = NULL, *b_zero = NULL;
    if (st->bias_epilogue) {
        void *z = mp_cuda_ws_take(&ws, mp_cuda_lib_bytes(cd, O));
        if (!z) return ws_short(what);
        MP_TRY(mp_cuda_op_status(c, "forward_tangent",
                                 cudaMemsetAsync(z, 0, (size_t)O * mp_dtype_size(cd), ctx->stream)));
        b_zero = b_first = z;
        if (tb->data) MP_TRY(stage(ctx, tb->data, tb->dtype, O, cd, &ws, &b_first, what));
    }
    bool ran = false;
    if (tx->data) {
        const void *txc;
        MP_TRY(stage(ctx, tx->data, tx->dtype, N * F, cd, &ws, &txc, what));
        if (st->bias_epilogue) MP_TRY(set_bias(&st->fwd, b_first, what));
        MP_TRY(mp_linear_gemm_run(ctx, &st->fwd, c->param[0].data, txc, y, 0.0f, lt, what));
        ran = true;
    }
    if (tw->data) {
        const void *twc, *x;
        MP_TRY(stage(ctx, tw->data, tw->dtype, O * F, cd, &ws, &twc, what));
        MP_TRY(stage(ctx, c->in[0].data, c->in[0].dtype, N * F, cd, &ws, &x, what));
        if (st->bias_epilogue) MP_TRY(set_bias(&st->fwd, ran ? b_zero : b_first, what));
        MP_TRY(mp_linear_gemm_run(ctx, &st->fwd, twc, x, y, ran ? 1.0f : 0.0f, lt, what));
        ran = true;
    }
    if (!ran)
        MP_TRY(mp_cuda_op_status(c, "forward_tangent",
                                 cudaMemsetAsync(y, 0, (size_t)(N * O) * mp_dtype_size(dd), ctx->stream)));
    /* t_b still to add: no epilogue, or no GEMM ran */
    const bool kernel_bias = tb && tb->data && (!st->bias_epilogue || !ran);
    if (direct && !kernel_bias) return MP_OK;
    return mp_cuda_lib_add_bias(ctx, y, dd, ty->data, ty->dtype, kernel_bias ? tb->data : NULL,
                                kernel_bias ? tb->dtype : MP_DTYPE_F32, N, (int)O, what);
}

/* out (its tensor) = g(a1, b1) + g(a2, b2), a NULL pair skipped, none: 0. */
static mp_status gemm_sum(mp_cuda_ctx *ctx, const mp_op_call *c, const lt_gemm *g, const mp_tensor *out,
                          const void *a1, const void *b1, const void *a2, const void *b2, void *lt, mp_cuda_ws *ws,
                          const char *what) {
    const long long n = mp_tensor_numel(out);
    if (!(a1 && b1) && !(a2 && b2)) return mp_cuda_tangent_zero(ctx, c, out, "backward_tangent");
    const bool direct = out->dtype == g->d_dtype;
    void *d = direct ? out->data : mp_cuda_ws_take(ws, mp_cuda_lib_bytes(g->d_dtype, n));
    if (!d) return ws_short(what);
    float beta = 0.0f;
    if (a1 && b1) {
        MP_TRY(mp_linear_gemm_run(ctx, g, a1, b1, d, 0.0f, lt, what));
        beta = 1.0f;
    }
    if (a2 && b2) MP_TRY(mp_linear_gemm_run(ctx, g, a2, b2, d, beta, lt, what));
    if (direct) return MP_OK;
    return mp_cuda_lib_cast(ctx, d, g->d_dtype, out->data, out->dtype, n, what);
}

extern "C" mp_status mp_cuda_linear_backward_tangent(mp_cuda_ctx *ctx, const mp_op_call *c) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    const linear_cuda *st = (const linear_cuda *)c->state;
    const char *what = st->what_bwd;
    if (!st->training) return mp_error(MP_ERR_INVALID_ARG, "%s: the node was prepared for inference only", what);
    const mp_tensor *tdx = &c->t_d_in[0], *tdw = &c->t_d_param[0], *tdb = st->bias ? &c->t_d_param[1] : NULL;
    const bool want_dx = tdx->data, want_dw = tdw->data, want_db = tdb && tdb->data;
    if (!want_dx && !want_dw && !want_db) return MP_OK;
    const mp_dtype cd = st->cd;
    const long long N = st->n, F = st->f, O = st->o;
    const mp_tensor *tdy = &c->t_d_out, *tx = &c->t_in[0], *tw = &c->t_param[0];
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const size_t lt_bytes = st->bwd_data.workspace > st->bwd_weight.workspace ? st->bwd_data.workspace
                                                                              : st->bwd_weight.workspace;
    void *lt = lt_bytes ? mp_cuda_ws_take(&ws, lt_bytes) : NULL;
    if (lt_bytes && !lt) return ws_short(what);
    const void *dy = NULL, *tdyc = NULL, *x = NULL, *txc = NULL, *twc = NULL;
    if (want_dx || want_dw) MP_TRY(stage(ctx, c->d_out.data, c->d_out.dtype, N * O, cd, &ws, &dy, what));
    if ((want_dx || want_dw) && tdy->data) MP_TRY(stage(ctx, tdy->data, tdy->dtype, N * O, cd, &ws, &tdyc, what));
    if (want_dx) {
        MP_TRY(weight_check(st, c, what));
        if (tw->data) MP_TRY(stage(ctx, tw->data, tw->dtype, O * F, cd, &ws, &twc, what));
        MP_TRY(gemm_sum(ctx, c, &st->bwd_data, tdx, c->param[0].data, tdyc, twc, dy, lt, &ws, what));
    }
    if (want_dw) {
        if (tx->data) MP_TRY(stage(ctx, tx->data, tx->dtype, N * F, cd, &ws, &txc, what));
        if (tdy->data) MP_TRY(stage(ctx, c->in[0].data, c->in[0].dtype, N * F, cd, &ws, &x, what));
        MP_TRY(gemm_sum(ctx, c, &st->bwd_weight, tdw, txc, dy, x, tdyc, lt, &ws, what));
    }
    if (want_db) {
        if (tdb->dtype != MP_DTYPE_F32)
            return mp_error(MP_ERR_INVALID_ARG, "%s: backward_tangent: the bias gradient's tangent is %s, expected f32",
                            what, mp_dtype_name(tdb->dtype));
        if (!tdy->data) return mp_cuda_tangent_zero(ctx, c, tdb, "backward_tangent");
        void *part = mp_cuda_ws_take(&ws, mp_cuda_lib_colsum_workspace(N, (int)O));
        if (!part) return ws_short(what);
        MP_TRY(mp_cuda_lib_colsum(ctx, tdy->data, tdy->dtype, N, (int)O, (float *)tdb->data, part, what));
    }
    return MP_OK;
}
