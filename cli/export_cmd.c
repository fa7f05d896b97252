/* export_cmd.c — `mixprec export --format onnx`: build a model for the data
 * shape it was trained on, load a checkpoint's (or weights file's) weights
 * into it and write its inference graph as an ONNX model, with the input
 * normalization a `train --save` checkpoint recorded (or an .onnx model's
 * own) as the model's metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common_opts.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/models.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec export --format onnx --checkpoint FILE --model M -o OUT.onnx [options]\n\n"
            "Write a trained model's inference graph (no loss or labels) as an ONNX model (opset 17, dynamic batch):\n"
            "its weights, and BatchNorm with its running statistics.\n\n"
            "  --format F          onnx (the only format; default onnx)\n"
            "  --checkpoint FILE   a `train --save` checkpoint or a weights-only safetensors file (required unless\n"
            "                      --model is an .onnx file, whose own weights are then written)\n"
            "  --model M           the model the checkpoint holds: %s (default small)\n"
            "  --input-shape CxHxW the input shape it was trained on (default 1x28x28, Fashion-MNIST)\n"
            "  --classes K         its number of classes (default: the checkpoint's, else 10)\n"
            "  -o, --output FILE   the .onnx file to write (required)\n"
            "  --fp16-weights      store the weights as fp16, each widened by a Cast node (half the file)\n"
            "  --batch N           a fixed batch size instead of a dynamic one\n\n" INPUT_FILES_HELP,
            mp_model_list());
}

typedef struct {
    const char *format, *checkpoint, *model, *output;
    int c, h, w, classes, batch;
    bool classes_given; /* --classes: else a checkpoint's logits layer says */
    bool fp16;
} export_args;

/* 0: parsed; 1: --help printed; 2: a bad option (message printed). */
static int parse(int argc, char **argv, export_args *e) {
    *e = (export_args){.format = "onnx", .model = "small", .c = 1, .h = 28, .w = 28, .classes = 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--fp16-weights")) {
            e->fp16 = true;
            continue;
        }
        static const char *const with_value[] = {"--format", "--checkpoint", "--model", "--input-shape",
                                                  "--classes", "-o", "--output", "--batch"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "mixprec export: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mixprec export: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--format")) e->format = v;
        else if (!strcmp(a, "--checkpoint")) e->checkpoint = v;
        else if (!strcmp(a, "--model")) e->model = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) e->output = v;
        else if (!strcmp(a, "--input-shape")) {
            if (!arg_shape3("export", a, v, &e->c, &e->h, &e->w)) return 2;
        } else if (!strcmp(a, "--classes")) {
            if (!arg_int("export", a, v, 2, 100000, &e->classes)) return 2;
            e->classes_given = true;
        } else if (!arg_int("export", a, v, 1, 1 << 20, &e->batch)) return 2;
    }
    if (strcmp(e->format, "onnx")) {
        fprintf(stderr, "mixprec export: --format '%s': the only format is onnx\n", e->format);
        return 2;
    }
    if (!e->output) {
        fprintf(stderr, "mixprec export: needs -o OUT.onnx (see --help)\n");
        return 2;
    }
    if (mp_model_check_name(e->model) != MP_OK) {
        fprintf(stderr, "mixprec export: --model: %s\n", mp_last_error());
        return 2;
    }
    if (!e->checkpoint && !mp_model_is_onnx_name(e->model)) {
        fprintf(stderr, "mixprec export: needs --checkpoint FILE (a `train --save` checkpoint or a weights file) "
                        "for model %s\n", e->model);
        return 2;
    }
    const int rc = cli_check_output("export", "-o", e->output);
    if (rc) return rc;
    /* writing over the file the weights are read from would lose them */
    return cli_check_outputs_distinct("export", 3, (const char *[]){"-o", "--checkpoint", "--model"},
                                      (const char *[]){e->output, e->checkpoint,
                                                       mp_model_is_onnx_name(e->model) ? e->model : NULL});
}

/* The model a run's checkpoint names (its 'mixprec.model') into buf, *run
 * true; a weights file names none: "", *run false. */
static mp_status saved_model(const char *path, char *buf, size_t cap, bool *run) {
    mp_st_file *f = NULL;
    buf[0] = '\0';
    *run = false;
    MP_TRY(mp_safetensors_open_header(path, &f)); /* the metadata alone */
    const char *m = mp_safetensors_meta(f, "mixprec.model");
    if (m) snprintf(buf, cap, "%s", m), *run = true;
    mp_safetensors_close(f);
    return MP_OK;
}

/* Room for n statistics in *mean and *std (free both). */
static mp_status norm_room(int n, float **mean, float **std) {
    *mean = calloc((size_t)n + 1, sizeof **mean), *std = calloc((size_t)n + 1, sizeof **std);
    return *mean && *std ? MP_OK : mp_error(MP_ERR_NOMEM, "export: out of memory");
}

/* The normalization to record, any number of channels, into *channels and
 * *mean, *std (malloc: the caller frees them): a checkpoint's (a
 * weights-only file has no mixprec metadata: none), or an .onnx model's own. */
static mp_status export_norm(const export_args *e, int *channels, float **mean, float **std) {
    *channels = 0, *mean = *std = NULL;
    if (!e->checkpoint) {
        if (!mp_model_is_onnx_name(e->model)) return MP_OK;
        const int room = e->c > MP_CHECKPOINT_MAX_CHANNELS ? e->c : MP_CHECKPOINT_MAX_CHANNELS;
        MP_TRY(norm_room(room, mean, std));
        return mp_onnx_read_normalization(e->model, room, channels, *mean, *std);
    }
    char model[128];
    bool run;
    MP_TRY(saved_model(e->checkpoint, model, sizeof model, &run));
    if (!run) return MP_OK;
    int n;
    MP_TRY(mp_checkpoint_read_normalization(e->checkpoint, 0, &n, NULL, NULL));
    if (n < 0) return MP_OK; /* an older checkpoint: none */
    MP_TRY(norm_room(n > 0 ? n : e->c, mean, std));
    /* a record of other channels would be written as the model's own,
     * for every runtime to misread (a hand-edited or mixed-up checkpoint) */
    if (n > 0 && n != e->c && !mp_model_is_onnx_name(e->model))
        return mp_error(MP_ERR_FORMAT, "%s: metadata 'mixprec.norm_mean' records the input normalization of %d "
                        "channels, the model's input (--input-shape %dx%dx%d) has %d", e->checkpoint, n, e->c, e->h,
                        e->w, e->c);
    if (n > 0) {
        *channels = n;
        return mp_checkpoint_read_normalization(e->checkpoint, n, &n, *mean, *std);
    }
    /* the run did not normalize: record the identity, so that evaluation
     * elsewhere does not normalize either */
    *channels = e->c;
    for (int i = 0; i < e->c; i++) (*mean)[i] = 0.0f, (*std)[i] = 1.0f;
    return MP_OK;
}

/* What to give when the checkpoint's tensors do not fit the model built:
 * the model it names is this one, so the shape or classes differ; else the
 * model (a weights file names none: any of the three). */
static const char *fit_hint(const export_args *e, char *buf, size_t cap) {
    char saved[128];
    bool run;
    if (saved_model(e->checkpoint, saved, sizeof saved, &run) != MP_OK) saved[0] = '\0';
    if (saved[0] && !strcmp(saved, e->model))
        snprintf(buf, cap, "give the --input-shape (here %dx%dx%d) and --classes (here %d) model %s was trained with",
                 e->c, e->h, e->w, e->classes, e->model);
    else if (saved[0]) snprintf(buf, cap, "give --model the model the checkpoint was trained with");
    else snprintf(buf, cap, "give the --model, --input-shape and --classes the weights were trained with");
    return buf;
}

/* The model to export; without --classes, with a checkpoint's classes (its
 * logits layer's rows) where they differ from the default. */
static mp_status build_model(export_args *e, mp_model *m) {
    MP_TRY(mp_model_build(e->model, e->c, e->h, e->w, e->classes, m));
    if (e->classes_given || !e->checkpoint) return MP_OK;
    char weight[160];
    snprintf(weight, sizeof weight, "%s.weight", mp_graph_node_name(m->g, m->logits));
    int saved = 0;
    MP_TRY(cli_checkpoint_rows(e->checkpoint, weight, &saved));
    if (saved < 2 || saved == e->classes) return MP_OK;
    mp_model_free(m);
    e->classes = saved;
    return mp_model_build(e->model, e->c, e->h, e->w, e->classes, m);
}

int cmd_export(int argc, char **argv) {
    export_args e;
    int rc = parse(argc, argv, &e);
    if (rc) return rc == 1 ? 0 : rc;
    mp_model m = {0};
    mp_status s = build_model(&e, &m);
    /* a checkpoint also holds optimizer and scaler state: only the
     * parameters are read, and every one of them must be there; a file of
     * another model is named as such */
    if (s == MP_OK && e.checkpoint) {
        /* a weights-only file (mp_graph_save_weights, PyTorch's save_file)
         * has no run metadata, which mp_checkpoint_load_weights requires */
        char saved_name[128];
        bool run = true;
        s = saved_model(e.checkpoint, saved_name, sizeof saved_name, &run);
        mp_checkpoint_info saved = {.model = e.model};
        if (s == MP_OK) s = run ? mp_checkpoint_load_weights(m.g, e.checkpoint, &saved)
                                : mp_graph_load_weights(m.g, e.checkpoint, NULL);
        char hint[200];
        if (s == MP_ERR_FORMAT || s == MP_ERR_SHAPE) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", mp_last_error());
            s = mp_error(s, "%s: %s", msg, fit_hint(&e, hint, sizeof hint));
        }
    }
    int norm_channels = 0;
    float *mean = NULL, *std = NULL;
    if (s == MP_OK) s = export_norm(&e, &norm_channels, &mean, &std);
    if (s == MP_OK)
        s = mp_model_export_onnx(&m, e.output,
                                 &(mp_onnx_export_opts){.fp16_weights = e.fp16, .batch = e.batch,
                                                        .norm_channels = norm_channels, .norm_mean = mean,
                                                        .norm_std = std});
    free(mean);
    free(std);
    if (s != MP_OK) {
        fprintf(stderr, "mixprec export: %s\n", mp_last_error());
        mp_model_free(&m);
        return 1;
    }
    printf("mixprec export: %s (%dx%dx%d -> %d classes, %lld parameters%s%s) -> %s\n", e.model, e.c, e.h, e.w,
           e.classes, (long long)mp_graph_param_count(m.g), e.fp16 ? ", fp16 weights" : "",
           norm_channels ? ", input normalization in the metadata" : "", e.output);
    mp_model_free(&m);
    return 0;
}
