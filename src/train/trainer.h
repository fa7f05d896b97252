/* trainer.h — the training loop: loader -> forward -> backward -> optimizer,
 * with per-epoch evaluation, progress output and a JSONL log. */
#ifndef MP_TRAIN_TRAINER_H
#define MP_TRAIN_TRAINER_H

#include <stdio.h>

#include "amp/policy.h"
#include "amp/scaler.h"
#include "data/dataset.h"
#include "dist/dist.h"
#include "models/models.h"
#include "optim/lr_schedule.h"
#include "optim/optim.h"

typedef struct {
    const char *model_name;     /* for logs */
    const char *data_name;      /* for logs */
    const char *precision;      /* for logs: "fp32" */
    int epochs;
    int batch;
    float lr;
    mp_optim_opts optim;
    const char *lr_schedule;    /* "constant", "step:N:G", "cosine[,warmup:N]" */
    uint64_t seed;
    bool augment;               /* random crop (pad 4 for 32x32, 2 otherwise) + flip */
    bool normalize;             /* per-channel mean/std from the training set */
    int max_steps;              /* per epoch, 0 = the whole epoch */
    bool use_onednn;
    mp_device device;           /* where the plans run (default: the CPU) */
    int read_every;             /* on a GPU: read loss/accuracy back every N steps (0 -> 20) */
    const char *log_path;       /* JSONL, one record per epoch; NULL = none */
    FILE *out;                  /* progress and summaries; NULL = silent */
    bool print_memory;          /* with out: mp_plan_print_memory once the plan is built */
    /* mixed precision (the policy itself is already applied to the graph) */
    bool loss_scaling;          /* scale the loss (dynamic unless scaler.dynamic is false) */
    mp_scaler_opts scaler;
    int accumulate;             /* micro-batches per optimizer step, 0 -> 1 */
    float clip_norm;            /* clip the global norm of the true gradients (0 = off) */
    float clip_value;           /* clip each true gradient element to +-value (0 = off) */
    int max_forward_overflows;  /* consecutive forward overflows tolerated, 0 -> 3 */
    bool auto_fallback;         /* move an overflowing layer to fp32 instead of stopping */
    FILE *events;               /* skipped steps and fallbacks (NULL = o->out) */
    /* checkpoints */
    const char *save_path;      /* safetensors file written atomically after each epoch */
    const char *resume_path;    /* continue the run saved there */
    int stop_after;             /* stop after this epoch (0 = run all epochs) */
    /* data parallel over GPUs (dist/dist.h); each rank trains on its shard
     * of every global batch of batch * ranks samples */
    int gpus;                   /* > 1: that many ranks as threads of this process, GPUs 0..gpus-1 */
    mp_dist *dist;              /* this rank's communicator (mpirun launches; set per thread otherwise) */
    const char *allreduce;      /* gradient all-reduce dtype: auto (the policy's 16-bit dtype, else
                                   fp32) | fp32 | fp16 | bf16; NULL = auto */
    double bucket_mb;           /* all-reduce bucket size in MiB, 0 -> 4 */
    double dist_timeout;        /* seconds any rank waits for the others, 0 -> 300 */
    bool sync_bn;               /* BatchNorm with the global batch's statistics (default: per GPU) */
    bool f32_weight_grads;      /* mp_plan_opts.f32_weight_grads: weight gradients never rounded to fp16/bf16 */
    /* builds another copy of the model (same architecture and policy) for
     * the ranks of a --gpus run beyond the first */
    mp_status (*replica)(void *arg, mp_model *out);
    void *replica_arg;
} mp_train_opts;

typedef struct {
    int epochs_run;
    double train_loss, train_acc, test_acc; /* last epoch */
    double epoch_seconds;                   /* last epoch (training only) */
    double images_per_s;                    /* last epoch */
    double total_seconds;
    size_t arena_bytes;
    int64_t skipped_steps;                  /* gradient + forward overflows */
    float final_loss_scale;                 /* 1 without loss scaling */
} mp_train_result;

/* One rank, or (o->gpus > 1) every rank of a threaded data-parallel run,
 * m being rank 0's model (the result and progress are rank 0's; images/s
 * count every rank). */
mp_status mp_train_run(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_train_opts *o,
                       mp_train_result *r);
/* The gradient all-reduce dtype for o->allreduce under m's policy. */
mp_status mp_train_allreduce_dtype(const mp_train_opts *o, const mp_graph *g, mp_dtype *out);

/* A model by name for a dataset's image shape and classes, with a precision
 * policy applied: what mp_model_spec_build builds, e.g. as mp_train_opts.replica
 * with replica_arg pointing at the spec (train_gpus.c). */
typedef struct {
    const char *model;
    const mp_dataset *data;
    mp_policy_opts policy;
} mp_model_spec;

mp_status mp_model_spec_build(void *spec, mp_model *out);

/* Accuracy of the model on d (inference plan of `batch`). */
mp_status mp_evaluate(mp_model *m, const mp_dataset *d, int batch, const float *mean, const float *std,
                      bool use_onednn, mp_device device, double *acc, double *loss);

#endif
