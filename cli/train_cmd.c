/* train_cmd.c — `mixprec train`: parse options, load data, build the model,
 * train with progress output. A bare `mixprec train` trains the default
 * model on Fashion-MNIST. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "amp/policy.h"
#include "core/error.h"
#include "train/trainer.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec train [options]\n\n"
            "Train a model; with no options, the default CNN on Fashion-MNIST.\n\n"
            "model and data:\n"
            "  --model M           %s (default small)\n"
            "  --data D            fashion-mnist | mnist | cifar10 | synthetic (default fashion-mnist)\n"
            "  --data-dir DIR      dataset folder (default " FASHION_MNIST_DIR " for fashion-mnist)\n"
            "  --synthetic-shape S CxHxW of synthetic samples (default 3x32x32)\n"
            "  --synthetic-size N  synthetic training samples (default 10000; test: N/5)\n"
            "  --train-samples N   train on the first N samples only\n"
            "  --augment           random crop with padding + horizontal flip\n"
            "  --no-normalize      do not normalize inputs by the training set's mean/std\n\n"
            "training:\n"
            "  --epochs N          epochs (default 3)\n"
            "  --batch B           batch size (default 128)\n"
            "  --optimizer O       sgd | adam | adamw (default adam)\n"
            "  --lr X              learning rate (default 0.002 for adam/adamw, 0.05 for sgd)\n"
            "  --momentum X        SGD momentum (default 0.9 for sgd)\n"
            "  --nesterov          Nesterov momentum (sgd)\n"
            "  --weight-decay X    weight decay on conv/linear weights (default 0; 5e-4 for sgd)\n"
            "  --lr-schedule S     constant | step:STEPS:GAMMA | cosine[:MIN_LR], optional ,warmup:N\n"
            "                      (default cosine)\n"
            "  --precision P       %s (default fp32)\n"
            "  --precision-override L  per-layer dtypes, e.g. fc=fp32,conv1=bf16\n"
            "  --print-precision   list every node's compute and storage dtype, then exit\n"
            "  --bn-low            fp16/bf16 policies: BatchNorm in low precision too (default fp32)\n"
            "  --loss-scaling on|off  loss scaling (default on for amp-fp16 and o2-fp16)\n"
            "  --loss-scale S      static loss scale S, or 'dynamic' (default dynamic, init 65536)\n"
            "  --loss-scale-growth X   dynamic growth factor (default 2)\n"
            "  --loss-scale-backoff X  dynamic backoff factor (default 0.5)\n"
            "  --loss-scale-window N   clean steps before growing (default 2000)\n"
            "  --min-loss-scale X / --max-loss-scale X   clamps (Apex: max 16777216)\n"
            "  --loss-scale-hysteresis N  absorb N-1 overflows before backing off (DeepSpeed)\n"
            "  --accumulate N      micro-batches per optimizer step (default 1)\n"
            "  --clip-grad-norm X  clip the global norm of the (unscaled) gradients\n"
            "  --clip-grad-value X clip each (unscaled) gradient element to [-X, X]\n"
            "  --max-forward-overflows N  consecutive NaN/inf forwards before stopping (default 3)\n"
            "  --auto-fallback     move a layer that overflows in the forward pass to fp32\n"
            "  --save FILE         write a checkpoint (safetensors) after every epoch\n"
            "  --resume FILE       continue the run saved in FILE (same options as the saved run)\n"
            "  --stop-after N      stop after epoch N (the schedule still spans --epochs); split a\n"
            "                      long run into jobs with --save and --resume\n"
            "  --seed S            random seed for init, shuffling, dropout (default 1)\n"
            "  --max-steps N       stop each epoch after N steps (quick runs)\n\n"
            "execution and output:\n"
            "  --threads T         CPU threads (default: all cores)\n"
            "  --reference         use the plain-C reference kernels instead of oneDNN\n"
            "  --log FILE.jsonl    write one JSON record per epoch\n"
            "  --quiet             no progress output\n"
            "  -h, --help          this help\n",
            mp_model_list(), mp_precision_list());
}

typedef struct {
    const char *model, *data, *data_dir, *log, *precision, *lr_schedule, *optimizer, *overrides, *save, *resume;
    const char *loss_scaling; /* "on", "off" or NULL (policy default) */
    mp_scaler_opts scaler;
    bool scaler_set;
    int accumulate, max_forward_overflows, stop_after;
    float clip_norm, clip_value;
    bool auto_fallback, bn_low;
    int epochs, batch, threads, max_steps, train_samples, syn_c, syn_h, syn_w, syn_n;
    float lr, momentum, weight_decay;
    bool lr_set, momentum_set, wd_set, nesterov, augment, normalize, reference, quiet, print_precision;
    uint64_t seed;
} train_args;

#define NEED_VALUE()                                                                      \
    do {                                                                                  \
        if (i + 1 >= argc) {                                                              \
            fprintf(stderr, "mixprec train: %s needs a value (see --help)\n", a);        \
            return 2;                                                                     \
        }                                                                                 \
        v = argv[++i];                                                                    \
    } while (0)

static int parse(int argc, char **argv, train_args *t) {
    *t = (train_args){.model = "small", .data = "fashion-mnist", .precision = "fp32", .lr_schedule = "cosine",
                      .optimizer = "adam", .epochs = 3, .batch = 128, .seed = 1, .normalize = true, .syn_c = 3,
                      .syn_h = 32, .syn_w = 32, .syn_n = 10000, .scaler = {.dynamic = true}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--model")) { NEED_VALUE(); t->model = v;
        } else if (!strcmp(a, "--data")) { NEED_VALUE(); t->data = v;
        } else if (!strcmp(a, "--data-dir")) { NEED_VALUE(); t->data_dir = v;
        } else if (!strcmp(a, "--log")) { NEED_VALUE(); t->log = v;
        } else if (!strcmp(a, "--precision")) { NEED_VALUE(); t->precision = v;
        } else if (!strcmp(a, "--precision-override")) { NEED_VALUE(); t->overrides = v;
        } else if (!strcmp(a, "--print-precision")) { t->print_precision = true;
        } else if (!strcmp(a, "--loss-scaling")) { NEED_VALUE();
            if (strcmp(v, "on") && strcmp(v, "off")) { fprintf(stderr, "mixprec train: --loss-scaling '%s' must be on or off\n", v); return 2; }
            t->loss_scaling = v;
        } else if (!strcmp(a, "--loss-scale")) { NEED_VALUE(); t->scaler_set = true;
            if (strcmp(v, "dynamic")) { if (!arg_float("train", a, v, 0, 3.4e38, &t->scaler.init_scale)) return 2; t->scaler.dynamic = false; }
        } else if (!strcmp(a, "--loss-scale-growth")) { NEED_VALUE(); if (!arg_float("train", a, v, -1e30, 1e30, &t->scaler.growth_factor)) return 2; t->scaler_set = true;
        } else if (!strcmp(a, "--loss-scale-backoff")) { NEED_VALUE(); if (!arg_float("train", a, v, -1e30, 1e30, &t->scaler.backoff_factor)) return 2; t->scaler_set = true;
        } else if (!strcmp(a, "--loss-scale-window")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1 << 30, &t->scaler.growth_interval)) return 2; t->scaler_set = true;
        } else if (!strcmp(a, "--min-loss-scale")) { NEED_VALUE(); if (!arg_float("train", a, v, 0, 3.4e38, &t->scaler.min_scale)) return 2; t->scaler_set = true;
        } else if (!strcmp(a, "--max-loss-scale")) { NEED_VALUE(); if (!arg_float("train", a, v, 0, 3.4e38, &t->scaler.max_scale)) return 2; t->scaler_set = true;
        } else if (!strcmp(a, "--loss-scale-hysteresis")) { NEED_VALUE(); if (!arg_int("train", a, v, 0, 1 << 20, &t->scaler.hysteresis)) return 2; t->scaler_set = true;
        } else if (!strcmp(a, "--accumulate")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1 << 20, &t->accumulate)) return 2;
        } else if (!strcmp(a, "--clip-grad-norm")) { NEED_VALUE(); if (!arg_float("train", a, v, 0, 1e30, &t->clip_norm)) return 2;
        } else if (!strcmp(a, "--clip-grad-value")) { NEED_VALUE(); if (!arg_float("train", a, v, 0, 1e30, &t->clip_value)) return 2;
        } else if (!strcmp(a, "--max-forward-overflows")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1 << 20, &t->max_forward_overflows)) return 2;
        } else if (!strcmp(a, "--auto-fallback")) { t->auto_fallback = true;
        } else if (!strcmp(a, "--bn-low")) { t->bn_low = true;
        } else if (!strcmp(a, "--save")) { NEED_VALUE(); t->save = v;
        } else if (!strcmp(a, "--stop-after")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 100000, &t->stop_after)) return 2;
        } else if (!strcmp(a, "--resume")) { NEED_VALUE(); t->resume = v;
        } else if (!strcmp(a, "--lr-schedule")) { NEED_VALUE(); t->lr_schedule = v;
        } else if (!strcmp(a, "--optimizer")) { NEED_VALUE(); t->optimizer = v;
        } else if (!strcmp(a, "--epochs")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 100000, &t->epochs)) return 2;
        } else if (!strcmp(a, "--batch")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1 << 20, &t->batch)) return 2;
        } else if (!strcmp(a, "--threads")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1024, &t->threads)) return 2;
        } else if (!strcmp(a, "--max-steps")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1 << 30, &t->max_steps)) return 2;
        } else if (!strcmp(a, "--train-samples")) { NEED_VALUE(); if (!arg_int("train", a, v, 1, 1 << 30, &t->train_samples)) return 2;
        } else if (!strcmp(a, "--synthetic-size")) { NEED_VALUE(); if (!arg_int("train", a, v, 5, 1 << 24, &t->syn_n)) return 2;
        } else if (!strcmp(a, "--synthetic-shape")) { NEED_VALUE(); if (!arg_shape3("train", a, v, &t->syn_c, &t->syn_h, &t->syn_w)) return 2;
        } else if (!strcmp(a, "--lr")) { NEED_VALUE(); if (!arg_float("train", a, v, 1e-12, 1e6, &t->lr)) return 2; t->lr_set = true;
        } else if (!strcmp(a, "--momentum")) { NEED_VALUE(); if (!arg_float("train", a, v, 0, 1, &t->momentum)) return 2; t->momentum_set = true;
        } else if (!strcmp(a, "--weight-decay")) { NEED_VALUE(); if (!arg_float("train", a, v, 0, 1e3, &t->weight_decay)) return 2; t->wd_set = true;
        } else if (!strcmp(a, "--seed")) { NEED_VALUE(); if (!arg_u64("train", a, v, &t->seed)) return 2;
        } else if (!strcmp(a, "--nesterov")) { t->nesterov = true;
        } else if (!strcmp(a, "--augment")) { t->augment = true;
        } else if (!strcmp(a, "--no-normalize")) { t->normalize = false;
        } else if (!strcmp(a, "--reference")) { t->reference = true;
        } else if (!strcmp(a, "--quiet")) { t->quiet = true;
        } else {
            fprintf(stderr, "mixprec train: unknown option '%s' (see mixprec train --help)\n", a);
            return 2;
        }
    }
    return 0;
}

static mp_status load_data(const train_args *t, mp_dataset *train, mp_dataset *test) {
    if (!strcmp(t->data, "fashion-mnist") || !strcmp(t->data, "mnist")) {
        const char *dir = t->data_dir ? t->data_dir : FASHION_MNIST_DIR;
        if (!strcmp(t->data, "mnist") && !t->data_dir)
            return mp_error(MP_ERR_INVALID_ARG, "--data mnist needs --data-dir DIR (MNIST IDX files)");
        MP_TRY(mp_dataset_load_fashion_mnist(dir, true, train));
        return mp_dataset_load_fashion_mnist(dir, false, test);
    }
    if (!strcmp(t->data, "cifar10")) {
        if (!t->data_dir) return mp_error(MP_ERR_INVALID_ARG, "--data cifar10 needs --data-dir DIR (CIFAR-10 binary batches)");
        MP_TRY(mp_dataset_load_cifar10(t->data_dir, true, train));
        return mp_dataset_load_cifar10(t->data_dir, false, test);
    }
    if (!strcmp(t->data, "synthetic")) {
        /* one stream of samples (same class patterns), split into train and test */
        mp_dataset all;
        int n_test = t->syn_n / 5;
        MP_TRY(mp_dataset_synthetic(t->syn_n + n_test, t->syn_c, t->syn_h, t->syn_w, 10, t->seed, &all));
        mp_status s = mp_dataset_slice(&all, 0, t->syn_n, train);
        if (s == MP_OK) s = mp_dataset_slice(&all, t->syn_n, n_test, test);
        mp_dataset_free(&all);
        return s;
    }
    return mp_error(MP_ERR_INVALID_ARG, "--data '%s': unknown dataset (known: fashion-mnist, mnist, cifar10, synthetic)",
                    t->data);
}

static mp_status setup_optim(const train_args *t, mp_optim_opts *oo, float *lr) {
    mp_optim_kind kind;
    if (mp_optim_kind_parse(t->optimizer, &kind) != MP_OK)
        return mp_error(MP_ERR_INVALID_ARG, "--optimizer '%s': unknown (known: sgd, adam, adamw)", t->optimizer);
    bool sgd = kind == MP_OPTIM_SGD;
    *oo = (mp_optim_opts){.kind = kind,
                          .momentum = t->momentum_set ? t->momentum : (sgd ? 0.9f : 0),
                          .nesterov = t->nesterov,
                          .weight_decay = t->wd_set ? t->weight_decay : (sgd ? 5e-4f : 0)};
    *lr = t->lr_set ? t->lr : (sgd ? 0.05f : 0.002f);
    return MP_OK;
}

int cmd_train(int argc, char **argv) {
    train_args t;
    int rc = parse(argc, argv, &t);
    if (rc) return rc == 1 ? 0 : rc;
    mp_precision precision;
    if (mp_precision_parse(t.precision, &precision) != MP_OK) {
        fprintf(stderr, "mixprec train: %s\n", mp_last_error());
        return 2;
    }
    if (!mp_model_describe(t.model)) {
        fprintf(stderr, "mixprec train: --model '%s': unknown model (known: %s)\n", t.model, mp_model_list());
        return 2;
    }
    if (t.threads) omp_set_num_threads(t.threads);

    mp_dataset train = {0}, test = {0}, sub = {0};
    mp_model m = {0};
    mp_optim_opts oo;
    float lr = 0;
    mp_status s = setup_optim(&t, &oo, &lr);
    if (s == MP_OK) s = load_data(&t, &train, &test);
    if (s == MP_OK && t.train_samples && t.train_samples < train.n) {
        s = mp_dataset_subset(&train, t.train_samples, &sub);
        if (s == MP_OK) {
            mp_dataset_free(&train);
            train = sub;
        }
    }
    if (s == MP_OK) s = mp_dataset_check_finite(&train);
    if (s == MP_OK) s = mp_dataset_check_finite(&test);
    if (s == MP_OK) s = mp_model_build(t.model, train.c, train.h, train.w, train.classes, &m);
    if (s == MP_OK)
        s = mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = precision, .overrides = t.overrides, .bn_low = t.bn_low});
    if (s == MP_OK && t.print_precision) {
        mp_graph_print_precision(m.g, stdout);
        mp_model_free(&m);
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return 0;
    }
    mp_train_result res;
    if (s == MP_OK) {
        FILE *out = t.quiet ? NULL : stdout;
        if (out)
            fprintf(out, "mixprec: model %s (%lld parameters) on %s: %d train / %d test samples of %dx%dx%d, "
                         "batch %d, %s lr %g, precision %s, %d threads\n",
                    t.model, (long long)mp_graph_param_count(m.g), train.source, train.n, test.n, train.c, train.h,
                    train.w, t.batch, t.optimizer, lr, t.precision, omp_get_max_threads());
        mp_train_opts o = {.model_name = t.model, .data_name = t.data, .precision = t.precision, .epochs = t.epochs,
                           .batch = t.batch, .lr = lr, .optim = oo, .lr_schedule = t.lr_schedule, .seed = t.seed,
                           .augment = t.augment, .normalize = t.normalize, .max_steps = t.max_steps,
                           .use_onednn = !t.reference, .log_path = t.log, .out = out,
                           .loss_scaling = t.loss_scaling ? !strcmp(t.loss_scaling, "on")
                                                          : (precision == MP_PRECISION_AMP_FP16 ||
                                                             precision == MP_PRECISION_O2_FP16 || t.scaler_set),
                           .scaler = t.scaler, .accumulate = t.accumulate, .clip_norm = t.clip_norm,
                           .clip_value = t.clip_value, .max_forward_overflows = t.max_forward_overflows,
                           .auto_fallback = t.auto_fallback, .save_path = t.save, .resume_path = t.resume,
                           .stop_after = t.stop_after};
        s = mp_train_run(&m, &train, &test, &o, &res);
        if (s == MP_OK && out)
            fprintf(out, "done: %d epochs in %.1fs, test accuracy %.2f%%, %.0f images/s, activation arena %.1f MiB\n",
                    res.epochs_run, res.total_seconds, 100 * res.test_acc, res.images_per_s,
                    (double)res.arena_bytes / (1 << 20));
    }
    if (s != MP_OK) fprintf(stderr, "mixprec train: %s\n", mp_last_error());
    mp_model_free(&m);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    return s == MP_OK ? 0 : 1;
}
