/* report_jsonl.c — one JSON record per benchmark cell (results.jsonl); batch
 * is per GPU and images/s count every GPU of the cell. */
#include <math.h>

#include "bench/matrix.h"
#include "io/json_write.h"

/* A number rounded to `decimals` places; null when not finite (NaN: not
 * measured for this cell). */
static bool num(cJSON *o, const char *key, double v, int decimals) { return mp_json_add(o, key, mp_json_fixed(v, decimals)); }

mp_status mp_bench_write_record(FILE *f, const mp_bench_matrix *m, const mp_bench_cell *c) {
    const mp_bench_opts *o = m->o;
    bool ok = c->status == MP_CELL_OK;
    double na = NAN;
    cJSON *j = cJSON_CreateObject();
    bool built = mp_json_add(j, "model", mp_json_str(c->model)) && mp_json_add(j, "data", mp_json_str(o->data_name)) &&
                 mp_json_add(j, "precision", mp_json_str(mp_precision_name(c->precision))) &&
                 mp_json_add(j, "batch", mp_json_int(c->batch)) && mp_json_add(j, "gpus", mp_json_int(c->gpus)) &&
                 mp_json_add(j, "epochs", mp_json_int(o->epochs)) && mp_json_add(j, "steps", mp_json_int(o->steps)) &&
                 mp_json_add(j, "train_samples", mp_json_int(m->train_samples)) &&
                 mp_json_add(j, "test_samples", mp_json_int(m->test_samples)) &&
                 mp_json_add(j, "status", mp_json_str(mp_cell_status_name(c->status))) &&
                 mp_json_add(j, "message", mp_json_str(c->message)) &&
                 num(j, "time_per_epoch_s", ok ? c->time_per_epoch_s : na, 4) &&
                 num(j, "time_per_100_epochs_min", ok ? c->time_per_epoch_s * 100 / 60 : na, 4) &&
                 mp_json_add(j, "time_projected", cJSON_CreateBool(c->projected)) &&
                 num(j, "speedup_vs_fp32", c->speedup, 6) && num(j, "test_acc", ok ? c->res.test_acc : na, 6) &&
                 num(j, "acc_drop_vs_fp32", c->acc_drop, 6) && num(j, "train_loss", ok ? c->res.train_loss : na, 6) &&
                 num(j, "train_acc", ok ? c->res.train_acc : na, 6) &&
                 num(j, "images_per_s", ok ? c->res.images_per_s : na, 2) &&
                 num(j, "images_per_s_vs_1gpu", c->vs_1gpu, 4) &&
                 num(j, "arena_bytes", ok ? (double)c->res.arena_bytes : na, 0) &&
                 num(j, "peak_rss_bytes", c->peak_rss_bytes > 0 ? (double)c->peak_rss_bytes : na, 0) &&
                 mp_json_add(j, "price_per_hour_usd", mp_json_sig(o->price_per_hour, 6)) &&
                 mp_json_add(j, "cost_per_million_samples_usd", mp_json_sig(c->cost_per_million, 6)) &&
                 num(j, "skipped_steps", ok ? (double)c->res.skipped_steps : na, 0) &&
                 mp_json_add(j, "final_loss_scale", mp_json_sig(ok ? (double)c->res.final_loss_scale : na, 6)) &&
                 num(j, "cell_seconds", c->cell_seconds, 3);
    /* GPU monitor over the cell (null without NVML) */
    bool gpu = c->gpu.gpu;
    int epochs = ok && c->res.epochs_run > 0 ? c->res.epochs_run : 0;
    built = built && num(j, "gpu_mean_load_pct", gpu ? c->gpu.mean_load_pct : na, 2) &&
            num(j, "gpu_mean_power_w", gpu ? c->gpu.mean_power_w : na, 2) &&
            num(j, "gpu_energy_j", gpu ? c->gpu.energy_j : na, 1) &&
            num(j, "gpu_energy_per_epoch_j", gpu && epochs ? c->gpu.energy_j / epochs : na, 1) &&
            num(j, "gpu_peak_mem_used_mib", gpu ? c->gpu.peak_mem_used_mib : na, 0);
    return mp_json_write_line(f, j, built, "results.jsonl");
}
