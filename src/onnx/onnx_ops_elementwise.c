/* onnx_ops_elementwise.c — importing the activations, Add and Mul of two
 * same-shaped activations (no broadcasting: mixprec's add and mul take equal
 * shapes), Concat along channels, Dropout and Identity. */
#include <string.h>

#include "onnx/onnx_import.h"

typedef mp_node (*unary_fn)(mp_graph *g, const char *name, mp_node x);

static mp_status emit_unary(onnx_ctx *c, const char *name, unary_fn fn) {
    onnx_value *x;
    MP_TRY(onnx_act(c, 0, &x));
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    return onnx_output_node(c, fn(c->g, name, xin));
}

mp_status onnx_emit_relu(onnx_ctx *c, const char *name) { return emit_unary(c, name, mp_relu); }
mp_status onnx_emit_sigmoid(onnx_ctx *c, const char *name) { return emit_unary(c, name, mp_sigmoid); }
mp_status onnx_emit_tanh(onnx_ctx *c, const char *name) { return emit_unary(c, name, mp_tanh); }

mp_status onnx_emit_leaky_relu(onnx_ctx *c, const char *name) {
    onnx_value *x;
    float alpha;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(onnx_attr_float(c, "alpha", 0.01f, &alpha));
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    return onnx_output_node(c, mp_leaky_relu(c->g, name, xin, alpha));
}

static mp_status emit_binary(onnx_ctx *c, const char *name, bool add) {
    onnx_value *a, *b;
    MP_TRY(onnx_input(c, 0, &a));
    MP_TRY(onnx_input(c, 1, &b));
    if (!a || !b) return onnx_fail(c, MP_ERR_FORMAT, "needs two inputs");
    if (a->kind != ONNX_V_ACT || b->kind != ONNX_V_ACT) {
        const onnx_value *k = a->kind == ONNX_V_CONST ? a : b;
        return onnx_fail(c, MP_ERR_UNSUPPORTED,
                         "%s of an activation and the constant '%s': mixprec's %s takes two activations of one shape%s",
                         c->node->op_type, k->name, add ? "add" : "mul",
                         add ? " (a constant is taken only as the bias of the MatMul before it)" : "");
    }
    bool same = a->ndim == b->ndim;
    for (int k = 1; same && k < a->ndim; k++) same = a->dims[k] == b->dims[k];
    if (!same) {
        char ba[96], bb[96];
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "'%s' %s and '%s' %s differ: mixprec's %s does not broadcast", a->name,
                         onnx_dims_str(a->ndim, a->dims, ba, sizeof ba), b->name,
                         onnx_dims_str(b->ndim, b->dims, bb, sizeof bb), add ? "add" : "mul");
    }
    mp_node xa, xb;
    MP_TRY(onnx_conform(c, a, &xa));
    MP_TRY(onnx_conform(c, b, &xb));
    return onnx_output_node(c, add ? mp_add(c->g, name, xa, xb) : mp_mul(c->g, name, xa, xb));
}

mp_status onnx_emit_add(onnx_ctx *c, const char *name) { return emit_binary(c, name, true); }
mp_status onnx_emit_mul(onnx_ctx *c, const char *name) { return emit_binary(c, name, false); }

mp_status onnx_emit_concat(onnx_ctx *c, const char *name) {
    const int n = (int)c->node->n_input;
    if (n < 1 || n > MP_MAX_INPUTS)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "Concat of %d inputs (mixprec: 1 to %d)", n, MP_MAX_INPUTS);
    if (!onnx_attr(c, "axis")) return onnx_fail(c, MP_ERR_FORMAT, "Concat without an axis");
    int64_t axis;
    MP_TRY(onnx_attr_int(c, "axis", 1, &axis));
    mp_node xs[MP_MAX_INPUTS];
    int rank = -1;
    for (int k = 0; k < n; k++) {
        onnx_value *x;
        MP_TRY(onnx_act(c, k, &x));
        if (rank < 0) rank = x->ndim;
        if (x->ndim != rank) return onnx_fail(c, MP_ERR_SHAPE, "inputs of different ranks");
        MP_TRY(onnx_conform(c, x, &xs[k]));
    }
    if (axis < 0) axis += rank;
    if (axis != 1 || (rank != 2 && rank != 4))
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "Concat along axis %lld of %d-D tensors: mixprec concatenates "
                                                "channels (axis 1) of (N, C, H, W) or features of (N, F)",
                         (long long)axis, rank);
    return onnx_output_node(c, mp_concat(c->g, name, xs, n));
}

mp_status onnx_emit_dropout(onnx_ctx *c, const char *name) {
    onnx_value *x, *ratio, *mode;
    MP_TRY(onnx_act(c, 0, &x));
    MP_TRY(onnx_input(c, 1, &ratio));
    MP_TRY(onnx_input(c, 2, &mode));
    float p = 0.5f;
    if (ratio) {
        if (ratio->kind != ONNX_V_CONST || ratio->is_int || ratio->numel != 1)
            return onnx_fail(c, MP_ERR_UNSUPPORTED, "ratio '%s' is not a constant float", ratio->name);
        p = ratio->f[0];
    }
    if (mode && mode->kind != ONNX_V_CONST)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "training_mode '%s' is not a constant", mode->name);
    if (mode && mode->numel != 1) return onnx_fail(c, MP_ERR_FORMAT, "training_mode '%s' is not one value", mode->name);
    /* training mode draws a random mask, except at ratio 0 (the identity) */
    if (mode && (mode->is_int ? mode->i[0] != 0 : mode->f[0] != 0) && p != 0)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "training_mode '%s' is true: export the model in inference (eval) mode",
                         mode->name);
    if (!(p >= 0 && p < 1)) return onnx_fail(c, MP_ERR_FORMAT, "ratio %g is not in [0, 1)", p);
    MP_TRY(onnx_single_output(c));
    if (p == 0) return onnx_alias(c, x, x->ndim, x->dims);
    mp_node xin;
    MP_TRY(onnx_conform(c, x, &xin));
    return onnx_output_node(c, mp_dropout(c->g, name, xin, p)); /* an identity at inference */
}

mp_status onnx_emit_identity(onnx_ctx *c, const char *name) {
    (void)name;
    onnx_value *x;
    MP_TRY(onnx_act(c, 0, &x));
    return onnx_alias(c, x, x->ndim, x->dims);
}
