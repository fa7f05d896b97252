/* gpu_monitor.h — a sampler thread that reads a GPU every interval seconds
 * (SM and memory clock, load, memory used, power, temperature, fan: what
 * seed 000's ELSA GPU Monitor logged every 5 s), writes CSV rows and keeps
 * running integrals, so a run can report mean load, mean power and energy
 * per epoch; it always reports wall time and the process's peak RSS.
 *
 * The readings come from a source (function pointers): NVML in real runs
 * (nvml_source.c), a fake one in tests.
 *
 * Means and energy over a window are time-weighted, by the trapezoid rule
 * between consecutive samples (segments with a missing reading at either end
 * are skipped): energy = sum (p_i + p_{i+1}) / 2 * (t_{i+1} - t_i), mean power =
 * energy / covered time. When the source has a cumulative energy counter
 * (NVML's total energy consumption, Volta and later), it is read at both
 * ends of the window, it moved and the window lasts 1 s or more (the
 * counter advances in steps), the window's energy is the counter's
 * difference instead. mp_monitor_mark() and mp_monitor_stop() take a sample themselves,
 * so windows start and end exactly at the marks. A window with one sample has
 * that sample's values as means and no energy. */
#ifndef MP_MONITOR_GPU_MONITOR_H
#define MP_MONITOR_GPU_MONITOR_H

#include <stdbool.h>
#include <stdio.h>

#include "mixprec.h"

/* One reading; NAN marks a value the device does not report (an empty CSV
 * field). energy_j is a cumulative counter (any origin), NAN without one. */
typedef struct {
    double sm_clock_mhz, mem_clock_mhz, gpu_load_pct, mem_used_mib, power_w, temp_c, fan_pct;
    double energy_j;
} mp_gpu_sample;

typedef struct {
    void *ctx;
    const char *name; /* "NVIDIA H200 (GPU 0)", for messages */
    /* Fill *s (every field; NAN where unknown). False: this reading failed
     * and is skipped. Called from the sampler thread and from mark/stop,
     * never concurrently. */
    bool (*read)(void *ctx, mp_gpu_sample *s);
    void (*close)(void *ctx); /* may be NULL; called once by mp_monitor_stop */
} mp_monitor_source;

/* Seconds on a monotonic clock (tests pass a fake one). */
typedef double (*mp_monitor_clock_fn)(void *ctx);

typedef struct {
    double interval_s;        /* between samples; 0: no sampler thread, only mark/stop/sample_now sample */
    FILE *csv;                /* header + one row per sample; NULL = none. The caller opens and closes it
                               * (after stop); with the GPU off it gets the header only */
    const char *csv_name;     /* its path, named by the errors writing it (NULL: unnamed); kept until stop */
    bool no_gpu;              /* open no source: wall time and peak RSS only (e.g. interval 0 in the CLI) */
    const mp_monitor_source *source; /* NULL: NVML, device `device`; the monitor owns it (even on failure) */
    int device;
    mp_monitor_clock_fn clock; /* NULL: CLOCK_MONOTONIC */
    void *clock_ctx;
} mp_monitor_opts;

typedef struct mp_monitor mp_monitor;

typedef struct {
    bool gpu;                 /* GPU readings exist in this window */
    double wall_s;            /* length of the window */
    int samples;              /* GPU samples in the window, both ends included */
    double mean_load_pct, mean_power_w, energy_j; /* NAN when not measured */
    bool energy_from_counter; /* energy_j is the device counter's difference, not the trapezoid */
    double peak_mem_used_mib; /* highest device memory used seen in the window (NAN without GPU) */
    double peak_rss_mib;      /* the process's peak resident set so far (getrusage) */
} mp_monitor_summary;

/* Starts the monitor (and its sampler thread when interval_s > 0); the first
 * sample is taken before returning. Returns
 *   MP_OK                the GPU is sampled (or o->no_gpu was asked for);
 *   MP_ERR_UNSUPPORTED   the GPU cannot be sampled, e.g. "NVML not found:
 *                        libnvidia-ml.so.1: cannot open shared object file: ..."
 *                        (mp_last_error()); *out is still a working monitor
 *                        of wall time and peak RSS;
 *   other errors         nothing started, *out is NULL (bad options, no memory,
 *                        the CSV header cannot be written). */
mp_status mp_monitor_start(const mp_monitor_opts *o, mp_monitor **out);

/* True when the monitor reads a GPU. */
bool mp_monitor_has_gpu(const mp_monitor *m);
/* The source's name ("NVIDIA H200 (GPU 0)"), or "" without GPU. */
const char *mp_monitor_source_name(const mp_monitor *m);

/* Takes a sample now (the thread keeps its own schedule). */
void mp_monitor_sample_now(mp_monitor *m);

/* Summary of the window since the previous mark (or the start); takes a
 * sample first, and starts the next window. E.g. call after each epoch for
 * energy per epoch. */
mp_monitor_summary mp_monitor_mark(mp_monitor *m);

/* Takes a last sample, stops the thread, closes the source, fills *total
 * (may be NULL) with the whole run's summary and frees m. MP_ERR_IO when a
 * CSV row could not be written (mp_last_error() says so). NULL m is a no-op. */
mp_status mp_monitor_stop(mp_monitor *m, mp_monitor_summary *total);

/* The NVML source for GPU `device` (dlopen "libnvidia-ml.so.1").
 * MP_ERR_UNSUPPORTED with "NVML not found: <loader message>", "NVML: init
 * failed: ..." or "NVML: no GPU <i> (<n> devices)". */
mp_status mp_monitor_source_nvml(int device, mp_monitor_source *out);

/* ---- for the CLI's train and bench (monitor_report.c) ---- */

/* Starts the monitor of a run (interval_s 0: GPU off, time and peak RSS
 * only) and prints one line to out (NULL: silent): "GPU monitor: NVIDIA
 * H200 (GPU 0), every 5 s, CSV run.csv" or "GPU monitor: off (NVML not
 * found: ...)". Only hard errors (CSV not writable, no memory) return an
 * error, with *m NULL. */
mp_status mp_monitor_begin_run(double interval_s, FILE *csv, const char *csv_name, FILE *out, mp_monitor **m);

/* Stops m and prints the run's summary to out (NULL: silent): "monitor:
 * wall time 12.3 s, peak RSS 345.6 MiB" and, with a GPU, "monitor: GPU mean load
 * 87.2%, mean power 312.4 W, energy 3.85 kJ (1.28 kJ per epoch), peak
 * memory used 12345 MiB, 4 samples" (per epoch when epochs > 0). NULL m,
 * a run refused before its monitor began: prints nothing, MP_OK. */
mp_status mp_monitor_end_run(mp_monitor *m, FILE *out, int epochs);

/* The CSV header line (no newline). */
#define MP_MONITOR_CSV_HEADER \
    "timestamp,elapsed_s,sm_clock_mhz,mem_clock_mhz,gpu_load_pct,mem_used_mib,power_w,temp_c,fan_pct"

#endif
