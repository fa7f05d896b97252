/* input.c — the graph's entry points: image/feature input, int32 labels and
 * dense targets. They compute nothing; the executor copies batches in. */
#include "ops/op.h"

static mp_status source_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "internal: source needs its shape as input 0");
    info->out = info->in[0]; /* the graph passes the declared shape */
    return MP_OK;
}

static mp_status source_noop(const mp_op_call *c) {
    (void)c;
    return MP_OK;
}

const mp_op_vtable mp_op_input_vt = {"input", source_infer, NULL, NULL, source_noop, source_noop};
const mp_op_vtable mp_op_labels_vt = {"labels", source_infer, NULL, NULL, source_noop, source_noop};
const mp_op_vtable mp_op_targets_vt = {"targets", source_infer, NULL, NULL, source_noop, source_noop};
