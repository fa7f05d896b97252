/* fit.h — the epoch loop behind `mixprec train` and `mixprec bench`, built on
 * the public trainer (mixprec/train.h) alone: data loading and augmentation,
 * progress output, per-epoch evaluation, a JSONL log, checkpoints after each
 * epoch and resuming, and data parallelism over GPUs (ranks as threads, or
 * one process per rank under mpirun). A run that diverged ends with an
 * error, never with a NaN result and success. */
#ifndef MP_TRAIN_FIT_H
#define MP_TRAIN_FIT_H

#include <stdio.h>

#include "mixprec.h"

typedef struct {
    const char *model_name;     /* for logs and checkpoints */
    const char *data_name;      /* for logs */
    /* The step: batch, device, loss scaling, clipping, accumulation, overflow
     * handling, data parallelism. input, labels, loss and optimizer are
     * filled from the model. */
    mp_trainer_opts trainer;
    mp_optim_opts optim;
    float lr;
    const char *lr_schedule;    /* "constant", "step:N:G", "cosine[,warmup:N]" (NULL: constant) */
    /* the loop */
    int epochs;
    int max_steps;              /* per epoch, 0 = the whole epoch */
    int stop_after;             /* stop after this epoch (0 = run all epochs) */
    uint64_t seed;              /* initialization, shuffling, dropout */
    mp_init_scheme init;        /* how the weights start (zero: He normal) */
    bool augment;               /* random crop (pad 4 for 32x32, 2 otherwise) + flip */
    bool normalize;             /* per-channel mean/std from the training set */
    bool random_resized_crop;   /* torchvision's, before augment's crop and flip */
    int data_workers;           /* threads preparing batches (decoding), 0: the loader's default */
    int read_every;             /* on a GPU: read the loss back every N steps (0 -> 20) */
    /* output */
    FILE *out;                  /* progress and summaries; NULL = silent */
    bool print_memory;          /* with out: mp_plan_print_memory once the plan is built */
    const char *log_path;       /* JSONL, one record per epoch; NULL = none */
    const char *save_path;      /* checkpoint written atomically after each epoch */
    const char *resume_path;    /* continue the run saved there */
    const char *numerics_log;   /* numerics statistics as JSONL (amp/numerics_log.h); NULL = none */
    int numerics_every;         /* ...collected every N optimizer steps, 0 -> 100 */
    /* Also (or instead of the log) every collection to this callback, CPU,
     * e.g. the precision doctor's probe (mp_doctor_add). */
    mp_status (*numerics_cb)(void *arg, int64_t step, const mp_numerics_record *rec, int n);
    void *numerics_arg;
    /* Stop after this many optimizer steps of the whole run (0: none); the
     * learning-rate schedule still spans every epoch, as the full run's. */
    int64_t stop_at_step;
    /* data parallel: gpus > 1 runs that many ranks as threads of this process
     * (GPUs 0..gpus-1); trainer.dist set: this process is one rank (mpirun) */
    int gpus;
    double dist_timeout;        /* seconds any rank waits for the others, 0 -> 300 */
    /* builds another copy of the model (same architecture and policy) for
     * the ranks beyond the first */
    mp_status (*replica)(void *arg, mp_model *out);
    void *replica_arg;
    /* Called before each optimizer step (1-based) of each rank; an error
     * stops that rank as a failure would (tests of the no-hang guarantee). */
    mp_status (*before_step)(void *arg, int rank, int64_t step);
    void *before_step_arg;
    /* Called once, by rank 0, when the run is set up and checked (trainer
     * built, --resume loaded and checked, logs opened, set-up printed) and
     * before the first epoch, e.g. to open an output that a run refused
     * before training must leave untouched; an error stops the run. */
    mp_status (*on_start)(void *arg);
    void *on_start_arg;
} mp_fit_opts;

typedef struct {
    int epochs_run;
    double train_loss, train_acc, test_acc, test_loss; /* last epoch */
    double epoch_seconds;                   /* last epoch (training only) */
    double images_per_s;                    /* last epoch, every rank */
    double total_seconds;
    size_t arena_bytes;
    int64_t skipped_steps;                  /* gradient + forward overflows, over the whole run */
    float final_loss_scale;                 /* 1 without loss scaling */
    double penalty;                         /* last epoch's mean gradient penalty (finite steps), 0 without */
} mp_fit_result;

/* Train m (policy applied) on train, evaluating on test (may be NULL) after
 * each epoch. With o->gpus > 1 (and no communicator in o->trainer.dist),
 * every rank of a threaded data-parallel run, m being rank 0's model (the
 * result and progress are rank 0's). fit_entry.c: the options checked, then
 * mp_fit_rank here or mp_fit_threads (train_gpus.h) on every rank. */
mp_status mp_fit(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o, mp_fit_result *r);

/* mp_fit's options checked against the datasets (test may be NULL). */
mp_status mp_fit_check(const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o);

/* One process's training, or one rank's where o->trainer.dist is set: what
 * mp_fit runs in this thread or in each rank's (fit.c), after mp_fit_check
 * (mp_fit checks once for every rank; the ranks' options differ only in
 * their communicator). */
mp_status mp_fit_rank(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o,
                      mp_fit_result *r);

/* A model by name for a dataset's image shape and classes with a precision
 * policy applied, e.g. as mp_fit_opts.replica with replica_arg pointing at
 * the spec. */
typedef struct {
    const char *model;
    const mp_dataset *data;
    mp_policy_opts policy;
} mp_model_spec;

mp_status mp_model_spec_build(void *spec, mp_model *out);

#endif
