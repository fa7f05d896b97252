/* tangent_cuda.cu — see tangent_cuda.h: the dtype check of the GPU tangent
 * calls and the helpers that run a tangent through the op's own forward or
 * backward, by linearity (the GPU forms of ops/tangent.c's). */
#include "cuda/tangent_cuda.h"

#include "cuda/cuda_kernel_util.cuh"

static const char *op_name(const mp_op_call *c) {
    const mp_op_vtable *vt = mp_op_lookup(c->desc->kind);
    return vt ? vt->name : "op";
}

static const char *node_name(const mp_op_call *c) { return c->desc->name ? c->desc->name : "?"; }

static mp_status bad_dtype(const mp_op_call *c, const char *which, const char *what, int i, const mp_tensor *t) {
    return mp_error(MP_ERR_UNSUPPORTED, "%s '%s' on the GPU: %s: %s %d is %s (tangents must be f32, f16 or bf16)",
                    op_name(c), node_name(c), which, what, i, mp_dtype_name(t->dtype));
}

mp_status mp_cuda_tangent_check(const mp_op_call *c, const char *which) {
    if (c->resid.data)
        return mp_error(MP_ERR_UNSUPPORTED,
                        "%s '%s' on the GPU: %s does not support the fused residual add (plan without fusing it)",
                        op_name(c), node_name(c), which);
    if (c->param_krsc) /* choose_krsc (cuda_plan.c) leaves second-order plans their filters in the CPU layout */
        return mp_error(MP_ERR_INTERNAL, "%s '%s' on the GPU: %s reads its filter in the CPU layout, which this plan "
                                         "keeps in KRSC", op_name(c), node_name(c), which);
    if (c->t_out.data && !mp_cuda_float_dtype(c->t_out.dtype)) return bad_dtype(c, which, "t_out", 0, &c->t_out);
    if (c->t_d_out.data && !mp_cuda_float_dtype(c->t_d_out.dtype))
        return bad_dtype(c, which, "t_d_out", 0, &c->t_d_out);
    for (int i = 0; i < c->n_in; i++) {
        if (c->t_in[i].data && !mp_cuda_float_dtype(c->t_in[i].dtype)) return bad_dtype(c, which, "t_in", i, &c->t_in[i]);
        if (c->t_d_in[i].data && !mp_cuda_float_dtype(c->t_d_in[i].dtype))
            return bad_dtype(c, which, "t_d_in", i, &c->t_d_in[i]);
    }
    for (int p = 0; p < c->info->n_params; p++) {
        if (c->t_param[p].data && !mp_cuda_float_dtype(c->t_param[p].dtype))
            return bad_dtype(c, which, "t_param", p, &c->t_param[p]);
        if (c->t_d_param[p].data && !mp_cuda_float_dtype(c->t_d_param[p].dtype))
            return bad_dtype(c, which, "t_d_param", p, &c->t_d_param[p]);
    }
    return MP_OK;
}

mp_status mp_cuda_tangent_zero(mp_cuda_ctx *ctx, const mp_op_call *c, const mp_tensor *t, const char *which) {
    if (!t->data) return MP_OK;
    const size_t bytes = (size_t)mp_tensor_numel(t) * mp_dtype_size(t->dtype);
    return mp_cuda_op_status(c, which, cudaMemsetAsync(t->data, 0, bytes, ctx->stream));
}

mp_status mp_cuda_tangent_add(mp_cuda_ctx *ctx, const mp_op_call *c, const void *a, mp_dtype adt, const void *b,
                              mp_dtype bdt, void *out, mp_dtype odt, long long n, const char *which) {
    mp_ew_io<2> io = {{a, b}, {adt, bdt}, out, odt, n};
    return mp_cuda_op_status(c, which, mp_ew_launch(ctx, io, mp_sum2()));
}

mp_status mp_cuda_tangent_forward_linear(mp_cuda_ctx *ctx, const mp_op_call *c, mp_cuda_op_fn fwd, bool zero_first) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    mp_op_call s = *c;
    bool any = false, all = true;
    for (int i = 0; i < c->n_in; i++) {
        s.in[i].data = c->t_in[i].data;
        if (c->t_in[i].data) s.in[i].dtype = c->t_in[i].dtype;
        any = any || c->t_in[i].data;
        all = all && c->t_in[i].data;
    }
    s.out = c->t_out;
    if (!any || (!all && zero_first)) MP_TRY(mp_cuda_tangent_zero(ctx, c, &c->t_out, "forward_tangent"));
    if (!any) return MP_OK;
    return fwd(ctx, &s);
}

mp_status mp_cuda_tangent_backward_linear(mp_cuda_ctx *ctx, const mp_op_call *c, mp_cuda_op_fn bwd) {
    MP_TRY(mp_cuda_tangent_check(c, "backward_tangent"));
    if (!c->t_d_out.data) {
        for (int i = 0; i < c->n_in; i++) MP_TRY(mp_cuda_tangent_zero(ctx, c, &c->t_d_in[i], "backward_tangent"));
        return MP_OK;
    }
    mp_op_call s = *c;
    s.d_out = c->t_d_out;
    for (int i = 0; i < c->n_in; i++) s.d_in[i] = c->t_d_in[i];
    for (int p = 0; p < c->info->n_params; p++) s.d_param[p].data = NULL;
    return bwd(ctx, &s);
}

mp_status mp_cuda_tangent_forward_by_backward(mp_cuda_ctx *ctx, const mp_op_call *c, mp_cuda_op_fn bwd) {
    MP_TRY(mp_cuda_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    if (!c->t_in[0].data) return mp_cuda_tangent_zero(ctx, c, &c->t_out, "forward_tangent");
    mp_op_call s = *c;
    s.d_out = c->t_in[0];
    s.d_in[0] = c->t_out;
    for (int i = 1; i < c->n_in; i++) s.d_in[i].data = NULL;
    for (int p = 0; p < c->info->n_params; p++) s.d_param[p].data = NULL;
    return bwd(ctx, &s);
}
