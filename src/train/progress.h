/* progress.h — Keras-style progress output: "step n/N [====>...] elapsed,
 * ms/step, running loss and accuracy", redrawn in place on a terminal and
 * printed every ~10% of the epoch otherwise (logs, CI). */
#ifndef MP_TRAIN_PROGRESS_H
#define MP_TRAIN_PROGRESS_H

#include "core/clock.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct {
    FILE *out;
    bool tty;
    int total;          /* steps in the epoch */
    double start;       /* seconds */
    double last_draw;
    int last_printed;
} mp_progress;

void mp_progress_begin(mp_progress *p, FILE *out, int epoch, int epochs, int total);
void mp_progress_update(mp_progress *p, int step, double loss, double acc);
/* Finish the bar line (terminal) before the epoch summary. */
void mp_progress_end(mp_progress *p);

#endif
