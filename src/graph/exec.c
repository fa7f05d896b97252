/* exec.c — run a plan: copy a batch in, forward in node order, backward in
 * reverse order (autodiff is this traversal calling each op's backward),
 * accumulating gradients where a tensor feeds several consumers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/rng.h"
#include "graph/exec_backend.h"
#include "graph/plan.h"
#include "graph/plan_fuse.h"
#include "graph/second_order.h"

static mp_status check_node(const mp_plan *p, mp_node node, mp_op_kind kind, const char *what) {
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "%s: null plan", what);
    if (node < 0 || node >= p->n) return mp_error(MP_ERR_INVALID_ARG, "%s: node %d is not in this plan", what, node);
    if (kind != MP_OP_COUNT && p->g->nodes[node].desc.kind != kind)
        return mp_error(MP_ERR_INVALID_ARG, "%s: node '%s' is a %s", what, p->g->nodes[node].name,
                        mp_op_lookup(p->g->nodes[node].desc.kind)->name);
    return MP_OK;
}

/* A source node has its batch; after a forward, the next backward would mix batches. */
static void note_batch(mp_plan *p, int node) {
    p->nodes[node].data_set = true;
    if (p->forward_ran) p->changed_source = node + 1;
}

mp_status mp_plan_set_input(mp_plan *p, mp_node node, const float *data, size_t n) {
    MP_TRY(check_node(p, node, MP_OP_COUNT, "set_input"));
    if (!data) return mp_error(MP_ERR_INVALID_ARG, "set_input '%s': no data (NULL)", p->g->nodes[node].name);
    mp_op_kind k = p->g->nodes[node].desc.kind;
    if (k != MP_OP_INPUT && k != MP_OP_TARGETS)
        return mp_error(MP_ERR_INVALID_ARG, "set_input: node '%s' is not an input", p->g->nodes[node].name);
    size_t want = (size_t)mp_shape_numel(&p->nodes[node].info.out);
    if (n != want)
        return mp_error(MP_ERR_SHAPE, "set_input '%s': got %zu values, the plan takes %zu (batch %d)",
                        p->g->nodes[node].name, n, want, p->o.batch);
    MP_TRY(p->be->set_input(p, node, data, n));
    note_batch(p, node);
    return MP_OK;
}

/* Every label within the classes of each softmax_cross_entropy reading
 * node: checked here, before any forward, so that a refused batch changes
 * nothing (batch norm's running statistics included). */
static mp_status check_label_range(const mp_plan *p, mp_node node, const int32_t *labels, size_t n) {
    for (int j = 0; j < p->n; j++) {
        const mp_gnode *c = &p->g->nodes[j];
        if (c->desc.kind != MP_OP_SOFTMAX_CE || c->n_in < 2 || c->in[1] != node) continue;
        const int64_t k = p->g->nodes[c->in[0]].sample_shape.dims[1];
        for (size_t i = 0; i < n; i++)
            if (labels[i] < 0 || labels[i] >= k)
                return mp_error(MP_ERR_INVALID_ARG, "set_labels '%s': sample %zu has label %d, outside [0, %lld) of "
                                "softmax_cross_entropy '%s'", p->g->nodes[node].name, i, (int)labels[i],
                                (long long)k, c->name);
    }
    return MP_OK;
}

mp_status mp_plan_set_labels(mp_plan *p, mp_node node, const int32_t *labels, size_t n) {
    MP_TRY(check_node(p, node, MP_OP_LABELS, "set_labels"));
    if (!labels) return mp_error(MP_ERR_INVALID_ARG, "set_labels '%s': no labels (NULL)", p->g->nodes[node].name);
    if (n != (size_t)p->o.batch)
        return mp_error(MP_ERR_SHAPE, "set_labels '%s': got %zu labels, the plan takes %d", p->g->nodes[node].name,
                        n, p->o.batch);
    MP_TRY(check_label_range(p, node, labels, n));
    MP_TRY(p->be->set_labels(p, node, labels, n));
    note_batch(p, node);
    return MP_OK;
}

/* Forward of node i at the plan's current step (its dropout seed). */
static mp_status forward_node(mp_plan *p, int i) {
    mp_op_call *c = &p->nodes[i].call;
    c->seed = mp_hash64(p->o.seed ^ ((uint64_t)i << 32), p->step);
    return mp_plan_fuse_before_forward(p, i) ? p->be->forward(p, i) : MP_OK;
}

/* opts.profile: on a device, a node's time is its queued work's, so wait
 * for the stream before reading the clock (not inside a graph capture). */
static double profile_clock(const mp_plan *p) {
    p->be->profile_sync(p);
    return mp_now_seconds();
}

/* Every input, labels and targets node that a node reads has had a batch:
 * a forward would otherwise compute on whatever its memory holds. */
static mp_status check_data_set(const mp_plan *p) {
    for (int i = 0; i < p->n; i++) {
        const mp_op_kind k = p->g->nodes[i].desc.kind;
        if (mp_op_is_source(k) && p->g->nodes[i].n_consumers > 0 && !p->nodes[i].data_set)
            return mp_error(MP_ERR_INVALID_ARG, "forward: %s '%s' has no batch yet (%s first)",
                            k == MP_OP_LABELS ? "labels" : k == MP_OP_TARGETS ? "targets" : "input",
                            p->g->nodes[i].name, k == MP_OP_LABELS ? "mp_plan_set_labels" : "mp_plan_set_input");
    }
    return MP_OK;
}

mp_status mp_plan_forward(mp_plan *p) {
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "forward: null plan");
    MP_TRY(check_data_set(p));
    MP_TRY(p->be->forward_begin(p));
    p->backward_ran = false;
    p->forward_ran = false; /* until every node has run */
    for (int i = 0; i < p->n; i++) {
        double t0 = p->o.profile ? profile_clock(p) : 0;
        MP_TRY(forward_node(p, i));
        if (p->o.profile) p->nodes[i].fwd_seconds += profile_clock(p) - t0;
        if (p->observe) MP_TRY(p->observe(p->observe_arg, i, false, &p->nodes[i].call.out));
    }
    p->step++;
    p->forward_ran = true;
    p->changed_source = 0;
    mp_so_note_forward(p);
    return MP_OK;
}


void mp_plan_gradients_to_scratch(const mp_plan *p, int i, mp_op_call *c, const bool *taken, const bool *fresh) {
    char *scratch = p->arena + p->nodes[i].scratch_off;
    for (int k = 0; k < c->n_in; k++)
        if (c->d_in[k].data && taken[k]) {
            c->d_in[k].data = scratch;
            scratch += MP_ALIGN64((size_t)mp_tensor_numel(&c->d_in[k]) * mp_dtype_size(c->d_in[k].dtype));
        }
    for (int k = 0; k < c->info->n_params; k++)
        if (c->d_param[k].data && !fresh[k]) {
            c->d_param[k].data = scratch;
            scratch += MP_ALIGN64((size_t)mp_tensor_numel(&c->d_param[k]) * sizeof(float));
        }
}

/* Whether tensor t of plan p holds a NaN/inf; on a device a kernel tests it
 * there (a replay for provenance only, never per step). */
static mp_status nonfinite(const mp_plan *p, const mp_tensor *t, bool *found) {
    return p->be->tensor_nonfinite(p, t, found);
}

/* Batch norm i, with a residual add (+ ReLU) fused in (plan_fuse.h), gave
 * a NaN/inf in the replay: which op of the chain an unfused plan would
 * name (*node). The batch norm runs alone (its call's residual and ReLU left
 * out), then the add's forward in place in the buffer they share, each
 * output checked; then, whatever came of those, the fused forward again,
 * whose output and saved state (on a GPU cuDNN keeps its ReLU mask there)
 * the rest of the replay and a backward read. Both extra runs use momentum
 * 0, which leaves the running statistics where the replay's fused forward
 * put them (unless a batch statistic is itself inf/NaN: then they are
 * non-finite already). Nodes the plan runs between the batch norm and the
 * add are not checked before the add: an unfused plan would name such a
 * node first where it overflows too. */
static mp_status name_in_chain(mp_plan *p, int i, int *node) {
    mp_op_call *c = &p->nodes[i].call;
    float *mom = &p->g->nodes[i].desc.attr.bn.momentum;
    const float momentum = *mom;
    const mp_tensor resid = c->resid;
    const bool relu = c->relu_after;
    const int add = p->nodes[i].add_fused;
    bool found = false;
    *mom = 0.0f;
    c->resid.data = NULL, c->relu_after = false;
    mp_status s = p->be->forward(p, i);
    c->resid = resid, c->relu_after = relu;
    if (s == MP_OK) s = nonfinite(p, &c->out, &found);
    if (s == MP_OK && !found) {
        s = p->be->forward(p, add);
        if (s == MP_OK) s = nonfinite(p, &p->nodes[add].call.out, &found);
        if (found) *node = add;
    }
    const mp_status again = p->be->forward(p, i);
    *mom = momentum;
    return s != MP_OK ? s : again;
}

/* Batch norms that gather their statistics across ranks (sync_bn): an extra
 * forward on one rank only would pair its collectives with the other ranks'
 * next ones, so such plans name the fused batch norm for its chain. */
static bool chain_apart_ok(const mp_plan *p) { return !(p->o.training && p->o.sync_bn && p->o.dist); }

/* Node i's forward in the replay, its output checked: site filled at the
 * first NaN/inf, named as an unfused plan names it (name_in_chain). */
static mp_status replay_node(mp_plan *p, int i, mp_nonfinite_site *site) {
    mp_status s = forward_node(p, i);
    bool found = false;
    if (s == MP_OK && !site->found) s = nonfinite(p, &p->nodes[i].call.out, &found);
    if (s != MP_OK || !found) return s;
    int node = i;
    if (p->nodes[i].add_fused && chain_apart_ok(p)) MP_TRY(name_in_chain(p, i, &node));
    *site = (mp_nonfinite_site){.found = true, .backward = false, .node = node};
    snprintf(site->what, sizeof site->what, "output");
    return MP_OK;
}

/* Activations die as soon as nothing reads them (the arena reuses their
 * memory), so the search replays the last forward pass (same batch, same
 * dropout masks) and checks every output as soon as it is written. Past the
 * first non-finite output it runs the rest unchecked: the nodes it re-ran
 * may have taken the memory of later outputs (the loss, the logits), which
 * must read as after a forward, not as those nodes' bytes. */
mp_status mp_plan_find_nonfinite_forward(mp_plan *p, mp_nonfinite_site *site) {
    if (!site) return mp_error(MP_ERR_INVALID_ARG, "find_nonfinite: no site to fill");
    memset(site, 0, sizeof *site);
    site->node = -1;
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "find_nonfinite: null plan");
    if (p->step == 0) return mp_error(MP_ERR_INVALID_ARG, "find_nonfinite: no forward has run to replay");
    MP_TRY(check_data_set(p));
    const bool had_forward = p->forward_ran;
    const uint64_t step = p->step;
    if (p->step > 0) p->step--;
    p->replaying = true; /* fused outputs are stored, to be checked (plan_fuse.h) */
    mp_status s = p->be->forward_begin(p);
    p->backward_ran = false;
    for (int i = 0; i < p->n && s == MP_OK; i++)
        if (!p->nodes[i].fused_away) s = replay_node(p, i, site); /* its batch norm ran it */
    p->replaying = false;
    p->step = step;
    /* a failed replay leaves the outputs (kept whole) as the forward wrote
     * them, and what it re-ran recomputed alike */
    p->forward_ran = s == MP_OK || had_forward;
    if (s == MP_OK) p->changed_source = 0;
    if (s != MP_OK) p->backward_ran = true; /* but only kept outputs read as a forward's; no backward */
    return s;
}

/* After node i's backward: record the first gradient it wrote that holds a
 * NaN/inf (site->found). */
static mp_status check_backward_site(const mp_plan *p, int i, mp_nonfinite_site *site) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_op_call *c = &p->nodes[i].call;
    bool found = false;
    /* a residual add fused into a batch norm (plan_fuse.h) has computed
     * nothing yet: the batch norm writes both its gradients, later */
    if (p->nodes[i].fused_away && nd->desc.kind == MP_OP_ADD) return MP_OK;
    /* node i is such a batch norm: the residual's gradient it wrote (or
     * added to) is the add's, which an unfused plan checks first */
    const int m = mp_plan_fused_resid(p, i);
    if (m >= 0 && c->d_resid.data) MP_TRY(nonfinite(p, &c->d_resid, &found));
    if (found) {
        *site = (mp_nonfinite_site){.found = true, .backward = true, .node = p->nodes[i].add_fused};
        snprintf(site->what, sizeof site->what, "grad input %d", m);
        return MP_OK;
    }
    for (int k = 0; k < nd->n_in; k++) {
        if (c->d_in[k].data) MP_TRY(nonfinite(p, &c->d_in[k], &found));
        if (!found) continue;
        *site = (mp_nonfinite_site){.found = true, .backward = true, .node = i};
        snprintf(site->what, sizeof site->what, "grad input %d", k);
        return MP_OK;
    }
    for (int k = 0; k < nd->n_params; k++) {
        mp_tensor grad = c->d_param[k]; /* on a device the gradient is the master's, not the host copy */
        if (grad.data) grad.data = p->be->param_grad(p, nd->first_param + k);
        if (grad.data) MP_TRY(nonfinite(p, &grad, &found));
        if (!found) continue;
        *site = (mp_nonfinite_site){.found = true, .backward = true, .node = i};
        snprintf(site->what, sizeof site->what, "grad %s", p->g->params[nd->first_param + k].spec.name);
        return MP_OK;
    }
    return MP_OK;
}

static mp_status run_backward(mp_plan *p, int j, mp_seed seed, mp_nonfinite_site *site);

mp_status mp_plan_check_batch_unchanged(const mp_plan *p, const char *what) {
    if (!p->changed_source) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "%s: '%s' was given a new batch after the last forward; the gradients would "
                    "mix two batches (run mp_plan_forward first)", what, p->g->nodes[p->changed_source - 1].name);
}

/* The public unchecked backward's seed: a NaN/inf d(loss) is a caller's
 * error (the trainer's own seeds may overflow: that is a skipped step). */
static mp_status check_seed(float seed) {
    if (isfinite(seed)) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "backward: the seed d(loss) = %g is not finite", (double)seed);
}

/* Index of loss node `loss` among the plan's losses, or -1 (message set). */
static int loss_index(const mp_plan *p, mp_node loss) {
    for (int j = 0; p && j < p->n_losses; j++)
        if (p->losses[j] == loss) return j;
    mp_error(MP_ERR_INVALID_ARG, "backward: node %d ('%s') is not one of the plan's losses", loss,
             p && loss >= 0 && loss < p->n ? p->g->nodes[loss].name : "?");
    return -1;
}

mp_status mp_plan_backward(mp_plan *p, float seed) {
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "backward: null plan");
    MP_TRY(check_seed(seed));
    return run_backward(p, 0, (mp_seed){.value = seed}, NULL);
}

mp_status mp_plan_backward_from(mp_plan *p, mp_node loss, float seed) {
    MP_TRY(check_seed(seed));
    return mp_plan_backward_seeded(p, loss, (mp_seed){.value = seed});
}

mp_status mp_plan_backward_seeded(mp_plan *p, mp_node loss, mp_seed seed) {
    const int j = loss_index(p, loss);
    return j < 0 ? MP_ERR_INVALID_ARG : run_backward(p, j, seed, NULL);
}

mp_status mp_plan_backward_checked(mp_plan *p, float seed, mp_nonfinite_site *site) {
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "backward: null plan");
    return mp_plan_backward_checked_from(p, p->losses[0], seed, site);
}

mp_status mp_plan_backward_checked_from(mp_plan *p, mp_node loss, float seed, mp_nonfinite_site *site) {
    if (!site) return mp_error(MP_ERR_INVALID_ARG, "backward_checked: no site to fill");
    memset(site, 0, sizeof *site);
    site->node = -1;
    const int j = loss_index(p, loss);
    if (j < 0) return MP_ERR_INVALID_ARG;
    const bool replaying = p->replaying;
    p->replaying = true; /* fused gradients are written, to be checked (plan_fuse.h) */
    const mp_status s = run_backward(p, j, (mp_seed){.value = seed}, site);
    p->replaying = replaying;
    return s;
}

static mp_status run_backward(mp_plan *p, int j, mp_seed seed, mp_nonfinite_site *site) {
    if (!p || !p->o.training) return mp_error(MP_ERR_INVALID_ARG, "backward: the plan was not compiled for training");
    if (!p->forward_ran)
        return mp_error(MP_ERR_INVALID_ARG, "backward: no forward has completed on this plan (run mp_plan_forward first)");
    MP_TRY(mp_plan_check_batch_unchanged(p, "backward"));
    if (p->backward_ran && !mp_plan_backward_repeats(p) && !p->so)
        return mp_error(MP_ERR_INVALID_ARG, "backward: a backward already ran since the last forward, and it reused the "
                        "memory a second one would read; run mp_plan_forward again (or make the plan with "
                        "mp_plan_opts.repeat_backward)");
    mp_graph *g = p->g;
    if (g->accumulating && g->accumulating != p)
        return mp_error(MP_ERR_INVALID_ARG, "backward: another trainer of this graph is in the middle of an "
                        "accumulated step: its micro-batches' gradients add up in the graph's gradient arrays, which "
                        "this backward would overwrite; finish that step (or destroy its trainer) first");
    memset(p->grad_written, 0, (size_t)p->n * sizeof *p->grad_written);
    p->backward_ran = g->backward_ran = true;
    const int root = p->losses[j];
    const bool *reach = p->reach[j];
    mp_so_note_backward(p, root);
    mp_pnode *loss = &p->nodes[root];
    if (mp_plan_grads_in_arena(p)) /* arena gradients do not outlive a step: every backward writes them afresh */
        for (int k = 0; k < g->n_params; k++) g->params[k].grad_fresh = true;
    if (!reach[root]) /* nothing trainable reaches the loss: zero gradients (arena ones hold garbage until then) */
        return mp_plan_grads_in_arena(p) ? p->be->zero_unreached_grads(p) : MP_OK;
    MP_ASSERT(loss->call.d_out.dtype == MP_DTYPE_F32);
    MP_TRY(p->be->set_loss_seed(p, root, seed));
    for (int i = root; i >= 0; i--) {
        mp_pnode *pn = &p->nodes[i];
        if (!reach[i]) continue;
        const mp_gnode *nd = &g->nodes[i];
        mp_op_call *c = &pn->call;
        /* Where each gradient goes, and whether it must be added to what
         * another consumer (or an earlier micro-batch) already wrote. */
        bool taken[MP_MAX_INPUTS] = {0}, fresh[MP_MAX_PARAMS] = {0};
        for (int k = 0; k < nd->n_in; k++) {
            int src = nd->in[k];
            c->d_in[k].data = reach[src] ? p->arena + p->nodes[src].grad_off : NULL;
            taken[k] = p->grad_written[src];
            for (int j = 0; j < k; j++)
                if (nd->in[j] == src) taken[k] = true;
        }
        for (int k = 0; k < nd->n_params; k++) {
            mp_gparam *gp = &g->params[nd->first_param + k];
            c->d_param[k].data = gp->spec.trainable ? gp->grad : NULL;
            fresh[k] = gp->grad_fresh;
        }
        if (p->observe && !site) MP_TRY(p->observe(p->observe_arg, i, true, &c->d_out));
        /* fused-away nodes, and a pool whose batch norm reads its dy, run nothing (plan_fuse.h) */
        if (mp_plan_fuse_before_backward(p, i, taken)) {
            double t0 = p->o.profile ? profile_clock(p) : 0;
            MP_TRY(p->be->backward(p, i, taken, fresh));
            if (p->o.profile) pn->bwd_seconds += profile_clock(p) - t0;
        }
        for (int k = 0; k < nd->n_in; k++)
            if (c->d_in[k].data) p->grad_written[nd->in[k]] = true;
        for (int k = 0; k < nd->n_params; k++)
            if (c->d_param[k].data) g->params[nd->first_param + k].grad_fresh = false;
        if (site) {
            MP_TRY(check_backward_site(p, i, site));
            if (site->found) return MP_OK;
        }
        if (p->grad_ready) MP_TRY(p->grad_ready(p->grad_ready_arg, i));
    }
    /* trainable parameters no path reached: their gradient is zero */
    return p->be->zero_unreached_grads(p);
}

uint64_t mp_plan_step(const mp_plan *p) { return p ? p->step : 0; }

void mp_plan_set_step(mp_plan *p, uint64_t step) {
    if (p) p->step = step;
}

size_t mp_plan_numel(const mp_plan *p, mp_node node) {
    if (!p || node < 0 || node >= p->n) return 0;
    return (size_t)mp_shape_numel(&p->nodes[node].info.out);
}

mp_status mp_plan_read(const mp_plan *p, mp_node node, float *dst, size_t n) {
    MP_TRY(check_node(p, node, MP_OP_COUNT, "read"));
    const bool source = mp_op_is_source(p->g->nodes[node].desc.kind);
    if (!p->forward_ran && !source)
        return mp_error(MP_ERR_INVALID_ARG, "read '%s': no forward has completed on this plan (mp_plan_forward first)",
                        p->g->nodes[node].name);
    if (source && !p->nodes[node].data_set)
        return mp_error(MP_ERR_INVALID_ARG, "read '%s': it has no batch yet (mp_plan_set_%s first)",
                        p->g->nodes[node].name, p->g->nodes[node].desc.kind == MP_OP_LABELS ? "labels" : "input");
    const int bn = p->nodes[node].fused_away ? p->nodes[node].fused_into : node;
    if (p->nodes[bn].dw_fused && p->g->nodes[bn].desc.kind == MP_OP_BATCHNORM2D) /* plan_fuse.h */
        return mp_error(MP_ERR_INVALID_ARG,
                        "read '%s': not stored on training steps: its batch norm is applied by the depthwise "
                        "convolution '%s' as it loads (read it from a plan without mp_plan_opts.bn_dw_fusion, "
                        "MIXPREC_FUSE_BN_DW unset)",
                        p->g->nodes[node].name, p->g->nodes[p->nodes[bn].dw_fused].name);
    if (p->nodes[bn].pool_fused && p->g->nodes[bn].desc.kind == MP_OP_BATCHNORM2D)
        return mp_error(MP_ERR_INVALID_ARG,
                        "read '%s': not stored on training steps: its batch norm is applied by the average pool '%s' "
                        "as it loads (read it from a plan with mp_plan_opts.no_bn_pool_fusion, or "
                        "MIXPREC_FUSE_BN_POOL=0)",
                        p->g->nodes[node].name, p->g->nodes[p->nodes[bn].pool_fused].name);
    /* a batch norm whose ReLU and/or add run fused into it stores only the last one's result (plan_fuse.h) */
    const mp_pnode *pn = &p->nodes[node];
    const bool fused_add = pn->fused_away && p->g->nodes[node].desc.kind == MP_OP_ADD;
    if (pn->relu_fused || pn->add_fused || (fused_add && p->nodes[pn->fused_into].relu_fused)) {
        const bool relu = pn->relu_fused || fused_add; /* else a batch norm whose add alone is fused */
        const char *after = pn->add_fused && pn->relu_fused ? "residual add and the ReLU"
                            : relu                          ? "ReLU"
                                                            : "residual add";
        return mp_error(MP_ERR_INVALID_ARG,
                        "read '%s': not stored: the plan fuses it with the %s after it and stores only the %s's "
                        "output; mark it with mp_graph_mark_output before mp_plan_create to read it",
                        p->g->nodes[node].name, after, relu ? "ReLU" : "add");
    }
    /* the arena gives a node's memory to later nodes once nothing reads it: after the forward, what
     * outlived it is intact; after a backward, only what the whole step keeps (outputs, sources) */
    const int kept_to = p->backward_ran ? 2 * p->n - 1 : p->n - 1;
    if (p->nodes[node].out_last < kept_to)
        return mp_error(MP_ERR_INVALID_ARG,
                        "read '%s': its output is not kept after the %s (later nodes reuse its memory); mark it "
                        "with mp_graph_mark_output before mp_plan_create to read it",
                        p->g->nodes[node].name, p->backward_ran ? "backward" : "forward");
    const mp_tensor *t = &p->nodes[node].call.out;
    size_t have = (size_t)mp_tensor_numel(t);
    if (n != have)
        return mp_error(MP_ERR_SHAPE, "read '%s': asked for %zu values, it has %zu", p->g->nodes[node].name, n, have);
    if (!dst && n > 0) return mp_error(MP_ERR_INVALID_ARG, "read '%s': null buffer", p->g->nodes[node].name);
    return p->be->read(p, node, dst, n);
}

mp_status mp_plan_sync_params(mp_plan *p, bool to_host) {
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "sync_params: null plan");
    return p->be->params_sync(p, to_host);
}
