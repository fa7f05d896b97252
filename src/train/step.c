/* step.c — the one mixed-precision training step, for every device, and
 * what the host does with its outcome.
 *
 * mp_step_enqueue is the step's only definition: forward; a NaN/inf check
 * of each loss, and where the device asks for it of the batch norms'
 * running statistics (a forward overflow: every optimizer skips, the scale
 * stays);
 * per optimizer group, backward of its losses times the loss scale (over k
 * when accumulating k micro-batches), then on the step's last launch the
 * gradient all-reduce (data parallel), the fused unscale + check, the flags'
 * all-reduce, clipping of the true gradients and the optimizer, which skips
 * itself when its flag is set; one scaler update. It calls the backend's
 * primitives only (step_backend.h), so the CPU runs it directly and a GPU
 * captures it once into a CUDA graph.
 *
 * mp_step_poll reads the scaler state the host can see and turns overflows
 * into reports: a forward overflow keeps the scale and, after
 * max_forward_overflows in a row, stops the run naming the layer (or moves
 * it to fp32 with auto_fallback); a gradient overflow backs the scale off,
 * and stops the run without loss scaling or at the minimum scale. The op is
 * named by replaying the step (same batch, same dropout masks) with checks,
 * which is exact while that step is the last one run: always on the CPU; on
 * a GPU the host usually sees a step one late, so isolated overflows there
 * are "not located" and runs of them are named. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "graph/plan.h"
#include "train/numerics_collect.h"
#include "train/step.h"

/* ---- the step ----------------------------------------------------------- */

/* Backward of group gr's losses, each seeded with weight * scale / k. */
static mp_status backward_group(mp_trainer *t, const mp_trainer_group *gr, int *slot) {
    for (int j = 0; j < gr->n_losses; j++) {
        if (gr->weights[j] == 0.0f) continue;
        mp_seed seed;
        MP_TRY(t->be->loss_seed(t, (*slot)++, gr->weights[j] / (float)t->k, &seed));
        MP_TRY(mp_plan_backward_seeded(t->plan, gr->losses[j], seed));
    }
    return MP_OK;
}

mp_status mp_step_enqueue(mp_trainer *t, mp_launch kind) {
    const mp_step_backend *be = t->be;
    mp_plan *p = t->plan;
    mp_graph *g = t->g;
    const bool first = kind & MP_LAUNCH_FIRST, last = kind & MP_LAUNCH_LAST;
    if (t->numerics) MP_TRY(mp_numerics_params(t));
    MP_TRY(mp_plan_forward(p));
    for (int j = 0; j < t->n_checks; j++) MP_TRY(be->check_loss(t, t->checks[j]));
    if (be->check_running_stats) MP_TRY(be->check_running_stats(t));
    int slot = 0;
    for (int gi = 0; gi < t->n_groups; gi++) {
        /* one group accumulates over micro-batches; several start afresh each */
        const bool fresh = t->n_groups > 1 || first;
        for (int k = 0; k < g->n_params; k++) g->params[k].grad_fresh = fresh;
        /* data parallel: gradients are all-reduced as backward finishes them,
         * in the step's last micro-batch only */
        mp_status (*hook)(void *, int) = p->grad_ready;
        if (!last) p->grad_ready = NULL;
        mp_status st = backward_group(t, &t->groups[gi], &slot);
        p->grad_ready = hook;
        MP_TRY(st);
        if (t->o.penalty.kind != MP_PENALTY_NONE && t->o.penalty.group == gi) {
            if (!be->penalty)
                return mp_error(MP_ERR_UNSUPPORTED, "gradient penalty: the %s step has no second-order pass", be->name);
            MP_TRY(be->penalty(t, gi)); /* its gradient joins the group's before the unscale/check */
        }
        if (!last) continue;
        if (t->numerics) MP_TRY(mp_numerics_group_grads(t, gi));
        if (t->o.dist) MP_TRY(be->reduce_grads(t));
        if (t->after_reduce) MP_TRY(t->after_reduce(t->after_reduce_arg, t, gi));
        MP_TRY(be->unscale_check(t, gi));
        if (t->o.dist) MP_TRY(be->reduce_flags(t));
        if (t->o.clip_value > 0 || t->o.clip_norm > 0) MP_TRY(be->clip(t, gi));
        MP_TRY(be->optim_step(t, gi));
    }
    return last ? be->scaler_update(t) : MP_OK;
}

/* ---- reports ------------------------------------------------------------ */

static const char *node_desc(const mp_graph *g, int node, char *buf, size_t len) {
    const mp_gnode *nd = &g->nodes[node];
    snprintf(buf, len, "%s (%s, computes %s, stores %s)", nd->name, mp_op_lookup(nd->desc.kind)->name,
             mp_dtype_name(nd->compute_dtype), mp_dtype_name(nd->storage_dtype));
    return buf;
}

/* The step (1-based, as t->steps counts) whose scaler update had index
 * `end` (mp_scaler.ends then): t->ends_queued updates are queued so far, the
 * last of them step t->steps's. */
static int64_t step_at_end(const mp_trainer *t, int64_t end) { return t->steps - (t->ends_queued - 1 - end); }

/* node's description, or (node < 0) "an op" and why it was not located. */
static const char *site_desc(const mp_graph *g, int node, const char *why, char *buf, size_t len) {
    if (node >= 0) return node_desc(g, node, buf, len);
    snprintf(buf, len, "an op %s", why);
    return buf;
}

/* Record one report line: into the report (the latest wins) and t->events. */
static void say(mp_trainer *t, mp_overflow_report *r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(mp_trainer *t, mp_overflow_report *r, const char *fmt, ...) {
    char line[sizeof r->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (r) snprintf(r->message, sizeof r->message, "%s", line);
    if (t->events) {
        fprintf(t->events, "%s\n", line);
        fflush(t->events);
    }
}

static int forward_limit(const mp_trainer *t) { return t->o.max_forward_overflows; }

/* The BN running statistics (host copies), saved and restored around a
 * replay, which updates them again. */
static void copy_buffers(mp_trainer *t, bool save) {
    mp_graph *g = t->g;
    float *b = t->buffers_backup;
    for (int i = 0; i < g->n_params; i++) {
        mp_gparam *p = &g->params[i];
        if (p->spec.trainable) continue;
        const size_t n = (size_t)mp_shape_numel(&p->spec.shape);
        if (save) memcpy(b, p->data, n * sizeof(float));
        else memcpy(p->data, b, n * sizeof(float));
        b += n;
    }
}

/* Replay the last micro-batch with checks (its input is still in place):
 * the forward, then (backward) each group's losses' backward. Parameters,
 * BN statistics and the dropout step are left as they were; gradients are
 * overwritten (the step was skipped). A failed replay is "not located";
 * *clean: the replay ran and every value it checked was finite. */
static mp_status locate(mp_trainer *t, bool backward, float scale, mp_nonfinite_site *site, const char **why,
                        bool *clean) {
    *clean = false;
    memset(site, 0, sizeof *site);
    site->node = -1;
    if (t->o.dist) {
        *why = "(not located in data-parallel runs)";
        return MP_OK;
    }
    mp_plan *p = t->plan;
    MP_TRY(t->be->wait(t));
    MP_TRY(mp_plan_sync_params(p, true));
    copy_buffers(t, true);
    mp_status (*hook)(void *, int) = p->grad_ready;
    p->grad_ready = NULL;
    mp_status st = mp_plan_find_nonfinite_forward(p, site);
    for (int gi = 0; st == MP_OK && backward && !site->found && gi < t->n_groups; gi++) {
        const mp_trainer_group *gr = &t->groups[gi];
        for (int j = 0; st == MP_OK && !site->found && j < gr->n_losses; j++) {
            if (gr->weights[j] == 0.0f) continue;
            for (int k = 0; k < t->g->n_params; k++) t->g->params[k].grad_fresh = true;
            st = mp_plan_backward_checked_from(p, gr->losses[j], scale * gr->weights[j] / (float)t->k, site);
        }
    }
    p->grad_ready = hook;
    if (backward) t->grads_replayed = true;
    copy_buffers(t, false);
    if (st != MP_OK) { /* the search failed: not located; putting the state back must not */
        memset(site, 0, sizeof *site);
        site->node = -1;
        mp_clear_error();
        *why = "(not located: the replay failed)";
    } else if (!site->found) {
        *why = "(not located: the replay of the step's last micro-batch found no NaN/inf)";
        *clean = true;
    }
    return mp_plan_sync_params(p, false);
}

/* A forward overflow's NaN/inf reaches the batch norms' running statistics
 * (the forward updates them whatever the step's fate), and NaN stays NaN in
 * a running average: those values restart from their initial ones (mean 0,
 * variance 1) and are estimated again. *reset: how many; *node_reset:
 * whether node's own were among them; *first: the first batch norm (in
 * parameter order) that had any, -1: none. (A device with
 * check_running_stats restarted them already; stats_overflow told the host.) */
static mp_status reset_nonfinite_running_stats(mp_trainer *t, int node, int64_t *reset, bool *node_reset,
                                               int *first) {
    *reset = 0;
    *node_reset = false;
    *first = -1;
    MP_TRY(t->be->state_to_host(t));
    mp_graph *g = t->g;
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *p = &g->params[k];
        float initial;
        if (!mp_gparam_running_stat(p, &initial)) continue;
        for (int64_t i = 0; i < mp_shape_numel(&p->spec.shape); i++)
            if (!isfinite(p->data[i])) {
                p->data[i] = initial, (*reset)++;
                if (p->node == node) *node_reset = true;
                if (*first < 0) *first = p->node;
            }
    }
    return *reset ? t->be->state_to_device(t) : MP_OK;
}

/* What the device's running-statistics check found (stats_overflow). */
typedef struct {
    int node;       /* the first batch norm whose statistics were NaN/inf in the latest such step, -1: none */
    int64_t end;    /* that step's scaler update index */
    int64_t reset;  /* values it restarted */
    bool this_step; /* node's step is the latest skipped one (the one reported, unless the limit was passed in
                       steps queued before the host looked) */
    bool named;     /* the overflow is named from them: this step, one micro-batch, its replay all finite */
} device_stats;

/* A forward overflow at `step`, the consecutive-th in a row, first seen in
 * node's output (-1: not located, and then the batch norm whose running
 * statistics were NaN/inf, if any, is said instead): report it; at the limit
 * fall back or stop. dev: what the device's check of the running statistics
 * found. */
static mp_status forward_overflow(mp_trainer *t, mp_overflow_report *r, int64_t step, int node, const char *why,
                                  int consecutive, const device_stats *dev) {
    mp_graph *g = t->g;
    int64_t reset = 0;
    bool node_stats = false; /* node's own running statistics were NaN/inf */
    int stats_node = -1;     /* the first batch norm whose running statistics the host found NaN/inf */
    MP_TRY(reset_nonfinite_running_stats(t, node, &reset, &node_stats, &stats_node));
    reset += dev->reset;
    node_stats = node_stats || (node >= 0 && dev->node == node && dev->this_step);
    char d[200];
    site_desc(g, node, why, d, sizeof d);
    /* Where the report says it was: an op's output (or statistics), or, not located, only the forward pass (no op's
       output need be non-finite: on the GPU a batch norm's running statistics can be the only NaN/inf). */
    char site[260];
    if (node >= 0)
        snprintf(site, sizeof site, "first non-finite value in the %s of %s", dev->named ? "running statistics" : "output",
                 d);
    else
        snprintf(site, sizeof site, "NaN/inf in the forward pass %s", why);
    /* Not located, but a batch norm's running statistics were NaN/inf: which and when. The host sees what they
       hold now, after `step`; the device's record keeps the latest step where they went NaN/inf (one the host
       may not have reported yet), used if it is not older than `step`. */
    char stats[224] = "";
    if (node < 0 && stats_node >= 0)
        snprintf(stats, sizeof stats, "; the running statistics of %s were NaN/inf after step %lld",
                 g->nodes[stats_node].name, (long long)step);
    else if (node < 0 && dev->node >= 0) {
        const int64_t dev_step = step_at_end(t, dev->end);
        char queued[64] = ""; /* a later step, queued before the host looked: say so, or it reads as a typo */
        if (dev_step > step) snprintf(queued, sizeof queued, " (queued before the host saw step %lld's)", (long long)step);
        if (dev_step >= step)
            snprintf(stats, sizeof stats, "; the running statistics of %s went NaN/inf in step %lld%s",
                     g->nodes[dev->node].name, (long long)dev_step, queued);
    }
    char restarted[120] = "";
    if (reset)
        snprintf(restarted, sizeof restarted, "; %lld batch-norm running statistics it made NaN/inf restart from 0 "
                 "and 1", (long long)reset);
    say(t, r,
        "step %lld: forward overflow: %s%s; a gradient overflow it is not, so the loss scale stays %g; skipping step%s",
        (long long)step, site, stats, t->scaler.scale, restarted);
    if (consecutive < forward_limit(t)) return MP_OK;
    if (node < 0 && stats[0])
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: %d consecutive forward overflows, %s%s: its batch "
                        "statistics overflowed fp32, or NaN/inf reached it from an earlier op%s. If its statistics "
                        "overflowed, no precision setting fixes it: scale the data, or the layers before it, down%s",
                        (long long)step, consecutive, site, stats, t->k > 1 ? " or micro-batch" : "",
                        t->k > 1 ? "; with one micro-batch a step the replay can locate the op" : "");
    if (node < 0)
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: %d consecutive forward overflows, %s. Lowering the loss scale cannot fix a "
                        "forward overflow; try --precision amp-bf16 or an fp32 --precision-override for the layer "
                        "where it starts%s%s",
                        (long long)step, consecutive, site, t->o.auto_fallback ? " (--auto-fallback needs the op)" : "",
                        t->k > 1 ? "; with one micro-batch a step the replay can locate the op, or find NaN/inf in "
                                   "the data"
                                 : "");
    mp_gnode *nd = &g->nodes[node];
    if (mp_op_is_source(nd->desc.kind) && nd->storage_dtype == MP_DTYPE_F32)
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: %d consecutive batches whose %s holds NaN/inf as given (stored in fp32: no "
                        "precision setting causes or fixes it); check the data",
                        (long long)step, consecutive, d);
    /* finite inputs (the replay found none non-finite before it) and its own running statistics NaN/inf:
       batch statistics past fp32 (batchnorm2d.c), not an output past f16 (which --auto-fallback fixes) */
    if (nd->desc.kind == MP_OP_BATCHNORM2D && nd->compute_dtype == MP_DTYPE_F32 && node_stats)
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: %d consecutive forward overflows: %s turns finite inputs into NaN/inf: its batch "
                        "statistics overflow fp32 (the squares of its inputs, or their sum over the batch, pass "
                        "fp32's 3.4e38: values beyond ~1.8e19, or less in a large batch and on a GPU); no precision "
                        "setting fixes it: scale the data, or the layers before it, down",
                        (long long)step, consecutive, d);
    if (t->o.auto_fallback && (nd->compute_dtype != MP_DTYPE_F32 || nd->storage_dtype != MP_DTYPE_F32) &&
        g->live_plans > 1)
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: %d consecutive forward overflows in %s; --auto-fallback cannot move it to fp32 "
                        "while another plan of the graph is alive (%d in all: plans hold the dtypes they were made "
                        "for); destroy it, or use --precision-override %s=fp32",
                        (long long)step, consecutive, d, g->live_plans, nd->name);
    if (t->o.auto_fallback && (nd->compute_dtype != MP_DTYPE_F32 || nd->storage_dtype != MP_DTYPE_F32)) {
        say(t, r, "step %lld: --auto-fallback: moving %s to fp32 and continuing", (long long)step, nd->name);
        mp_policy_node_to_f32(g, node);
        t->rebuild_pending = true; /* the trainer rebuilds its plan (mp_trainer_poll) */
        return MP_OK;
    }
    return mp_error(MP_ERR_NONFINITE,
                    "step %lld: %d consecutive forward overflows: %s produces NaN/inf. Lowering the loss scale cannot "
                    "fix a forward overflow; try --precision amp-bf16, --precision-override %s=fp32, or "
                    "--auto-fallback",
                    (long long)step, consecutive, d, nd->name);
}

/* Too many skipped steps, or a dynamic scale fallen below the floor: the
 * run diverged, whatever each overflow looked like. */
static mp_status check_divergence(const mp_trainer *t, const mp_scaler *now) {
    const int64_t steps = t->steps, skipped = now->skipped_steps;
    const bool over = t->o.max_skip_share < 1.0 && steps >= t->o.skip_check_after &&
                      (double)skipped > t->o.max_skip_share * (double)steps;
    /* every skip a gradient overflow in the first half of the run, none
     * since: a dynamic scale that started too high and backed off to one
     * that fits */
    if (over && t->loss_scaling && !now->opts.static_scale && now->forward_overflows == 0 &&
        now->last_overflow_step >= 0 && 2 * (now->last_overflow_step + 1) <= now->step)
        return mp_error(MP_ERR_NONFINITE,
                        "diverged at start-up: %lld of the first %lld gradient checks overflowed while the dynamic "
                        "loss scale backed off to %.9g, and none since; %lld of %lld steps (%.1f%%, more than "
                        "%.1f%%) were skipped. Start it lower: --loss-scale dynamic:%.9g (mixprec doctor predicts "
                        "these start-up skips)",
                        (long long)skipped, (long long)now->last_overflow_step + 1, now->scale, (long long)skipped,
                        (long long)steps, 100.0 * (double)skipped / (double)steps, 100.0 * t->o.max_skip_share,
                        now->scale);
    if (over)
        return mp_error(MP_ERR_NONFINITE,
                        "diverged: %lld of %lld steps skipped on NaN/inf (%.1f%%, more than %.1f%%); the loss scale "
                        "is %g. Try --precision amp-bf16, a lower --lr, or an fp32 --precision-override for the layer "
                        "the reports name",
                        (long long)skipped, (long long)steps, 100.0 * (double)skipped / (double)steps,
                        100.0 * t->o.max_skip_share, now->scale);
    if (t->loss_scaling && !now->opts.static_scale && t->o.scale_floor > 0 && now->scale < t->o.scale_floor)
        return mp_error(MP_ERR_NONFINITE,
                        "diverged: the dynamic loss scale fell to %g, below %g: gradients overflow at every scale. "
                        "Try --precision amp-bf16, a lower --lr, or --min-loss-scale to allow lower scales",
                        now->scale, t->o.scale_floor);
    return MP_OK;
}

/* Several optimizer groups: which ones skipped, and (on the CPU) the first
 * parameter whose gradient was non-finite in each. */
static mp_status group_overflow(mp_trainer *t, mp_overflow_report *r, int64_t at, const mp_scaler *was,
                                const mp_scaler *now) {
    for (int gi = 0; gi < t->n_groups; gi++) {
        if (now->group_skips[gi] == was->group_skips[gi]) continue;
        const mp_optimizer *o = t->groups[gi].opt;
        const int bad = t->bad_param[gi];
        char where[200];
        if (bad >= 0) snprintf(where, sizeof where, "%s", t->g->params[bad].name);
        else if (t->pen_grad_overflow && t->o.penalty.group == gi)
            snprintf(where, sizeof where, "the input gradient the %s penalty reads (d %s / d %s)",
                     mp_penalty_kind_name(t->o.penalty.kind), t->g->nodes[t->o.penalty.output].name,
                     t->g->nodes[t->o.penalty.input].name);
        else snprintf(where, sizeof where, "the parameters of group %d (not located on this device)", gi);
        say(t, r, "step %lld: gradient overflow in %s; the optimizer over '%s' skips its step, loss scale %g -> %g",
            (long long)at, where, o->prefix[0] ? o->prefix : "*", now->last_skip_scale, now->scale);
    }
    if (!t->loss_scaling || (!now->opts.static_scale && now->last_skip_scale <= now->min_scale &&
                             now->scale <= now->min_scale))
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: non-finite gradients%s; try --precision amp-bf16 or fp32", (long long)at,
                        t->loss_scaling ? " at the minimum loss scale" : "");
    return check_divergence(t, now);
}

mp_status mp_step_poll(mp_trainer *t, bool wait, mp_overflow_report *r) {
    mp_scaler now;
    MP_TRY(t->be->read_scaler(t, wait, &now));
    if (r) memset(r, 0, sizeof *r), r->node = -1;
    if (now.skipped_steps == t->seen.skipped_steps) {
        t->scaler = now;
        return check_divergence(t, &now);
    }
    if (!wait) MP_TRY(t->be->read_scaler(t, true, &now)); /* exact counts for the report */
    const mp_scaler was = t->seen;
    t->seen = now;
    t->scaler = now;
    const long long ago = now.last_skip_end < 0 ? -1 : t->ends_queued - 1 - now.last_skip_end;
    const int64_t at = ago > 0 ? step_at_end(t, now.last_skip_end) : t->steps;
    const int64_t forward = now.forward_overflows - was.forward_overflows;
    const int64_t gradient = now.skipped_steps - was.skipped_steps - forward;
    const bool last_forward = now.last_found >= MP_FOUND_FORWARD;
    if (r) *r = (mp_overflow_report){.found = true, .forward = last_forward, .step = at, .count = forward + gradient,
                                     .node = -1, .scale_before = now.last_skip_scale, .scale_after = now.scale};
    if (forward + gradient > 1)
        say(t, r, "steps up to %lld: %lld forward and %lld gradient overflows since the last report", (long long)at,
            (long long)forward, (long long)gradient);
    const int limit = forward_limit(t);
    const bool limit_now = now.forward_peak >= limit && was.forward_peak < limit;
    mp_nonfinite_site site = {.node = -1};
    const char *why = "(not located: later steps ran before the host looked)";
    bool clean = false; /* a replay of the step found every value finite */
    /* several groups: the replay would run with the weights of the groups
     * that already stepped, so it is not the step that overflowed */
    if (last_forward && t->pen_forward_overflow)
        why = "(none: the gradient penalty's value is NaN/inf although the gradients it reads are finite)";
    else if (!last_forward && t->pen_grad_overflow)
        why = "(none: the input gradient the gradient penalty reads overflowed)";
    else if (t->n_groups > 1) why = "(not located: an earlier optimizer group stepped before the check)";
    else if (ago == 0 && (!limit_now || now.consecutive_forward_overflows >= limit))
        MP_TRY(locate(t, !last_forward, now.last_skip_scale, &site, &why, &clean));
    device_stats dev = {.node = -1};
    if (forward > 0 && t->be->stats_overflow) MP_TRY(t->be->stats_overflow(t, &dev.node, &dev.end, &dev.reset));
    /* the replayed batch's outputs finite but, in that same step, a batch
     * norm's running statistics NaN/inf: its own batch statistics overflowed
     * fp32 (an upstream NaN would have shown in the replay). With several
     * micro-batches only the last is replayed, so an earlier one's upstream
     * overflow could look the same: not named there. */
    dev.this_step = dev.node >= 0 && dev.end == now.last_skip_end;
    dev.named = last_forward && !site.found && clean && dev.this_step && t->k == 1;
    const int node = site.found ? site.node : dev.named ? dev.node : -1;
    if (r) {
        r->node = node;
        snprintf(r->what, sizeof r->what, "%s", site.found ? site.what : "");
    }
    if (limit_now) { /* a GPU queue may have run past the step that reached the limit: report that step */
        const int beyond = now.forward_peak - limit;
        const int64_t reached = now.forward_peak_end >= 0 ? step_at_end(t, now.forward_peak_end) - beyond : at;
        if (beyond > 0)
            say(t, r, "steps %lld to %lld: forward overflows as well (queued before the host saw step %lld's)",
                (long long)(reached + 1), (long long)(reached + beyond), (long long)reached);
        return forward_overflow(t, r, reached, node, why, limit, &dev);
    }
    if (last_forward) return forward_overflow(t, r, at, node, why, now.consecutive_forward_overflows, &dev);
    if (t->n_groups > 1) return group_overflow(t, r, at, &was, &now);
    char d[200];
    site_desc(t->g, node, why, d, sizeof d);
    say(t, r, "step %lld: gradient overflow in %s of %s (%s); skipping step, loss scale %g -> %g", (long long)at,
        site.found && !site.backward ? "forward" : "backward", d, site.found ? site.what : "?", now.last_skip_scale,
        now.scale);
    if (!t->loss_scaling || (!now.opts.static_scale && now.last_skip_scale <= now.min_scale && now.scale <= now.min_scale))
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: non-finite gradients%s in %s; try --precision amp-bf16 or an fp32 override for "
                        "that layer",
                        (long long)at, t->loss_scaling ? " at the minimum loss scale" : "", d);
    return check_divergence(t, &now);
}
