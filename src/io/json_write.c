/* json_write.c — see json_write.h. */
#include "io/json_write.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

cJSON *mp_json_int(int64_t v) {
    if (v > MP_JSON_INT_MAX || v < -MP_JSON_INT_MAX) return NULL;
    return cJSON_CreateNumber((double)v);
}

/* The double that the text printf makes of v reads back as: cJSON then
 * prints that text (at most 15 significant digits) and not v's noise. */
static cJSON *rounded(double v, const char *fmt, int places) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[400]; /* "%.6f" of 1e308 is 316 characters */
    snprintf(buf, sizeof buf, fmt, places, v);
    return cJSON_CreateNumber(strtod(buf, NULL));
}

cJSON *mp_json_fixed(double v, int decimals) { return rounded(v, "%.*f", decimals); }

cJSON *mp_json_sig(double v, int digits) { return rounded(v, "%.*g", digits); }

cJSON *mp_json_str(const char *s) { return cJSON_CreateString(s ? s : ""); }

bool mp_json_add(cJSON *o, const char *key, cJSON *item) {
    if (o && item && cJSON_AddItemToObject(o, key, item)) return true;
    cJSON_Delete(item);
    return false;
}

bool mp_json_push(cJSON *a, cJSON *item) {
    if (a && item && cJSON_AddItemToArray(a, item)) return true;
    cJSON_Delete(item);
    return false;
}

char *mp_json_print(cJSON *root, bool built, bool pretty) {
    char *text = built && root ? (pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root)) : NULL;
    cJSON_Delete(root);
    return text;
}

mp_status mp_json_write_line(FILE *f, cJSON *root, bool built, const char *what) {
    char *text = mp_json_print(root, built, false);
    if (!text) return mp_error(MP_ERR_NOMEM, "%s: out of memory writing JSON", what);
    fputs(text, f);
    fputc('\n', f);
    cJSON_free(text);
    return MP_OK;
}
