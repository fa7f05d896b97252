/* test_cuda_resume.c — --save/--resume of GPU runs through the epoch loop
 * (mp_fit over the trainer, as `mixprec train --device cuda` calls it) on synthetic
 * data: the small CNN under amp-fp16 with dynamic loss scaling, Adam and a
 * cosine schedule, every step's loss read back, 3 epochs:
 *  1. a GPU run stopped after epoch 1 and resumed from its checkpoint logs
 *     the same epochs as the uninterrupted run (train and test loss and
 *     accuracy, loss scale, skipped steps): bit for bit in the log, under
 *     MIXPREC_DETERMINISTIC=1 (timed cuDNN/cuBLASLt picks can differ from
 *     process to process, and with them whether a step overflows: a loss
 *     scale 2x apart is not a resume error); if two uninterrupted runs still
 *     differ, within 10x their difference;
 *  2. a checkpoint written by a GPU run resumes on the CPU, and one written
 *     by a CPU run resumes on the GPU; each continues close to the
 *     uninterrupted run it came from (the devices round differently: the
 *     epoch losses within 10%); the CPU runs the plain-C reference kernels.
 * The library reads MIXPREC_DETERMINISTIC once per process, so case 2 runs
 * with deterministic GPU algorithms as well.
 * Needs a GPU: one clear line and exit 2 without one. Run by scripts/gpu-check. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/cuda_ctx.h"
#include "data/dataset.h"
#include "models/models.h"
#include "scratch_dir.h"
#include "train/fit.h"

enum { EPOCHS = 3, FIELDS = 6 };

static const char *const fields[FIELDS] = {"train_loss", "train_acc", "test_loss", "test_acc", "loss_scale",
                                           "skipped_steps"};

/* One epoch record of a JSONL log: the fields above. */
typedef struct {
    int epoch;
    double v[FIELDS];
} record;

static double field(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(line, pat);
    return at ? strtod(at + strlen(pat), NULL) : NAN;
}

/* The log's records in order; returns how many (at most EPOCHS). */
static int read_log(const char *path, record *rec) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[2048];
    int n = 0;
    while (n < EPOCHS && fgets(line, sizeof line, f)) {
        rec[n].epoch = (int)field(line, "epoch");
        for (int k = 0; k < FIELDS; k++) rec[n].v[k] = field(line, fields[k]);
        n++;
    }
    fclose(f);
    return n;
}

static mp_dataset train_set, test_set;

/* One mp_fit of a fresh amp-fp16 model (initialized from o.seed by mp_fit). */
static mp_status train(mp_fit_opts o) {
    mp_model m;
    MP_TRY(mp_model_build("small", 1, 12, 12, 10, &m));
    mp_status s = mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_AMP_FP16});
    mp_fit_result r;
    if (s == MP_OK) s = mp_fit(&m, &train_set, &test_set, &o, &r);
    mp_model_free(&m);
    return s;
}

static mp_fit_opts opts_on(mp_device_kind kind) {
    return (mp_fit_opts){.model_name = "small", .data_name = "synthetic", .epochs = EPOCHS,
                         .trainer = {.batch = 32, .device = {kind, 0}, .reference = kind == MP_DEVICE_CPU,
                                     .loss_scaling = MP_LOSS_SCALING_ON, .scaler = {.growth_interval = 7}},
                         .lr = 3e-4f, .optim = {.kind = MP_OPTIM_ADAM}, .lr_schedule = "cosine", .seed = 7,
                         .read_every = 1};
}

/* The worst relative difference of a's records to b's (NAN when the
 * epochs do not line up). */
static double worst_rel(const record *a, const record *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].epoch != b[i].epoch) return NAN;
        for (int k = 0; k < FIELDS; k++) w = fmax(w, fabs(a[i].v[k] - b[i].v[k]) / fmax(fabs(b[i].v[k]), 1e-6));
    }
    return w;
}

static bool same_records(const record *a, const record *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].epoch != b[i].epoch || memcmp(a[i].v, b[i].v, sizeof a[i].v) != 0) return false;
    return true;
}

/* 1. GPU: stopped after epoch 1 and resumed, against uninterrupted runs. */
static void gpu_resume(const char *dir) {
    mp_fit_opts o = opts_on(MP_DEVICE_CUDA);
    o.log_path = scratch_path(dir, "full.jsonl");
    CHECK(train(o) == MP_OK, "uninterrupted GPU run: %s", mp_last_error());
    o.log_path = scratch_path(dir, "control.jsonl");
    CHECK(train(o) == MP_OK, "second uninterrupted GPU run: %s", mp_last_error());
    o.log_path = scratch_path(dir, "part.jsonl");
    o.save_path = scratch_path(dir, "gpu_epoch1.st");
    o.stop_after = 1;
    CHECK(train(o) == MP_OK, "GPU run stopped after epoch 1: %s", mp_last_error());
    o.stop_after = 0;
    o.resume_path = o.save_path;
    o.save_path = scratch_path(dir, "gpu_resumed.st");
    CHECK(train(o) == MP_OK, "resumed GPU run: %s", mp_last_error());
    record full[EPOCHS], control[EPOCHS], part[EPOCHS];
    int nf = read_log(scratch_path(dir, "full.jsonl"), full), nc = read_log(scratch_path(dir, "control.jsonl"), control),
        np = read_log(scratch_path(dir, "part.jsonl"), part);
    CHECK(nf == EPOCHS && nc == EPOCHS && np == EPOCHS, "log records: %d, %d, resumed %d", nf, nc, np);
    if (nf != EPOCHS || nc != EPOCHS || np != EPOCHS) return;
    CHECK(full[EPOCHS - 1].v[0] < full[0].v[0], "the loss must fall (%g -> %g)", full[0].v[0], full[EPOCHS - 1].v[0]);
    const bool deterministic = same_records(full, control, EPOCHS);
    const double spread = worst_rel(control, full, EPOCHS), w = worst_rel(part, full, EPOCHS);
    if (deterministic)
        CHECK(same_records(part, full, EPOCHS), "the resumed GPU run's log differs from the uninterrupted run's "
              "(worst rel. %.3g) though two uninterrupted runs agree", w);
    else
        CHECK(w <= 10 * spread, "the resumed GPU run differs by %.3g, two uninterrupted runs by %.3g", w, spread);
    printf("  GPU stop after epoch 1 + resume: %s the uninterrupted run (worst rel. %.2g; two uninterrupted runs "
           "%s)\n", same_records(part, full, EPOCHS) ? "logs equal" : "logs close to", w,
           deterministic ? "agree bit for bit" : "differ");
}

/* 2. A checkpoint of one device continued on the other, against the
 * uninterrupted run of the device that wrote it. */
static void cross_device(const char *dir, mp_device_kind from, mp_device_kind to, const char *name) {
    char full_log[64], save[64], cont_log[64];
    snprintf(full_log, sizeof full_log, "%s_full.jsonl", name);
    snprintf(save, sizeof save, "%s_epoch1.st", name);
    snprintf(cont_log, sizeof cont_log, "%s_cont.jsonl", name);
    mp_fit_opts o = opts_on(from);
    if (from == MP_DEVICE_CPU) { /* the GPU test already ran these for the GPU */
        o.log_path = scratch_path(dir, full_log);
        CHECK(train(o) == MP_OK, "%s: uninterrupted run: %s", name, mp_last_error());
        o.log_path = NULL;
        o.save_path = scratch_path(dir, save);
        o.stop_after = 1;
        CHECK(train(o) == MP_OK, "%s: run stopped after epoch 1: %s", name, mp_last_error());
    }
    const char *full_path = from == MP_DEVICE_CPU ? scratch_path(dir, full_log) : scratch_path(dir, "full.jsonl");
    o = opts_on(to);
    o.resume_path = from == MP_DEVICE_CPU ? scratch_path(dir, save) : scratch_path(dir, "gpu_epoch1.st");
    o.log_path = scratch_path(dir, cont_log);
    mp_status s = train(o);
    CHECK(s == MP_OK, "%s: resumed on the other device: %s", name, mp_last_error());
    record full[EPOCHS], cont[EPOCHS - 1];
    int nf = read_log(full_path, full), nc = read_log(scratch_path(dir, cont_log), cont);
    CHECK(nf == EPOCHS && nc == EPOCHS - 1, "%s: log records %d, continued %d", name, nf, nc);
    if (s != MP_OK || nf != EPOCHS || nc != EPOCHS - 1) return;
    CHECK(cont[0].epoch == 2, "%s: the continued run starts at epoch %d", name, cont[0].epoch);
    double worst = 0;
    for (int i = 0; i < EPOCHS - 1; i++)
        for (int k = 0; k < 3; k += 2) /* train and test loss */
            worst = fmax(worst, fabs(cont[i].v[k] - full[i + 1].v[k]) / fabs(full[i + 1].v[k]));
    CHECK(worst <= 0.1, "%s: the continued losses leave the uninterrupted run's by %.3g", name, worst);
    printf("  %s: epochs 2-%d continue the uninterrupted run's losses within %.2g (limit 0.1)\n", name, EPOCHS, worst);
}

int main(void) {
    setenv("MIXPREC_DETERMINISTIC", "1", 1); /* before any plan: the algorithm choices are made in prepare */
    if (mp_cuda_device_count() < 1) {
        fprintf(stderr, "test_cuda_resume: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    mp_dataset all; /* one stream of samples (the same class patterns), split as the CLI does */
    if (mp_dataset_synthetic(640 + 128, 1, 12, 12, 10, 3, &all) != MP_OK ||
        mp_dataset_slice(&all, 0, 640, &train_set) != MP_OK || mp_dataset_slice(&all, 640, 128, &test_set) != MP_OK) {
        fprintf(stderr, "test_cuda_resume: synthetic data: %s\n", mp_last_error());
        return 1;
    }
    mp_dataset_free(&all);
    char dir[4096];
    scratch_dir_create(dir, sizeof dir, "test_cuda_resume");
    gpu_resume(dir);
    cross_device(dir, MP_DEVICE_CUDA, MP_DEVICE_CPU, "gpu-to-cpu");
    cross_device(dir, MP_DEVICE_CPU, MP_DEVICE_CUDA, "cpu-to-gpu");
    scratch_dir_remove(dir);
    mp_dataset_free(&train_set);
    mp_dataset_free(&test_set);
    return test_summary("test_cuda_resume");
}
