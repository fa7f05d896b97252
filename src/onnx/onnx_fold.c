/* onnx_fold.c — evaluating at import time the constant chains exporters
 * emit around the layers: Constant nodes, Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape computations of static shapes, Cast, Squeeze, Slice,
 * Transpose of weights and integer arithmetic. A shape's batch dimension
 * folds to ONNX_BATCH, which Reshape understands as "each sample". */
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_import.h"

static const char *const fold_ops[] = {"Identity", "Cast", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
                                       "Reshape", "Add", "Sub", "Mul", "Div", "ConstantOfShape", "Transpose",
                                       "Flatten"};

static bool all_inputs_const(onnx_ctx *c) {
    for (size_t k = 0; k < c->node->n_input; k++) {
        if (!c->node->input[k][0]) continue;
        const onnx_value *v = onnx_find(c, c->node->input[k]);
        if (!v || v->kind != ONNX_V_CONST) return false;
    }
    return c->node->n_input > 0;
}

bool onnx_foldable(onnx_ctx *c) {
    const char *op = c->node->op_type;
    if (!strcmp(op, "Constant")) return true;
    if (!strcmp(op, "Shape")) return c->node->n_input >= 1 && onnx_find(c, c->node->input[0]);
    for (size_t k = 0; k < sizeof fold_ops / sizeof fold_ops[0]; k++)
        if (!strcmp(op, fold_ops[k])) return all_inputs_const(c);
    return false;
}

static int64_t prod(const int64_t *d, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= d[i];
    return p;
}

static bool is_sym(int64_t x) { return x == ONNX_BATCH || x == ONNX_DYN; }

/* Folded constants are shapes and small tensors: a larger one is refused
 * before it is allocated. */
#define MAX_FOLDED ((int64_t)1 << 24)

/* The current node's output 0 as a new constant. */
static mp_status out_const(onnx_ctx *c, bool is_int, int ndim, const int64_t *dims, onnx_value **out) {
    if (c->node->n_output < 1) return onnx_fail(c, MP_ERR_FORMAT, "the node has no output");
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) {
        if (dims[k] < 0) return onnx_fail(c, MP_ERR_SHAPE, "the folded constant has a negative dim");
        n = dims[k] == 0 ? 0 : n > MAX_FOLDED / dims[k] ? MAX_FOLDED + 1 : n * dims[k];
    }
    if (n > MAX_FOLDED)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "the folded constant would have more than 2^24 elements");
    MP_TRY(onnx_new_const(c, c->node->output[0], is_int, ndim, dims, out));
    char src[160];
    snprintf(src, sizeof src, "%s", c->node->name && c->node->name[0] ? c->node->name : c->node->op_type);
    (*out)->source = strdup(src);
    return MP_OK;
}

/* Integer elements of input k (a 1-D or scalar int constant); *n = -1 when absent. */
static mp_status input_ints(onnx_ctx *c, int k, int64_t *out, int max, int *n) {
    onnx_value *v;
    *n = -1;
    MP_TRY(onnx_input(c, k, &v));
    if (!v) return MP_OK;
    if (!v->is_int || v->ndim > 1 || v->numel > max)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "input %d '%s' must be a short integer list", k, v->name);
    for (int64_t i = 0; i < v->numel; i++) out[i] = v->i[i];
    *n = (int)v->numel;
    return MP_OK;
}

static mp_status norm_axis(onnx_ctx *c, int64_t axis, int rank, int *out) {
    if (axis < -rank || axis >= rank)
        return onnx_fail(c, MP_ERR_FORMAT, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return MP_OK;
}

/* Constant input 0's elements under a new shape. */
static mp_status copy_value(onnx_ctx *c, int ndim, const int64_t *dims) {
    onnx_value *in, *o;
    MP_TRY(onnx_const(c, 0, &in));
    const int64_t n = in->numel;
    MP_TRY(out_const(c, in->is_int, ndim, dims, &o));
    MP_TRY(onnx_const(c, 0, &in)); /* the table may have moved */
    if (o->numel != n) return onnx_fail(c, MP_ERR_SHAPE, "%lld elements cannot take the new shape", (long long)n);
    if (n) memcpy(in->is_int ? (void *)o->i : (void *)o->f, in->is_int ? (void *)in->i : (void *)in->f,
                  (size_t)n * (in->is_int ? sizeof(int64_t) : sizeof(float)));
    return MP_OK;
}

static mp_status fold_constant(onnx_ctx *c) {
    const Onnx__AttributeProto *a = c->node->n_attribute == 1 ? c->node->attribute[0] : NULL;
    if (!a || !a->name) return onnx_fail(c, MP_ERR_FORMAT, "a Constant needs exactly one attribute");
    onnx_value *o;
    int64_t n;
    if (!strcmp(a->name, "value") && a->t) {
        MP_TRY(onnx_new(c, c->node->output[0], &o));
        o->source = strdup(c->node->output[0]);
        return onnx_tensor_load(c, a->t, o);
    }
    if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        bool is_int = !strcmp(a->name, "value_int");
        MP_TRY(out_const(c, is_int, 0, NULL, &o));
        if (is_int) o->i[0] = a->i;
        else o->f[0] = a->f;
        return MP_OK;
    }
    if (!strcmp(a->name, "value_floats") || !strcmp(a->name, "value_ints")) {
        bool is_int = !strcmp(a->name, "value_ints");
        n = is_int ? (int64_t)a->n_ints : (int64_t)a->n_floats;
        MP_TRY(out_const(c, is_int, 1, &n, &o));
        for (int64_t k = 0; k < n; k++) {
            if (is_int) o->i[k] = a->ints[k];
            else o->f[k] = a->floats[k];
        }
        return MP_OK;
    }
    return onnx_fail(c, MP_ERR_UNSUPPORTED, "Constant attribute %s is not supported", a->name);
}

static mp_status fold_shape(onnx_ctx *c) {
    onnx_value *x;
    MP_TRY(onnx_input(c, 0, &x));
    int64_t start, end, dims[ONNX_MAX_DIMS];
    const int r = x->ndim;
    for (int k = 0; k < r; k++) dims[k] = x->dims[k];
    MP_TRY(onnx_attr_int(c, "start", 0, &start));
    MP_TRY(onnx_attr_int(c, "end", r, &end));
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < start ? start : end > r ? r : end;
    int64_t n = end - start;
    onnx_value *o;
    MP_TRY(out_const(c, true, 1, &n, &o));
    for (int64_t k = 0; k < n; k++) o->i[k] = dims[start + k];
    return MP_OK;
}

static mp_status fold_gather(onnx_ctx *c) {
    onnx_value *d, *idx;
    MP_TRY(onnx_const(c, 0, &d));
    MP_TRY(onnx_const(c, 1, &idx));
    int64_t axis;
    int ax = 0;
    MP_TRY(onnx_attr_int(c, "axis", 0, &axis));
    if (d->ndim < 1) return onnx_fail(c, MP_ERR_FORMAT, "Gather of a scalar");
    MP_TRY(norm_axis(c, axis, d->ndim, &ax));
    if (!idx->is_int) return onnx_fail(c, MP_ERR_FORMAT, "Gather indices '%s' are not integers", idx->name);
    int nd = d->ndim - 1 + idx->ndim;
    if (nd > ONNX_MAX_DIMS) return onnx_fail(c, MP_ERR_UNSUPPORTED, "Gather result of rank %d", nd);
    int64_t dims[ONNX_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < ax; i++) dims[k++] = d->dims[i];
    for (int i = 0; i < idx->ndim; i++) dims[k++] = idx->dims[i];
    for (int i = ax + 1; i < d->ndim; i++) dims[k++] = d->dims[i];
    const int64_t outer = prod(d->dims, 0, ax), inner = prod(d->dims, ax + 1, d->ndim), len = d->dims[ax];
    const bool is_int = d->is_int;
    onnx_value *o;
    MP_TRY(out_const(c, is_int, nd, dims, &o));
    MP_TRY(onnx_input(c, 0, &d)); /* the table may have moved */
    MP_TRY(onnx_input(c, 1, &idx));
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < idx->numel; j++) {
            int64_t t = idx->i[j];
            if (t < -len || t >= len)
                return onnx_fail(c, MP_ERR_FORMAT, "Gather index %lld out of range for a dim of %lld", (long long)t,
                                 (long long)len);
            if (t < 0) t += len;
            for (int64_t b = 0; b < inner; b++) {
                int64_t src = (a * len + t) * inner + b, dst = (a * idx->numel + j) * inner + b;
                if (is_int) o->i[dst] = d->i[src];
                else o->f[dst] = d->f[src];
            }
        }
    return MP_OK;
}

static mp_status fold_unsqueeze_squeeze(onnx_ctx *c, bool unsqueeze) {
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x));
    int64_t axes[ONNX_MAX_DIMS];
    int na;
    MP_TRY(input_ints(c, 1, axes, ONNX_MAX_DIMS, &na));
    int64_t dims[ONNX_MAX_DIMS];
    int nd = 0;
    if (unsqueeze) {
        if (na < 1) return onnx_fail(c, MP_ERR_FORMAT, "Unsqueeze needs axes");
        const int r = x->ndim + na;
        if (r > ONNX_MAX_DIMS) return onnx_fail(c, MP_ERR_UNSUPPORTED, "Unsqueeze to rank %d", r);
        bool one[ONNX_MAX_DIMS] = {0};
        for (int k = 0; k < na; k++) {
            int ax = 0;
            MP_TRY(norm_axis(c, axes[k], r, &ax));
            if (one[ax]) return onnx_fail(c, MP_ERR_FORMAT, "Unsqueeze axis %d repeated", ax);
            one[ax] = true;
        }
        for (int k = 0, j = 0; k < r; k++) dims[nd++] = one[k] ? 1 : x->dims[j++];
    } else {
        bool drop[ONNX_MAX_DIMS] = {0};
        for (int k = 0; k < na; k++) {
            int ax = 0;
            MP_TRY(norm_axis(c, axes[k], x->ndim, &ax));
            if (x->dims[ax] != 1) return onnx_fail(c, MP_ERR_SHAPE, "Squeeze axis %d has size %lld", ax,
                                                   (long long)x->dims[ax]);
            drop[ax] = true;
        }
        for (int k = 0; k < x->ndim; k++)
            if (!(na < 0 ? x->dims[k] == 1 : drop[k])) dims[nd++] = x->dims[k];
    }
    return copy_value(c, nd, dims);
}

static mp_status fold_concat(onnx_ctx *c) {
    int64_t axis;
    MP_TRY(onnx_attr_int(c, "axis", 0, &axis));
    onnx_value *first;
    MP_TRY(onnx_const(c, 0, &first));
    const int r = first->ndim;
    const bool is_int = first->is_int;
    int ax = 0;
    MP_TRY(norm_axis(c, axis, r, &ax));
    int64_t dims[ONNX_MAX_DIMS];
    for (int k = 0; k < r; k++) dims[k] = first->dims[k];
    dims[ax] = 0;
    const int n = (int)c->node->n_input;
    for (int k = 0; k < n; k++) {
        onnx_value *v;
        MP_TRY(onnx_const(c, k, &v));
        if (v->ndim != r || v->is_int != is_int)
            return onnx_fail(c, MP_ERR_SHAPE, "Concat of constants of different ranks or types");
        for (int i = 0; i < r; i++)
            if (i != ax && v->dims[i] != dims[i]) return onnx_fail(c, MP_ERR_SHAPE, "Concat: dim %d differs", i);
        dims[ax] += v->dims[ax];
    }
    onnx_value *o;
    MP_TRY(out_const(c, is_int, r, dims, &o));
    const int64_t outer = prod(dims, 0, ax);
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        onnx_value *v;
        MP_TRY(onnx_const(c, k, &v));
        const int64_t inner = prod(v->dims, ax, r), total = prod(dims, ax, r);
        for (int64_t a = 0; a < outer; a++)
            for (int64_t b = 0; b < inner; b++) {
                if (is_int) o->i[a * total + off + b] = v->i[a * inner + b];
                else o->f[a * total + off + b] = v->f[a * inner + b];
            }
        off += inner;
    }
    return MP_OK;
}

static mp_status fold_slice(onnx_ctx *c) {
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x));
    int64_t st[1], en[1], ax[1] = {0}, sp[1] = {1};
    int ns, ne, na, nsp;
    MP_TRY(input_ints(c, 1, st, 1, &ns));
    MP_TRY(input_ints(c, 2, en, 1, &ne));
    MP_TRY(input_ints(c, 3, ax, 1, &na));
    MP_TRY(input_ints(c, 4, sp, 1, &nsp));
    if (x->ndim != 1 || ns != 1 || ne != 1 || (na >= 0 && na != 1) || (nsp >= 0 && nsp != 1))
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "only a Slice of a 1-D constant along its one axis is folded");
    if (ax[0] != 0 && ax[0] != -1) return onnx_fail(c, MP_ERR_FORMAT, "Slice axis %lld", (long long)ax[0]);
    const int64_t len = x->dims[0];
    int64_t step = nsp < 0 ? 1 : sp[0];
    if (step == 0) return onnx_fail(c, MP_ERR_FORMAT, "Slice step 0");
    if (step > len + 1) step = len + 1; /* one element at most either way */
    if (step < -len - 1) step = -len - 1;
    int64_t s = st[0], e = en[0];
    if (s < 0) s = s < -len ? -1 - len : s + len;
    if (e < 0) e = e < -len ? -1 - len : e + len;
    if (step > 0) {
        s = s < 0 ? 0 : s > len ? len : s;
        e = e < 0 ? 0 : e > len ? len : e;
    } else {
        s = s < 0 ? 0 : s; /* a start before the first element clamps to it; an empty axis gives -1: nothing */
        s = s > len - 1 ? len - 1 : s;
        e = e < -1 ? -1 : e > len - 1 ? len - 1 : e;
    }
    const int64_t n = step > 0 ? (e > s ? 1 + (e - s - 1) / step : 0) : (s > e ? 1 + (s - e - 1) / -step : 0);
    const bool is_int = x->is_int;
    onnx_value *o;
    MP_TRY(out_const(c, is_int, 1, &n, &o));
    MP_TRY(onnx_const(c, 0, &x));
    for (int64_t k = 0; k < n; k++) {
        const int64_t j = s + k * step;
        if (is_int) o->i[k] = x->i[j];
        else o->f[k] = x->f[j];
    }
    return MP_OK;
}

static mp_status fold_reshape(onnx_ctx *c) {
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x));
    int64_t shape[ONNX_MAX_DIMS];
    int n;
    MP_TRY(input_ints(c, 1, shape, ONNX_MAX_DIMS, &n));
    if (n < 0) return onnx_fail(c, MP_ERR_FORMAT, "Reshape needs a shape");
    int64_t known = 1;
    int infer = -1;
    for (int k = 0; k < n; k++) {
        if (shape[k] == 0 && k < x->ndim) shape[k] = x->dims[k];
        if (shape[k] == -1 && infer < 0) infer = k;
        else if (shape[k] < 0) return onnx_fail(c, MP_ERR_SHAPE, "Reshape of a constant to a dynamic shape");
        else if (shape[k] > x->numel) return onnx_fail(c, MP_ERR_SHAPE, "Reshape of %lld elements to a dim of %lld",
                                                        (long long)x->numel, (long long)shape[k]);
        else known = shape[k] && known > x->numel / shape[k] ? x->numel + 1 : known * shape[k];
    }
    if (infer >= 0) shape[infer] = known ? x->numel / known : 0;
    return copy_value(c, n, shape);
}

static mp_status fold_flatten(onnx_ctx *c) {
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x));
    int64_t axis;
    int ax = 0;
    MP_TRY(onnx_attr_int(c, "axis", 1, &axis));
    if (axis == x->ndim) ax = x->ndim;
    else MP_TRY(norm_axis(c, axis, x->ndim, &ax));
    int64_t dims[2] = {prod(x->dims, 0, ax), prod(x->dims, ax, x->ndim)};
    return copy_value(c, 2, dims);
}

static mp_status fold_transpose(onnx_ctx *c) {
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x));
    const int r = x->ndim;
    int64_t perm[ONNX_MAX_DIMS];
    int np;
    MP_TRY(onnx_attr_ints(c, "perm", perm, ONNX_MAX_DIMS, &np));
    if (np < 0)
        for (int k = 0; k < r; k++) perm[k] = r - 1 - k;
    else if (np != r) return onnx_fail(c, MP_ERR_FORMAT, "Transpose perm has %d entries for rank %d", np, r);
    bool used[ONNX_MAX_DIMS] = {0};
    int64_t dims[ONNX_MAX_DIMS], stride[ONNX_MAX_DIMS];
    for (int k = 0; k < r; k++) {
        if (perm[k] < 0 || perm[k] >= r || used[perm[k]]) return onnx_fail(c, MP_ERR_FORMAT, "bad Transpose perm");
        used[perm[k]] = true;
        dims[k] = x->dims[perm[k]];
    }
    for (int64_t k = r - 1, s = 1; k >= 0; k--) stride[k] = s, s *= x->dims[k];
    const bool is_int = x->is_int;
    onnx_value *o;
    MP_TRY(out_const(c, is_int, r, dims, &o));
    MP_TRY(onnx_const(c, 0, &x));
    int64_t idx[ONNX_MAX_DIMS] = {0};
    for (int64_t k = 0; k < o->numel; k++) {
        int64_t src = 0;
        for (int d = 0; d < r; d++) src += idx[d] * stride[perm[d]];
        if (is_int) o->i[k] = x->i[src];
        else o->f[k] = x->f[src];
        for (int d = r - 1; d >= 0; d--) {
            if (++idx[d] < dims[d]) break;
            idx[d] = 0;
        }
    }
    return MP_OK;
}

static mp_status fold_cast(onnx_ctx *c) {
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x));
    int64_t to;
    MP_TRY(onnx_attr_int(c, "to", 0, &to));
    const bool to_float = to == 1 || to == 10 || to == 11 || to == 16;
    const bool to_int = to == 6 || to == 7 || to == 9 || (to >= 2 && to <= 5) || to == 12 || to == 13;
    if (!to_float && !to_int) return onnx_fail(c, MP_ERR_UNSUPPORTED, "Cast to type %lld", (long long)to);
    int64_t dims[ONNX_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    onnx_value *o;
    MP_TRY(out_const(c, to_int, x->ndim, dims, &o));
    MP_TRY(onnx_const(c, 0, &x));
    for (int64_t k = 0; k < x->numel; k++) {
        if (to_int && x->is_int) o->i[k] = to == 9 && !is_sym(x->i[k]) ? x->i[k] != 0 : x->i[k];
        else if (to_int) {
            float f = x->f[k];
            if (!(f > -9.2e18f && f < 9.2e18f)) return onnx_fail(c, MP_ERR_FORMAT, "Cast of %g to an integer", f);
            o->i[k] = to == 9 ? f != 0 : (int64_t)f;
        } else if (x->is_int) {
            if (is_sym(x->i[k])) return onnx_fail(c, MP_ERR_SHAPE, "Cast of the dynamic batch size to a float");
            o->f[k] = (float)x->i[k];
        } else o->f[k] = x->f[k];
        if (!to_int && to == 10) o->f[k] = mp_f16_to_f32(mp_f32_to_f16(o->f[k]));
        if (!to_int && to == 16) o->f[k] = mp_bf16_to_f32(mp_f32_to_bf16(o->f[k]));
    }
    return MP_OK;
}

static mp_status fold_binary(onnx_ctx *c, char op) {
    onnx_value *a, *b;
    MP_TRY(onnx_const(c, 0, &a));
    MP_TRY(onnx_const(c, 1, &b));
    if (a->is_int != b->is_int) return onnx_fail(c, MP_ERR_FORMAT, "operands of different types");
    /* numpy's broadcast: shapes right-aligned to the larger rank, each pair of
     * dims equal or one of them 1; an operand's stride is 0 along its dims of 1 */
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t dims[ONNX_MAX_DIMS], sa[ONNX_MAX_DIMS], sb[ONNX_MAX_DIMS], ta = 1, tb = 1;
    for (int k = nd - 1, ka = a->ndim - 1, kb = b->ndim - 1; k >= 0; k--, ka--, kb--) {
        const int64_t da = ka >= 0 ? a->dims[ka] : 1, db = kb >= 0 ? b->dims[kb] : 1;
        if (da != db && da != 1 && db != 1) {
            char b1[96], b2[96];
            return onnx_fail(c, MP_ERR_SHAPE, "constants '%s' %s and '%s' %s do not broadcast", a->name,
                             onnx_dims_str(a->ndim, a->dims, b1, sizeof b1), b->name,
                             onnx_dims_str(b->ndim, b->dims, b2, sizeof b2));
        }
        dims[k] = da == 1 ? db : da;
        sa[k] = da == 1 ? 0 : ta, sb[k] = db == 1 ? 0 : tb;
        ta *= da, tb *= db;
    }
    const bool is_int = a->is_int;
    onnx_value *o;
    MP_TRY(out_const(c, is_int, nd, dims, &o));
    MP_TRY(onnx_const(c, 0, &a));
    MP_TRY(onnx_const(c, 1, &b));
    int64_t idx[ONNX_MAX_DIMS] = {0}, i = 0, j = 0;
    for (int64_t k = 0; k < o->numel; k++) {
        if (k > 0) /* the next index of the output, and of a and b */
            for (int d = nd - 1; d >= 0; d--) {
                i += sa[d], j += sb[d];
                if (++idx[d] < dims[d]) break;
                i -= sa[d] * dims[d], j -= sb[d] * dims[d], idx[d] = 0;
            }
        if (is_int) {
            int64_t x = a->i[i], y = b->i[j];
            if (is_sym(x) || is_sym(y)) {
                o->i[k] = ONNX_DYN;
                continue;
            }
            if (op == '/' && (y == 0 || (x == INT64_MIN && y == -1)))
                return onnx_fail(c, MP_ERR_FORMAT, "integer division %lld / %lld", (long long)x, (long long)y);
            /* wrapping, as the runtimes' int64 arithmetic (no undefined overflow) */
            const uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
            o->i[k] = op == '+' ? (int64_t)(ux + uy) : op == '-' ? (int64_t)(ux - uy)
                    : op == '*' ? (int64_t)(ux * uy) : x / y;
        } else {
            float x = a->f[i], y = b->f[j];
            o->f[k] = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
        }
    }
    return MP_OK;
}

static mp_status fold_constant_of_shape(onnx_ctx *c) {
    int64_t dims[ONNX_MAX_DIMS];
    int n;
    MP_TRY(input_ints(c, 0, dims, ONNX_MAX_DIMS, &n));
    for (int k = 0; k < n; k++)
        if (dims[k] < 0) return onnx_fail(c, MP_ERR_SHAPE, "ConstantOfShape of a dynamic shape");
    const Onnx__AttributeProto *a = onnx_attr(c, "value");
    bool is_int = false;
    float fv = 0;
    int64_t iv = 0;
    if (a && a->t) {
        onnx_value *tv;
        MP_TRY(onnx_new(c, " ConstantOfShape value", &tv));
        mp_status s = onnx_tensor_load(c, a->t, tv);
        if (s == MP_OK && tv->numel != 1) s = onnx_fail(c, MP_ERR_FORMAT, "ConstantOfShape value must be one element");
        if (s == MP_OK) {
            is_int = tv->is_int;
            if (is_int) iv = tv->i[0];
            else fv = tv->f[0];
        }
        free(tv->name), free(tv->f), free(tv->i), free(tv->source);
        c->n_vals--;
        MP_TRY(s);
    }
    onnx_value *o;
    MP_TRY(out_const(c, is_int, n < 0 ? 0 : n, dims, &o));
    for (int64_t k = 0; k < o->numel; k++) {
        if (is_int) o->i[k] = iv;
        else o->f[k] = fv;
    }
    return MP_OK;
}

mp_status onnx_fold(onnx_ctx *c) {
    const char *op = c->node->op_type;
    if (c->node->n_output < 1 || !c->node->output[0][0]) return onnx_fail(c, MP_ERR_FORMAT, "the node has no output");
    if (!strcmp(op, "Constant")) return fold_constant(c);
    if (!strcmp(op, "Shape")) return fold_shape(c);
    if (!strcmp(op, "Gather")) return fold_gather(c);
    if (!strcmp(op, "Unsqueeze")) return fold_unsqueeze_squeeze(c, true);
    if (!strcmp(op, "Squeeze")) return fold_unsqueeze_squeeze(c, false);
    if (!strcmp(op, "Concat")) return fold_concat(c);
    if (!strcmp(op, "Slice")) return fold_slice(c);
    if (!strcmp(op, "Reshape")) return fold_reshape(c);
    if (!strcmp(op, "Flatten")) return fold_flatten(c);
    if (!strcmp(op, "Transpose")) return fold_transpose(c);
    if (!strcmp(op, "Cast")) return fold_cast(c);
    if (!strcmp(op, "Add")) return fold_binary(c, '+');
    if (!strcmp(op, "Sub")) return fold_binary(c, '-');
    if (!strcmp(op, "Mul")) return fold_binary(c, '*');
    if (!strcmp(op, "Div")) return fold_binary(c, '/');
    if (!strcmp(op, "ConstantOfShape")) return fold_constant_of_shape(c);
    onnx_value *x;
    MP_TRY(onnx_const(c, 0, &x)); /* Identity */
    int64_t dims[ONNX_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    return copy_value(c, x->ndim, dims);
}
