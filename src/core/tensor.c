/* tensor.c — shape helpers. */
#include "core/tensor.h"

#include <stdio.h>

const char *mp_shape_str(const mp_shape *s, char *buf, size_t len) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, len - k, "(");
    for (int i = 0; i < s->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i ? ", %d" : "%d", s->dims[i]);
    if (k < len) snprintf(buf + k, len - k, ")");
    return buf;
}

void mp_transpose_batch(void *dst, const void *src, size_t es, int64_t B, int64_t R, int64_t S) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const char *x = (const char *)src + (size_t)(b * R * S) * es;
        char *y = (char *)dst + (size_t)(b * R * S) * es;
        for (int64_t r = 0; r < R; r++)
            for (int64_t s = 0; s < S; s++) memcpy(y + (size_t)(s * R + r) * es, x + (size_t)(r * S + s) * es, es);
    }
}
