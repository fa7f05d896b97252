/* checkpoint_weights.c — a checkpoint's parameters for inference
 * (mp_checkpoint_load_weights in mixprec/train.h): the tensors named after
 * the graph's parameters, checked and converted as a weight file's, the
 * optimizer state ("optim/...") ignored, and the run's identity and input
 * normalization from the metadata. `mixprec eval` and export read
 * checkpoints this way; resuming a run is mp_trainer_load. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "io/ckpt_meta.h"
#include "train/weights.h"

/* What the metadata says about the run, into info (nothing on error). */
static mp_status read_info(const mp_st_file *f, const char *path, mp_checkpoint_info *info) {
    mp_checkpoint_info got = {0};
    const char *model, *precision;
    int64_t epoch, batch;
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.model", &model));
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.precision", &precision));
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.epoch", 0, 100000, &epoch));
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.batch", 1, 1 << 30, &batch));
    MP_TRY(mp_ckpt_meta_norm(f, path, &got));
    snprintf(got.saved_model, sizeof got.saved_model, "%s", model);
    snprintf(got.saved_precision, sizeof got.saved_precision, "%s", precision);
    got.epoch = (int)epoch;
    got.saved_batch = (int)batch;
    got.model = info->model;
    *info = got;
    return MP_OK;
}

mp_status mp_checkpoint_load_weights(mp_graph *g, const char *path, mp_checkpoint_info *info) {
    if (!g || !path) return mp_error(MP_ERR_INVALID_ARG, "checkpoint: null graph or path");
    mp_checkpoint_info local = {0}, *out = info ? info : &local;
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open(path, &f));
    mp_checkpoint_info got = {.model = out->model};
    mp_status s = read_info(f, path, &got);
    if (s == MP_OK) {
        s = mp_weights_load_open(g, f, path, NULL, "optim/");
        /* a tensor that does not fit: say which model the checkpoint was for when that differs */
        if (s != MP_OK && got.model && got.model[0] && got.saved_model[0] && strcmp(got.model, got.saved_model))
            s = mp_error(s, "%s (the checkpoint was saved for model '%s', this model is '%s')", mp_last_error(),
                         got.saved_model, got.model);
    }
    mp_safetensors_close(f);
    if (s == MP_OK) *out = got;
    return s;
}

mp_status mp_checkpoint_read_info(const char *path, mp_checkpoint_info *info) {
    if (!path || !info) return mp_error(MP_ERR_INVALID_ARG, "checkpoint: null path or info");
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open_header(path, &f)); /* the metadata alone */
    mp_status s = read_info(f, path, info);
    mp_safetensors_close(f);
    return s;
}

mp_status mp_checkpoint_read_normalization(const char *path, int max_channels, int *channels, float *mean,
                                           float *std) {
    if (!path || !channels || max_channels < 0 || (max_channels > 0 && (!mean || !std)))
        return mp_error(MP_ERR_INVALID_ARG, "checkpoint: null argument or no room for the normalization");
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open_header(path, &f)); /* the metadata alone */
    mp_status s = mp_ckpt_meta_norm_read(f, path, max_channels, channels, mean, std);
    mp_safetensors_close(f);
    return s;
}
