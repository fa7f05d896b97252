/* step_host.c — the host's step primitives (step_backend.h): the step runs
 * directly, the loss check reads the loss, gradients are the graph's f32
 * host arrays, each group's optimizer is its host mp_optim, and the scaler
 * is t->scaler itself, updated by the rule the GPU runs too. */
#include <math.h>
#include <string.h>

#include "graph/plan.h"
#include "train/trainer.h"

static mp_status host_open(mp_trainer *t) {
    (void)t;
    return MP_OK;
}

static void host_close(mp_trainer *t) { (void)t; }

static mp_status host_launch(mp_trainer *t, int kind) { return mp_step_enqueue(t, (mp_launch)kind); }

static mp_status host_check_loss(mp_trainer *t, mp_node loss) {
    float v = 0;
    MP_TRY(mp_plan_read(t->plan, loss, &v, 1));
    if (!isfinite(v)) mp_scaler_mark_forward(&t->scaler);
    return MP_OK;
}

static mp_status host_loss_seed(mp_trainer *t, int slot, float weight, mp_seed *out) {
    (void)slot;
    *out = (mp_seed){.value = weight * mp_scaler_scale(&t->scaler)};
    return MP_OK;
}

static mp_status no_dist(mp_trainer *t) {
    (void)t;
    return mp_error(MP_ERR_UNSUPPORTED, "data-parallel training runs on GPUs, not on the CPU");
}

/* The f32 gradient arrays of group g's parameters, in the optimizer's order. */
static int group_grads(const mp_trainer *t, int g, float **grads, int64_t *sizes) {
    const mp_optimizer *o = t->groups[g].opt;
    for (int i = 0; i < o->n; i++) {
        const mp_gparam *p = &t->g->params[o->param_index[i]];
        grads[i] = p->grad;
        sizes[i] = mp_shape_numel(&p->spec.shape);
    }
    return o->n;
}

static mp_status host_unscale_check(mp_trainer *t, int g) {
    const int cap = t->groups[g].opt->n + 1;
    float *grads[cap];
    int64_t sizes[cap];
    const int n = group_grads(t, g, grads, sizes);
    const int first = mp_scaler_unscale_check_group(&t->scaler, g, grads, sizes, n);
    t->bad_param[g] = first >= 0 ? t->groups[g].opt->param_index[first] : -1;
    return MP_OK;
}

/* By value, then by the global norm of the (unscaled) gradients, as
 * torch.nn.utils.clip_grad_norm_ with its 1e-6. */
static mp_status host_clip(mp_trainer *t, int g) {
    const int cap = t->groups[g].opt->n + 1;
    float *grads[cap];
    int64_t sizes[cap];
    const int n = group_grads(t, g, grads, sizes);
    if (t->o.clip_value > 0) {
        const float v = t->o.clip_value;
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < sizes[i]; j++) grads[i][j] = fminf(fmaxf(grads[i][j], -v), v);
    }
    if (t->o.clip_norm > 0) {
        double ss = 0;
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < sizes[i]; j++) ss += (double)grads[i][j] * grads[i][j];
        const double norm = sqrt(ss);
        if (norm > t->o.clip_norm) {
            const float f = (float)(t->o.clip_norm / (norm + 1e-6));
            for (int i = 0; i < n; i++)
                for (int64_t j = 0; j < sizes[i]; j++) grads[i][j] *= f;
        }
    }
    return MP_OK;
}

/* Selects group g's parameters for mp_graph_round_low_weights. */
typedef struct {
    const mp_optimizer *o;
} in_group_arg;

static bool in_group(const void *arg, int k) {
    const mp_optimizer *o = ((const in_group_arg *)arg)->o;
    for (int i = 0; i < o->n; i++)
        if (o->param_index[i] == k) return true;
    return false;
}

static mp_status host_optim_step(mp_trainer *t, int g) {
    if (t->scaler.group_found[g]) return MP_OK; /* skipped: weights, state and step count unchanged */
    mp_optimizer *o = t->groups[g].opt;
    mp_optim_step(o->host, t->groups[g].lr);
    /* weights without an fp32 master stay values of their dtype */
    if (t->n_groups == 1) mp_graph_round_low_weights(t->g, NULL, NULL);
    else mp_graph_round_low_weights(t->g, in_group, &(in_group_arg){o});
    return MP_OK;
}

static mp_status host_scaler_update(mp_trainer *t) {
    mp_scaler_update(&t->scaler);
    return MP_OK;
}

static mp_status host_read_scaler(mp_trainer *t, bool wait, mp_scaler *out) {
    (void)wait;
    *out = t->scaler;
    return MP_OK;
}

static mp_status host_optim_steps(mp_trainer *t, int g, int64_t *out) {
    *out = mp_optim_step_count(t->groups[g].opt->host);
    return MP_OK;
}

static mp_status host_nothing(mp_trainer *t) {
    (void)t;
    return MP_OK;
}

const mp_step_backend mp_step_backend_host = {
    .name = "cpu",
    .open = host_open,
    .close = host_close,
    .launch = host_launch,
    .check_loss = host_check_loss,
    .loss_seed = host_loss_seed,
    .reduce_grads = no_dist,
    .reduce_flags = no_dist,
    .unscale_check = host_unscale_check,
    .clip = host_clip,
    .optim_step = host_optim_step,
    .penalty = mp_step_host_penalty,
    .scaler_update = host_scaler_update,
    .read_scaler = host_read_scaler,
    .wait = host_nothing,
    .state_to_host = host_nothing,
    .state_to_device = host_nothing,
    .optim_steps = host_optim_steps,
};
