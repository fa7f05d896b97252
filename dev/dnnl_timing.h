/* dnnl_timing.h — what the oneDNN convolution timing programs under dev/
 * share beyond the CK check: one engine and stream, a monotonic clock, an
 * f32 -> bf16 rounding, a comparison for qsort, memory objects, a
 * primitive's implementation name, and a 3x3 stride-1 pad-1 forward
 * convolution on channels-last tensors. Included by each (they build alone:
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

/* The forward convolution of n images, ic -> oc channels, H x H, NHWC
 * tensors of type dt, the weights' layout left to oneDNN (*wmd). */
__attribute__((unused)) static dnnl_primitive_t conv3x3_forward(int n, int ic, int oc, int H, dnnl_data_type_t dt,
                                                                dnnl_primitive_desc_t *pd,
                                                                const dnnl_memory_desc_t **wmd) {
    dnnl_memory_desc_t sd, dd, wany;
    const dnnl_dims_t sdims = {n, ic, H, H}, ddims = {n, oc, H, H}, wdims = {oc, ic, 3, 3};
    CK(dnnl_memory_desc_init_by_tag(&sd, 4, sdims, dt, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&dd, 4, ddims, dt, dnnl_nhwc));
    CK(dnnl_memory_desc_init_by_tag(&wany, 4, wdims, dt, dnnl_format_tag_any));
    const dnnl_dims_t st = {1, 1}, dil = {0, 0}, pad = {1, 1};
    dnnl_convolution_desc_t d;
    CK(dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training, dnnl_convolution_direct, &sd, &wany, NULL,
                                                  &dd, st, dil, pad, pad));
    CK(dnnl_primitive_desc_create(pd, &d, NULL, eng, NULL));
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, *pd));
    *wmd = dnnl_primitive_desc_query_md(*pd, dnnl_query_weights_md, 0);
    return p;
}

#endif
