/* checkpoint.c — a trainer's whole state in one safetensors file, and
 * weight files (mixprec/train.h).
 *
 * A checkpoint holds every parameter (fp32 masters, BN buffers) under its
 * name, each optimizer's state under "optim/<param>/<k>", and as metadata
 * the run's identity (model, precision, optimizers, batch, loss scaling),
 * the counters (epoch, steps, forward passes, each optimizer's steps) and
 * the loss scaler's state and the input normalization the run trained with
 * ('mixprec.norm_mean' / 'mixprec.norm_std'). Loading checks everything against the trainer
 * before changing anything: a tensor's name, shape and dtype, finite values,
 * non-negative running variances and Adam second moments, every metadata value typed and in
 * range, naming the file and the key. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "io/ckpt_meta.h"
#include "io/safetensors.h"
#include "train/trainer.h"

#define META_MAX 48
#define OPTIONS_LEN 256
#define NAME_LEN 160
#define MAX_STEPS (((int64_t)1 << 53) - 1) /* step counters stay exact in a double */

static mp_st_tensor tensor_of(const char *name, const mp_shape *s, const float *data) {
    mp_st_tensor t = {.name = name, .dtype = MP_DTYPE_F32, .ndim = s->ndim, .data = data};
    for (int i = 0; i < s->ndim; i++) t.dims[i] = s->dims[i];
    return t;
}

/* Optimizer state tensor names: "optim/<param>/0", "optim/<param>/1". */
static void state_name(char *buf, const char *param, int k) { snprintf(buf, NAME_LEN, "optim/%s/%d", param, k); }

/* "adam" or "adam,adam" (one per group). */
static void optimizer_kinds(const mp_trainer *t, char *buf, size_t len) {
    buf[0] = '\0';
    for (int g = 0; g < t->n_groups; g++) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", g ? "," : "", mp_optim_kind_name(t->groups[g].opt->o.optim.kind));
    }
}

/* Metadata key of optimizer group g's record `base` ("mixprec.optim_steps",
 * "mixprec.optimizer_options"): base for group 0, "base.g" for the others. */
static void group_key(char *buf, size_t len, const char *base, int g) {
    if (g == 0) snprintf(buf, len, "%s", base);
    else snprintf(buf, len, "%s.%d", base, g);
}

typedef struct {
    const char *keys[META_MAX], *vals[META_MAX];
    char key_store[META_MAX][48], val_store[META_MAX][64];
    char *norm_text[2];                             /* the statistics lists (malloc), longer than a value */
    char options_store[MP_MAX_GROUPS][OPTIONS_LEN]; /* each optimizer's options (mp_optimizer_describe) */
    int n;
} meta_list;

/* The run's normalization statistics, nc channels of mean and std, as two
 * metadata lists (nc 0: the run did not normalize). */
static mp_status meta_add_norm(meta_list *m, const char *path, int nc, const float *mean, const float *std) {
    for (int c = 0; c < nc; c++)
        if (!isfinite(mean[c]) || !(isfinite(std[c]) && std[c] > 0))
            return mp_error(MP_ERR_INVALID_ARG, "%s: normalization channel %d: mean %g, std %g (finite, std > 0)", path,
                            c, (double)mean[c], (double)std[c]);
    MP_ASSERT(m->n + 2 <= META_MAX);
    const size_t cap = (size_t)nc * 18 + 1; /* "%.9g," of a float is at most 16 characters */
    for (int k = 0; k < 2; k++)
        if (!(m->norm_text[k] = malloc(cap)))
            return mp_error(MP_ERR_NOMEM, "%s: out of memory writing %d normalization channels", path, nc);
    mp_ckpt_norm_text(mean, nc, m->norm_text[0], cap);
    mp_ckpt_norm_text(std, nc, m->norm_text[1], cap);
    m->keys[m->n] = "mixprec.norm_mean", m->vals[m->n++] = m->norm_text[0];
    m->keys[m->n] = "mixprec.norm_std", m->vals[m->n++] = m->norm_text[1];
    return MP_OK;
}

static void meta_add(meta_list *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_add(meta_list *m, const char *key, const char *fmt, ...) {
    MP_ASSERT(m->n < META_MAX);
    snprintf(m->key_store[m->n], sizeof m->key_store[m->n], "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->val_store[m->n], sizeof m->val_store[m->n], fmt, ap);
    va_end(ap);
    m->keys[m->n] = m->key_store[m->n];
    m->vals[m->n] = m->val_store[m->n];
    m->n++;
}

/* mp_trainer_save with nc channels of normalization statistics at mean and std. */
static mp_status save_checkpoint(mp_trainer *t, const char *path, const mp_checkpoint_info *info, int nc,
                                 const float *mean, const float *std) {
    if (!t || !path) return mp_error(MP_ERR_INVALID_ARG, "checkpoint: null trainer or path");
    if (nc < 0 || (nc > 0 && (!mean || !std)))
        return mp_error(MP_ERR_INVALID_ARG, "%s: not saved: %d normalization channels need their mean and std",
                        path, nc);
    if (info && (info->epoch < 0 || info->epoch > 100000)) /* what loading accepts (mixprec.epoch) */
        return mp_error(MP_ERR_INVALID_ARG, "%s: not saved: epoch %d is outside [0, 100000]", path, info->epoch);
    if (t->micro != 0)
        return mp_error(MP_ERR_INVALID_ARG, "%s: not saved: in the middle of a step (%d of %d micro-batches queued); "
                        "save between steps", path, t->micro, t->k);
    MP_TRY(mp_trainer_need_plan(t));
    MP_TRY(mp_trainer_poll(t, true, NULL)); /* overflows before the save are reported, not lost */
    MP_TRY(t->be->state_to_host(t));
    const mp_graph *g = t->g;
    int cap = g->n_params;
    for (int gi = 0; gi < t->n_groups; gi++) cap += 2 * t->groups[gi].opt->n;
    mp_st_tensor *ts = calloc((size_t)cap + 1, sizeof *ts);
    char (*names)[NAME_LEN] = calloc((size_t)cap + 1, NAME_LEN);
    meta_list *m = calloc(1, sizeof *m);
    if (!ts || !names || !m) {
        free(ts);
        free(names);
        free(m);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory writing the checkpoint", path);
    }
    int n = 0;
    for (int i = 0; i < g->n_params; i++) ts[n++] = tensor_of(g->params[i].name, &g->params[i].spec.shape, g->params[i].data);
    for (int gi = 0; gi < t->n_groups; gi++) {
        const mp_optim *opt = t->groups[gi].opt->host;
        for (int i = 0; i < mp_optim_param_count(opt); i++) {
            const mp_param_ref *ref = mp_optim_param(opt, i);
            float *bufs[2];
            const int nb = mp_optim_state_tensors(opt, i, bufs);
            for (int k = 0; k < nb; k++) {
                state_name(names[n], ref->name, k);
                const mp_shape s = mp_shape1((int)ref->n);
                ts[n] = tensor_of(names[n], &s, bufs[k]);
                n++;
            }
        }
    }
    char kinds[64];
    optimizer_kinds(t, kinds, sizeof kinds);
    /* the model's name whole (an .onnx path may be long): the writer copies it */
    MP_ASSERT(m->n < META_MAX);
    m->keys[m->n] = "mixprec.model", m->vals[m->n++] = info && info->model ? info->model : "";
    meta_add(m, "mixprec.precision", "%s", mp_graph_policy_name(g));
    meta_add(m, "mixprec.optimizer", "%s", kinds);
    meta_add(m, "mixprec.batch", "%d", t->o.batch);
    meta_add(m, "mixprec.loss_scaling", "%s", t->loss_scaling ? "on" : "off");
    meta_add(m, "mixprec.epoch", "%d", info ? info->epoch : 0);
    meta_add(m, "mixprec.global_step", "%lld", (long long)t->steps);
    meta_add(m, "mixprec.plan_step", "%llu", (unsigned long long)mp_plan_step(t->plan));
    for (int gi = 0; gi < t->n_groups; gi++) {
        char key[48];
        group_key(key, sizeof key, "mixprec.optim_steps", gi);
        meta_add(m, key, "%lld", (long long)mp_optim_step_count(t->groups[gi].opt->host));
        MP_ASSERT(m->n < META_MAX);
        group_key(m->key_store[m->n], sizeof m->key_store[m->n], "mixprec.optimizer_options", gi);
        mp_optimizer_describe(t->groups[gi].opt, m->options_store[gi], OPTIONS_LEN);
        m->keys[m->n] = m->key_store[m->n], m->vals[m->n++] = m->options_store[gi];
    }
    const char *sn[MP_SCALER_STATE_COUNT];
    double sv[MP_SCALER_STATE_COUNT];
    const int ns = mp_scaler_state_get(&t->scaler, sn, sv, MP_SCALER_STATE_COUNT);
    for (int i = 0; i < ns; i++) {
        char key[48];
        snprintf(key, sizeof key, "scaler.%s", sn[i]);
        meta_add(m, key, "%.17g", sv[i]);
    }
    mp_status s = meta_add_norm(m, path, nc, mean, std);
    if (s == MP_OK) s = mp_safetensors_write(path, ts, n, m->keys, m->vals, m->n);
    free(ts);
    free(names);
    free(m->norm_text[0]);
    free(m->norm_text[1]);
    free(m);
    return s;
}

mp_status mp_trainer_save(mp_trainer *t, const char *path, const mp_checkpoint_info *info) {
    const int nc = info && info->norm_channels > 0 ? info->norm_channels : 0;
    if (nc > MP_CHECKPOINT_MAX_CHANNELS)
        return mp_error(MP_ERR_INVALID_ARG, "%s: not saved: %d normalization channels, more than the info's arrays "
                        "hold (%d): save with mp_trainer_save_normalized", path ? path : "checkpoint", nc,
                        MP_CHECKPOINT_MAX_CHANNELS);
    return save_checkpoint(t, path, info, nc, nc ? info->norm_mean : NULL, nc ? info->norm_std : NULL);
}

mp_status mp_trainer_save_normalized(mp_trainer *t, const char *path, const mp_checkpoint_info *info, int channels,
                                     const float *mean, const float *std) {
    return save_checkpoint(t, path, info, channels, mean, std);
}

/* ---- loading ------------------------------------------------------------- */

static mp_status expect_same(const char *path, const char *what, const char *have, const char *want) {
    if (strcmp(have, want))
        return mp_error(MP_ERR_INVALID_ARG, "%s: the checkpoint was saved with %s %s, this run uses %s", path, what,
                        have, want);
    return MP_OK;
}

/* A tensor of the file that must match an array of the trainer exactly:
 * the same shape and f32. */
static mp_status find_tensor(const mp_st_file *f, const char *path, const char *name, const mp_shape *want,
                             mp_st_tensor *t) {
    MP_TRY(mp_safetensors_get(f, name, t));
    bool same = t->ndim == want->ndim && t->dtype == MP_DTYPE_F32;
    for (int i = 0; same && i < want->ndim; i++) same = t->dims[i] == want->dims[i];
    if (same) return MP_OK;
    char have[96] = "", need[96];
    for (int i = 0; i < t->ndim; i++) {
        size_t used = strlen(have);
        snprintf(have + used, sizeof have - used, "%s%lld", i ? "x" : "", (long long)t->dims[i]);
    }
    mp_shape_str(want, need, sizeof need);
    return mp_error(MP_ERR_SHAPE, "%s: tensor '%s' is %s %s, the model's is f32 %s", path, name,
                    mp_dtype_name(t->dtype), t->ndim ? have : "scalar", need);
}

/* Finite optimizer state (parameters go through mp_gparam_check_values). */
static mp_status check_finite(const char *path, const char *name, const float *x, int64_t n) {
    const int64_t i = mp_first_nonfinite(x, n);
    if (i < 0) return MP_OK;
    return mp_error(MP_ERR_NONFINITE, "%s: tensor '%s' holds %g at element %lld", path, name, (double)x[i],
                    (long long)i);
}

/* Whether optimizer state slot k of kind `kind` can only hold values >= 0:
 * Adam's and AdamW's second moment v (slot 1, mp_optim_state_tensors), a
 * running mean of g^2. A negative v makes sqrt(v) NaN at the next step. SGD's
 * momentum and Adam's first moment take either sign. */
static bool state_nonnegative(mp_optim_kind kind, int k) {
    return (kind == MP_OPTIM_ADAM || kind == MP_OPTIM_ADAMW) && k == 1;
}

/* Optimizer state that must be >= 0 (state_nonnegative) and is. */
static mp_status check_nonnegative(const char *path, const char *name, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] < 0)
            return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' is an optimizer's second moment (a mean of squared "
                            "gradients, >= 0) but holds %g at element %lld", path, name, (double)x[i], (long long)i);
    return MP_OK;
}

/* Whether this trainer's checkpoint would hold a tensor named `name`: a
 * parameter, or the state "optim/<param>/<k>" its optimizers keep. */
static bool expected_tensor(const mp_trainer *t, const char *name) {
    if (mp_graph_param_find(t->g, name) >= 0) return true;
    for (int gi = 0; gi < t->n_groups; gi++) {
        const mp_optim *opt = t->groups[gi].opt->host;
        for (int i = 0; i < mp_optim_param_count(opt); i++) {
            const int nb = mp_optim_state_tensors(opt, i, NULL);
            for (int k = 0; k < nb; k++) {
                char want[NAME_LEN];
                state_name(want, mp_optim_param(opt, i)->name, k);
                if (!strcmp(want, name)) return true;
            }
        }
    }
    return false;
}

/* Every tensor of the file is one this trainer reads: a tensor left over
 * is a layer this model lacks, or state its optimizer's options do not keep. */
static mp_status check_no_extra(const mp_st_file *f, const char *path, const mp_trainer *t) {
    for (int i = 0; i < mp_safetensors_count(f); i++) {
        const char *name = mp_safetensors_name(f, i);
        if (expected_tensor(t, name)) continue;
        if (!strncmp(name, "optim/", 6))
            return mp_error(MP_ERR_INVALID_ARG, "%s: holds optimizer state '%s' that this run's optimizer does not "
                            "keep: it was saved with other optimizer options (momentum, Adam's moments)", path, name);
        return mp_error(MP_ERR_INVALID_ARG, "%s: holds tensor '%s', which this model does not have (a checkpoint "
                        "of another model?)", path, name);
    }
    return MP_OK;
}

/* Everything the file must hold for this trainer, checked before any copy. */
static mp_status check_file(const mp_st_file *f, const char *path, mp_trainer *t, const mp_checkpoint_info *info) {
    const mp_graph *g = t->g;
    const char *v;
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.model", &v));
    if (info && info->model && info->model[0] && v[0]) MP_TRY(expect_same(path, "model", v, info->model));
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.precision", &v));
    MP_TRY(expect_same(path, "precision", v, mp_graph_policy_name(g)));
    char kinds[64];
    optimizer_kinds(t, kinds, sizeof kinds);
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.optimizer", &v));
    MP_TRY(expect_same(path, "optimizer", v, kinds));
    int64_t num;
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.batch", 1, 1 << 30, &num));
    if (num != t->o.batch)
        return mp_error(MP_ERR_INVALID_ARG, "%s: the checkpoint was saved with batch %lld, this run uses %d", path,
                        (long long)num, t->o.batch);
    const char *scaling = mp_safetensors_meta(f, "mixprec.loss_scaling");
    if (scaling) MP_TRY(expect_same(path, "loss scaling", scaling, t->loss_scaling ? "on" : "off"));
    for (int i = 0; i < g->n_params; i++) {
        const mp_gparam *p = &g->params[i];
        mp_st_tensor ten;
        MP_TRY(find_tensor(f, path, p->name, &p->spec.shape, &ten));
        MP_TRY(mp_gparam_check_values(p, ten.data, mp_shape_numel(&p->spec.shape), path));
    }
    for (int gi = 0; gi < t->n_groups; gi++) {
        const mp_optim *opt = t->groups[gi].opt->host;
        for (int i = 0; i < mp_optim_param_count(opt); i++) {
            const mp_param_ref *ref = mp_optim_param(opt, i);
            const int nb = mp_optim_state_tensors(opt, i, NULL);
            for (int k = 0; k < nb; k++) {
                char name[NAME_LEN];
                state_name(name, ref->name, k);
                const mp_shape s = mp_shape1((int)ref->n);
                mp_st_tensor ten;
                if (mp_safetensors_get(f, name, &ten) != MP_OK)
                    return mp_error(MP_ERR_INVALID_ARG, "%s: holds no optimizer state '%s', which this run's "
                                    "optimizer keeps: it was saved with other optimizer options (momentum, Adam's "
                                    "moments)", path, name);
                MP_TRY(find_tensor(f, path, name, &s, &ten));
                MP_TRY(check_finite(path, name, ten.data, ref->n));
                if (state_nonnegative(t->groups[gi].opt->o.optim.kind, k))
                    MP_TRY(check_nonnegative(path, name, ten.data, ref->n));
            }
        }
    }
    return check_no_extra(f, path, t);
}

static void copy_tensor(const mp_st_file *f, const char *name, float *dst, int64_t n) {
    mp_st_tensor ten;
    mp_status s = mp_safetensors_get(f, name, &ten);
    MP_ASSERT(s == MP_OK); /* check_file found it */
    memcpy(dst, ten.data, (size_t)n * sizeof(float));
}

/* A saved scaler count kept within this run's scaler options, which are the
 * loading trainer's as its optimizer's hyper-parameters are: a growth
 * tracker of at least a shorter --loss-scale-window's clean steps becomes
 * window - 1, so the scale grows at the next clean step (as it would have by
 * now under that window); overflows left to absorb become at most a smaller
 * --loss-scale-hysteresis. Other values (negative, fractional) are left for
 * mp_scaler_state_set to refuse. A clamp is said in note (cap bytes). */
static double within_scaler_options(const mp_scaler *s, const char *path, const char *name, double v, char *note,
                                    size_t cap) {
    if (!(v == floor(v) && v <= INT32_MAX)) return v;
    const int hysteresis = s->opts.hysteresis > 1 ? s->opts.hysteresis : 1;
    if (!strcmp(name, "growth_tracker") && v >= s->opts.growth_interval) {
        snprintf(note, cap, "%s: the loss scaler had counted %.0f clean steps toward growing the scale, this run's "
                 "--loss-scale-window is %d: it grows the scale at the next clean step\n", path, v,
                 s->opts.growth_interval);
        return s->opts.growth_interval - 1;
    }
    if (!strcmp(name, "hysteresis_left") && v > hysteresis) {
        snprintf(note, cap, "%s: the loss scaler had %.0f overflows left to absorb, this run's "
                 "--loss-scale-hysteresis allows %d\n", path, v, hysteresis);
        return hysteresis;
    }
    return v;
}

/* The counters and the scaler, into copies first (nothing changes on error);
 * note: what was changed to fit this run's scaler options, or "". */
static mp_status read_counters(const mp_st_file *f, const char *path, mp_trainer *t, int64_t *epoch, int64_t *steps,
                               uint64_t *plan_step, int64_t *optim_steps, mp_scaler *scaler, char *note, size_t cap) {
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.epoch", 0, 100000, epoch));
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.global_step", 0, MAX_STEPS, steps));
    MP_TRY(mp_ckpt_meta_u64(f, path, "mixprec.plan_step", 0, UINT64_MAX, plan_step));
    for (int gi = 0; gi < t->n_groups; gi++) {
        char key[48];
        group_key(key, sizeof key, "mixprec.optim_steps", gi);
        MP_TRY(mp_ckpt_meta_int(f, path, key, 0, *steps, &optim_steps[gi]));
    }
    *scaler = t->scaler;
    const char *sn[MP_SCALER_STATE_COUNT];
    const int ns = mp_scaler_state_get(scaler, sn, NULL, MP_SCALER_STATE_COUNT);
    for (int i = 0; i < ns; i++) {
        char key[64];
        snprintf(key, sizeof key, "scaler.%s", sn[i]);
        if (!mp_safetensors_meta(f, key) && !t->loss_scaling) continue; /* older files without loss scaling */
        if (scaler->opts.static_scale && !strcmp(sn[i], "scale")) continue; /* this run's static scale stays */
        double value;
        MP_TRY(mp_ckpt_meta_double(f, path, key, -DBL_MAX, DBL_MAX, &value));
        const size_t used = strlen(note);
        value = within_scaler_options(scaler, path, sn[i], value, note + used, cap - used);
        if (mp_scaler_state_set(scaler, sn[i], value) != MP_OK)
            return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': %s", path, key, mp_last_error());
    }
    if (scaler->skipped_steps > *steps)
        return mp_error(MP_ERR_FORMAT, "%s: metadata 'scaler.skipped_steps' = %lld is more than the %lld steps taken",
                        path, (long long)scaler->skipped_steps, (long long)*steps);
    return MP_OK;
}

/* A group's hyper-parameters or schedule other than the saved ones are the
 * loading trainer's to choose (a lower rate to fine-tune, more epochs):
 * said on the trainer's events, not refused. Files without the record say
 * nothing. */
static void say_other_options(const mp_st_file *f, const char *path, const mp_trainer *t) {
    for (int gi = 0; t->events && gi < t->n_groups; gi++) {
        char key[48], now[OPTIONS_LEN];
        group_key(key, sizeof key, "mixprec.optimizer_options", gi);
        const char *saved = mp_safetensors_meta(f, key);
        mp_optimizer_describe(t->groups[gi].opt, now, sizeof now);
        char which[16] = "";
        if (t->n_groups > 1) snprintf(which, sizeof which, " %d", gi);
        if (saved && strcmp(saved, now)) {
            fprintf(t->events, "%s: optimizer%s was saved with %s; it continues with this trainer's %s\n", path,
                    which, saved, now);
            fflush(t->events);
        }
    }
}

mp_status mp_trainer_load(mp_trainer *t, const char *path, mp_checkpoint_info *info) {
    if (!t || !path) return mp_error(MP_ERR_INVALID_ARG, "checkpoint: null trainer or path");
    if (t->micro != 0)
        return mp_error(MP_ERR_INVALID_ARG, "%s: a checkpoint cannot be loaded in the middle of an accumulated step",
                        path);
    MP_TRY(mp_trainer_need_plan(t));
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open(path, &f));
    int64_t epoch = 0, steps = 0, optim_steps[MP_MAX_GROUPS] = {0};
    uint64_t plan_step = 0;
    mp_scaler scaler;
    mp_checkpoint_info norm = {0};
    mp_status s = check_file(f, path, t, info);
    char note[512] = "";
    if (s == MP_OK) s = read_counters(f, path, t, &epoch, &steps, &plan_step, optim_steps, &scaler, note, sizeof note);
    if (s == MP_OK) s = mp_ckpt_meta_norm(f, path, &norm);
    if (s == MP_OK) s = t->be->wait(t);
    if (s != MP_OK) {
        mp_safetensors_close(f);
        return s;
    }
    /* everything checked: now the state changes */
    mp_graph *g = t->g;
    for (int i = 0; i < g->n_params; i++)
        copy_tensor(f, g->params[i].name, g->params[i].data, mp_shape_numel(&g->params[i].spec.shape));
    mp_graph_round_low_weights(g, NULL, NULL);
    for (int gi = 0; gi < t->n_groups; gi++) {
        mp_optim *opt = t->groups[gi].opt->host;
        for (int i = 0; i < mp_optim_param_count(opt); i++) {
            const mp_param_ref *ref = mp_optim_param(opt, i);
            float *bufs[2];
            const int nb = mp_optim_state_tensors(opt, i, bufs);
            for (int k = 0; k < nb; k++) {
                char name[NAME_LEN];
                state_name(name, ref->name, k);
                copy_tensor(f, name, bufs[k], ref->n);
            }
        }
        mp_status cs = mp_optim_set_step_count(opt, optim_steps[gi]); /* in range: read_counters checked it */
        MP_ASSERT(cs == MP_OK);
    }
    say_other_options(f, path, t);
    if (t->events && note[0]) {
        fputs(note, t->events);
        fflush(t->events);
    }
    mp_safetensors_close(f);
    g->params_initialized = true;
    t->steps = steps;
    mp_plan_set_step(t->plan, plan_step);
    mp_scaler_reset_bookkeeping(&scaler);
    t->scaler = scaler;
    t->seen = scaler;
    t->ends_queued = 0;
    if (info) {
        info->epoch = (int)epoch;
        info->norm_recorded = norm.norm_recorded;
        info->norm_channels = norm.norm_channels;
        memcpy(info->norm_mean, norm.norm_mean, sizeof norm.norm_mean);
        memcpy(info->norm_std, norm.norm_std, sizeof norm.norm_std);
    }
    return t->be->state_to_device(t);
}
