/** @file mixprec/train.h
 * The trainer: one mixed-precision training step for every device, plus
 * checkpoints, weight files and evaluation.
 *
 * mp_trainer_step runs, on the CPU or queued on a GPU (captured once into a
 * CUDA graph and replayed, with no host synchronization): forward; a check
 * of the losses (a NaN/inf loss is a forward overflow: the step is skipped
 * and the loss scale is NOT lowered, since lowering it cannot fix that; the
 * forward has already updated the batch norms' running statistics, and those
 * it made NaN/inf restart from mean 0 and variance 1, the report says how
 * many);
 * backward of loss * scale; the fused unscale + inf/NaN check of the
 * gradients; clipping of the true gradients; the optimizer, which skips
 * itself when its gradients overflowed; one loss-scale update. With
 * accumulation a step is several calls (micro-batches). A skipped step names
 * the first tensor that went non-finite (overflow provenance). A run that
 * cannot recover (forward overflows in a row, gradient overflows at the
 * minimum scale, too many skipped steps) ends with MP_ERR_NONFINITE and one
 * line saying what happened and what to do. */
#ifndef MIXPREC_TRAIN_H
#define MIXPREC_TRAIN_H

#include "mixprec/data.h"
#include "mixprec/optim.h"
#include "mixprec/penalty.h"
#include "mixprec/plan.h"
#include "mixprec/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A trainer (opaque): a training plan, its optimizers and loss scaler on one device. */
typedef struct mp_trainer mp_trainer;

/** Optimizers one trainer can step (e.g. a GAN's generator and discriminator). */
#define MP_MAX_GROUPS 4

/** One optimizer and the weighted sum of losses it minimizes. */
typedef struct {
    mp_optimizer *optimizer;      /**< over this group's parameters (disjoint from the other groups') */
    mp_node losses[MP_MAX_LOSSES]; /**< loss nodes */
    float weights[MP_MAX_LOSSES]; /**< >= 0; a loss of weight 0 runs no backward */
    int n_losses;                 /**< 1..MP_MAX_LOSSES */
} mp_train_group;

/** Whether the loss is scaled. */
typedef enum {
    MP_LOSS_SCALING_AUTO = 0, /**< as the policy implies (mp_policy_info.loss_scaling) */
    MP_LOSS_SCALING_ON,       /**< with opts.scaler */
    MP_LOSS_SCALING_OFF,
} mp_loss_scaling;

/** Trainer options; zero fields take the defaults beside them. */
typedef struct {
    int batch;                   /**< samples per micro-batch */
    mp_device device;            /**< where it trains (default: the CPU) */
    mp_node input;               /**< the image input mp_batch fills */
    mp_node labels;              /**< the label input mp_batch fills */
    mp_node loss;                /**< one optimizer minimizing one loss... */
    mp_optimizer *optimizer;     /**< ...this one */
    /** ...or several groups, stepped in order from the same forward (then
     * loss and optimizer are ignored; no accumulation or data parallelism). */
    mp_train_group groups[MP_MAX_GROUPS];
    int n_groups;                /**< 0: the loss and optimizer above */
    mp_loss_scaling loss_scaling; /**< whether the loss is scaled */
    mp_scaler_opts scaler;       /**< how, when it is (checked either way) */
    int accumulate;              /**< micro-batches per optimizer step, 0 -> 1 */
    float clip_norm;             /**< clip the global norm of the true gradients (0: off) */
    float clip_value;            /**< clip each true gradient element to +-value (0: off) */
    int max_forward_overflows;   /**< forward overflows in a row that stop training, 0 -> 3 */
    bool auto_fallback;          /**< move a layer that overflows in the forward pass to fp32 instead (the plan
                                      is rebuilt, going on with the old one's forward count, so dropout masks do
                                      not repeat; inputs and labels set with mp_trainer_set_input/_set_labels
                                      carry over); an error instead while another plan of the graph is alive. A
                                      rebuild that fails (out of memory) is the error of the call that ran it
                                      and leaves the trainer without a plan: the next call that needs one
                                      makes it (or fails the same way), inputs then set anew */
    /** Divergence: after skip_check_after steps (0 -> 100), more than
     * max_skip_share (0 -> 0.05; >= 1: never) of the steps skipped is an error. */
    double max_skip_share;       /**< see above */
    int skip_check_after;        /**< see above */
    /** A dynamic scale that falls below this is an error (0 -> 2^-14 when the
     * policy computes in fp16 and scaler.min_scale is not given; else none);
     * one above the initial scale is refused at mp_trainer_create. */
    float scale_floor;
    bool reference;              /**< CPU: the plain-C reference kernels instead of oneDNN */
    uint64_t seed;               /**< dropout masks */
    bool profile;                /**< time every node (mp_plan_print_profile on mp_trainer_plan) */
    bool f32_weight_grads;       /**< see mp_plan_opts */
    /** Data parallel (GPUs): this rank's communicator (mixprec/dist.h); every
     * rank trains its shard of each global batch and the gradients are averaged. */
    mp_dist *dist;
    const char *allreduce;       /**< all-reduce dtype: "auto" (NULL; the policy's), "fp32", "fp16", "bf16" */
    double bucket_mb;            /**< all-reduce bucket size in MiB, 0 -> 4 */
    bool sync_bn;                /**< BatchNorm with the global batch's statistics */
    FILE *events;                /**< overflow reports as lines here too (NULL: only in mp_step_report) */
    /** A gradient penalty added to one group's objective (mixprec/penalty.h;
     * zero: none). The plan is then a second-order one (no
     * accumulation, no data parallelism; CPU or one GPU). Its gradient joins the group's loss-scaled gradients
     * before their unscale/check; a NaN/inf gradient it reads is a gradient
     * overflow (the scale backs off), a NaN/inf value computed from finite
     * gradients a forward overflow of the penalty (the scale stays). */
    mp_penalty penalty;
} mp_trainer_opts;

/** A trainer for g (policy applied; parameters initialized unless a
 * checkpoint or weight file is loaded next). Optimizers must be over g. */
MP_API mp_status mp_trainer_create(mp_graph *g, const mp_trainer_opts *o, mp_trainer **out);
/** Frees the trainer (NULL is fine); the graph and optimizers stay. */
MP_API void mp_trainer_destroy(mp_trainer *t);

/** A classifier's micro-batch for opts.input and opts.labels. */
typedef struct {
    const float *images;    /**< (batch, C, H, W) */
    const int32_t *labels;  /**< (batch) class indices */
    int n;                  /**< samples; must equal opts.batch */
} mp_batch;

/** What the host knows of an overflow (a skipped step). */
typedef struct {
    bool found;             /**< a step was skipped since the last report */
    bool forward;           /**< a NaN/inf loss or activation, else a gradient */
    int64_t step;           /**< the step (1-based) it happened in */
    int64_t count;          /**< skipped steps since the last report (a GPU may show several at once) */
    mp_node node;           /**< the op whose output or gradient went non-finite first; -1: not located */
    char what[48];          /**< "output", "grad input 0", "grad weight", ... */
    float scale_before;     /**< the loss scale the step ran with */
    float scale_after;      /**< the loss scale after it */
    char message[400];      /**< the whole report as one line */
} mp_overflow_report;

/** What one mp_trainer_step call did. */
typedef struct {
    bool step_done;         /**< this call ended an optimizer step (always, without accumulation) */
    int64_t step;           /**< optimizer steps attempted so far */
    float lr;               /**< the first group's learning rate used */
    float loss_scale;       /**< the scale now, as far as the host knows (1 without scaling) */
    int64_t skipped_steps;  /**< so far, as far as the host knows */
    mp_overflow_report overflow; /**< overflows the host saw in this call */
    float penalty;          /**< opts.penalty's value in this step (unscaled, weighted; NaN: not computed, the
                                 step overflowed); 0 without a penalty */
} mp_step_report;

/** Set an input or target node for the next step (any node a loss reads). */
MP_API mp_status mp_trainer_set_input(mp_trainer *t, mp_node node, const float *data, size_t n);
/** Set a label node for the next step. */
MP_API mp_status mp_trainer_set_labels(mp_trainer *t, mp_node node, const int32_t *labels, size_t n);
/** One micro-batch: batch (may be NULL when the inputs were set) into
 * opts.input / opts.labels, then the step; report may be NULL. Trainers of
 * one graph on the CPU share its parameters and gradient arrays: while one
 * is in the middle of an accumulated step, another's step is
 * MP_ERR_INVALID_ARG, refused before its forward (and so is another plan's
 * backward, mp_plan_backward). */
MP_API mp_status mp_trainer_step(mp_trainer *t, const mp_batch *batch, mp_step_report *report);
/** The last micro-batch's loss (the first group's first loss; synchronizes on a
 * GPU); NaN once auto_fallback has rebuilt the plan, until the next step;
 * MP_ERR_INVALID_ARG before any step. */
MP_API mp_status mp_trainer_loss(mp_trainer *t, float *loss);
/** Read any output node of the last forward (logits), as f32; NaN once
 * auto_fallback has rebuilt the plan, until the next step; MP_ERR_INVALID_ARG
 * before any step. Inputs, labels and targets read as set, at any time. */
MP_API mp_status mp_trainer_read(mp_trainer *t, mp_node node, float *dst, size_t n);
/** Wait for the queued steps (a no-op on the CPU) and report the overflows
 * not yet reported; report may be NULL. */
MP_API mp_status mp_trainer_wait(mp_trainer *t, mp_step_report *report);
/** mp_trainer_wait, then copy the parameters to the graph's host copies. */
MP_API mp_status mp_trainer_sync(mp_trainer *t, mp_step_report *report);
/** Optimizer steps attempted (skipped ones included). */
MP_API int64_t mp_trainer_steps(const mp_trainer *t);
/** The loss scale and skipped steps as far as the host knows. */
MP_API float mp_trainer_loss_scale(const mp_trainer *t);
/** Skipped steps so far (forward and gradient overflows). */
MP_API int64_t mp_trainer_skipped_steps(const mp_trainer *t);
/** The trainer's plan (e.g. for mp_plan_print_memory). With auto_fallback a
 * step, mp_trainer_wait or mp_trainer_save may replace it, freeing this one:
 * ask again rather than keeping the pointer. NULL after a rebuild failed,
 * until a call that needs the plan makes it again. */
MP_API mp_plan *mp_trainer_plan(mp_trainer *t);
/** Parameter `name` from the device (synchronizes). */
MP_API mp_status mp_trainer_param_get(mp_trainer *t, const char *name, float *dst, size_t n);
/** Parameter `name` to the device (before the next step). */
MP_API mp_status mp_trainer_param_set(mp_trainer *t, const char *name, const float *src, size_t n);
/** The gradient of `name` after the last step (unscaled). Each group's
 * backward overwrites every gradient and only a group's own are unscaled, so
 * with several groups only the last group's parameters are readable, and
 * with loss scaling a parameter no group trains is not (MP_ERR_INVALID_ARG
 * saying which). After a skipped step whose overflow the trainer located by
 * replaying it (mp_step_report.overflow), the replay has overwritten the
 * gradients with scaled ones: MP_ERR_INVALID_ARG until the next step. */
MP_API mp_status mp_trainer_grad_get(mp_trainer *t, const char *name, float *dst, size_t n);

/* ---- checkpoints and weight files ---------------------------------------- */

/** Most channels whose normalization statistics mp_checkpoint_info holds. */
#define MP_CHECKPOINT_MAX_CHANNELS 64

/** Identity and position saved with a checkpoint, and what the run's inputs
 * were normalized with, so that evaluation elsewhere normalizes alike. */
typedef struct {
    const char *model;      /**< a name for the model; mp_trainer_load refuses a file saved under another one
                                 when both are non-empty; mp_checkpoint_load_weights loads any file whose tensors
                                 fit and names the saved model in its errors */
    int epoch;              /**< epochs completed (the caller's count), 0 to 100000 */
    /** Per-channel input normalization (x - mean) / std the run trained with.
     * Saving (mp_trainer_save): written when norm_channels > 0, at most
     * MP_CHECKPOINT_MAX_CHANNELS (mp_trainer_save_normalized takes any
     * count), else the checkpoint says the run did not normalize. Loading:
     * filled from the file when it records at most MP_CHECKPOINT_MAX_CHANNELS
     * channels; a record of more leaves norm_recorded false, so read the
     * statistics with mp_checkpoint_read_normalization, which reads any count. */
    int norm_channels;
    float norm_mean[MP_CHECKPOINT_MAX_CHANNELS]; /**< see norm_channels */
    float norm_std[MP_CHECKPOINT_MAX_CHANNELS];  /**< see norm_channels */
    /** Loading: false for checkpoints written before normalization was
     * recorded, and for records of more channels than the arrays hold (then
     * norm_channels is 0 and the statistics are not in this struct). */
    bool norm_recorded;
    /** Loading (mp_checkpoint_load_weights): the policy name ("amp-bf16") and
     * batch the run trained with, and the saved model name; ignored when saving. */
    char saved_precision[24];
    int saved_batch;         /**< see saved_precision */
    char saved_model[256];   /**< see saved_precision */
} mp_checkpoint_info;

/** The whole training state in one safetensors file, written atomically:
 * fp32 master weights and BN buffers under their names, optimizer state,
 * the loss scaler, step counters, the run's identity (precision, optimizers,
 * batch) and each optimizer's hyper-parameters and schedule. A resumed run
 * continues exactly. */
MP_API mp_status mp_trainer_save(mp_trainer *t, const char *path, const mp_checkpoint_info *info);
/** mp_trainer_save with the run's input normalization given apart, for any
 * number of channels: `channels` means and standard deviations (finite, std
 * > 0) at mean and std; 0 channels: the run did not normalize. info's
 * norm_channels, norm_mean and norm_std are not read. */
MP_API mp_status mp_trainer_save_normalized(mp_trainer *t, const char *path, const mp_checkpoint_info *info,
                                            int channels, const float *mean, const float *std);
/** Restore what mp_trainer_save wrote into a trainer of the same model,
 * policy, optimizers and batch (errors name what differs: a tensor's name,
 * shape or dtype, a tensor this trainer would not read, optimizer state its
 * options keep or do not, a metadata key); info->epoch receives the saved
 * epoch. A run with a static loss scale keeps its own scale. Learning rate,
 * schedule and other hyper-parameters stay this trainer's (unlike PyTorch's
 * optimizer.load_state_dict): where they differ from the saved ones, a line
 * on mp_trainer_opts.events says both. */
MP_API mp_status mp_trainer_load(mp_trainer *t, const char *path, mp_checkpoint_info *info);

/** Load a checkpoint's parameters (fp32 masters and BN buffers) into g for
 * evaluation or export, without a trainer: the optimizer state in the file
 * is ignored, every parameter must be there with its shape (errors name the
 * tensor, and the saved model when it differs from info->model), values
 * finite. info (may be NULL) receives the epoch, normalization statistics,
 * precision, batch and model name the run saved. Nothing changes on error. */
MP_API mp_status mp_checkpoint_load_weights(mp_graph *g, const char *path, mp_checkpoint_info *info);
/** What a checkpoint says about its run (model name, precision, batch,
 * epoch, normalization statistics) into *info, without loading tensors:
 * e.g. to build the model it was trained as before mp_checkpoint_load_weights. */
MP_API mp_status mp_checkpoint_read_info(const char *path, mp_checkpoint_info *info);
/** The input normalization a checkpoint records, for any channel count: the
 * count into *channels (-1: the checkpoint records none, as one written
 * before the statistics were recorded; 0: the run did not normalize) and the
 * first min(*channels, max_channels) means and standard deviations into mean
 * and std (NULL allowed when max_channels is 0). A malformed record is an
 * error naming the file and the key. */
MP_API mp_status mp_checkpoint_read_normalization(const char *path, int max_channels, int *channels, float *mean,
                                                  float *std);

/** Options of mp_graph_load_weights. */
typedef struct {
    bool allow_missing;     /**< keep parameters the file lacks, which must then have been initialized
                                 (default: an error naming them) */
    bool allow_unused;      /**< ignore tensors no parameter matches (default: an error; PyTorch's
                                 num_batches_tracked counters are always ignored) */
} mp_weights_opts;
/** Load weights only from a safetensors file such as PyTorch's
 * `safetensors.torch.save_file(model.state_dict())` with matching names:
 * every tensor must have its parameter's shape and a float dtype (f32, f16,
 * bf16, f64; converted); values must be finite and running variances >= 0.
 * Nothing is changed on error. */
MP_API mp_status mp_graph_load_weights(mp_graph *g, const char *path, const mp_weights_opts *o);
/** Write every parameter as f32 under its name (loadable by PyTorch's safetensors). */
MP_API mp_status mp_graph_save_weights(const mp_graph *g, const char *path);

/* ---- evaluation and inference -------------------------------------------- */

/** Inference options. */
typedef struct {
    mp_node input;          /**< the image input */
    mp_node logits;         /**< the class logits (N, K) */
    int batch;              /**< 0 -> 256 (at most the dataset's size or n); negative: MP_ERR_INVALID_ARG */
    mp_device device;       /**< where the inference plan runs */
    bool reference;         /**< CPU: the plain-C kernels */
    const float *mean;      /**< per-channel normalization (x - mean) / std of the images, as trained (NULL: none) */
    const float *std;       /**< see mean */
} mp_eval_opts;

/** Accuracy and mean softmax cross-entropy over a dataset. */
typedef struct {
    double accuracy;        /**< share of samples whose largest logit is their label */
    double loss;            /**< mean softmax cross-entropy */
    int64_t samples;        /**< samples evaluated */
    /** images left out because they did not decode (MP_BAD_IMAGES_SKIP,
     * datasets decoded per batch; samples does not count them) */
    int64_t bad_images;
} mp_eval_result;

/** Evaluate g (running BN statistics, no dropout) on every sample of d,
 * whose images must have the input's shape and labels its class range. A
 * sample whose logits come out NaN/inf (an overflowing forward, or a
 * normalization std so small that (x - mean) / std overflows) is
 * MP_ERR_NONFINITE naming it and the logit; *out is then not written. */
MP_API mp_status mp_evaluate(mp_graph *g, const mp_dataset *d, const mp_eval_opts *o, mp_eval_result *out);
/** Logits (n, K) of n images (n, C, H, W), finite (else MP_ERR_NONFINITE
 * naming the image), normalized with opts' mean and std on the way in. The
 * logits are finite too: an image whose logits come out NaN/inf (an
 * overflowing forward or normalization) is MP_ERR_NONFINITE naming it. */
MP_API mp_status mp_predict(mp_graph *g, const mp_eval_opts *o, const float *images, int n, float *logits);

#ifdef __cplusplus
}
#endif
#endif /* MIXPREC_TRAIN_H */
