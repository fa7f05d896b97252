/* concat.c — concatenation of 2..8 tensors along channels (4-D, (N, C, H, W))
 * or features (2-D, (N, F)). Pure data movement, so one byte-wise kernel
 * serves every dtype; backward slices d_out back into the inputs. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ops/op.h"
#include "ops/tangent.h"

#define CONCAT_PAR_BYTES ((size_t)1 << 20) /* below this one thread copies */

static mp_status concat_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in < 2 || info->n_in > MP_MAX_INPUTS) {
        char what[64];
        snprintf(what, sizeof what, "takes 2 to %d inputs, got %d", MP_MAX_INPUTS, info->n_in);
        return mp_op_shape_error(d, info, what);
    }
    const mp_shape *s0 = &info->in[0];
    if (s0->ndim != 2 && s0->ndim != 4)
        return mp_op_shape_error(d, info, "inputs must be 4-D (N, C, H, W) or 2-D (N, F)");
    mp_shape out = *s0;
    for (int i = 1; i < info->n_in; i++) {
        const mp_shape *s = &info->in[i];
        char what[128];
        if (s->ndim != s0->ndim) {
            snprintf(what, sizeof what, "input %d has %d dims, input 0 has %d", i, s->ndim, s0->ndim);
            return mp_op_shape_error(d, info, what);
        }
        for (int k = 0; k < s->ndim; k++) {
            if (k == 1 || s->dims[k] == s0->dims[k]) continue;
            snprintf(what, sizeof what, "input %d differs from input 0 in dim %d (%d vs %d); only dim 1 may differ",
                     i, k, s->dims[k], s0->dims[k]);
            return mp_op_shape_error(d, info, what);
        }
        if ((int64_t)out.dims[1] + s->dims[1] > INT_MAX) {
            snprintf(what, sizeof what, "inputs 0..%d have more than %d channels/features together", i, INT_MAX);
            return mp_op_shape_error(d, info, what);
        }
        out.dims[1] += s->dims[1];
    }
    info->out = out;
    return MP_OK;
}

/* forward: parts -> whole (a NULL part: zeros, for the tangents); backward:
 * whole -> parts (NULL parts skipped). */
static void concat_move(const mp_op_call *c, bool forward) {
    const mp_tensor *whole = forward ? &c->out : &c->d_out;
    size_t es = mp_dtype_size(whole->dtype);
    int64_t n = whole->shape.dims[0];
    int64_t out_sample = mp_shape_sample_numel(&whole->shape);
    int64_t part_sample[MP_MAX_INPUTS], offset[MP_MAX_INPUTS];
    int64_t off = 0;
    for (int i = 0; i < c->n_in; i++) {
        part_sample[i] = mp_shape_sample_numel(&c->in[i].shape);
        offset[i] = off;
        off += part_sample[i];
    }
    int n_in = c->n_in;
    int64_t tasks = n * n_in;
    size_t total = (size_t)mp_shape_numel(&whole->shape) * es;
    char *wd = whole->data;
#pragma omp parallel for schedule(static) if (total > CONCAT_PAR_BYTES)
    for (int64_t q = 0; q < tasks; q++) {
        int64_t s = q / n_in;
        int i = (int)(q % n_in);
        char *w = wd + (size_t)(s * out_sample + offset[i]) * es;
        size_t len = (size_t)part_sample[i] * es;
        if (forward) {
            if (c->in[i].data) memcpy(w, (const char *)c->in[i].data + (size_t)s * len, len);
            else memset(w, 0, len);
        } else if (c->d_in[i].data) {
            memcpy((char *)c->d_in[i].data + (size_t)s * len, w, len);
        }
    }
}

static mp_status concat_forward(const mp_op_call *c) {
    concat_move(c, true);
    return MP_OK;
}

static mp_status concat_backward(const mp_op_call *c) {
    concat_move(c, false);
    return MP_OK;
}

/* Second derivatives (tangent.h): data movement, linear, so the tangents
 * move the same way. */
static mp_status concat_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_linear(c, concat_forward); }
static mp_status concat_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, concat_backward); }

const mp_op_vtable mp_op_concat_vt = {
    .name = "concat",
    .infer = concat_infer,
    .forward = concat_forward,
    .backward = concat_backward,
    .bwd_skips = MP_BWD_SKIPS_BOTH,
    .forward_tangent = concat_forward_tangent,
    .backward_tangent = concat_backward_tangent,
};
