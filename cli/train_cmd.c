/* train_cmd.c — `mixprec train`: parse options, load data, build the model,
 * train with progress output. A bare `mixprec train` trains the default
 * model on Fashion-MNIST. */
#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/penalty_arg.h"
#include "cli/scaler_args.h"
#include "cli/common_opts.h"
#include "cli/train_args.h"
#include "core/error.h"
#include "data/dataset.h"
#include "io/output_path.h"
#include "monitor/gpu_monitor.h"
#include "train/fit.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec train [options]\n\n"
            "Train a model; with no options, the default CNN on Fashion-MNIST.\n\n"
            "model and data:\n"
            "  --model M           %s (default small)\n"
            DATA_OPTS_HELP "\n"
            "training:\n"
            "  --epochs N          epochs (default 3)\n"
            "  --batch B           batch size (default 128)\n"
            OPTIM_OPTS_HELP
            "  --lr-schedule S     constant | step:STEPS:GAMMA | cosine[:MIN_LR], optional ,warmup:N\n"
            "                      (default cosine)\n"
            "  --precision P       %s (default fp32)\n"
            "  --precision-override L  per-layer dtypes, e.g. fc=fp32,conv1=bf16\n"
            "  --policy FILE       apply a policy file (`mixprec doctor --policy-out`): its precision,\n"
            "                      per-layer overrides (merged with --precision-override) and loss scale\n"
            "  --print-precision   list every node's compute and storage dtype, then exit\n"
            "  --print-memory      say where the memory goes: the activation arena at its peak by kind\n"
            "                      (activations, saved tensors, gradients, workspaces) and, on a GPU, the\n"
            "                      parameters' device copies\n"
            "  --bn-low            fp16/bf16 policies: BatchNorm in low precision too (default fp32)\n"
            "  --f32-weight-grads  amp/o2 policies: conv/linear weight gradients stay f32 sums, never rounded\n"
            "                      to fp16/bf16, so --gpus N ends within fp32 tolerance of one GPU with N x the\n"
            "                      batch (default: rounded, as with PyTorch autocast; ~1.6x the images/s)\n"
            "  --loss-scaling on|off  loss scaling (default on for amp-fp16 and o2-fp16)\n",
            mp_model_list(), mp_precision_list());
    scaler_args_help(f);
    fprintf(f,
            "  --accumulate N      micro-batches per optimizer step (default 1)\n"
            "  --clip-grad-norm X  clip the global norm of the (unscaled) gradients\n"
            "  --clip-grad-value X clip each (unscaled) gradient element to [-X, X]\n"
            "  --gradient-penalty l2:LAMBDA  add LAMBDA x the L2 norm of the loss's parameter gradients to the\n"
            "                      loss (seed 003; second derivatives, no --accumulate or --gpus): the\n"
            "                      penalty is computed from unscaled gradients and reported per epoch\n"
            "  --max-forward-overflows N  consecutive NaN/inf forwards before stopping (default 3)\n"
            "  --auto-fallback     move a layer that overflows in the forward pass to fp32\n"
            "  --save FILE         write a checkpoint (safetensors) after every epoch\n"
            "  --resume FILE       continue the run saved in FILE (same options as the saved run)\n"
            "  --stop-after N      stop after epoch N (the schedule still spans --epochs); split a\n"
            "                      long run into jobs with --save and --resume\n"
            "  --seed S            random seed for init, shuffling, dropout (default 1)\n"
            "  --init I            weight initialization: he (default: He normal) or torch (PyTorch's\n"
            "                      default, uniform with 1/sqrt(fan_in) bounds: a model from PyTorch\n"
            "                      starts as it did there)\n"
            "  --max-steps N       stop each epoch after N steps (quick runs)\n\n"
            "execution and output:\n"
            "  --device D          cpu | cuda | cuda:N | auto (default auto: the first GPU when this build\n"
            "                      has the CUDA backend and one is present, else the CPU)\n"
            "  --gpus N            data parallel over GPUs 0..N-1 (one thread each, NCCL all-reduce); the\n"
            "                      global batch is N x --batch. Under mpirun: one GPU per rank, and N (if\n"
            "                      given) must equal the number of ranks\n"
            "  --allreduce T       gradient all-reduce dtype: auto (the policy's fp16/bf16, else fp32) | fp32\n"
            "                      | fp16 | bf16 (default auto)\n"
            "  --bucket-mb X       gradient all-reduce bucket size in MiB (default 4)\n"
            "  --dist-timeout S    seconds a rank waits for the others before stopping (default 300)\n"
            "  --sync-bn           BatchNorm normalizes with the statistics of the global batch (all GPUs;\n"
            "                      default: each GPU its own, as PyTorch DDP)\n"
            "  --threads T         CPU threads (default: all cores)\n"
            "  --reference         use the plain-C reference kernels instead of oneDNN\n"
            "  --log FILE.jsonl    write one JSON record per epoch\n"
            "  --numerics-log FILE.jsonl  per-tensor range statistics (amax, smallest non-zero, fp16/bf16\n"
            "                      overflow/underflow/subnormal counts, octave histogram) of every output,\n"
            "                      gradient, parameter and parameter gradient, one JSON line per collected\n"
            "                      step (CPU)\n"
            "  --numerics-every N  collect them every N optimizer steps (default 100)\n"
            "  --monitor-interval S  seconds between GPU monitor samples (NVML: clocks, load, memory,\n"
            "                      power, temperature, fan; default 5; 0 = off); the run ends with mean\n"
            "                      load, mean power and energy per epoch, and always time and peak RSS\n"
            "  --monitor-csv FILE  write every GPU monitor sample to FILE as CSV (default: no CSV)\n"
            "  --quiet             no progress output\n"
            "  -h, --help          this help\n\n" INPUT_FILES_HELP);
}

static int run_train(train_args *t, mp_dist *dist, int rank);

#define NEED_VALUE()                                                                      \
    do {                                                                                  \
        if (i + 1 >= argc) {                                                              \
            fprintf(stderr, "mixprec %s: %s needs a value (see --help)\n", cmd, a);      \
            return 2;                                                                     \
        }                                                                                 \
        v = argv[++i];                                                                    \
    } while (0)

int train_args_parse(const char *cmd, int argc, char **argv, train_args *t,
                     int (*extra)(void *arg, int argc, char **argv, int *i), void *extra_arg, void (*usage)(FILE *)) {
    *t = (train_args){.c = common_opts_default(), .model = "small", .precision = "fp32", .lr_schedule = "cosine",
                      .epochs = 3, .batch = 128, .seed = 1, .device = "auto",
                      .monitor_interval = 5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int shared = extra ? extra(extra_arg, argc, argv, &i) : 0;
        if (!shared) shared = common_opts_parse(cmd, argc, argv, &i, &t->c);
        if (!shared) shared = scaler_arg_parse(cmd, argc, argv, &i, &t->scaler, &t->scaler_set);
        if (shared < 0) return 2;
        if (shared) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--model")) { NEED_VALUE(); t->model = v;
        } else if (!strcmp(a, "--device")) { NEED_VALUE(); t->device = v;
        } else if (!strcmp(a, "--log")) { NEED_VALUE(); t->log = v;
        } else if (!strcmp(a, "--numerics-log")) { NEED_VALUE(); t->numerics_log = v;
        } else if (!strcmp(a, "--numerics-every")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1 << 30, &t->numerics_every)) return 2;
        } else if (!strcmp(a, "--precision")) { NEED_VALUE(); t->precision = v; t->precision_set = true;
        } else if (!strcmp(a, "--policy")) { NEED_VALUE(); t->policy = v;
        } else if (!strcmp(a, "--precision-override")) { NEED_VALUE(); t->overrides = v;
            if (!*v) {
                fprintf(stderr, "mixprec %s: --precision-override is empty (give LAYER=DTYPE,...)\n", cmd);
                return 2;
            }
        } else if (!strcmp(a, "--print-precision")) { t->print_precision = true;
        } else if (!strcmp(a, "--print-memory")) { t->print_memory = true;
        } else if (!strcmp(a, "--loss-scaling")) { NEED_VALUE();
            if (strcmp(v, "on") && strcmp(v, "off")) { fprintf(stderr, "mixprec %s: --loss-scaling '%s' must be on or off\n", cmd, v); return 2; }
            t->loss_scaling = v;
        } else if (!strcmp(a, "--accumulate")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1 << 20, &t->accumulate)) return 2;
        } else if (!strcmp(a, "--clip-grad-norm")) { NEED_VALUE(); if (!arg_float(cmd, a, v, 0, 1e30, &t->clip_norm)) return 2;
        } else if (!strcmp(a, "--gradient-penalty")) { NEED_VALUE(); if (!penalty_arg_parse(cmd, v, false, &t->penalty, &t->penalty_weight)) return 2;
        } else if (!strcmp(a, "--clip-grad-value")) { NEED_VALUE(); if (!arg_float(cmd, a, v, 0, 1e30, &t->clip_value)) return 2;
        } else if (!strcmp(a, "--max-forward-overflows")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1 << 20, &t->max_forward_overflows)) return 2;
        } else if (!strcmp(a, "--auto-fallback")) { t->auto_fallback = true;
        } else if (!strcmp(a, "--f32-weight-grads")) { t->f32_weight_grads = true;
        } else if (!strcmp(a, "--bn-low")) { t->bn_low = true;
        } else if (!strcmp(a, "--save")) { NEED_VALUE(); t->save = v;
        } else if (!strcmp(a, "--stop-after")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 100000, &t->stop_after)) return 2;
        } else if (!strcmp(a, "--resume")) { NEED_VALUE(); t->resume = v;
        } else if (!strcmp(a, "--lr-schedule")) { NEED_VALUE(); t->lr_schedule = v;
        } else if (!strcmp(a, "--epochs")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 100000, &t->epochs)) return 2;
        } else if (!strcmp(a, "--batch")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1 << 20, &t->batch)) return 2;
        } else if (!strcmp(a, "--threads")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1024, &t->threads)) return 2;
        } else if (!strcmp(a, "--max-steps")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1 << 30, &t->max_steps)) return 2;
        } else if (!strcmp(a, "--seed")) { NEED_VALUE(); if (!arg_u64(cmd, a, v, &t->seed)) return 2;
        } else if (!strcmp(a, "--init")) { NEED_VALUE();
            if (mp_init_scheme_parse(v, &t->init) != MP_OK) { fprintf(stderr, "mixprec %s: --init: %s\n", cmd, mp_last_error()); return 2; }
        } else if (!strcmp(a, "--monitor-interval")) { NEED_VALUE(); if (!arg_monitor_interval(cmd, a, v, &t->monitor_interval)) return 2;
        } else if (!strcmp(a, "--monitor-csv")) { NEED_VALUE(); t->monitor_csv = v;
        } else if (!strcmp(a, "--gpus")) { NEED_VALUE(); if (!arg_int(cmd, a, v, 1, 1024, &t->gpus)) return 2;
        } else if (!strcmp(a, "--allreduce")) { NEED_VALUE(); t->allreduce = v;
            if (strcmp(v, "auto") && strcmp(v, "fp32") && strcmp(v, "fp16") && strcmp(v, "bf16")) { fprintf(stderr, "mixprec %s: --allreduce '%s' must be auto, fp32, fp16 or bf16\n", cmd, v); return 2; }
        } else if (!strcmp(a, "--bucket-mb")) { NEED_VALUE(); if (!arg_float(cmd, a, v, 0.01f, 4096, &t->bucket_mb)) return 2;
        } else if (!strcmp(a, "--dist-timeout")) { NEED_VALUE(); if (!arg_float(cmd, a, v, 1, 1e6f, &t->dist_timeout)) return 2;
        } else if (!strcmp(a, "--sync-bn")) { t->sync_bn = true;
        } else if (!strcmp(a, "--reference")) { t->reference = true;
        } else if (!strcmp(a, "--quiet")) { t->quiet = true;
        } else {
            fprintf(stderr, "mixprec %s: unknown option '%s' (see mixprec %s --help)\n", cmd, a, cmd);
            return 2;
        }
    }
    return 0;
}

/* Under mpirun a rank killed by the launcher (because another rank failed)
 * still says why it stops. */
static char sigterm_line[96];
static void on_sigterm(int sig) {
    (void)sig;
    ssize_t w = write(2, sigterm_line, strlen(sigterm_line));
    (void)w;
    _exit(1);
}

/* mpirun launch: this rank's communicator, with --gpus (if given) equal to
 * the number of ranks. Returns 0, or the exit code after the error line. */
static int join_mpi(const train_args *t, mp_dist **dist, int *rank) {
    int world = 1;
    bool launched = false;
    *dist = NULL;
    *rank = 0;
    if (mp_dist_mpi_env(&launched, &world, rank) != MP_OK) { /* each process would train alone as rank 0 */
        fprintf(stderr, "mixprec train: %s\n", mp_last_error());
        return 2;
    }
    if (!launched) return 0;
    if (t->gpus && t->gpus != world) {
        fprintf(stderr, "mixprec train: rank %d: --gpus %d, but mpirun started %d ranks (one GPU per rank): the "
                        "world size must match\n", *rank, t->gpus, world);
        return 2;
    }
    snprintf(sigterm_line, sizeof sigterm_line,
             "mixprec train: rank %d: terminated by the launcher (another rank failed)\n", *rank);
    signal(SIGTERM, on_sigterm);
    if (mp_dist_mpi_create(t->dist_timeout, dist) != MP_OK) {
        fprintf(stderr, "mixprec train: rank %d: %s\n", *rank, mp_last_error());
        return 1;
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    train_args t;
    int rc = train_args_parse("train", argc, argv, &t, NULL, NULL, usage);
    if (rc) return rc == 1 ? 0 : rc;
    mp_dist *dist = NULL;
    int rank = 0;
    if (!t.print_precision && (rc = join_mpi(&t, &dist, &rank)) != 0) return rc;
    if (dist) {
        if (rank != 0) t.quiet = true, t.log = NULL, t.monitor_csv = NULL, t.numerics_log = NULL;
        char dev[16];
        snprintf(dev, sizeof dev, "cuda:%d", mp_dist_device(dist));
        t.device = strdup(dev);
    }
    rc = run_train(&t, dist, rank);
    mp_dist_destroy(dist);
    if (dist) free((char *)t.device);
    return rc;
}

/* The run's monitor and its --monitor-csv, begun by mp_fit's on_start. */
typedef struct {
    double interval;
    const char *csv_path;
    FILE *out, *csv;
    mp_monitor *mon;
} monitor_run;

static mp_status begin_monitor(void *arg) {
    monitor_run *mr = arg;
    if (mr->csv_path) MP_TRY(mp_output_open(mr->csv_path, "--monitor-csv", false, &mr->csv));
    return mp_monitor_begin_run(mr->interval, mr->csv, mr->csv_path, mr->out, &mr->mon);
}

static int run_train(train_args *targ, mp_dist *dist, int rank) {
    train_args t = *targ;
    int rc;
    mp_precision precision;
    if (mp_precision_parse(t.precision, &precision) != MP_OK ||
        train_check_precision_options(&t, precision) != MP_OK) { /* before any data is read */
        fprintf(stderr, "mixprec train: %s\n", mp_last_error());
        return 2;
    }
    if (t.numerics_every && !t.numerics_log) {
        fprintf(stderr, "mixprec train: --numerics-every needs --numerics-log FILE\n");
        return 2;
    }
    mp_device device;
    if (mp_device_parse(t.device, &device) != MP_OK) {
        fprintf(stderr, "mixprec train: %s\n", mp_last_error());
        return 2;
    }
    if (t.gpus > 1 && !dist) {
        int found = mp_device_gpu_count();
        if (device.kind != MP_DEVICE_CUDA || t.gpus > found) {
            fprintf(stderr, "mixprec train: --gpus %d: %s (found %d GPU%s)\n", t.gpus,
                    device.kind != MP_DEVICE_CUDA && strcmp(t.device, "auto")
                        ? "data-parallel training runs on GPUs, not with --device cpu"
                        : "more GPUs than this machine has",
                    found, found == 1 ? "" : "s");
            return 2;
        }
    }
    if (mp_model_check_name(t.model) != MP_OK) {
        fprintf(stderr, "mixprec train: --model: %s\n", mp_last_error());
        return 2;
    }
    if ((rc = common_opts_check_data("train", &t.c))) return rc;
    /* every output path, before any data is read or a step trained */
    if (!t.print_precision && ((rc = cli_check_output("train", "--save", rank == 0 ? t.save : NULL)) ||
                               (rc = cli_check_output("train", "--log", t.log)) ||
                               (rc = cli_check_output("train", "--monitor-csv", t.monitor_csv)) ||
                               (rc = cli_check_output("train", "--numerics-log", t.numerics_log)) ||
                               (rc = cli_check_outputs_distinct("train", 4,
                                                                (const char *[]){"--save", "--log", "--monitor-csv",
                                                                                 "--numerics-log"},
                                                                (const char *[]){t.save, t.log, t.monitor_csv,
                                                                                 t.numerics_log})) ||
                               /* a log appended to the checkpoint it resumes from, or written over the
                                * policy it reads, would destroy that input (--save may replace --resume) */
                               (rc = cli_check_outputs_distinct("train", 5,
                                                                (const char *[]){"--resume", "--policy", "--log",
                                                                                 "--monitor-csv", "--numerics-log"},
                                                                (const char *[]){t.resume, t.policy, t.log,
                                                                                 t.monitor_csv, t.numerics_log})) ||
                               (rc = cli_check_outputs_distinct("train", 2, (const char *[]){"--policy", "--save"},
                                                                (const char *[]){t.policy,
                                                                                 rank == 0 ? t.save : NULL})) ||
                               (rc = cli_check_inputs_kept("train", &t.c, t.model, 4,
                                                           (const char *[]){"--save", "--log", "--monitor-csv",
                                                                            "--numerics-log"},
                                                           (const char *[]){rank == 0 ? t.save : NULL, t.log,
                                                                            t.monitor_csv, t.numerics_log}))))
        return rc;
    if (t.threads) omp_set_num_threads(t.threads);

    mp_dataset train = {0}, test = {0};
    mp_model m = {0};
    mp_optim_opts oo;
    float lr = 0;
    mp_status s = common_opts_optimizer(&t.c, &oo, &lr);
    if (s == MP_OK) s = common_opts_load_data(&t.c, t.seed, &train, &test);
    /* rank 0's model, and (--gpus) the other ranks' replicas; --policy and --bn-low then give the final policy */
    mp_model_spec spec = {.model = t.model, .data = &train,
                          .policy = {.precision = precision, .overrides = t.overrides}};
    if (s == MP_OK) s = mp_model_spec_build(&spec, &m);
    char merged[4096];
    if (s == MP_OK && train_apply_policy(&t, m.g, &spec.policy, merged, sizeof merged) != MP_OK) {
        fprintf(stderr, "mixprec train: %s\n", mp_last_error()); /* a usage error: exit 2 */
        mp_model_free(&m);
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return 2;
    }
    if (s == MP_OK && t.print_precision) {
        mp_graph_print_precision(m.g, stdout);
        mp_model_free(&m);
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return 0;
    }
    mp_fit_result res;
    /* --monitor-csv is opened once mp_fit has set the run up and checked it: a refused run leaves it as it was */
    monitor_run mr = {.interval = t.monitor_interval, .csv_path = t.monitor_csv};
    if (s == MP_OK) {
        FILE *out = t.quiet ? NULL : stdout;
        char dev[32];
        if (out)
            fprintf(out, "mixprec: model %s (%lld parameters) on %s: %d train / %d test samples of %dx%dx%d, "
                         "batch %d, %s lr %g, precision %s, device %s, %d threads\n",
                    t.model, (long long)mp_graph_param_count(m.g), train.source, train.n, test.n, train.c, train.h,
                    train.w, t.batch, t.c.optimizer, lr, t.precision, mp_device_name(device, dev, sizeof dev),
                    omp_get_max_threads());
        int ranks = dist ? mp_dist_world(dist) : t.gpus;
        if (out && ranks > 1)
            fprintf(out, "mixprec: data parallel over %d GPUs (%s): global batch %d, gradients all-reduced (%s)\n",
                    ranks, dist ? "mpirun ranks" : "one thread each", ranks * t.batch,
                    t.allreduce ? t.allreduce : "auto");
        const mp_loss_scaling scaling = t.loss_scaling ? (!strcmp(t.loss_scaling, "on") ? MP_LOSS_SCALING_ON
                                                                                          : MP_LOSS_SCALING_OFF)
                                        : t.scaler_set ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_AUTO;
        mp_fit_opts o = {.model_name = t.model, .data_name = t.c.data,
                         .trainer = {.batch = t.batch, .device = device, .loss_scaling = scaling, .scaler = t.scaler,
                                     .accumulate = t.accumulate, .clip_norm = t.clip_norm, .clip_value = t.clip_value,
                                     .max_forward_overflows = t.max_forward_overflows,
                                     .auto_fallback = t.auto_fallback, .reference = t.reference,
                                     .f32_weight_grads = t.f32_weight_grads, .dist = dist, .allreduce = t.allreduce,
                                     .bucket_mb = t.bucket_mb, .sync_bn = t.sync_bn, .events = out,
                                     .penalty = {.kind = t.penalty, .weight = t.penalty_weight}},
                         .optim = oo, .lr = lr, .lr_schedule = t.lr_schedule, .epochs = t.epochs,
                         .max_steps = t.max_steps, .stop_after = t.stop_after, .seed = t.seed, .init = t.init,
                         .augment = t.c.augment,
                         .normalize = t.c.normalize, .random_resized_crop = t.c.random_resized_crop,
                         .data_workers = t.c.decode_threads, .out = out, .print_memory = t.print_memory, .log_path = t.log,
                         .save_path = t.save, .resume_path = t.resume, .numerics_log = t.numerics_log,
                         .numerics_every = t.numerics_every, .gpus = dist ? 0 : t.gpus,
                         .dist_timeout = t.dist_timeout, .replica = mp_model_spec_build, .replica_arg = &spec,
                         .on_start = begin_monitor, .on_start_arg = &mr};
        mr.out = out;
        s = mp_fit(&m, &train, &test, &o, &res);
        if (s == MP_OK && out)
            fprintf(out, "done: %d epochs in %.1fs, test accuracy %.2f%%, %.0f images/s, activation arena %.1f MiB\n",
                    res.epochs_run, res.total_seconds, 100 * res.test_acc, res.images_per_s,
                    (double)res.arena_bytes / (1 << 20));
        /* per-epoch energy: epochs_run counts from 1 even after --resume, so only for fresh runs */
        mp_status ms = mp_monitor_end_run(mr.mon, s == MP_OK ? out : NULL,
                                          s == MP_OK && !t.resume ? res.epochs_run : 0);
        if (s == MP_OK) s = ms;
    }
    if (mr.csv && s == MP_OK) s = mp_output_close(mr.csv, t.monitor_csv, "--monitor-csv");
    else if (mr.csv) fclose(mr.csv); /* the first error is the one reported */
    if (s != MP_OK && dist) fprintf(stderr, "mixprec train: rank %d: %s\n", rank, mp_last_error());
    else if (s != MP_OK) fprintf(stderr, "mixprec train: %s\n", mp_last_error());
    mp_model_free(&m);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    return s == MP_OK ? 0 : 1;
}
