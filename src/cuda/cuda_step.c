/* cuda_step.c — the GPU training step of cuda_step.h: built once from a
 * CUDA plan (optimizer and scaler state on the device), queued directly the
 * first time and captured into a CUDA graph that later steps replay. With
 * gradient accumulation a step is k micro-batches, and each kind of
 * micro-batch (first: gradients overwritten; middle: added; last: added,
 * then all-reduce, unscale/check, optimizer, scaler update) has its graph.
 * Every step checks its loss and gradients on the device, and writes its
 * overflow counts to pinned host memory that the trainer reads without
 * synchronizing; a step that overflowed can be replayed to name the op. */
#include "cuda/cuda_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "cuda/cuda_optim.h"
#include "cuda/cuda_plan_kernels.h"
#include "dist/grad_allreduce.h"
#include "graph/device.h"
#include "graph/plan.h"

/* What a launch does: a whole step, or one micro-batch of an accumulated one. */
typedef enum { MICRO_MIDDLE, MICRO_FIRST, MICRO_LAST, WHOLE_STEP, N_KINDS } micro_kind;

static micro_kind kind_of(int micro, int k) {
    const bool first = micro == 0, last = micro == k - 1;
    return first && last ? WHOLE_STEP : first ? MICRO_FIRST : last ? MICRO_LAST : MICRO_MIDDLE;
}

struct mp_cuda_step {
    mp_plan *p;
    mp_cuda_step_opts o;
    mp_cuda_ctx *ctx;
    mp_cuda_grads *grads;
    mp_cuda_optim *opt;
    mp_cuda_scaler_state *scaler;   /* NULL without loss scaling */
    mp_cuda_scaler_state *check;    /* found-inf and overflow counts: scaler, or a static scale of 1 */
    mp_cuda_scaler_state *mirror;   /* pinned host copy of *check, written at each step's end */
    const float *loss;              /* device f32 loss, checked after forward */
    long long ends_queued;          /* step ends queued since the check state was last uploaded */
    float *lr;                      /* device learning rate, written before each replay */
    float *micro_seed;              /* accumulation: the check state's scale / k, the seed of every micro-batch */
    int *inject;                    /* device flag of mp_cuda_step_inject_overflow, or NULL */
    void *first_grad;               /* where the injection writes */
    mp_dtype first_grad_dtype;
    mp_grad_allreduce *allreduce;   /* data parallel, else NULL */
    cudaEvent_t queued[2];          /* data parallel: the ends of the last two launches */
    int accumulate;                 /* k >= 1 micro-batches per step */
    int micro;                      /* the next micro-batch's index in its step */
    cudaGraph_t graph[N_KINDS];     /* per micro_kind */
    cudaGraphExec_t exec[N_KINDS];
    bool queued_once[N_KINDS];      /* the first of each kind runs directly (warms the libraries) */
    int steps;                      /* launches (micro-batches) queued */
};

size_t mp_cuda_used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
}

/* The optimizer refreshes the low-precision casts after each update and the
 * forward reads them as they are: cast them from the masters once at the
 * start and after the masters were uploaded. */
static mp_status cast_weights_now(mp_plan *p) {
    mp_cuda_plan_casts_by_optimizer(p, false);
    mp_status st = mp_device_forward_begin(p);
    mp_cuda_plan_casts_by_optimizer(p, true);
    return st;
}

/* Where backward reads its seed: the check state's scale (the loss scale,
 * or a static 1 without scaling), over k when accumulating. */
static const float *backward_seed(const mp_cuda_step *s) {
    return s->accumulate > 1 ? s->micro_seed : &s->check->scale;
}

/* The pinned host copy of the check state, refreshed from the device
 * (synchronizing; at creation and after an upload). */
static mp_status refresh_mirror(mp_cuda_step *s) {
    MP_CUDA_TRY(cudaMemcpyAsync(s->mirror, s->check, sizeof *s->mirror, cudaMemcpyDeviceToHost, s->ctx->stream),
                "overflow counts");
    return mp_cuda_check(cudaStreamSynchronize(s->ctx->stream), "cudaStreamSynchronize", "overflow counts");
}

/* Gradients kept in f16/bf16 (the plan's low_grads) hold what backward
 * wrote, rounded once as on the CPU; a step that rescales them in place
 * (unscale, clipping) or sums them over ranks would round them again. */
static mp_status check_low_grads(const mp_plan *p, const mp_cuda_step_opts *o, const mp_dtype *gdt, int n) {
    bool low = false;
    for (int j = 0; j < n; j++) low |= gdt[j] != MP_DTYPE_F32;
    if (!low) return MP_OK;
    const char *why = o->loss_scaling ? "loss scaling" : o->clip_norm > 0 || o->clip_value > 0 ? "gradient clipping"
                      : o->dist                                                            ? "data parallelism"
                                                                                            : NULL;
    if (!why) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG,
                    "cuda step: the plan keeps %s weight gradients in f16/bf16 (low_grads), which %s would round "
                    "twice; create the plan without low_grads",
                    mp_precision_name((mp_precision)p->g->precision), why);
}

mp_status mp_cuda_step_create(mp_plan *p, const mp_cuda_step_opts *o, mp_cuda_step **out) {
    *out = NULL;
    if (!p || !p->dev || !p->o.training)
        return mp_error(MP_ERR_INVALID_ARG, "cuda step: needs a training plan on a CUDA device");
    if (o->accumulate > 1 && mp_plan_grads_in_arena(p))
        return mp_error(MP_ERR_INVALID_ARG,
                        "cuda step: accumulating %d micro-batches needs gradients that outlive a step, but the plan "
                        "keeps them in its arena (grads_in_arena)",
                        o->accumulate);
    mp_cuda_step *s = calloc(1, sizeof *s);
    if (!s) return mp_error(MP_ERR_NOMEM, "cuda step: out of memory");
    s->p = p;
    s->o = *o;
    s->ctx = mp_cuda_plan_ctx(p);
    s->accumulate = o->accumulate > 1 ? o->accumulate : 1;
    mp_graph *g = p->g;
    int n = 0;
    for (int k = 0; k < g->n_params; k++) n += g->params[k].spec.trainable;
    void **gp = calloc((size_t)n + 1, sizeof *gp);
    mp_dtype *gdt = calloc((size_t)n + 1, sizeof *gdt);
    int64_t *numel = calloc((size_t)n + 1, sizeof *numel);
    mp_cuda_param_ref *refs = calloc((size_t)n + 1, sizeof *refs);
    mp_status st = gp && gdt && numel && refs ? MP_OK : mp_error(MP_ERR_NOMEM, "cuda step: out of memory");
    int j = 0;
    for (int k = 0; st == MP_OK && k < g->n_params; k++) {
        const mp_gparam *par = &g->params[k];
        if (!par->spec.trainable) continue;
        mp_dtype low_dtype = MP_DTYPE_F32;
        void *low = mp_cuda_plan_low(p, k, &low_dtype);
        gp[j] = mp_device_grad(p, k);
        gdt[j] = mp_plan_grad_dtype(p, k);
        numel[j] = mp_shape_numel(&par->spec.shape);
        refs[j] = (mp_cuda_param_ref){.param = mp_cuda_plan_param(p, k), .grad = gp[j], .low = low,
                                      .low_dtype = low ? low_dtype : MP_DTYPE_F32, .grad_dtype = gdt[j],
                                      .n = numel[j],
                                      .decay = !strcmp(par->spec.name, "weight") &&
                                               g->nodes[par->node].desc.kind != MP_OP_BATCHNORM2D,
                                      .no_master = !mp_precision_has_master((mp_precision)g->precision),
                                      .name = par->name,
                                      /* no f32 array (low_only): SGD momentum in the weight's dtype */
                                      .state_dtype = !mp_cuda_plan_param(p, k) && low ? low_dtype : MP_DTYPE_F32};
        j++;
    }
    if (st == MP_OK) st = check_low_grads(p, o, gdt, n);
    if (st == MP_OK) st = mp_cuda_grads_create_typed(s->ctx, gp, gdt, numel, n, &s->grads);
    if (st == MP_OK) st = mp_cuda_optim_create(s->ctx, o->optim, refs, n, &s->opt);
    if (st == MP_OK && n > 0) s->first_grad = gp[0], s->first_grad_dtype = gdt[0];
    free(gp);
    free(gdt);
    free(numel);
    free(refs);
    if (st == MP_OK) {
        mp_scaler host; /* without loss scaling: a static scale of 1 that only checks */
        st = mp_scaler_init(&host, o->loss_scaling ? o->scaler : (mp_scaler_opts){.dynamic = false, .init_scale = 1});
        if (st == MP_OK) st = mp_cuda_scaler_create(s->ctx, &host, &s->check);
        if (o->loss_scaling) s->scaler = s->check;
    }
    if (st == MP_OK) {
        st = mp_cuda_check(cudaMallocHost((void **)&s->mirror, sizeof *s->mirror), "cudaMallocHost", "cuda step");
        if (st == MP_OK) st = refresh_mirror(s);
    }
    if (st == MP_OK) {
        const mp_tensor *loss = &p->nodes[p->losses[0]].call.out;
        s->loss = loss->data;
        if (loss->dtype != MP_DTYPE_F32 || mp_tensor_numel(loss) != 1)
            st = mp_error(MP_ERR_INVALID_ARG, "cuda step: the loss '%s' is not one f32 value", g->nodes[p->losses[0]].name);
    }
    if (st == MP_OK) st = mp_cuda_check(cudaMalloc((void **)&s->lr, 2 * sizeof(float)), "cudaMalloc", "cuda step");
    if (st == MP_OK) s->micro_seed = s->lr + 1;
    if (st == MP_OK && o->fault_injection) {
        st = mp_cuda_check(cudaMalloc((void **)&s->inject, sizeof(int)), "cudaMalloc", "cuda step");
        if (st == MP_OK) st = mp_cuda_check(cudaMemsetAsync(s->inject, 0, sizeof(int), s->ctx->stream), "cudaMemsetAsync",
                                            "cuda step");
    }
    for (int i = 0; st == MP_OK && o->dist && i < 2; i++)
        st = mp_cuda_check(cudaEventCreateWithFlags(&s->queued[i], cudaEventDisableTiming), "cudaEventCreate",
                           "cuda step");
    if (st == MP_OK && o->dist) {
        st = mp_grad_allreduce_create(o->dist, p, o->allreduce_dtype, o->bucket_bytes, &s->allreduce);
        if (st == MP_OK) st = mp_dist_enqueue_begin(o->dist);
        if (st == MP_OK) {
            st = mp_dist_broadcast_params(o->dist, p); /* every rank starts from rank 0's weights */
            mp_dist_enqueue_end(o->dist);
        }
    }
    if (st != MP_OK) {
        mp_cuda_step_destroy(s);
        return st;
    }
    st = cast_weights_now(p);
    mp_cuda_plan_seed_from_device(p, backward_seed(s));
    if (st != MP_OK) {
        mp_cuda_step_destroy(s);
        return st;
    }
    *out = s;
    return MP_OK;
}

void mp_cuda_step_destroy(mp_cuda_step *s) {
    if (!s) return;
    if (s->ctx) cudaStreamSynchronize(s->ctx->stream);
    for (int i = 0; i < N_KINDS; i++) {
        if (s->exec[i]) cudaGraphExecDestroy(s->exec[i]);
        if (s->graph[i]) cudaGraphDestroy(s->graph[i]);
    }
    mp_grad_allreduce_destroy(s->allreduce);
    for (int i = 0; i < 2; i++)
        if (s->queued[i]) cudaEventDestroy(s->queued[i]);
    cudaFree(s->inject);
    mp_cuda_grads_destroy(s->grads);
    mp_cuda_optim_destroy(s->opt);
    mp_cuda_scaler_destroy(s->check);
    if (s->mirror) cudaFreeHost(s->mirror);
    cudaFree(s->lr);
    if (s->p && s->p->dev) {
        mp_cuda_plan_casts_by_optimizer(s->p, false);
        mp_cuda_plan_seed_from_device(s->p, NULL);
    }
    free(s);
}

/* One launch's work in stream order (what its graph captures). */
static mp_status enqueue(mp_cuda_step *s, micro_kind kind) {
    mp_plan *p = s->p;
    const bool first = kind == MICRO_FIRST || kind == WHOLE_STEP, last = kind == MICRO_LAST || kind == WHOLE_STEP;
    for (int k = 0; k < p->g->n_params; k++) p->g->params[k].grad_fresh = first; /* overwrite, or add */
    if (s->accumulate > 1) /* every micro-batch averages like 1/k of one batch of k*b */
        MP_TRY(mp_cuda_scale_scalar(s->ctx, s->micro_seed, &s->check->scale, 1.0f / (float)s->accumulate));
    MP_TRY(mp_plan_forward(p));
    MP_TRY(mp_cuda_check_loss(s->ctx, s->loss, s->check)); /* a forward overflow skips the step, keeps the scale */
    /* gradients are all-reduced as backward finishes them in the last
     * micro-batch only: the hook stays off before */
    mp_status (*hook)(void *, int) = p->grad_ready;
    if (!last) p->grad_ready = NULL;
    mp_status st = mp_plan_backward(p, 1.0f); /* the seed comes from the device (scale or 1, over k) */
    p->grad_ready = hook;
    MP_TRY(st);
    if (!last) return MP_OK;
    if (s->allreduce) MP_TRY(mp_grad_allreduce_finish(s->allreduce));
    if (s->inject && s->first_grad)
        MP_TRY(mp_cuda_inject_inf(s->ctx, s->inject, s->first_grad, s->first_grad_dtype));
    MP_TRY(mp_cuda_unscale_check(s->ctx, s->check, s->grads)); /* without scaling: the check alone */
    if (s->o.dist) MP_TRY(mp_dist_allreduce_flag(s->o.dist, p, &s->check->found_inf));
    if (s->o.clip_value > 0) MP_TRY(mp_cuda_clip_by_value(s->ctx, s->grads, s->o.clip_value));
    if (s->o.clip_norm > 0) MP_TRY(mp_cuda_clip_by_norm(s->ctx, s->grads, s->o.clip_norm, NULL));
    mp_cuda_step_args a = {.lr_device = s->lr, .found_inf = &s->check->found_inf};
    MP_TRY(mp_cuda_optim_step(s->ctx, s->opt, &a));
    MP_TRY(mp_cuda_scaler_update(s->ctx, s->check));
    /* the host reads overflow counts from here without synchronizing */
    return mp_cuda_check(cudaMemcpyAsync(s->mirror, s->check, sizeof *s->mirror, cudaMemcpyDeviceToHost, s->ctx->stream),
                         "cudaMemcpyAsync", "overflow counts to the host");
}

static mp_status capture(mp_cuda_step *s, micro_kind kind) {
    MP_CUDA_TRY(cudaStreamBeginCapture(s->ctx->stream, cudaStreamCaptureModeThreadLocal), "CUDA graph capture");
    mp_status st = enqueue(s, kind);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s->ctx->stream, &graph);
    if (st != MP_OK) {
        if (graph) cudaGraphDestroy(graph);
        return st;
    }
    MP_CUDA_TRY(e, "CUDA graph capture of the training step");
    cudaError_t ie = cudaGraphInstantiate(&s->exec[kind], graph, 0);
    if (ie != cudaSuccess) {
        cudaGraphDestroy(graph);
        s->exec[kind] = NULL;
        return mp_cuda_check(ie, "cudaGraphInstantiate", "CUDA graph instantiation of the training step");
    }
    s->graph[kind] = graph;
    return MP_OK;
}

static mp_status run_step(mp_cuda_step *s, float lr) {
    const micro_kind kind = kind_of(s->micro, s->accumulate);
    MP_TRY(mp_cuda_set_f32(s->ctx, s->lr, lr));
    if (s->o.no_graph || !s->queued_once[kind]) { /* the first also warms up cuDNN/cuBLASLt */
        MP_TRY(enqueue(s, kind));
        s->queued_once[kind] = true;
    } else {
        const bool captured_now = !s->exec[kind]; /* the capture's mp_plan_forward counted this step */
        if (captured_now) MP_TRY(capture(s, kind));
        MP_CUDA_TRY(cudaGraphLaunch(s->exec[kind], s->ctx->stream), "CUDA graph launch of the training step");
        if (!captured_now) s->p->step++; /* as mp_plan_forward counts queued steps */
    }
    s->micro = (s->micro + 1) % s->accumulate;
    s->steps++;
    if (s->micro == 0) s->ends_queued++;
    return MP_OK;
}

/* Wait for event ev (NULL: everything queued) on the step's stream; in a
 * data-parallel run a wait the watchdog bounds, and an abort explains a
 * failed wait better than the CUDA error does. */
static mp_status bounded_wait(mp_cuda_step *s, cudaEvent_t ev) {
    mp_dist_wait_begin(s->o.dist);
    cudaError_t e = ev ? cudaEventSynchronize(ev) : cudaStreamSynchronize(s->ctx->stream);
    mp_dist_wait_end(s->o.dist);
    MP_TRY(mp_dist_check(s->o.dist));
    return mp_cuda_check(e, ev ? "cudaEventSynchronize" : "cudaStreamSynchronize", "training step");
}

/* Data parallel: at most two launches (steps, or micro-batches when
 * accumulating) in flight, so that a rank whose peer died has little queued
 * behind the stopped collective, and a wait for a peer is a bounded wait the
 * watchdog sees. */
mp_status mp_cuda_step_run(mp_cuda_step *s, float lr) {
    if (!(lr >= 0) || lr > 1e30f) return mp_error(MP_ERR_INVALID_ARG, "cuda step: learning rate %g", (double)lr);
    if (!s->o.dist) return run_step(s, lr);
    cudaEvent_t ev = s->queued[s->steps % 2];
    if (s->steps >= 2) MP_TRY(bounded_wait(s, ev));
    MP_TRY(mp_dist_enqueue_begin(s->o.dist));
    mp_status st = run_step(s, lr);
    if (st == MP_OK) st = mp_cuda_check(cudaEventRecord(ev, s->ctx->stream), "cudaEventRecord", "training step");
    mp_dist_enqueue_end(s->o.dist);
    return st;
}

mp_status mp_cuda_step_wait(mp_cuda_step *s) { return bounded_wait(s, NULL); }

mp_status mp_cuda_step_inject_overflow(mp_cuda_step *s) {
    if (!s->inject) return mp_error(MP_ERR_INVALID_ARG, "cuda step: created without fault_injection");
    static const int one = 1;
    MP_CUDA_TRY(cudaMemcpyAsync(s->inject, &one, sizeof one, cudaMemcpyHostToDevice, s->ctx->stream), "fault injection");
    return mp_cuda_check(cudaStreamSynchronize(s->ctx->stream), "cudaStreamSynchronize", "fault injection");
}

int mp_cuda_step_buckets(const mp_cuda_step *s) { return s ? mp_grad_allreduce_buckets(s->allreduce) : 0; }

mp_status mp_cuda_step_loss(mp_cuda_step *s, mp_node loss, float *value) {
    MP_TRY(mp_cuda_step_wait(s));
    return mp_plan_read(s->p, loss, value, 1);
}

mp_status mp_cuda_step_scaler(mp_cuda_step *s, mp_scaler *host) {
    if (!s->scaler) return mp_error(MP_ERR_INVALID_ARG, "cuda step: no loss scaling in this run");
    return mp_cuda_scaler_download(s->ctx, s->scaler, host);
}

/* The host and the step agree on loss scaling (the trainer passes its
 * scaler only when the run scales the loss). */
static mp_status check_scaler_given(const mp_cuda_step *s, bool given, const char *what) {
    if (given == (s->scaler != NULL)) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "cuda step %s: %s", what,
                    given ? "a host loss scaler was given but this run has no loss scaling"
                          : "this run scales the loss but no host loss scaler was given");
}

/* The state of a step boundary only: mid-accumulation gradients are not saved. */
static mp_status check_at_boundary(const mp_cuda_step *s, const char *what) {
    if (s->micro == 0) return MP_OK;
    return mp_error(MP_ERR_INVALID_ARG, "cuda step %s: in the middle of a step (%d of %d micro-batches queued)", what,
                    s->micro, s->accumulate);
}

mp_status mp_cuda_step_state_to_host(mp_cuda_step *s, mp_optim *host_optim, mp_scaler *host_scaler) {
    const char *what = "state to host";
    MP_TRY(check_at_boundary(s, what));
    MP_TRY(check_scaler_given(s, host_scaler != NULL, what));
    MP_TRY(mp_plan_sync_params(s->p, true));
    MP_TRY(mp_cuda_optim_download(s->ctx, s->opt, host_optim));
    return host_scaler ? mp_cuda_scaler_download(s->ctx, s->scaler, host_scaler) : MP_OK;
}

mp_status mp_cuda_step_state_from_host(mp_cuda_step *s, const mp_optim *host_optim, const mp_scaler *host_scaler) {
    const char *what = "state from host";
    MP_TRY(check_at_boundary(s, what));
    MP_TRY(check_scaler_given(s, host_scaler != NULL, what));
    MP_TRY(mp_plan_sync_params(s->p, false));
    MP_TRY(cast_weights_now(s->p));
    MP_TRY(mp_cuda_optim_upload(s->ctx, host_optim, s->opt));
    if (!host_scaler) return MP_OK;
    MP_TRY(mp_cuda_scaler_upload(s->ctx, host_scaler, s->scaler));
    s->ends_queued = 0; /* the upload restarted the device's count */
    return refresh_mirror(s);
}

static void overflows_from(const mp_cuda_step *s, const volatile mp_cuda_scaler_state *d, mp_cuda_step_overflows *out) {
    const long long last = d->last_skip_end, peak = d->forward_peak_end;
    *out = (mp_cuda_step_overflows){.skipped_steps = d->skipped_steps, .forward_overflows = d->forward_overflows,
                                    .consecutive_forward_overflows = d->consecutive_forward_overflows,
                                    .scale = d->scale, .last_skip_ago = last < 0 ? -1 : s->ends_queued - 1 - last,
                                    .last_skip_forward = d->last_found >= MP_CUDA_FOUND_FORWARD,
                                    .last_skip_scale = d->last_skip_scale, .forward_peak = d->forward_peak,
                                    .forward_peak_ago = peak < 0 ? -1 : s->ends_queued - 1 - peak};
}

mp_status mp_cuda_step_overflows_read(mp_cuda_step *s, bool wait, mp_cuda_step_overflows *out) {
    if (!wait) {
        overflows_from(s, s->mirror, out);
        return MP_OK;
    }
    MP_TRY(bounded_wait(s, NULL));
    mp_cuda_scaler_state d;
    MP_CUDA_TRY(cudaMemcpyAsync(&d, s->check, sizeof d, cudaMemcpyDeviceToHost, s->ctx->stream), "overflow counts");
    MP_CUDA_TRY(cudaStreamSynchronize(s->ctx->stream), "overflow counts");
    overflows_from(s, &d, out);
    return MP_OK;
}

/* The replay runs directly (no graph), seeded from the host, without the
 * data-parallel hook; masters and BN statistics go to the host first and
 * come back after, as the replayed forward updates the statistics again. */
mp_status mp_cuda_step_locate_overflow(mp_cuda_step *s, bool backward, float seed, mp_nonfinite_site *site) {
    memset(site, 0, sizeof *site);
    site->node = -1;
    if (s->o.dist) return MP_OK; /* a replay on one rank would wait for its peers' collectives */
    mp_plan *p = s->p;
    MP_TRY(mp_cuda_step_wait(s));
    MP_TRY(mp_plan_sync_params(p, true));
    mp_status st = mp_plan_find_nonfinite_forward(p, site);
    if (st == MP_OK && backward && !site->found) {
        mp_status (*hook)(void *, int) = p->grad_ready;
        p->grad_ready = NULL;
        for (int k = 0; k < p->g->n_params; k++) p->g->params[k].grad_fresh = true;
        mp_cuda_plan_seed_from_device(p, NULL);
        st = mp_plan_backward_checked(p, seed, site);
        mp_cuda_plan_seed_from_device(p, backward_seed(s));
        p->grad_ready = hook;
    }
    if (st != MP_OK) { /* the search failed: not located; putting the state back must not */
        memset(site, 0, sizeof *site);
        site->node = -1;
        snprintf(site->what, sizeof site->what, "replay failed");
        mp_clear_error();
    }
    return mp_plan_sync_params(p, false);
}
