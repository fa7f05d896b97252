/* plan_fuse.c — see plan_fuse.h. */
#include "graph/plan_fuse.h"

#include <stdlib.h>
#include <string.h>

static bool fusion_off(const mp_plan *p) {
    /* second-order plans: the tangent functions know no fused ops */
    return p->o.no_fusion || mp_env_get()->no_fusion || p->o.second_order;
}

/* ReLU node j and the batch norm i it reads can be fused: i feeds j only, is
 * no output of the graph, stores the dtype j stores, and both are (or both
 * are not) on the backward path. (A residual add + ReLU was tried the same
 * way: the add's backward then reads the mask one step after the ReLU's
 * would, which kept one more activation alive at resnet18's peak, +23 MiB
 * at batch 2048; see bench/NOTES.md v0.10.) */
static bool fusable(const mp_plan *p, int j) {
    const mp_gnode *r = &p->g->nodes[j];
    if (r->desc.kind != MP_OP_RELU || r->n_in != 1) return false;
    const int i = r->in[0];
    const mp_gnode *bn = &p->g->nodes[i];
    return bn->desc.kind == MP_OP_BATCHNORM2D && bn->n_consumers == 1 && !bn->is_output &&
           bn->storage_dtype == r->storage_dtype && p->nodes[i].in_backward == p->nodes[j].in_backward;
}

/* The only consumer of node j, or -1. */
static int sole_consumer(const mp_plan *p, int j) {
    if (p->g->nodes[j].n_consumers != 1 || p->g->nodes[j].is_output) return -1;
    for (int k = j + 1; k < p->n; k++)
        for (int m = 0; m < p->g->nodes[k].n_in; m++)
            if (p->g->nodes[k].in[m] == j) return k;
    return -1;
}

/* The ReLU reading add j when it is j's only consumer, else -1. */
static int relu_after_add(const mp_plan *p, int j) {
    const int k = sole_consumer(p, j);
    return k >= 0 && p->g->nodes[k].desc.kind == MP_OP_RELU && p->g->nodes[k].n_in == 1 ? k : -1;
}

/* No consumer of s runs between the batch norm i (inclusive) and add j:
 * the batch norm, run at i, then writes s's gradient from the add (or adds
 * to what consumers after j wrote) before any consumer before i adds to it,
 * and s exists when i runs (s < i). */
static bool resid_ok(const mp_plan *p, int s, int i, int j) {
    if (s >= i) return false;
    for (int c = i; c < j; c++) {
        const mp_gnode *nd = &p->g->nodes[c];
        for (int m = 0; m < nd->n_in; m++)
            if (nd->in[m] == s) return false;
    }
    return true;
}

/* bn -> add (with a residual s) [-> relu k, or k = -1: none]: the batch
 * norm that runs them (the later one of two batch norms, as in a
 * projection shortcut's block), or -1. */
static int bn_for_add(const mp_plan *p, int j, int k) {
    const mp_gnode *a = &p->g->nodes[j], *r = k >= 0 ? &p->g->nodes[k] : a;
    if (a->desc.kind != MP_OP_ADD || a->n_in != 2 || a->in[0] == a->in[1]) return -1;
    int best = -1;
    for (int m = 0; m < 2; m++) {
        const int i = a->in[m], s = a->in[1 - m];
        const mp_gnode *bn = &p->g->nodes[i];
        if (bn->desc.kind != MP_OP_BATCHNORM2D || bn->n_consumers != 1 || bn->is_output || p->nodes[i].relu_fused ||
            bn->storage_dtype != a->storage_dtype || a->storage_dtype != r->storage_dtype ||
            p->nodes[i].in_backward != p->nodes[j].in_backward ||
            (k >= 0 && p->nodes[j].in_backward != p->nodes[k].in_backward) || !resid_ok(p, s, i, j))
            continue;
        if (i > best) best = i;
    }
    return best;
}

/* Each residual add fed by a batch norm, with the ReLU after it where the
 * add is that ReLU's only input (a ResNet block's tail) or without one (a
 * MobileNetV2 block's). */
static void fuse_bn_add(mp_plan *p) {
    if (p->o.no_bn_add_relu_fusion || mp_env_get()->no_bn_add_relu_fusion) return;
    for (int j = 0; j < p->n; j++) {
        if (p->g->nodes[j].desc.kind != MP_OP_ADD) continue;
        const int k = relu_after_add(p, j), i = bn_for_add(p, j, k);
        if (i < 0) continue;
        p->nodes[i].relu_fused = k >= 0;
        p->nodes[i].add_fused = j;
        p->nodes[j].fused_away = true;
        p->nodes[j].fused_into = i;
        if (k < 0) continue;
        p->nodes[k].fused_away = true;
        p->nodes[k].fused_into = i;
    }
}

/* A 3x3 depthwise conv2d that reads ReLU j (fused into batch norm i) as its
 * only input and computes in the dtype all three store, on the backward path
 * as they are: the conv (its kernels decide at prepare whether they take
 * the shape and dtype: conv_depthwise.h), else -1. */
static int dw_after(const mp_plan *p, int i, int j) {
    const int k = sole_consumer(p, j);
    if (k < 0) return -1;
    const mp_gnode *cv = &p->g->nodes[k], *bn = &p->g->nodes[i], *x = &p->g->nodes[bn->in[0]];
    const mp_conv_opts *o = &cv->desc.attr.conv;
    const bool dw = cv->desc.kind == MP_OP_CONV2D && cv->n_in == 1 && o->groups > 1 && o->groups == o->out_channels &&
                    o->kernel == 3;
    const bool dtypes = cv->compute_dtype == bn->storage_dtype && x->storage_dtype == bn->storage_dtype;
    return dw && dtypes && p->nodes[i].in_backward && p->nodes[k].in_backward ? k : -1;
}

/* Batch norm + ReLU -> depthwise conv2d on GPU training plans (see plan_fuse.h). */
static void fuse_bn_dw(mp_plan *p) {
    const mp_env *env = mp_env_get();
    if (p->o.device.kind != MP_DEVICE_CUDA || !p->o.training || !(p->o.bn_dw_fusion || env->bn_dw_fusion) ||
        env->no_bn_fast)
        return;
    for (int j = 0; j < p->n; j++) {
        if (!p->nodes[j].fused_away || p->g->nodes[j].desc.kind != MP_OP_RELU) continue;
        const int i = p->nodes[j].fused_into, k = p->nodes[i].add_fused ? -1 : dw_after(p, i, j);
        if (k < 0) continue;
        p->nodes[i].dw_fused = k;
        p->nodes[k].dw_fused = i;
    }
}

/* A k x k average pool of stride k and no padding that reads ReLU j (fused
 * into batch norm i) as its only input, stores the dtype all of them store,
 * on the backward path as they are: the pool, else -1. */
static int pool_after(const mp_plan *p, int i, int j) {
    const int k = sole_consumer(p, j);
    if (k < 0) return -1;
    const mp_gnode *pl = &p->g->nodes[k], *bn = &p->g->nodes[i], *x = &p->g->nodes[bn->in[0]];
    const mp_pool_opts *o = &pl->desc.attr.pool;
    const bool tiles = pl->desc.kind == MP_OP_AVGPOOL2D && pl->n_in == 1 && o->kernel >= 1 && o->stride == o->kernel &&
                       o->padding == 0;
    const bool dtypes = pl->storage_dtype == bn->storage_dtype && x->storage_dtype == bn->storage_dtype;
    return tiles && dtypes && p->nodes[i].in_backward && p->nodes[k].in_backward ? k : -1;
}

/* Batch norm + ReLU -> average pool on training plans (see plan_fuse.h);
 * the CPU's kernels take 2x2 windows only. */
static void fuse_bn_pool(mp_plan *p) {
    const mp_env *env = mp_env_get();
    const bool gpu = p->o.device.kind == MP_DEVICE_CUDA;
    if (!p->o.training || p->o.no_bn_pool_fusion || env->no_bn_pool_fusion) return;
    if (gpu && (env->no_bn_fast || env->cudnn_bn == 1)) return; /* fused, the batch norm runs on our kernels only */
    for (int j = 0; j < p->n; j++) {
        if (!p->nodes[j].fused_away || p->g->nodes[j].desc.kind != MP_OP_RELU) continue;
        const int i = p->nodes[j].fused_into;
        const int k = p->nodes[i].add_fused || p->nodes[i].dw_fused ? -1 : pool_after(p, i, j);
        if (k < 0 || (!gpu && p->g->nodes[k].desc.attr.pool.kernel != 2)) continue;
        p->nodes[i].pool_fused = k;
        p->nodes[k].pool_fused = i;
    }
}

void mp_plan_fuse_bn_relu(mp_plan *p) {
    if (fusion_off(p)) return;
    for (int j = 0; j < p->n; j++)
        if (fusable(p, j)) {
            p->nodes[p->g->nodes[j].in[0]].relu_fused = true;
            p->nodes[j].fused_away = true;
            p->nodes[j].fused_into = p->g->nodes[j].in[0];
        }
    fuse_bn_add(p);
    fuse_bn_dw(p);
    fuse_bn_pool(p);
}

void mp_plan_unfuse_bn_dw(mp_plan *p, int k) {
    const int i = p->nodes[k].dw_fused;
    if (!i) return;
    p->nodes[i].dw_fused = p->nodes[k].dw_fused = 0;
}

void mp_plan_unfuse_bn_add(mp_plan *p, int i) {
    if (!p->nodes[i].add_fused) return;
    for (int k = i + 1; k < p->n; k++) /* the add, and the ReLU after it */
        if (p->nodes[k].fused_away && p->nodes[k].fused_into == i) {
            p->nodes[k].fused_away = false;
            p->nodes[k].fused_into = 0;
        }
    p->nodes[i].add_fused = 0;
    p->nodes[i].relu_fused = false; /* only the add's ReLU was (bn_for_add takes no batch norm fused already) */
}

void mp_plan_unfuse_bn_pool(mp_plan *p, int i) {
    const int k = p->nodes[i].pool_fused;
    if (!k) return;
    p->nodes[i].pool_fused = p->nodes[k].pool_fused = 0;
}

bool mp_plan_fused_output_stored(const mp_plan *p) { return p->observe || p->replaying; }

bool mp_plan_fuse_before_forward(mp_plan *p, int i) {
    mp_pnode *pn = &p->nodes[i];
    if (pn->fused_away) return false; /* its batch norm computes it */
    if ((pn->dw_fused || pn->pool_fused) && p->g->nodes[i].desc.kind == MP_OP_BATCHNORM2D)
        pn->call.skip_out = !mp_plan_fused_output_stored(p); /* the conv or pool reading it applies it */
    return true;
}

bool mp_plan_fuse_before_backward(mp_plan *p, int i, const bool *taken) {
    mp_pnode *pn = &p->nodes[i];
    if (pn->fused_away) {
        if (p->g->nodes[i].desc.kind == MP_OP_ADD) { /* its batch norm writes the residual's gradient */
            const int m = mp_plan_fused_resid(p, pn->fused_into);
            mp_op_call *bc = &p->nodes[pn->fused_into].call;
            bc->d_resid.data = pn->call.d_in[m].data;
            bc->d_resid_add = taken[m];
        }
        return false; /* its batch norm masks dy (and writes the add's gradient) */
    }
    const int pool = pn->pool_fused;
    if (!pool) return true;
    const bool pooled = !mp_plan_fused_output_stored(p);
    if (p->g->nodes[i].desc.kind == MP_OP_AVGPOOL2D) return !pooled; /* its batch norm reads its output gradient */
    pn->call.pool_dy = pooled ? p->nodes[pool].call.d_out : (mp_tensor){0};
    pn->call.pool_k = p->g->nodes[pool].desc.attr.pool.kernel;
    return true;
}

int mp_plan_fused_producer(const mp_plan *p, int i) { return p->nodes[i].fused_away ? p->nodes[i].fused_into : -1; }

int mp_plan_fused_resid(const mp_plan *p, int i) {
    const int j = p->nodes[i].add_fused;
    if (!j) return -1;
    const mp_gnode *a = &p->g->nodes[j];
    return a->in[0] == i ? 1 : 0;
}

/* Fused-away node j is the last of its batch norm's chain (the ReLU, or an
 * add with no ReLU after it): its gradient is the batch norm's dy. */
static bool chain_tail(const mp_plan *p, int j) {
    return p->g->nodes[j].desc.kind != MP_OP_ADD || !p->nodes[p->nodes[j].fused_into].relu_fused;
}

bool mp_plan_fused_value_stored(const mp_plan *p, int i) { return p->nodes[i].fused_away && chain_tail(p, i); }

void mp_plan_fuse_buffers(const mp_plan *p, mp_arena_buf *b) {
    const int n = p->n;
    for (int k = 0; k < n; k++) { /* a fused pool's output gradient: read by its batch norm's backward */
        const int i = p->nodes[k].pool_fused;
        if (!i || p->g->nodes[k].desc.kind != MP_OP_AVGPOOL2D) continue;
        if (2 * n - 1 - i > b[3 * k + 1].last) b[3 * k + 1].last = 2 * n - 1 - i;
    }
    for (int j = 0; j < n; j++) {
        const int i = mp_plan_fused_producer(p, j);
        if (i < 0) continue;
        mp_arena_buf *out = &b[3 * i], *r_out = &b[3 * j], *grad = &b[3 * i + 1], *r_grad = &b[3 * j + 1];
        if (r_out->last > out->last) out->last = r_out->last;
        const bool bwd = p->nodes[i].in_backward;
        if (bwd && p->nodes[i].relu_fused && 2 * n - 1 - i > out->last) out->last = 2 * n - 1 - i; /* the mask */
        r_out->size = 0;
        b[3 * j + 2].size = 0; /* the ReLU and the add save nothing */
        if (!bwd) continue;
        grad->size = 0;
        if (!chain_tail(p, j)) r_grad->size = 0; /* an add before a ReLU: the ReLU's dy goes to the batch norm */
        else if (2 * n - 1 - i > r_grad->last) r_grad->last = 2 * n - 1 - i; /* the batch norm's dy */
    }
}

void mp_plan_fuse_offsets(mp_plan *p) {
    for (int j = 0; j < p->n; j++) {
        const int i = mp_plan_fused_producer(p, j);
        if (i < 0) continue;
        p->nodes[j].out_off = p->nodes[i].out_off;
        if (chain_tail(p, j)) p->nodes[i].grad_off = p->nodes[j].grad_off;
    }
    for (int j = 0; j < p->n; j++) /* an add before a fused ReLU: its (unused) gradient, the ReLU's */
        if (p->nodes[j].fused_away && !chain_tail(p, j)) p->nodes[j].grad_off = p->nodes[p->nodes[j].fused_into].grad_off;
}
