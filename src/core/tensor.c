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
