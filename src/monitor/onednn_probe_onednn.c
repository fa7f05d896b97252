/* onednn_probe_onednn.c — see onednn_probe.h. (File name ends in _onednn.c
 * so builds without oneDNN leave it out.) */
#include "monitor/onednn_probe.h"

#include <stdio.h>

#include "ops/onednn_common.h"

void mp_onednn_probe_version(char *buf, size_t n) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, n, "%d.%d.%d", v->major, v->minor, v->patch);
}

bool mp_onednn_probe_bf16_conv(char *impl, size_t n) {
    dnnl_engine_t engine = mp_onednn_engine();
    if (!engine) {
        snprintf(impl, n, "no oneDNN CPU engine");
        return false;
    }
    dnnl_dims_t sd = {16, 64, 32, 32}, wd = {64, 64, 3, 3}, dd = {16, 64, 32, 32};
    dnnl_dims_t strides = {1, 1}, dilates = {0, 0}, pad = {1, 1};
    dnnl_memory_desc_t src, wei, dst;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_bf16, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_bf16, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_bf16, dnnl_format_tag_any) != dnnl_success ||
        dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &src, &wei,
                                                   NULL, &dst, strides, dilates, pad, pad) != dnnl_success) {
        snprintf(impl, n, "oneDNN rejected the bf16 convolution descriptor");
        return false;
    }
    dnnl_status_t s = dnnl_primitive_desc_create(&pd, &cd, NULL, engine, NULL);
    if (s != dnnl_success) {
        snprintf(impl, n, "%s", s == dnnl_unimplemented ? "" : "creating the primitive descriptor failed");
        return false;
    }
    snprintf(impl, n, "%s", mp_onednn_impl_name(pd));
    bool jit = mp_onednn_is_jit(pd);
    dnnl_primitive_desc_destroy(pd);
    return jit;
}
