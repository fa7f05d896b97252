/* batchnorm2d_pick.cu — see batchnorm2d_pick.h. */
#include "cuda/batchnorm2d_pick.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "cuda/choice_cache.h"
#include "cuda/cuda_kernel_util.cuh"
#include "cuda/graph_memsets.h"

enum { REPS = 3, TRIALS = 3 }; /* forward + backward REPS times per graph; median of TRIALS replays */

typedef struct {
    int gpu_model, dtype, relu, add, candidates; /* candidates: bit k for mp_bn_run k */
    int dims[4];
} pick_key;

static mp_choice_cache cache = MP_CHOICE_CACHE_INIT(pick_key, mp_bn_choice);

/* Device scratch for one call: the activations and their gradients, the
 * residual and its gradient (add), the parameters, saved and workspace. */
typedef struct {
    void *act[6];
    float *params;
    void *saved, *workspace;
} scratch;

static void scratch_free(scratch *s) {
    for (int i = 0; i < 6; i++) cudaFree(s->act[i]);
    cudaFree(s->params), cudaFree(s->saved), cudaFree(s->workspace);
}

/* The call over scratch: x, y, dy, dx (+ resid, d_resid), gamma, beta and
 * the running statistics f32, every byte 0x3C (finite, positive values in
 * every dtype: the passes' speed does not depend on them), set on the
 * context's stream (non-blocking: the legacy stream's memsets would not be
 * ordered before the timed passes). The executor may also ask a backward
 * to add into the residual's gradient, which only our kernels do: such
 * calls run ours whatever the pick, so the pick times the common call. */
static bool scratch_call(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                         const mp_bn_candidates *cand, scratch *s, mp_op_call *c) {
    memset(s, 0, sizeof *s);
    const mp_shape *x = &info->in[0];
    const int C = x->dims[1], n_act = cfg->add_after ? 6 : 4;
    const size_t bytes = (size_t)mp_shape_numel(x) * mp_dtype_size(cfg->storage);
    bool ok = true;
    for (int i = 0; ok && i < n_act; i++)
        ok = cudaMalloc(&s->act[i], bytes) == cudaSuccess &&
             cudaMemsetAsync(s->act[i], 0x3C, bytes, ctx->stream) == cudaSuccess;
    ok = ok && cudaMalloc((void **)&s->params, 6 * (size_t)C * sizeof(float)) == cudaSuccess &&
         cudaMemsetAsync(s->params, 0x3C, 6 * (size_t)C * sizeof(float), ctx->stream) == cudaSuccess &&
         cudaMalloc(&s->saved, cand->saved ? cand->saved : 1) == cudaSuccess &&
         cudaMalloc(&s->workspace, cand->workspace ? cand->workspace : 1) == cudaSuccess &&
         cudaStreamSynchronize(ctx->stream) == cudaSuccess;
    if (!ok) {
        scratch_free(s);
        cudaGetLastError(); /* the failed allocation's error is not the stream's */
        return false;
    }
    memset(c, 0, sizeof *c);
    c->desc = d, c->info = info, c->training = true, c->relu_after = cfg->relu_after, c->n_in = 1;
    const mp_tensor act = {cfg->storage, *x, NULL};
    c->in[0] = act, c->out = act, c->d_out = act, c->d_in[0] = act;
    c->in[0].data = s->act[0], c->out.data = s->act[1], c->d_out.data = s->act[2], c->d_in[0].data = s->act[3];
    if (cfg->add_after) {
        c->resid = act, c->d_resid = act;
        c->resid.data = s->act[4], c->d_resid.data = s->act[5];
    }
    const mp_shape pc = {1, {C}};
    for (int k = 0; k < 4; k++) c->param[k] = (mp_tensor){MP_DTYPE_F32, pc, s->params + (size_t)k * C};
    for (int k = 0; k < 2; k++) c->d_param[k] = (mp_tensor){MP_DTYPE_F32, pc, s->params + (size_t)(4 + k) * C};
    c->saved = s->saved, c->workspace = s->workspace;
    return true;
}

/* GPU ms of one forward + backward with the op state `state`: REPS of them
 * captured in a graph, the median of TRIALS replays after a warm-up; < 0
 * when anything fails (the error is left for the caller to clear). */
static float time_passes(mp_cuda_ctx *ctx, const mp_bn_candidates *cand, mp_op_call *c, void *state) {
    c->state = state;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    float t[TRIALS], ms = -1.f;
    if (cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError(); /* not the next kernel's error */
        return -1.f;
    }
    mp_status st = MP_OK;
    for (int r = 0; st == MP_OK && r < REPS; r++) {
        st = cand->forward(ctx, c);
        if (st == MP_OK) st = cand->backward(ctx, c);
    }
    const bool captured = cudaStreamEndCapture(ctx->stream, &graph) == cudaSuccess && st == MP_OK;
    /* as the training step's graph will run it (step_cuda.c), equivalent where the conversion stops */
    if (captured && !mp_env_get()->no_graph_memset_kernels && mp_cuda_graph_memsets_to_kernels(graph, NULL) != MP_OK)
        cudaGetLastError();
    bool ok = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess &&
              cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess &&
              cudaGraphLaunch(exec, ctx->stream) == cudaSuccess;
    for (int k = 0; ok && k < TRIALS; k++)
        ok = cudaEventRecord(ev[0], ctx->stream) == cudaSuccess && cudaGraphLaunch(exec, ctx->stream) == cudaSuccess &&
             cudaEventRecord(ev[1], ctx->stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&t[k], ev[0], ev[1]) == cudaSuccess;
    if (ok) ms = mp_median_ms(t, TRIALS) / REPS;
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    for (int k = 0; k < 2; k++)
        if (ev[k]) cudaEventDestroy(ev[k]);
    cudaStreamSynchronize(ctx->stream);
    cudaGetLastError();
    return ms;
}

mp_bn_choice mp_bn_pick(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                        const mp_bn_candidates *cand) {
    void *const states[3] = {cand->three, cand->one, cand->cudnn}; /* by mp_bn_run */
    const mp_shape *x = &info->in[0];
    pick_key key;
    memset(&key, 0, sizeof key);
    key.gpu_model = mp_cuda_gpu_model(ctx), key.dtype = (int)cfg->storage;
    key.relu = cfg->relu_after, key.add = cfg->add_after;
    for (int k = 0; k < 3; k++) key.candidates |= states[k] ? 1 << k : 0;
    for (int i = 0; i < x->ndim && i < 4; i++) key.dims[i] = x->dims[i];
    mp_bn_choice pick;
    if (mp_choice_get(&cache, &key, &pick)) return pick;
    pthread_mutex_lock(&cache.search);
    if (mp_choice_get(&cache, &key, &pick)) {
        pthread_mutex_unlock(&cache.search);
        return pick;
    }
    scratch s;
    mp_op_call c;
    float ms[3] = {-1.f, -1.f, -1.f};
    if (scratch_call(ctx, d, info, cfg, cand, &s, &c)) {
        for (int k = 0; k < 3; k++)
            if (states[k]) ms[k] = time_passes(ctx, cand, &c, states[k]);
        scratch_free(&s);
    }
    mp_clear_error();
    int best = -1, timed = 0;
    for (int k = 0; k < 3; k++)
        if (states[k] && ms[k] > 0.f) {
            timed++;
            if (best < 0 || ms[k] < ms[best]) best = k;
        }
    if (best < 0) best = cand->cudnn ? MP_BN_RUN_CUDNN : cand->three ? MP_BN_RUN_THREE : MP_BN_RUN_ONE;
    pick.run = (mp_bn_run)best;
    /* ours for the calls cuDNN's kernels do not take: one kernel where it timed faster than three (or three is
       not offered) */
    pick.ours_one = cand->one && (!cand->three || (ms[MP_BN_RUN_ONE] > 0.f && (!(ms[MP_BN_RUN_THREE] > 0.f) ||
                                                                                ms[MP_BN_RUN_ONE] < ms[MP_BN_RUN_THREE])));
    if (timed >= 2) mp_choice_put(&cache, &key, &pick);
    pthread_mutex_unlock(&cache.search);
    if (mp_env_get()->cudnn_debug) {
        static const char *const names[3] = {"ours (three kernels per pass)", "ours (one kernel per pass)", "cuDNN's"};
        char sh[64], t[3][24];
        for (int k = 0; k < 3; k++) {
            if (!states[k]) snprintf(t[k], sizeof t[k], "-");
            else if (ms[k] > 0.f) snprintf(t[k], sizeof t[k], "%.4f ms", ms[k]);
            else snprintf(t[k], sizeof t[k], "not timed");
        }
        fprintf(stderr, "mixprec: batchnorm2d '%s' %s %s%s: forward + backward, ours three %s, ours one %s, cuDNN %s: %s%s\n",
                d->name ? d->name : "?", mp_shape_str(x, sh, sizeof sh), mp_dtype_name(cfg->storage),
                cfg->add_after ? (cfg->relu_after ? " +add+ReLU" : " +add") : cfg->relu_after ? " +ReLU" : "", t[0],
                t[1], t[2],
                timed ? "" : "none timed, ", names[best]);
    }
    return pick;
}
