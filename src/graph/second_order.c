/* second_order.c — setting up a second-order plan (second_order.h): its
 * options checked, the input-gradient backward's nodes, the tangent buffers;
 * that backward itself and the public calls that set directions and read
 * results (mixprec/penalty.h). The tangent traversals are tangent_exec.c. */
#include "graph/second_order.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler.h"
#include "graph/exec_backend.h"
#include "graph/plan_fuse.h"

static const char *node_name(const mp_plan *p, mp_node n) {
    return n >= 0 && n < p->n ? p->g->nodes[n].name : "?";
}

/* The nodes backward from input_grad_of visits: its ancestors that are
 * input_grad_wrt or downstream of it (the penalty's gradient path; nothing
 * upstream of the input, such as a generator, is visited). */
static mp_status input_grad_reach(mp_plan *p, bool *reach) {
    const mp_graph *g = p->g;
    const mp_node of = p->o.input_grad_of, wrt = p->o.input_grad_wrt;
    if (of < 0 || of >= p->n || wrt < 0 || wrt >= p->n)
        return mp_error(MP_ERR_INVALID_ARG, "plan: input_grad nodes %d and %d: not both nodes of the graph (it has %d)",
                        of, wrt, p->n);
    bool *down = calloc((size_t)p->n, sizeof *down);
    if (!down) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    down[wrt] = true;
    for (int i = wrt + 1; i < p->n; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) down[i] |= down[g->nodes[i].in[k]];
    reach[of] = true;
    for (int i = of; i >= 0; i--)
        if (reach[i])
            for (int k = 0; k < g->nodes[i].n_in; k++) reach[g->nodes[i].in[k]] = true;
    for (int i = 0; i < p->n; i++) reach[i] = reach[i] && down[i];
    free(down);
    if (!reach[wrt])
        return mp_error(MP_ERR_INVALID_ARG, "plan: input_grad: node '%s' does not feed node '%s', so '%s' has no "
                        "gradient with respect to it", node_name(p, wrt), node_name(p, of), node_name(p, of));
    if (g->nodes[wrt].storage_dtype == MP_DTYPE_I32)
        return mp_error(MP_ERR_INVALID_ARG, "plan: input_grad: node '%s' holds integer labels, which have no gradient",
                        node_name(p, wrt));
    return MP_OK;
}

mp_status mp_so_mark(mp_plan *p) {
    const mp_plan_opts *o = &p->o;
    if (o->input_grad && !o->second_order)
        return mp_error(MP_ERR_INVALID_ARG, "plan: input_grad needs a second_order plan");
    if (!o->second_order) return MP_OK;
    if (!o->training) return mp_error(MP_ERR_INVALID_ARG, "plan: a second_order plan must be a training plan");
    p->so = calloc(1, sizeof *p->so);
    if (!p->so) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    p->so->last_root = -1;
    if (!o->input_grad) return MP_OK;
    p->so->root_reach = calloc((size_t)p->n, sizeof *p->so->root_reach);
    if (!p->so->root_reach) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    MP_TRY(input_grad_reach(p, p->so->root_reach));
    for (int i = 0; i < p->n; i++)
        if (p->so->root_reach[i]) p->nodes[i].in_backward = true;
    return MP_OK;
}

/* f32 bytes of a shape, 64-aligned. */
static size_t f32b(const mp_shape *s) { return MP_ALIGN64((size_t)mp_shape_numel(s) * sizeof(float)); }

/* Scratch one tangent call may need: room for the tangents it computes
 * aside to add them (inputs with several consumers, shared parameters) and,
 * where the backend stages primals (the host), f32 copies of its inputs,
 * output, output gradient and parameters. */
static size_t call_stage_bytes(const mp_plan *p, int i) {
    const mp_pnode *pn = &p->nodes[i];
    const size_t copies = p->be->tangent_stages_primals ? 2 : 1;
    size_t b = (copies - 1) * 2 * f32b(&pn->info.out);
    for (int k = 0; k < pn->info.n_in; k++) b += copies * f32b(&pn->info.in[k]);
    for (int k = 0; k < pn->info.n_params; k++) b += copies * f32b(&pn->info.params[k].shape);
    return b;
}

/* The next buffer of `bytes` in the slab (base NULL: sizing only). */
static float *place(mp_plan_so *so, char *base, size_t bytes) {
    const size_t at = so->bytes;
    so->bytes += MP_ALIGN64(bytes ? bytes : 1);
    return base ? (float *)(base + at) : NULL;
}

/* Every tangent buffer in the slab at base, run once on NULL to size it. */
static void place_all(mp_plan *p, char *base) {
    mp_plan_so *so = p->so;
    const mp_graph *g = p->g;
    so->bytes = 0;
    for (int i = 0; i < p->n; i++) {
        if (g->nodes[i].storage_dtype == MP_DTYPE_I32) continue; /* labels: no tangent */
        const size_t bytes = (size_t)mp_shape_numel(&p->nodes[i].info.out) * sizeof(float);
        so->t_out[i] = place(so, base, bytes);
        if (p->nodes[i].in_backward) so->t_dout[i] = place(so, base, bytes);
    }
    for (int k = 0; k < g->n_params; k++) {
        if (!g->params[k].spec.trainable) continue;
        const size_t bytes = (size_t)mp_shape_numel(&g->params[k].spec.shape) * sizeof(float);
        so->t_param[k] = place(so, base, bytes);
        so->t_dparam[k] = place(so, base, bytes);
    }
    so->stage = (char *)place(so, base, so->stage_bytes);
}

mp_status mp_so_create(mp_plan *p) {
    mp_plan_so *so = p->so;
    if (!so) return MP_OK;
    const int n = p->n, np = p->g->n_params;
    so->t_out = calloc((size_t)n, sizeof *so->t_out);
    so->t_dout = calloc((size_t)n, sizeof *so->t_dout);
    so->t_zero = calloc((size_t)n, sizeof *so->t_zero);
    so->t_dwritten = calloc((size_t)n, sizeof *so->t_dwritten);
    so->t_param = calloc((size_t)np + 1, sizeof *so->t_param);
    so->t_param_set = calloc((size_t)np + 1, sizeof *so->t_param_set);
    so->t_dparam = calloc((size_t)np + 1, sizeof *so->t_dparam);
    so->t_dparam_written = calloc((size_t)np + 1, sizeof *so->t_dparam_written);
    if (!(so->t_out && so->t_dout && so->t_zero && so->t_dwritten && so->t_param && so->t_param_set && so->t_dparam &&
          so->t_dparam_written))
        return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < n; i++) {
        const size_t sb = call_stage_bytes(p, i);
        if (sb > so->stage_bytes) so->stage_bytes = sb;
    }
    place_all(p, NULL);
    const mp_status s = p->be->so_alloc(p, so->bytes, &so->slab);
    if (s != MP_OK) {
        char why[512]; /* mp_last_error() is the buffer mp_error writes: copy it first */
        snprintf(why, sizeof why, "%s", mp_last_error());
        return mp_error(s, "plan: the tangent buffers of a second-order plan (batch %d): %s%s", p->o.batch, why,
                        s == MP_ERR_NOMEM ? "; try a smaller batch" : "");
    }
    place_all(p, so->slab);
    return MP_OK;
}

void mp_so_free(mp_plan *p) {
    mp_plan_so *so = p->so;
    if (!so) return;
    if (so->slab && p->be) p->be->so_free(p, so->slab);
    free(so->t_out), free(so->t_dout), free(so->t_zero), free(so->t_dwritten);
    free(so->t_param), free(so->t_param_set), free(so->t_dparam), free(so->t_dparam_written);
    free(so->root_reach);
    free(so);
    p->so = NULL;
}

void mp_so_note_forward(mp_plan *p) {
    if (!p->so) return;
    p->so->forwarded = true;
    p->so->tangent_forwarded = false;
    p->so->tangent_backwarded = false;
    p->so->last_root = -1;
}

void mp_so_note_backward(mp_plan *p, int root) {
    if (!p->so) return;
    p->so->last_root = root;
    p->so->last_input_grad = false;
}

/* A parameter's f32 tangent as a flat tensor: copied as it lies, whatever
 * the shape (parameters keep the graph's layout on every device). */
static mp_tensor flat(float *data, size_t n) { return (mp_tensor){MP_DTYPE_F32, mp_shape1((int)n), data}; }

size_t mp_plan_tangent_bytes(const mp_plan *p) { return p && p->so ? p->so->bytes : 0; }

/* p is a second-order plan (and, with input, one with opts.input_grad). */
static mp_status need_so(const mp_plan *p, bool input, const char *what) {
    if (!p) return mp_error(MP_ERR_INVALID_ARG, "%s: null plan", what);
    if (!p->so) return mp_error(MP_ERR_INVALID_ARG, "%s: the plan was not compiled with opts.second_order", what);
    if (input && !p->o.input_grad)
        return mp_error(MP_ERR_INVALID_ARG, "%s: the plan was not compiled with opts.input_grad", what);
    return MP_OK;
}

mp_status mp_so_input_grad_backward(mp_plan *p) {
    mp_graph *g = p->g;
    const int root = p->o.input_grad_of, wrt = p->o.input_grad_wrt;
    const bool *reach = p->so->root_reach;
    memset(p->grad_written, 0, (size_t)p->n * sizeof *p->grad_written);
    const bool fresh[MP_MAX_PARAMS] = {true, true, true, true};
    for (int i = root; i > wrt; i--) {
        if (!reach[i]) continue;
        const mp_gnode *nd = &g->nodes[i];
        mp_op_call *c = &p->nodes[i].call;
        bool taken[MP_MAX_INPUTS] = {0};
        for (int k = 0; k < nd->n_in; k++) {
            const int src = nd->in[k];
            c->d_in[k].data = reach[src] ? p->arena + p->nodes[src].grad_off : NULL;
            taken[k] = p->grad_written[src];
            for (int j = 0; j < k; j++)
                if (nd->in[j] == src) taken[k] = true;
        }
        for (int k = 0; k < nd->n_params; k++) c->d_param[k].data = NULL; /* the penalty's path only */
        /* second-order plans fuse nothing (plan_fuse.c), so every node runs; the same gate as run_backward's */
        if (mp_plan_fuse_before_backward(p, i, taken)) MP_TRY(p->be->backward(p, i, taken, fresh));
        for (int k = 0; k < nd->n_in; k++)
            if (c->d_in[k].data) p->grad_written[nd->in[k]] = true;
    }
    p->so->last_root = root;
    p->so->last_input_grad = true;
    return MP_OK;
}

mp_status mp_plan_backward_input_grad(mp_plan *p, float seed) {
    MP_TRY(need_so(p, true, "backward_input_grad"));
    if (!p->so->forwarded)
        return mp_error(MP_ERR_INVALID_ARG, "backward_input_grad: called before any forward (run mp_plan_forward first)");
    if (!isfinite(seed)) return mp_error(MP_ERR_INVALID_ARG, "backward_input_grad: seed %g is not finite", (double)seed);
    MP_TRY(mp_plan_check_batch_unchanged(p, "backward_input_grad"));
    MP_TRY(p->be->tensor_fill(p, &p->nodes[p->o.input_grad_of].call.d_out, seed));
    return mp_so_input_grad_backward(p);
}

mp_status mp_plan_read_input_grad(const mp_plan *p, float *dst, size_t n) {
    MP_TRY(need_so(p, true, "read_input_grad"));
    if (!dst) return mp_error(MP_ERR_INVALID_ARG, "read_input_grad: null output");
    if (!p->so->last_input_grad || p->so->last_root != p->o.input_grad_of)
        return mp_error(MP_ERR_INVALID_ARG, "read_input_grad: no mp_plan_backward_input_grad since the last forward "
                        "and backward");
    const mp_pnode *pn = &p->nodes[p->o.input_grad_wrt];
    const size_t have = (size_t)mp_shape_numel(&pn->info.out);
    if (n != have)
        return mp_error(MP_ERR_SHAPE, "read_input_grad '%s': asked for %zu values, it has %zu",
                        node_name(p, p->o.input_grad_wrt), n, have);
    const mp_tensor grad = {p->g->nodes[p->o.input_grad_wrt].storage_dtype, pn->info.out, p->arena + pn->grad_off};
    return p->be->tensor_to_host(p, &grad, dst, n);
}

/* A direction (NULL: zero) is finite: a NaN/inf would reach every tangent. */
static mp_status finite_direction(const float *v, size_t n, const char *what, const char *name) {
    const int64_t bad = v ? mp_first_nonfinite(v, (int64_t)n) : -1;
    if (bad < 0) return MP_OK;
    return mp_error(MP_ERR_NONFINITE, "%s '%s': the direction holds %g at element %lld", what, name, (double)v[bad],
                    (long long)bad);
}

mp_status mp_plan_set_tangent_input(mp_plan *p, const float *v, size_t n) {
    MP_TRY(need_so(p, true, "set_tangent_input"));
    const mp_node wrt = p->o.input_grad_wrt;
    const size_t have = (size_t)mp_shape_numel(&p->nodes[wrt].info.out);
    if (v && n != have)
        return mp_error(MP_ERR_SHAPE, "set_tangent_input '%s': got %zu values, it has %zu", node_name(p, wrt), n, have);
    MP_TRY(finite_direction(v, n, "set_tangent_input", node_name(p, wrt)));
    if (v) {
        const mp_tensor t = {MP_DTYPE_F32, p->nodes[wrt].info.out, p->so->t_out[wrt]};
        MP_TRY(p->be->tensor_from_host(p, &t, v, n));
    }
    p->so->input_dir_set = v != NULL;
    p->so->tangent_forwarded = false;
    return MP_OK;
}

mp_status mp_plan_set_tangent_param(mp_plan *p, const char *name, const float *v, size_t n) {
    MP_TRY(need_so(p, false, "set_tangent_param"));
    const int k = mp_graph_param_find(p->g, name);
    if (k < 0 || !p->g->params[k].spec.trainable)
        return mp_error(MP_ERR_INVALID_ARG, "set_tangent_param: '%s' is not a trainable parameter of the graph",
                        name ? name : "");
    const size_t have = (size_t)mp_shape_numel(&p->g->params[k].spec.shape);
    if (v && n != have)
        return mp_error(MP_ERR_SHAPE, "set_tangent_param '%s': got %zu values, it has %zu", name, n, have);
    MP_TRY(finite_direction(v, n, "set_tangent_param", name));
    const mp_tensor t = flat(p->so->t_param[k], n);
    if (v) MP_TRY(p->be->tensor_from_host(p, &t, v, n));
    p->so->t_param_set[k] = v != NULL;
    p->so->tangent_forwarded = false;
    return MP_OK;
}

void mp_plan_clear_tangents(mp_plan *p) {
    if (!p || !p->so) return;
    memset(p->so->t_param_set, 0, (size_t)p->g->n_params * sizeof *p->so->t_param_set);
    p->so->input_dir_set = false;
    p->so->tangent_forwarded = false;
}

mp_status mp_plan_read_tangent_grad(const mp_plan *p, const char *name, float *dst, size_t n) {
    MP_TRY(need_so(p, false, "read_tangent_grad"));
    if (!dst) return mp_error(MP_ERR_INVALID_ARG, "read_tangent_grad: null output");
    const int k = mp_graph_param_find(p->g, name);
    if (k < 0 || !p->g->params[k].spec.trainable)
        return mp_error(MP_ERR_INVALID_ARG, "read_tangent_grad: '%s' is not a trainable parameter of the graph",
                        name ? name : "");
    const size_t have = (size_t)mp_shape_numel(&p->g->params[k].spec.shape);
    if (n != have) return mp_error(MP_ERR_SHAPE, "read_tangent_grad '%s': asked for %zu values, it has %zu", name, n, have);
    if (!p->so->tangent_backwarded)
        return mp_error(MP_ERR_INVALID_ARG, "read_tangent_grad '%s': no mp_plan_backward_tangent since the last "
                        "forward", name);
    const mp_tensor t = flat(p->so->t_dparam[k], n);
    if (p->so->t_dparam_written[k]) return p->be->tensor_to_host(p, &t, dst, n);
    memset(dst, 0, n * sizeof *dst);
    return MP_OK;
}
