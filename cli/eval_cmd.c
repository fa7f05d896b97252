/* eval_cmd.c — `mixprec eval`: the accuracy and mean loss of a checkpoint on
 * a dataset's test split, under any precision policy and on any device. The
 * model is built as `train` builds it, the parameters come from the
 * checkpoint (optimizer state ignored), and the inputs are normalized with
 * the statistics the checkpoint recorded (older checkpoints: the training
 * set's, as `train` computes them). By default the precision and batch are
 * the checkpoint's, so the accuracy `train` printed for that epoch is
 * reproduced. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common_opts.h"
#include "core/error.h"
#include "data/dataset.h"
#include "io/json_write.h"
#include "models/models.h"
#include "train/fit.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec eval --checkpoint FILE [options]\n"
            "       mixprec eval --model FILE.onnx [options]\n\n"
            "Accuracy and mean cross-entropy of a checkpoint on a dataset's test split (the held-out\n"
            "part for npy: with two files and folder: without val/ or test/).\n\n"
            "  --checkpoint FILE   a checkpoint `mixprec train --save` wrote (required unless --model is an\n"
            "                      .onnx file: then its own weights, fp32 and batch 256 by default)\n"
            "  --model M           %s (default: the model the checkpoint was saved for)\n"
            DATA_INPUT_OPTS_HELP DATA_NORMALIZE_OPTS_HELP
            "  --seed S            seed of --data synthetic (use the training run's; default 1)\n"
            "  --precision P       %s (default: the checkpoint's)\n"
            "  --device D          cpu | cuda | cuda:N | auto (default auto)\n"
            "  --batch B           samples per forward pass (default: the checkpoint's batch)\n"
            "  --threads T         CPU threads (default: all cores)\n"
            "  --reference         the plain-C reference kernels instead of oneDNN\n"
            "  --json              one JSON object instead of the text line\n"
            "  -h, --help          this help\n\n"
            "Inputs are normalized with the mean/std the checkpoint recorded; a checkpoint from before\n"
            "they were recorded uses the training set's (as train does), --no-normalize none.\n\n" INPUT_FILES_HELP,
            mp_model_list(), mp_precision_list());
}

typedef struct {
    common_opts c;
    const char *checkpoint, *model, *precision, *device;
    int batch, threads;
    uint64_t seed;
    bool reference, json;
} eval_args;

/* Options of train that make no sense here. */
static bool is_train_only(const char *a) {
    static const char *const opts[] = {"--optimizer", "--lr", "--momentum", "--nesterov", "--weight-decay",
                                       "--augment", "--random-resized-crop"};
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++)
        if (!strcmp(a, opts[k])) return true;
    return false;
}

static int parse(int argc, char **argv, eval_args *e) {
    *e = (eval_args){.c = common_opts_default(), .device = "auto", .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_train_only(a)) {
            fprintf(stderr, "mixprec eval: %s is a training option (see mixprec eval --help)\n", a);
            return 2;
        }
        int shared = common_opts_parse("eval", argc, argv, &i, &e->c);
        if (shared < 0) return 2;
        if (shared) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) { e->json = true; continue; }
        if (!strcmp(a, "--reference")) { e->reference = true; continue; }
        static const char *const with_value[] = {"--checkpoint", "--model", "--precision", "--device", "--batch",
                                                 "--threads", "--seed"};
        const char *v = NULL;
        const int taken =
            arg_option_value("eval", argc, argv, &i, with_value, sizeof with_value / sizeof *with_value, &v);
        if (taken < 0) return 2;
        if (!taken) {
            fprintf(stderr, "mixprec eval: unknown option '%s' (see mixprec eval --help)\n", a);
            return 2;
        }
        if (!strcmp(a, "--checkpoint")) e->checkpoint = v;
        else if (!strcmp(a, "--model")) e->model = v;
        else if (!strcmp(a, "--precision")) e->precision = v;
        else if (!strcmp(a, "--device")) e->device = v;
        else if (!strcmp(a, "--batch") && !arg_int("eval", a, v, 1, 1 << 20, &e->batch)) return 2;
        else if (!strcmp(a, "--threads") && !arg_int("eval", a, v, 1, 1024, &e->threads)) return 2;
        else if (!strcmp(a, "--seed") && !arg_u64("eval", a, v, &e->seed)) return 2;
    }
    if (!e->checkpoint && !mp_model_is_onnx_name(e->model)) {
        fprintf(stderr, "mixprec eval: --checkpoint FILE is required unless --model is an .onnx file with its "
                        "weights (see mixprec eval --help)\n");
        return 2;
    }
    return 0;
}

/* The normalization to evaluate with (mean and std have room for `room` >=
 * test->c values): the checkpoint's record, or the .onnx model's metadata, for any
 * number of channels; else (an older checkpoint, a model without the record)
 * the training set's as train computes it, or none. */
static mp_status pick_norm(const eval_args *e, const mp_dataset *train, const mp_dataset *test, int room,
                           float *mean, float *std, bool *use, const char **how) {
    *use = false;
    if (!e->c.normalize) {
        *how = "none (--no-normalize)";
        return MP_OK;
    }
    int n = -1;
    if (e->checkpoint) MP_TRY(mp_checkpoint_read_normalization(e->checkpoint, room, &n, mean, std));
    else {
        MP_TRY(mp_onnx_read_normalization(e->model, room, &n, mean, std));
        if (n == 0) n = -1; /* an .onnx model records no "did not normalize": the identity */
    }
    if (n == 0) {
        *how = "none (the run did not normalize)";
        return MP_OK;
    }
    if (n > 0) {
        if (n != test->c)
            return mp_error(MP_ERR_SHAPE, "%s: the recorded normalization has %d channels, %s has %d",
                            e->checkpoint ? e->checkpoint : e->model, n, test->source, test->c);
        *use = true;
        *how = e->checkpoint ? "the checkpoint's" : "the model's metadata";
        return MP_OK;
    }
    mp_dataset_channel_stats(train, mean, std);
    for (int c = 0; c < train->c; c++)
        if (!(std[c] > 1e-6f)) std[c] = 1.0f;
    *use = true;
    *how = e->checkpoint ? "the training set's (the checkpoint records none)" : "the training set's";
    return MP_OK;
}

/* The model and precision to evaluate with: the options', else the
 * checkpoint's. 0, or the exit status after printing the error: a bad
 * option is a usage error (2); a bad name in the checkpoint's metadata is the
 * file's (1), naming it and the key. */
static int pick_identity(const eval_args *e, const mp_checkpoint_info *info, const char **model, mp_precision *prec) {
    *model = e->model ? e->model : info->saved_model;
    const char *precision = e->precision ? e->precision : info->saved_precision;
    if (!(*model)[0]) {
        fprintf(stderr, "mixprec eval: %s does not name its model: give --model\n", e->checkpoint);
        return 2;
    }
    if (mp_model_check_name(*model) != MP_OK) {
        if (e->model) fprintf(stderr, "mixprec eval: --model: %s\n", mp_last_error());
        else fprintf(stderr, "mixprec eval: %s: metadata 'mixprec.model': %s\n", e->checkpoint, mp_last_error());
        return e->model ? 2 : 1;
    }
    if (mp_precision_parse(precision, prec) != MP_OK) {
        if (e->precision) fprintf(stderr, "mixprec eval: %s\n", mp_last_error());
        else fprintf(stderr, "mixprec eval: %s: metadata 'mixprec.precision' = '%s': not a precision (known: %s)\n",
                     e->checkpoint, precision, mp_precision_list());
        return e->precision ? 2 : 1;
    }
    return 0;
}

/* The model for the data's image shape with `classes` outputs. */
static mp_status build(const char *model, const mp_dataset *d, int classes, mp_precision prec, mp_model *m) {
    mp_dataset shape = *d; /* a view: only its shape and class count are read */
    shape.classes = classes;
    mp_model_spec spec = {.model = model, .data = &shape, .policy = {.precision = prec}};
    return mp_model_spec_build(&spec, m);
}

/* The model for the data's image shape, into m and *weight (the name of its
 * logits layer's weight): an .onnx model with its own classes (its output
 * width), which the checkpoint's logits layer, if any, must have too; any
 * other with the checkpoint's classes (that layer's rows, whatever labels the
 * data holds; without a checkpoint the data's). */
static mp_status build_model(const eval_args *e, const char *model, mp_precision prec, const mp_dataset *train,
                             mp_model *m, char *weight, size_t cap) {
    const bool onnx = mp_model_is_onnx_name(model);
    const int classes = onnx ? 0 : e->checkpoint && train->classes < 2 ? 2 : train->classes;
    MP_TRY(build(model, train, classes, prec, m));
    snprintf(weight, cap, "%s.weight", mp_graph_node_name(m->g, m->logits));
    if (!e->checkpoint) return MP_OK;
    int saved = 0;
    MP_TRY(cli_checkpoint_rows(e->checkpoint, weight, &saved));
    if (onnx) {
        int64_t dims[3];
        int ndim = 0;
        MP_TRY(mp_graph_node_sample_shape(m->g, m->logits, &ndim, dims));
        if (saved < 2 || saved == dims[0]) return MP_OK;
        return mp_error(MP_ERR_SHAPE, "--model %s gives %lld classes (its output width), --checkpoint %s has %d (its "
                        "tensor '%s' has %d rows): give the checkpoint of this model", model, (long long)dims[0],
                        e->checkpoint, saved, weight, saved);
    }
    if (saved < 2 || saved == classes) return MP_OK;
    mp_model_free(m);
    return build(model, train, saved, prec, m);
}

/* Every label of the test set, and its class count (a held-out split's is
 * the whole file's), within the model's classes; the error names where the
 * model's class count came from: the checkpoint's logits layer or the .onnx
 * file's output width. */
static mp_status check_labels(const eval_args *e, const mp_model *m, const char *weight, const mp_dataset *test) {
    int64_t dims[3];
    int ndim = 0;
    MP_TRY(mp_graph_node_sample_shape(m->g, m->logits, &ndim, dims));
    const int classes = (int)dims[0];
    char model[512];
    if (e->checkpoint)
        snprintf(model, sizeof model, "the %d classes of the checkpoint %s (its tensor '%s' has %d rows)", classes,
                 e->checkpoint, weight, classes);
    else snprintf(model, sizeof model, "the %d classes of --model %s (its output width)", classes, e->model);
    for (int i = 0; i < test->n; i++)
        if (test->labels[i] >= classes)
            return mp_error(MP_ERR_SHAPE, "%s: label %d of sample %d is outside %s", test->source,
                            (int)test->labels[i], i, model);
    if (test->classes > classes)
        return mp_error(MP_ERR_SHAPE, "%s: the data has %d classes (labels up to %d), more than %s", test->source,
                        test->classes, test->classes - 1, model);
    return MP_OK;
}

/* "eval: 10000 samples, loss 0.3012, accuracy 89.04% (fp32, cpu)", with the
 * undecodable images left out and the files of an image folder that are
 * not images (ignored), if any, after the count. */
static void print_line(const mp_eval_result *r, int ignored_files, const char *precision, const char *dev) {
    char left_out[160] = "", bad[64] = "", other[64] = "";
    if (r->bad_images)
        snprintf(bad, sizeof bad, "%lld undecodable image%s left out", (long long)r->bad_images,
                 r->bad_images == 1 ? "" : "s");
    if (ignored_files)
        snprintf(other, sizeof other, "%d file%s not .jpg/.jpeg/.png ignored", ignored_files,
                 ignored_files == 1 ? "" : "s");
    if (*bad || *other)
        snprintf(left_out, sizeof left_out, " (%s%s%s)", bad, *bad && *other ? "; " : "", other);
    printf("eval: %lld samples%s, loss %.4f, accuracy %.2f%% (%s, %s)\n", (long long)r->samples, left_out, r->loss,
           100 * r->accuracy, precision, dev);
}

/* One JSON object on stdout. */
static mp_status print_json(const eval_args *e, const mp_checkpoint_info *info, const char *model,
                            const char *precision, const char *device, int batch, const mp_dataset *test,
                            const mp_eval_result *r, const char *norm) {
    cJSON *j = cJSON_CreateObject();
    bool ok = mp_json_add(j, "checkpoint", e->checkpoint ? mp_json_str(e->checkpoint) : cJSON_CreateNull()) &&
              mp_json_add(j, "model", mp_json_str(model)) && mp_json_add(j, "epoch", mp_json_int(info->epoch)) &&
              mp_json_add(j, "data", mp_json_str(test->source)) && mp_json_add(j, "samples", mp_json_int(r->samples)) &&
              mp_json_add(j, "bad_images", mp_json_int(r->bad_images)) &&
              mp_json_add(j, "loss", mp_json_fixed(r->loss, 6)) &&
              mp_json_add(j, "accuracy", mp_json_fixed(r->accuracy, 6)) &&
              mp_json_add(j, "precision", mp_json_str(precision)) && mp_json_add(j, "device", mp_json_str(device)) &&
              mp_json_add(j, "batch", mp_json_int(batch)) && mp_json_add(j, "normalization", mp_json_str(norm));
    return mp_json_write_line(stdout, j, ok, "--json");
}

static int run_eval(const eval_args *e) {
    /* Without a checkpoint (an .onnx model with its weights): fp32, batch 256,
     * the training set's normalization unless --no-normalize. */
    mp_checkpoint_info info = {.saved_precision = "fp32", .saved_batch = 256};
    if (e->checkpoint && mp_checkpoint_read_info(e->checkpoint, &info) != MP_OK) {
        fprintf(stderr, "mixprec eval: --checkpoint %s\n", mp_last_error());
        return 1;
    }
    const char *model;
    mp_precision prec;
    const int bad = pick_identity(e, &info, &model, &prec);
    if (bad) return bad;
    const char *precision = e->precision ? e->precision : info.saved_precision;
    mp_device device;
    if (mp_device_parse(e->device, &device) != MP_OK) {
        fprintf(stderr, "mixprec eval: %s\n", mp_last_error());
        return 2;
    }
    if (e->threads) omp_set_num_threads(e->threads);
    mp_dataset train = {0}, test = {0};
    mp_model m = {0};
    mp_status s = common_opts_load_data(&e->c, e->seed, &train, &test);
    char weight[160] = "";
    if (s == MP_OK) s = build_model(e, model, prec, &train, &m, weight, sizeof weight);
    mp_checkpoint_info loaded = e->checkpoint ? (mp_checkpoint_info){.model = model} : info;
    if (s == MP_OK && e->checkpoint) {
        s = mp_checkpoint_load_weights(m.g, e->checkpoint, &loaded);
        /* the checkpoint's tensors do not fit the model named by --model */
        if ((s == MP_ERR_FORMAT || s == MP_ERR_SHAPE) && e->model)
            s = mp_error(s, "%s: give the --model the checkpoint was trained with%s", mp_last_error(),
                         info.saved_model[0] ? " (or leave --model out)" : "");
    }
    /* room for a record of other channels than the data's, so that the error can say how many */
    const size_t room = (size_t)(train.c > MP_CHECKPOINT_MAX_CHANNELS ? train.c : MP_CHECKPOINT_MAX_CHANNELS) + 1;
    float *mean = calloc(room, sizeof *mean), *std = calloc(room, sizeof *std);
    bool use_norm = false;
    const char *how = "";
    if (s == MP_OK && (!mean || !std)) s = mp_error(MP_ERR_NOMEM, "eval: out of memory");
    if (s == MP_OK) s = check_labels(e, &m, weight, &test);
    if (s == MP_OK) s = pick_norm(e, &train, &test, (int)room, mean, std, &use_norm, &how);
    const int batch = e->batch ? e->batch : loaded.saved_batch;
    mp_eval_result r = {0};
    if (s == MP_OK)
        s = mp_evaluate(m.g, &test,
                        &(mp_eval_opts){.input = m.input, .logits = m.logits, .batch = batch, .device = device,
                                        .reference = e->reference, .mean = use_norm ? mean : NULL,
                                        .std = use_norm ? std : NULL},
                        &r);
    char dev[32] = "";
    mp_device_name(device, dev, sizeof dev);
    if (s == MP_OK && e->json) s = print_json(e, &loaded, model, precision, dev, batch, &test, &r, how);
    else if (s == MP_OK) print_line(&r, test.ignored_files, precision, dev);
    if (s != MP_OK) fprintf(stderr, "mixprec eval: %s\n", mp_last_error());
    free(mean);
    free(std);
    mp_model_free(&m);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    return s == MP_OK ? 0 : 1;
}

int cmd_eval(int argc, char **argv) {
    eval_args e;
    int rc = parse(argc, argv, &e);
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = common_opts_check_data("eval", &e.c))) return rc;
    return run_eval(&e);
}
