/* onnx_pb.h — a tiny protobuf writer for tests: enough of the ONNX schema's
 * wire format (field numbers of ModelProto, GraphProto, NodeProto, ...) to
 * write small models, valid or broken on purpose, without Python. */
#ifndef MP_TESTS_ONNX_PB_H
#define MP_TESTS_ONNX_PB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *b;
    size_t n, cap;
} pb;

static inline void pb_raw(pb *p, const void *d, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = realloc(p->b, p->cap);
        if (!p->b) abort();
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}
static inline void pb_uvarint(pb *p, uint64_t v) {
    uint8_t t[10];
    int k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    pb_raw(p, t, (size_t)k);
}
/* varint field (wire type 0) and length-delimited field (wire type 2) */
static inline void pb_int(pb *p, int field, int64_t v) {
    pb_uvarint(p, (uint64_t)field << 3);
    pb_uvarint(p, (uint64_t)v);
}
static inline void pb_bytes(pb *p, int field, const void *d, size_t n) {
    pb_uvarint(p, (uint64_t)field << 3 | 2);
    pb_uvarint(p, n);
    pb_raw(p, d, n);
}
static inline void pb_str(pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
/* a sub-message: its bytes, then freed */
static inline void pb_msg(pb *p, int field, pb *sub) {
    pb_bytes(p, field, sub->b, sub->n);
    free(sub->b);
    *sub = (pb){0};
}
static inline void pb_float(pb *p, int field, float f) {
    pb_uvarint(p, (uint64_t)field << 3 | 5);
    pb_raw(p, &f, 4);
}

/* ---- ONNX messages ---- */
/* AttributeProto: name 1, f 2, i 3, ints 8, type 20 (FLOAT 1, INT 2, INTS 7) */
/* The attribute `name` of that type with the value fields `value` holds
 * (freed), appended to the node's attributes. */
static inline void onnx_attr_put(pb *node, const char *name, int type, pb *value) {
    pb a = {0};
    pb_str(&a, 1, name);
    pb_raw(&a, value->b, value->n);
    free(value->b);
    *value = (pb){0};
    pb_int(&a, 20, type);
    pb_msg(node, 5, &a);
}
static inline void onnx_attr_int(pb *node, const char *name, int64_t v) {
    pb f = {0};
    pb_int(&f, 3, v);
    onnx_attr_put(node, name, 2, &f);
}
static inline void onnx_attr_float(pb *node, const char *name, float v) {
    pb f = {0};
    pb_float(&f, 2, v);
    onnx_attr_put(node, name, 1, &f);
}
static inline void onnx_attr_ints(pb *node, const char *name, const int64_t *v, int n) {
    pb f = {0};
    for (int k = 0; k < n; k++) pb_int(&f, 8, v[k]);
    onnx_attr_put(node, name, 7, &f);
}
/* NodeProto: input 1, output 2, name 3, op_type 4, attribute 5; `ins` and
 * `outs` are comma-separated ("x,W,B"); the node is appended to the graph. */
static inline void onnx_node(pb *graph, const char *op, const char *name, const char *ins, const char *outs,
                             pb *attrs) {
    pb n = {0};
    char buf[256];
    for (int f = 1; f <= 2; f++) {
        snprintf(buf, sizeof buf, "%s", f == 1 ? ins : outs);
        for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) pb_str(&n, f, s);
    }
    pb_str(&n, 3, name);
    pb_str(&n, 4, op);
    if (attrs) {
        pb_raw(&n, attrs->b, attrs->n);
        free(attrs->b);
        *attrs = (pb){0};
    }
    pb_msg(graph, 1, &n);
}
/* TensorProto (initializer, graph field 5): dims 1, data_type 2 (FLOAT 1,
 * INT64 7), name 8, raw_data 9 */
static inline void onnx_init(pb *graph, const char *name, int dtype, const int64_t *dims, int ndim, const void *data,
                             size_t bytes) {
    pb t = {0};
    for (int k = 0; k < ndim; k++) pb_int(&t, 1, dims[k]);
    pb_int(&t, 2, dtype);
    pb_str(&t, 8, name);
    pb_bytes(&t, 9, data, bytes);
    pb_msg(graph, 5, &t);
}
/* ValueInfoProto (graph input 11 / output 12): name 1, type 2 -> TypeProto
 * tensor_type 1 -> elem_type 1, shape 2 -> dim 1 -> dim_value 1 / dim_param
 * 2; a dim < 0 is the symbol dim_params[k] */
static inline void onnx_value_info(pb *graph, int field, const char *name, const int64_t *dims, int ndim,
                                   const char *const *dim_params) {
    pb shape = {0}, tensor = {0}, type = {0}, vi = {0};
    for (int k = 0; k < ndim; k++) {
        pb d = {0};
        if (dims[k] >= 0) pb_int(&d, 1, dims[k]);
        else pb_str(&d, 2, dim_params[k]);
        pb_msg(&shape, 1, &d);
    }
    pb_int(&tensor, 1, 1);
    pb_msg(&tensor, 2, &shape);
    pb_msg(&type, 1, &tensor);
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &type);
    pb_msg(graph, field, &vi);
}
/* ModelProto: ir_version 1, graph 7, opset_import 8 (domain 1, version 2) */
static inline pb onnx_model(pb *graph, int opset) {
    pb m = {0}, op = {0};
    pb_int(&m, 1, 8);
    pb_str(graph, 2, "test");
    pb_msg(&m, 7, graph);
    pb_str(&op, 1, "");
    pb_int(&op, 2, opset);
    pb_msg(&m, 8, &op);
    return m;
}
static inline void pb_save(const pb *p, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p->b, 1, p->n, f) != p->n || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

#endif
