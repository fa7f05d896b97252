/* cuda_step.h — one whole training step on the GPU, queued without a single
 * host synchronization and, after the first step, replayed from a CUDA graph
 * captured once per plan (one plan = one input shape; with gradient
 * accumulation one graph per kind of micro-batch: first, middle, last):
 *   forward -> backward of (loss * scale, the scale read on the device)
 *   -> fused unscale + inf/NaN check -> optional clipping -> fused optimizer
 *   over fp32 masters (skips itself on found-inf) refreshing the f16/bf16
 *   weight casts -> loss-scale update on the device.
 * The batch is given with mp_plan_set_input/_set_labels before each step
 * (copied and converted outside the graph). The loss and the scaler state
 * are read back only when asked (those calls synchronize).
 * This header includes no CUDA header: the trainer (plain C) uses it; in a
 * build without the CUDA backend the functions report that (cuda_step_none.c). */
#ifndef MP_CUDA_CUDA_STEP_H
#define MP_CUDA_CUDA_STEP_H

#include "amp/scaler.h"
#include "dist/dist.h"
#include "mixprec.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_cuda_ctx mp_cuda_ctx;

typedef struct {
    mp_optim_opts optim;
    bool loss_scaling;      /* dynamic or static per scaler.dynamic */
    mp_scaler_opts scaler;
    float clip_norm;        /* 0: off */
    float clip_value;       /* 0: off */
    bool no_graph;          /* queue the kernels every step instead of replaying a CUDA graph */
    /* gradient accumulation (0 or 1: off): a step is k micro-batches, each
     * one mp_cuda_step_run with its own input; backward is seeded with
     * (loss scale or 1) / k and adds into the gradients, so k micro-batches
     * of b average like one batch of k*b; the k-th run ends the step
     * (all-reduce, unscale/check, clipping, optimizer, scaler update) */
    int accumulate;
    /* data parallel (NULL: one GPU): rank 0's weights are broadcast at
     * creation, gradients are averaged over the ranks (all-reduce in
     * allreduce_dtype, buckets of bucket_bytes, 0 -> 4 MiB, overlapped with
     * backward) and the found-inf flag is all-reduced, so every rank takes
     * the same step or skips it */
    mp_dist *dist;
    mp_dtype allreduce_dtype;
    size_t bucket_bytes;
    bool fault_injection;   /* tests: enables mp_cuda_step_inject_overflow */
} mp_cuda_step_opts;

typedef struct mp_cuda_step mp_cuda_step;

/* p: a training plan on a CUDA device, the graph's parameters uploaded. */
mp_status mp_cuda_step_create(mp_plan *p, const mp_cuda_step_opts *o, mp_cuda_step **out);
void mp_cuda_step_destroy(mp_cuda_step *s);
/* Queue one step (with accumulation: one micro-batch; lr is used by the
 * step's last) with learning rate lr (no host synchronization). */
mp_status mp_cuda_step_run(mp_cuda_step *s, float lr);
/* The last step's (micro-batch's) loss (unscaled), synchronizing. */
mp_status mp_cuda_step_loss(mp_cuda_step *s, mp_node loss, float *value);
/* Wait until the queued steps have run (bounded by the communicator's
 * timeout in data-parallel runs). */
mp_status mp_cuda_step_wait(mp_cuda_step *s);
/* Tests: the next step's first gradient becomes +inf on this rank after
 * the all-reduce (needs opts.fault_injection). */
mp_status mp_cuda_step_inject_overflow(mp_cuda_step *s);
/* Overflow bookkeeping, for the trainer's reports. Every step checks its
 * loss after forward and its gradients after backward on the device, with
 * or without loss scaling: a non-finite loss is a forward overflow (step
 * skipped, scale kept, counted as consecutive), a non-finite gradient a
 * gradient overflow (step skipped, scale backed off when scaling). */
typedef struct {
    int64_t skipped_steps;           /* both kinds */
    int64_t forward_overflows;
    int consecutive_forward_overflows;
    float scale;                     /* the loss scale now (1 without loss scaling) */
    int64_t last_skip_ago;           /* the last skipped step, in steps before the last queued one; -1: none */
    bool last_skip_forward;          /* that step was a forward overflow */
    float last_skip_scale;           /* the loss scale that step ran with */
    int forward_peak;                /* the longest run of consecutive forward overflows so far */
    int64_t forward_peak_ago;        /* the step that reached it, as last_skip_ago */
} mp_cuda_step_overflows;
/* wait = false: from a host copy each step writes at its end (no
 * synchronization; it may lag the queue by a step or so): cheap enough to
 * ask after every step. wait = true: waits for the queued steps, exact. */
mp_status mp_cuda_step_overflows_read(mp_cuda_step *s, bool wait, mp_cuda_step_overflows *out);
/* Overflow provenance: replays the last queued micro-batch (its input is
 * still in place) and names the first node whose output (and, with
 * backward, then whose gradient, seeded with seed) holds a NaN/inf. Only
 * meaningful when that micro-batch's step is the one that overflowed
 * (last_skip_ago 0: later steps moved the weights and the batch). The
 * parameters and BN statistics are kept; the gradients are overwritten (the
 * step was skipped). One GPU only: in a data-parallel run site->found stays
 * false. A failed search leaves site->found false with site->what "replay
 * failed" (no error); an error means the state could not be put back.
 * Synchronizes; for failure reports, never per step. */
mp_status mp_cuda_step_locate_overflow(mp_cuda_step *s, bool backward, float seed, mp_nonfinite_site *site);
/* Gradient buckets of a data-parallel step (0 on one GPU). */
int mp_cuda_step_buckets(const mp_cuda_step *s);
/* The scaler's state into host (synchronizing). */
mp_status mp_cuda_step_scaler(mp_cuda_step *s, mp_scaler *host);
/* Checkpoints: the whole training state between the device and the host
 * (both synchronize). To the host: the plan's parameters into the graph's
 * host copies (mp_plan_sync_params), the optimizer's state and step count
 * into host_optim (an mp_optim over the same trainable parameters in graph
 * order, as the trainer's) and the scaler's state into host_scaler, which
 * is NULL exactly when the step has no loss scaling. From the host, before
 * the next step: the same, plus the low-precision weight casts refreshed
 * from the uploaded masters. Every device buffer is overwritten in place, so
 * the captured CUDA graph stays valid. Neither call is collective: in a
 * multi-GPU run each rank moves its own state. */
mp_status mp_cuda_step_state_to_host(mp_cuda_step *s, mp_optim *host_optim, mp_scaler *host_scaler);
mp_status mp_cuda_step_state_from_host(mp_cuda_step *s, const mp_optim *host_optim, const mp_scaler *host_scaler);
/* Device memory in use on the current device (cudaMemGetInfo: total - free),
 * for peak-memory reports as differences around a run. */
size_t mp_cuda_used_bytes(void);

/* Accessors of a CUDA plan (cuda_plan.c). */
mp_cuda_ctx *mp_cuda_plan_ctx(const mp_plan *p);
/* Graph parameter k's f32 master; NULL for a weight without one (the fp16
 * and bf16 policies: its low cast, mp_cuda_plan_low, is the weight). */
float *mp_cuda_plan_param(const mp_plan *p, int k);
void *mp_cuda_plan_low(const mp_plan *p, int k, mp_dtype *dtype);
void mp_cuda_plan_seed_from_device(mp_plan *p, const float *seed_dev);
void mp_cuda_plan_casts_by_optimizer(mp_plan *p, bool on);

#ifdef __cplusplus
}
#endif
#endif
