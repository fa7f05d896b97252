/* tensor.h — a view on memory: dtype, up to 4 dims (row-major, N first), data.
 * Activations are (N, C, H, W) or (N, F); the tensor never owns its memory
 * (arenas and parameter stores do). */
#ifndef MP_CORE_TENSOR_H
#define MP_CORE_TENSOR_H

#include <stdint.h>
#include <string.h>

#include "mixprec.h"

#ifdef __cplusplus
extern "C" { /* CUDA sources (C++) include this header */
#endif

#define MP_MAX_DIMS 4

typedef struct {
    int ndim;
    int dims[MP_MAX_DIMS];
} mp_shape;

typedef struct {
    mp_dtype dtype;
    mp_shape shape;
    void *data;
} mp_tensor;

static inline int64_t mp_shape_numel(const mp_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

static inline int mp_shape_equal(const mp_shape *a, const mp_shape *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

static inline mp_shape mp_shape4(int n, int c, int h, int w) {
    mp_shape s = {4, {n, c, h, w}};
    return s;
}

static inline mp_shape mp_shape2(int n, int f) {
    mp_shape s = {2, {n, f, 1, 1}};
    return s;
}

static inline mp_shape mp_shape1(int n) {
    mp_shape s = {1, {n, 1, 1, 1}};
    return s;
}

/* Elements per sample (all dims but the first). */
static inline int64_t mp_shape_sample_numel(const mp_shape *s) {
    int64_t n = 1;
    for (int i = 1; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

static inline int64_t mp_tensor_numel(const mp_tensor *t) { return mp_shape_numel(&t->shape); }

/* Index of the largest of k values (the first on ties): a predicted class. */
static inline int mp_argmax(const float *x, int k) {
    int best = 0;
    for (int i = 1; i < k; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* dst[b][s][r] = src[b][r][s] for b < B, r < R, s < S, elements of es bytes
 * (NCHW (B, C, HW) <-> NHWC (B, HW, C) and back); threads over b. */
void mp_transpose_batch(void *dst, const void *src, size_t es, int64_t B, int64_t R, int64_t S);

/* Format "(2, 3, 4, 5)" into buf; returns buf. */
const char *mp_shape_str(const mp_shape *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
