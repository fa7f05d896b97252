/* cell_matrix.h — the loop the GPU benchmarks share: every model x batch
 * size x precision cell of three comma-separated lists, in that order, handed
 * to a callback that measures the cell and prints its table row. */
#ifndef MP_BENCH_GPU_CELL_MATRIX_H
#define MP_BENCH_GPU_CELL_MATRIX_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"

/* Returns 0 when the cell ran, non-zero when it failed (its row says so). */
typedef int (*bench_cell_fn)(void *arg, const char *model, const char *batch, mp_precision prec, const char *prec_name);

/* The number of failed cells, or -1 after an unknown precision name (one
 * line on stderr, prefixed with `tool`). */
static int bench_for_each_cell(const char *tool, const char *models, const char *batches, const char *precisions,
                               bench_cell_fn fn, void *arg) {
    int failures = 0;
    char mlist[256];
    snprintf(mlist, sizeof mlist, "%s", models);
    for (char *ms = NULL, *model = strtok_r(mlist, ",", &ms); model; model = strtok_r(NULL, ",", &ms)) {
        char blist[256];
        snprintf(blist, sizeof blist, "%s", batches);
        for (char *bs = NULL, *b = strtok_r(blist, ",", &bs); b; b = strtok_r(NULL, ",", &bs)) {
            char plist[256];
            snprintf(plist, sizeof plist, "%s", precisions);
            for (char *ps = NULL, *pn = strtok_r(plist, ",", &ps); pn; pn = strtok_r(NULL, ",", &ps)) {
                mp_precision prec;
                if (mp_precision_parse(pn, &prec) != MP_OK) {
                    fprintf(stderr, "%s: %s\n", tool, mp_last_error());
                    return -1;
                }
                failures += fn(arg, model, b, prec, pn) != 0;
                fflush(stdout);
            }
        }
    }
    return failures;
}

#endif
