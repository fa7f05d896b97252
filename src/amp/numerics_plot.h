/* numerics_plot.h — `mixprec numerics plot`: a numerics log (numerics_log.h,
 * `train --numerics-log`) drawn as per-layer range bands over training: for
 * each tensor its largest and smallest non-zero magnitude per logged step
 * (log2 axis), one panel per kind (activations, activation gradients,
 * parameter gradients; gradients as logged, i.e. times the loss scale, as
 * fp16 sees them), against fp16's limits (65504, 2^-14, 2^-24) and bf16's
 * where the axis reaches them. The `highlight` layers of each panel closest
 * to an fp16 limit are drawn in colour and named, the others grey. Reads the
 * JSONL with cJSON; a bad line is one error naming the file, the line and
 * the key. */
#ifndef MP_AMP_NUMERICS_PLOT_H
#define MP_AMP_NUMERICS_PLOT_H

#include "mixprec.h"

typedef struct {
    int records;          /* log lines read */
    int tensors;          /* distinct tensors drawn */
    char svg[4096], png[4096]; /* the images (empty when gnuplot is missing) */
} mp_numerics_plot_result;

/* Plot `log` into dir (created by the caller) as STEM.svg and STEM.png, STEM
 * the log's file name without ".jsonl"; the gnuplot script STEM.gp and its
 * data STEM_*.dat stay there. Without gnuplot on PATH: MP_ERR_UNSUPPORTED
 * (script and data written). */
mp_status mp_numerics_plot(const char *log, const char *dir, int highlight, mp_numerics_plot_result *r);

#endif
