/* cuda_plan.c — the device hooks of graph/device.h for NVIDIA GPUs: a plan's
 * arena, its parameters (fp32 masters, gradients, low-precision casts) and
 * every node's op live on one CUDA device; all work is queued on the
 * context's stream and the host waits only when it reads results back.
 * The parameters lie in three slabs, one cudaMalloc each for the masters,
 * the gradients and the casts (tensors at 256-byte offsets), so cudaMalloc's
 * rounding (2 MiB for large blocks) is paid three times, not per tensor;
 * a plan with grads_in_arena has no gradient slab (the arena holds them).
 * Under the policies without master weights (fp16, bf16) a weight that one
 * low-precision node uses has no fp32 copy at all: its cast is the weight
 * (low_only), as a PyTorch `.half()` model's. Nodes sharing a weight
 * (mp_graph_share_params: a discriminator applied to real and generated
 * images) share its cast where they compute in the same dtype, so the one
 * cast the optimizer refreshes is the one every user reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/batchnorm2d_fast.h" /* mp_bn_fast_pooled_ok */
#include "cuda/conv_cudnn.h" /* mp_conv2d_krsc_job */
#include "cuda/cuda_op.h"
#include "cuda/cuda_plan_kernels.h"
#include "cuda/cuda_plan.h"
#include "dist/dist.h"
#include "cuda/cuda_exec.h"
#include "cuda/host_copy.h"
#include "graph/plan_fuse.h"

struct mp_device_plan {
    mp_cuda_ctx *ctx;
    float **param;      /* per graph parameter: device fp32 master, in master_slab */
    void **grad;        /* per graph parameter: device gradient (mp_plan_grad_dtype) in grad_slab or the arena,
                           NULL for buffers */
    void **low;         /* per node x MP_MAX_PARAMS: low-precision weight cast in low_slab, or NULL */
    void *master_slab;  /* the device allocations behind param, grad and low (NULL when empty) */
    void *grad_slab;
    void *low_slab;
    size_t slab_bytes[3]; /* master_slab, low_slab, grad_slab (mp_device_param_bytes) */
    mp_dtype *low_only;   /* per graph parameter: F16/BF16 when it has no fp32 master (its cast, of that dtype,
                             is the weight; param[k] NULL), else F32 */
    float *input_nchw;  /* device staging of one host batch (f32, NCHW) */
    size_t input_cap;   /* floats */
    bool casts_by_optimizer;      /* the fused optimizer refreshes the low casts */
    bool casts_unshared;          /* a shared weight has casts of two dtypes: the forward casts every step */
    mp_krsc_batch krsc_batch;     /* every conv2d filter to KRSC, once per forward (filter_krsc_batch.h) */
    void *krsc_slab;              /* their KRSC copies */
    size_t krsc_bytes;            /* of krsc_slab (mp_device_param_bytes) */
    void **krsc_of;               /* per node: its copy in krsc_slab, or NULL */
    bool *krsc;                   /* per graph parameter: a conv2d filter whose master, cast, gradient and
                                     optimizer state the device keeps in KRSC order (choose_krsc) */
};

static const char *node_name(const mp_plan *p, int i) { return p->g->nodes[i].name; }
static mp_status refresh_casts(mp_plan *p);

static mp_status dev_alloc(mp_plan *p, void **ptr, size_t bytes, const char *what) {
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 16);
    if (e == cudaSuccess) return MP_OK;
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    return mp_error(MP_ERR_NOMEM,
                    "cuda:%d: out of memory for %s: asked %zu bytes (%.2f GiB), %zu free of %zu (batch %d); try a "
                    "smaller batch",
                    p->dev->ctx->device, what, bytes, (double)bytes / (1 << 30), free_b, total_b, p->o.batch);
}

#define SLAB_ALIGN 256 /* bytes: each tensor's offset in a slab */

/* One device allocation shared by many tensors. */
typedef struct {
    char *base;  /* the allocation; NULL while only sizing */
    size_t used; /* bytes handed out so far (a multiple of SLAB_ALIGN) */
    int count;   /* tensors placed */
} slab;

/* The next tensor of `bytes` bytes: its address (NULL while sizing). An empty
 * tensor still gets its own SLAB_ALIGN bytes, so every pointer is distinct. */
static void *slab_take(slab *s, size_t bytes) {
    size_t off = s->used;
    s->used += ((bytes ? bytes : 1) + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
    s->count++;
    return s->base ? s->base + off : NULL;
}

/* Parameters without an fp32 master (low_only, mp_graph_param_low_only) in
 * a training plan; an inference plan keeps the host's fp32 weights as they
 * are. The dtype is fixed here: a layer later moved to fp32
 * (--auto-fallback) still syncs through this plan's cast. */
static void mark_low_only(mp_plan *p) {
    const mp_graph *g = p->g;
    for (int k = 0; k < g->n_params; k++)
        p->dev->low_only[k] = p->o.training ? mp_graph_param_low_only(g, k) : MP_DTYPE_F32;
}

static bool is_low(mp_dtype d) { return d == MP_DTYPE_F16 || d == MP_DTYPE_BF16; }

/* The conv2d filters the device keeps in KRSC order, cuDNN's with NHWC
 * activations, so no permutation runs in a step: a 4-d parameter that only
 * conv2d nodes read, as their weight. Not in a second-order plan (the
 * tangent passes read filters in the CPU layout), nor under
 * MIXPREC_CONV_WEIGHTS_KRSC=0. The layout never leaves the device: every
 * host copy goes through mp_cuda_host_copies. */
static void choose_krsc(mp_plan *p) {
    const mp_graph *g = p->g;
    if (p->o.second_order || mp_env_get()->no_conv_weights_krsc) return;
    for (int k = 0; k < g->n_params; k++) {
        bool conv_only = g->params[k].spec.shape.ndim == 4, used = false;
        for (int i = 0; i < g->n_nodes && conv_only; i++) {
            const mp_gnode *nd = &g->nodes[i];
            if (k < nd->first_param || k >= nd->first_param + nd->n_params) continue;
            used = true;
            conv_only = nd->desc.kind == MP_OP_CONV2D && k == nd->first_param;
        }
        p->dev->krsc[k] = used && conv_only;
    }
}

/* A KRSC parameter's (k, c, rs) from its host copy's shape (K, C/groups, R, S). */
static void filter_dims(const mp_gparam *gp, int dims[3]) {
    const int *d = gp->spec.shape.dims;
    dims[0] = d[0], dims[1] = d[1], dims[2] = d[2] * d[3];
}

/* An earlier node than i computing in f16/bf16 with node i's parameters
 * (weights shared by mp_graph_share_params), or -1. */
static int earlier_cast(const mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    for (int j = 0; j < i; j++) {
        const mp_gnode *o = &p->g->nodes[j];
        if (is_low(o->compute_dtype) && o->first_param == nd->first_param && o->n_params == nd->n_params)
            return j;
    }
    return -1;
}

/* Places every master, gradient and low-precision cast in its slab; run once
 * on bases of NULL to size the slabs, then again on the allocations. */
static void place_params(mp_plan *p, slab *master, slab *grad, slab *low) {
    mp_device_plan *d = p->dev;
    const mp_graph *g = p->g;
    const bool in_arena = mp_plan_grads_in_arena(p);
    master->used = grad->used = low->used = 0;
    master->count = grad->count = low->count = 0;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *gp = &g->params[k];
        size_t bytes = (size_t)mp_shape_numel(&gp->spec.shape) * sizeof(float);
        d->param[k] = d->low_only[k] != MP_DTYPE_F32 ? NULL : slab_take(master, bytes);
        if (gp->spec.trainable && !in_arena) d->grad[k] = slab_take(grad, bytes); /* else plan_memory places it */
    }
    d->casts_unshared = false;
    for (int i = 0; i < p->n; i++) {
        const mp_gnode *nd = &g->nodes[i];
        if (!is_low(nd->compute_dtype)) continue;
        for (int k = 0; k < nd->n_params; k++) {
            const mp_gparam *gp = &g->params[nd->first_param + k];
            if (!gp->spec.trainable) continue; /* BN running stats stay fp32 */
            const int j = earlier_cast(p, i);
            if (j >= 0 && g->nodes[j].compute_dtype == nd->compute_dtype) { /* shared weights: one cast */
                d->low[i * MP_MAX_PARAMS + k] = d->low[j * MP_MAX_PARAMS + k];
                continue;
            }
            if (j >= 0) d->casts_unshared = true; /* a second dtype: a cast the optimizer does not refresh */
            d->low[i * MP_MAX_PARAMS + k] =
                slab_take(low, (size_t)mp_shape_numel(&gp->spec.shape) * mp_dtype_size(nd->compute_dtype));
        }
    }
}

/* The device allocation for a sized slab, if it holds any tensor. */
static mp_status slab_alloc(mp_plan *p, slab *s, void **keep, const char *what) {
    if (!s->count) return MP_OK;
    char msg[96];
    snprintf(msg, sizeof msg, "%s (%d tensors)", what, s->count);
    MP_TRY(dev_alloc(p, keep, s->used, msg));
    s->base = *keep;
    return MP_OK;
}

mp_status mp_device_plan_open(mp_plan *p) {
    if (p->o.device.kind != MP_DEVICE_CUDA)
        return mp_error(MP_ERR_INVALID_ARG, "plan: unknown device kind %d", (int)p->o.device.kind);
    mp_device_plan *d = calloc(1, sizeof *d);
    if (!d) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    mp_graph *g = p->g;
    d->param = calloc((size_t)(g->n_params + 1), sizeof *d->param);
    d->grad = calloc((size_t)(g->n_params + 1), sizeof *d->grad);
    d->low = calloc((size_t)(p->n + 1) * MP_MAX_PARAMS, sizeof *d->low);
    d->low_only = calloc((size_t)(g->n_params + 1), sizeof *d->low_only);
    d->krsc = calloc((size_t)(g->n_params + 1), sizeof *d->krsc);
    p->dev = d;
    if (!d->param || !d->grad || !d->low || !d->low_only || !d->krsc)
        return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    mark_low_only(p);
    choose_krsc(p);
    MP_TRY(mp_cuda_ctx_create(p->o.device.index, &d->ctx));
    if (p->o.training && p->o.sync_bn && p->o.dist) {
        d->ctx->dist = p->o.dist;
        d->ctx->sync_world = mp_dist_world(p->o.dist);
    }
    slab master = {0}, grad = {0}, low = {0};
    place_params(p, &master, &grad, &low);
    MP_TRY(slab_alloc(p, &master, &d->master_slab, "the parameters' fp32 masters"));
    MP_TRY(slab_alloc(p, &grad, &d->grad_slab, "the parameters' fp32 gradients"));
    MP_TRY(slab_alloc(p, &low, &d->low_slab, "the low-precision (f16/bf16) weight casts"));
    place_params(p, &master, &grad, &low);
    d->slab_bytes[0] = master.used, d->slab_bytes[1] = low.used, d->slab_bytes[2] = grad.used;
    if (d->grad_slab) MP_CUDA_TRY(cudaMemsetAsync(d->grad_slab, 0, grad.used, d->ctx->stream), "gradients");
    return mp_device_params_sync(p, false);
}

void mp_device_plan_close(mp_plan *p) {
    mp_device_plan *d = p->dev;
    if (!d) return;
    if (d->ctx) cudaStreamSynchronize(d->ctx->stream);
    for (int i = 0; i < p->n && p->nodes; i++) {
        const mp_cuda_op_vtable *vt = mp_cuda_op_lookup(p->g->nodes[i].desc.kind);
        if (vt && vt->release && p->nodes[i].call.state) vt->release(p->nodes[i].call.state);
        p->nodes[i].call.state = NULL;
    }
    cudaFree(d->master_slab); /* param, grad and low point into these */
    cudaFree(d->grad_slab);
    cudaFree(d->low_slab);
    mp_krsc_batch_free(&d->krsc_batch);
    cudaFree(d->krsc_slab);
    free(d->krsc_of);
    cudaFree(p->arena);
    p->arena = NULL;
    cudaFree(d->input_nchw);
    mp_cuda_ctx_destroy(d->ctx);
    free(d->param);
    free(d->grad);
    free(d->low);
    free(d->low_only);
    free(d->krsc);
    free(d);
    p->dev = NULL;
}

/* Whether the batch norm's fast kernels take an input x of dtype dt with
 * the pool pl fused in (batchnorm2d_fast.h). */
static bool bn_pool_fits(const mp_shape *x, mp_dtype dt, const mp_op_desc *pl) {
    return x->ndim == 4 && mp_bn_fast_pooled_ok(dt, x->dims[0], x->dims[1], x->dims[2], x->dims[3],
                                                pl->attr.pool.kernel);
}

mp_status mp_device_node_prepare(mp_plan *p, int i, size_t *workspace_bytes, size_t *scratch, size_t *stage) {
    (void)scratch, (void)stage;
    const mp_gnode *nd = &p->g->nodes[i];
    mp_pnode *pn = &p->nodes[i];
    if (mp_op_is_source(nd->desc.kind)) return MP_OK;
    const mp_cuda_op_vtable *vt = mp_cuda_op_lookup(nd->desc.kind);
    if (!vt)
        return mp_error(MP_ERR_UNSUPPORTED, "%s '%s': no GPU implementation of this op yet",
                        mp_op_lookup(nd->desc.kind)->name, nd->name);
    mp_cuda_node_cfg cfg = {.storage = nd->storage_dtype, .compute = nd->compute_dtype, .training = p->o.training,
                            .batch = p->o.batch, .relu_after = pn->relu_fused, .tangents = p->so != NULL};
    const int resid = mp_plan_fused_resid(p, i); /* a residual add (+ ReLU) fused in (graph/plan_fuse.h) */
    if (resid >= 0) {
        cfg.add_after = true;
        cfg.resid_dtype = p->g->nodes[p->g->nodes[pn->add_fused].in[resid]].storage_dtype;
    }
    for (int k = 0; k < nd->n_in; k++) cfg.in_dtype[k] = p->g->nodes[nd->in[k]].storage_dtype;
    cfg.tf32 = nd->tf32;
    cfg.input_grad = p->so != NULL || (nd->n_in > 0 && p->nodes[nd->in[0]].in_backward);
    cfg.weight_grad = nd->n_params ? mp_plan_grad_dtype(p, nd->first_param) : MP_DTYPE_F32;
    cfg.weight_grad_unrounded = nd->n_params && mp_plan_f32_weight_grad(p, nd->first_param);
    const bool conv_dw = pn->dw_fused && nd->desc.kind == MP_OP_CONV2D; /* a batch norm fused in (plan_fuse.h) */
    if (pn->pool_fused && nd->desc.kind == MP_OP_BATCHNORM2D && !bn_pool_fits(&pn->info.in[0], cfg.storage,
                                                                               &p->g->nodes[pn->pool_fused].desc))
        mp_plan_unfuse_bn_pool(p, i); /* its fast kernels do not take the shape: the two run apart */
    cfg.feeds_loader = (pn->dw_fused && !conv_dw) || (pn->pool_fused && nd->desc.kind == MP_OP_BATCHNORM2D);
    cfg.bn_relu_input = conv_dw || (pn->pool_fused && nd->desc.kind == MP_OP_AVGPOOL2D);
    size_t ws = 0, saved = pn->info.saved_bytes;
    MP_TRY(vt->prepare(p->dev->ctx, &nd->desc, &pn->info, &cfg, &pn->call.state, &ws, &saved));
    pn->info.saved_bytes = saved;
    pn->info.workspace_bytes = ws;
    if (ws > *workspace_bytes) *workspace_bytes = ws;
    if (conv_dw && !mp_conv2d_reads_bn_input(pn->call.state)) { /* its kernels declined the batch norm */
        const int b = pn->dw_fused;
        mp_plan_unfuse_bn_dw(p, i);
        /* the batch norm, prepared for the fusion (our kernels only, the fast ones required), prepared again as
           it is unfused (before the arena is planned, so its sizes may still change) */
        const mp_cuda_op_vtable *bvt = mp_cuda_op_lookup(p->g->nodes[b].desc.kind);
        if (bvt->release) bvt->release(p->nodes[b].call.state);
        p->nodes[b].call.state = NULL;
        return mp_device_node_prepare(p, b, workspace_bytes, scratch, stage);
    }
    return MP_OK;
}

/* What node i reads as parameter k: its low-precision cast, else the f32
 * master (bind_params, and the source of a conv filter's KRSC copy). */
static void *bound_param(const mp_plan *p, int i, int k, mp_dtype *dtype) {
    const mp_gnode *nd = &p->g->nodes[i];
    void *low = p->dev->low[i * MP_MAX_PARAMS + k];
    *dtype = low ? nd->compute_dtype : MP_DTYPE_F32;
    return low ? low : (void *)p->dev->param[nd->first_param + k];
}

/* The KRSC copies of the conv2d filters and the batch that refreshes them
 * (filter_krsc_batch.h): after every node is prepared, before the calls are
 * bound. MIXPREC_CONV_KRSC_COPIES=0 leaves each convolution its own. */
static mp_status build_krsc_batch(mp_plan *p) {
    mp_device_plan *d = p->dev;
    if (mp_env_get()->no_conv_krsc_copies) return MP_OK;
    d->krsc_of = calloc((size_t)p->n + 1, sizeof *d->krsc_of);
    mp_krsc_job *jobs = calloc((size_t)p->n + 1, sizeof *jobs);
    int *node = calloc((size_t)p->n + 1, sizeof *node);
    size_t *offset = calloc((size_t)p->n + 1, sizeof *offset);
    mp_status s = d->krsc_of && jobs && node && offset ? MP_OK : mp_error(MP_ERR_NOMEM, "plan: out of memory");
    int n = 0;
    size_t bytes = 0;
    for (int i = 0; s == MP_OK && i < p->n; i++) {
        const mp_gnode *nd = &p->g->nodes[i];
        mp_krsc_job j = {0};
        if (nd->desc.kind != MP_OP_CONV2D || p->nodes[i].fused_away || d->krsc[nd->first_param] ||
            !mp_conv2d_krsc_job(p->nodes[i].call.state, &j) ||
            j.rs > MP_KRSC_BATCH_MAX_RS) /* a kernel that large permutes its own filter */
            continue;
        j.src = bound_param(p, i, 0, &j.sdt);
        offset[n] = bytes;
        bytes += ((size_t)j.k * j.c * j.rs * mp_dtype_size(j.ddt) + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
        node[n] = i;
        jobs[n++] = j;
    }
    if (s == MP_OK && n) s = dev_alloc(p, &d->krsc_slab, bytes, "the convolutions' KRSC filters");
    if (s == MP_OK && n) d->krsc_bytes = bytes;
    for (int m = 0; s == MP_OK && m < n; m++) {
        jobs[m].dst = (char *)d->krsc_slab + offset[m];
        d->krsc_of[node[m]] = jobs[m].dst;
    }
    if (s == MP_OK) s = mp_krsc_batch_build(d->ctx, jobs, n, &d->krsc_batch, "plan");
    free(jobs);
    free(node);
    free(offset);
    return s;
}

/* MIXPREC_POISON_ARENA (diagnosis): =1 the arena starts as all-ones bytes,
 * a NaN in f32, f16 and bf16, so a read before a write shows as NaN, not as
 * 0; =uninit it is not set at all, so compute-sanitizer's initcheck reports
 * such a read. */
mp_status mp_device_arena_alloc(mp_plan *p, size_t bytes, char **arena) {
    MP_TRY(build_krsc_batch(p));
    MP_TRY(dev_alloc(p, (void **)arena, bytes, "the activation arena"));
    const int poison = mp_env_get()->poison_arena;
    if (poison == 2) return MP_OK; /* "uninit": for compute-sanitizer's initcheck */
    MP_CUDA_TRY(cudaMemsetAsync(*arena, poison == 1 ? 0xFF : 0, bytes, p->dev->ctx->stream), "arena");
    return MP_OK;
}

void mp_device_arena_free(mp_plan *p) { (void)p; /* mp_device_plan_close frees it, after its last use */ }

void mp_device_grad_place(mp_plan *p, int k, void *where) { p->dev->grad[k] = where; }

void mp_device_bind_params(mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    mp_op_call *c = &p->nodes[i].call;
    for (int k = 0; k < nd->n_params; k++) c->param[k].data = bound_param(p, i, k, &c->param[k].dtype);
    c->weight_krsc = p->dev->krsc_of ? p->dev->krsc_of[i] : NULL;
    c->param_krsc = nd->n_params && p->dev->krsc[nd->first_param];
    const int b = nd->desc.kind == MP_OP_CONV2D      ? p->nodes[i].dw_fused
                  : nd->desc.kind == MP_OP_AVGPOOL2D ? p->nodes[i].pool_fused
                                                     : 0;
    if (!b) return;
    /* a batch norm + ReLU fused in (plan_fuse.h): its input, and its coefficients of each step in its saved */
    const int x = p->g->nodes[b].in[0];
    c->bn_x = (mp_tensor){p->g->nodes[x].storage_dtype, p->nodes[x].info.out, p->arena + p->nodes[x].out_off};
    mp_cuda_bn_saved_coef(p->arena + p->nodes[b].saved_off, p->nodes[x].info.out.dims[1], &c->bn_mu, &c->bn_scale,
                          &c->bn_shift);
}

/* The weights as the forward pass reads them: the low-precision casts
 * (unless the optimizer refreshed them), then the conv filters' KRSC copies
 * of those. */
mp_status mp_device_forward_begin(mp_plan *p) {
    MP_TRY(refresh_casts(p));
    return mp_krsc_batch_run(p->dev->ctx, &p->dev->krsc_batch);
}

static mp_status refresh_casts(mp_plan *p) {
    mp_device_plan *d = p->dev;
    if (d->casts_by_optimizer) return MP_OK;
    for (int i = 0; i < p->n; i++) {
        const mp_gnode *nd = &p->g->nodes[i];
        for (int k = 0; k < nd->n_params; k++) {
            void *low = d->low[i * MP_MAX_PARAMS + k];
            int gi = nd->first_param + k;
            if (!low || d->low_only[gi] != MP_DTYPE_F32) continue;
            MP_TRY(mp_cuda_cast_from_f32(d->ctx, nd->compute_dtype, low, d->param[gi],
                                         mp_shape_numel(&p->g->params[gi].spec.shape)));
        }
    }
    return MP_OK;
}

mp_status mp_device_forward(mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    if (mp_op_is_source(nd->desc.kind)) return MP_OK;
    mp_op_call *c = &p->nodes[i].call;
    c->workspace = p->arena + p->nodes[i].ws_fwd_off; /* each pass has its own (plan.c) */
    return mp_cuda_op_lookup(nd->desc.kind)->forward(p->dev->ctx, c);
}

/* As backward_direct on the CPU: gradients that already hold a value (a
 * second consumer, an earlier micro-batch) are computed into scratch and
 * added, except an input gradient the op adds into itself
 * (adds_input_grad: conv2d's backward-data with beta = 1). */
mp_status mp_device_backward(mp_plan *p, int i, const bool *taken, const bool *fresh) {
    const mp_gnode *nd = &p->g->nodes[i];
    if (mp_op_is_source(nd->desc.kind)) return MP_OK;
    mp_device_plan *d = p->dev;
    const mp_cuda_op_vtable *vt = mp_cuda_op_lookup(nd->desc.kind);
    mp_op_call c = p->nodes[i].call;
    c.workspace = p->arena + p->nodes[i].ws_bwd_off;
    for (int k = 0; k < nd->n_params; k++) /* gradients go to the device's (f32, or low_grads) */
        c.d_param[k].data = c.d_param[k].data ? d->grad[nd->first_param + k] : NULL;
    /* a gradient another consumer wrote: the op adds into it where it can,
     * else its result goes to scratch and a kernel adds it */
    bool to_add[MP_MAX_INPUTS] = {0};
    c.d_in_add = 0;
    for (int k = 0; k < nd->n_in; k++) {
        to_add[k] = taken[k];
        if (taken[k] && c.d_in[k].data && vt->adds_input_grad && vt->adds_input_grad(c.state, k)) {
            c.d_in_add |= 1u << k;
            to_add[k] = false;
        }
    }
    mp_plan_gradients_to_scratch(p, i, &c, to_add, fresh);
    MP_TRY(vt->backward(d->ctx, &c));
    const mp_op_call *bound = &p->nodes[i].call;
    for (int k = 0; k < nd->n_in; k++)
        if (c.d_in[k].data && to_add[k])
            MP_TRY(mp_cuda_accumulate(d->ctx, c.d_in[k].dtype, bound->d_in[k].data, c.d_in[k].data,
                                      mp_tensor_numel(&c.d_in[k])));
    for (int k = 0; k < nd->n_params; k++)
        if (c.d_param[k].data && !fresh[k])
            MP_TRY(mp_cuda_accumulate(d->ctx, bound->d_param[k].dtype, d->grad[nd->first_param + k], c.d_param[k].data,
                                      mp_tensor_numel(&c.d_param[k])));
    return MP_OK;
}

mp_status mp_device_zero_unreached_grads(mp_plan *p) {
    mp_graph *g = p->g;
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *gp = &g->params[k];
        if (!gp->spec.trainable || !gp->grad_fresh) continue;
        const size_t bytes = (size_t)mp_shape_numel(&gp->spec.shape) * mp_dtype_size(mp_plan_grad_dtype(p, k));
        MP_CUDA_TRY(cudaMemsetAsync(p->dev->grad[k], 0, bytes, p->dev->ctx->stream),
                    gp->name);
        gp->grad_fresh = false;
    }
    return MP_OK;
}

mp_status mp_device_set_loss_seed(mp_plan *p, int node, mp_seed seed) {
    if (seed.device) {
        MP_CUDA_TRY(cudaMemcpyAsync(p->nodes[node].call.d_out.data, seed.device, sizeof(float),
                                    cudaMemcpyDeviceToDevice, p->dev->ctx->stream),
                    node_name(p, node));
        return MP_OK;
    }
    MP_CUDA_TRY(cudaMemcpyAsync(p->nodes[node].call.d_out.data, &seed.value, sizeof seed.value,
                                cudaMemcpyHostToDevice, p->dev->ctx->stream),
                node_name(p, node));
    return MP_OK;
}

/* The host staging buffer (device f32, NCHW) grown to n floats. */
static mp_status staging(const mp_plan *p, size_t n, const char *what) {
    mp_device_plan *d = p->dev;
    if (n <= d->input_cap) return MP_OK;
    cudaFree(d->input_nchw);
    d->input_nchw = NULL;
    d->input_cap = 0;
    MP_TRY(dev_alloc((mp_plan *)p, (void **)&d->input_nchw, n * sizeof(float), what));
    d->input_cap = n;
    return MP_OK;
}

static mp_status check_numel(const mp_tensor *t, size_t n, const char *what) {
    if ((size_t)mp_tensor_numel(t) == n) return MP_OK;
    return mp_error(MP_ERR_SHAPE, "%s: %zu values for a tensor of %lld", what, n, (long long)mp_tensor_numel(t));
}

mp_status mp_device_tensor_from_host(mp_plan *p, const mp_tensor *t, const float *host, size_t n) {
    mp_device_plan *d = p->dev;
    MP_TRY(check_numel(t, n, "copy to the device"));
    MP_TRY(staging(p, n, "a host batch's staging"));
    MP_CUDA_TRY(cudaMemcpyAsync(d->input_nchw, host, n * sizeof(float), cudaMemcpyHostToDevice, d->ctx->stream),
                "copy to the device");
    return mp_cuda_nchw_f32_to_device(d->ctx, d->input_nchw, t);
}

mp_status mp_device_tensor_to_host(const mp_plan *p, const mp_tensor *t, float *host, size_t n) {
    mp_device_plan *d = p->dev;
    MP_TRY(check_numel(t, n, "copy to the host"));
    MP_TRY(staging(p, n, "a read-back buffer"));
    MP_TRY(mp_cuda_device_to_nchw_f32(d->ctx, t, d->input_nchw));
    MP_CUDA_TRY(cudaMemcpyAsync(host, d->input_nchw, n * sizeof(float), cudaMemcpyDeviceToHost, d->ctx->stream),
                "copy to the host");
    MP_CUDA_TRY(cudaStreamSynchronize(d->ctx->stream), "copy to the host");
    return MP_OK;
}

/* A failed copy's error with the node it was for in front. */
static mp_status about_node(mp_status s, const char *what, const mp_plan *p, int node) {
    if (s == MP_OK) return s;
    char why[512]; /* mp_last_error() is the buffer mp_error writes: copy it first */
    snprintf(why, sizeof why, "%s", mp_last_error());
    return mp_error(s, "%s '%s': %s", what, node_name(p, node), why);
}

mp_status mp_device_set_input(mp_plan *p, int node, const float *host, size_t n) {
    return about_node(mp_device_tensor_from_host(p, &p->nodes[node].call.out, host, n), "input", p, node);
}

mp_status mp_device_set_labels(mp_plan *p, int node, const int32_t *host, size_t n) {
    MP_CUDA_TRY(cudaMemcpyAsync(p->nodes[node].call.out.data, host, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                p->dev->ctx->stream),
                node_name(p, node));
    return MP_OK;
}

/* Labels (int32) come back as their float values, as the CPU plan reads them:
 * copied into the caller's buffer (4 bytes each), then converted in place. */
static mp_status labels_to_host(const mp_plan *p, const mp_tensor *t, float *host, size_t n) {
    MP_TRY(check_numel(t, n, "copy to the host"));
    MP_CUDA_TRY(cudaMemcpyAsync(host, t->data, n * sizeof(int32_t), cudaMemcpyDeviceToHost, p->dev->ctx->stream),
                "copy to the host");
    MP_CUDA_TRY(cudaStreamSynchronize(p->dev->ctx->stream), "copy to the host");
    for (size_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, &host[i], sizeof v);
        host[i] = (float)v;
    }
    return MP_OK;
}

mp_status mp_device_read(const mp_plan *p, int node, float *host, size_t n) {
    const mp_tensor *t = &p->nodes[node].call.out;
    if (t->dtype == MP_DTYPE_I32) return about_node(labels_to_host(p, t, host, n), "read", p, node);
    return about_node(mp_device_tensor_to_host(p, t, host, n), "read", p, node);
}

/* Parameters (and, to the host, gradients) between the device and the
 * graph's host copies, through mp_cuda_host_copies: a low_only weight, and a
 * gradient kept in f16/bf16 (low_grads), converted on the host (to the
 * device rounded to nearest even, as the CPU trainer keeps it), a conv
 * filter kept in KRSC permuted there; one stream synchronization in all. */
mp_status mp_device_params_sync(mp_plan *p, bool to_host) {
    mp_device_plan *d = p->dev;
    mp_graph *g = p->g;
    mp_host_copy *x = calloc(2 * (size_t)g->n_params + 1, sizeof *x);
    if (!x) return mp_error(MP_ERR_NOMEM, "parameter copy: out of memory");
    int n = 0;
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *gp = &g->params[k];
        mp_host_copy one = {.host = gp->data, .dev = d->param[k], .dt = MP_DTYPE_F32,
                            .n = mp_shape_numel(&gp->spec.shape), .name = gp->name};
        if (d->krsc[k]) filter_dims(gp, one.filter);
        if (d->low_only[k] != MP_DTYPE_F32) one.dev = mp_cuda_plan_low(p, k, &one.dt);
        x[n++] = one;
        if (!to_host || !gp->grad || !d->grad[k]) continue;
        one.host = gp->grad, one.dev = d->grad[k], one.dt = mp_plan_grad_dtype(p, k);
        x[n++] = one;
    }
    const mp_status s = mp_cuda_host_copies(d->ctx, x, n, to_host, "parameter copy");
    free(x);
    return s;
}

/* ---- for the device training step (step_cuda.c) ------------------------- */

void *mp_device_grad(const mp_plan *p, int k) { return p->dev->grad[k]; }

void mp_device_param_bytes(const mp_plan *p, size_t bytes[4]) {
    for (int i = 0; i < 3; i++) bytes[i] = p->dev ? p->dev->slab_bytes[i] : 0;
    bytes[3] = p->dev ? p->dev->krsc_bytes : 0;
}

mp_cuda_ctx *mp_cuda_plan_ctx(const mp_plan *p) { return p->dev ? p->dev->ctx : NULL; }

bool mp_cuda_plan_param_krsc(const mp_plan *p, int k, int dims[3]) {
    if (!p->dev->krsc[k]) return false;
    filter_dims(&p->g->params[k], dims);
    return true;
}
float *mp_cuda_plan_param(const mp_plan *p, int k) { return p->dev->param[k]; }

/* The low cast of graph parameter k (its first low-precision user's, which
 * users of the same dtype share), or NULL. */
void *mp_cuda_plan_low(const mp_plan *p, int k, mp_dtype *dtype) {
    const mp_gparam *gp = &p->g->params[k];
    *dtype = p->dev->low_only[k];
    for (int i = gp->node; i < p->n; i++) {
        const mp_gnode *nd = &p->g->nodes[i];
        if (k < nd->first_param || k >= nd->first_param + nd->n_params) continue;
        void *low = p->dev->low[i * MP_MAX_PARAMS + (k - nd->first_param)];
        if (!low) continue;
        if (*dtype == MP_DTYPE_F32) *dtype = nd->compute_dtype; /* as allocated */
        return low;
    }
    if (*dtype == MP_DTYPE_F32) *dtype = p->g->nodes[gp->node].compute_dtype;
    return NULL;
}

void mp_cuda_plan_casts_by_optimizer(mp_plan *p, bool on) {
    p->dev->casts_by_optimizer = on && !p->dev->casts_unshared;
}

void mp_device_profile_sync(const mp_plan *p) {
    enum cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStream_t stream = p->dev->ctx->stream;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return;
    }
    (void)cudaStreamSynchronize(stream);
}

size_t mp_cuda_used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
}
