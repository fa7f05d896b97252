/* onnx_attr.c — reading ONNX TensorProtos (initializers, Constant values)
 * into import-time constants, and node attributes by name and type. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "onnx/onnx_import.h"

/* TensorProto.DataType values the importer reads. */
enum {
    T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3, T_UINT16 = 4, T_INT16 = 5, T_INT32 = 6, T_INT64 = 7,
    T_BOOL = 9, T_FLOAT16 = 10, T_DOUBLE = 11, T_UINT32 = 12, T_UINT64 = 13, T_BFLOAT16 = 16
};

static int elem_size(int t) {
    switch (t) {
    case T_FLOAT: case T_INT32: case T_UINT32: return 4;
    case T_UINT8: case T_INT8: case T_BOOL: return 1;
    case T_UINT16: case T_INT16: case T_FLOAT16: case T_BFLOAT16: return 2;
    case T_INT64: case T_DOUBLE: case T_UINT64: return 8;
    default: return 0;
    }
}

/* double -> float without undefined behaviour: out of range is +-inf (which
 * parameters then refuse), NaN stays NaN */
static float d2f(double d) {
    if (d > FLT_MAX) return INFINITY;
    if (d < -FLT_MAX) return -INFINITY;
    return (float)d;
}

static bool is_float_type(int t) { return t == T_FLOAT || t == T_FLOAT16 || t == T_BFLOAT16 || t == T_DOUBLE; }

/* Element k of little-endian raw data of type t. */
static void raw_elem(const uint8_t *p, int t, float *f, int64_t *i) {
    uint64_t u = 0;
    int n = elem_size(t);
    for (int b = 0; b < n; b++) u |= (uint64_t)p[b] << (8 * b);
    switch (t) {
    case T_FLOAT: { uint32_t w = (uint32_t)u; memcpy(f, &w, 4); break; }
    case T_FLOAT16: *f = mp_f16_to_f32((mp_f16){(uint16_t)u}); break;
    case T_BFLOAT16: *f = mp_bf16_to_f32((mp_bf16){(uint16_t)u}); break;
    case T_DOUBLE: { double d; memcpy(&d, &u, 8); *f = d2f(d); break; }
    case T_INT8: *i = (int8_t)u; break;
    case T_INT16: *i = (int16_t)u; break;
    case T_INT32: *i = (int32_t)u; break;
    case T_INT64: case T_UINT64: *i = (int64_t)u; break;
    default: *i = (int64_t)u; break; /* unsigned and bool */
    }
}

mp_status onnx_tensor_load(onnx_ctx *c, const Onnx__TensorProto *t, onnx_value *v) {
    const char *nm = v->name;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "tensor '%s' keeps its data in an external file; save the model with "
                                                "its weights inside the .onnx file", nm);
    if (t->segment) return onnx_fail(c, MP_ERR_UNSUPPORTED, "tensor '%s' is segmented", nm);
    const int type = t->has_data_type ? t->data_type : 0;
    if (!elem_size(type))
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "tensor '%s' has data type %d (mixprec reads float, float16, bfloat16, "
                                                "double and integer tensors)", nm, type);
    if (t->n_dims > ONNX_MAX_DIMS)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "tensor '%s' has %zu dims (at most %d)", nm, t->n_dims, ONNX_MAX_DIMS);
    int64_t dims[ONNX_MAX_DIMS], n = 1;
    for (size_t k = 0; k < t->n_dims; k++) {
        dims[k] = t->dims[k];
        if (dims[k] < 0) return onnx_fail(c, MP_ERR_FORMAT, "tensor '%s' has a negative dim", nm);
        n = dims[k] && n > ((int64_t)1 << 31) / dims[k] ? ((int64_t)1 << 31) + 1 : n * dims[k];
    }
    /* the data must be there before anything is allocated for it */
    const int es = elem_size(type);
    const size_t have = t->has_raw_data ? t->raw_data.len / (size_t)es
                        : type == T_FLOAT ? t->n_float_data
                        : type == T_DOUBLE ? t->n_double_data
                        : type == T_INT64 ? t->n_int64_data
                        : type == T_UINT32 || type == T_UINT64 ? t->n_uint64_data
                        : t->n_int32_data;
    if ((int64_t)have != n || (t->has_raw_data && t->raw_data.len % (size_t)es))
        return onnx_fail(c, MP_ERR_FORMAT, "tensor '%s' holds %zu %s; its shape needs %lld", nm,
                         t->has_raw_data ? t->raw_data.len : have, t->has_raw_data ? "bytes" : "values",
                         (long long)(t->has_raw_data ? n * es : n));
    MP_TRY(onnx_const_alloc(c, v, !is_float_type(type), (int)t->n_dims, dims));
    onnx_value tmp = *v;
    if (t->has_raw_data) {
        for (int64_t k = 0; k < n; k++)
            raw_elem(t->raw_data.data + k * es, type, tmp.f ? &tmp.f[k] : NULL, tmp.i ? &tmp.i[k] : NULL);
    } else {
        for (int64_t k = 0; k < n; k++) {
            switch (type) {
            case T_FLOAT: tmp.f[k] = t->float_data[k]; break;
            case T_DOUBLE: tmp.f[k] = d2f(t->double_data[k]); break;
            case T_FLOAT16: tmp.f[k] = mp_f16_to_f32((mp_f16){(uint16_t)t->int32_data[k]}); break;
            case T_BFLOAT16: tmp.f[k] = mp_bf16_to_f32((mp_bf16){(uint16_t)t->int32_data[k]}); break;
            case T_INT64: tmp.i[k] = t->int64_data[k]; break;
            case T_UINT32: case T_UINT64: tmp.i[k] = (int64_t)t->uint64_data[k]; break;
            default: tmp.i[k] = t->int32_data[k]; break;
            }
        }
    }
    return MP_OK;
}

const Onnx__AttributeProto *onnx_attr(const onnx_ctx *c, const char *name) {
    for (size_t k = 0; k < c->node->n_attribute; k++)
        if (c->node->attribute[k]->name && !strcmp(c->node->attribute[k]->name, name)) return c->node->attribute[k];
    return NULL;
}

static mp_status wrong_type(onnx_ctx *c, const char *name, const char *want) {
    return onnx_fail(c, MP_ERR_FORMAT, "attribute %s is not %s", name, want);
}

mp_status onnx_attr_int(onnx_ctx *c, const char *name, int64_t def, int64_t *out) {
    const Onnx__AttributeProto *a = onnx_attr(c, name);
    *out = def;
    if (!a) return MP_OK;
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) return wrong_type(c, name, "an integer");
    *out = a->i;
    return MP_OK;
}

mp_status onnx_attr_float(onnx_ctx *c, const char *name, float def, float *out) {
    const Onnx__AttributeProto *a = onnx_attr(c, name);
    *out = def;
    if (!a) return MP_OK;
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) return wrong_type(c, name, "a float");
    *out = a->f;
    return MP_OK;
}

mp_status onnx_attr_string(onnx_ctx *c, const char *name, const char *def, const char **out) {
    const Onnx__AttributeProto *a = onnx_attr(c, name);
    *out = def;
    if (!a) return MP_OK;
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING) return wrong_type(c, name, "a string");
    if (!a->has_s) return MP_OK;
    /* a string attribute is bytes: only short printable ones are meaningful here */
    static _Thread_local char buf[64];
    size_t n = a->s.len < sizeof buf - 1 ? a->s.len : sizeof buf - 1;
    for (size_t k = 0; k < n; k++) buf[k] = a->s.data[k] >= 32 && a->s.data[k] < 127 ? (char)a->s.data[k] : '?';
    buf[n] = 0;
    *out = buf;
    return MP_OK;
}

mp_status onnx_attr_ints(onnx_ctx *c, const char *name, int64_t *out, int max, int *n) {
    const Onnx__AttributeProto *a = onnx_attr(c, name);
    *n = -1;
    if (!a) return MP_OK;
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)
        return wrong_type(c, name, "a list of integers");
    if (a->n_ints > (size_t)max)
        return onnx_fail(c, MP_ERR_UNSUPPORTED, "attribute %s has %zu values (at most %d)", name, a->n_ints, max);
    for (size_t k = 0; k < a->n_ints; k++) out[k] = a->ints[k];
    *n = (int)a->n_ints;
    return MP_OK;
}
