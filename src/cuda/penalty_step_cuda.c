/* penalty_step_cuda.c — the GPU step's gradient penalty primitive
 * (train/step_backend.h `penalty`, penalty_cuda.h): the same sequence as
 * the host's (train/penalty.c), with every value and decision on the device
 * so that it is captured into the step's CUDA graph: the input-gradient
 * backward seeded with the device loss scale / N, the penalty and its
 * direction, the plan's tangent passes, their gradients added to the
 * group's before its unscale/check. */
#include "cuda/cuda_plan_kernels.h"
#include "cuda/penalty_cuda.h"
#include "graph/plan.h"
#include "graph/second_order.h"
#include "train/trainer.h"

/* R1 / WGAN-GP: the gradient of the output's sum with respect to the input
 * node, seeded as the losses' backward is (scale / N on every output). */
static mp_status input_penalty(mp_trainer *t, mp_cuda_ctx *ctx, mp_scaler *s, mp_cuda_penalty *pen) {
    mp_plan *p = t->plan;
    const mp_penalty *o = &t->o.penalty;
    const mp_tensor *seed = &p->nodes[o->output].call.d_out;
    MP_TRY(mp_cuda_fill(ctx, seed->dtype, seed->data, mp_tensor_numel(seed), 0.0f, &s->scale, (double)t->o.batch));
    MP_TRY(mp_so_input_grad_backward(p));
    const mp_pnode *in = &p->nodes[o->input];
    const mp_tensor grad = {t->g->nodes[o->input].storage_dtype, in->info.out, p->arena + in->grad_off};
    MP_TRY(mp_cuda_penalty_input(ctx, pen, s, &grad, p->so->t_out[o->input]));
    mp_plan_clear_tangents(p);
    p->so->input_dir_set = true; /* the direction is in t_out[input] */
    MP_TRY(mp_plan_forward_tangent(p));
    return mp_plan_backward_tangent(p, o->output);
}

/* L2: the direction on every parameter of the group, the tangent backward
 * from its loss. */
static mp_status l2_penalty(mp_trainer *t, int g, mp_cuda_ctx *ctx, mp_scaler *s, mp_cuda_grads *grads,
                            mp_cuda_penalty *pen) {
    mp_plan *p = t->plan;
    const mp_optimizer *opt = t->groups[g].opt;
    MP_TRY(mp_cuda_penalty_l2(ctx, pen, s, grads));
    mp_plan_clear_tangents(p);
    for (int i = 0; i < opt->n; i++) p->so->t_param_set[opt->param_index[i]] = true;
    MP_TRY(mp_plan_forward_tangent(p));
    return mp_plan_backward_tangent(p, t->groups[g].losses[0]);
}

/* Group g's gradient tangents the tangent backward did not write are zero
 * (mp_cuda_penalty_add adds every one of the group's). */
static mp_status zero_unwritten(mp_trainer *t, int g, mp_cuda_ctx *ctx) {
    const mp_optimizer *opt = t->groups[g].opt;
    const mp_plan_so *so = t->plan->so;
    for (int i = 0; i < opt->n; i++) {
        const int k = opt->param_index[i];
        if (so->t_dparam_written[k] || !so->t_dparam[k]) continue;
        const size_t bytes = (size_t)mp_shape_numel(&t->g->params[k].spec.shape) * sizeof(float);
        MP_CUDA_TRY(cudaMemsetAsync(so->t_dparam[k], 0, bytes, ctx->stream), t->g->params[k].name);
    }
    return MP_OK;
}

mp_status mp_cuda_step_penalty(mp_trainer *t, int g, mp_cuda_ctx *ctx, mp_scaler *scaler_dev, mp_cuda_grads *grads,
                               mp_cuda_penalty *pen) {
    if (!pen) return mp_error(MP_ERR_INTERNAL, "cuda step: gradient penalty without its device state");
    t->pen_ran = true;
    MP_TRY(t->o.penalty.kind == MP_PENALTY_L2_GRAD ? l2_penalty(t, g, ctx, scaler_dev, grads, pen)
                                                   : input_penalty(t, ctx, scaler_dev, pen));
    MP_TRY(zero_unwritten(t, g, ctx));
    return mp_cuda_penalty_add(ctx, pen);
}
