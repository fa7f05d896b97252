/* policy_file.c — reading and writing the doctor's policy file (policy_file.h):
 * {"mixprec_policy": 1, "precision": "amp-fp16", "overrides": {"fc1": "fp32"},
 *  "loss_scale": {"mode": "dynamic", "init": 1024, "min": 4}, "doctor": {...}} */
#include "amp/policy_file.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "io/input_file.h"
#include "io/output_path.h"

/* Split "a=x,b=y": the dtype text of layer `name` in spec, or NULL. */
static const char *find_layer(const char *spec, const char *name, char *dt, size_t cap) {
    const size_t nlen = strlen(name);
    for (const char *p = spec; p && *p;) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (eq && eq < p + len && (size_t)(eq - p) == nlen && !strncmp(p, name, nlen)) {
            snprintf(dt, cap, "%.*s", (int)(len - nlen - 1), eq + 1);
            return dt;
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

mp_status mp_policy_file_merge(const mp_policy_file *f, const char *path, const char *cli, char *out, size_t cap) {
    out[0] = '\0';
    for (const char *p = f->overrides; *p;) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        char name[128], dt[32];
        snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
        if (cli && find_layer(cli, name, dt, sizeof dt))
            return mp_error(MP_ERR_INVALID_ARG, "%s: overrides.%s conflicts with --precision-override %s=%s (give the "
                            "layer's dtype in one place)", path, name, name, dt);
        p = end ? end + 1 : p + strlen(p);
    }
    int n = snprintf(out, cap, "%s%s%s", f->overrides, f->overrides[0] && cli && *cli ? "," : "", cli ? cli : "");
    if (n < 0 || (size_t)n >= cap) return mp_error(MP_ERR_INVALID_ARG, "%s: too many overrides", path);
    return MP_OK;
}

mp_status mp_policy_file_write(const char *path, const mp_doctor_report *r) {
    cJSON *root = cJSON_CreateObject(), *ov = cJSON_CreateObject(), *doc = cJSON_CreateObject(),
          *layers = cJSON_CreateObject();
    if (!root || !ov || !doc || !layers) {
        cJSON_Delete(root), cJSON_Delete(ov), cJSON_Delete(doc), cJSON_Delete(layers);
        return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    }
    cJSON_AddNumberToObject(root, "mixprec_policy", 1);
    cJSON_AddStringToObject(root, "precision", mp_precision_name(r->precision));
    /* the user's overrides and the doctor's fixes, as the analysis applied them */
    for (const char *p = r->overrides; *p;) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (eq && eq < p + len) {
            char name[128], dt[32];
            snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
            snprintf(dt, sizeof dt, "%.*s", (int)(p + len - eq - 1), eq + 1);
            cJSON_AddStringToObject(ov, name, dt);
        }
        p = end ? end + 1 : p + len;
    }
    for (int i = 0; i < r->n; i++) {
        const mp_doctor_layer *l = &r->layers[i];
        if (!l->fwd_risk) continue;
        char why[200];
        snprintf(why, sizeof why, "fp16 forward overflow: output amax %.4g seen, %.4g predicted, input %.4g predicted "
                 "(fp16 max 65504)", l->out_seen, l->out_pred, l->in_pred);
        cJSON_AddStringToObject(layers, l->name, why);
    }
    cJSON_AddItemToObject(root, "overrides", ov);
    if (r->set_scale) {
        cJSON *ls = cJSON_CreateObject();
        cJSON_AddStringToObject(ls, "mode", r->policy_static ? "static" : "dynamic");
        cJSON_AddNumberToObject(ls, "init", r->init_scale);
        if (!r->policy_static) cJSON_AddNumberToObject(ls, "min", r->min_scale);
        cJSON_AddItemToObject(root, "loss_scale", ls);
    }
    cJSON_AddStringToObject(doc, "verdict", r->verdict);
    cJSON_AddNumberToObject(doc, "probe_steps", (double)r->probe_steps);
    cJSON_AddNumberToObject(doc, "planned_steps", (double)r->planned_steps);
    if (r->startup_skips) cJSON_AddNumberToObject(doc, "startup_skipped_steps", r->startup_skips);
    if (r->lo_log2 <= r->hi_log2) {
        cJSON *w = cJSON_CreateArray();
        cJSON_AddItemToArray(w, cJSON_CreateNumber(exp2(r->lo_log2)));
        cJSON_AddItemToArray(w, cJSON_CreateNumber(exp2(r->hi_log2)));
        cJSON_AddItemToObject(doc, "loss_scale_window", w);
    }
    cJSON_AddItemToObject(doc, "layers", layers);
    cJSON_AddItemToObject(root, "doctor", doc);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    const size_t len = text ? strlen(text) : 0;
    char *line = text ? malloc(len + 1) : NULL;
    if (line) {
        memcpy(line, text, len);
        line[len] = '\n';
    }
    cJSON_free(text);
    if (!line) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    /* a failed write (a full disk) must not leave an earlier policy truncated */
    const mp_status s = mp_output_write_atomic(path, "--policy-out", line, len + 1);
    free(line);
    return s;
}

static mp_status bad(const char *path, const char *key, const char *why) {
    return mp_error(MP_ERR_FORMAT, "%s: %s: %s", path, key, why);
}

/* Member `it` of object `obj` is the first with its key (JSON allows a key
 * twice; which one would apply is a guess, so it is an error). */
static mp_status once(const char *path, const cJSON *obj, const cJSON *it, const char *key) {
    for (const cJSON *p = obj->child; p != it; p = p->next)
        if (!strcmp(p->string, it->string)) return bad(path, key, "given twice");
    return MP_OK;
}

static mp_status read_overrides(const char *path, const cJSON *ov, const mp_graph *g, mp_policy_file *out) {
    if (!cJSON_IsObject(ov)) return bad(path, "overrides", "must be an object {\"layer\": \"fp32\", ...}");
    for (const cJSON *it = ov->child; it; it = it->next) {
        char key[160];
        snprintf(key, sizeof key, "overrides.%s", it->string);
        MP_TRY(once(path, ov, it, key));
        if (!cJSON_IsString(it)) return bad(path, key, "must be a dtype string (fp32, fp16, bf16)");
        const char *dt = it->valuestring;
        if (strcmp(dt, "fp32") && strcmp(dt, "f32") && strcmp(dt, "fp16") && strcmp(dt, "f16") && strcmp(dt, "bf16"))
            return mp_error(MP_ERR_FORMAT, "%s: %s: dtype '%s' unknown (fp32, fp16, bf16)", path, key, dt);
        const mp_node n = mp_graph_find(g, it->string);
        if (n < 0) return mp_error(MP_ERR_FORMAT, "%s: %s: no layer named '%s' in the model", path, key, it->string);
        const char *op = mp_graph_node_op(g, n);
        if (!strcmp(op, "labels") || !strcmp(op, "targets") || strstr(op, "cross_entropy") || strstr(op, "bce"))
            return mp_error(MP_ERR_FORMAT, "%s: %s: '%s' is a %s and always fp32/int32", path, key, it->string, op);
        if (strchr(it->string, ',') || strchr(it->string, '='))
            return bad(path, key, "a layer name cannot hold ',' or '='");
        const size_t len = strlen(out->overrides);
        const int w = snprintf(out->overrides + len, sizeof out->overrides - len, "%s%s=%s", len ? "," : "",
                               it->string, dt);
        if (w < 0 || (size_t)w >= sizeof out->overrides - len) return bad(path, key, "too many overrides");
    }
    return MP_OK;
}

static mp_status read_scale(const char *path, const cJSON *ls, mp_policy_file *out) {
    if (!cJSON_IsObject(ls)) return bad(path, "loss_scale", "must be an object {\"mode\": ..., \"init\": ..., \"min\": ...}");
    out->has_scale = true;
    bool has_init = false;
    for (const cJSON *it = ls->child; it; it = it->next) {
        char key[160];
        snprintf(key, sizeof key, "loss_scale.%s", it->string);
        MP_TRY(once(path, ls, it, key));
        if (!strcmp(it->string, "mode")) {
            if (!cJSON_IsString(it) || (strcmp(it->valuestring, "dynamic") && strcmp(it->valuestring, "static")))
                return bad(path, key, "must be \"dynamic\" or \"static\"");
            out->static_scale = !strcmp(it->valuestring, "static");
        } else if (!strcmp(it->string, "init") || !strcmp(it->string, "min")) {
            const bool init = !strcmp(it->string, "init");
            const double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
            /* a float the scaler takes: 1e-50 would become 0, which means the default or none */
            if (!isfinite(v) || v > 3.4e38 || ((init || v != 0) && !((float)v >= FLT_MIN))) {
                char why[160];
                snprintf(why, sizeof why, "must be %sa number from %g (the smallest normal float) to 3.4e38",
                         init ? "" : "0 (none) or ", (double)FLT_MIN);
                return bad(path, key, why);
            }
            *(init ? &out->init_scale : &out->min_scale) = (float)v;
            has_init |= init;
        } else {
            return bad(path, key, "unknown key (known: mode, init, min)");
        }
    }
    if (!has_init) return bad(path, "loss_scale.init", "missing (a loss_scale gives at least its init)");
    if (!out->static_scale && out->min_scale > out->init_scale) /* a dynamic scale starts at or above its floor */
        return mp_error(MP_ERR_FORMAT, "%s: loss_scale.min: %g is larger than loss_scale.init %g", path,
                        (double)out->min_scale, (double)out->init_scale);
    return MP_OK;
}

/* The first byte of a string that cJSON would cut short, or n: a \u0000
 * escape, or a raw control character (which JSON forbids in strings and
 * cJSON takes, a NUL among them), ends the C string it gives, so that
 * "amp-bf16\u0000junk" read as "amp-bf16" and a key as its prefix. */
static size_t cut_string(const char *t, size_t n) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)t[i];
        if (!in_str) in_str = c == '"';
        else if (c < 0x20) return i;
        else if (c == '"') in_str = false;
        else if (c == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u' && n - i >= 6 && !memcmp(t + i + 2, "0000", 4)) return i;
            i++;
        }
    }
    return n;
}

mp_status mp_policy_file_read(const char *path, const mp_graph *g, mp_policy_file *out) {
    memset(out, 0, sizeof *out);
    FILE *f;
    MP_TRY(mp_input_fopen(path, &f, NULL)); /* a FIFO, device or directory: refused, naming it */
    char *text = malloc(1 << 20);
    const size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    const bool big = text && n == (1 << 20) - 1, failed = ferror(f);
    const int e = errno;
    fclose(f);
    if (!text) return mp_error(MP_ERR_NOMEM, "%s: out of memory", path);
    if (failed) {
        free(text);
        return mp_error(MP_ERR_IO, "%s: read failed: %s", path, strerror(e));
    }
    if (big) {
        free(text);
        return mp_error(MP_ERR_FORMAT, "%s: larger than 1 MiB: not a policy file", path);
    }
    text[n] = '\0';
    const size_t cut = cut_string(text, n);
    if (cut < n) {
        const bool esc = text[cut] == '\\';
        free(text);
        return mp_error(MP_ERR_FORMAT, "%s: %s at byte %zu: a key or value cannot hold it", path,
                        esc ? "a \\u0000 (NUL) escape" : "a control character in a string", cut);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    size_t where = end ? (size_t)(end - text) : 0;
    if (root) /* JSON whitespace only after the object: no second object, text or NUL byte */
        while (where < n && strchr(" \t\n\r", text[where]) && text[where]) where++;
    free(text);
    if (!root) return mp_error(MP_ERR_FORMAT, "%s: not JSON (parse error near byte %zu)", path, where);
    if (where < n) {
        cJSON_Delete(root);
        return mp_error(MP_ERR_FORMAT, "%s: unexpected data after the JSON object at byte %zu", path, where);
    }
    mp_status s = MP_OK;
    bool version = false;
    if (!cJSON_IsObject(root)) s = mp_error(MP_ERR_FORMAT, "%s: not a JSON object", path);
    for (const cJSON *it = s == MP_OK ? root->child : NULL; s == MP_OK && it; it = it->next) {
        char key[160];
        snprintf(key, sizeof key, "%s", it->string);
        if ((s = once(path, root, it, key)) != MP_OK) break;
        if (!strcmp(it->string, "mixprec_policy")) {
            version = true;
            if (!cJSON_IsNumber(it) || it->valuedouble != 1) s = bad(path, "mixprec_policy", "must be 1 (the version)");
        } else if (!strcmp(it->string, "precision")) {
            out->has_precision = true;
            if (!cJSON_IsString(it) || mp_precision_parse(it->valuestring, &out->precision) != MP_OK)
                s = mp_error(MP_ERR_FORMAT, "%s: precision: '%s' unknown (known: %s)", path,
                             cJSON_IsString(it) ? it->valuestring : "?", mp_precision_list());
        } else if (!strcmp(it->string, "overrides")) {
            s = read_overrides(path, it, g, out);
        } else if (!strcmp(it->string, "loss_scale")) {
            s = read_scale(path, it, out);
        } else if (strcmp(it->string, "doctor")) {
            s = bad(path, key, "unknown key (known: mixprec_policy, precision, overrides, loss_scale, doctor)");
        }
    }
    if (s == MP_OK && !version) s = bad(path, "mixprec_policy", "missing (a policy file starts with \"mixprec_policy\": 1)");
    cJSON_Delete(root);
    return s;
}
