/* numerics_log.h — numerics statistics as JSON: one JSONL line per collected
 * step (`mixprec train --numerics-log`), each tensor an object with its
 * statistics and its trimmed octave histogram. Written with cJSON. */
#ifndef MP_AMP_NUMERICS_LOG_H
#define MP_AMP_NUMERICS_LOG_H

#include <stdio.h>

#include "mixprec.h"

/* One line {"step":..,"loss_scale":..,"tensors":[...]} to f; write errors
 * are reported naming `option` and `path`. */
mp_status mp_numerics_log_write(FILE *f, const char *path, const char *option, int64_t step, float loss_scale,
                                const mp_numerics_record *rec, int n);

/* "output", "grad", "param", "param_grad". */
const char *mp_numerics_kind_name(mp_numerics_kind k);

#endif
