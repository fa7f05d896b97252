/* onnx_metadata.h — the exporter's side of onnx_metadata.c (the import
 * side's is in onnx_import.h). */
#ifndef MP_ONNX_ONNX_METADATA_H
#define MP_ONNX_ONNX_METADATA_H

#include "core/error.h"
#include "onnx.pb-c.h"

/* The input normalization as m's metadata (onnx_metadata.c): nothing for
 * channels <= 0; values must be finite, std > 0; errors name path. */
mp_status onnx_w_normalization(Onnx__ModelProto *m, int channels, const float *mean, const float *std,
                               const char *path);

#endif
