/* plan.c — compile a graph into a plan: infer shapes for the batch, decide
 * which nodes take part in backward, build library primitives, plan the
 * arena from buffer lifetimes and bind every op call to its memory. */
#include "graph/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/arena_plan.h"
#include "graph/exec_backend.h"
#include "graph/plan_fuse.h"
#include "graph/plan_grad_alias.h"
#include "graph/plan_inplace.h"
#include "graph/second_order.h"

/* Which nodes backward visits: for each loss, its ancestors downstream of a
 * trainable parameter; a node takes part in backward if any loss reaches it. */
static mp_status mark_backward(mp_plan *p) {
    mp_graph *g = p->g;
    bool *req = calloc((size_t)p->n, sizeof *req);
    if (!req) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < p->n; i++) {
        const mp_gnode *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_params; k++)
            if (g->params[nd->first_param + k].spec.trainable) req[i] = true;
        for (int k = 0; k < nd->n_in; k++)
            if (req[nd->in[k]]) req[i] = true;
    }
    for (int j = 0; j < p->n_losses; j++) {
        bool *anc = p->reach[j] = calloc((size_t)p->n, sizeof *anc);
        if (!anc) {
            free(req);
            return mp_error(MP_ERR_NOMEM, "plan: out of memory");
        }
        anc[p->losses[j]] = true;
        for (int i = p->n - 1; i >= 0; i--)
            if (anc[i])
                for (int k = 0; k < g->nodes[i].n_in; k++) anc[g->nodes[i].in[k]] = true;
        for (int i = 0; i < p->n; i++) {
            anc[i] = anc[i] && req[i];
            if (anc[i]) p->nodes[i].in_backward = true;
        }
    }
    free(req);
    return MP_OK;
}

static bool is_loss_node(const mp_plan *p, int i) {
    for (int j = 0; j < p->n_losses; j++)
        if (p->losses[j] == i) return true;
    return false;
}

bool mp_plan_grads_in_arena(const mp_plan *p) {
    return p && p->be->grads_in_arena && p->o.training && p->o.grads_in_arena && !mp_plan_backward_repeats(p);
}

bool mp_plan_backward_repeats(const mp_plan *p) { return p->n_losses > 1 || p->o.repeat_backward; }

/* A conv2d filter with an fp32 master whose one user computes in f16/bf16:
 * its backward-filter writes the gradient in that dtype, which the plan then
 * keeps instead of casting it to f32 (the same values, one launch fewer per
 * layer), unless f32_weight_grads asks for unrounded sums, a second-order
 * pass adds to it or MIXPREC_LOW_CONV_GRADS=0 says not to. F32 otherwise. */
static mp_dtype master_conv_grad_dtype(const mp_plan *p, int k) {
    const mp_gnode *nd = &p->g->nodes[p->g->params[k].node];
    const bool low = nd->desc.kind == MP_OP_CONV2D && mp_dtype_is_low(nd->compute_dtype) &&
                     mp_graph_param_users(p->g, k) == 1; /* shared weights add their gradients in f32 */
    if (!low || p->o.f32_weight_grads || p->o.second_order || mp_env_get()->no_low_conv_grads) return MP_DTYPE_F32;
    return nd->compute_dtype;
}

/* opts.low_grads's rule, applied once when the plan is created: a layer
 * moved to fp32 later (--auto-fallback) keeps the dtype its gradient was
 * allocated in until this plan is gone. */
static mp_dtype grad_dtype_rule(const mp_plan *p, int k) {
    if (!p->o.low_grads || !mp_plan_grads_in_arena(p)) return MP_DTYPE_F32;
    const mp_gnode *nd = &p->g->nodes[p->g->params[k].node];
    const bool weight = k == nd->first_param && (nd->desc.kind == MP_OP_CONV2D || nd->desc.kind == MP_OP_LINEAR);
    if (!weight) return MP_DTYPE_F32;
    const mp_dtype low_only = mp_graph_param_low_only(p->g, k);
    return low_only != MP_DTYPE_F32 ? low_only : master_conv_grad_dtype(p, k);
}

mp_dtype mp_plan_grad_dtype(const mp_plan *p, int k) { return p->grad_dtype ? p->grad_dtype[k] : MP_DTYPE_F32; }

bool mp_plan_f32_weight_grad(const mp_plan *p, int k) { /* (a gradient kept low is a low_only weight's) */
    return p->o.f32_weight_grads && mp_graph_param_low_only(p->g, k) == MP_DTYPE_F32;
}

/* With grads_in_arena, buffers b[0..) for the trainable parameters: written
 * by the first backward that reaches one of their nodes (a parameter shared
 * with mp_graph_share_params has several, the latest node's backward runs
 * first), else zeroed after the last node's backward; read up to the step's
 * end (unscale, all-reduce, optimizer). */
static int param_grad_buffers(const mp_plan *p, mp_arena_buf *b) {
    if (!mp_plan_grads_in_arena(p)) return 0;
    const mp_graph *g = p->g;
    const int n = p->n;
    int m = 0;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable) continue;
        int first = 2 * n - 1;
        for (int i = 0; b && i < n; i++) {
            const mp_gnode *nd = &g->nodes[i];
            if (p->reach[0] && p->reach[0][i] && k >= nd->first_param && k < nd->first_param + nd->n_params &&
                2 * n - 1 - i < first)
                first = 2 * n - 1 - i;
        }
        if (b)
            b[m] = (mp_arena_buf){.size = (size_t)mp_shape_numel(&gp->spec.shape) *
                                          mp_dtype_size(mp_plan_grad_dtype(p, k)),
                                  .first = first, .last = 2 * n + 1, .kind = MP_MEM_PARAM_GRADS};
        m++;
    }
    return m;
}

/* On a device, each node's workspace is its own, alive during its forward
 * (b[2i]) and its backward (b[2i+1]) only, so the large workspace of a
 * layer early in the network is not held while later layers' activations
 * are (as a caching allocator's per-call workspace). On the CPU every op
 * shares one workspace (oneDNN's backward can find forward's layout copy
 * there). */
static int node_workspace_buffers(const mp_plan *p, mp_arena_buf *b) {
    if (!p->be->per_node_buffers) return 0;
    const int n = p->n;
    for (int i = 0; b && i < n; i++) {
        const size_t ws = p->nodes[i].info.workspace_bytes;
        b[2 * i] = (mp_arena_buf){.size = ws, .first = i, .last = i, .kind = MP_MEM_WORKSPACE};
        /* a second-order plan's tangent calls use the backward's (every node's) */
        b[2 * i + 1] = (mp_arena_buf){.size = p->nodes[i].in_backward || p->so ? ws : 0, .first = 2 * n - 1 - i,
                                      .last = 2 * n - 1 - i, .kind = MP_MEM_WORKSPACE};
    }
    return 2 * n;
}

/* On a device, node i's scratch (gradients computed aside to be added,
 * exec.c) is its own too, alive during its backward only: the largest is
 * the gradient of the network's first block output (16 MiB for resnet18 at
 * batch 128 in f16), which a plan-wide scratch held through the step's
 * peak in the last stage's backward. On the CPU one scratch is shared. */
static int node_scratch_buffers(const mp_plan *p, mp_arena_buf *b) {
    if (!p->be->per_node_buffers) return 0;
    const int n = p->n;
    for (int i = 0; b && i < n; i++)
        b[i] = (mp_arena_buf){.size = p->nodes[i].in_backward ? mp_plan_scratch_bytes(p, i) : 0, .first = 2 * n - 1 - i,
                              .last = 2 * n - 1 - i, .kind = MP_MEM_OTHER};
    return n;
}

/* Lifetimes in schedule steps: forward of node i is step i, backward of
 * node i is step 2n-1-i; sources are written before step 0. */
static mp_status plan_memory(mp_plan *p, size_t ws_bytes, size_t shared_scratch, size_t stage_bytes) {
    int n = p->n, end = 2 * n + 1;
    mp_graph *g = p->g;
    const int n_grads = param_grad_buffers(p, NULL), n_ws = node_workspace_buffers(p, NULL);
    const int n_sc = node_scratch_buffers(p, NULL);
    /* b: 3 per node (out, grad, saved), shared workspace, scratch and stage, then the ranges below */
    const int grads_at = 3 * n + 3, ws_at = grads_at + n_grads, sc_at = ws_at + n_ws, n_bufs = sc_at + n_sc;
    mp_arena_buf *b = calloc((size_t)n_bufs, sizeof *b);
    if (!b) return mp_error(MP_ERR_NOMEM, "plan: out of memory planning %d nodes", n);
    for (int i = 0; i < n; i++) {
        mp_pnode *pn = &p->nodes[i];
        const mp_gnode *nd = &g->nodes[i];
        bool bwd = pn->in_backward;
        mp_arena_buf *out = &b[3 * i], *grad = &b[3 * i + 1], *saved = &b[3 * i + 2];
        out->kind = MP_MEM_ACTIVATIONS, grad->kind = MP_MEM_ACT_GRADS, saved->kind = MP_MEM_SAVED;
        out->size = (size_t)mp_shape_numel(&pn->info.out) * mp_dtype_size(nd->storage_dtype);
        bool source = mp_op_is_source(nd->desc.kind);
        bool own_backward_reads_it = bwd && !(mp_op_lookup(nd->desc.kind)->bwd_skips & MP_BWD_SKIPS_OUTPUT);
        /* sources keep their batch for the whole step and the next forward */
        out->first = source ? 0 : i;
        out->last = source ? end : own_backward_reads_it ? 2 * n - 1 - i : i;
        saved->size = pn->info.saved_bytes;
        saved->first = i;
        saved->last = bwd ? 2 * n - 1 - i : i;
        if (bwd) {
            grad->size = (size_t)mp_shape_numel(&pn->info.out) * mp_dtype_size(nd->storage_dtype);
            grad->first = is_loss_node(p, i) ? n : 2 * n - 1 - i;
            grad->last = 2 * n - 1 - i;
        }
    }
    for (int i = 0; i < n; i++) {
        const mp_gnode *nd = &g->nodes[i];
        for (int k = 0; k < nd->n_in; k++) {
            int src = nd->in[k];
            mp_arena_buf *out = &b[3 * src], *grad = &b[3 * src + 1];
            /* the consumer's forward reads it, and its backward unless it skips its inputs (every
             * backward pass's, when several follow one forward) */
            bool read_back = p->nodes[i].in_backward && !(mp_op_lookup(nd->desc.kind)->bwd_skips & MP_BWD_SKIPS_INPUTS);
            int use = read_back ? (mp_plan_backward_repeats(p) ? end : 2 * n - 1 - i) : i;
            if (use > out->last) out->last = use;
            if (p->nodes[i].in_backward && p->nodes[src].in_backward && 2 * n - 1 - i < grad->first)
                grad->first = 2 * n - 1 - i;
        }
        if (nd->is_output) b[3 * i].last = end;
        /* several losses or repeat_backward = several backward passes per
         * forward: every pass needs the forward outputs and saved tensors of
         * its nodes */
        if (mp_plan_backward_repeats(p) && p->nodes[i].in_backward) b[3 * i].last = b[3 * i + 2].last = end;
    }
    b[3 * n] = (mp_arena_buf){.size = n_ws ? 0 : ws_bytes, .first = 0, .last = end, .kind = MP_MEM_WORKSPACE};
    b[3 * n + 1] = (mp_arena_buf){.size = n_sc ? 0 : shared_scratch, .first = 0, .last = end, .kind = MP_MEM_OTHER};
    b[3 * n + 2] = (mp_arena_buf){.size = stage_bytes, .first = 0, .last = end, .kind = MP_MEM_OTHER};
    param_grad_buffers(p, b + grads_at);
    node_workspace_buffers(p, b + ws_at);
    node_scratch_buffers(p, b + sc_at);
    mp_plan_fuse_buffers(p, b);
    mp_plan_inplace_buffers(p, b);
    mp_plan_grad_alias_buffers(p, b);
    /* second order: the tangent pass reads every activation, saved tensor
     * and gradient of the step after its backward, so none shares memory
     * (the simplest honest plan; its cost is mp_plan_print_memory's) */
    for (int k = 0; p->so && k < n_bufs; k++) b[k].first = 0, b[k].last = end;
    size_t total = 0;
    mp_status s = mp_arena_plan(b, n_bufs, &total);
    if (s != MP_OK) {
        free(b);
        return s;
    }
    p->arena_bytes = total;
    p->arena_peak = mp_arena_live_peak(b, n_bufs);
    s = p->be->arena_alloc(p, total ? total : 64, &p->arena);
    if (s != MP_OK) {
        free(b);
        return s;
    }
    for (int i = 0; i < n; i++) {
        const int producer = mp_plan_fused_producer(p, i); /* a fused ReLU's output is its batch norm's */
        p->nodes[i].out_last = b[3 * (producer >= 0 ? producer : i)].last;
        p->nodes[i].out_off = b[3 * i].offset;
        p->nodes[i].grad_off = b[3 * i + 1].offset;
        p->nodes[i].saved_off = b[3 * i + 2].offset;
        p->nodes[i].scratch_off = b[n_sc ? sc_at + i : 3 * n + 1].offset;
        if (!n_ws) continue; /* the CPU's calls keep the shared workspace (bind_calls) */
        p->nodes[i].ws_fwd_off = b[ws_at + 2 * i].offset;
        p->nodes[i].ws_bwd_off = b[ws_at + 2 * i + 1].offset;
    }
    mp_plan_fuse_offsets(p);
    mp_plan_inplace_offsets(p);
    mp_plan_grad_alias_offsets(p);
    for (int k = 0, m = grads_at; n_grads && k < g->n_params; k++)
        if (g->params[k].spec.trainable) p->be->grad_place(p, k, p->arena + b[m++].offset);
    p->workspace = p->arena + b[3 * n].offset;
    p->stage = p->arena + b[3 * n + 2].offset;
    free(b);
    return MP_OK;
}

/* Scratch node i's backward may need (exec.c): the gradients it computes
 * aside before adding them where a value is already there — inputs whose
 * producer has several consumers (in their storage dtype), and parameters
 * (f32: tied weights, several losses, micro-batches; with grads_in_arena
 * only a tied weight's, every other one is written afresh each backward). */
size_t mp_plan_scratch_bytes(const mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    size_t sc = 0;
    for (int k = 0; k < nd->n_in; k++) {
        const mp_gnode *src = &p->g->nodes[nd->in[k]];
        if (src->n_consumers > 1)
            sc += MP_ALIGN64((size_t)mp_shape_numel(&pn->info.in[k]) * mp_dtype_size(src->storage_dtype));
    }
    const bool fresh = mp_plan_grads_in_arena(p);
    for (int k = 0; k < pn->info.n_params; k++)
        if (!fresh || mp_graph_param_users(p->g, nd->first_param + k) > 1)
            sc += MP_ALIGN64((size_t)mp_shape_numel(&pn->info.params[k].shape) * sizeof(float));
    return sc;
}

/* A tensor the plan may hold: 2^48 bytes, past any memory, and far enough
 * from SIZE_MAX that the arena's sums of buffers cannot wrap. */
#define PLAN_TENSOR_BYTES_MAX ((size_t)1 << 48)

/* Node i's output at the plan's batch must fit PLAN_TENSOR_BYTES_MAX (its
 * element count is a product of ints, checked as it is formed). */
static mp_status check_output_size(const mp_plan *p, int i) {
    const mp_shape *s = &p->nodes[i].info.out;
    const mp_gnode *nd = &p->g->nodes[i];
    size_t bytes = mp_dtype_size(nd->storage_dtype);
    for (int k = 0; k < s->ndim; k++) {
        if (s->dims[k] < 0 || (s->dims[k] > 0 && bytes > PLAN_TENSOR_BYTES_MAX / (size_t)s->dims[k])) {
            char sh[96];
            return mp_error(MP_ERR_SHAPE, "plan: %s '%s' output %s at batch %d is more than 2^48 bytes",
                            mp_op_lookup(nd->desc.kind)->name, nd->name, mp_shape_str(s, sh, sizeof sh),
                            p->o.batch);
        }
        bytes *= (size_t)s->dims[k];
    }
    return MP_OK;
}

static void bind_calls(mp_plan *p) {
    mp_graph *g = p->g;
    for (int i = 0; i < p->n; i++) {
        mp_pnode *pn = &p->nodes[i];
        const mp_gnode *nd = &g->nodes[i];
        mp_op_call *c = &pn->call;
        c->desc = &nd->desc;
        c->info = &pn->info;
        c->training = p->o.training;
        c->relu_after = pn->relu_fused;
        c->n_in = nd->n_in;
        c->out = (mp_tensor){nd->storage_dtype, pn->info.out, p->arena + pn->out_off};
        for (int k = 0; k < nd->n_in; k++) {
            const mp_pnode *src = &p->nodes[nd->in[k]];
            c->in[k] = (mp_tensor){g->nodes[nd->in[k]].storage_dtype, src->info.out, p->arena + src->out_off};
            c->d_in[k] = (mp_tensor){g->nodes[nd->in[k]].storage_dtype, src->info.out, NULL};
        }
        for (int k = 0; k < nd->n_params; k++) {
            mp_gparam *gp = &g->params[nd->first_param + k];
            c->param[k] = (mp_tensor){MP_DTYPE_F32, gp->spec.shape, gp->data};
            c->d_param[k] = (mp_tensor){mp_plan_grad_dtype(p, nd->first_param + k), gp->spec.shape, NULL};
        }
        p->be->bind_params(p, i);
        c->d_out = (mp_tensor){nd->storage_dtype, pn->info.out, pn->in_backward ? p->arena + pn->grad_off : NULL};
        const int m = mp_plan_fused_resid(p, i); /* a residual add fused in (plan_fuse.h) */
        if (m >= 0) {
            const int s = g->nodes[pn->add_fused].in[m];
            c->resid = (mp_tensor){g->nodes[s].storage_dtype, p->nodes[s].info.out, p->arena + p->nodes[s].out_off};
            /* data set before each backward (mp_plan_fuse_before_backward) */
            c->d_resid = (mp_tensor){c->resid.dtype, c->resid.shape, NULL};
        }
        c->saved = p->arena + pn->saved_off;
        c->workspace = p->workspace;
    }
}

mp_status mp_plan_create(mp_graph *g, mp_plan_opts o, mp_plan **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "plan: no output pointer");
    *out = NULL;
    MP_TRY(mp_graph_check_built(g, "plan"));
    if (o.batch <= 0) return mp_error(MP_ERR_INVALID_ARG, "plan: batch size %d must be positive", o.batch);
    if (o.native_bf16 != MP_NATIVE_AUTO && o.native_bf16 != MP_NATIVE_OFF && o.native_bf16 != MP_NATIVE_ON)
        return mp_error(MP_ERR_INVALID_ARG, "plan: native_bf16 %d is not MP_NATIVE_AUTO, _OFF or _ON",
                        (int)o.native_bf16);
    if (o.n_losses < 0 || o.n_losses > MP_MAX_LOSSES)
        return mp_error(MP_ERR_INVALID_ARG, "plan: %d losses (at most %d)", o.n_losses, MP_MAX_LOSSES);
    const mp_node *losses = o.n_losses ? o.losses : &o.loss;
    int n_losses = o.n_losses ? o.n_losses : 1;
    for (int j = 0; o.training && j < n_losses; j++)
        if (losses[j] < 0 || losses[j] >= g->n_nodes || g->nodes[losses[j]].sample_shape.ndim != 1 ||
            (g->nodes[losses[j]].desc.kind != MP_OP_SOFTMAX_CE && g->nodes[losses[j]].desc.kind != MP_OP_BCE_LOGITS))
            return mp_error(MP_ERR_INVALID_ARG, "plan: training needs loss nodes (node %d is not a loss)", losses[j]);
    mp_plan *p = calloc(1, sizeof *p);
    if (!p) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    p->g = g;
    g->live_plans++; /* every failure below goes through mp_plan_destroy, which uncounts it */
    p->o = o;
    p->n_losses = n_losses;
    for (int j = 0; j < n_losses; j++) p->losses[j] = losses[j];
    p->o.loss = losses[0];
    p->n = g->n_nodes;
    p->nodes = calloc((size_t)(p->n ? p->n : 1), sizeof *p->nodes);
    p->grad_written = calloc((size_t)(p->n ? p->n : 1), sizeof *p->grad_written);
    if (!p->nodes || !p->grad_written) {
        mp_plan_destroy(p);
        return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    }
    mp_status bs = mp_exec_backend_for(o.device, &p->be);
    if (bs == MP_OK) bs = p->be->open(p);
    if (bs == MP_OK && !(p->grad_dtype = calloc((size_t)g->n_params + 1, sizeof *p->grad_dtype)))
        bs = mp_error(MP_ERR_NOMEM, "plan: out of memory");
    for (int k = 0; bs == MP_OK && k < g->n_params; k++) p->grad_dtype[k] = grad_dtype_rule(p, k);
    if (bs != MP_OK) {
        mp_plan_destroy(p);
        return bs;
    }
    if (o.second_order) p->o.native_bf16 = MP_NATIVE_OFF; /* tangents read f32-staged tensors */
    if (o.training || o.second_order || o.input_grad) {
        mp_status ms = o.training ? mark_backward(p) : MP_OK;
        if (ms == MP_OK) ms = mp_so_mark(p);
        if (ms != MP_OK) {
            mp_plan_destroy(p);
            return ms;
        }
    }
    mp_plan_fuse_bn_relu(p);
    size_t ws = 0, scratch = 0, stage = 0;
    for (int i = 0; i < p->n; i++) {
        mp_gnode *nd = &g->nodes[i];
        mp_pnode *pn = &p->nodes[i];
        nd->desc.name = nd->name;
        pn->info.n_in = nd->n_in;
        for (int k = 0; k < nd->n_in; k++) {
            pn->info.in[k] = p->nodes[nd->in[k]].info.out;
            pn->info.in_dtype[k] = g->nodes[nd->in[k]].storage_dtype;
        }
        const mp_op_vtable *vt = mp_op_lookup(nd->desc.kind);
        mp_status s = vt->infer(&nd->desc, &pn->info);
        if (s == MP_OK && mp_op_is_source(nd->desc.kind)) pn->info.out.dims[0] = o.batch;
        if (s == MP_OK) s = check_output_size(p, i);
        if (s == MP_OK) s = p->be->node_prepare(p, i, &ws, &scratch, &stage);
        if (p->so && MP_ALIGN64(pn->info.workspace_bytes) + pn->info.tangent_workspace_bytes > ws) /* op.h */
            ws = MP_ALIGN64(pn->info.workspace_bytes) + pn->info.tangent_workspace_bytes;
        if (s != MP_OK) {
            mp_plan_destroy(p);
            return s;
        }
    }
    mp_status s = p->be->choose_layout ? p->be->choose_layout(p, &ws, &stage) : MP_OK;
    if (s == MP_OK) s = plan_memory(p, ws, scratch, stage);
    if (s != MP_OK) {
        mp_plan_destroy(p);
        return s;
    }
    bind_calls(p);
    s = mp_so_create(p);
    if (s != MP_OK) {
        mp_plan_destroy(p);
        return s;
    }
    *out = p;
    return MP_OK;
}

void mp_plan_destroy(mp_plan *p) {
    if (!p) return;
    mp_graph *g = p->g;
    g->live_plans--;
    mp_so_free(p); /* its buffers live on the plan's device: before the device closes */
    if (p->be) { /* a device's node states, arena and parameters first */
        p->be->arena_free(p);
        p->be->close(p);
    }
    p->arena = NULL;
    for (int i = 0; i < p->n && p->nodes; i++) {
        const mp_op_vtable *vt = mp_op_lookup(p->g->nodes[i].desc.kind);
        if (vt->release && p->nodes[i].call.state) vt->release(p->nodes[i].call.state);
        for (int k = 0; k < MP_MAX_PARAMS; k++) free(p->nodes[i].low_param[k]);
    }
    free(p->nodes);
    free(p->grad_written);
    free(p->grad_dtype);
    for (int j = 0; j < MP_MAX_LOSSES; j++) free(p->reach[j]);
    free(p);
    mp_graph_user_gone(g);
}

size_t mp_plan_arena_bytes(const mp_plan *p) { return p ? p->arena_bytes : 0; }

void mp_plan_precision_counts(const mp_plan *p, int *native, int *emulated) {
    int nat = 0, emu = 0;
    for (int i = 0; p && i < p->n; i++) {
        if (p->nodes[i].native) nat++;
        else if (p->nodes[i].staged) emu++;
    }
    if (native) *native = nat;
    if (emulated) *emulated = emu;
}
