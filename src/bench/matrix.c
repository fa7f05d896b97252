/* matrix.c — runs the cells of a benchmark matrix (see matrix.h) and derives
 * the seed-000 metrics of each from its fp32 neighbour. */
#include "bench/matrix.h"

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

mp_bench_cell *mp_bench_cell_at(const mp_bench_matrix *m, int model, int precision, int batch) {
    const mp_bench_opts *o = m->o;
    return &m->cells[((size_t)model * (size_t)o->n_precisions + (size_t)precision) * (size_t)o->n_batches +
                     (size_t)batch];
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
    mp_status s = mp_model_build(c->model, train->c, train->h, train->w, train->classes, &model);
    if (s == MP_OK) s = mp_graph_apply_policy(model.g, (mp_policy_opts){.precision = c->precision});
    bool fp16_scaled = c->precision == MP_PRECISION_AMP_FP16 || c->precision == MP_PRECISION_O2_FP16;
    mp_train_opts t = {.model_name = c->model, .data_name = o->data_name, .precision = mp_precision_name(c->precision),
                       .epochs = o->epochs, .batch = c->batch, .lr = o->lr, .optim = o->optim,
                       .lr_schedule = o->lr_schedule ? o->lr_schedule : "cosine", .seed = o->seed,
                       .augment = o->augment, .normalize = o->normalize, .max_steps = o->steps,
                       .use_onednn = o->use_onednn, .device = o->device, .out = o->train_out,
                       .loss_scaling = fp16_scaled,
                       .scaler = {.dynamic = true}};
    if (s == MP_OK) s = mp_train_run(&model, train, test, &t, &c->res);
    mp_model_free(&model);
    return s;
}

/* Time per epoch, speed-up, accuracy drop and cost of every finished cell. */
static void derive(const mp_bench_matrix *m, mp_bench_cell *c, int model, int batch, int full_steps) {
    const mp_bench_opts *o = m->o;
    c->speedup = c->acc_drop = c->cost_per_million = NAN;
    if (c->status != MP_CELL_OK) return;
    double ips = c->res.images_per_s;
    c->time_per_epoch_s = ips > 0 ? (double)full_steps * c->batch / ips : NAN;
    c->projected = o->steps > 0 && o->steps < full_steps;
    if (o->price_per_hour > 0 && ips > 0) c->cost_per_million = o->price_per_hour / 3600.0 / ips * 1e6;
    for (int p = 0; p < o->n_precisions; p++) {
        const mp_bench_cell *ref = mp_bench_cell_at(m, model, p, batch);
        if (o->precisions[p] != MP_PRECISION_FP32 || ref->status != MP_CELL_OK) continue;
        c->speedup = ref->time_per_epoch_s / c->time_per_epoch_s - 1.0;
        c->acc_drop = ref->res.test_acc - c->res.test_acc;
    }
}

static void report_cell(FILE *f, int i, int n, const mp_bench_cell *c) {
    if (!f) return;
    fprintf(f, "[%d/%d] %s %s batch %d: ", i, n, c->model, mp_precision_name(c->precision), c->batch);
    if (c->status != MP_CELL_OK) {
        fprintf(f, "%s: %s (%.1fs)\n", mp_cell_status_name(c->status), c->message, c->cell_seconds);
    } else {
        fprintf(f, "%.2f s/epoch%s, %.0f img/s, test acc %.2f%%", c->time_per_epoch_s,
                c->projected ? " (projected)" : "", c->res.images_per_s, 100 * c->res.test_acc);
        if (!isnan(c->speedup)) fprintf(f, ", speed-up %+.1f%%", 100 * c->speedup);
        fprintf(f, ", arena %.1f MiB, peak RSS %.0f MiB (%.1fs)\n", (double)c->res.arena_bytes / (1 << 20),
                (double)c->peak_rss_bytes / (1 << 20), c->cell_seconds);
    }
    fflush(f);
}

/* Cells of one model and batch size in run order: fp32 first. */
static int run_order(const mp_bench_opts *o, int *order) {
    int n = 0;
    for (int p = 0; p < o->n_precisions; p++)
        if (o->precisions[p] == MP_PRECISION_FP32) order[n++] = p;
    for (int p = 0; p < o->n_precisions; p++)
        if (o->precisions[p] != MP_PRECISION_FP32) order[n++] = p;
    return n;
}

mp_status mp_bench_run(const mp_bench_opts *o, const mp_dataset *train, const mp_dataset *test, mp_bench_matrix *m) {
    memset(m, 0, sizeof *m);
    m->o = o;
    m->n = o->n_models * o->n_precisions * o->n_batches;
    m->train_samples = train->n;
    m->test_samples = test ? test->n : 0;
    m->cells = calloc((size_t)m->n, sizeof *m->cells);
    int *order = malloc((size_t)o->n_precisions * sizeof *order);
    if (!m->cells || !order) {
        free(order);
        return mp_error(MP_ERR_NOMEM, "bench: out of memory for %d cells", m->n);
    }
    run_order(o, order);
    int done = 0;
    for (int mi = 0; mi < o->n_models; mi++)
        for (int bi = 0; bi < o->n_batches; bi++)
            for (int k = 0; k < o->n_precisions; k++) {
                mp_bench_cell *c = mp_bench_cell_at(m, mi, order[k], bi);
                *c = (mp_bench_cell){.model = o->models[mi], .precision = o->precisions[order[k]],
                                     .batch = o->batches[bi]};
                if (o->progress) {
                    fprintf(o->progress, "[%d/%d] %s %s batch %d: start\n", done + 1, m->n, c->model,
                            mp_precision_name(c->precision), c->batch);
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
                int full_steps = train->n / c->batch;
                derive(m, c, mi, bi, full_steps);
                report_cell(o->progress, ++done, m->n, c);
                if (o->jsonl) {
                    mp_bench_write_record(o->jsonl, m, c);
                    fflush(o->jsonl);
                }
            }
    free(order);
    return MP_OK;
}

void mp_bench_matrix_free(mp_bench_matrix *m) {
    free(m->cells);
    memset(m, 0, sizeof *m);
}
