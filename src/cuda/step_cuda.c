/* step_cuda.c — the GPU's step primitives (train/step_backend.h). Every
 * decision is read from device memory (the loss scale, the found-inf flags,
 * the learning rates), so the one step (train/step.c) is queued directly the
 * first time and captured into a CUDA graph that later launches replay, one
 * graph per launch kind (whole step; first, middle, last micro-batch). The
 * scaler lives on the device as the same mp_scaler struct the host holds,
 * updated by the same rule; at each step's end it is copied to pinned host
 * memory, which the host reads without waiting. After the forward the batch
 * norms' running statistics are checked too: cuDNN's batch norms normalize a
 * channel whose statistics overflow fp32 to its shift (a finite output), so
 * a NaN/inf statistic is the forward overflow's only trace; it restarts on
 * the device and the host learns which batch norm. A gradient penalty runs
 * after its group's backward, on the device too (penalty_step_cuda.c); its
 * outcome is copied to the host beside the scaler state. Data parallel: gradients
 * are all-reduced in buckets during backward, the found-inf flags after the
 * check, and at most two launches are in flight so that a rank whose peer
 * died has little queued behind a stopped collective. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_optim.h"
#include "cuda/cuda_plan.h"
#include "cuda/cuda_plan_kernels.h"
#include "cuda/graph_memsets.h"
#include "cuda/penalty_cuda.h"
#include "dist/grad_allreduce.h"
#include "cuda/cuda_exec.h"
#include "graph/plan.h"
#include "graph/second_order.h"
#include "train/numerics_collect.h"
#include "train/trainer.h"

#define SEED_SLOTS (MP_MAX_GROUPS * MP_MAX_LOSSES)

extern const mp_step_backend mp_step_backend_cuda;

typedef struct {
    mp_cuda_ctx *ctx;
    mp_cuda_grads *grads[MP_MAX_GROUPS];
    mp_cuda_optim *opt[MP_MAX_GROUPS];
    mp_scaler *scaler;            /* device state */
    mp_scaler *mirror;            /* pinned host copy, written at each step's end */
    mp_cuda_penalty *pen;         /* the gradient penalty's device state (NULL: none) */
    mp_cuda_penalty_out *pen_mirror; /* pinned host copy of its outcome, written beside the scaler's */
    float *scalars;               /* device: lr[MP_MAX_GROUPS], then seeds[SEED_SLOTS] */
    mp_cuda_running_stat *stats;  /* device: the batch norms' running statistics (check_running_stats) */
    int n_stats;
    mp_cuda_stats_record *stats_found; /* device: what the check found since the host last looked */
    mp_grad_allreduce *allreduce; /* data parallel, else NULL */
    cudaEvent_t queued[2];        /* data parallel: the ends of the last two launches */
    /* [1]: the same step measuring numerics statistics (a collecting launch) */
    cudaGraph_t graph[2][MP_LAUNCH_KINDS];
    cudaGraphExec_t exec[2][MP_LAUNCH_KINDS];
    bool queued_once[MP_LAUNCH_KINDS]; /* the first of each kind runs directly (warms the libraries) */
    int launches;
} cuda_step;

static cuda_step *state(const mp_trainer *t) { return t->bs; }

/* The optimizer refreshes the low-precision casts after each update and the
 * forward reads them as they are: cast them from the masters once at the
 * start and after the masters were uploaded. */
static mp_status cast_weights_now(mp_plan *p) {
    mp_cuda_plan_casts_by_optimizer(p, false);
    mp_status st = mp_device_forward_begin(p);
    mp_cuda_plan_casts_by_optimizer(p, true);
    return st;
}

/* Group g's device gradient table and optimizer. */
static mp_status open_group(mp_trainer *t, int g) {
    cuda_step *s = state(t);
    const mp_optimizer *o = t->groups[g].opt;
    const int n = o->n;
    void **gp = calloc((size_t)n + 1, sizeof *gp);
    mp_dtype *gdt = calloc((size_t)n + 1, sizeof *gdt);
    int64_t *numel = calloc((size_t)n + 1, sizeof *numel);
    mp_cuda_param_ref *refs = calloc((size_t)n + 1, sizeof *refs);
    mp_status st = gp && gdt && numel && refs ? MP_OK : mp_error(MP_ERR_NOMEM, "cuda step: out of memory");
    for (int i = 0; st == MP_OK && i < n; i++) {
        const int k = o->param_index[i];
        const mp_gparam *par = &t->g->params[k];
        const mp_param_ref *host = mp_optim_param(o->host, i);
        mp_dtype low_dtype = MP_DTYPE_F32;
        void *low = mp_cuda_plan_low(t->plan, k, &low_dtype);
        gp[i] = mp_device_grad(t->plan, k);
        gdt[i] = mp_plan_grad_dtype(t->plan, k);
        numel[i] = mp_shape_numel(&par->spec.shape);
        refs[i] = (mp_cuda_param_ref){.param = mp_cuda_plan_param(t->plan, k), .grad = gp[i], .low = low,
                                      .low_dtype = low ? low_dtype : MP_DTYPE_F32, .grad_dtype = gdt[i],
                                      .n = numel[i], .decay = host->decay, .no_master = par->round_dtype != MP_DTYPE_F32,
                                      .name = par->name,
                                      /* no f32 array (low_only): SGD momentum in the weight's dtype */
                                      .state_dtype = !mp_cuda_plan_param(t->plan, k) && low ? low_dtype : MP_DTYPE_F32};
        mp_cuda_plan_param_krsc(t->plan, k, refs[i].filter); /* a filter kept in KRSC: its state is too */
    }
    if (st == MP_OK) st = mp_cuda_grads_create_typed(s->ctx, gp, gdt, numel, n, &s->grads[g]);
    if (st == MP_OK) st = mp_cuda_optim_create(s->ctx, mp_optim_options(o->host), refs, n, &s->opt[g]);
    free(gp);
    free(gdt);
    free(numel);
    free(refs);
    return st;
}

static mp_status cuda_state_to_device(mp_trainer *t);

/* The penalty's device state over its group's gradients and the plan's
 * tangent buffers (mp_penalty_check allowed it). */
static mp_status open_penalty(mp_trainer *t) {
    cuda_step *s = state(t);
    const mp_penalty *pen = &t->o.penalty;
    const mp_optimizer *o = t->groups[pen->group].opt;
    const int n = o->n;
    void **grads = calloc((size_t)n + 1, sizeof *grads);
    mp_dtype *dts = calloc((size_t)n + 1, sizeof *dts);
    float **dir = calloc((size_t)n + 1, sizeof *dir), **tgrad = calloc((size_t)n + 1, sizeof *tgrad);
    int64_t *numel = calloc((size_t)n + 1, sizeof *numel);
    mp_status st = grads && dts && dir && tgrad && numel ? MP_OK : mp_error(MP_ERR_NOMEM, "cuda step: out of memory");
    for (int i = 0; st == MP_OK && i < n; i++) {
        const int k = o->param_index[i];
        grads[i] = mp_device_grad(t->plan, k);
        dts[i] = mp_plan_grad_dtype(t->plan, k);
        dir[i] = t->plan->so->t_param[k];
        tgrad[i] = t->plan->so->t_dparam[k];
        numel[i] = mp_shape_numel(&t->g->params[k].spec.shape);
    }
    const bool on_input = pen->kind == MP_PENALTY_R1 || pen->kind == MP_PENALTY_WGAN_GP;
    const mp_cuda_penalty_spec spec = {
        .kind = pen->kind, .weight = pen->weight, .group = pen->group, .batch = t->o.batch,
        .per_sample = on_input ? mp_shape_sample_numel(&t->plan->nodes[pen->input].info.out) : 0,
        .n = n, .grads = grads, .grad_dtypes = dts, .t_param = dir, .t_dparam = tgrad, .numel = numel};
    if (st == MP_OK) st = mp_cuda_penalty_create(s->ctx, &spec, &s->pen);
    if (st == MP_OK)
        st = mp_cuda_check(cudaMallocHost((void **)&s->pen_mirror, sizeof *s->pen_mirror), "cudaMallocHost",
                           "cuda step");
    if (st == MP_OK) *s->pen_mirror = (mp_cuda_penalty_out){NAN, MP_PEN_NOT_RUN};
    free(grads), free(dts), free(dir), free(tgrad), free(numel);
    return st;
}

/* The table of every batch norm's running mean and variance the step
 * checks after its forward, and the record of what the check found. */
static mp_status open_stats(mp_trainer *t) {
    cuda_step *s = state(t);
    const mp_graph *g = t->g;
    mp_cuda_running_stat *host = calloc((size_t)g->n_params + 1, sizeof *host);
    if (!host) return mp_error(MP_ERR_NOMEM, "cuda step: out of memory");
    int n = 0;
    for (int k = 0; k < g->n_params; k++) {
        const mp_gparam *p = &g->params[k];
        float initial;
        float *data = mp_cuda_plan_param(t->plan, k);
        if (!mp_gparam_running_stat(p, &initial) || !data) continue;
        host[n++] = (mp_cuda_running_stat){.data = data, .n = (int)mp_shape_numel(&p->spec.shape), .node = p->node,
                                           .reset = initial};
    }
    mp_status st = mp_cuda_check(cudaMalloc((void **)&s->stats_found, sizeof *s->stats_found), "cudaMalloc",
                                 "cuda step");
    if (st == MP_OK && n)
        st = mp_cuda_check(cudaMalloc((void **)&s->stats, (size_t)n * sizeof *host), "cudaMalloc", "cuda step");
    if (st == MP_OK && n)
        st = mp_cuda_check(cudaMemcpyAsync(s->stats, host, (size_t)n * sizeof *host, cudaMemcpyHostToDevice,
                                           s->ctx->stream),
                           "cudaMemcpyAsync", "cuda step: the running statistics' table");
    if (st == MP_OK)
        st = mp_cuda_check(cudaMemsetAsync(s->stats_found, 0, sizeof *s->stats_found, s->ctx->stream),
                           "cudaMemsetAsync", "cuda step");
    if (st == MP_OK)
        st = mp_cuda_check(cudaStreamSynchronize(s->ctx->stream), "cudaStreamSynchronize", "cuda step");
    if (st == MP_OK) s->n_stats = n;
    free(host);
    return st;
}

static void cuda_close(mp_trainer *t) {
    cuda_step *s = state(t);
    if (!s) return;
    if (s->ctx) cudaStreamSynchronize(s->ctx->stream);
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < MP_LAUNCH_KINDS; i++) {
            if (s->exec[c][i]) cudaGraphExecDestroy(s->exec[c][i]);
            if (s->graph[c][i]) cudaGraphDestroy(s->graph[c][i]);
        }
    mp_grad_allreduce_destroy(s->allreduce);
    for (int i = 0; i < 2; i++)
        if (s->queued[i]) cudaEventDestroy(s->queued[i]);
    for (int g = 0; g < MP_MAX_GROUPS; g++) {
        mp_cuda_grads_destroy(s->grads[g]);
        mp_cuda_optim_destroy(s->opt[g]);
    }
    cudaFree(s->scaler);
    if (s->mirror) cudaFreeHost(s->mirror);
    mp_cuda_penalty_destroy(s->pen);
    if (s->pen_mirror) cudaFreeHost(s->pen_mirror);
    cudaFree(s->scalars);
    cudaFree(s->stats);
    cudaFree(s->stats_found);
    if (t->plan && t->plan->dev) mp_cuda_plan_casts_by_optimizer(t->plan, false);
    free(s);
    t->bs = NULL;
}

static mp_status cuda_open(mp_trainer *t) {
    cuda_step *s = calloc(1, sizeof *s);
    if (!s) return mp_error(MP_ERR_NOMEM, "cuda step: out of memory");
    t->bs = s;
    s->ctx = mp_cuda_plan_ctx(t->plan);
    mp_status st = MP_OK;
    for (int g = 0; st == MP_OK && g < t->n_groups; g++) st = open_group(t, g);
    if (st == MP_OK && t->o.penalty.kind != MP_PENALTY_NONE) st = open_penalty(t);
    if (st == MP_OK) st = mp_cuda_check(cudaMalloc((void **)&s->scaler, sizeof *s->scaler), "cudaMalloc", "cuda step");
    if (st == MP_OK)
        st = mp_cuda_check(cudaMallocHost((void **)&s->mirror, sizeof *s->mirror), "cudaMallocHost", "cuda step");
    if (st == MP_OK)
        st = mp_cuda_check(cudaMalloc((void **)&s->scalars, (MP_MAX_GROUPS + SEED_SLOTS) * sizeof(float)), "cudaMalloc",
                           "cuda step");
    if (st == MP_OK) st = open_stats(t);
    for (int i = 0; st == MP_OK && t->o.dist && i < 2; i++)
        st = mp_cuda_check(cudaEventCreateWithFlags(&s->queued[i], cudaEventDisableTiming), "cudaEventCreate",
                           "cuda step");
    if (st == MP_OK && t->o.dist) {
        st = mp_grad_allreduce_create(t->o.dist, t->plan, t->allreduce_dtype,
                                      (size_t)(t->o.bucket_mb * 1048576.0), &s->allreduce);
        if (st == MP_OK) st = mp_dist_enqueue_begin(t->o.dist);
        if (st == MP_OK) {
            st = mp_dist_broadcast_params(t->o.dist, t->plan); /* every rank starts from rank 0's weights */
            mp_dist_enqueue_end(t->o.dist);
        }
        /* ...and the host copies follow, so the first state upload keeps them */
        if (st == MP_OK) st = mp_plan_sync_params(t->plan, true);
    }
    if (st == MP_OK) st = cuda_state_to_device(t);
    if (st != MP_OK) cuda_close(t);
    return st;
}

/* ---- stream order --------------------------------------------------------- */

static mp_status cuda_check_loss(mp_trainer *t, mp_node loss) {
    const mp_tensor *l = &t->plan->nodes[loss].call.out;
    if (l->dtype != MP_DTYPE_F32 || mp_tensor_numel(l) != 1)
        return mp_error(MP_ERR_INVALID_ARG, "cuda step: the loss '%s' is not one f32 value", t->g->nodes[loss].name);
    return mp_cuda_check_loss(state(t)->ctx, l->data, state(t)->scaler);
}

static mp_status cuda_check_running_stats(mp_trainer *t) {
    cuda_step *s = state(t);
    return mp_cuda_check_running_stats(s->ctx, s->stats, s->n_stats, s->scaler, s->stats_found);
}

static mp_status cuda_loss_seed(mp_trainer *t, int slot, float weight, mp_seed *out) {
    cuda_step *s = state(t);
    if (weight == 1.0f) { /* backward reads the scale itself */
        *out = (mp_seed){.device = &s->scaler->scale};
        return MP_OK;
    }
    if (slot < 0 || slot >= SEED_SLOTS) return mp_error(MP_ERR_INTERNAL, "cuda step: seed slot %d", slot);
    float *seed = s->scalars + MP_MAX_GROUPS + slot;
    MP_TRY(mp_cuda_scale_scalar(s->ctx, seed, &s->scaler->scale, weight));
    *out = (mp_seed){.device = seed};
    return MP_OK;
}

static mp_status cuda_reduce_grads(mp_trainer *t) { return mp_grad_allreduce_finish(state(t)->allreduce); }

static mp_status cuda_reduce_flags(mp_trainer *t) {
    return mp_dist_allreduce_flags(t->o.dist, t->plan, &state(t)->scaler->found_inf, 1 + MP_SCALER_GROUPS);
}

static mp_status cuda_unscale_check(mp_trainer *t, int g) {
    return mp_cuda_unscale_check(state(t)->ctx, state(t)->scaler, g, state(t)->grads[g]);
}

static mp_status cuda_clip(mp_trainer *t, int g) {
    cuda_step *s = state(t);
    if (t->o.clip_value > 0) MP_TRY(mp_cuda_clip_by_value(s->ctx, s->grads[g], t->o.clip_value));
    if (t->o.clip_norm > 0) MP_TRY(mp_cuda_clip_by_norm(s->ctx, s->grads[g], t->o.clip_norm, NULL));
    return MP_OK;
}

/* Group g's update. A later group's backward in the same step reads the
 * updated weights, as on the CPU: the casts and any conv filters' KRSC copies
 * (filter_krsc_batch.h), made at the forward's start, are made again. */
static mp_status cuda_optim_step(mp_trainer *t, int g) {
    cuda_step *s = state(t);
    mp_cuda_step_args a = {.lr_device = s->scalars + g, .found_inf = &s->scaler->group_found[g]};
    MP_TRY(mp_cuda_optim_step(s->ctx, s->opt[g], &a));
    return g + 1 < t->n_groups ? mp_device_forward_begin(t->plan) : MP_OK;
}

static mp_status cuda_penalty(mp_trainer *t, int g) {
    cuda_step *s = state(t);
    return mp_cuda_step_penalty(t, g, s->ctx, s->scaler, s->grads[g], s->pen);
}

static mp_status cuda_scaler_update(mp_trainer *t) {
    cuda_step *s = state(t);
    if (s->pen) /* the penalty's outcome reaches the host beside the scaler state */
        MP_CUDA_TRY(cudaMemcpyAsync(s->pen_mirror, mp_cuda_penalty_result(s->pen), sizeof *s->pen_mirror,
                                    cudaMemcpyDeviceToHost, s->ctx->stream),
                    "gradient penalty outcome to the host");
    MP_TRY(mp_cuda_scaler_update(s->ctx, s->scaler));
    /* the host reads the state from here without synchronizing */
    return mp_cuda_check(cudaMemcpyAsync(s->mirror, s->scaler, sizeof *s->mirror, cudaMemcpyDeviceToHost,
                                         s->ctx->stream),
                         "cudaMemcpyAsync", "loss scaler state to the host");
}

/* ---- launches ------------------------------------------------------------- */

static mp_status capture(mp_trainer *t, int kind, int c) {
    cuda_step *s = state(t);
    MP_CUDA_TRY(cudaStreamBeginCapture(s->ctx->stream, cudaStreamCaptureModeThreadLocal), "CUDA graph capture");
    mp_status st = mp_step_enqueue(t, (mp_launch)kind);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s->ctx->stream, &graph);
    if (st != MP_OK) {
        if (graph) cudaGraphDestroy(graph);
        return st;
    }
    MP_CUDA_TRY(e, "CUDA graph capture of the training step");
    /* speed only: where the conversion stops, the graph stays equivalent */
    if (!mp_env_get()->no_graph_memset_kernels && mp_cuda_graph_memsets_to_kernels(graph, NULL) != MP_OK)
        cudaGetLastError();
    cudaError_t ie = cudaGraphInstantiate(&s->exec[c][kind], graph, 0);
    if (ie != cudaSuccess) {
        cudaGraphDestroy(graph);
        s->exec[c][kind] = NULL;
        return mp_cuda_check(ie, "cudaGraphInstantiate", "CUDA graph instantiation of the training step");
    }
    s->graph[c][kind] = graph;
    return MP_OK;
}

static mp_status run_launch(mp_trainer *t, int kind) {
    cuda_step *s = state(t);
    for (int g = 0; g < t->n_groups; g++) MP_TRY(mp_cuda_set_f32(s->ctx, s->scalars + g, t->groups[g].lr));
    if (!s->queued_once[kind] || t->o.profile) { /* the first also warms up cuDNN/cuBLASLt; a profile waits per node */
        MP_TRY(mp_step_enqueue(t, (mp_launch)kind));
        s->queued_once[kind] = true;
    } else {
        const int c = mp_numerics_collecting(t);
        const bool captured_now = !s->exec[c][kind]; /* the capture's mp_plan_forward counted this step */
        if (captured_now) MP_TRY(capture(t, kind, c));
        MP_CUDA_TRY(cudaGraphLaunch(s->exec[c][kind], s->ctx->stream), "CUDA graph launch of the training step");
        if (!captured_now) t->plan->step++; /* as mp_plan_forward counts queued steps */
        t->plan->forward_ran = true;        /* every launch kind runs the forward */
        t->plan->changed_source = 0;        /* on the batch just set */
        t->plan->backward_ran = true;       /* and the backward */
    }
    s->launches++;
    return MP_OK;
}

/* Wait for event ev (NULL: everything queued); in a data-parallel run a
 * wait the watchdog bounds, and an abort explains a failed wait better than
 * the CUDA error does. */
static mp_status bounded_wait(mp_trainer *t, cudaEvent_t ev) {
    cuda_step *s = state(t);
    mp_dist_wait_begin(t->o.dist);
    cudaError_t e = ev ? cudaEventSynchronize(ev) : cudaStreamSynchronize(s->ctx->stream);
    mp_dist_wait_end(t->o.dist);
    MP_TRY(mp_dist_check(t->o.dist));
    return mp_cuda_check(e, ev ? "cudaEventSynchronize" : "cudaStreamSynchronize", "training step");
}

static mp_status cuda_launch(mp_trainer *t, int kind) {
    cuda_step *s = state(t);
    if (!t->o.dist) return run_launch(t, kind);
    cudaEvent_t ev = s->queued[s->launches % 2];
    if (s->launches >= 2) MP_TRY(bounded_wait(t, ev));
    MP_TRY(mp_dist_enqueue_begin(t->o.dist));
    mp_status st = run_launch(t, kind);
    if (st == MP_OK) st = mp_cuda_check(cudaEventRecord(ev, s->ctx->stream), "cudaEventRecord", "training step");
    mp_dist_enqueue_end(t->o.dist);
    return st;
}

/* ---- host side ------------------------------------------------------------ */

static mp_status cuda_wait(mp_trainer *t) { return bounded_wait(t, NULL); }

/* The penalty's outcome of the step the scaler state is from. Read without
 * waiting (as the scaler mirror is), a copy may be landing: value and
 * status can then come from adjacent steps; after a wait they are exact. */
static void read_penalty(mp_trainer *t) {
    const mp_cuda_penalty_out *o = state(t)->pen_mirror;
    if (!o) return;
    t->pen_value = o->value;
    t->pen_grad_overflow = o->status == MP_PEN_GRAD_OVERFLOW;
    t->pen_forward_overflow = o->status == MP_PEN_FORWARD_OVERFLOW;
}

static mp_status cuda_read_scaler(mp_trainer *t, bool wait, mp_scaler *out) {
    cuda_step *s = state(t);
    if (!wait) {
        memcpy(out, (const void *)s->mirror, sizeof *out);
        read_penalty(t);
        return MP_OK;
    }
    MP_TRY(bounded_wait(t, NULL));
    read_penalty(t); /* nothing queued: the mirror holds the last step's */
    MP_CUDA_TRY(cudaMemcpyAsync(out, s->scaler, sizeof *out, cudaMemcpyDeviceToHost, s->ctx->stream), "loss scaler state");
    return mp_cuda_check(cudaStreamSynchronize(s->ctx->stream), "cudaStreamSynchronize", "loss scaler state");
}

/* The state of a step boundary only: mid-accumulation gradients are not moved. */
static mp_status check_at_boundary(const mp_trainer *t, const char *what) {
    if (t->micro == 0) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "trainer %s: in the middle of a step (%d of %d micro-batches queued)", what,
                    t->micro, t->k);
}

static mp_status cuda_state_to_host(mp_trainer *t) {
    cuda_step *s = state(t);
    MP_TRY(check_at_boundary(t, "state to host"));
    MP_TRY(bounded_wait(t, NULL));
    MP_TRY(mp_plan_sync_params(t->plan, true));
    for (int g = 0; g < t->n_groups; g++) MP_TRY(mp_cuda_optim_download(s->ctx, s->opt[g], t->groups[g].opt->host));
    MP_TRY(cuda_read_scaler(t, true, &t->scaler));
    return MP_OK;
}

/* Every device buffer is overwritten in place, so captured graphs stay valid. */
static mp_status cuda_state_to_device(mp_trainer *t) {
    cuda_step *s = state(t);
    MP_TRY(check_at_boundary(t, "state to device"));
    MP_TRY(mp_plan_sync_params(t->plan, false));
    MP_TRY(cast_weights_now(t->plan));
    for (int g = 0; g < t->n_groups; g++) MP_TRY(mp_cuda_optim_upload(s->ctx, t->groups[g].opt->host, s->opt[g]));
    MP_CUDA_TRY(cudaMemcpyAsync(s->scaler, &t->scaler, sizeof t->scaler, cudaMemcpyHostToDevice, s->ctx->stream),
                "loss scaler state");
    /* a new state (a checkpoint loaded) leaves no overflow of the old one to report */
    if (s->stats_found)
        MP_CUDA_TRY(cudaMemsetAsync(s->stats_found, 0, sizeof *s->stats_found, s->ctx->stream),
                    "running statistics check");
    MP_CUDA_TRY(cudaMemcpyAsync(s->mirror, s->scaler, sizeof *s->mirror, cudaMemcpyDeviceToHost, s->ctx->stream),
                "loss scaler state");
    return mp_cuda_check(cudaStreamSynchronize(s->ctx->stream), "cudaStreamSynchronize", "state to the device");
}

static mp_status cuda_stats_overflow(mp_trainer *t, int *node, int64_t *end, int64_t *reset) {
    cuda_step *s = state(t);
    mp_cuda_stats_record rec;
    MP_TRY(bounded_wait(t, NULL));
    MP_CUDA_TRY(cudaMemcpyAsync(&rec, s->stats_found, sizeof rec, cudaMemcpyDeviceToHost, s->ctx->stream),
                "running statistics check");
    MP_CUDA_TRY(cudaMemsetAsync(s->stats_found, 0, sizeof rec, s->ctx->stream), "running statistics check");
    MP_CUDA_TRY(cudaStreamSynchronize(s->ctx->stream), "running statistics check");
    long long e = -1;
    *node = mp_cuda_stats_record_node(&rec, &e);
    *end = e;
    *reset = (int64_t)rec.reset;
    return MP_OK;
}

static mp_status cuda_optim_steps(mp_trainer *t, int g, int64_t *out) {
    MP_TRY(bounded_wait(t, NULL));
    return mp_cuda_optim_get_step_count(state(t)->ctx, state(t)->opt[g], out);
}

/* R1 / WGAN-GP's unscaled input gradient of the last step, to the host. */
static mp_status cuda_penalty_input_grad(mp_trainer *t, float *dst, size_t n) {
    cuda_step *s = state(t);
    const mp_node in = t->o.penalty.input;
    MP_TRY(bounded_wait(t, NULL));
    const mp_tensor grad = {MP_DTYPE_F32, t->plan->nodes[in].info.out, mp_cuda_penalty_grad(s->pen)};
    return mp_device_tensor_to_host(t->plan, &grad, dst, n);
}

/* Collecting launches are recaptured with the new selection's slots. */
static void cuda_numerics_changed(mp_trainer *t) {
    cuda_step *s = state(t);
    if (!s) return;
    cudaStreamSynchronize(s->ctx->stream); /* nothing queued still writes the old slots */
    for (int i = 0; i < MP_LAUNCH_KINDS; i++) {
        if (s->exec[1][i]) cudaGraphExecDestroy(s->exec[1][i]);
        if (s->graph[1][i]) cudaGraphDestroy(s->graph[1][i]);
        s->exec[1][i] = NULL, s->graph[1][i] = NULL;
    }
}

int mp_cuda_trainer_buckets(const mp_trainer *t) {
    return t && t->bs && t->be == &mp_step_backend_cuda ? mp_grad_allreduce_buckets(state(t)->allreduce) : 0;
}

const mp_step_backend mp_step_backend_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .launch = cuda_launch,
    .check_loss = cuda_check_loss,
    .check_running_stats = cuda_check_running_stats,
    .loss_seed = cuda_loss_seed,
    .reduce_grads = cuda_reduce_grads,
    .reduce_flags = cuda_reduce_flags,
    .unscale_check = cuda_unscale_check,
    .clip = cuda_clip,
    .optim_step = cuda_optim_step,
    .penalty = cuda_penalty,
    .scaler_update = cuda_scaler_update,
    .read_scaler = cuda_read_scaler,
    .wait = cuda_wait,
    .state_to_host = cuda_state_to_host,
    .state_to_device = cuda_state_to_device,
    .stats_overflow = cuda_stats_overflow,
    .optim_steps = cuda_optim_steps,
    .numerics_changed = cuda_numerics_changed,
    .penalty_input_grad = cuda_penalty_input_grad,
};
