/* step_backend.h — the few primitives the one training step (step.c) needs
 * from the device the plan lives on, as a table of functions chosen when the
 * trainer is made: the host's (step_host.c: plain loops over the graph's f32
 * gradients, the host optimizers) and the GPU's (cuda/step_cuda.c: fused
 * kernels that read every decision from device memory, so a whole step is
 * captured once into a CUDA graph and replayed). Both update the same
 * mp_scaler struct with the same rule (amp/scaler_rule.h).
 *
 * The stream-order primitives are called from mp_step_enqueue in this order
 * per launch: check_loss (each loss), check_running_stats; per group:
 * loss_seed + backward per loss, then on the step's last launch
 * reduce_grads, unscale_check, reduce_flags, clip, optim_step; finally
 * scaler_update. */
#ifndef MP_TRAIN_STEP_BACKEND_H
#define MP_TRAIN_STEP_BACKEND_H

#include "amp/scaler.h"
#include "mixprec.h"

/* Where backward reads d(loss): a host value, or a device scalar. */
typedef struct {
    float value;
    const float *device;
} mp_seed;

typedef struct mp_step_backend {
    const char *name;
    /* Set up the backend's state for t (t->plan made, t->scaler initialized). */
    mp_status (*open)(mp_trainer *t);
    void (*close)(mp_trainer *t);
    /* One launch of the step (kind: an mp_launch): mp_step_enqueue(t, kind)
     * run directly, or replayed from its capture. */
    mp_status (*launch)(mp_trainer *t, int kind);

    /* ---- stream order, inside mp_step_enqueue ---- */
    /* A NaN/inf value of loss node `loss` marks a forward overflow. */
    mp_status (*check_loss)(mp_trainer *t, mp_node loss);
    /* Optional, after the loss checks: a NaN/inf batch-norm running
     * statistic marks a forward overflow too, restarts from its initial value
     * (mean 0, variance 1) where it is, and is recorded for
     * stats_overflow. For devices whose batch norms cannot make a channel
     * whose statistics overflow fp32 NaN (cuDNN's normalize it to its shift:
     * a finite output). */
    mp_status (*check_running_stats)(mp_trainer *t);
    /* The seed of one backward: weight * loss scale (slot: a distinct index
     * per backward of the launch, 0..MP_MAX_GROUPS*MP_MAX_LOSSES-1). */
    mp_status (*loss_seed)(mp_trainer *t, int slot, float weight, mp_seed *out);
    /* Data parallel: finish the gradient all-reduce; then, after the check,
     * the found-inf flags' max all-reduce. */
    mp_status (*reduce_grads)(mp_trainer *t);
    mp_status (*reduce_flags)(mp_trainer *t);
    /* Unscale group g's gradients and check them for NaN/inf. */
    mp_status (*unscale_check)(mp_trainer *t, int g);
    /* Clip group g's true gradients (t->o.clip_value, t->o.clip_norm). */
    mp_status (*clip)(mp_trainer *t, int g);
    /* Group g's optimizer at its rate, skipped when its flag is set. */
    mp_status (*optim_step)(mp_trainer *t, int g);
    /* Group g's gradient penalty (mixprec/penalty.h), after its backward and
     * before its unscale/check: adds its loss-scaled gradient to the
     * group's; NULL where the device has no second-order pass. */
    mp_status (*penalty)(mp_trainer *t, int g);
    /* The one scaler update per step; the host can then read the state. */
    mp_status (*scaler_update)(mp_trainer *t);

    /* ---- host side ---- */
    /* The scaler state as the host can see it: wait = false reads what the
     * last finished step published (a GPU may lag a step), wait = true waits. */
    mp_status (*read_scaler)(mp_trainer *t, bool wait, mp_scaler *out);
    /* Wait for everything queued. */
    mp_status (*wait)(mp_trainer *t);
    /* The whole training state between the device and the host: parameters
     * (graph host copies), each optimizer's state (its host mp_optim) and the
     * scaler (t->scaler). No-ops on the CPU, where the host state is the state. */
    mp_status (*state_to_host)(mp_trainer *t);
    mp_status (*state_to_device)(mp_trainer *t);
    /* Optional, with check_running_stats, since the last call: the first
     * node (graph order) whose running statistics it found NaN/inf in the
     * latest step that had one (-1: none), that step's scaler update index
     * (mp_scaler.ends at its update: *end), and how many values it restarted
     * in all; clears the record (waits for queued work). */
    mp_status (*stats_overflow)(mp_trainer *t, int *node, int64_t *end, int64_t *reset);
    /* Steps group g's optimizer took (synchronizes a GPU). */
    mp_status (*optim_steps)(mp_trainer *t, int g, int64_t *out);
    /* Optional: the numerics selection changed (or stopped); a backend that
     * captured collecting launches drops them (they measure the old one
     * into its device slots, which are about to be freed). */
    void (*numerics_changed)(mp_trainer *t);
    /* Optional: R1 / WGAN-GP's unscaled input gradient of the last step (n
     * floats, the graph's layout) where the host does not hold it
     * (t->pen_grad); waits for queued work. */
    mp_status (*penalty_input_grad)(mp_trainer *t, float *dst, size_t n);
} mp_step_backend;

/* The host backend (step_host.c). */
extern const mp_step_backend mp_step_backend_host;
/* The backend for a device: the host's for the CPU, the CUDA backend's when
 * this build has it, else an error naming the device. */
mp_status mp_step_backend_for(mp_device device, const mp_step_backend **out);

#endif
