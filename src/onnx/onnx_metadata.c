/* onnx_metadata.c — the input normalization in an ONNX model's metadata
 * ("mixprec.norm_mean", "mixprec.norm_std": comma-separated decimals, one
 * per channel): written by the exporter (onnx_write.c), read back by
 * mp_onnx_read_normalization so that `mixprec eval` of an exported model
 * normalizes as the training run did. */
#include "onnx/onnx_metadata.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt_meta.h"
#include "onnx/onnx_import.h"

#define NORM_MEAN_KEY "mixprec.norm_mean"
#define NORM_STD_KEY "mixprec.norm_std"

/* "v0,v1,..." of n floats as checkpoints write them, or NULL when out of memory. */
static char *join(const float *v, int n) {
    const size_t cap = (size_t)n * 18 + 1;
    char *s = malloc(cap);
    if (s) mp_ckpt_norm_text(v, n, s, cap);
    return s;
}

static Onnx__StringStringEntryProto *entry(const char *key, char *value) {
    Onnx__StringStringEntryProto *e = malloc(sizeof *e);
    char *k = strdup(key);
    if (!e || !k || !value) {
        free(e), free(k), free(value);
        return NULL;
    }
    onnx__string_string_entry_proto__init(e);
    e->key = k;
    e->value = value;
    return e;
}

mp_status onnx_w_normalization(Onnx__ModelProto *m, int channels, const float *mean, const float *std,
                               const char *path) {
    if (channels <= 0) return MP_OK;
    if (!mean || !std) return mp_error(MP_ERR_INVALID_ARG, "%s: normalization of %d channels without values", path,
                                       channels);
    for (int i = 0; i < channels; i++)
        if (!isfinite(mean[i]) || !(std[i] > 0) || !isfinite(std[i]))
            return mp_error(MP_ERR_INVALID_ARG, "%s: normalization channel %d: mean %g, std %g (finite, std > 0)",
                            path, i, (double)mean[i], (double)std[i]);
    Onnx__StringStringEntryProto **props = malloc(2 * sizeof *props);
    if (!props) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    props[0] = entry(NORM_MEAN_KEY, join(mean, channels));
    props[1] = entry(NORM_STD_KEY, join(std, channels));
    m->metadata_props = props; /* freed with the model, whatever follows */
    m->n_metadata_props = (props[0] != NULL) + (props[1] != NULL);
    if (!props[0] || !props[1]) {
        if (!props[0]) props[0] = props[1];
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    }
    return MP_OK;
}

/* The values of key into v (room for max, each in [lo, 1e30]), their count
 * into *n; 0 when absent. The same format as a checkpoint's record. */
static mp_status parse(const Onnx__ModelProto *m, const char *path, const char *key, double lo, int max, float *v,
                       int *n) {
    *n = 0;
    const char *s = NULL;
    for (size_t i = 0; i < m->n_metadata_props; i++)
        if (m->metadata_props[i]->key && !strcmp(m->metadata_props[i]->key, key)) {
            if (s) /* which one applies would be a guess */
                return mp_error(MP_ERR_FORMAT, "%s: metadata %s appears twice", path, key);
            s = m->metadata_props[i]->value ? m->metadata_props[i]->value : "";
        }
    if (!s) return MP_OK;
    if (!s[0] || !mp_meta_parse_floats(s, lo, 1e30, v, max, n))
        return mp_error(MP_ERR_FORMAT, "%s: metadata %s: '%.80s' is not a list of at most %d numbers%s", path, key, s,
                        max, lo > 0 ? " > 0" : "");
    return MP_OK;
}

mp_status mp_onnx_read_normalization(const char *path, int max_channels, int *channels, float *mean, float *std) {
    if (!path || !channels || !mean || !std || max_channels < 1)
        return mp_error(MP_ERR_INVALID_ARG, "onnx: null argument or no room for the normalization");
    *channels = 0;
    Onnx__ModelProto *m;
    MP_TRY(onnx_read_model(path, &m));
    int nm = 0, ns = 0;
    mp_status s = parse(m, path, NORM_MEAN_KEY, -1e30, max_channels, mean, &nm);
    if (s == MP_OK) s = parse(m, path, NORM_STD_KEY, 1e-30, max_channels, std, &ns);
    if (s == MP_OK && nm != ns)
        s = mp_error(MP_ERR_FORMAT, "%s: metadata %s has %d values, %s %d", path, NORM_MEAN_KEY, nm, NORM_STD_KEY, ns);
    onnx__model_proto__free_unpacked(m, NULL);
    if (s == MP_OK) *channels = nm;
    return s;
}
