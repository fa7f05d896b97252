/* train_gan_cmd.c — `mixprec train-gan`: AC-GAN (seed 001) on Fashion-MNIST
 * or any dataset of the `train` command, in any precision policy, on the CPU
 * or a GPU; a sample grid per epoch and per-batch times as JSONL. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/dataset.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common_opts.h"
#include "cli/penalty_arg.h"
#include "cli/scaler_args.h"
#include "core/error.h"
#include "io/image_grid.h"
#include "train/gan_trainer.h"

#define LATENT 100

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec train-gan [options]\n\n"
            "Train an AC-GAN (generator: noise x class embedding -> dense 7x7x128 -> transposed convs -> tanh;\n"
            "discriminator: convs -> real/fake logit + class logits) with two Adam optimizers and one loss\n"
            "scaler shared by its three losses. After every epoch a grid of generated samples is written,\n"
            "one row per class (fixed noise per column), with D/G losses, skipped steps and time per batch.\n\n"
            "data:\n"
            "  --data D            fashion-mnist | mnist | cifar10 | synthetic | npy:X.npy,Y.npy[,XT.npy,YT.npy]\n"
            "                      | folder:DIR (default fashion-mnist); only the training part is used, of\n"
            "                      samples whose H and W are multiples of 4\n"
            "  --data-dir DIR      dataset folder (default " FASHION_MNIST_DIR " for fashion-mnist)\n"
            "  --synthetic-shape S CxHxW of synthetic samples (default 3x32x32)\n"
            "  --synthetic-size N  synthetic training samples (default 10000)\n"
            "  --train-samples N   train on the first N samples only\n"
            "  --val-fraction F    npy: with two files and folder: without train/ and val/ (or test/): the\n"
            "                      share F of the samples, each class's share evenly spaced through it, is\n"
            "                      held out, not trained on (default 0.1)\n"
            "  --npy-layout L      auto | nchw | nhwc: layout of 4-D .npy images (default auto)\n"
            "  --image-size HxW, --image-channels C, --bad-images P, --decode-threads N, --decode-memory-mb M\n"
            "                      folder: as for `mixprec train` (see its --help)\n"
            "  images are used as they are: no augmentation, no normalization (mapped from [0, 1] to [-1, 1])\n\n"
            "training:\n"
            "  --epochs N          epochs (default 5)\n"
            "  --batch B           batch size (default 64)\n"
            "  --lr X              Adam learning rate of both networks (default 0.0002)\n"
            "  --beta1 X           Adam beta1, 0 (no momentum) included (default 0.5)\n"
            "  --aux-fake-weight W weight of the discriminator's class loss on generated images (default 0,\n"
            "                      as Keras' AC-GAN: its class head learns from real images only, whose class\n"
            "                      loss weighs 2); the generator's class loss weighs 1 whatever W is\n"
            "  --gradient-penalty r1:GAMMA | wgan-gp:LAMBDA\n"
            "                      a gradient penalty on the discriminator (second derivatives):\n"
            "                      r1 = GAMMA/2 x mean ||d D(x)/dx||^2 on the real images; wgan-gp = LAMBDA x\n"
            "                      mean (||d D(x)/dx|| - 1)^2 on random mixes of real and generated images.\n"
            "                      Computed from unscaled gradients; its value is in the epoch line and log\n"
            "  --precision P       %s (default fp32); loss scaling\n"
            "                      (dynamic) for amp-fp16 and o2-fp16, and for any precision given one of:\n",
            mp_precision_list());
    scaler_args_help(f);
    fprintf(f,
            "  --seed S            random seed for init, shuffling, noise (default 1)\n"
            "  --max-steps N       stop each epoch after N batches (quick runs)\n\n"
            "execution and output:\n"
            "  --device D          cpu | cuda | cuda:N | auto (default auto)\n"
            "  --threads T         CPU threads (default: all cores)\n"
            "  --reference         use the plain-C reference kernels instead of oneDNN\n"
            "  --out DIR           output folder (default a new runs/gan-YYYYmmdd-HHMMSS[-N]): samples_epochN.png\n"
            "                      (PGM/PPM without libpng) and batch_times.jsonl (a record per epoch with\n"
            "                      every batch's time in ms, its mean/median/min/max, losses, skipped steps);\n"
            "                      a folder an earlier run wrote batch_times.jsonl to is refused\n"
            "  --quiet             no progress output\n"
            "  -h, --help          this help\n\n" INPUT_FILES_HELP);
}

typedef struct {
    common_opts c;
    const char *precision, *device, *out;
    int epochs, batch, threads, max_steps;
    float beta1, aux_fake_weight;
    uint64_t seed;
    bool reference, quiet;
    mp_penalty_kind penalty;
    float penalty_weight;
    mp_scaler_opts scaler; /* --loss-scale and the other scaler options */
    bool scaler_set;
} gan_args;

/* 0: go on; 1: --help printed; 2: bad usage (message printed). */
static int parse(int argc, char **argv, gan_args *t) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int shared = common_opts_parse("train-gan", argc, argv, &i, &t->c);
        if (!shared) shared = scaler_arg_parse("train-gan", argc, argv, &i, &t->scaler, &t->scaler_set);
        if (shared < 0) return 2;
        if (shared) {
            if (!strcmp(a, "--optimizer") || !strcmp(a, "--momentum") || !strcmp(a, "--nesterov") ||
                !strcmp(a, "--weight-decay")) {
                fprintf(stderr, "mixprec train-gan: %s is not an option of train-gan (it trains with Adam; see "
                                "--help)\n", a);
                return 2;
            }
            /* data options of `train` that the GAN's loader does not apply */
            if (!strcmp(a, "--augment") || !strcmp(a, "--random-resized-crop")) {
                fprintf(stderr, "mixprec train-gan: %s is not used by train-gan (it trains on the images as they "
                                "are, no augmentation; see --help)\n", a);
                return 2;
            }
            if (!strcmp(a, "--no-normalize")) {
                fprintf(stderr, "mixprec train-gan: --no-normalize is not used by train-gan (it never normalizes: "
                                "images in [0, 1] are mapped to tanh's [-1, 1]; see --help)\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        if (!strcmp(a, "--reference")) { t->reference = true; continue; }
        if (!strcmp(a, "--quiet")) { t->quiet = true; continue; }
        static const char *const with_value[] = {"--precision", "--device", "--out", "--epochs", "--batch",
                                                 "--threads", "--max-steps", "--seed", "--beta1",
                                                 "--aux-fake-weight", "--gradient-penalty"};
        const char *v = NULL;
        const int taken =
            arg_option_value("train-gan", argc, argv, &i, with_value, sizeof with_value / sizeof *with_value, &v);
        if (taken < 0) return 2;
        if (!taken) {
            fprintf(stderr, "mixprec train-gan: unknown option '%s' (see mixprec train-gan --help)\n", a);
            return 2;
        }
        bool ok = true;
        if (!strcmp(a, "--precision")) t->precision = v;
        else if (!strcmp(a, "--device")) t->device = v;
        else if (!strcmp(a, "--out")) t->out = v;
        else if (!strcmp(a, "--epochs")) ok = arg_int("train-gan", a, v, 1, 100000, &t->epochs);
        else if (!strcmp(a, "--batch")) ok = arg_int("train-gan", a, v, 1, 1 << 20, &t->batch);
        else if (!strcmp(a, "--threads")) ok = arg_int("train-gan", a, v, 1, 1024, &t->threads);
        else if (!strcmp(a, "--max-steps")) ok = arg_int("train-gan", a, v, 1, 1 << 30, &t->max_steps);
        else if (!strcmp(a, "--seed")) ok = arg_u64("train-gan", a, v, &t->seed);
        else if (!strcmp(a, "--beta1")) ok = arg_float("train-gan", a, v, 0, 0.9999, &t->beta1);
        else if (!strcmp(a, "--aux-fake-weight")) ok = arg_float("train-gan", a, v, 0, 100, &t->aux_fake_weight);
        else if (!strcmp(a, "--gradient-penalty")) ok = penalty_arg_parse("train-gan", v, true, &t->penalty, &t->penalty_weight);
        if (!ok) return 2;
    }
    return 0;
}

/* The sample grid of every epoch is a gray or an RGB image. */
#define GRID_CHANNELS "channels, but the sample grids need 1 (gray) or 3 (RGB)"
static bool grid_channels_ok(int c) { return c == 1 || c == 3; }

/* Every check that needs no data; 0 when all pass, else the exit code. */
static int check_args(gan_args *t, mp_precision *precision, mp_device *device) {
    if (mp_precision_parse(t->precision, precision) != MP_OK) {
        fprintf(stderr, "mixprec train-gan: --precision '%s': unknown precision (known: %s)\n", t->precision,
                mp_precision_list());
        return 2;
    }
    if (mp_device_parse(t->device, device) != MP_OK) {
        fprintf(stderr, "mixprec train-gan: %s\n", mp_last_error());
        return 2;
    }
    if (common_opts_check_data("train-gan", &t->c)) return 2;
    if (!strcmp(t->c.data, "synthetic") && !grid_channels_ok(t->c.syn_c)) {
        fprintf(stderr, "mixprec train-gan: --synthetic-shape %dx%dx%d: %d " GRID_CHANNELS "\n", t->c.syn_c,
                t->c.syn_h, t->c.syn_w, t->c.syn_c);
        return 2;
    }
    if (!t->out) return 0; /* the default: a new folder, made after these checks */
    int rc = cli_check_fresh_output_dir("train-gan", "--out", t->out, "batch_times.jsonl");
    if (rc) return rc;
    if (!cli_make_dirs(t->out)) {
        fprintf(stderr, "mixprec train-gan: --out '%s': cannot create directory: %s\n", t->out, strerror(errno));
        return 2;
    }
    char log[4200];
    snprintf(log, sizeof log, "%s/batch_times.jsonl", t->out);
    return cli_check_output("train-gan", "--out", log);
}

/* The checks of the loaded training set; 0 when all pass, else 2 after a message. */
static int check_train_set(const gan_args *t, const mp_dataset *train) {
    if (t->batch > train->n) {
        fprintf(stderr, "mixprec train-gan: --batch %d is larger than the training set (%d samples in %s)\n", t->batch,
                train->n, train->source);
        return 2;
    }
    if (!grid_channels_ok(train->c)) {
        fprintf(stderr, "mixprec train-gan: %s has samples of %dx%dx%d: %d " GRID_CHANNELS "\n", train->source,
                train->c, train->h, train->w, train->c);
        return 2;
    }
    return 0;
}

/* The command, run by cli_run_with_default_out. */
static int gan_main(int argc, char **argv, char *default_out, size_t cap) {
    gan_args t = {.c = common_opts_default(), .precision = "fp32", .device = "auto", .epochs = 5, .batch = 64,
                  .beta1 = 0.5f, .seed = 1};
    int rc = parse(argc, argv, &t);
    if (rc) return rc == 1 ? 0 : rc;
    mp_precision precision;
    mp_device device;
    if ((rc = check_args(&t, &precision, &device))) return rc;
    if (!t.out) {
        if ((rc = cli_claim_default_out("train-gan", "gan", default_out, cap))) return rc;
        t.out = default_out;
    }
    if (t.threads) omp_set_num_threads(t.threads);
    FILE *out = t.quiet ? NULL : stdout;
    if (!mp_image_png_available())
        fprintf(stderr, "mixprec train-gan: this build has no libpng: sample grids are written as PGM/PPM\n");

    mp_dataset train = {0}, test = {0};
    mp_acgan m = {0};
    mp_status s = common_opts_load_data(&t.c, t.seed, &train, &test);
    if (s == MP_OK && check_train_set(&t, &train)) {
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return 2;
    }
    if (s == MP_OK && mp_acgan_build(&m, train.c, train.h, train.w, train.classes, LATENT) != MP_OK) {
        fprintf(stderr, "mixprec train-gan: %s\n", mp_last_error()); /* the data's shape: bad input */
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return 2;
    }
    if (s == MP_OK && t.penalty == MP_PENALTY_WGAN_GP) s = mp_acgan_add_interpolates(&m);
    if (s == MP_OK) s = mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = precision});
    mp_policy_info policy = {0};
    if (s == MP_OK) s = mp_graph_policy(m.g, &policy);
    const bool scaling = policy.loss_scaling || t.scaler_set;
    char scaling_desc[64] = "";
    if (scaling && t.scaler.static_scale)
        snprintf(scaling_desc, sizeof scaling_desc, " (static loss scale %g)", (double)t.scaler.init_scale);
    else if (scaling && t.scaler.init_scale > 0)
        snprintf(scaling_desc, sizeof scaling_desc, " (dynamic loss scaling from %g)", (double)t.scaler.init_scale);
    else if (scaling)
        snprintf(scaling_desc, sizeof scaling_desc, " (dynamic loss scaling)");
    mp_gan_train_opts o = {
        .trainer = {.batch = t.batch, .device = device, .reference = t.reference, .events = out, .scaler = t.scaler,
                    .loss_scaling = t.scaler_set ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_AUTO},
        .lr = t.c.lr_set ? t.c.lr : 2e-4f, .beta1 = t.beta1, .beta1_as_given = true,
        .aux_fake_weight = t.aux_fake_weight, .seed = t.seed,
        .epochs = t.epochs, .max_steps = t.max_steps, .data_workers = t.c.decode_threads,
        .data_name = t.c.data, .out_dir = t.out, .out = out,
        .penalty = t.penalty, .penalty_weight = t.penalty_weight};
    if (s == MP_OK && out) {
        int64_t all = mp_graph_param_count(m.g), gen = mp_acgan_generator_param_count(&m);
        char dev[32];
        fprintf(out, "mixprec train-gan: AC-GAN (%lld parameters: G %lld, D %lld) on %s: %d samples of %dx%dx%d, "
                     "%d classes, batch %d, Adam lr %g beta1 %g, D class loss weights real %g generated %g, "
                     "precision %s%s, device %s, %d threads; writing to %s\n",
                (long long)all, (long long)gen, (long long)(all - gen), train.source, train.n, train.c, train.h,
                train.w, train.classes, t.batch, o.lr, o.beta1, MP_GAN_AUX_REAL_WEIGHT, t.aux_fake_weight,
                t.precision,
                scaling_desc, mp_device_name(device, dev, sizeof dev),
                omp_get_max_threads(), t.out);
        if (t.penalty != MP_PENALTY_NONE)
            fprintf(out, "mixprec train-gan: gradient penalty %s:%g on the discriminator (%s; second derivatives: "
                         "tangent forward and backward passes each step)\n", mp_penalty_kind_name(t.penalty),
                    (double)t.penalty_weight, t.penalty == MP_PENALTY_R1 ? "real images" : "interpolates");
    }
    mp_gan_train_result r;
    if (s == MP_OK) s = mp_gan_train_run(&m, &train, &o, &r);
    if (s == MP_OK && out)
        fprintf(out, "done: %d epochs, %.2f ms/batch in the last; skipped steps G %lld, D %lld; wrote %s and "
                     "%s/batch_times.jsonl\n",
                r.epochs_run, r.batch_ms, (long long)r.g_skipped, (long long)r.d_skipped, r.samples_path, t.out);
    if (s != MP_OK) fprintf(stderr, "mixprec train-gan: %s\n", mp_last_error());
    mp_acgan_free(&m);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    return s == MP_OK ? 0 : 1;
}

int cmd_train_gan(int argc, char **argv) { return cli_run_with_default_out(gan_main, argc, argv); }
