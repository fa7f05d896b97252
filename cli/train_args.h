/* train_args.h — `mixprec train`'s options, parsed by train_cmd.c and shared
 * with `mixprec doctor`, which takes the same model, data and training
 * options plus its own (the extra hook). */
#ifndef MP_CLI_TRAIN_ARGS_H
#define MP_CLI_TRAIN_ARGS_H

#include "cli/common_opts.h"
#include "mixprec.h"
#include "train/fit.h"

typedef struct {
    common_opts c; /* data and optimizer */
    const char *numerics_log;
    int numerics_every;
    const char *policy;       /* --policy FILE (the doctor's) */
    bool precision_set;       /* --precision given */
    const char *model, *log, *precision, *lr_schedule, *overrides, *save, *resume;
    const char *loss_scaling; /* "on", "off" or NULL (the policy's default) */
    mp_scaler_opts scaler;
    bool scaler_set;
    int accumulate, max_forward_overflows, stop_after;
    float clip_norm, clip_value;
    bool auto_fallback, bn_low, f32_weight_grads;
    int epochs, batch, threads, max_steps;
    bool reference, quiet, print_precision, print_memory;
    uint64_t seed;
    mp_init_scheme init;      /* --init */
    const char *device;       /* --device text */
    float monitor_interval;   /* seconds, 0 = GPU monitor off */
    const char *monitor_csv;  /* NULL = no CSV */
    int gpus;                 /* 0: not given */
    const char *allreduce;
    float bucket_mb, dist_timeout;
    bool sync_bn;
    mp_penalty_kind penalty;  /* --gradient-penalty l2:LAMBDA */
    float penalty_weight;
} train_args;

/* Options after argv[0] into t. extra (may be NULL) is offered each option
 * first: 1 consumed (advancing *i past its value), 0 not its, -1 bad (it
 * printed why). Returns 0, 1 after --help (usage printed), 2 on an error
 * (one line "mixprec <cmd>: ..." printed). */
int train_args_parse(const char *cmd, int argc, char **argv, train_args *t,
                     int (*extra)(void *arg, int argc, char **argv, int *i), void *extra_arg, void (*usage)(FILE *));

/* The run's precision policy, on g built with the options' policy without
 * bn_low: --policy FILE on top of --precision and --precision-override
 * (amp/policy_file.h), the file's layers checked against g, a layer in both,
 * or a precision or loss-scale setting the options give differently, an
 * error naming --policy, the file and the key; the file's loss scale into
 * t's scaler options. Then --bn-low and --f32-weight-grads against the final
 * precision, an error naming where that came from. policy (in: the options',
 * out: the run's, its overrides in buf) is applied to g. Every error is a
 * usage error. */
mp_status train_apply_policy(train_args *t, mp_graph *g, mp_policy_opts *policy, char *buf, size_t cap);
/* The same --bn-low / --f32-weight-grads check before any data is read,
 * against --precision p, when no policy file can change it (MP_OK with one). */
mp_status train_check_precision_options(const train_args *t, mp_precision p);

#endif
