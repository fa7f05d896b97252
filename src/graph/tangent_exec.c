/* tangent_exec.c — the two tangent traversals of a second-order plan
 * (second_order.h): the forward's derivative in node order, then the
 * backward's in reverse order from the root of the last backward,
 * accumulating where a tensor has several consumers as run_backward does.
 *
 * Tangents are f32 buffers on the plan's device; the exec backend runs each
 * call (exec_backend.h): the host on f32 copies of the primal tensors
 * (tangent_host.c), a GPU on them as stored. */
#include <string.h>

#include "graph/exec_backend.h"
#include "graph/second_order.h"

mp_status mp_so_no_tangent(const mp_plan *p, int i, const char *which) {
    const mp_gnode *nd = &p->g->nodes[i];
    const bool host = !strcmp(p->be->name, "cpu");
    return mp_error(MP_ERR_UNSUPPORTED, "second order: op %s (node '%s') has no %s tangent on the %s yet, so a "
                    "gradient penalty cannot pass through it", mp_op_lookup(nd->desc.kind)->name, nd->name, which,
                    host ? "CPU" : "GPU");
}

static mp_tensor f32t(const mp_shape *s, float *data) { return (mp_tensor){MP_DTYPE_F32, *s, data}; }

/* The call's tangent inputs: its inputs' and parameters' directions, its
 * output's tangent (NULL data where zero). */
static void bind_tangents(const mp_plan *p, int i, mp_op_call *c) {
    const mp_plan_so *so = p->so;
    const mp_gnode *nd = &p->g->nodes[i];
    for (int k = 0; k < nd->n_in; k++) {
        const int src = nd->in[k];
        c->t_in[k] = f32t(&c->in[k].shape, so->t_zero[src] ? NULL : so->t_out[src]);
    }
    for (int k = 0; k < nd->n_params; k++) {
        const int gp = nd->first_param + k;
        c->t_param[k] = f32t(&c->param[k].shape, so->t_param_set[gp] ? so->t_param[gp] : NULL);
    }
    c->t_out = f32t(&c->out.shape, so->t_zero[i] ? NULL : so->t_out[i]);
}

mp_status mp_plan_forward_tangent(mp_plan *p) {
    if (!p || !p->so) return mp_error(MP_ERR_INVALID_ARG, "forward_tangent: the plan was not compiled with opts.second_order");
    mp_plan_so *so = p->so;
    if (!so->forwarded) return mp_error(MP_ERR_INVALID_ARG, "forward_tangent: called before any forward (run mp_plan_forward first)");
    MP_TRY(mp_plan_check_batch_unchanged(p, "forward_tangent"));
    const mp_graph *g = p->g;
    const int wrt = p->o.input_grad ? p->o.input_grad_wrt : -1;
    for (int i = 0; i < p->n; i++) {
        const mp_gnode *nd = &g->nodes[i];
        if (i == wrt && so->input_dir_set) { /* the direction itself (set_tangent_input) */
            so->t_zero[i] = false;
            continue;
        }
        so->t_zero[i] = true;
        if (mp_op_is_source(nd->desc.kind) || nd->storage_dtype == MP_DTYPE_I32) continue;
        bool any = false;
        for (int k = 0; k < nd->n_in; k++) any |= !so->t_zero[nd->in[k]];
        for (int k = 0; k < nd->n_params; k++) any |= so->t_param_set[nd->first_param + k];
        if (!any) continue; /* a zero tangent: nothing to run */
        char *cur = so->stage;
        mp_op_call c = p->be->tangent_primal(p, i, &cur);
        bind_tangents(p, i, &c);
        c.t_out = f32t(&c.out.shape, so->t_out[i]);
        MP_TRY(p->be->tangent_run(p, i, &c, false));
        so->t_zero[i] = false;
    }
    so->tangent_forwarded = true;
    return MP_OK;
}

/* The nodes the backward from root visited, or NULL (message set). */
static const bool *root_reach(const mp_plan *p, mp_node root) {
    if (p->so->last_input_grad) return p->so->root_reach;
    for (int j = 0; j < p->n_losses; j++)
        if (p->losses[j] == root) return p->reach[j];
    mp_error(MP_ERR_INVALID_ARG, "backward_tangent: node %d is not a loss of the plan", root);
    return NULL;
}

/* Where node i's tangent gradients go: straight into the buffers not yet
 * written, into scratch (*cur) for those a value is already in. */
static void tangent_grad_targets(const mp_plan *p, int i, const bool *reach, int stop, mp_op_call *c, bool *taken,
                                 bool *added, char **cur) {
    const mp_plan_so *so = p->so;
    const mp_gnode *nd = &p->g->nodes[i];
    for (int k = 0; k < nd->n_in; k++) {
        const int src = nd->in[k];
        taken[k] = false;
        if (!reach[src] || src == stop || !so->t_dout[src]) continue;
        taken[k] = so->t_dwritten[src];
        for (int j = 0; j < k; j++)
            if (nd->in[j] == src) taken[k] = true;
        c->t_d_in[k] = f32t(&c->in[k].shape, taken[k] ? mp_so_take(cur, &c->in[k].shape) : so->t_dout[src]);
    }
    for (int k = 0; k < nd->n_params; k++) {
        const int gp = nd->first_param + k;
        added[k] = false;
        if (!so->t_dparam[gp]) continue;
        added[k] = so->t_dparam_written[gp];
        c->t_d_param[k] = f32t(&c->param[k].shape, added[k] ? mp_so_take(cur, &c->param[k].shape) : so->t_dparam[gp]);
    }
}

mp_status mp_plan_backward_tangent(mp_plan *p, mp_node root) {
    if (!p || !p->so) return mp_error(MP_ERR_INVALID_ARG, "backward_tangent: the plan was not compiled with opts.second_order");
    mp_plan_so *so = p->so;
    if (!so->tangent_forwarded)
        return mp_error(MP_ERR_INVALID_ARG, "backward_tangent: called before mp_plan_forward_tangent (after the forward)");
    MP_TRY(mp_plan_check_batch_unchanged(p, "backward_tangent"));
    if (root < 0 || root >= p->n || so->last_root != root)
        return mp_error(MP_ERR_INVALID_ARG, "backward_tangent from node %d: the last backward since the forward %s%s%s; "
                        "run the backward from that node first", root, so->last_root < 0 ? "" : "started at '",
                        so->last_root < 0 ? "is none" : p->g->nodes[so->last_root].name, so->last_root < 0 ? "" : "'");
    const bool *reach = root_reach(p, root);
    if (!reach) return MP_ERR_INVALID_ARG;
    const int stop = so->last_input_grad ? p->o.input_grad_wrt : -1;
    const mp_graph *g = p->g;
    memset(so->t_dwritten, 0, (size_t)p->n * sizeof *so->t_dwritten);
    memset(so->t_dparam_written, 0, (size_t)g->n_params * sizeof *so->t_dparam_written);
    so->tangent_backwarded = false;
    for (int i = root; i > stop; i--) {
        const mp_gnode *nd = &g->nodes[i];
        if (!reach[i] || mp_op_is_source(nd->desc.kind)) continue;
        const bool has_tdout = i != root && so->t_dwritten[i];
        if (!has_tdout && so->t_zero[i]) continue; /* every tangent it reads is zero */
        char *cur = so->stage;
        mp_op_call c = p->be->tangent_primal(p, i, &cur);
        bind_tangents(p, i, &c);
        c.t_d_out = f32t(&c.out.shape, has_tdout ? so->t_dout[i] : NULL);
        bool taken[MP_MAX_INPUTS], added[MP_MAX_PARAMS];
        tangent_grad_targets(p, i, reach, stop, &c, taken, added, &cur);
        MP_TRY(p->be->tangent_run(p, i, &c, true));
        for (int k = 0; k < nd->n_in; k++) {
            if (!c.t_d_in[k].data) continue;
            const int src = nd->in[k];
            if (taken[k]) MP_TRY(p->be->tangent_add(p, so->t_dout[src], c.t_d_in[k].data, mp_tensor_numel(&c.t_d_in[k])));
            so->t_dwritten[src] = true;
        }
        for (int k = 0; k < nd->n_params; k++) {
            if (!c.t_d_param[k].data) continue;
            const int gp = nd->first_param + k;
            if (added[k])
                MP_TRY(p->be->tangent_add(p, so->t_dparam[gp], c.t_d_param[k].data, mp_tensor_numel(&c.t_d_param[k])));
            so->t_dparam_written[gp] = true;
        }
    }
    so->tangent_backwarded = true;
    return MP_OK;
}
