/* checkpoint.c — see checkpoint.h. */
#include "train/checkpoint.h"

#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt_meta.h"
#include "io/safetensors.h"

#define META_MAX 32
#define NAME_LEN 160

static mp_st_tensor tensor_of(const char *name, const mp_shape *s, const float *data) {
    mp_st_tensor t = {.name = name, .dtype = MP_DTYPE_F32, .ndim = s->ndim, .data = data};
    for (int i = 0; i < s->ndim; i++) t.dims[i] = s->dims[i];
    return t;
}

/* Optimizer state tensor names: "optim/<param>/0", "optim/<param>/1". */
static void state_name(char *buf, const char *param, int k) { snprintf(buf, NAME_LEN, "optim/%s/%d", param, k); }

mp_status mp_checkpoint_save(const char *path, const mp_graph *g, const mp_optim *opt, const mp_scaler *scaler,
                             const mp_ckpt_info *info) {
    int n_opt = mp_optim_param_count(opt);
    int cap = g->n_params + 2 * n_opt;
    mp_st_tensor *t = calloc((size_t)cap + 1, sizeof *t);
    char (*names)[NAME_LEN] = calloc((size_t)cap + 1, NAME_LEN);
    if (!t || !names) {
        free(t);
        free(names);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory writing the checkpoint", path);
    }
    int n = 0;
    for (int i = 0; i < g->n_params; i++) t[n++] = tensor_of(g->params[i].name, &g->params[i].spec.shape, g->params[i].data);
    for (int i = 0; i < n_opt; i++) {
        const mp_param_ref *ref = mp_optim_param(opt, i);
        float *bufs[2];
        int nb = mp_optim_state_tensors(opt, i, bufs);
        for (int k = 0; k < nb; k++) {
            state_name(names[n], ref->name, k);
            mp_shape s = mp_shape1((int)ref->n);
            t[n] = tensor_of(names[n], &s, bufs[k]);
            n++;
        }
    }
    const char *keys[META_MAX], *vals[META_MAX];
    char store[META_MAX][64];
    int m = 0;
#define META(k, fmt, v) (keys[m] = (k), snprintf(store[m], sizeof store[m], fmt, v), vals[m] = store[m], m++)
    META("mixprec.model", "%s", info->model);
    META("mixprec.precision", "%s", info->precision);
    META("mixprec.optimizer", "%s", info->optimizer);
    META("mixprec.batch", "%d", info->batch);
    META("mixprec.epoch", "%d", info->epoch);
    META("mixprec.global_step", "%lld", (long long)info->global_step);
    META("mixprec.plan_step", "%llu", (unsigned long long)info->plan_step);
    META("mixprec.optim_steps", "%lld", (long long)mp_optim_step_count(opt));
    static char scaler_keys[MP_SCALER_STATE_COUNT][48];
    if (scaler) {
        const char *sn[MP_SCALER_STATE_COUNT];
        double sv[MP_SCALER_STATE_COUNT];
        int ns = mp_scaler_state_get(scaler, sn, sv, MP_SCALER_STATE_COUNT);
        for (int i = 0; i < ns && m < META_MAX; i++) {
            snprintf(scaler_keys[i], sizeof scaler_keys[i], "scaler.%s", sn[i]);
            META(scaler_keys[i], "%.17g", sv[i]);
        }
    }
#undef META
    mp_status s = mp_safetensors_write(path, t, n, keys, vals, m);
    free(t);
    free(names);
    return s;
}

#define MAX_STEP ((int64_t)1 << 53) /* step counters stay exact in a double */

static mp_status expect_same(const char *path, const char *what, const char *have, const char *want) {
    if (strcmp(have, want))
        return mp_error(MP_ERR_INVALID_ARG, "--resume %s: the checkpoint was saved with %s %s, this run uses %s", path,
                        what, have, want);
    return MP_OK;
}

static mp_status load_tensor(const mp_st_file *f, const char *path, const char *name, float *dst, int64_t n) {
    mp_st_tensor t;
    MP_TRY(mp_safetensors_get(f, name, &t));
    int64_t have = 1;
    for (int i = 0; i < t.ndim; i++) have *= t.dims[i];
    if (t.dtype != MP_DTYPE_F32 || have != n)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' is %s with %lld elements, expected f32 with %lld", path, name,
                        mp_dtype_name(t.dtype), (long long)have, (long long)n);
    memcpy(dst, t.data, (size_t)n * sizeof(float));
    return MP_OK;
}

static mp_status load_all(const mp_st_file *f, const char *path, mp_graph *g, mp_optim *opt, mp_scaler *scaler,
                          mp_ckpt_info *info) {
    const char *v;
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.model", &v));
    MP_TRY(expect_same(path, "model", v, info->model));
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.precision", &v));
    MP_TRY(expect_same(path, "precision", v, info->precision));
    MP_TRY(mp_ckpt_meta_string(f, path, "mixprec.optimizer", &v));
    MP_TRY(expect_same(path, "optimizer", v, info->optimizer));
    int64_t batch, epoch, global_step, optim_steps;
    uint64_t plan_step;
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.batch", 1, INT32_MAX, &batch));
    if (batch != info->batch)
        return mp_error(MP_ERR_INVALID_ARG, "--resume %s: the checkpoint was saved with batch %d, this run uses %d", path,
                        (int)batch, info->batch);
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.epoch", 0, 100000, &epoch));
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.global_step", 0, MAX_STEP - 1, &global_step));
    MP_TRY(mp_ckpt_meta_int(f, path, "mixprec.optim_steps", 0, global_step, &optim_steps));
    MP_TRY(mp_ckpt_meta_u64(f, path, "mixprec.plan_step", 0, UINT64_MAX, &plan_step));
    for (int i = 0; i < g->n_params; i++)
        MP_TRY(load_tensor(f, path, g->params[i].name, g->params[i].data, mp_shape_numel(&g->params[i].spec.shape)));
    for (int i = 0; i < mp_optim_param_count(opt); i++) {
        const mp_param_ref *ref = mp_optim_param(opt, i);
        float *bufs[2];
        int nb = mp_optim_state_tensors(opt, i, bufs);
        for (int k = 0; k < nb; k++) {
            char name[NAME_LEN];
            state_name(name, ref->name, k);
            MP_TRY(load_tensor(f, path, name, bufs[k], ref->n));
        }
    }
    MP_TRY(mp_optim_set_step_count(opt, optim_steps));
    info->epoch = (int)epoch;
    info->global_step = global_step;
    info->plan_step = plan_step;
    if (scaler) {
        const char *sn[MP_SCALER_STATE_COUNT];
        double sv[MP_SCALER_STATE_COUNT];
        int ns = mp_scaler_state_get(scaler, sn, sv, MP_SCALER_STATE_COUNT);
        for (int i = 0; i < ns; i++) {
            char key[64];
            snprintf(key, sizeof key, "scaler.%s", sn[i]);
            double num;
            MP_TRY(mp_ckpt_meta_double(f, path, key, -DBL_MAX, DBL_MAX, &num));
            if (mp_scaler_state_set(scaler, sn[i], num) != MP_OK)
                return mp_error(MP_ERR_FORMAT, "%s: metadata '%s': %s", path, key, mp_last_error());
        }
    }
    return MP_OK;
}

mp_status mp_checkpoint_load(const char *path, mp_graph *g, mp_optim *opt, mp_scaler *scaler, mp_ckpt_info *info) {
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open(path, &f));
    mp_status s = load_all(f, path, g, opt, scaler, info);
    mp_safetensors_close(f);
    return s;
}
