/* matrix.h — the benchmark matrix of `mixprec bench` (seed 000): models ×
 * precisions × batch sizes × GPU counts, each cell trained on one dataset for
 * N epochs (or N steps per epoch), with the seed's derived metrics per cell —
 * time per epoch, speed-up T_fp32 / T - 1 within one batch size and GPU
 * count, accuracy and its drop against fp32, memory, images/s and their ratio
 * to 1 GPU, cost — and the report writers. */
#ifndef MP_BENCH_MATRIX_H
#define MP_BENCH_MATRIX_H

#include <stdint.h>
#include <stdio.h>

#include "monitor/gpu_monitor.h"
#include "train/fit.h"

typedef enum { MP_CELL_PENDING, MP_CELL_OK, MP_CELL_OOM, MP_CELL_ERROR } mp_cell_status;

typedef struct {
    const char *model;
    mp_precision precision;
    int batch;                  /* per GPU; a cell of N GPUs trains on global batches of N x batch */
    int gpus;                   /* data-parallel ranks, one GPU each (1: a single device, maybe the CPU) */
    mp_cell_status status;
    char message[512];          /* why a cell failed */
    mp_fit_result res;
    double cell_seconds;        /* wall time of the whole cell: build, train, evaluate */
    double time_per_epoch_s;    /* training time of one full epoch (projected with --steps) */
    bool projected;             /* time_per_epoch_s extrapolated from fewer steps */
    int64_t peak_rss_bytes;     /* process peak RSS during the cell (0 = unknown) */
    double speedup;             /* T_fp32 / T - 1 at this model, batch and GPU count (NAN: no fp32) */
    double vs_1gpu;             /* images/s over the 1-GPU cell's at this model, precision and batch
                                   (NAN: no such cell, or it failed) */
    double acc_drop;            /* fp32 test accuracy - this one, as seed 000 (NAN: no fp32) */
    double cost_per_million;    /* USD per million training samples (NAN: no price) */
    mp_monitor_summary gpu;     /* the GPU monitor over the cell (gpu.gpu false: no GPU readings) */
} mp_bench_cell;

struct mp_bench_matrix;

typedef struct {
    const char *const *models;
    int n_models;
    const mp_precision *precisions;
    int n_precisions;
    const int *batches;
    int n_batches;
    const int *gpus;            /* GPU counts, each >= 1; a count > 1 trains data parallel on GPUs
                                   0..N-1 (needs device CUDA) */
    int n_gpus;                 /* >= 1 */
    int epochs;                 /* per cell, >= 1 */
    int steps;                  /* steps per epoch, 0 = whole epochs */
    const char *data_name;      /* for records */
    float lr;
    mp_optim_opts optim;
    const char *lr_schedule;    /* NULL = cosine, as `mixprec train` */
    uint64_t seed;
    mp_init_scheme init;        /* how the weights start (zero: He normal) */
    bool augment, normalize, reference;
    bool random_resized_crop; /* torchvision's, before augment's crop and flip */
    int data_workers;         /* decoder threads of the loader, 0: its default */
    mp_device device;           /* where every cell trains */
    double price_per_hour;      /* USD; 0 = no cost */
    FILE *progress;             /* a line per cell as it starts and ends (NULL = silent) */
    FILE *train_out;            /* the trainer's own progress (NULL = none) */
    /* called as each cell ends, e.g. to stream its record (mp_bench_write_record); an error stops the matrix
       (NULL = none) */
    mp_status (*cell_done)(void *arg, const struct mp_bench_matrix *m, const mp_bench_cell *c);
    void *cell_done_arg;
    mp_monitor *monitor;        /* GPU monitor marked around every cell (NULL = none) */
} mp_bench_opts;

typedef struct mp_bench_matrix {
    const mp_bench_opts *o;
    mp_bench_cell *cells;       /* n_models × n_gpus × n_precisions × n_batches, see mp_bench_cell_at */
    int n;
    int train_samples, test_samples;
} mp_bench_matrix;

/* The cell of indices into o->models, o->gpus, o->precisions, o->batches. */
mp_bench_cell *mp_bench_cell_at(const mp_bench_matrix *m, int model, int gpus, int precision, int batch);
/* The index of the GPU count 1 in o->gpus, -1 when absent. */
int mp_bench_one_gpu_index(const mp_bench_opts *o);

/* Run every cell (1 GPU before the other counts and, within a model, batch
 * size and GPU count, fp32 first, so that each record carries its ratios).
 * A failing cell is recorded (MP_CELL_OOM for MP_ERR_NOMEM, MP_CELL_ERROR
 * otherwise) and the matrix goes on; the status is not OK only when the
 * matrix itself cannot be set up. */
mp_status mp_bench_run(const mp_bench_opts *o, const mp_dataset *train, const mp_dataset *test, mp_bench_matrix *m);
void mp_bench_matrix_free(mp_bench_matrix *m);

/* Time per epoch, speed-up vs fp32, accuracy drop, ratio to 1 GPU and cost
 * of a finished cell from its result and its fp32 and 1-GPU neighbours
 * (mp_bench_run calls it as each cell ends). */
void mp_bench_derive(const mp_bench_matrix *m, int model, int gpus, int precision, int batch);

const char *mp_cell_status_name(mp_cell_status s); /* "ok", "OOM", "error" */

/* report_jsonl.c: one JSON object per line, every field, null where unknown;
 * MP_ERR_NOMEM when the record cannot be built (write errors stay in f). */
mp_status mp_bench_write_record(FILE *f, const mp_bench_matrix *m, const mp_bench_cell *c);

/* report_markdown.c: one table per model, metric and GPU count, precisions
 * as rows and batch sizes as columns, laid out like seed 000; and per model,
 * when the GPU counts include 1 and more, the images/s ratio to 1 GPU. */
mp_status mp_bench_write_markdown(const char *path, const mp_bench_matrix *m);

/* report_plot.c: per model, time per epoch, speed-up and accuracy against
 * batch size (a line per precision; the cells of 1 GPU, else of the first
 * GPU count) as SVG and PNG, drawn by gnuplot from
 * <dir>/plots.gp and <dir>/plotdata/. Returns MP_ERR_UNSUPPORTED (script and
 * data still written) when gnuplot is not on PATH; *n_images counts the
 * images written. */
mp_status mp_bench_write_plots(const char *dir, const mp_bench_matrix *m, int *n_images);

#endif
