/* report_jsonl.c — one JSON record per benchmark cell (results.jsonl); batch
 * is per GPU and images/s count every GPU of the cell. */
#include <math.h>

#include "bench/matrix.h"

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* A number, or null when it is not finite (JSON has no NaN). */
static void json_number(FILE *f, const char *key, double v, const char *fmt) {
    fprintf(f, ",\"%s\":", key);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

void mp_bench_write_record(FILE *f, const mp_bench_matrix *m, const mp_bench_cell *c) {
    const mp_bench_opts *o = m->o;
    bool ok = c->status == MP_CELL_OK;
    fputs("{\"model\":", f);
    json_string(f, c->model);
    fputs(",\"data\":", f);
    json_string(f, o->data_name ? o->data_name : "");
    fprintf(f, ",\"precision\":\"%s\",\"batch\":%d,\"gpus\":%d,\"epochs\":%d,\"steps\":%d,\"train_samples\":%d,"
               "\"test_samples\":%d,\"status\":\"%s\",\"message\":",
            mp_precision_name(c->precision), c->batch, c->gpus, o->epochs, o->steps, m->train_samples, m->test_samples,
            mp_cell_status_name(c->status));
    json_string(f, c->message);
    double na = NAN;
    json_number(f, "time_per_epoch_s", ok ? c->time_per_epoch_s : na, "%.4f");
    json_number(f, "time_per_100_epochs_min", ok ? c->time_per_epoch_s * 100 / 60 : na, "%.4f");
    fprintf(f, ",\"time_projected\":%s", c->projected ? "true" : "false");
    json_number(f, "speedup_vs_fp32", c->speedup, "%.6f");
    json_number(f, "test_acc", ok ? c->res.test_acc : na, "%.6f");
    json_number(f, "acc_drop_vs_fp32", c->acc_drop, "%.6f");
    json_number(f, "train_loss", ok ? c->res.train_loss : na, "%.6f");
    json_number(f, "train_acc", ok ? c->res.train_acc : na, "%.6f");
    json_number(f, "images_per_s", ok ? c->res.images_per_s : na, "%.2f");
    json_number(f, "images_per_s_vs_1gpu", c->vs_1gpu, "%.4f");
    json_number(f, "arena_bytes", ok ? (double)c->res.arena_bytes : na, "%.0f");
    json_number(f, "peak_rss_bytes", c->peak_rss_bytes > 0 ? (double)c->peak_rss_bytes : na, "%.0f");
    json_number(f, "price_per_hour_usd", o->price_per_hour, "%g");
    json_number(f, "cost_per_million_samples_usd", c->cost_per_million, "%.6g");
    json_number(f, "skipped_steps", ok ? (double)c->res.skipped_steps : na, "%.0f");
    json_number(f, "final_loss_scale", ok ? (double)c->res.final_loss_scale : na, "%g");
    json_number(f, "cell_seconds", c->cell_seconds, "%.3f");
    /* GPU monitor over the cell (null without NVML) */
    bool gpu = c->gpu.gpu;
    int epochs = ok && c->res.epochs_run > 0 ? c->res.epochs_run : 0;
    json_number(f, "gpu_mean_load_pct", gpu ? c->gpu.mean_load_pct : na, "%.2f");
    json_number(f, "gpu_mean_power_w", gpu ? c->gpu.mean_power_w : na, "%.2f");
    json_number(f, "gpu_energy_j", gpu ? c->gpu.energy_j : na, "%.1f");
    json_number(f, "gpu_energy_per_epoch_j", gpu && epochs ? c->gpu.energy_j / epochs : na, "%.1f");
    json_number(f, "gpu_peak_mem_used_mib", gpu ? c->gpu.peak_mem_used_mib : na, "%.0f");
    fputs("}\n", f);
}
