/* onnx_write_ops.h — the exporter's op table (onnx_write_ops.c). */
#ifndef MP_ONNX_ONNX_WRITE_OPS_H
#define MP_ONNX_ONNX_WRITE_OPS_H

#include "onnx/onnx_writer.h"

/* The ONNX node(s) computing mixprec node i of g, reading its inputs by
 * their node names and writing a value named after node i. */
mp_status onnx_w_op(onnx_writer *w, const mp_graph *g, int i);

#endif
