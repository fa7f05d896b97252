/* trainer_state.h — what a trainer holds (mp_trainer, its optimizer groups,
 * the public optimizer's inside) and the launch kinds of its step: the data
 * that the trainer (trainer.h), the one step (step.h) and the backends share.
 * Functions live in their files' headers. */
#ifndef MP_TRAIN_TRAINER_STATE_H
#define MP_TRAIN_TRAINER_STATE_H

#include <stdio.h>

#include "amp/scaler.h"
#include "graph/graph.h"
#include "optim/optim.h"
#include "train/step_backend.h"

/* Launch kinds: which part of an accumulated step a launch is. */
typedef enum {
    MP_LAUNCH_MIDDLE = 0,                  /* gradients added, nothing after backward */
    MP_LAUNCH_FIRST = 1,                   /* gradients overwritten */
    MP_LAUNCH_LAST = 2,                    /* then reduce, unscale/check, clip, optimizers, scaler */
    MP_LAUNCH_WHOLE = 3,                   /* first and last: a step without accumulation */
    MP_LAUNCH_KINDS = 4
} mp_launch;

/* A public optimizer: its graph, the graph parameters it updates and their
 * host state (what the CPU steps, and what a GPU's state is copied through
 * for checkpoints). */
struct mp_optimizer {
    mp_graph *g;
    mp_optimizer_opts o;
    char prefix[128];
    int n;              /* trainable tensors */
    int *param_index;   /* (n) graph parameter indices, in graph order */
    mp_optim *host;     /* over the graph's host copies */
    mp_trainer *bound;  /* the trainer stepping it, or NULL */
    bool orphaned;      /* destroyed while bound: freed with the trainer */
};

/* Each group's optimizer, the losses it minimizes and its rate this step. */
typedef struct {
    mp_optimizer *opt;
    int n_losses;
    mp_node losses[MP_MAX_LOSSES];
    float weights[MP_MAX_LOSSES];
    float lr;
} mp_trainer_group;

struct mp_trainer {
    mp_graph *g;
    mp_trainer_opts o;        /* with defaults applied; o.groups unused (see groups) */
    int n_groups;
    mp_trainer_group groups[MP_MAX_GROUPS];
    int n_checks;             /* the distinct losses checked for NaN/inf after forward */
    mp_node checks[MP_MAX_LOSSES];
    int k;                    /* micro-batches per step */
    bool loss_scaling;
    mp_dtype allreduce_dtype;
    mp_plan *plan;
    const mp_step_backend *be;
    void *bs;                 /* the backend's state */
    /* The scaler: the state itself on the CPU; on a GPU the last state read
     * back (the device holds the real one). Without loss scaling a static 1
     * that only checks. */
    mp_scaler scaler;
    mp_scaler seen;           /* the state whose overflows were already reported */
    long long ends_queued;    /* step ends run or queued since the state was last set */
    int micro;                /* the next micro-batch's index in its step */
    int64_t steps;            /* optimizer steps attempted */
    int rebuilds;             /* plans rebuilt by the auto-fallback */
    bool rebuild_pending;     /* the auto-fallback changed a node's dtype: rebuild before the next launch */
    uint64_t plan_step;       /* the forward count a rebuilt plan goes on from (mp_plan_step) */
    float *buffers_backup;    /* BN running statistics, kept across a provenance replay */
    bool grads_replayed;      /* a provenance replay (step.c's locate) overwrote the last, skipped step's
                                 gradients with scaled ones: mp_trainer_grad_get refuses until the next step */
    /* the host backend's last check: per group, the graph parameter whose
     * gradient was non-finite first (-1: none, or not known on a device) */
    int bad_param[MP_MAX_GROUPS];
    FILE *events;
    /* Library-internal hook: after group g's gradients are reduced (data
     * parallel) and before they are checked, in stream order (tests inject a
     * NaN); on a GPU captured into the step's graph, so it may only queue
     * device work. */
    mp_status (*after_reduce)(void *arg, mp_trainer *t, int g);
    void *after_reduce_arg;
    struct mp_numerics_state *numerics; /* statistics (numerics_collect.h), NULL: off */
    /* the gradient penalty (o.penalty, penalty.c): its value in the last
     * step, whether it has run, whether its value (from finite gradients)
     * was NaN/inf, and the unscaled input gradient and direction of R1 /
     * WGAN-GP (pen_n floats each) */
    float pen_value;
    bool pen_ran, pen_forward_overflow, pen_grad_overflow;
    float *pen_grad, *pen_dir;
    size_t pen_n;
};

#endif
