/* activation.c — relu, leaky relu, tanh, sigmoid: shape rules and dispatch
 * between the reference kernels and, for relu and leaky relu on f32/bf16,
 * their vectorized instances (activation_cpu.c). */
#include <math.h>

#include "ops/activation_cpu.h"
#include "ops/cpu_fast.h"
#include "ops/op.h"
#include "ops/tangent.h"

#define KATTR /* the reference instances: no target attributes */
#define MP_REF_TEMPLATE "activation_ref.inc"
#include "instantiate_act.inc"
#define MP_REF_TEMPLATE "activation_tangent_ref.inc"
#include "instantiate_real.inc"

static mp_status pointwise_infer(const mp_op_desc *d, mp_op_info *info) {
    if (info->n_in != 1) return mp_op_shape_error(d, info, "takes exactly one input");
    info->out = info->in[0];
    return MP_OK;
}

/* leaky relu: its negative slope must be a number (NaN or inf makes every
 * negative input NaN or inf) */
static mp_status leaky_infer(const mp_op_desc *d, mp_op_info *info) {
    if (!isfinite(d->attr.slope))
        return mp_error(MP_ERR_INVALID_ARG, "leaky_relu '%s': slope %g must be finite", d->name ? d->name : "?",
                        (double)d->attr.slope);
    return pointwise_infer(d, info);
}

#define N_OF(c) mp_tensor_numel(&(c)->out)

static mp_status relu_forward(const mp_op_call *c) {
    if (mp_fast_use(c, c->out.dtype)) mp_relu_cpu_forward(c);
    else MP_ACT_CALL(c->out.dtype, relu_fwd, c->in[0].data, c->out.data, N_OF(c));
    return MP_OK;
}
static mp_status relu_backward(const mp_op_call *c) {
    if (!c->d_in[0].data) return MP_OK;
    if (mp_fast_use(c, c->out.dtype)) mp_relu_cpu_backward(c);
    else MP_ACT_CALL(c->out.dtype, relu_bwd, c->out.data, c->d_out.data, c->d_in[0].data, N_OF(c));
    return MP_OK;
}

static mp_status leaky_forward(const mp_op_call *c) {
    float s = c->desc->attr.slope;
    if (mp_fast_use(c, c->out.dtype)) mp_leaky_relu_cpu_forward(c);
    else MP_ACT_CALL(c->out.dtype, leaky_relu_fwd, c->in[0].data, c->out.data, N_OF(c), s);
    return MP_OK;
}
static mp_status leaky_backward(const mp_op_call *c) {
    float s = c->desc->attr.slope;
    if (!c->d_in[0].data) return MP_OK;
    if (mp_fast_use(c, c->out.dtype)) mp_leaky_relu_cpu_backward(c);
    else MP_ACT_CALL(c->out.dtype, leaky_relu_bwd, c->in[0].data, c->d_out.data, c->d_in[0].data,
                     N_OF(c), s);
    return MP_OK;
}

static mp_status tanh_forward(const mp_op_call *c) {
    MP_ACT_CALL(c->out.dtype, tanh_fwd, c->in[0].data, c->out.data, N_OF(c));
    return MP_OK;
}
static mp_status tanh_backward(const mp_op_call *c) {
    if (c->d_in[0].data)
        MP_ACT_CALL(c->out.dtype, tanh_bwd, c->out.data, c->d_out.data, c->d_in[0].data, N_OF(c));
    return MP_OK;
}

static mp_status sigmoid_forward(const mp_op_call *c) {
    MP_ACT_CALL(c->out.dtype, sigmoid_fwd, c->in[0].data, c->out.data, N_OF(c));
    return MP_OK;
}
static mp_status sigmoid_backward(const mp_op_call *c) {
    if (c->d_in[0].data)
        MP_ACT_CALL(c->out.dtype, sigmoid_bwd, c->out.data, c->d_out.data, c->d_in[0].data, N_OF(c));
    return MP_OK;
}

/* Second derivatives (tangent.h). Every Jacobian here is diagonal and
 * backward applies it, so the forward tangent is backward on t_in. The
 * masks of relu and leaky relu do not move (away from the kink), so their
 * backward tangent is backward on t_d_out; tanh's and sigmoid's move with
 * the output (activation_tangent_ref.inc). */
static mp_status relu_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_by_backward(c, relu_backward); }
static mp_status relu_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, relu_backward); }
static mp_status leaky_forward_tangent(const mp_op_call *c) {
    return mp_tangent_forward_by_backward(c, leaky_backward);
}
static mp_status leaky_backward_tangent(const mp_op_call *c) { return mp_tangent_backward_linear(c, leaky_backward); }
static mp_status tanh_forward_tangent(const mp_op_call *c) { return mp_tangent_forward_by_backward(c, tanh_backward); }
static mp_status sigmoid_forward_tangent(const mp_op_call *c) {
    return mp_tangent_forward_by_backward(c, sigmoid_backward);
}
/* tanh and sigmoid */
static mp_status smooth_backward_tangent(const mp_op_call *c) {
    MP_TRY(mp_tangent_check(c, "backward_tangent"));
    if (!c->t_d_in[0].data) return MP_OK;
    if (c->desc->kind == MP_OP_TANH)
        MP_REAL_CALL(c->out.dtype, tanh_bwd_tangent, c->out.data, c->t_out.data, c->d_out.data, c->t_d_out.data,
                     c->t_d_in[0].data, N_OF(c));
    else
        MP_REAL_CALL(c->out.dtype, sigmoid_bwd_tangent, c->out.data, c->t_out.data, c->d_out.data, c->t_d_out.data,
                     c->t_d_in[0].data, N_OF(c));
    return MP_OK;
}

const mp_op_vtable mp_op_relu_vt = {
    .name = "relu",
    .infer = pointwise_infer,
    .forward = relu_forward,
    .backward = relu_backward,
    .bwd_skips = MP_BWD_SKIPS_INPUTS,
    .forward_tangent = relu_forward_tangent,
    .backward_tangent = relu_backward_tangent,
    .layouts = mp_op_layouts_alike,
};
const mp_op_vtable mp_op_leaky_relu_vt = {
    .name = "leaky_relu",
    .infer = leaky_infer,
    .forward = leaky_forward,
    .backward = leaky_backward,
    .bwd_skips = MP_BWD_SKIPS_OUTPUT,
    .forward_tangent = leaky_forward_tangent,
    .backward_tangent = leaky_backward_tangent,
    .layouts = mp_op_layouts_alike,
};
const mp_op_vtable mp_op_tanh_vt = {
    .name = "tanh",
    .infer = pointwise_infer,
    .forward = tanh_forward,
    .backward = tanh_backward,
    .bwd_skips = MP_BWD_SKIPS_INPUTS,
    .forward_tangent = tanh_forward_tangent,
    .backward_tangent = smooth_backward_tangent,
    .layouts = mp_op_layouts_alike,
};
const mp_op_vtable mp_op_sigmoid_vt = {
    .name = "sigmoid",
    .infer = pointwise_infer,
    .forward = sigmoid_forward,
    .backward = sigmoid_backward,
    .bwd_skips = MP_BWD_SKIPS_INPUTS,
    .forward_tangent = sigmoid_forward_tangent,
    .backward_tangent = smooth_backward_tangent,
    .layouts = mp_op_layouts_alike,
};
