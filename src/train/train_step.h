/* train_step.h — one optimizer step under a precision policy: micro-batches
 * (gradient accumulation), loss scaling, the fused unscale + inf/NaN check,
 * overflow provenance, clipping on the true gradients, the optimizer, and
 * re-rounding of weights for policies without master weights. */
#ifndef MP_TRAIN_TRAIN_STEP_H
#define MP_TRAIN_TRAIN_STEP_H

#include "cuda/cuda_step.h"
#include "data/loader.h"
#include "graph/graph.h"
#include "train/trainer.h"

typedef struct {
    mp_model *m;
    const mp_train_opts *o;
    mp_plan *plan;
    mp_optim *opt;
    mp_scaler scaler;
    int n_grads;
    float **grads;            /* trainable gradients, for unscale and clipping */
    int64_t *grad_sizes;
    float *buffers_backup;    /* BN running stats, restored after a replay */
    float *logits;            /* (batch, classes) */
    int classes;
    int consecutive_forward;  /* without a scaler */
    int64_t skipped;
    FILE *events;
    mp_cuda_step *gpu;        /* non-NULL: the plan is on a GPU and steps run there */
    bool read_now;            /* GPU: read this step's loss whatever read_every says (an epoch's last) */
    mp_cuda_step_overflows gpu_seen; /* GPU: the overflow counts already reported */
    int64_t gpu_last_step;    /* GPU: the global step last queued */
    int gpu_rebuilds;         /* GPU: plans rebuilt by --auto-fallback */
} mp_step_ctx;

typedef struct {
    bool skipped;
    double loss_sum;          /* over micro-batches */
    int64_t correct, seen;
} mp_step_result;

/* Build the plan, optimizer and scaler for m (graph params already set). */
mp_status mp_step_ctx_init(mp_step_ctx *c, mp_model *m, const mp_train_opts *o);
void mp_step_ctx_free(mp_step_ctx *c);
/* GPU runs: copy parameters to the graph's host copies and the loss
 * scaler's state into c->scaler, and report overflows not yet reported
 * (synchronizes; once per epoch). */
mp_status mp_step_ctx_sync_gpu(mp_step_ctx *c);
/* Checkpoints of GPU runs; no-ops on the CPU, where the host state is the
 * state. Before saving: the device's parameters, optimizer and scaler state
 * into the graph's host copies, c->opt and c->scaler (synchronizes). After
 * loading a checkpoint into those: all of it back to the device, before the
 * next step. */
mp_status mp_step_ctx_state_to_host(mp_step_ctx *c);
mp_status mp_step_ctx_state_to_device(mp_step_ctx *c);
/* One optimizer step over o->accumulate micro-batches from the loader.
 * global_step names the step in messages. */
mp_status mp_train_step(mp_step_ctx *c, mp_loader *ld, float lr, int64_t global_step, mp_step_result *r);

#endif
