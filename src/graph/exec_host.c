/* exec_host.c — the host's execution backend (exec_backend.h): nodes run on
 * the CPU through oneDNN primitives where built with it (else the plain-C
 * reference kernels); a node storing or computing in f16/bf16 runs natively
 * where a bf16 kernel exists (oneDNN's bf16 primitives on CPUs with bf16
 * instructions, our bf16-storage kernels) and otherwise staged: the f32
 * kernels on rounded copies, as a tensor core computes (exec_stage.c). The
 * arena and the parameters are host memory; one workspace, one scratch and
 * one staging buffer are shared by every node (one op runs at a time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler.h"
#include "core/dtype_convert.h"
#include "core/dtype_traits.h"
#include "core/host_mem.h"
#include "graph/exec_backend.h"
#include "graph/exec_stage.h"
#include "graph/plan_fuse.h"
#include "graph/plan_layout.h"
#include "graph/second_order.h"
#include "ops/batchnorm2d_cpu.h"
#include "ops/batchnorm2d_onednn.h"
#include "ops/bf16_conv_math.h"
#include "ops/cpu_fast.h"
#include "ops/pool2d_cpu.h"

static bool reference_notice_done;

static void notice_reference_kernels(void) {
    if (reference_notice_done) return;
    reference_notice_done = true;
    fprintf(stderr, "mixprec: built without oneDNN: CPU ops run on the reference kernels (slower)\n");
}

static mp_status host_open(mp_plan *p) {
    p->onednn = !p->o.reference && mp_onednn_available();
    if (!p->o.reference && !mp_onednn_available()) notice_reference_kernels();
    return MP_OK;
}

static void host_close(mp_plan *p) { (void)p; }

/* How a node storing bf16 can run without the staged f32 emulation
 * (opts.native_bf16 OFF, or MIXPREC_NATIVE_BF16=0 under AUTO, keeps the
 * emulation everywhere, for comparisons). */
typedef enum {
    NATIVE_NONE,
    NATIVE_PRIMITIVE, /* convolutions: oneDNN's bf16 primitives, where the CPU multiplies bf16 in hardware */
    NATIVE_KERNEL     /* our own kernels reading and writing bf16 (instantiate_act.inc) */
} native_kind;

static native_kind native_bf16_kind(const mp_plan *p, int i) {
    const mp_graph *g = p->g;
    const mp_gnode *nd = &g->nodes[i];
    if (p->o.native_bf16 == MP_NATIVE_OFF) return NATIVE_NONE;
    if (p->o.native_bf16 == MP_NATIVE_AUTO && mp_env_get()->native_bf16 == 0) return NATIVE_NONE;
    if (nd->storage_dtype != MP_DTYPE_BF16) return NATIVE_NONE;
    mp_op_kind k = nd->desc.kind;
    if (k == MP_OP_CONV2D || k == MP_OP_CONV_TRANSPOSE2D) {
        if (nd->compute_dtype != MP_DTYPE_BF16 || !mp_bf16_conv_primitives_pay()) return NATIVE_NONE;
        /* inputs in bf16, or the network's f32 input (cast once per step) */
        for (int j = 0; j < nd->n_in; j++) {
            const mp_gnode *src = &g->nodes[nd->in[j]];
            if (src->storage_dtype != MP_DTYPE_BF16 && src->desc.kind != MP_OP_INPUT) return NATIVE_NONE;
        }
        return NATIVE_PRIMITIVE;
    }
    for (int j = 0; j < nd->n_in; j++)
        if (g->nodes[nd->in[j]].storage_dtype != MP_DTYPE_BF16) return NATIVE_NONE;
    switch (k) {
    case MP_OP_BATCHNORM2D: /* f32 statistics and parameters over bf16 activations */
        return nd->compute_dtype == MP_DTYPE_F32 ? NATIVE_KERNEL : NATIVE_NONE;
    case MP_OP_MAXPOOL2D:
    case MP_OP_AVGPOOL2D: /* overlapping windows would add gradients in bf16 */
        return nd->compute_dtype == MP_DTYPE_BF16 && nd->desc.attr.pool.stride >= nd->desc.attr.pool.kernel
                   ? NATIVE_KERNEL
                   : NATIVE_NONE;
    case MP_OP_RELU:
    case MP_OP_LEAKY_RELU:
    case MP_OP_TANH:
    case MP_OP_SIGMOID:
    case MP_OP_GLOBAL_AVGPOOL:
    case MP_OP_ADD:
    case MP_OP_MUL:
        return nd->compute_dtype == MP_DTYPE_BF16 ? NATIVE_KERNEL : NATIVE_NONE;
    default:
        return NATIVE_NONE;
    }
}

/* Decide whether node i runs staged and give it low-precision weight copies. */
static mp_status stage_node(mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    mp_pnode *pn = &p->nodes[i];
    bool low_compute = nd->compute_dtype == MP_DTYPE_F16 || nd->compute_dtype == MP_DTYPE_BF16;
    if (mp_op_is_source(nd->desc.kind)) return MP_OK; /* sources are filled by set_input, in their storage dtype */
    pn->staged = low_compute || (nd->storage_dtype != MP_DTYPE_F32 && nd->storage_dtype != MP_DTYPE_I32);
    for (int k = 0; k < nd->n_in; k++) {
        mp_dtype d = p->g->nodes[nd->in[k]].storage_dtype;
        if (d != MP_DTYPE_F32 && d != MP_DTYPE_I32) pn->staged = true;
    }
    if (!low_compute) return MP_OK;
    for (int k = 0; k < nd->n_params; k++) {
        const mp_gparam *gp = &p->g->params[nd->first_param + k];
        if (!gp->spec.trainable) continue; /* buffers (BN running stats) stay fp32 */
        size_t bytes = MP_ALIGN64((size_t)mp_shape_numel(&gp->spec.shape) * mp_dtype_size(nd->compute_dtype));
        pn->low_param[k] = aligned_alloc(64, bytes);
        if (!pn->low_param[k])
            return mp_error(MP_ERR_NOMEM, "plan: out of memory for the %s copy of %s", mp_dtype_name(nd->compute_dtype),
                            gp->name);
    }
    return MP_OK;
}

/* Node i's op state for its shapes, dtypes and layouts (info.nhwc): oneDNN's
 * bf16 primitives where the node runs natively, else f32 ones; sets
 * pn->native and the call's impl. */
static mp_status host_op_prepare(mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    mp_pnode *pn = &p->nodes[i];
    const mp_op_vtable *vt = mp_op_lookup(nd->desc.kind);
    const mp_impl impl = p->onednn ? MP_IMPL_AUTO : MP_IMPL_REF;
    mp_status s = MP_OK;
    const native_kind nk = native_bf16_kind(p, i);
    pn->native = false;
    if (nk == NATIVE_PRIMITIVE && vt->prepare && p->onednn) {
        /* bf16 primitives where the CPU has bf16 kernels; else staged f32 */
        if (vt->prepare(&nd->desc, &pn->info, MP_DTYPE_BF16, impl, p->o.training, &pn->call.state) == MP_OK &&
            pn->call.state)
            pn->native = true;
        mp_clear_error();
    } else if (nk == NATIVE_KERNEL) {
        pn->native = true;
        if (vt->prepare) s = vt->prepare(&nd->desc, &pn->info, MP_DTYPE_BF16, MP_IMPL_REF, p->o.training, &pn->call.state);
    }
    if (s == MP_OK && vt->prepare && !pn->native)
        s = vt->prepare(&nd->desc, &pn->info, MP_DTYPE_F32, impl, p->o.training, &pn->call.state);
    pn->call.impl = impl;
    return s;
}

static mp_status host_node_prepare(mp_plan *p, int i, size_t *ws, size_t *scratch, size_t *stage) {
    mp_pnode *pn = &p->nodes[i];
    MP_TRY(host_op_prepare(p, i));
    if (pn->info.workspace_bytes > *ws) *ws = pn->info.workspace_bytes;
    if (pn->in_backward && mp_plan_scratch_bytes(p, i) > *scratch) *scratch = mp_plan_scratch_bytes(p, i);
    MP_TRY(stage_node(p, i));
    if (pn->staged && mp_stage_bytes(p, i) > *stage) *stage = mp_stage_bytes(p, i);
    return MP_OK;
}

/* Node i again, for the layouts plan_layout.c chose; a node that now runs
 * staged instead of natively (its bf16 primitive refused those layouts)
 * raises the staging buffer. */
static mp_status host_node_reprepare(mp_plan *p, int i, mp_layout_sizes *sz) {
    mp_pnode *pn = &p->nodes[i];
    const mp_op_vtable *vt = mp_op_lookup(p->g->nodes[i].desc.kind);
    if (!vt->prepare) return MP_OK;
    if (vt->release && pn->call.state) vt->release(pn->call.state);
    pn->call.state = NULL;
    MP_TRY(host_op_prepare(p, i));
    if (pn->info.workspace_bytes > sz->ws) sz->ws = pn->info.workspace_bytes;
    if (pn->staged && mp_stage_bytes(p, i) > sz->stage) sz->stage = mp_stage_bytes(p, i);
    return MP_OK;
}

/* Batch norm i fused into the average pool k (plan_fuse.h) can run so: both
 * on the vector kernels over channels-last f32 or bf16 (natively, not
 * staged through f32 copies), the pool's 2x2 window. */
static bool bn_pool_runs(const mp_plan *p, int i, int k) {
    const mp_pnode *bn = &p->nodes[i], *pool = &p->nodes[k];
    const mp_dtype dt = p->g->nodes[i].storage_dtype;
    return p->onednn && mp_fast_isa_current() != MP_FAST_NONE && (dt == MP_DTYPE_F32 || dt == MP_DTYPE_BF16) &&
           (!bn->staged || bn->native) && (!pool->staged || pool->native) && mp_info_nhwc_out(&bn->info) &&
           (bn->info.nhwc & 1u) && (pool->info.nhwc & 1u) && mp_pool_cpu_window(&p->g->nodes[k].desc);
}

/* Node i runs natively (not staged through f32 copies) with every input
 * and its output channels-last. */
static bool native_nhwc(const mp_plan *p, int i) {
    const mp_pnode *pn = &p->nodes[i];
    const unsigned ins = (1u << p->g->nodes[i].n_in) - 1u;
    return (!pn->staged || pn->native) && mp_info_nhwc_out(&pn->info) && (pn->info.nhwc & ins) == ins;
}

/* Node i reads and writes the arena's tensors themselves, not staged f32
 * copies (add.c's backward then skips a copy onto itself). */
static bool runs_on_arena(const mp_plan *p, int i) { return !p->nodes[i].staged || p->nodes[i].native; }

/* Batch norm i with a residual add (and the ReLU after it) fused in
 * (plan_fuse.h) can run so: all of them natively on the vector kernels over
 * channels-last f32 or bf16. */
static bool bn_add_runs(const mp_plan *p, int i) {
    const mp_dtype dt = p->g->nodes[i].storage_dtype;
    if (!p->onednn || mp_fast_isa_current() == MP_FAST_NONE || (dt != MP_DTYPE_F32 && dt != MP_DTYPE_BF16))
        return false;
    for (int k = i; k < p->n; k++) /* the batch norm, its add and its ReLU */
        if ((k == i || (p->nodes[k].fused_away && p->nodes[k].fused_into == i)) && !native_nhwc(p, k)) return false;
    return true;
}

/* After the layouts are chosen: undo the batch norm + residual add fusions
 * that cannot run (bn_add_runs). */
static void settle_bn_add(mp_plan *p) {
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i].add_fused && !bn_add_runs(p, i)) mp_plan_unfuse_bn_add(p, i);
}

/* After the layouts are chosen: undo the batch norm + pool fusions that
 * cannot run (bn_pool_runs), and size the workspace for those that do. */
static void settle_bn_pool(mp_plan *p, size_t *ws) {
    for (int i = 0; i < p->n; i++) {
        const int k = p->nodes[i].pool_fused;
        if (!k || p->g->nodes[i].desc.kind != MP_OP_BATCHNORM2D) continue;
        if (!bn_pool_runs(p, i, k)) {
            mp_plan_unfuse_bn_pool(p, i);
            continue;
        }
        const mp_shape *x = &p->nodes[i].info.in[0];
        const size_t need = mp_bn_nhwc_pooled_workspace_bytes(x->dims[1], x->dims[3]);
        if (need > *ws) *ws = need;
    }
}

static mp_status host_choose_layout(mp_plan *p, size_t *ws, size_t *stage) {
    mp_layout_sizes sz = {*ws, *stage};
    MP_TRY(mp_plan_choose_layout(p, &sz, host_node_reprepare));
    settle_bn_pool(p, &sz.ws);
    settle_bn_add(p);
    *ws = sz.ws, *stage = sz.stage;
    return MP_OK;
}

static mp_status host_arena_alloc(mp_plan *p, size_t bytes, char **arena) {
    *arena = NULL;
    MP_TRY(mp_host_mem_check(MP_ALIGN64(bytes), "try a smaller batch",
                             "the activations and gradients of batch %d (the plan's arena)", p->o.batch));
    *arena = aligned_alloc(64, MP_ALIGN64(bytes));
    if (!*arena)
        return mp_error(MP_ERR_NOMEM,
                        "plan: cannot allocate %zu bytes (%.1f GiB) of activations and gradients for batch %d; "
                        "try a smaller batch",
                        bytes, (double)bytes / (1 << 30), p->o.batch);
    memset(*arena, 0, bytes);
    return MP_OK;
}

static void host_arena_free(mp_plan *p) {
    free(p->arena);
    p->arena = NULL;
}

static void host_grad_place(mp_plan *p, int k, void *where) { (void)p, (void)k, (void)where; }

/* A batch norm + ReLU fused into an average pool (plan_fuse.h): the pool
 * reads the batch norm's input and its coefficients of each step (in its
 * saved: batchnorm2d_onednn.h's layout); the batch norm's backward the
 * pool's output gradient (set before each backward:
 * mp_plan_fuse_before_backward). */
static void host_bind_params(mp_plan *p, int i) {
    mp_op_call *c = &p->nodes[i].call;
    const int other = p->nodes[i].pool_fused;
    if (!other || p->g->nodes[i].desc.kind == MP_OP_BATCHNORM2D) return;
    const int x = p->g->nodes[other].in[0];
    const int C = p->nodes[x].info.out.dims[1];
    void *saved = p->arena + p->nodes[other].saved_off;
    c->bn_x = (mp_tensor){p->g->nodes[x].storage_dtype, p->nodes[x].info.out, p->arena + p->nodes[x].out_off};
    c->bn_mu = mp_bn_saved_mean_f32(saved, C);
    c->bn_scale = mp_bn_saved_scale_f32(saved, C);
    c->bn_shift = mp_bn_saved_shift_f32(saved, C);
}

static mp_status host_forward_begin(mp_plan *p) {
    mp_stage_refresh_weights(p);
    return MP_OK;
}

static mp_status host_forward(mp_plan *p, int i) {
    if (p->nodes[i].staged) return mp_stage_forward(p, i);
    return mp_op_lookup(p->g->nodes[i].desc.kind)->forward(&p->nodes[i].call);
}

/* Backward of an f32 node: kernels write straight into gradients that are
 * not yet written, into scratch for those that must be added. */
static mp_status backward_direct(mp_plan *p, int i, const bool *taken, const bool *fresh) {
    const mp_gnode *nd = &p->g->nodes[i];
    mp_op_call c = p->nodes[i].call;
    mp_plan_gradients_to_scratch(p, i, &c, taken, fresh);
    MP_TRY(mp_op_lookup(nd->desc.kind)->backward(&c));
    const mp_op_call *bound = &p->nodes[i].call;
    for (int k = 0; k < nd->n_in; k++)
        if (c.d_in[k].data && taken[k])
            mp_tensor_add(c.d_in[k].dtype, bound->d_in[k].data, c.d_in[k].data, mp_tensor_numel(&c.d_in[k]));
    for (int k = 0; k < nd->n_params; k++)
        if (c.d_param[k].data && !fresh[k])
            mp_tensor_add(MP_DTYPE_F32, bound->d_param[k].data, c.d_param[k].data, mp_tensor_numel(&c.d_param[k]));
    return MP_OK;
}

static mp_status host_backward(mp_plan *p, int i, const bool *taken, const bool *fresh) {
    if (p->nodes[i].staged) return mp_stage_backward(p, i, taken, fresh);
    return backward_direct(p, i, taken, fresh);
}

static mp_status host_zero_unreached_grads(mp_plan *p) {
    for (int k = 0; k < p->g->n_params; k++) {
        mp_gparam *gp = &p->g->params[k];
        if (gp->spec.trainable && gp->grad_fresh) {
            memset(gp->grad, 0, (size_t)mp_shape_numel(&gp->spec.shape) * sizeof(float));
            gp->grad_fresh = false;
        }
    }
    return MP_OK;
}

static mp_status host_set_loss_seed(mp_plan *p, int node, mp_seed seed) {
    *(float *)p->nodes[node].call.d_out.data = seed.value;
    return MP_OK;
}

static mp_status host_set_input(mp_plan *p, int node, const float *data, size_t n) {
    const mp_tensor *out = &p->nodes[node].call.out;
    if (mp_info_nhwc_out(&p->nodes[node].info)) return mp_nchw_to_nhwc_store(out->data, out->dtype, data, &out->shape);
    mp_store_f32_known(out->data, out->dtype, data, (int64_t)n);
    return MP_OK;
}

static mp_status host_set_labels(mp_plan *p, int node, const int32_t *labels, size_t n) {
    memcpy(p->nodes[node].call.out.data, labels, n * sizeof(int32_t));
    return MP_OK;
}

static mp_status host_read(const mp_plan *p, int node, float *dst, size_t n) {
    const mp_tensor *t = &p->nodes[node].call.out;
    if (t->dtype == MP_DTYPE_I32) {
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)t->data)[i];
        return MP_OK;
    }
    if (t->dtype != MP_DTYPE_F32 && !mp_dtype_is_low(t->dtype))
        return mp_error(MP_ERR_UNSUPPORTED, "read '%s': dtype %s", p->g->nodes[node].name, mp_dtype_name(t->dtype));
    if (mp_info_nhwc_out(&p->nodes[node].info)) return mp_nhwc_to_nchw_load(dst, t->data, t->dtype, &t->shape);
    mp_load_f32_known(dst, t->data, t->dtype, (int64_t)n);
    return MP_OK;
}

/* The first non-finite element of a tensor of any float dtype, or -1. */
static int64_t first_nonfinite(const void *x, mp_dtype dt, int64_t n) {
    if (dt == MP_DTYPE_F32) return mp_first_nonfinite(x, n);
    const uint16_t mask = mp_dtype_traits_of(dt)->exp_mask16; /* all-ones exponent: inf or NaN */
    if (!mask) return -1;
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++)
        if ((h[i] & mask) == mask) return i;
    return -1;
}

static mp_status host_tensor_nonfinite(const mp_plan *p, const mp_tensor *t, bool *found) {
    (void)p;
    *found = first_nonfinite(t->data, t->dtype, mp_tensor_numel(t)) >= 0;
    return MP_OK;
}

static void *host_param_grad(const mp_plan *p, int k) { return p->g->params[k].grad; }

static mp_status host_params_sync(mp_plan *p, bool to_host) {
    (void)p, (void)to_host;
    return MP_OK;
}

static void host_param_bytes(const mp_plan *p, size_t bytes[4]) {
    (void)p;
    bytes[0] = bytes[1] = bytes[2] = bytes[3] = 0;
}

static void host_profile_sync(const mp_plan *p) { (void)p; }

const mp_exec_backend mp_exec_backend_host = {
    .name = "cpu",
    .per_node_buffers = false,
    .grads_in_arena = false,
    .bn_dx_over_dy_safe = native_nhwc, /* batchnorm2d_nhwc_kernels.inc: dx's row after dy's, all sums before */
    .add_grads_alias_safe = runs_on_arena,
    .open = host_open,
    .close = host_close,
    .node_prepare = host_node_prepare,
    .choose_layout = host_choose_layout,
    .arena_alloc = host_arena_alloc,
    .arena_free = host_arena_free,
    .grad_place = host_grad_place,
    .bind_params = host_bind_params,
    .forward_begin = host_forward_begin,
    .forward = host_forward,
    .backward = host_backward,
    .zero_unreached_grads = host_zero_unreached_grads,
    .set_loss_seed = host_set_loss_seed,
    .set_input = host_set_input,
    .set_labels = host_set_labels,
    .read = host_read,
    .tensor_nonfinite = host_tensor_nonfinite,
    .param_grad = host_param_grad,
    .params_sync = host_params_sync,
    .param_bytes = host_param_bytes,
    .profile_sync = host_profile_sync,
    .tangent_stages_primals = true,
    .so_alloc = mp_so_host_alloc,
    .so_free = mp_so_host_free,
    .tangent_primal = mp_so_primal_f32,
    .tangent_run = mp_so_host_run,
    .tangent_add = mp_so_host_add,
    .tensor_from_host = mp_so_host_from,
    .tensor_to_host = mp_so_host_to,
    .tensor_fill = mp_so_host_fill,
};
