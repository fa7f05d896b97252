/* matrix.h — the benchmark matrix of `mixprec bench` (seed 000): models ×
 * precisions × batch sizes, each cell trained on one dataset for N epochs (or
 * N steps per epoch), with the seed's derived metrics per cell — time per
 * epoch, speed-up T_fp32 / T - 1 within one batch size, accuracy and its drop
 * against fp32, memory, images/s, cost — and the report writers. */
#ifndef MP_BENCH_MATRIX_H
#define MP_BENCH_MATRIX_H

#include <stdint.h>
#include <stdio.h>

#include "amp/policy.h"
#include "monitor/gpu_monitor.h"
#include "train/trainer.h"

typedef enum { MP_CELL_PENDING, MP_CELL_OK, MP_CELL_OOM, MP_CELL_ERROR } mp_cell_status;

typedef struct {
    const char *model;
    mp_precision precision;
    int batch;
    mp_cell_status status;
    char message[512];          /* why a cell failed */
    mp_train_result res;
    double cell_seconds;        /* wall time of the whole cell: build, train, evaluate */
    double time_per_epoch_s;    /* training time of one full epoch (projected with --steps) */
    bool projected;             /* time_per_epoch_s extrapolated from fewer steps */
    int64_t peak_rss_bytes;     /* process peak RSS during the cell (0 = unknown) */
    double speedup;             /* T_fp32 / T - 1 at this model and batch (NAN: no fp32) */
    double acc_drop;            /* fp32 test accuracy - this one, as seed 000 (NAN: no fp32) */
    double cost_per_million;    /* USD per million training samples (NAN: no price) */
    mp_monitor_summary gpu;     /* the GPU monitor over the cell (gpu.gpu false: no GPU readings) */
} mp_bench_cell;

typedef struct {
    const char *const *models;
    int n_models;
    const mp_precision *precisions;
    int n_precisions;
    const int *batches;
    int n_batches;
    int epochs;                 /* per cell, >= 1 */
    int steps;                  /* steps per epoch, 0 = whole epochs */
    const char *data_name;      /* for records */
    float lr;
    mp_optim_opts optim;
    const char *lr_schedule;    /* NULL = cosine, as `mixprec train` */
    uint64_t seed;
    bool augment, normalize, use_onednn;
    mp_device device;           /* where every cell trains */
    double price_per_hour;      /* USD; 0 = no cost */
    FILE *progress;             /* a line per cell as it starts and ends (NULL = silent) */
    FILE *train_out;            /* the trainer's own progress (NULL = none) */
    FILE *jsonl;                /* a record per cell as it ends (NULL = none) */
    mp_monitor *monitor;        /* GPU monitor marked around every cell (NULL = none) */
} mp_bench_opts;

typedef struct {
    const mp_bench_opts *o;
    mp_bench_cell *cells;       /* n_models × n_precisions × n_batches, see mp_bench_cell_at */
    int n;
    int train_samples, test_samples;
} mp_bench_matrix;

mp_bench_cell *mp_bench_cell_at(const mp_bench_matrix *m, int model, int precision, int batch);

/* Run every cell (within a model and batch size, fp32 first so that each
 * record carries its speed-up). A failing cell is recorded (MP_CELL_OOM for
 * MP_ERR_NOMEM, MP_CELL_ERROR otherwise) and the matrix goes on; the status
 * is not OK only when the matrix itself cannot be set up. */
mp_status mp_bench_run(const mp_bench_opts *o, const mp_dataset *train, const mp_dataset *test, mp_bench_matrix *m);
void mp_bench_matrix_free(mp_bench_matrix *m);

const char *mp_cell_status_name(mp_cell_status s); /* "ok", "OOM", "error" */

/* report_jsonl.c: one JSON object per line, every field, null where unknown. */
void mp_bench_write_record(FILE *f, const mp_bench_matrix *m, const mp_bench_cell *c);

/* report_markdown.c: one table per model and metric, precisions as rows and
 * batch sizes as columns, laid out like seed 000. */
mp_status mp_bench_write_markdown(const char *path, const mp_bench_matrix *m);

/* report_plot.c: per model, time per epoch, speed-up and accuracy against
 * batch size (a line per precision) as SVG and PNG, drawn by gnuplot from
 * <dir>/plots.gp and <dir>/plotdata/. Returns MP_ERR_UNSUPPORTED (script and
 * data still written) when gnuplot is not on PATH; *n_images counts the
 * images written. */
mp_status mp_bench_write_plots(const char *dir, const mp_bench_matrix *m, int *n_images);

#endif
