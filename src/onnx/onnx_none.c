/* onnx_none.c — mixprec/onnx.h in a build without protobuf-c: every call says
 * what is missing. */
#include <string.h>

#include "core/error.h"

static mp_status no_onnx(const char *path) {
    return mp_error(MP_ERR_UNSUPPORTED, "%s: this build has no ONNX support (protobuf-c was not found at configure "
                                        "time; install libprotobuf-c-dev and protobuf-c-compiler and rebuild)",
                    path ? path : "ONNX");
}

mp_status mp_graph_from_onnx(mp_graph *g, const char *path, const mp_onnx_opts *o, mp_onnx_info *info) {
    (void)g, (void)o;
    if (info) memset(info, 0, sizeof *info);
    return no_onnx(path);
}

mp_status mp_model_from_onnx(const char *path, const mp_onnx_opts *o, mp_model *out) {
    (void)o;
    if (out) memset(out, 0, sizeof *out);
    return no_onnx(path);
}

mp_status mp_graph_to_onnx(const mp_graph *g, mp_node input, mp_node output, const char *path,
                           const mp_onnx_export_opts *o) {
    (void)g, (void)input, (void)output, (void)o;
    return no_onnx(path);
}

mp_status mp_onnx_read_normalization(const char *path, int max_channels, int *channels, float *mean,
                                     float *std) {
    (void)max_channels, (void)mean, (void)std;
    if (channels) *channels = 0;
    return no_onnx(path);
}

mp_status mp_model_export_onnx(const mp_model *m, const char *path, const mp_onnx_export_opts *o) {
    (void)m, (void)o;
    return no_onnx(path);
}
