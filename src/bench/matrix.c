/* matrix.c — runs the cells of a benchmark matrix (see matrix.h) and derives
 * the seed-000 metrics of each from its fp32 neighbour. */
#include "bench/matrix.h"

#include "data/dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/error.h"
#include "train/progress.h"

const char *mp_cell_status_name(mp_cell_status s) {
    switch (s) {
    case MP_CELL_OK: return "ok";
    case MP_CELL_OOM: return "OOM";
    case MP_CELL_ERROR: return "error";
    default: return "pending";
    }
}

mp_bench_cell *mp_bench_cell_at(const mp_bench_matrix *m, int model, int gpus, int precision, int batch) {
    const mp_bench_opts *o = m->o;
    size_t i = ((size_t)model * (size_t)o->n_gpus + (size_t)gpus) * (size_t)o->n_precisions + (size_t)precision;
    return &m->cells[i * (size_t)o->n_batches + (size_t)batch];
}

int mp_bench_one_gpu_index(const mp_bench_opts *o) {
    for (int g = 0; g < o->n_gpus; g++)
        if (o->gpus[g] == 1) return g;
    return -1;
}

/* Peak RSS per cell: Linux resets the high-water mark when "5" is written to
 * /proc/self/clear_refs; elsewhere the process-wide peak is reported. */
static void reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f);
    fclose(f);
}

static int64_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
    if (f) fclose(f);
    if (kib < 0) {
        struct rusage ru;
        kib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
    }
    return (int64_t)kib * 1024;
}

static mp_status train_cell(const mp_bench_opts *o, const mp_dataset *train, const mp_dataset *test, mp_bench_cell *c) {
    mp_model model = {0};
    /* rank 0's model, and for a cell of several GPUs the other ranks' replicas */
    mp_model_spec spec = {.model = c->model, .data = train, .policy = {.precision = c->precision}};
    mp_status s = mp_model_spec_build(&spec, &model);
    mp_fit_opts t = {.model_name = c->model, .data_name = o->data_name,
                     .trainer = {.batch = c->batch, .device = o->device, .reference = o->reference},
                     .epochs = o->epochs, .lr = o->lr, .optim = o->optim,
                     .lr_schedule = o->lr_schedule ? o->lr_schedule : "cosine", .seed = o->seed, .init = o->init,
                     .augment = o->augment, .normalize = o->normalize,
                     .random_resized_crop = o->random_resized_crop, .data_workers = o->data_workers, .max_steps = o->steps, .out = o->train_out,
                     .gpus = c->gpus > 1 ? c->gpus : 0, .replica = mp_model_spec_build, .replica_arg = &spec};
    if (s == MP_OK) s = mp_fit(&model, train, test, &t, &c->res);
    mp_model_free(&model);
    return s;
}

void mp_bench_derive(const mp_bench_matrix *m, int model, int gpus, int precision, int batch) {
    const mp_bench_opts *o = m->o;
    mp_bench_cell *c = mp_bench_cell_at(m, model, gpus, precision, batch);
    int full_steps = m->train_samples / (c->batch * c->gpus); /* a whole epoch at the global batch */
    c->speedup = c->acc_drop = c->cost_per_million = c->vs_1gpu = NAN;
    if (c->status != MP_CELL_OK) return;
    double ips = c->res.images_per_s;
    c->time_per_epoch_s = ips > 0 ? (double)full_steps * c->batch * c->gpus / ips : NAN;
    c->projected = o->steps > 0 && o->steps < full_steps;
    if (o->price_per_hour > 0 && ips > 0) c->cost_per_million = o->price_per_hour / 3600.0 / ips * 1e6;
    for (int p = 0; p < o->n_precisions; p++) {
        const mp_bench_cell *ref = mp_bench_cell_at(m, model, gpus, p, batch);
        if (o->precisions[p] != MP_PRECISION_FP32 || ref->status != MP_CELL_OK) continue;
        c->speedup = ref->time_per_epoch_s / c->time_per_epoch_s - 1.0;
        c->acc_drop = ref->res.test_acc - c->res.test_acc;
    }
    int one = mp_bench_one_gpu_index(o);
    const mp_bench_cell *ref = one >= 0 ? mp_bench_cell_at(m, model, one, precision, batch) : NULL;
    if (ref && ref->status == MP_CELL_OK && ref->res.images_per_s > 0) c->vs_1gpu = ips / ref->res.images_per_s;
}

/* "cnn10 fp32 batch 128", with " on 2 GPUs" where the matrix has several GPU
 * counts or this one is more than 1. */
static void cell_label(char *buf, size_t n, const mp_bench_opts *o, const mp_bench_cell *c) {
    int len = snprintf(buf, n, "%s %s batch %d", c->model, mp_precision_name(c->precision), c->batch);
    if ((o->n_gpus > 1 || c->gpus > 1) && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " on %d GPU%s", c->gpus, c->gpus == 1 ? "" : "s");
}

static void report_cell(FILE *f, const mp_bench_opts *o, int i, int n, const mp_bench_cell *c) {
    if (!f) return;
    char label[256];
    cell_label(label, sizeof label, o, c);
    fprintf(f, "[%d/%d] %s: ", i, n, label);
    if (c->status != MP_CELL_OK) {
        fprintf(f, "%s: %s (%.1fs)\n", mp_cell_status_name(c->status), c->message, c->cell_seconds);
    } else {
        fprintf(f, "%.2f s/epoch%s, %.0f img/s, test acc %.2f%%", c->time_per_epoch_s,
                c->projected ? " (projected)" : "", c->res.images_per_s, 100 * c->res.test_acc);
        if (!isnan(c->speedup)) fprintf(f, ", speed-up %+.1f%%", 100 * c->speedup);
        if (c->gpus > 1 && !isnan(c->vs_1gpu)) fprintf(f, ", %.2fx the images/s of 1 GPU", c->vs_1gpu);
        fprintf(f, ", arena %.1f MiB, peak RSS %.0f MiB (%.1fs)\n", (double)c->res.arena_bytes / (1 << 20),
                (double)c->peak_rss_bytes / (1 << 20), c->cell_seconds);
    }
    fflush(f);
}

/* Indices 0..n-1 with `first` (if >= 0) moved to the front. */
static void first_then_rest(int n, int first, int *order) {
    int k = 0;
    if (first >= 0) order[k++] = first;
    for (int i = 0; i < n; i++)
        if (i != first) order[k++] = i;
}

static int fp32_index(const mp_bench_opts *o) {
    for (int p = 0; p < o->n_precisions; p++)
        if (o->precisions[p] == MP_PRECISION_FP32) return p;
    return -1;
}

/* Train one cell, derive its metrics, report it and write its record (a
 * record that cannot be written stops the matrix). */
static mp_status run_cell(mp_bench_matrix *m, const mp_dataset *train, const mp_dataset *test, int mi, int gi,
                          int pi, int bi, int done) {
    const mp_bench_opts *o = m->o;
    mp_bench_cell *c = mp_bench_cell_at(m, mi, gi, pi, bi);
    *c = (mp_bench_cell){.model = o->models[mi], .precision = o->precisions[pi], .batch = o->batches[bi],
                         .gpus = o->gpus[gi]};
    if (o->progress) {
        char label[256];
        cell_label(label, sizeof label, o, c);
        fprintf(o->progress, "[%d/%d] %s: start\n", done + 1, m->n, label);
        fflush(o->progress);
    }
    reset_peak_rss();
    if (o->monitor) mp_monitor_mark(o->monitor); /* the cell's window starts here */
    double t0 = mp_now_seconds();
    mp_clear_error();
    mp_status s = train_cell(o, train, test, c);
    c->cell_seconds = mp_now_seconds() - t0;
    c->peak_rss_bytes = peak_rss_bytes();
    if (o->monitor) c->gpu = mp_monitor_mark(o->monitor);
    c->status = s == MP_OK ? MP_CELL_OK : s == MP_ERR_NOMEM ? MP_CELL_OOM : MP_CELL_ERROR;
    if (s != MP_OK) snprintf(c->message, sizeof c->message, "%s", mp_last_error());
    mp_bench_derive(m, mi, gi, pi, bi);
    report_cell(o->progress, o, done + 1, m->n, c);
    return o->cell_done ? o->cell_done(o->cell_done_arg, m, c) : MP_OK;
}

mp_status mp_bench_run(const mp_bench_opts *o, const mp_dataset *train, const mp_dataset *test, mp_bench_matrix *m) {
    memset(m, 0, sizeof *m);
    if (o->n_gpus < 1) return mp_error(MP_ERR_INVALID_ARG, "bench: no GPU count (1 for a single device)");
    for (int g = 0; g < o->n_gpus; g++)
        if (o->gpus[g] < 1) return mp_error(MP_ERR_INVALID_ARG, "bench: GPU count %d must be at least 1", o->gpus[g]);
    m->o = o;
    m->n = o->n_models * o->n_gpus * o->n_precisions * o->n_batches;
    m->train_samples = train->n;
    m->test_samples = test ? test->n : 0;
    m->cells = calloc((size_t)m->n, sizeof *m->cells);
    int *p_order = malloc((size_t)o->n_precisions * sizeof *p_order);
    int *g_order = malloc((size_t)o->n_gpus * sizeof *g_order);
    mp_status s = MP_OK;
    if (!m->cells || !p_order || !g_order) s = mp_error(MP_ERR_NOMEM, "bench: out of memory for %d cells", m->n);
    if (s == MP_OK) {
        first_then_rest(o->n_precisions, fp32_index(o), p_order);
        first_then_rest(o->n_gpus, mp_bench_one_gpu_index(o), g_order);
        int done = 0;
        for (int mi = 0; mi < o->n_models; mi++)
            for (int g = 0; g < o->n_gpus; g++)
                for (int bi = 0; bi < o->n_batches; bi++)
                    for (int k = 0; s == MP_OK && k < o->n_precisions; k++)
                        s = run_cell(m, train, test, mi, g_order[g], p_order[k], bi, done++);
    }
    free(p_order);
    free(g_order);
    return s;
}

void mp_bench_matrix_free(mp_bench_matrix *m) {
    free(m->cells);
    memset(m, 0, sizeof *m);
}
