/* trainer.c — the public trainer (mixprec/train.h): checks its options
 * against the graph, makes the plan and the backend state, feeds batches
 * to the one step (step.c) and answers the host's questions about it. */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "graph/plan.h"
#include "train/numerics_collect.h"

/* ---- options ------------------------------------------------------------ */

static bool is_loss_node(const mp_graph *g, mp_node n) {
    if (n < 0 || n >= g->n_nodes) return false;
    const mp_op_kind k = g->nodes[n].desc.kind;
    return k == MP_OP_SOFTMAX_CE || k == MP_OP_BCE_LOGITS;
}

/* The groups from the options: one (loss, optimizer) or opts.groups. */
static mp_status take_groups(mp_trainer *t, const mp_trainer_opts *o) {
    const mp_train_group one = {.optimizer = o->optimizer, .losses = {o->loss}, .weights = {1}, .n_losses = 1};
    const mp_train_group *src = o->n_groups > 0 ? o->groups : &one;
    const int n = o->n_groups > 0 ? o->n_groups : 1;
    if (o->n_groups < 0 || o->n_groups > MP_MAX_GROUPS)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: %d optimizer groups (1 to %d)", o->n_groups, MP_MAX_GROUPS);
    for (int gi = 0; gi < n; gi++) {
        const mp_train_group *s = &src[gi];
        mp_trainer_group *d = &t->groups[gi];
        if (!s->optimizer) return mp_error(MP_ERR_INVALID_ARG, "trainer: group %d has no optimizer", gi);
        if (s->optimizer->g != t->g)
            return mp_error(MP_ERR_INVALID_ARG, "trainer: group %d's optimizer is over another graph's parameters "
                            "(make it with mp_optimizer_create on this graph)", gi);
        if (s->optimizer->bound)
            return mp_error(MP_ERR_INVALID_ARG, "trainer: group %d's optimizer is already used by another trainer", gi);
        for (int gj = 0; gj < gi; gj++)
            if (t->groups[gj].opt == s->optimizer)
                return mp_error(MP_ERR_INVALID_ARG, "trainer: groups %d and %d share one optimizer", gj, gi);
        if (s->n_losses < 1 || s->n_losses > MP_MAX_LOSSES)
            return mp_error(MP_ERR_INVALID_ARG, "trainer: group %d has %d losses (1 to %d)", gi, s->n_losses,
                            MP_MAX_LOSSES);
        d->opt = s->optimizer;
        d->n_losses = s->n_losses;
        bool any_weight = false;
        for (int j = 0; j < s->n_losses; j++) {
            const mp_node l = s->losses[j];
            if (!is_loss_node(t->g, l))
                return mp_error(MP_ERR_INVALID_ARG, "trainer: group %d's loss %d (node %d%s%s%s) is not a loss node "
                                "(softmax_cross_entropy or bce_with_logits)", gi, j, l,
                                l >= 0 && l < t->g->n_nodes ? ", '" : "", l >= 0 && l < t->g->n_nodes ? t->g->nodes[l].name : "",
                                l >= 0 && l < t->g->n_nodes ? "'" : "");
            const float w = s->weights[j];
            if (!(w >= 0.0f) || !isfinite(w))
                return mp_error(MP_ERR_INVALID_ARG, "trainer: loss '%s' has weight %g (finite and >= 0)",
                                t->g->nodes[l].name, (double)w);
            d->losses[j] = l;
            d->weights[j] = w;
            any_weight |= w > 0;
            bool known = false;
            for (int c = 0; c < t->n_checks; c++) known |= t->checks[c] == l;
            if (!known) {
                if (t->n_checks == MP_MAX_LOSSES)
                    return mp_error(MP_ERR_INVALID_ARG, "trainer: more than %d distinct losses", MP_MAX_LOSSES);
                t->checks[t->n_checks++] = l;
            }
        }
        if (!any_weight) /* no backward of its own: it would step on gradients other passes left */
            return mp_error(MP_ERR_INVALID_ARG, "trainer: group %d's losses all have weight 0: its optimizer would "
                            "step on no gradient of its own (leave the group out)", gi);
    }
    t->n_groups = n;
    /* optimizers over disjoint parameters: each gradient is unscaled once */
    for (int gi = 0; gi < n; gi++)
        for (int gj = 0; gj < gi; gj++)
            for (int a = 0; a < t->groups[gi].opt->n; a++)
                for (int b = 0; b < t->groups[gj].opt->n; b++)
                    if (t->groups[gi].opt->param_index[a] == t->groups[gj].opt->param_index[b])
                        return mp_error(MP_ERR_INVALID_ARG, "trainer: parameter '%s' is in the optimizers of groups "
                                        "%d and %d", t->g->params[t->groups[gi].opt->param_index[a]].name, gj, gi);
    return MP_OK;
}

static mp_status allreduce_dtype(const mp_trainer *t, const char *a, mp_dtype *out) {
    if (!a || !strcmp(a, "auto")) *out = t->g->policy.allreduce_dtype;
    else if (!strcmp(a, "fp32")) *out = MP_DTYPE_F32;
    else if (!strcmp(a, "fp16")) *out = MP_DTYPE_F16;
    else if (!strcmp(a, "bf16")) *out = MP_DTYPE_BF16;
    else return mp_error(MP_ERR_INVALID_ARG, "--allreduce '%s' must be auto, fp32, fp16 or bf16", a);
    return MP_OK;
}

/* Options with their defaults applied, checked. */
static mp_status take_opts(mp_trainer *t, const mp_trainer_opts *in) {
    mp_trainer_opts o = *in;
    if (o.batch <= 0) return mp_error(MP_ERR_INVALID_ARG, "trainer: batch %d must be positive", o.batch);
    if (o.accumulate < 0) return mp_error(MP_ERR_INVALID_ARG, "--accumulate %d must be at least 1", o.accumulate);
    if (!(o.clip_norm >= 0) || !(o.clip_value >= 0) || !isfinite(o.clip_norm) || !isfinite(o.clip_value))
        return mp_error(MP_ERR_INVALID_ARG, "--clip-grad-norm/--clip-grad-value must be finite and >= 0");
    if (o.max_forward_overflows < 0)
        return mp_error(MP_ERR_INVALID_ARG, "--max-forward-overflows %d must be at least 1", o.max_forward_overflows);
    if (!(o.max_skip_share >= 0) || !isfinite(o.max_skip_share))
        return mp_error(MP_ERR_INVALID_ARG, "--max-skipped-share %g must be a number >= 0", o.max_skip_share);
    if (o.skip_check_after < 0)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: skip_check_after %d must be >= 0", o.skip_check_after);
    if (!(o.scale_floor >= 0) || !isfinite(o.scale_floor))
        return mp_error(MP_ERR_INVALID_ARG, "trainer: scale_floor %g must be a finite number >= 0",
                        (double)o.scale_floor);
    if (!(o.bucket_mb >= 0) || o.bucket_mb > 4096)
        return mp_error(MP_ERR_INVALID_ARG, "--bucket-mb %g must lie in [0, 4096]", o.bucket_mb);
    if ((unsigned)o.loss_scaling > MP_LOSS_SCALING_OFF)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: loss_scaling %d is not an mp_loss_scaling", (int)o.loss_scaling);
    if (o.max_forward_overflows == 0) o.max_forward_overflows = 3;
    if (o.max_skip_share == 0) o.max_skip_share = 0.05;
    if (o.skip_check_after == 0) o.skip_check_after = 100;
    t->k = o.accumulate > 1 ? o.accumulate : 1;
    t->loss_scaling = o.loss_scaling == MP_LOSS_SCALING_AUTO ? t->g->policy.loss_scaling
                                                               : o.loss_scaling == MP_LOSS_SCALING_ON;
    if (o.scale_floor == 0 && t->loss_scaling && t->g->policy.low_dtype == MP_DTYPE_F16 && o.scaler.min_scale == 0)
        o.scale_floor = 0x1.0p-14f;
    if (o.dist && o.device.kind != MP_DEVICE_CUDA)
        return mp_error(MP_ERR_INVALID_ARG, "--gpus: data-parallel training runs on GPUs; it needs --device cuda");
    MP_TRY(allreduce_dtype(t, o.allreduce, &t->allreduce_dtype));
    if (o.dist && !o.allreduce) t->allreduce_dtype = t->g->policy.allreduce_dtype;
    t->o = o;
    return MP_OK;
}

/* ---- plan and backend ----------------------------------------------------- */

static mp_status make_plan(mp_trainer *t) {
    /* the losses stay readable after the step (mp_trainer_loss): outputs,
     * so the arena does not reuse their memory */
    for (int gi = 0; gi < t->n_groups; gi++)
        for (int j = 0; j < t->groups[gi].n_losses; j++) mp_graph_mark_output(t->g, t->groups[gi].losses[j]);
    mp_plan_opts po = {.batch = t->o.batch, .training = true, .reference = t->o.reference, .seed = t->o.seed,
                       .profile = t->o.profile, .device = t->o.device, .sync_bn = t->o.sync_bn, .dist = t->o.dist,
                       .f32_weight_grads = t->o.f32_weight_grads};
    po.loss = t->groups[0].losses[0];
    po.n_losses = t->n_checks;
    memcpy(po.losses, t->checks, sizeof t->checks);
    /* a backward per group and loss of nonzero weight: groups sharing a loss
     * run several from one loss, which must find the forward's memory intact */
    int passes = 0;
    for (int gi = 0; gi < t->n_groups; gi++)
        for (int j = 0; j < t->groups[gi].n_losses; j++) passes += t->groups[gi].weights[j] != 0.0f;
    po.repeat_backward = passes > t->n_checks;
    /* gradients in the arena when each step writes them once, afresh; when
     * nothing rescales them afterwards, in the weights' dtype (and, with
     * master weights, a conv filter's in the dtype cuDNN writes it in) */
    po.grads_in_arena = t->k == 1 && t->n_checks == 1 && passes == 1;
    mp_penalty_plan_opts(t, &po);
    po.low_grads = po.grads_in_arena && !t->loss_scaling && !(t->o.clip_norm > 0) && !(t->o.clip_value > 0) &&
                   !t->o.dist;
    return mp_plan_create(t->g, po, &t->plan);
}

static void close_plan(mp_trainer *t) {
    if (t->be && t->bs) t->be->close(t);
    t->bs = NULL;
    mp_plan_destroy(t->plan);
    t->plan = NULL;
}

static mp_status open_plan(mp_trainer *t) {
    MP_TRY(make_plan(t));
    MP_TRY(mp_penalty_open(t));
    return t->be->open(t);
}

/* The batch a plan holds: every input, labels and targets node that has
 * been given one, read back to the host (labels as their exact float
 * values), so that a rebuilt plan goes on with it. */
typedef struct {
    int n;
    mp_node *node;
    float **data;
    size_t *len;
} carried_batch;

static void carried_free(carried_batch *c) {
    for (int i = 0; i < c->n; i++) free(c->data[i]);
    free(c->node), free(c->data), free(c->len);
    *c = (carried_batch){0};
}

static mp_status carry_out(const mp_plan *p, carried_batch *c) {
    const size_t most = (size_t)p->n + 1;
    c->node = malloc(most * sizeof *c->node), c->data = calloc(most, sizeof *c->data);
    c->len = malloc(most * sizeof *c->len);
    if (!c->node || !c->data || !c->len) return mp_error(MP_ERR_NOMEM, "trainer: out of memory keeping the inputs");
    for (int i = 0; i < p->n; i++) {
        if (!mp_op_is_source(p->g->nodes[i].desc.kind) || !p->nodes[i].data_set) continue;
        const size_t n = mp_plan_numel(p, i);
        float *d = malloc(n * sizeof *d);
        if (!d) return mp_error(MP_ERR_NOMEM, "trainer: out of memory keeping input '%s'", p->g->nodes[i].name);
        c->node[c->n] = i, c->data[c->n] = d, c->len[c->n] = n, c->n++;
        MP_TRY(mp_plan_read(p, i, d, n));
    }
    return MP_OK;
}

static mp_status carry_in(mp_plan *p, const carried_batch *c) {
    for (int i = 0; i < c->n; i++) {
        const mp_node node = c->node[i];
        if (p->g->nodes[node].desc.kind != MP_OP_LABELS) {
            MP_TRY(mp_plan_set_input(p, node, c->data[i], c->len[i]));
            continue;
        }
        int32_t *labels = malloc(c->len[i] * sizeof *labels);
        if (!labels)
            return mp_error(MP_ERR_NOMEM, "trainer: out of memory restoring labels '%s'", p->g->nodes[node].name);
        for (size_t j = 0; j < c->len[i]; j++) labels[j] = (int32_t)c->data[i][j];
        const mp_status s = mp_plan_set_labels(p, node, labels, c->len[i]);
        free(labels);
        MP_TRY(s);
    }
    return MP_OK;
}

mp_status mp_trainer_rebuild(mp_trainer *t) {
    MP_TRY(t->be->state_to_host(t));
    t->scaler.consecutive_forward_overflows = 0; /* the fallback starts a new count */
    mp_scaler_reset_bookkeeping(&t->scaler);
    t->seen = t->scaler;
    t->ends_queued = 0;
    for (int gi = 0; gi < t->n_groups; gi++) mp_optimizer_refresh_dtypes(t->groups[gi].opt);
    /* inputs set once (mp_trainer_set_input, steps without a batch) outlive the plan */
    carried_batch c = {0};
    mp_status s = carry_out(t->plan, &c);
    t->plan_step = mp_plan_step(t->plan); /* dropout masks go on, not from step 1's again */
    close_plan(t); /* whatever happens: its buffers were sized for the dtypes before the fallback */
    if (s == MP_OK) s = open_plan(t);
    if (s == MP_OK) s = carry_in(t->plan, &c);
    carried_free(&c);
    if (s != MP_OK) close_plan(t); /* no half-made plan: the next call that needs one remakes it */
    MP_TRY(s);
    mp_plan_set_step(t->plan, t->plan_step);
    t->rebuilds++;
    return MP_OK;
}

mp_status mp_trainer_need_plan(mp_trainer *t) {
    if (t->plan) return MP_OK;
    const mp_status s = open_plan(t);
    if (s != MP_OK) {
        close_plan(t);
        char why[400];
        snprintf(why, sizeof why, "%s", mp_last_error());
        return mp_error(s, "trainer: its plan, which the auto-fallback's rebuild could not make, cannot be made yet "
                        "either: %s", why);
    }
    mp_plan_set_step(t->plan, t->plan_step);
    t->rebuilds++;
    return MP_OK;
}

mp_status mp_trainer_poll(mp_trainer *t, bool wait, mp_overflow_report *report) {
    MP_TRY(mp_step_poll(t, wait, report));
    if (!t->rebuild_pending) return MP_OK;
    t->rebuild_pending = false;
    return mp_trainer_rebuild(t);
}

static size_t buffer_floats(const mp_graph *g) {
    size_t n = 0;
    for (int i = 0; i < g->n_params; i++)
        if (!g->params[i].spec.trainable) n += (size_t)mp_shape_numel(&g->params[i].spec.shape);
    return n;
}

mp_status mp_trainer_create(mp_graph *g, const mp_trainer_opts *o, mp_trainer **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "trainer: no output pointer");
    *out = NULL;
    if (!g || !o) return mp_error(MP_ERR_INVALID_ARG, "trainer: null graph or options");
    MP_TRY(mp_graph_check_built(g, "trainer"));
    mp_trainer *t = calloc(1, sizeof *t);
    if (!t) return mp_error(MP_ERR_NOMEM, "trainer: out of memory");
    t->g = g;
    mp_status s = take_opts(t, o);
    if (s == MP_OK) s = take_groups(t, o);
    if (s == MP_OK && t->n_groups > 1 && (t->k > 1 || t->o.dist))
        s = mp_error(MP_ERR_INVALID_ARG, "trainer: several optimizer groups cannot accumulate micro-batches or train "
                     "data parallel");
    if (s == MP_OK) s = mp_penalty_check(t);
    /* an optimizer made before the policy was applied keeps state in the dtypes the policy gives now */
    for (int gi = 0; s == MP_OK && gi < t->n_groups; gi++) mp_optimizer_refresh_dtypes(t->groups[gi].opt);
    if (s == MP_OK) s = mp_step_backend_for(t->o.device, &t->be);
    if (s == MP_OK) { /* the scaler's options are checked even when scaling is off: a typo is not ignored */
        s = mp_scaler_init(&t->scaler, t->o.scaler);
        if (s == MP_OK && !t->loss_scaling) mp_scaler_init_check_only(&t->scaler);
    }
    if (s == MP_OK && t->loss_scaling && !t->o.scaler.static_scale && t->o.scale_floor > t->scaler.scale)
        s = mp_error(MP_ERR_INVALID_ARG, "trainer: scale_floor %g (the divergence floor) is above the initial loss "
                     "scale %g: the first check would call the run diverged", (double)t->o.scale_floor,
                     (double)t->scaler.scale);
    if (s == MP_OK && !(t->buffers_backup = malloc((buffer_floats(g) + 1) * sizeof(float))))
        s = mp_error(MP_ERR_NOMEM, "trainer: out of memory");
    if (s == MP_OK && !g->params_initialized) mp_graph_init_params(g, t->o.seed);
    /* values set before a policy without fp32 masters was applied must fit the dtype they now train in */
    if (s == MP_OK) s = mp_graph_check_param_values(g, "trainer");
    if (s == MP_OK) {
        mp_graph_round_low_weights(g, NULL, NULL); /* from the first step on, as the GPU holds them */
        s = open_plan(t);
    }
    if (s != MP_OK) {
        mp_trainer_destroy(t);
        return s;
    }
    for (int gi = 0; gi < t->n_groups; gi++) t->groups[gi].opt->bound = t;
    t->events = t->o.events;
    t->seen = t->scaler;
    for (int gi = 0; gi < MP_MAX_GROUPS; gi++) t->bad_param[gi] = -1;
    *out = t;
    return MP_OK;
}

void mp_trainer_destroy(mp_trainer *t) {
    if (!t) return;
    if (t->plan && t->g->accumulating == t->plan) t->g->accumulating = NULL; /* before the plan may free g */
    close_plan(t);
    for (int gi = 0; gi < t->n_groups; gi++) {
        mp_optimizer *opt = t->groups[gi].opt;
        if (!opt || opt->bound != t) continue;
        opt->bound = NULL;
        if (opt->orphaned) mp_optimizer_destroy(opt);
    }
    mp_numerics_state_free(t->numerics);
    mp_penalty_close(t);
    free(t->buffers_backup);
    free(t);
}

/* ---- steps ---------------------------------------------------------------- */

mp_status mp_trainer_set_input(mp_trainer *t, mp_node node, const float *data, size_t n) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    MP_TRY(mp_trainer_need_plan(t));
    return mp_plan_set_input(t->plan, node, data, n);
}

mp_status mp_trainer_set_labels(mp_trainer *t, mp_node node, const int32_t *labels, size_t n) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    MP_TRY(mp_trainer_need_plan(t));
    return mp_plan_set_labels(t->plan, node, labels, n);
}

static mp_status set_batch(mp_trainer *t, const mp_batch *b) {
    if (b->n != t->o.batch)
        return mp_error(MP_ERR_SHAPE, "trainer: a batch of %d samples, the trainer takes %d", b->n, t->o.batch);
    if (!b->images || !b->labels) return mp_error(MP_ERR_INVALID_ARG, "trainer: the batch has no images or labels");
    const mp_graph *g = t->g;
    if (t->o.input < 0 || t->o.input >= g->n_nodes || g->nodes[t->o.input].desc.kind != MP_OP_INPUT)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: opts.input (node %d) is not an image input; set it, or set the "
                        "inputs with mp_trainer_set_input and pass no batch", t->o.input);
    if (t->o.labels < 0 || t->o.labels >= g->n_nodes || g->nodes[t->o.labels].desc.kind != MP_OP_LABELS)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: opts.labels (node %d) is not a label input", t->o.labels);
    /* a GPU's copies from pageable memory wait for its stream: a bounded wait in data-parallel runs */
    mp_dist_wait_begin(t->o.dist);
    mp_status s = mp_plan_set_input(t->plan, t->o.input, b->images, mp_plan_numel(t->plan, t->o.input));
    if (s == MP_OK) s = mp_plan_set_labels(t->plan, t->o.labels, b->labels, (size_t)b->n);
    mp_dist_wait_end(t->o.dist);
    MP_TRY(mp_dist_check(t->o.dist));
    return s;
}

static mp_launch launch_kind(int micro, int k) {
    return (micro == 0 ? MP_LAUNCH_FIRST : 0) | (micro == k - 1 ? MP_LAUNCH_LAST : 0);
}

mp_status mp_trainer_step(mp_trainer *t, const mp_batch *batch, mp_step_report *r) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    if (r) memset(r, 0, sizeof *r), r->overflow.node = -1;
    MP_TRY(mp_trainer_need_plan(t));
    if (t->g->accumulating && t->g->accumulating != t->plan) /* refused before a forward moves shared BN statistics */
        return mp_error(MP_ERR_INVALID_ARG, "trainer: another trainer of this graph is in the middle of an "
                        "accumulated step: its micro-batches' gradients add up in the graph's gradient arrays, which "
                        "this step would overwrite; finish that step (or destroy its trainer) first");
    if (batch) MP_TRY(set_batch(t, batch));
    const int rebuilds = t->rebuilds;
    for (int gi = 0; gi < t->n_groups; gi++) t->groups[gi].lr = mp_lr_at(&t->groups[gi].opt->o.lr, t->steps);
    const mp_launch kind = launch_kind(t->micro, t->k);
    t->grads_replayed = false; /* this launch's backward writes them */
    mp_status ls = mp_numerics_launch_begin(t, kind);
    if (ls == MP_OK) ls = t->be->launch(t, kind);
    const mp_status le = mp_numerics_launch_end(t, ls == MP_OK);
    MP_TRY(ls);
    MP_TRY(le);
    t->micro = (t->micro + 1) % t->k;
    if (t->o.device.kind == MP_DEVICE_CPU) /* the graph's gradient arrays hold this step's sum until it ends */
        t->g->accumulating = t->micro ? t->plan : NULL;
    if (kind & MP_LAUNCH_LAST) {
        t->steps++;
        t->ends_queued++;
    }
    mp_status s = kind & MP_LAUNCH_LAST ? mp_trainer_poll(t, false, r ? &r->overflow : NULL) : MP_OK;
    if (r) {
        r->step_done = kind & MP_LAUNCH_LAST;
        r->step = t->steps;
        r->lr = t->groups[0].lr;
        r->loss_scale = t->scaler.scale;
        r->skipped_steps = t->scaler.skipped_steps;
        r->penalty = t->o.penalty.kind != MP_PENALTY_NONE ? t->pen_value : 0.0f;
        if (t->rebuilds != rebuilds) r->overflow.found = true;
    }
    return s;
}

mp_status mp_trainer_loss(mp_trainer *t, float *loss) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    if (!loss) return mp_error(MP_ERR_INVALID_ARG, "trainer: loss read into a null pointer");
    return mp_trainer_read(t, t->groups[0].losses[0], loss, 1);
}

mp_status mp_trainer_read(mp_trainer *t, mp_node node, float *dst, size_t n) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    MP_TRY(mp_trainer_need_plan(t));
    MP_TRY(t->be->wait(t));
    const bool source = node >= 0 && node < t->g->n_nodes && mp_op_is_source(t->g->nodes[node].desc.kind);
    if (!t->plan->forward_ran && !source) { /* a batch set is readable before any step */
        if (t->rebuilds == 0) return mp_error(MP_ERR_INVALID_ARG, "trainer: no step has run yet (mp_trainer_step first)");
        if (dst && n > 0 && n == mp_plan_numel(t->plan, node)) { /* auto_fallback rebuilt the plan: no step on it yet */
            for (size_t i = 0; i < n; i++) dst[i] = NAN;
            return MP_OK;
        }
    }
    return mp_plan_read(t->plan, node, dst, n);
}

mp_status mp_trainer_wait(mp_trainer *t, mp_step_report *r) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    if (r) memset(r, 0, sizeof *r), r->overflow.node = -1;
    MP_TRY(mp_trainer_need_plan(t));
    MP_TRY(t->be->wait(t));
    MP_TRY(mp_trainer_poll(t, true, r ? &r->overflow : NULL));
    if (r) {
        r->step = t->steps;
        r->loss_scale = t->scaler.scale;
        r->skipped_steps = t->scaler.skipped_steps;
    }
    return MP_OK;
}

mp_status mp_trainer_sync(mp_trainer *t, mp_step_report *r) {
    MP_TRY(mp_trainer_wait(t, r));
    return mp_plan_sync_params(t->plan, true);
}

int64_t mp_trainer_steps(const mp_trainer *t) { return t ? t->steps : 0; }
float mp_trainer_loss_scale(const mp_trainer *t) { return t ? t->scaler.scale : 0.0f; }
int64_t mp_trainer_skipped_steps(const mp_trainer *t) { return t ? t->scaler.skipped_steps : 0; }
mp_plan *mp_trainer_plan(mp_trainer *t) { return t ? t->plan : NULL; }

/* ---- parameters ---------------------------------------------------------- */

mp_status mp_trainer_param_get(mp_trainer *t, const char *name, float *dst, size_t n) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    MP_TRY(mp_trainer_need_plan(t));
    MP_TRY(t->be->wait(t));
    MP_TRY(mp_plan_sync_params(t->plan, true));
    return mp_graph_param_get(t->g, name, dst, n);
}

mp_status mp_trainer_param_set(mp_trainer *t, const char *name, const float *src, size_t n) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    if (t->micro != 0) return mp_error(MP_ERR_INVALID_ARG, "trainer: parameter '%s' set in the middle of an "
                                       "accumulated step", name ? name : "");
    MP_TRY(mp_trainer_need_plan(t));
    MP_TRY(t->be->state_to_host(t));
    MP_TRY(mp_graph_param_set(t->g, name, src, n));
    mp_graph_round_low_weights(t->g, NULL, NULL);
    return t->be->state_to_device(t);
}

/* The optimizer group that trains graph parameter k, or -1. */
static int param_group(const mp_trainer *t, int k) {
    for (int gi = 0; gi < t->n_groups; gi++)
        for (int a = 0; a < t->groups[gi].opt->n; a++)
            if (t->groups[gi].opt->param_index[a] == k) return gi;
    return -1;
}

/* Whether the gradient the graph holds for parameter k after a step is its
 * group's, unscaled: each group's backward overwrites every gradient, and
 * only the group's own are unscaled; else the error saying why not. */
static mp_status grad_readable(const mp_trainer *t, int k) {
    const mp_gparam *p = &t->g->params[k];
    if (!p->spec.trainable) return MP_OK; /* mp_graph_grad_get says a buffer has none */
    const int gi = param_group(t, k);
    if (gi < 0 && t->loss_scaling)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: gradient '%s': no optimizer group trains it, so it is never "
                        "unscaled (it holds the loss scale times the gradient)", p->name);
    if (gi >= 0 && gi != t->n_groups - 1)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: gradient '%s': group %d's, which the later groups' backward "
                        "passes overwrite within the step; only the last group's (%d) gradients are kept", p->name,
                        gi, t->n_groups - 1);
    return MP_OK;
}

mp_status mp_trainer_grad_get(mp_trainer *t, const char *name, float *dst, size_t n) {
    if (!t) return mp_error(MP_ERR_INVALID_ARG, "trainer: null");
    const int k = mp_graph_param_find(t->g, name);
    if (k >= 0) MP_TRY(grad_readable(t, k));
    if (t->micro != 0)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: gradient '%s' read in the middle of an accumulated step (still "
                        "scaled and partial); read it after the step's last micro-batch", name ? name : "");
    if (t->steps == 0)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: gradient '%s': no step has run yet (mp_trainer_step first)",
                        name ? name : "");
    MP_TRY(mp_trainer_need_plan(t));
    if (t->o.device.kind != MP_DEVICE_CPU && mp_plan_grads_in_arena(t->plan))
        return mp_error(MP_ERR_UNSUPPORTED, "trainer: gradient '%s': on this GPU plan gradients live in the "
                        "activation arena and do not outlive a step (accumulate 2 or more keeps them)",
                        name ? name : "");
    MP_TRY(t->be->wait(t));
    if (t->grads_replayed)
        return mp_error(MP_ERR_INVALID_ARG, "trainer: gradient '%s': the last step was skipped (NaN/inf at loss scale "
                        "%g) and the replay that located the overflow overwrote its gradients with scaled ones; read "
                        "gradients after a step that is not skipped", name ? name : "",
                        (double)t->scaler.last_skip_scale);
    MP_TRY(mp_plan_sync_params(t->plan, true));
    return mp_graph_grad_get(t->g, name, dst, n);
}
