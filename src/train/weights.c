/* weights.c — weight files (mixprec/train.h): every parameter under its name
 * as f32 safetensors, and loading such a file, or one PyTorch wrote with
 * `safetensors.torch.save_file(model.state_dict())`, into a graph. Every
 * tensor is checked (name, shape, float dtype, finite values also in the
 * dtype a parameter without an fp32 master trains in, non-negative running
 * variances) before any parameter changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype_convert.h"
#include "graph/graph.h"
#include "io/safetensors.h"
#include "train/weights.h"

mp_status mp_graph_save_weights(const mp_graph *g, const char *path) {
    if (!g || !path) return mp_error(MP_ERR_INVALID_ARG, "save_weights: null graph or path");
    mp_st_tensor *ts = calloc((size_t)g->n_params + 1, sizeof *ts);
    if (!ts) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < g->n_params; i++) {
        const mp_gparam *p = &g->params[i];
        ts[i] = (mp_st_tensor){.name = p->name, .dtype = MP_DTYPE_F32, .ndim = p->spec.shape.ndim, .data = p->data};
        for (int d = 0; d < p->spec.shape.ndim; d++) ts[i].dims[d] = p->spec.shape.dims[d];
    }
    mp_status s = mp_safetensors_write(path, ts, g->n_params, NULL, NULL, 0);
    free(ts);
    return s;
}

static bool ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static void shape_text(const int64_t *dims, int ndim, char *buf, size_t len) {
    buf[0] = '\0';
    for (int i = 0; i < ndim; i++) {
        const size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%lld", i ? "x" : "", (long long)dims[i]);
    }
    if (ndim == 0) snprintf(buf, len, "scalar");
}

/* File tensor `name` fits parameter p: its shape and a float dtype. */
static mp_status check_tensor(const mp_st_file *f, const char *path, const mp_gparam *p, mp_st_tensor *t) {
    MP_TRY(mp_safetensors_get(f, p->name, t));
    const mp_dtype dt = t->dtype;
    if (dt != MP_DTYPE_F32 && dt != MP_DTYPE_F16 && dt != MP_DTYPE_BF16 && dt != MP_DTYPE_F64)
        return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' is %s, a weight must be f32, f16, bf16 or f64", path, p->name,
                        mp_dtype_name(dt));
    bool same = t->ndim == p->spec.shape.ndim;
    for (int i = 0; same && i < t->ndim; i++) same = t->dims[i] == p->spec.shape.dims[i];
    if (!same) {
        char have[96], want[96];
        shape_text(t->dims, t->ndim, have, sizeof have);
        mp_shape_str(&p->spec.shape, want, sizeof want);
        return mp_error(MP_ERR_SHAPE, "%s: tensor '%s' has shape %s, the model's parameter is %s", path, p->name, have,
                        want);
    }
    return MP_OK;
}

/* The tensor's values as f32 into dst, checked. */
static mp_status convert(const char *path, const mp_gparam *p, const mp_st_tensor *t, float *dst, int64_t n) {
    if (t->dtype == MP_DTYPE_F64)
        for (int64_t i = 0; i < n; i++) dst[i] = (float)((const double *)t->data)[i];
    else mp_load_f32_known(dst, t->data, t->dtype, n);
    return mp_gparam_check_values(p, dst, n, path);
}

static bool in_file(const mp_st_file *f, const char *name) {
    for (int i = 0; i < mp_safetensors_count(f); i++)
        if (!strcmp(mp_safetensors_name(f, i), name)) return true;
    return false;
}

/* Tensors of the file that no parameter has (PyTorch's num_batches_tracked
 * counters and names starting with `ignore` aside): an error unless allowed. */
static mp_status check_unused(const mp_st_file *f, const char *path, const mp_graph *g, bool allowed,
                              const char *ignore, bool hint) {
    for (int i = 0; !allowed && i < mp_safetensors_count(f); i++) {
        const char *name = mp_safetensors_name(f, i);
        if (ends_with(name, ".num_batches_tracked")) continue;
        if (ignore && !strncmp(name, ignore, strlen(ignore))) continue;
        bool used = false;
        for (int k = 0; k < g->n_params && !used; k++) used = !strcmp(g->params[k].name, name);
        if (!used)
            return mp_error(MP_ERR_FORMAT, "%s: tensor '%s' matches no parameter of the model%s", path, name,
                            hint ? " (mp_weights_opts.allow_unused ignores such tensors)" : "");
    }
    return MP_OK;
}

mp_status mp_graph_load_weights(mp_graph *g, const char *path, const mp_weights_opts *o) {
    if (!g || !path) return mp_error(MP_ERR_INVALID_ARG, "load_weights: null graph or path");
    mp_st_file *f = NULL;
    MP_TRY(mp_safetensors_open(path, &f));
    mp_status s = mp_weights_load_open(g, f, path, o ? o : &(mp_weights_opts){0}, NULL); /* errors name the options */
    mp_safetensors_close(f);
    return s;
}

mp_status mp_weights_load_open(mp_graph *g, const mp_st_file *f, const char *path, const mp_weights_opts *o,
                               const char *ignore_prefix) {
    const mp_weights_opts opts = o ? *o : (mp_weights_opts){0};
    const bool hint = o != NULL; /* a caller without options gets no advice about them */
    int64_t total = 0;
    for (int k = 0; k < g->n_params; k++) total += mp_shape_numel(&g->params[k].spec.shape);
    float *staged = malloc(((size_t)total + 1) * sizeof *staged);
    bool *present = calloc((size_t)g->n_params + 1, sizeof *present);
    mp_status s = staged && present ? MP_OK : mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    if (s == MP_OK) s = check_unused(f, path, g, opts.allow_unused, ignore_prefix, hint);
    float *at = staged;
    for (int k = 0; s == MP_OK && k < g->n_params; k++) {
        const mp_gparam *p = &g->params[k];
        const int64_t n = mp_shape_numel(&p->spec.shape);
        mp_st_tensor t;
        if (!in_file(f, p->name)) {
            if (!opts.allow_missing)
                s = mp_error(MP_ERR_FORMAT, "%s: the model's parameter '%s' is not in the file%s", path, p->name,
                             hint ? " (mp_weights_opts.allow_missing keeps such parameters)" : "");
            else if (!g->params_initialized) /* kept would mean zeros, and the graph then counted as initialized */
                s = mp_error(MP_ERR_INVALID_ARG, "%s: the model's parameter '%s' is not in the file, and allow_missing "
                             "keeps what the graph holds, but its parameters were never initialized "
                             "(mp_graph_init_params first)", path, p->name);
        } else {
            s = check_tensor(f, path, p, &t);
            if (s == MP_OK) s = convert(path, p, &t, at, n);
            present[k] = s == MP_OK;
        }
        at += n;
    }
    if (s == MP_OK) { /* all checked: copy */
        at = staged;
        for (int k = 0; k < g->n_params; k++) {
            const int64_t n = mp_shape_numel(&g->params[k].spec.shape);
            if (present[k]) memcpy(g->params[k].data, at, (size_t)n * sizeof(float));
            at += n;
        }
        g->params_initialized = true;
        mp_graph_round_low_weights(g, NULL, NULL);
    }
    free(staged);
    free(present);
    return s;
}
