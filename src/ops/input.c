/* input.c — the graph's entry points: image/feature input, int32 labels and
 * dense targets. They compute nothing; the executor copies batches in. Their
 * shape is given in attr.reshape (dims[0] is the batch). */
#include "ops/op.h"

static mp_status source_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 0) return mp_op_shape_error(d, info, "a source takes no inputs");
    info->out = d->attr.reshape;
    if (info->out.ndim < 1) return mp_op_shape_error(d, info, "source has no shape");
    return MP_OK;
}

static mp_status source_noop(const mp_op_call *c) {
    (void)c;
    return MP_OK;
}

/* set_input writes the caller's NCHW batch in the layout the plan chose */
static mp_layout_support input_layouts(const mp_op_desc *d, const mp_op_info *info, const void *state) {
    (void)d, (void)info, (void)state;
    return MP_LAYOUT_EACH;
}

const mp_op_vtable mp_op_input_vt = {
    .name = "input",
    .infer = source_infer,
    .forward = source_noop,
    .backward = source_noop,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .layouts = input_layouts,
};
const mp_op_vtable mp_op_labels_vt = {
    .name = "labels",
    .infer = source_infer,
    .forward = source_noop,
    .backward = source_noop,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
};
const mp_op_vtable mp_op_targets_vt = {
    .name = "targets",
    .infer = source_infer,
    .forward = source_noop,
    .backward = source_noop,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
};
