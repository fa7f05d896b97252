/* report_markdown.c — tables.md: one table per model, metric and GPU count,
 * precisions as rows and batch sizes as columns, laid out like seed 000's
 * tables ("(2) 10-layer 2 GPU"); with 1 GPU and more in the matrix, a table
 * per model of the images/s of N GPUs over those of 1. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "bench/matrix.h"
#include "core/error.h"
#include "io/output_path.h"

typedef enum { TIME, TIME_100, SPEEDUP, ACC, ACC_DROP, IMAGES, ARENA, RSS, COST, ENERGY, POWER, VS_1GPU } metric;

typedef struct {
    metric id;
    const char *title;
    bool relative; /* against fp32: no fp32 row, no table without fp32 */
} metric_info;

static const metric_info metrics[] = {
    {TIME, "time per epoch (s)", false},
    {TIME_100, "time per 100 epochs (min)", false},
    {SPEEDUP, "speed-up vs fp32 (T_fp32 / T - 1)", true},
    {ACC, "test accuracy", false},
    {ACC_DROP, "accuracy difference (fp32 - this; positive = worse than fp32)", true},
    {IMAGES, "images/s (training)", false},
    {ARENA, "activation arena (MiB)", false},
    {RSS, "peak RSS of the process (MiB)", false},
    {COST, "cost per million samples (USD)", false},
    {ENERGY, "GPU energy per epoch (J, NVML)", false},
    {POWER, "GPU mean power (W, NVML)", false},
};

static void cell_text(char *buf, size_t n, metric id, const mp_bench_cell *c) {
    if (c->status != MP_CELL_OK) {
        snprintf(buf, n, "%s", mp_cell_status_name(c->status));
        return;
    }
    double v = NAN;
    const char *fmt = "%.2f";
    switch (id) {
    case TIME: v = c->time_per_epoch_s; break;
    case TIME_100: v = c->time_per_epoch_s * 100 / 60; break;
    case SPEEDUP: v = 100 * c->speedup; fmt = "%.1f%%"; break;
    case ACC: v = 100 * c->res.test_acc; fmt = "%.2f%%"; break;
    case ACC_DROP: v = 100 * c->acc_drop; fmt = "%.2f%%"; break;
    case IMAGES: v = c->res.images_per_s; fmt = "%.0f"; break;
    case ARENA: v = (double)c->res.arena_bytes / (1 << 20); fmt = "%.1f"; break;
    case RSS: v = c->peak_rss_bytes > 0 ? (double)c->peak_rss_bytes / (1 << 20) : NAN; fmt = "%.0f"; break;
    case COST: v = c->cost_per_million; fmt = "%.4g"; break;
    case ENERGY:
        v = c->gpu.gpu && c->res.epochs_run > 0 ? c->gpu.energy_j / c->res.epochs_run : NAN;
        fmt = "%.0f";
        break;
    case POWER: v = c->gpu.gpu ? c->gpu.mean_power_w : NAN; fmt = "%.1f"; break;
    case VS_1GPU: v = c->vs_1gpu; fmt = "%.2fx"; break;
    }
    if (isfinite(v)) snprintf(buf, n, fmt, v);
    else buf[0] = '\0';
}

static bool has_fp32(const mp_bench_opts *o) {
    for (int p = 0; p < o->n_precisions; p++)
        if (o->precisions[p] == MP_PRECISION_FP32) return true;
    return false;
}

/* "### title" and the header rows: `first` over the batch sizes. */
static void table_head(FILE *f, const mp_bench_opts *o, const char *title, const char *first) {
    fprintf(f, "### %s\n\n| %s |", title, first);
    for (int b = 0; b < o->n_batches; b++) fprintf(f, " %d |", o->batches[b]);
    fputs("\n|---|", f);
    for (int b = 0; b < o->n_batches; b++) fputs("---|", f);
    fputc('\n', f);
}

static void table_row(FILE *f, const mp_bench_matrix *m, const char *label, metric id, int model, int g, int p) {
    fprintf(f, "| %s |", label);
    for (int b = 0; b < m->o->n_batches; b++) {
        char text[64];
        cell_text(text, sizeof text, id, mp_bench_cell_at(m, model, g, p, b));
        fprintf(f, " %s |", text);
    }
    fputc('\n', f);
}

/* Titles name the GPU count on a GPU ("cnn10, 2 GPUs: ..."); a CPU matrix
 * (one count, 1) keeps "cnn10: ...". */
static void write_table(FILE *f, const mp_bench_matrix *m, int model, int g, const metric_info *mi) {
    const mp_bench_opts *o = m->o;
    int gpus = o->gpus[g];
    char title[512];
    if (o->device.kind == MP_DEVICE_CUDA || o->n_gpus > 1 || gpus > 1)
        snprintf(title, sizeof title, "%s, %d GPU%s: %s", o->models[model], gpus, gpus == 1 ? "" : "s", mi->title);
    else
        snprintf(title, sizeof title, "%s: %s", o->models[model], mi->title);
    table_head(f, o, title, gpus > 1 ? "batch per GPU" : "batch");
    for (int p = 0; p < o->n_precisions; p++) {
        if (mi->relative && o->precisions[p] == MP_PRECISION_FP32) continue;
        table_row(f, m, mp_precision_name(o->precisions[p]), mi->id, model, g, p);
    }
    fputc('\n', f);
}

/* Images/s of every count but 1 over those of 1 GPU, a row per count and
 * precision (needs a 1 in the GPU counts). */
static void write_vs_1gpu_table(FILE *f, const mp_bench_matrix *m, int model) {
    const mp_bench_opts *o = m->o;
    int one = mp_bench_one_gpu_index(o);
    if (one < 0 || o->n_gpus < 2) return;
    char title[512];
    snprintf(title, sizeof title, "%s: speed-up vs 1 GPU (images/s ratio at the same precision and batch "
                                  "per GPU)", o->models[model]);
    table_head(f, o, title, "batch per GPU");
    for (int g = 0; g < o->n_gpus; g++)
        for (int p = 0; g != one && p < o->n_precisions; p++) {
            char label[96];
            snprintf(label, sizeof label, "%s, %d GPUs", mp_precision_name(o->precisions[p]), o->gpus[g]);
            table_row(f, m, label, VS_1GPU, model, g, p);
        }
    fputc('\n', f);
}

static void write_header(FILE *f, const mp_bench_matrix *m) {
    const mp_bench_opts *o = m->o;
    fprintf(f, "# mixprec bench\n\n");
    fprintf(f, "Data: %s, %d training / %d test samples; %d epoch%s per cell", o->data_name, m->train_samples,
            m->test_samples, o->epochs, o->epochs == 1 ? "" : "s");
    if (o->steps > 0) fprintf(f, ", at most %d steps per epoch (times projected to a full epoch)", o->steps);
    fprintf(f, "; seed %llu%s.\n\n", (unsigned long long)o->seed,
            o->init == MP_INIT_SCHEME_TORCH ? ", PyTorch's weight initialization (--init torch)" : "");
    fprintf(f, "Times are training time of the last epoch (evaluation excluded). Speed-up is T_fp32 / T - 1 within "
               "one batch size and the accuracy difference is fp32's test accuracy minus this one's, as in seed "
               "000; both are blank without an fp32 cell. Failed cells read OOM or error (see results.jsonl).\n\n");
    bool data_parallel = false;
    for (int g = 0; g < o->n_gpus; g++) data_parallel = data_parallel || o->gpus[g] > 1;
    if (data_parallel)
        fprintf(f, "Batch sizes are per GPU: a cell of N GPUs trains data parallel on global batches of N x "
                   "batch, its times are those of the whole epoch and its images/s count all N GPUs; the "
                   "activation arena is one GPU's, and the GPU monitor's energy and power are GPU 0's alone. "
                   "Speed-up vs fp32 and the accuracy difference compare cells of one GPU count; speed-up vs 1 GPU "
                   "is the images/s of N GPUs over those of 1 GPU at the same precision and batch per GPU.\n\n");
}

static bool any_gpu_readings(const mp_bench_matrix *m) {
    for (int i = 0; i < m->n; i++)
        if (m->cells[i].gpu.gpu) return true;
    return false;
}

mp_status mp_bench_write_markdown(const char *path, const mp_bench_matrix *m) {
    FILE *f;
    MP_TRY(mp_output_open(path, NULL, false, &f));
    const mp_bench_opts *o = m->o;
    write_header(f, m);
    for (int model = 0; model < o->n_models; model++) {
        fprintf(f, "## %s\n\n", o->models[model]);
        for (int g = 0; g < o->n_gpus; g++)
            for (size_t k = 0; k < sizeof metrics / sizeof *metrics; k++) {
                if (metrics[k].relative && !has_fp32(o)) continue;
                if (metrics[k].id == COST && !(o->price_per_hour > 0)) continue;
                if ((metrics[k].id == ENERGY || metrics[k].id == POWER) && !any_gpu_readings(m)) continue;
                write_table(f, m, model, g, &metrics[k]);
            }
        write_vs_1gpu_table(f, m, model);
    }
    MP_TRY(mp_output_close(f, path, NULL));
    return MP_OK;
}
