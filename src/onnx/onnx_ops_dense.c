/* onnx_ops_dense.c — importing Gemm and MatMul (+ the Add of a bias that
 * follows a MatMul) as mixprec's linear layer, and Flatten and Reshape, which
 * act per sample in mixprec: the batch dimension must stay first. */
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_import.h"

/* When the current node's output is read only by an Add of it and a float
 * constant of m elements, that Add is the layer's bias: mark it absorbed and
 * return the constant and the Add's output name; else NULL. */
static onnx_value *bias_add(onnx_ctx *c, int64_t m, const char **out_name) {
    int only;
    if (onnx_consumers(c, c->node->output[0], &only) != 1 || only <= c->node_index) return NULL;
    const Onnx__NodeProto *a = c->graph->node[only];
    if (!a->op_type || strcmp(a->op_type, "Add") || (a->domain && a->domain[0] && strcmp(a->domain, "ai.onnx")) ||
        a->n_input != 2 || a->n_output != 1) /* a later node: not checked yet (it may have no op type) */
        return NULL;
    const int other = strcmp(a->input[0], c->node->output[0]) ? 0 : 1;
    onnx_value *b = onnx_find(c, a->input[other]);
    if (!b || b->kind != ONNX_V_CONST || b->is_int || b->numel != m || b->ndim > 2 || (b->ndim == 2 && b->dims[0] != 1))
        return NULL;
    c->absorbed[only] = true;
    *out_name = a->output[0];
    return b;
}

/* linear `name` reading x (N, K) with weight (M, K) and bias (M) or NULL;
 * `wv` names the weight's source in messages. */
static mp_status emit_linear(onnx_ctx *c, const char *name, onnx_value *x, const onnx_value *wv, const float *w,
                             int64_t m, const onnx_value *bv, const float *b, const char *out_name) {
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    mp_node y = mp_linear(c->g, name, xin, (mp_linear_opts){.out_features = (int)m, .bias = b != NULL});
    MP_TRY(onnx_built(c, y));
    MP_TRY(onnx_set_param(c, name, "weight", wv, w, m * x->dims[1]));
    if (b) MP_TRY(onnx_set_param(c, name, "bias", bv, b, m));
    const int64_t dims[2] = {ONNX_BATCH, m};
    return onnx_new_act(c, out_name, y, 2, dims);
}

/* Y = alpha * A B' + beta * C with B' = B or its transpose: A the (N, K)
 * activation, B and C constants. */
static mp_status emit_dense(onnx_ctx *c, const char *name, bool gemm) {
    onnx_value *x, *bm, *cv = NULL;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(onnx_const(c, 1, &bm));
    if (gemm) MP_TRY(onnx_input(c, 2, &cv));
    int64_t trans_a = 0, trans_b = 0;
    float alpha = 1, beta = 1;
    if (gemm) {
        MP_TRY(onnx_attr_int(c, "transA", 0, &trans_a));
        MP_TRY(onnx_attr_int(c, "transB", 0, &trans_b));
        MP_TRY(onnx_attr_float(c, "alpha", 1, &alpha));
        MP_TRY(onnx_attr_float(c, "beta", 1, &beta));
    }
    char b1[96], b2[96];
    if (trans_a) return onnx_fail(c, MP_ERR_UNSUPPORTED, "transA=1: mixprec's linear layer reads (N, K) inputs");
    if (x->ndim != 2)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "input '%s' has shape %s: mixprec's linear layer takes (N, K)", x->name,
                         onnx_dims_str(x->ndim, x->dims, b1, sizeof b1));
    if (bm->is_int || bm->ndim != 2) return onnx_fail(c, MP_ERR_UNSUPPORTED, "weight '%s' is not a 2-D float tensor", bm->name);
    const int64_t k = trans_b ? bm->dims[1] : bm->dims[0], m = trans_b ? bm->dims[0] : bm->dims[1];
    if (k != x->dims[1])
        return onnx_fail(c, MP_ERR_SHAPE, "input '%s' %s and weight '%s' %s%s do not multiply", x->name,
                         onnx_dims_str(x->ndim, x->dims, b1, sizeof b1), bm->name,
                         onnx_dims_str(bm->ndim, bm->dims, b2, sizeof b2), trans_b ? " (transposed)" : "");
    if (m < 1 || m > (1 << 24)) return onnx_fail(c, MP_ERR_SHAPE, "%lld outputs", (long long)m);
    const char *out_name = c->node->output[0];
    const float c_scale = cv ? beta : 1; /* ONNX's Gemm ignores beta without C: not applied to an absorbed Add */
    if (cv) {
        /* C broadcasts to (N, M): of rank at most 2 (a (1, 1, M) would make the output 3-D) */
        if (cv->kind != ONNX_V_CONST || cv->is_int || (cv->numel != m && cv->numel != 1) || cv->ndim > 2 ||
            (cv->ndim == 2 && cv->dims[0] != 1))
            return onnx_fail(c, MP_ERR_UNSUPPORTED, "C '%s' of shape %s: mixprec's bias is a constant of one value "
                                                    "per output", cv->name, onnx_dims_str(cv->ndim, cv->dims, b1, sizeof b1));
    } else {
        cv = bias_add(c, m, &out_name);
    }
    MP_TRY(onnx_single_output(c));
    float *w = malloc((size_t)(m * k) * sizeof *w), *b = cv ? malloc((size_t)m * sizeof *b) : NULL;
    if (!w || (cv && !b)) {
        free(w), free(b);
        return onnx_fail(c, MP_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++) w[i * k + j] = alpha * (trans_b ? bm->f[i * k + j] : bm->f[j * m + i]);
    for (int64_t i = 0; cv && i < m; i++) b[i] = c_scale * cv->f[cv->numel == 1 ? 0 : i];
    mp_status s = emit_linear(c, name, x, bm, w, m, cv, b, out_name);
    free(w), free(b);
    return s;
}

mp_status onnx_emit_gemm(onnx_ctx *c, const char *name) { return emit_dense(c, name, true); }
mp_status onnx_emit_matmul(onnx_ctx *c, const char *name) { return emit_dense(c, name, false); }

/* x's mixprec node reshaped to the ONNX shape (ndim, dims), or x's node when
 * it has that shape already. */
static mp_status reshape_to(onnx_ctx *c, const char *name, const onnx_value *x, int ndim, const int64_t *dims) {
    const mp_shape *s = &c->g->nodes[x->node].sample_shape;
    bool same = s->ndim == ndim;
    for (int k = 1; same && k < ndim; k++) same = s->dims[k] == dims[k];
    if (same) return onnx_alias(c, x, ndim, dims);
    mp_node y;
    int64_t d[ONNX_MAX_DIMS];
    memcpy(d, dims, (size_t)ndim * sizeof *d);
    MP_TRY(onnx_reshape_node(c, name, x->node, ndim, d, &y));
    return onnx_output(c, y, ndim, d);
}

static int64_t sample_numel(const onnx_value *x) {
    int64_t n = 1;
    for (int k = 1; k < x->ndim; k++) n *= x->dims[k];
    return n;
}

mp_status onnx_emit_flatten(onnx_ctx *c, const char *name) {
    onnx_value *x;
    MP_TRY(onnx_act(c, 0, &x));
    int64_t axis;
    MP_TRY(onnx_attr_int(c, "axis", 1, &axis));
    if (axis < 0) axis += x->ndim;
    if (axis != 1)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "Flatten axis %lld: mixprec flattens each sample (axis 1)",
                         (long long)axis);
    const int64_t dims[2] = {ONNX_BATCH, sample_numel(x)};
    return reshape_to(c, name, x, 2, dims);
}

mp_status onnx_emit_reshape(onnx_ctx *c, const char *name) {
    onnx_value *x, *sh;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(onnx_input(c, 1, &sh));
    if (!sh) return onnx_fail(c, MP_ERR_FORMAT, "Reshape without a shape");
    if (sh->kind != ONNX_V_CONST)
        return onnx_fail(c, MP_ERR_SHAPE, "the target shape '%s' depends on the input's values, not only on its "
                                          "static shape; export with static shapes", sh->name);
    if (!sh->is_int || sh->ndim != 1 || sh->numel < 1 || sh->numel > ONNX_MAX_DIMS)
        return onnx_fail(c, MP_ERR_FORMAT, "the target shape '%s' is not a short list of integers", sh->name);
    int64_t allowzero;
    MP_TRY(onnx_attr_int(c, "allowzero", 0, &allowzero));
    const int n = (int)sh->numel;
    int64_t d[ONNX_MAX_DIMS];
    memcpy(d, sh->i, (size_t)n * sizeof *d);
    char b1[96], b2[96];
    /* the first dim must be the batch: the folded batch size, 0 (copy), -1,
     * or the static batch size of the model's input */
    const bool batch_first = d[0] == ONNX_BATCH || (d[0] == 0 && !allowzero) || d[0] == -1 ||
                             (c->input_batch > 0 && d[0] == c->input_batch);
    if (!batch_first)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "target shape %s of '%s' does not keep the batch dimension first: "
                                                "mixprec reshapes each sample", onnx_dims_str(n, d, b1, sizeof b1),
                         x->name);
    const int64_t have = sample_numel(x);
    int64_t known = 1;
    int infer = -1;
    for (int k = 1; k < n; k++) {
        if (d[k] == 0 && !allowzero && k < x->ndim) d[k] = x->dims[k];
        if (d[k] > have)
            return onnx_fail(c, MP_ERR_SHAPE, "cannot reshape '%s' (%lld values per sample) to %s", x->name,
                             (long long)have, onnx_dims_str(n, sh->i, b1, sizeof b1));
        if (d[k] == -1 && infer < 0 && d[0] != -1) infer = k;
        else if (d[k] < 1)
            return onnx_fail(c, MP_ERR_SHAPE, "cannot resolve the dynamic target shape %s of '%s' %s; export with "
                                              "static shapes (or give the input shape)", onnx_dims_str(n, sh->i, b1, sizeof b1),
                             x->name, onnx_dims_str(x->ndim, x->dims, b2, sizeof b2));
        else known = known > have / d[k] ? have + 1 : known * d[k]; /* no overflow */
    }
    if (infer >= 0) d[infer] = known > 0 && have % known == 0 ? have / known : -1;
    int64_t want = 1;
    for (int k = 1; k < n; k++) want = d[k] < 1 || want > have / d[k] ? have + 1 : want * d[k];
    if (want != have || (infer >= 0 && d[infer] < 1))
        return onnx_fail(c, MP_ERR_SHAPE, "cannot reshape '%s' %s (%lld values per sample) to %s", x->name,
                         onnx_dims_str(x->ndim, x->dims, b1, sizeof b1), (long long)have,
                         onnx_dims_str(n, sh->i, b2, sizeof b2));
    d[0] = ONNX_BATCH;
    if (n < 2) return onnx_fail(c, MP_ERR_UNSUPPORTED, "a reshape to rank 1 mixes the samples");
    return reshape_to(c, name, x, n, d);
}
