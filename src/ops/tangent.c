/* tangent.c — see tangent.h: the dtype check and the helpers that express
 * an op's tangents through its own forward and backward kernels. */
#include "ops/tangent.h"

#include <string.h>

#define MP_REF_TEMPLATE "tangent_ref.inc"
#include "instantiate_real.inc"

static bool real_dtype(mp_dtype dt) { return dt == MP_DTYPE_F32 || dt == MP_DTYPE_F64; }

/* An error when the given tangent t does not share the primal p's dtype. */
static mp_status same_dtype(const mp_op_call *c, const char *which, const mp_tensor *p, const mp_tensor *t,
                            const char *what) {
    if (!t->data || t->dtype == p->dtype) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "%s '%s': %s: the tangent of %s is %s, the tensor %s",
                    mp_op_lookup(c->desc->kind)->name, c->desc->name ? c->desc->name : "?", which, what,
                    mp_dtype_name(t->dtype), mp_dtype_name(p->dtype));
}

/* The first real tensor of the call whose dtype is not out's, else out's. */
static mp_dtype other_dtype(const mp_op_call *c) {
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].dtype != MP_DTYPE_I32 && c->in[i].dtype != c->out.dtype) return c->in[i].dtype;
    for (int p = 0; p < c->info->n_params; p++)
        if (c->param[p].dtype != c->out.dtype) return c->param[p].dtype;
    return c->out.dtype;
}

mp_status mp_tangent_check(const mp_op_call *c, const char *which) {
    const char *op = mp_op_lookup(c->desc->kind)->name, *node = c->desc->name ? c->desc->name : "?";
    mp_dtype dt = c->out.dtype, other = other_dtype(c);
    if (!real_dtype(dt) || other != dt)
        return mp_error(MP_ERR_UNSUPPORTED,
                        "%s '%s': %s runs in f32 or f64 only, every tensor in one of them; this node has %s%s%s "
                        "(second derivatives: compute the node in f32)",
                        op, node, which, mp_dtype_name(dt), other != dt ? " and " : "",
                        other != dt ? mp_dtype_name(other) : "");
    if (c->resid.data)
        return mp_error(MP_ERR_UNSUPPORTED,
                        "%s '%s': %s does not support the fused residual add (plan without fusing it)", op, node,
                        which);
    MP_TRY(same_dtype(c, which, &c->out, &c->t_out, "the output"));
    MP_TRY(same_dtype(c, which, &c->d_out, &c->t_d_out, "the output gradient"));
    for (int i = 0; i < c->n_in; i++) {
        MP_TRY(same_dtype(c, which, &c->in[i], &c->t_in[i], "an input"));
        MP_TRY(same_dtype(c, which, &c->in[i], &c->t_d_in[i], "an input gradient"));
    }
    for (int p = 0; p < c->info->n_params; p++) {
        MP_TRY(same_dtype(c, which, &c->param[p], &c->t_param[p], "a parameter"));
        MP_TRY(same_dtype(c, which, &c->param[p], &c->t_d_param[p], "a parameter gradient"));
    }
    return MP_OK;
}

void *mp_tangent_scratch(const mp_op_call *c) { return (char *)c->workspace + MP_ALIGN64(c->info->workspace_bytes); }

double mp_tangent_scalar(const mp_tensor *t) {
    if (!t->data) return 0;
    return t->dtype == MP_DTYPE_F64 ? ((const double *)t->data)[0] : (double)((const float *)t->data)[0];
}

void mp_tangent_set_scalar(const mp_tensor *t, double v) {
    if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[0] = v;
    else ((float *)t->data)[0] = (float)v;
}

void mp_tangent_zero(const mp_tensor *t) {
    if (t->data) memset(t->data, 0, (size_t)mp_tensor_numel(t) * mp_dtype_size(t->dtype));
}

void mp_tangent_add_bias(const mp_tensor *y, const void *b, int64_t outer, int64_t C, int64_t inner) {
    MP_REAL_CALL(y->dtype, tan_add_bias, y->data, b, outer, C, inner);
}

void mp_tangent_channel_sum(const mp_tensor *db, const void *dy, int64_t outer, int64_t C, int64_t inner) {
    if (!db->data) return;
    if (!dy) mp_tangent_zero(db);
    else MP_REAL_CALL(db->dtype, tan_channel_sum, dy, db->data, outer, C, inner);
}

void mp_tangent_bilinear(const mp_op_call *c, mp_bilinear_fn k, const mp_tensor *out, const void *a, const void *ta,
                         const void *b, const void *tb) {
    if (!out->data) return;
    if (!ta && !tb) {
        mp_tangent_zero(out);
        return;
    }
    if (ta) k(c, ta, b, out->data);
    if (!tb) return;
    if (!ta) {
        k(c, a, tb, out->data);
        return;
    }
    void *second = mp_tangent_scratch(c); /* after the op's own scratch, which k may use */
    k(c, a, tb, second);
    MP_REAL_CALL(out->dtype, tan_add, out->data, second, mp_tensor_numel(out));
}

size_t mp_tangent_affine_workspace(const mp_op_info *info) {
    int64_t most = mp_shape_numel(&info->in[0]), y = mp_shape_numel(&info->out);
    int64_t w = mp_shape_numel(&info->params[0].shape);
    if (y > most) most = y;
    if (w > most) most = w;
    return mp_tangent_bytes(most);
}

void *mp_tangent_affine_extra(const mp_op_call *c) {
    return (char *)mp_tangent_scratch(c) + mp_tangent_affine_workspace(c->info);
}

mp_status mp_tangent_affine_forward(const mp_op_call *c, const mp_tangent_affine *k) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    const mp_tensor *y = &c->t_out;
    if (!y->data) return MP_OK;
    mp_tangent_bilinear(c, k->fwd, y, c->in[0].data, c->t_in[0].data, c->param[0].data, c->t_param[0].data);
    if (c->info->n_params > 1 && c->t_param[1].data) {
        int64_t outer = y->shape.dims[0], C = y->shape.dims[1];
        mp_tangent_add_bias(y, c->t_param[1].data, outer, C, mp_tensor_numel(y) / (outer * C));
    }
    return MP_OK;
}

mp_status mp_tangent_affine_backward(const mp_op_call *c, const mp_tangent_affine *k) {
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    const void *dy = c->d_out.data, *tdy = c->t_d_out.data;
    mp_tangent_bilinear(c, k->bwd_data, &c->t_d_in[0], dy, tdy, c->param[0].data, c->t_param[0].data);
    mp_tangent_bilinear(c, k->bwd_weights, &c->t_d_param[0], c->in[0].data, c->t_in[0].data, dy, tdy);
    if (c->info->n_params > 1) {
        const mp_shape *s = &c->d_out.shape;
        int64_t outer = s->dims[0], C = s->dims[1];
        mp_tangent_channel_sum(&c->t_d_param[1], tdy, outer, C, mp_shape_numel(s) / (outer * C));
    }
    return MP_OK;
}

mp_status mp_tangent_forward_linear(const mp_op_call *c, mp_status (*fwd)(const mp_op_call *)) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    mp_op_call s = *c;
    bool any = false;
    for (int i = 0; i < c->n_in; i++) {
        s.in[i].data = c->t_in[i].data;
        any = any || c->t_in[i].data;
    }
    s.out.data = c->t_out.data;
    if (!any) {
        mp_tangent_zero(&c->t_out);
        return MP_OK;
    }
    return fwd(&s);
}

mp_status mp_tangent_backward_linear(const mp_op_call *c, mp_status (*bwd)(const mp_op_call *)) {
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    if (!c->t_d_out.data) {
        for (int i = 0; i < c->n_in; i++) mp_tangent_zero(&c->t_d_in[i]);
        return MP_OK;
    }
    mp_op_call s = *c;
    s.d_out.data = c->t_d_out.data;
    for (int i = 0; i < c->n_in; i++) s.d_in[i].data = c->t_d_in[i].data;
    for (int p = 0; p < c->info->n_params; p++) s.d_param[p].data = NULL;
    return bwd(&s);
}

mp_status mp_tangent_forward_by_backward(const mp_op_call *c, mp_status (*bwd)(const mp_op_call *)) {
    MP_TRY(mp_tangent_check(c, "forward_tangent"));
    if (!c->t_out.data) return MP_OK;
    if (!c->t_in[0].data) {
        mp_tangent_zero(&c->t_out);
        return MP_OK;
    }
    mp_op_call s = *c;
    s.d_out.data = c->t_in[0].data;
    s.d_in[0].data = c->t_out.data;
    return bwd(&s);
}
