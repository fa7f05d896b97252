/* dnnl_timing.h — what the oneDNN convolution timing programs under dev/
 * share beyond the CK check: one engine and stream, a monotonic clock, an
 * f32 -> bf16 rounding, a comparison for qsort, memory objects and a
 * primitive's implementation name. Included by each (they build alone:
 * cc dev/<tool>.c -ldnnl). */
#ifndef MP_DEV_DNNL_TIMING_H
#define MP_DEV_DNNL_TIMING_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "dnnl_check.h"

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint16_t bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, void *h) {
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, eng, h ? h : DNNL_MEMORY_ALLOCATE));
    return m;
}

static const char *impl(const_dnnl_primitive_desc_t pd) {
    const char *s = NULL;
    CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s));
    return s;
}

#endif
