/* linear_cuda.cu — linear y = x W^T + b on the GPU with cuBLASLt.
 * x (N, F), W (O, F), y (N, O) row-major = column-major x^T (F x N),
 * W^T (F x O), y^T (O x N), so the three GEMMs are (column-major, m x n x k):
 *   forward     y^T  = op(W^T)^T x^T : A = W (F x O, T), B = x (F x N)        m=O n=N k=F
 *   d_in        dx^T = W^T dy^T      : A = W (F x O),    B = dy (O x N)       m=F n=N k=O
 *   d_weight    dW^T = x^T dy        : A = x (F x N),    B = dy (O x N, T)    m=F n=O k=N
 * Types: A/B in the compute dtype cd; f32 -> CUBLAS_COMPUTE_32F (no TF32 in
 * cuBLASLt without FAST_TF32), tf32 -> CUBLAS_COMPUTE_32F_FAST_TF32,
 * f16/bf16 -> CUBLAS_COMPUTE_32F (tensor cores, f32 accumulation). D is the
 * tensor's own dtype when cuBLASLt can write it (cd, or f32 from f16/bf16:
 * logits stored f32, the weight gradient in f32 or, under low_grads, in cd),
 * else a workspace slice in cd
 * cast once. The bias rides the GEMM epilogue (CUBLASLT_EPILOGUE_BIAS) when
 * its dtype is D's, else a bias kernel adds it; db = column sums of dy.
 * Algorithms: cublasLtMatmulAlgoGetHeuristic's best 8 once per GEMM in
 * prepare, with at most 32 MiB of workspace (split-K reducing in f32 only
 * when D is f16/bf16), the fastest of them by timing
 * (lt_pick.h: timed once per problem and GPU model in a process; the
 * heuristic's first under MIXPREC_DETERMINISTIC=1). The weight (and bias) arrive in cd
 * (f32 master, or the executor's f16/bf16 cast), see cuda_op.h. */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/linear_cuda.h"
#include "cuda/lt_pick.h"
#include "cuda/tangent_cuda.h"

#define LT_MAX_WORKSPACE ((size_t)32 << 20)
#define LT_CANDIDATES 8


/* cuBLASLt writes D in cd, or in f32 from f16/bf16 inputs. */
static bool d_direct(mp_dtype cd, mp_dtype d) { return d == cd || d == MP_DTYPE_F32; }

void mp_linear_gemm_destroy(lt_gemm *g) {
    if (g->a) cublasLtMatrixLayoutDestroy(g->a);
    if (g->b) cublasLtMatrixLayoutDestroy(g->b);
    if (g->d) cublasLtMatrixLayoutDestroy(g->d);
    if (g->op) cublasLtMatmulDescDestroy(g->op);
}

static void linear_cuda_release(void *state) {
    linear_cuda *st = (linear_cuda *)state;
    if (!st) return;
    mp_linear_gemm_destroy(&st->fwd);
    mp_linear_gemm_destroy(&st->bwd_data);
    mp_linear_gemm_destroy(&st->bwd_weight);
    free(st);
}

mp_status mp_linear_gemm_init(mp_cuda_ctx *ctx, lt_gemm *g, cublasComputeType_t ct, mp_dtype ab, mp_dtype dd,
                              cublasOperation_t ta, mp_lt_mat a, cublasOperation_t tb, mp_lt_mat b, mp_lt_mat d,
                              cublasLtEpilogue_t epi, const char *what) {
    g->d_dtype = dd;
    MP_CUBLAS_TRY(cublasLtMatmulDescCreate(&g->op, ct, CUDA_R_32F), what);
    MP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what);
    MP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what);
    MP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), what);
    MP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->a, mp_cuda_data_type(ab), a.rows, a.cols, a.ld), what);
    MP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->b, mp_cuda_data_type(ab), b.rows, b.cols, b.ld), what);
    MP_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->d, mp_cuda_data_type(dd), d.rows, d.cols, d.ld), what);
    cublasLtMatmulPreference_t pref = NULL;
    MP_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), what);
    const uint64_t max_ws = LT_MAX_WORKSPACE;
    const uint32_t align = 16; /* tensors in the arena are at least 64-byte aligned; 16 keeps every kernel legal */
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                            sizeof max_ws);
    const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align);
    /* D in f16/bf16: split-K partial sums only in f32 (the compute type), so D is rounded once, as the CPU
     * rounds it; in place or in D's type they would be rounded at every partial sum */
    const uint32_t one_rounding = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (s == CUBLAS_STATUS_SUCCESS && dd != MP_DTYPE_F32)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &one_rounding,
                                                 sizeof one_rounding);
    cublasLtMatmulHeuristicResult_t r[LT_CANDIDATES];
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, g->op, g->a, g->b, g->d, g->d, pref, LT_CANDIDATES, r, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    MP_TRY(mp_cublas_check(s, "cublasLtMatmulAlgoGetHeuristic", what));
    if (found < 1)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for %s x %s -> %s (%llu x %llu x %llu)",
                        what, mp_dtype_name(ab), mp_dtype_name(ab), mp_dtype_name(dd), (unsigned long long)d.rows,
                        (unsigned long long)d.cols,
                        (unsigned long long)(ta == CUBLAS_OP_N ? a.cols : a.rows));
    const size_t ab_size = mp_dtype_size(ab), d_size = mp_dtype_size(dd);
    const mp_lt_problem pb = {
        .op = g->op, .a = g->a, .b = g->b, .d = g->d,
        .a_bytes = (size_t)a.ld * a.cols * ab_size, .b_bytes = (size_t)b.ld * b.cols * ab_size,
        .d_bytes = (size_t)d.ld * d.cols * d_size, .bias_bytes = epi == CUBLASLT_EPILOGUE_BIAS ? d.rows * ab_size : 0,
        .key = {.compute = ct, .scale = CUDA_R_32F, .epilogue = epi, .trans_a = ta, .trans_b = tb,
                .a_type = mp_cuda_data_type(ab), .a_rows = (int64_t)a.rows, .a_cols = (int64_t)a.cols, .lda = a.ld,
                .b_type = mp_cuda_data_type(ab), .b_rows = (int64_t)b.rows, .b_cols = (int64_t)b.cols, .ldb = b.ld,
                .d_type = mp_cuda_data_type(dd), .d_rows = (int64_t)d.rows, .d_cols = (int64_t)d.cols, .ldd = d.ld}};
    int best = 0;
    MP_TRY(mp_lt_pick_fastest(ctx, &pb, r, found, &best, what));
    g->algo = r[best].algo;
    g->workspace = r[best].workspaceSize;
    return MP_OK;
}

mp_status mp_linear_gemm_run(mp_cuda_ctx *ctx, const lt_gemm *g, const void *a, const void *b, void *d, float beta,
                             void *ws, const char *what) {
    const float one = 1.0f;
    MP_CUBLAS_TRY(cublasLtMatmul(ctx->lt, g->op, &one, a, g->a, b, g->b, &beta, d, g->d, d, g->d, &g->algo, ws,
                                 g->workspace, ctx->stream),
                  what);
    return MP_OK;
}

static void describe(char *buf, size_t len, const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                     const char *dir) {
    char in[64], out[64];
    snprintf(buf, len, "linear '%s' %s [in %s %s -> out %s %s%s, compute %s%s]", d->name ? d->name : "?", dir,
             mp_shape_str(&info->in[0], in, sizeof in), mp_dtype_name(cfg->in_dtype[0]),
             mp_shape_str(&info->out, out, sizeof out), mp_dtype_name(cfg->storage),
             d->attr.linear.bias ? ", bias" : "", mp_dtype_name(cfg->compute), cfg->tf32 ? "+tf32" : "");
}

static mp_status linear_cuda_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                     const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                     size_t *saved_bytes) {
    (void)saved_bytes;
    *state = NULL;
    const mp_dtype cd = cfg->compute;
    if (cd != MP_DTYPE_F32 && cd != MP_DTYPE_F16 && cd != MP_DTYPE_BF16)
        return mp_error(MP_ERR_UNSUPPORTED, "linear '%s': compute dtype %s not supported on the GPU (f32, f16, bf16)",
                        d->name ? d->name : "?", mp_dtype_name(cd));
    linear_cuda *st = (linear_cuda *)calloc(1, sizeof *st);
    if (!st) return mp_error(MP_ERR_NOMEM, "linear '%s': out of host memory", d->name ? d->name : "?");
    st->n = info->in[0].dims[0];
    st->f = info->in[0].dims[1];
    st->o = info->out.dims[1];
    st->bias = d->attr.linear.bias;
    st->training = cfg->training;
    st->cd = cd;
    describe(st->what_fwd, sizeof st->what_fwd, d, info, cfg, "forward");
    describe(st->what_bwd, sizeof st->what_bwd, d, info, cfg, "backward");
    const uint64_t N = (uint64_t)st->n, F = (uint64_t)st->f, O = (uint64_t)st->o;
    const cublasComputeType_t ct =
        cd == MP_DTYPE_F32 && cfg->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const mp_dtype fwd_d = d_direct(cd, cfg->storage) ? cfg->storage : cd;
    /* The bias arrives in cd (see cuda_op.h): the epilogue takes it when D is in cd too. */
    st->bias_epilogue = st->bias && fwd_d == cd;
    const mp_lt_mat w = {F, O, (int64_t)F}, x = {F, N, (int64_t)F}, y = {O, N, (int64_t)O};
    mp_status s = mp_linear_gemm_init(ctx, &st->fwd, ct, cd, fwd_d, CUBLAS_OP_T, w, CUBLAS_OP_N, x, y,
                                      st->bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
                                      st->what_fwd);
    if (s == MP_OK && cfg->training) {
        const mp_dtype bd = d_direct(cd, cfg->in_dtype[0]) ? cfg->in_dtype[0] : cd;
        const mp_lt_mat dx = {F, N, (int64_t)F}, dw = {F, O, (int64_t)F};
        s = mp_linear_gemm_init(ctx, &st->bwd_data, ct, cd, bd, CUBLAS_OP_N, w, CUBLAS_OP_N, y, dx,
                                CUBLASLT_EPILOGUE_DEFAULT, st->what_bwd);
        if (s == MP_OK)
            s = mp_linear_gemm_init(ctx, &st->bwd_weight, ct, cd, cfg->weight_grad, CUBLAS_OP_N, x, CUBLAS_OP_T, y,
                                    dw, CUBLASLT_EPILOGUE_DEFAULT, st->what_bwd);
    }
    if (s != MP_OK) {
        linear_cuda_release(st);
        return s;
    }
    const size_t in_cast = cfg->in_dtype[0] != cd ? mp_cuda_lib_bytes(cd, (long long)(N * F)) : 0;
    const size_t out_cast = cfg->storage != cd ? mp_cuda_lib_bytes(cd, (long long)(N * O)) : 0;
    size_t fwd = in_cast + out_cast + st->fwd.workspace, bwd = 0;
    if (cfg->training) {
        const size_t lt = st->bwd_data.workspace > st->bwd_weight.workspace ? st->bwd_data.workspace
                                                                            : st->bwd_weight.workspace;
        bwd = out_cast + 2 * in_cast + lt + (st->bias ? mp_cuda_lib_colsum_workspace(st->n, st->o) : 0);
    }
    st->ws_total = (fwd > bwd ? fwd : bwd) + 6 * MP_CUDA_WS_SLACK;
    if (cfg->tangents) {
        const size_t t = mp_linear_tangent_workspace(st);
        if (t > st->ws_total) st->ws_total = t;
    }
    if (*workspace_bytes < st->ws_total) *workspace_bytes = st->ws_total;
    *state = st;
    return MP_OK;
}

static mp_status ws_short(const char *what) {
    return mp_error(MP_ERR_INTERNAL, "%s: the workspace is smaller than prepare() asked for", what);
}

/* *p = t's data in dtype dt: t itself, or t cast into a workspace slice. */
static mp_status stage_in(mp_cuda_ctx *ctx, const mp_tensor *t, mp_dtype dt, mp_cuda_ws *ws, const void **p,
                          const char *what) {
    *p = t->data;
    if (t->dtype == dt) return MP_OK;
    void *dst = mp_cuda_ws_take(ws, mp_cuda_lib_bytes(dt, mp_tensor_numel(t)));
    if (!dst) return ws_short(what);
    *p = dst;
    return mp_cuda_lib_cast(ctx, t->data, t->dtype, dst, dt, mp_tensor_numel(t), what);
}

static mp_status param_dtype_error(const char *what, const char *name, mp_dtype got, mp_dtype want) {
    return mp_error(MP_ERR_INVALID_ARG, "%s: %s is %s, expected %s", what, name, mp_dtype_name(got),
                    mp_dtype_name(want));
}

static mp_status linear_cuda_forward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const linear_cuda *st = (const linear_cuda *)c->state;
    const char *what = st->what_fwd;
    if (c->param[0].dtype != st->cd) return param_dtype_error(what, "the weight", c->param[0].dtype, st->cd);
    if (st->bias_epilogue && c->param[1].dtype != st->cd)
        return param_dtype_error(what, "the bias", c->param[1].dtype, st->cd);
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const void *x;
    MP_TRY(stage_in(ctx, &c->in[0], st->cd, &ws, &x, what));
    const bool direct = c->out.dtype == st->fwd.d_dtype;
    void *y = direct ? c->out.data : mp_cuda_ws_take(&ws, mp_cuda_lib_bytes(st->cd, mp_tensor_numel(&c->out)));
    void *lt = st->fwd.workspace ? mp_cuda_ws_take(&ws, st->fwd.workspace) : NULL;
    if (!y || (st->fwd.workspace && !lt)) return ws_short(what);
    if (st->bias_epilogue) {
        const void *b = c->param[1].data;
        MP_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(st->fwd.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b),
                      what);
    }
    MP_TRY(mp_linear_gemm_run(ctx, &st->fwd, c->param[0].data, x, y, 0.0f, lt, what));
    const bool kernel_bias = st->bias && !st->bias_epilogue;
    if (direct && !kernel_bias) return MP_OK;
    return mp_cuda_lib_add_bias(ctx, y, st->fwd.d_dtype, c->out.data, c->out.dtype,
                                kernel_bias ? c->param[1].data : NULL, kernel_bias ? c->param[1].dtype : MP_DTYPE_F32,
                                st->n, st->o, what);
}

static mp_status linear_cuda_backward(mp_cuda_ctx *ctx, const mp_op_call *c) {
    const linear_cuda *st = (const linear_cuda *)c->state;
    const char *what = st->what_bwd;
    if (!st->training) return mp_error(MP_ERR_INVALID_ARG, "%s: the node was prepared for inference only", what);
    const bool want_dx = c->d_in[0].data != NULL, want_dw = c->d_param[0].data != NULL;
    const bool want_db = st->bias && c->d_param[1].data;
    mp_cuda_ws ws = mp_cuda_ws_begin(c->workspace, st->ws_total);
    const void *dy = NULL, *x = NULL;
    if (want_dx || want_dw) MP_TRY(stage_in(ctx, &c->d_out, st->cd, &ws, &dy, what));
    if (want_dw) MP_TRY(stage_in(ctx, &c->in[0], st->cd, &ws, &x, what));
    const bool dx_direct = want_dx && c->d_in[0].dtype == st->bwd_data.d_dtype;
    void *dx = !want_dx ? NULL
               : dx_direct ? c->d_in[0].data
                           : mp_cuda_ws_take(&ws, mp_cuda_lib_bytes(st->cd, mp_tensor_numel(&c->d_in[0])));
    const size_t lt_bytes = st->bwd_data.workspace > st->bwd_weight.workspace ? st->bwd_data.workspace
                                                                              : st->bwd_weight.workspace;
    void *lt = lt_bytes ? mp_cuda_ws_take(&ws, lt_bytes) : NULL;
    if ((want_dx && !dx) || (lt_bytes && !lt)) return ws_short(what);
    if (want_dx) {
        if (c->param[0].dtype != st->cd) return param_dtype_error(what, "the weight", c->param[0].dtype, st->cd);
        MP_TRY(mp_linear_gemm_run(ctx, &st->bwd_data, c->param[0].data, dy, dx, 0.0f, lt, what));
        if (!dx_direct)
            MP_TRY(mp_cuda_lib_cast(ctx, dx, st->bwd_data.d_dtype, c->d_in[0].data, c->d_in[0].dtype,
                                    mp_tensor_numel(&c->d_in[0]), what));
    }
    if (want_dw) {
        if (c->d_param[0].dtype != st->bwd_weight.d_dtype)
            return param_dtype_error(what, "the weight gradient", c->d_param[0].dtype, st->bwd_weight.d_dtype);
        MP_TRY(mp_linear_gemm_run(ctx, &st->bwd_weight, x, dy, c->d_param[0].data, 0.0f, lt, what));
    }
    if (want_db) {
        if (c->d_param[1].dtype != MP_DTYPE_F32)
            return param_dtype_error(what, "the bias gradient", c->d_param[1].dtype, MP_DTYPE_F32);
        void *part = mp_cuda_ws_take(&ws, mp_cuda_lib_colsum_workspace(st->n, st->o));
        if (!part) return ws_short(what);
        MP_TRY(mp_cuda_lib_colsum(ctx, c->d_out.data, c->d_out.dtype, st->n, st->o, (float *)c->d_param[1].data, part,
                                  what));
    }
    return MP_OK;
}

/* Tangents: linear_tangent_cuda.cu. */
extern "C" const mp_cuda_op_vtable mp_cuda_linear_vt = {"linear",
                                                        linear_cuda_prepare,
                                                        linear_cuda_release,
                                                        linear_cuda_forward,
                                                        linear_cuda_backward,
                                                        mp_cuda_linear_forward_tangent,
                                                        mp_cuda_linear_backward_tangent, NULL};
