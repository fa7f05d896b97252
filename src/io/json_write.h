/* json_write.h — every JSON mixprec writes (the --log and bench records,
 * eval/info --json, safetensors headers) is built as a cJSON tree with these
 * helpers and printed by cJSON, which escapes the strings.
 *
 * Numbers: cJSON stores doubles (integers exact up to 2^53) but prints them
 * with 15 significant digits ("%1.15g", 17 only when 15 do not read back as
 * nearly the same double), so an integer prints exactly, as plain digits,
 * only below 10^15: 10^15 itself prints as 1e+15, which an integer reader
 * (safetensors' offsets) rejects, and 2^53 - 1 loses its last digit.
 * mp_json_int therefore refuses magnitudes above MP_JSON_INT_MAX; byte
 * counts, shapes and offsets of anything mixprec writes stay far below it.
 * Real numbers are rounded as the records have always printed them ("%.6f"
 * and the like), so a float's binary noise ("0.35859000682830811") never
 * shows; a NaN or an infinity is null (JSON has neither).
 *
 * Each maker returns NULL when out of memory or out of range; mp_json_add
 * and mp_json_push take NULL (and then fail), so a record is one chain of
 * `&&` whose result goes to mp_json_print / mp_json_write_line. */
#ifndef MP_IO_JSON_WRITE_H
#define MP_IO_JSON_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "mixprec.h"

#define MP_JSON_INT_MAX INT64_C(999999999999999) /* 10^15 - 1: the largest integer cJSON prints exactly */

/* An integer; NULL when |v| > MP_JSON_INT_MAX or out of memory. */
cJSON *mp_json_int(int64_t v);

/* v rounded to `decimals` decimal places, as printf's "%.*f" (null when not finite). */
cJSON *mp_json_fixed(double v, int decimals);

/* v rounded to `digits` significant digits, as printf's "%.*g" (null when not finite). */
cJSON *mp_json_sig(double v, int digits);

/* A string (NULL counts as ""); cJSON escapes it when printed. */
cJSON *mp_json_str(const char *s);

/* Add `item` to object `o` under `key` / append it to array `a`. False when
 * o, a or item is NULL or memory runs out; item is then freed. */
bool mp_json_add(cJSON *o, const char *key, cJSON *item);
bool mp_json_push(cJSON *a, cJSON *item);

/* The tree as text (compact, or indented when `pretty`), freed with
 * cJSON_free; `root` is freed. NULL when !built (a maker or an add failed) or
 * out of memory. */
char *mp_json_print(cJSON *root, bool built, bool pretty);

/* mp_json_print(root, built, false) and a newline written to f: one JSONL
 * record. MP_ERR_NOMEM "<what>: out of memory writing JSON" when the record
 * could not be built; write errors stay in f for the caller's flush. */
mp_status mp_json_write_line(FILE *f, cJSON *root, bool built, const char *what);

#endif
