/* penalty.c — gradient penalties in the one training step (mixprec/penalty.h),
 * the host's implementation of the step primitive `penalty`.
 *
 * For a penalty P(g) on g = dF/dz, grad_theta P = (dg/dtheta)^T v with
 * v = dP/dg: the trainer unscales the gradient g (f32 values, f64 sums),
 * computes P and v, pushes v through the plan's tangent forward and backward
 * (seeded as the backward was: weight * scale), and adds the parameters'
 * gradient tangents, which are scale * grad P, to the group's loss-scaled
 * gradients before their unscale/check. So the scaler sees one gradient as
 * usual and its skip/growth rules are unchanged (seed 003: the penalty is
 * computed from unscaled gradients; torch.cuda.amp's recipe).
 *
 * Overflows: a NaN/inf in the gradient the penalty reads is a gradient
 * overflow of its group (the scale backs off: a lower scale can fix it); a
 * NaN/inf penalty computed from finite gradients is a forward overflow of
 * the penalty (the scale stays). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"
#include "graph/second_order.h"
#include "train/trainer.h"

const char *mp_penalty_kind_name(mp_penalty_kind k) {
    switch (k) {
    case MP_PENALTY_NONE: return "none";
    case MP_PENALTY_L2_GRAD: return "l2";
    case MP_PENALTY_R1: return "r1";
    case MP_PENALTY_WGAN_GP: return "wgan-gp";
    }
    return "?";
}

static bool on_input(mp_penalty_kind k) { return k == MP_PENALTY_R1 || k == MP_PENALTY_WGAN_GP; }

static const char *nname(const mp_graph *g, mp_node n) {
    return n >= 0 && n < g->n_nodes ? g->nodes[n].name : "?";
}

mp_status mp_penalty_check(mp_trainer *t) {
    const mp_penalty *pen = &t->o.penalty;
    if (pen->kind == MP_PENALTY_NONE) return MP_OK;
    if ((unsigned)pen->kind > MP_PENALTY_WGAN_GP)
        return mp_error(MP_ERR_INVALID_ARG, "gradient penalty: kind %d is not an mp_penalty_kind", (int)pen->kind);
    const char *name = mp_penalty_kind_name(pen->kind);
    const mp_graph *g = t->g;
    if (!(pen->weight >= 0) || !isfinite(pen->weight))
        return mp_error(MP_ERR_INVALID_ARG, "gradient penalty %s: weight %g must be a finite number >= 0", name,
                        (double)pen->weight);
    if (t->o.dist)
        return mp_error(MP_ERR_UNSUPPORTED, "gradient penalty %s in a data-parallel run: not supported (the "
                        "penalty's gradient would join after the all-reduce); train on one GPU or the CPU", name);
    if (t->k > 1)
        return mp_error(MP_ERR_UNSUPPORTED, "gradient penalty %s with --accumulate %d: not supported (each "
                        "micro-batch's penalty needs its own gradient); use --accumulate 1", name, t->k);
    if (pen->group < 0 || pen->group >= t->n_groups)
        return mp_error(MP_ERR_INVALID_ARG, "gradient penalty %s: group %d (the trainer has %d)", name, pen->group,
                        t->n_groups);
    const mp_trainer_group *gr = &t->groups[pen->group];
    if (pen->kind == MP_PENALTY_L2_GRAD) {
        if (gr->n_losses != 1 || gr->weights[0] == 0.0f)
            return mp_error(MP_ERR_INVALID_ARG, "gradient penalty l2: group %d must minimize one loss of weight > 0 "
                            "(it has %d)", pen->group, gr->n_losses);
        return MP_OK;
    }
    if (pen->input < 0 || pen->input >= g->n_nodes || pen->output < 0 || pen->output >= g->n_nodes)
        return mp_error(MP_ERR_INVALID_ARG, "gradient penalty %s: needs the graph's input node and output node (got "
                        "nodes %d and %d; the graph has %d)", name, pen->input, pen->output, g->n_nodes);
    if (pen->input >= pen->output)
        return mp_error(MP_ERR_INVALID_ARG, "gradient penalty %s: node '%s' does not feed node '%s'", name,
                        nname(g, pen->input), nname(g, pen->output));
    return MP_OK;
}

void mp_penalty_plan_opts(const mp_trainer *t, mp_plan_opts *po) {
    const mp_penalty *pen = &t->o.penalty;
    if (pen->kind == MP_PENALTY_NONE) return;
    po->second_order = true;
    po->input_grad = on_input(pen->kind);
    po->input_grad_of = pen->output;
    po->input_grad_wrt = pen->input;
}

mp_status mp_penalty_open(mp_trainer *t) {
    mp_penalty_close(t);
    if (!on_input(t->o.penalty.kind)) return MP_OK;
    t->pen_n = mp_plan_numel(t->plan, t->o.penalty.input);
    /* host arrays for the host step; a GPU keeps them on the device */
    if (t->be->penalty_input_grad) return MP_OK;
    t->pen_grad = calloc(t->pen_n + 1, sizeof *t->pen_grad);
    t->pen_dir = calloc(t->pen_n + 1, sizeof *t->pen_dir);
    if (!t->pen_grad || !t->pen_dir) return mp_error(MP_ERR_NOMEM, "gradient penalty: out of memory");
    return MP_OK;
}

void mp_penalty_close(mp_trainer *t) {
    free(t->pen_grad);
    free(t->pen_dir);
    t->pen_grad = t->pen_dir = NULL;
    t->pen_n = 0;
}

/* The penalty's value from finite gradients is NaN/inf: a forward overflow
 * of the penalty, for its group only (another group may have stepped). */
static void penalty_forward_overflow(mp_trainer *t, int gi) {
    t->pen_forward_overflow = true;
    t->scaler.group_found[gi] = MP_FOUND_FORWARD;
    t->scaler.found_inf = MP_FOUND_FORWARD;
}

/* The gradient the penalty reads overflowed: a gradient overflow of its group. */
static void penalty_gradient_overflow(mp_trainer *t, int gi) {
    t->pen_grad_overflow = true;
    if (t->scaler.group_found[gi] < MP_FOUND_GRADIENT) t->scaler.group_found[gi] = MP_FOUND_GRADIENT;
    if (t->scaler.found_inf < MP_FOUND_GRADIENT) t->scaler.found_inf = MP_FOUND_GRADIENT;
}

/* grads += the tangents of the group's parameter gradients. */
static void add_tangents(mp_trainer *t, int gi) {
    const mp_optimizer *o = t->groups[gi].opt;
    const mp_plan_so *so = t->plan->so;
    for (int i = 0; i < o->n; i++) {
        const int k = o->param_index[i];
        mp_gparam *gp = &t->g->params[k];
        if (!so->t_dparam_written[k]) continue;
        const int64_t n = mp_shape_numel(&gp->spec.shape);
        for (int64_t j = 0; j < n; j++) gp->grad[j] += so->t_dparam[k][j];
    }
}

/* Seed 003: P = weight * ||g||, g = dJ/dtheta the gradient of the group's
 * weighted objective J = w L (its one loss times its weight, as the
 * backward computed it), v = weight * g / ||g|| on every parameter of the
 * group, the tangent backward from its loss. */
static mp_status l2_penalty(mp_trainer *t, int gi, double scale) {
    const mp_trainer_group *gr = &t->groups[gi];
    const mp_optimizer *o = gr->opt;
    mp_plan *p = t->plan;
    const double inv = 1.0 / scale, w = t->o.penalty.weight;
    double ss = 0;
    for (int i = 0; i < o->n; i++) {
        const mp_gparam *gp = &t->g->params[o->param_index[i]];
        const int64_t n = mp_shape_numel(&gp->spec.shape);
        for (int64_t j = 0; j < n; j++) ss += (double)gp->grad[j] * gp->grad[j];
    }
    ss *= inv * inv;
    if (!isfinite(ss)) return MP_OK; /* the unscale/check finds the gradients' overflow */
    const double norm = sqrt(ss);
    t->pen_value = (float)(w * norm);
    if (!isfinite(t->pen_value)) {
        penalty_forward_overflow(t, gi);
        return MP_OK;
    }
    if (w == 0 || norm == 0) return MP_OK; /* no gradient to add (the norm's subgradient 0 at 0) */
    mp_plan_clear_tangents(p);
    mp_plan_so *so = p->so;
    const double f = w * inv / norm;
    for (int i = 0; i < o->n; i++) {
        const int k = o->param_index[i];
        const mp_gparam *gp = &t->g->params[k];
        const int64_t n = mp_shape_numel(&gp->spec.shape);
        for (int64_t j = 0; j < n; j++) so->t_param[k][j] = (float)(f * gp->grad[j]);
        so->t_param_set[k] = true;
    }
    MP_TRY(mp_plan_forward_tangent(p));
    MP_TRY(mp_plan_backward_tangent(p, gr->losses[0]));
    add_tangents(t, gi);
    return MP_OK;
}

/* R1 / WGAN-GP on the gradient of the output's sum w.r.t. the input node,
 * per sample i (g_i, its norm n_i, batch N):
 *   R1:      P = w/2 mean_i n_i^2,      v_i = w g_i / N
 *   WGAN-GP: P = w mean_i (n_i - 1)^2,  v_i = 2 w (n_i - 1) g_i / (N n_i)
 * The backward is seeded with scale / N on every output (the gradient of
 * the batch mean, as the losses' own backward is), so one loss scale suits
 * both; the direction is then N v, making the tangents scale * grad P. */
static mp_status input_penalty(mp_trainer *t, int gi, double scale) {
    const mp_penalty *pen = &t->o.penalty;
    mp_plan *p = t->plan;
    const int batch = t->o.batch;
    MP_TRY(mp_plan_backward_input_grad(p, (float)(scale / batch)));
    MP_TRY(mp_plan_read_input_grad(p, t->pen_grad, t->pen_n));
    const double inv = batch / scale, w = pen->weight;
    const size_t per = t->pen_n / (size_t)batch;
    for (size_t j = 0; j < t->pen_n; j++) t->pen_grad[j] = (float)(t->pen_grad[j] * inv);
    if (mp_first_nonfinite(t->pen_grad, (int64_t)t->pen_n) >= 0) {
        penalty_gradient_overflow(t, gi);
        return MP_OK;
    }
    double sum = 0;
    for (int i = 0; i < batch; i++) {
        const float *gi_ = t->pen_grad + (size_t)i * per;
        float *v = t->pen_dir + (size_t)i * per;
        double s = 0;
        for (size_t j = 0; j < per; j++) s += (double)gi_[j] * gi_[j];
        const double n = sqrt(s);
        double f;
        if (pen->kind == MP_PENALTY_R1) {
            sum += s;
            f = w; /* N v_i */
        } else {
            sum += (n - 1) * (n - 1);
            f = n > 0 ? 2 * w * (n - 1) / n : 0;
        }
        for (size_t j = 0; j < per; j++) v[j] = (float)(f * gi_[j]);
    }
    t->pen_value = (float)((pen->kind == MP_PENALTY_R1 ? 0.5 : 1.0) * w * sum / batch);
    if (!isfinite(t->pen_value)) {
        penalty_forward_overflow(t, gi);
        return MP_OK;
    }
    if (w == 0) return MP_OK;
    if (mp_first_nonfinite(t->pen_dir, (int64_t)t->pen_n) >= 0) { /* w * g past f32 (a huge weight): as a value's */
        t->pen_value = NAN;
        penalty_forward_overflow(t, gi);
        return MP_OK;
    }
    mp_plan_clear_tangents(p);
    MP_TRY(mp_plan_set_tangent_input(p, t->pen_dir, t->pen_n));
    MP_TRY(mp_plan_forward_tangent(p));
    MP_TRY(mp_plan_backward_tangent(p, pen->output));
    add_tangents(t, gi);
    return MP_OK;
}

mp_status mp_step_host_penalty(mp_trainer *t, int gi) {
    t->pen_ran = true;
    t->pen_forward_overflow = t->pen_grad_overflow = false;
    t->pen_value = NAN;
    if (t->scaler.found_inf >= MP_FOUND_FORWARD) { /* the forward overflowed: the step is skipped */
        if (t->pen_grad) /* R1 / WGAN-GP on the host: no input gradient either, as no value */
            for (size_t j = 0; j < t->pen_n; j++) t->pen_grad[j] = NAN;
        return MP_OK;
    }
    const double scale = mp_scaler_scale(&t->scaler);
    return t->o.penalty.kind == MP_PENALTY_L2_GRAD ? l2_penalty(t, gi, scale) : input_penalty(t, gi, scale);
}

mp_status mp_trainer_penalty_value(const mp_trainer *t, float *value) {
    if (!t || !value) return mp_error(MP_ERR_INVALID_ARG, "penalty_value: null trainer or output");
    if (t->o.penalty.kind == MP_PENALTY_NONE)
        return mp_error(MP_ERR_INVALID_ARG, "penalty_value: the trainer has no gradient penalty (opts.penalty)");
    if (!t->pen_ran) return mp_error(MP_ERR_INVALID_ARG, "penalty_value: no step has run yet");
    *value = t->pen_value;
    return MP_OK;
}

mp_status mp_trainer_penalty_input_grad(const mp_trainer *t, float *dst, size_t n) {
    if (!t || !dst) return mp_error(MP_ERR_INVALID_ARG, "penalty_input_grad: null trainer or output");
    if (!on_input(t->o.penalty.kind))
        return mp_error(MP_ERR_INVALID_ARG, "penalty_input_grad: the trainer has no R1 or WGAN-GP penalty");
    if (!t->pen_ran) return mp_error(MP_ERR_INVALID_ARG, "penalty_input_grad: no step has run yet");
    if (n != t->pen_n)
        return mp_error(MP_ERR_SHAPE, "penalty_input_grad '%s': asked for %zu values, it has %zu",
                        t->g->nodes[t->o.penalty.input].name, n, t->pen_n);
    if (!t->plan) /* a rebuild failed: a GPU's state went with the plan */
        return mp_error(MP_ERR_INVALID_ARG, "penalty_input_grad: the trainer has no plan (a rebuild failed; its next "
                        "step remakes it)");
    if (t->be->penalty_input_grad) return t->be->penalty_input_grad((mp_trainer *)t, dst, n); /* a GPU waits */
    memcpy(dst, t->pen_grad, n * sizeof *dst);
    return MP_OK;
}
