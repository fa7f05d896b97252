/* numerics_log.c — the numerics JSONL writer (numerics_log.h), with cJSON,
 * which escapes every string (node names are the user's). */
#include "amp/numerics_log.h"

#include <math.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "io/output_path.h"

const char *mp_numerics_kind_name(mp_numerics_kind k) {
    switch (k) {
    case MP_NUMERICS_OUTPUT: return "output";
    case MP_NUMERICS_GRAD: return "grad";
    case MP_NUMERICS_PARAM: return "param";
    case MP_NUMERICS_PARAM_GRAD: return "param_grad";
    case MP_NUMERICS_ALL: break;
    }
    return "?";
}

/* One format's counts. */
static cJSON *format_obj(const mp_tensor_stats *s, int f) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "overflow", (double)s->overflow[f]);
    cJSON_AddNumberToObject(o, "underflow", (double)s->underflow[f]);
    cJSON_AddNumberToObject(o, "subnormal", (double)s->subnormal[f]);
    return o;
}

/* The histogram from its first to its last non-empty octave. */
static cJSON *hist_obj(const mp_tensor_stats *s) {
    int lo = 0, hi = MP_NUMERICS_HIST_BINS - 1;
    while (lo < MP_NUMERICS_HIST_BINS && !s->hist[lo]) lo++;
    while (hi >= lo && !s->hist[hi]) hi--;
    cJSON *o = cJSON_CreateObject(), *counts = cJSON_CreateArray();
    if (!o || !counts) {
        cJSON_Delete(o);
        cJSON_Delete(counts);
        return NULL;
    }
    cJSON_AddNumberToObject(o, "min_log2", lo <= hi ? MP_NUMERICS_HIST_MIN + lo : 0);
    for (int k = lo; k <= hi; k++) cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)s->hist[k]));
    cJSON_AddItemToObject(o, "counts", counts);
    return o;
}

static cJSON *record_obj(const mp_numerics_record *r) {
    const mp_tensor_stats *s = &r->stats;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", r->name ? r->name : "");
    cJSON_AddStringToObject(o, "kind", mp_numerics_kind_name(r->kind));
    cJSON_AddNumberToObject(o, "node", r->node);
    cJSON_AddStringToObject(o, "dtype", mp_dtype_name(r->dtype));
    cJSON_AddNumberToObject(o, "scale", r->scale);
    cJSON_AddNumberToObject(o, "numel", (double)s->numel);
    cJSON_AddNumberToObject(o, "amax", s->amax);
    cJSON_AddNumberToObject(o, "amin_nonzero", s->amin);
    cJSON_AddNumberToObject(o, "nan", (double)s->nan);
    cJSON_AddNumberToObject(o, "inf", (double)s->inf);
    cJSON_AddNumberToObject(o, "zero", (double)s->zero);
    cJSON_AddItemToObject(o, "fp16", format_obj(s, MP_NUMERICS_FP16));
    cJSON_AddItemToObject(o, "bf16", format_obj(s, MP_NUMERICS_BF16));
    cJSON_AddItemToObject(o, "log2_hist", hist_obj(s));
    return o;
}

mp_status mp_numerics_log_write(FILE *f, const char *path, const char *option, int64_t step, float loss_scale,
                                const mp_numerics_record *rec, int n) {
    cJSON *root = cJSON_CreateObject(), *tensors = cJSON_CreateArray();
    if (!root || !tensors) {
        cJSON_Delete(root);
        cJSON_Delete(tensors);
        return mp_error(MP_ERR_NOMEM, "%s %s: out of memory", option, path);
    }
    cJSON_AddNumberToObject(root, "step", (double)step);
    cJSON_AddNumberToObject(root, "loss_scale", isfinite(loss_scale) ? loss_scale : 0);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(tensors, record_obj(&rec[i]));
    cJSON_AddItemToObject(root, "tensors", tensors);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return mp_error(MP_ERR_NOMEM, "%s %s: out of memory", option, path);
    fputs(text, f);
    fputc('\n', f);
    cJSON_free(text);
    return mp_output_flush(f, path, option);
}
