/* train_step.c — see train_step.h.
 *
 * Overflow handling follows DESIGN.md: a NaN/inf loss or activation in the
 * forward pass is not a gradient overflow, so it skips the step without
 * touching the loss scale, and after max_forward_overflows in a row the run
 * stops naming the layer (or, with auto_fallback, moves it to fp32). A
 * gradient overflow skips the step for the optimizer and backs the scale
 * off; the step is replayed once with checks to name the first gradient that
 * went non-finite. */
#include "train/train_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "graph/exec_stage.h"

/* fp16/bf16 weight gradients on the GPU (mp_plan_opts.low_grads): nothing in
 * the step may rescale or sum them after backward wrote them. */
static bool low_grads(const mp_train_opts *o) {
    return o->accumulate <= 1 && !o->loss_scaling && !(o->clip_norm > 0) && !(o->clip_value > 0) && !o->dist;
}

static mp_status make_plan(mp_step_ctx *c) {
    mp_plan_destroy(c->plan);
    c->plan = NULL;
    return mp_plan_create(c->m->g,
                          (mp_plan_opts){.batch = c->o->batch, .training = true, .loss = c->m->loss,
                                         .use_onednn = c->o->use_onednn, .seed = c->o->seed, .device = c->o->device,
                                         .sync_bn = c->o->sync_bn, .sync_dist = c->o->dist,
                                         .grads_in_arena = c->o->accumulate <= 1, .low_grads = low_grads(c->o),
                                         .f32_weight_grads = c->o->f32_weight_grads},
                          &c->plan);
}

/* On a GPU the whole step (scaler and optimizer included) runs there. */
static mp_status make_gpu_step(mp_step_ctx *c) {
    const mp_train_opts *o = c->o;
    mp_cuda_step_opts so = {.optim = o->optim, .loss_scaling = o->loss_scaling, .scaler = o->scaler,
                            .clip_norm = o->clip_norm, .clip_value = o->clip_value, .dist = o->dist,
                            .bucket_bytes = (size_t)(o->bucket_mb * 1048576.0), .accumulate = o->accumulate};
    if (o->dist) MP_TRY(mp_train_allreduce_dtype(o, c->m->g, &so.allreduce_dtype));
    return mp_cuda_step_create(c->plan, &so, &c->gpu);
}

mp_status mp_step_ctx_init(mp_step_ctx *c, mp_model *m, const mp_train_opts *o) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->o = o;
    c->events = o->events ? o->events : o->out;
    mp_graph *g = m->g;
    c->classes = (int)mp_graph_node_shape(g, m->logits, 1).dims[1];
    mp_graph_round_low_weights(m->g, NULL, NULL); /* from the first step on, as the GPU holds them */
    MP_TRY(make_plan(c));
    if (o->loss_scaling) MP_TRY(mp_scaler_init(&c->scaler, o->scaler));
    if (o->device.kind != MP_DEVICE_CPU) {
        MP_TRY(make_gpu_step(c));
        MP_TRY(mp_cuda_step_overflows_read(c->gpu, true, &c->gpu_seen));
    }
    mp_param_ref *refs = calloc((size_t)g->n_params + 1, sizeof *refs);
    c->grads = calloc((size_t)g->n_params + 1, sizeof *c->grads);
    c->grad_sizes = calloc((size_t)g->n_params + 1, sizeof *c->grad_sizes);
    c->logits = malloc((size_t)o->batch * (size_t)c->classes * sizeof *c->logits);
    int64_t buffer_floats = 0;
    for (int i = 0; i < g->n_params; i++)
        if (!g->params[i].spec.trainable) buffer_floats += mp_shape_numel(&g->params[i].spec.shape);
    c->buffers_backup = malloc((size_t)(buffer_floats + 1) * sizeof(float));
    if (!refs || !c->grads || !c->grad_sizes || !c->logits || !c->buffers_backup) {
        free(refs);
        return mp_error(MP_ERR_NOMEM, "trainer: out of memory");
    }
    for (int i = 0; i < g->n_params; i++) {
        mp_gparam *p = &g->params[i];
        if (!p->spec.trainable) continue;
        bool is_weight = !strcmp(p->spec.name, "weight") && g->nodes[p->node].desc.kind != MP_OP_BATCHNORM2D;
        int64_t n = mp_shape_numel(&p->spec.shape);
        /* a weight without an fp32 master keeps its SGD momentum in its dtype, as the GPU does (cuda_step.c) */
        refs[c->n_grads] = (mp_param_ref){.param = p->data, .grad = p->grad, .n = n, .decay = is_weight,
                                          .name = p->name, .state_dtype = mp_graph_param_low_only(g, i)};
        c->grads[c->n_grads] = p->grad;
        c->grad_sizes[c->n_grads++] = n;
    }
    mp_status s = mp_optim_create(o->optim, refs, c->n_grads, &c->opt);
    free(refs);
    return s;
}

void mp_step_ctx_free(mp_step_ctx *c) {
    mp_cuda_step_destroy(c->gpu);
    mp_optim_destroy(c->opt);
    mp_plan_destroy(c->plan);
    free(c->grads);
    free(c->grad_sizes);
    free(c->logits);
    free(c->buffers_backup);
    memset(c, 0, sizeof *c);
}

static void copy_buffers(mp_graph *g, float *backup, bool save) {
    for (int i = 0; i < g->n_params; i++) {
        mp_gparam *p = &g->params[i];
        if (p->spec.trainable) continue;
        size_t n = (size_t)mp_shape_numel(&p->spec.shape);
        if (save) memcpy(backup, p->data, n * sizeof(float));
        else memcpy(p->data, backup, n * sizeof(float));
        backup += n;
    }
}

static const char *node_desc(const mp_graph *g, int node, char *buf, size_t len) {
    const mp_gnode *nd = &g->nodes[node];
    snprintf(buf, len, "%s (%s, computes %s, stores %s)", nd->name, mp_op_lookup(nd->desc.kind)->name,
             mp_dtype_name(nd->compute_dtype), mp_dtype_name(nd->storage_dtype));
    return buf;
}

/* node's description, or (node < 0) "an op" and why it was not located. */
static const char *site_desc(const mp_graph *g, int node, const char *why, char *buf, size_t len) {
    if (node >= 0) return node_desc(g, node, buf, len);
    snprintf(buf, len, "an op %s", why);
    return buf;
}

static float current_scale(const mp_step_ctx *c) { return c->o->loss_scaling ? mp_scaler_scale(&c->scaler) : 1.0f; }

/* GPU: the layer moves to fp32 in a new plan and step, the training state
 * carried over through the host. */
static mp_status rebuild_gpu_step(mp_step_ctx *c) {
    MP_TRY(mp_step_ctx_state_to_host(c));
    if (c->o->loss_scaling) mp_scaler_forward_ok(&c->scaler); /* the fallback starts a new count */
    mp_cuda_step_destroy(c->gpu);
    c->gpu = NULL;
    MP_TRY(make_plan(c));
    MP_TRY(make_gpu_step(c));
    MP_TRY(mp_step_ctx_state_to_device(c)); /* also reads the new step's overflow counts */
    c->gpu_rebuilds++;
    return MP_OK;
}

/* Consecutive forward overflows that stop the run (or fall back). */
static int forward_limit(const mp_step_ctx *c) { return c->o->max_forward_overflows > 0 ? c->o->max_forward_overflows : 3; }

/* After a forward overflow at `step` (the consecutive-th in a row) whose
 * first non-finite output is node's (-1: not located, `why` says why):
 * report it; after too many in a row, fall back or stop. */
static mp_status forward_overflow_report(mp_step_ctx *c, int64_t step, int node, const char *why, int consecutive) {
    mp_graph *g = c->m->g;
    char d[200];
    site_desc(g, node, why, d, sizeof d);
    if (c->events)
        fprintf(c->events,
                "step %lld: forward overflow: first non-finite value in the output of %s; a gradient overflow it is "
                "not, so the loss scale stays %g; skipping step\n",
                (long long)step, d, current_scale(c));
    if (consecutive < forward_limit(c)) return MP_OK;
    if (node < 0)
        return mp_error(MP_ERR_NONFINITE,
                        "step %lld: %d consecutive forward overflows, the first non-finite output in %s. Lowering the "
                        "loss scale cannot fix a forward overflow; try --precision amp-bf16 or an fp32 "
                        "--precision-override for that layer%s",
                        (long long)step, consecutive, d, c->o->auto_fallback ? " (--auto-fallback needs the op)" : "");
    mp_gnode *nd = &g->nodes[node];
    if (c->o->auto_fallback && (nd->compute_dtype != MP_DTYPE_F32 || nd->storage_dtype != MP_DTYPE_F32)) {
        nd->compute_dtype = MP_DTYPE_F32;
        nd->storage_dtype = MP_DTYPE_F32;
        if (c->events)
            fprintf(c->events, "step %lld: --auto-fallback: moving %s to fp32 and continuing\n", (long long)step,
                    nd->name);
        c->consecutive_forward = 0;
        if (c->o->loss_scaling) mp_scaler_forward_ok(&c->scaler);
        for (int k = 0, j = 0; k < g->n_params; k++) /* its weights now keep f32 momentum, as a master */
            if (g->params[k].spec.trainable) mp_optim_set_state_dtype(c->opt, j++, mp_graph_param_low_only(g, k));
        return c->gpu ? rebuild_gpu_step(c) : make_plan(c);
    }
    return mp_error(MP_ERR_NONFINITE,
                    "step %lld: %d consecutive forward overflows: %s produces NaN/inf. Lowering the loss scale cannot "
                    "fix a forward overflow; try --precision amp-bf16, --precision-override %s=fp32, or "
                    "--auto-fallback",
                    (long long)step, consecutive, d, nd->name);
}

/* A NaN/inf loss: skip, keep the scale, stop or fall back after too many. */
static mp_status forward_overflow(mp_step_ctx *c, int64_t step) {
    mp_graph *g = c->m->g;
    mp_nonfinite_site site;
    copy_buffers(g, c->buffers_backup, true); /* the search replays the forward */
    mp_status fs = mp_plan_find_nonfinite_forward(c->plan, &site);
    copy_buffers(g, c->buffers_backup, false);
    MP_TRY(fs);
    int consecutive;
    if (c->o->loss_scaling) {
        mp_scaler_forward_overflow(&c->scaler);
        consecutive = mp_scaler_consecutive_forward_overflows(&c->scaler);
    } else {
        consecutive = ++c->consecutive_forward;
    }
    c->skipped++;
    return forward_overflow_report(c, step, site.found ? site.node : c->m->loss, NULL, consecutive);
}

/* The error of a gradient overflow the scale cannot absorb: no loss
 * scaling, or the scale already at its minimum. */
static mp_status gradient_overflow_error(const mp_step_ctx *c, int64_t step, const char *where) {
    return mp_error(MP_ERR_NONFINITE,
                    "step %lld: non-finite gradients%s in %s; try --precision amp-bf16 or an fp32 override for that "
                    "layer",
                    (long long)step, c->o->loss_scaling ? " at the minimum loss scale" : "", where);
}

/* Replay the last micro-batch with checks to find where the gradient went
 * non-finite; leaves parameters, buffers and the dropout step as they were. */
static void locate_gradient_overflow(mp_step_ctx *c, float seed, mp_nonfinite_site *site) {
    mp_graph *g = c->m->g;
    copy_buffers(g, c->buffers_backup, true);
    /* replays the forward, checking it; then the backward, checking it */
    if (mp_plan_find_nonfinite_forward(c->plan, site) == MP_OK && !site->found) {
        mp_graph_zero_grad(g);
        mp_plan_backward_checked(c->plan, seed, site);
    }
    copy_buffers(g, c->buffers_backup, false);
}

static void clip_gradients(mp_step_ctx *c) {
    if (c->o->clip_value > 0) {
        const float v = c->o->clip_value;
        for (int i = 0; i < c->n_grads; i++)
            for (int64_t j = 0; j < c->grad_sizes[i]; j++) c->grads[i][j] = fminf(fmaxf(c->grads[i][j], -v), v);
    }
    if (c->o->clip_norm > 0) {
        double ss = 0;
        for (int i = 0; i < c->n_grads; i++)
            for (int64_t j = 0; j < c->grad_sizes[i]; j++) ss += (double)c->grads[i][j] * c->grads[i][j];
        double norm = sqrt(ss);
        if (norm > c->o->clip_norm) {
            float f = (float)(c->o->clip_norm / (norm + 1e-6));
            for (int i = 0; i < c->n_grads; i++)
                for (int64_t j = 0; j < c->grad_sizes[i]; j++) c->grads[i][j] *= f;
        }
    }
}

static int argmax(const float *x, int k) {
    int best = 0;
    for (int i = 1; i < k; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* GPU: overflows show in the counts every step writes to the host, read
 * without waiting (wait = false) after each step; only when they moved does
 * the host wait and report as the CPU path does: a forward overflow kept the
 * scale, and once a run of them reached the limit (the device keeps the
 * longest run, so a clean step after it cannot hide it) the run falls back
 * or stops; a gradient overflow backed the scale off, and stops the run
 * without loss scaling or at the minimum scale. Several overflows between
 * two reads are reported as the last one, with counts. The op is named by
 * replaying the step, which shows it only while that step is the last
 * queued one (later steps moved the weights and the batch). */
static mp_status gpu_overflow_reports(mp_step_ctx *c, bool wait) {
    mp_cuda_step_overflows now;
    MP_TRY(mp_cuda_step_overflows_read(c->gpu, wait, &now));
    if (now.skipped_steps == c->gpu_seen.skipped_steps) return MP_OK;
    if (!wait) MP_TRY(mp_cuda_step_overflows_read(c->gpu, true, &now));
    const mp_cuda_step_overflows was = c->gpu_seen;
    c->gpu_seen = now;
    c->skipped += now.skipped_steps - was.skipped_steps;
    if (c->o->loss_scaling) MP_TRY(mp_cuda_step_scaler(c->gpu, &c->scaler));
    const int64_t at = c->gpu_last_step - (now.last_skip_ago > 0 ? now.last_skip_ago : 0);
    const int64_t forward = now.forward_overflows - was.forward_overflows;
    const int64_t gradient = now.skipped_steps - was.skipped_steps - forward;
    if (c->events && forward + gradient > 1)
        fprintf(c->events, "steps up to %lld: %lld forward and %lld gradient overflows since the last report\n",
                (long long)at, (long long)forward, (long long)gradient);
    const int limit = forward_limit(c);
    const bool limit_now = now.forward_peak >= limit && was.forward_peak < limit;
    mp_nonfinite_site site = {.node = -1};
    const char *why = c->o->dist ? "(not located in data-parallel runs)"
                                 : "(not located: later steps ran before the host looked)";
    if (!c->o->dist && now.last_skip_ago == 0 && (!limit_now || now.consecutive_forward_overflows >= limit)) {
        const int k = c->o->accumulate > 0 ? c->o->accumulate : 1;
        MP_TRY(mp_cuda_step_locate_overflow(c->gpu, !now.last_skip_forward, now.last_skip_scale / (float)k, &site));
        if (!site.found) /* e.g. an earlier micro-batch of the step overflowed: the replay runs the last */
            why = strcmp(site.what, "replay failed") ? "(not located: the replay of the step's last micro-batch found "
                                                       "no NaN/inf)"
                                                     : "(not located: the replay failed)";
    }
    const int node = site.found ? site.node : -1;
    if (limit_now) { /* the queue may have run past the step that reached the limit: report that step */
        const int beyond = now.forward_peak - limit;
        const int64_t reached = now.forward_peak_ago >= 0 ? c->gpu_last_step - now.forward_peak_ago - beyond : at;
        if (c->events && beyond > 0)
            fprintf(c->events, "steps %lld to %lld: forward overflows as well (queued before the host saw step %lld's)\n",
                    (long long)(reached + 1), (long long)(reached + beyond), (long long)reached);
        return forward_overflow_report(c, reached, node, why, limit);
    }
    if (now.last_skip_forward) return forward_overflow_report(c, at, node, why, now.consecutive_forward_overflows);
    char d[200];
    site_desc(c->m->g, node, why, d, sizeof d);
    if (c->events)
        fprintf(c->events, "step %lld: gradient overflow in %s of %s (%s); skipping step, loss scale %g -> %g\n",
                (long long)at, site.found && !site.backward ? "forward" : "backward", d, site.found ? site.what : "?",
                now.last_skip_scale, now.scale);
    if (!c->o->loss_scaling || (c->scaler.opts.dynamic && now.last_skip_scale <= c->scaler.min_scale &&
                                now.scale <= c->scaler.min_scale))
        return gradient_overflow_error(c, at, d);
    return MP_OK;
}

mp_status mp_step_ctx_sync_gpu(mp_step_ctx *c) {
    MP_TRY(mp_cuda_step_wait(c->gpu)); /* bounded in data-parallel runs */
    MP_TRY(gpu_overflow_reports(c, true));
    MP_TRY(mp_plan_sync_params(c->plan, true));
    if (c->o->loss_scaling) MP_TRY(mp_cuda_step_scaler(c->gpu, &c->scaler));
    return MP_OK;
}

mp_status mp_step_ctx_state_to_host(mp_step_ctx *c) {
    if (!c->gpu) return MP_OK;
    /* c->skipped keeps counting this run's skipped steps, as on the CPU */
    return mp_cuda_step_state_to_host(c->gpu, c->opt, c->o->loss_scaling ? &c->scaler : NULL);
}

mp_status mp_step_ctx_state_to_device(mp_step_ctx *c) {
    if (!c->gpu) return MP_OK;
    MP_TRY(mp_cuda_step_state_from_host(c->gpu, c->opt, c->o->loss_scaling ? &c->scaler : NULL));
    return mp_cuda_step_overflows_read(c->gpu, true, &c->gpu_seen); /* reported before the checkpoint */
}

/* One step on the GPU: k micro-batches go in and are queued (the step ends
 * with the last); the loss and logits come back (a host synchronization)
 * only every read_every steps, and are the last micro-batch's. */
static mp_status gpu_train_step(mp_step_ctx *c, mp_loader *ld, float lr, int64_t global_step, mp_step_result *r) {
    const int k = c->o->accumulate > 0 ? c->o->accumulate : 1;
    const float *x;
    const int32_t *y;
    int n = 0;
    for (int micro = 0; micro < k; micro++) {
        MP_TRY(mp_loader_next(ld, &x, &y, &n));
        /* copies from pageable memory wait for the stream: a bounded wait in data-parallel runs */
        mp_dist_wait_begin(c->o->dist);
        mp_status s = mp_plan_set_input(c->plan, c->m->input, x, mp_plan_numel(c->plan, c->m->input));
        if (s == MP_OK) s = mp_plan_set_labels(c->plan, c->m->labels, y, (size_t)n);
        mp_dist_wait_end(c->o->dist);
        MP_TRY(mp_dist_check(c->o->dist));
        MP_TRY(s);
        MP_TRY(mp_cuda_step_run(c->gpu, lr));
    }
    c->gpu_last_step = global_step;
    const int rebuilds = c->gpu_rebuilds;
    MP_TRY(gpu_overflow_reports(c, false));
    if (c->gpu_rebuilds != rebuilds) { /* --auto-fallback: a new plan that has not run yet */
        r->skipped = true;
        return MP_OK;
    }
    int every = c->o->read_every > 0 ? c->o->read_every : 20;
    if (global_step % every && !c->read_now) return MP_OK;
    float loss = 0;
    MP_TRY(mp_cuda_step_loss(c->gpu, c->m->loss, &loss));
    if (!isfinite(loss)) return MP_OK; /* a skipped step: its loss counts nowhere, as on the CPU */
    MP_TRY(mp_plan_read(c->plan, c->m->logits, c->logits, (size_t)n * (size_t)c->classes));
    r->loss_sum = loss;
    for (int i = 0; i < n; i++) r->correct += argmax(c->logits + (size_t)i * (size_t)c->classes, c->classes) == y[i];
    r->seen = n;
    return MP_OK;
}

mp_status mp_train_step(mp_step_ctx *c, mp_loader *ld, float lr, int64_t global_step, mp_step_result *r) {
    memset(r, 0, sizeof *r);
    if (c->gpu) return gpu_train_step(c, ld, lr, global_step, r);
    mp_graph *g = c->m->g;
    const int k = c->o->accumulate > 0 ? c->o->accumulate : 1;
    const float scale = current_scale(c);
    const float seed = scale / (float)k; /* k micro-batches average like one batch of k*b */
    size_t in_numel = mp_plan_numel(c->plan, c->m->input);
    mp_graph_zero_grad(g);
    for (int micro = 0; micro < k; micro++) {
        const float *x;
        const int32_t *y;
        int n = 0;
        MP_TRY(mp_loader_next(ld, &x, &y, &n));
        MP_ASSERT(n == c->o->batch);
        MP_TRY(mp_plan_set_input(c->plan, c->m->input, x, in_numel));
        MP_TRY(mp_plan_set_labels(c->plan, c->m->labels, y, (size_t)n));
        MP_TRY(mp_plan_forward(c->plan));
        float loss = 0;
        MP_TRY(mp_plan_read(c->plan, c->m->loss, &loss, 1));
        if (!isfinite(loss)) {
            for (int rest = micro + 1; rest < k; rest++) MP_TRY(mp_loader_next(ld, &x, &y, &n));
            r->skipped = true;
            return forward_overflow(c, global_step);
        }
        MP_TRY(mp_plan_read(c->plan, c->m->logits, c->logits, (size_t)n * (size_t)c->classes));
        MP_TRY(mp_plan_backward(c->plan, seed));
        r->loss_sum += loss;
        for (int i = 0; i < n; i++)
            r->correct += argmax(c->logits + (size_t)i * (size_t)c->classes, c->classes) == y[i];
        r->seen += n;
    }
    c->consecutive_forward = 0;
    bool overflow;
    if (c->o->loss_scaling) {
        mp_scaler_forward_ok(&c->scaler);
        mp_scaler_unscale_check(&c->scaler, c->grads, c->grad_sizes, c->n_grads);
        overflow = mp_scaler_found_inf(&c->scaler);
    } else {
        overflow = false;
        for (int i = 0; i < c->n_grads && !overflow; i++) overflow = mp_first_nonfinite(c->grads[i], c->grad_sizes[i]) >= 0;
    }
    if (overflow) {
        mp_nonfinite_site site;
        locate_gradient_overflow(c, seed, &site);
        float before = scale;
        if (c->o->loss_scaling) mp_scaler_update(&c->scaler);
        c->skipped++;
        r->skipped = true;
        char d[160] = "an unlocated tensor";
        if (site.found) node_desc(g, site.node, d, sizeof d);
        if (c->events)
            fprintf(c->events, "step %lld: gradient overflow in %s of %s (%s); skipping step, loss scale %g -> %g\n",
                    (long long)global_step, site.found && !site.backward ? "forward" : "backward", d,
                    site.found ? site.what : "?", before, current_scale(c));
        if (!c->o->loss_scaling || (mp_scaler_at_floor(&c->scaler) && before <= c->scaler.min_scale))
            return gradient_overflow_error(c, global_step, d);
        return MP_OK;
    }
    clip_gradients(c);
    mp_optim_step(c->opt, lr);
    mp_graph_round_low_weights(g, NULL, NULL);
    if (c->o->loss_scaling) mp_scaler_update(&c->scaler);
    return MP_OK;
}
