/* monitor_report.c — the monitor as `mixprec train` and `bench` use it: one
 * status line when a run starts, the summary lines when it ends. */
#include <math.h>
#include <stdio.h>

#include "core/error.h"
#include "monitor/gpu_monitor.h"

mp_status mp_monitor_begin_run(double interval_s, FILE *csv, const char *csv_name, FILE *out, mp_monitor **m) {
    mp_monitor_opts o = {.interval_s = interval_s, .csv = csv, .csv_name = csv_name, .no_gpu = interval_s == 0};
    mp_status s = mp_monitor_start(&o, m);
    if (s != MP_OK && s != MP_ERR_UNSUPPORTED) return s;
    if (!out) return MP_OK;
    if (s == MP_ERR_UNSUPPORTED)
        fprintf(out, "GPU monitor: off (%s)\n", mp_last_error());
    else if (!mp_monitor_has_gpu(*m))
        fprintf(out, "GPU monitor: off (--monitor-interval 0)\n");
    else
        fprintf(out, "GPU monitor: %s, every %g s%s%s\n", mp_monitor_source_name(*m), interval_s,
                csv_name ? ", CSV " : "", csv_name ? csv_name : "");
    return MP_OK;
}

/* "3.85 kJ" / "512.0 J" */
static void print_energy(FILE *out, double j) {
    if (j >= 1000) fprintf(out, "%.2f kJ", j / 1000);
    else fprintf(out, "%.1f J", j);
}

mp_status mp_monitor_end_run(mp_monitor *m, FILE *out, int epochs) {
    mp_monitor_summary r;
    mp_status s = mp_monitor_stop(m, &r);
    if (!m || !out) return s;
    fprintf(out, "monitor: wall time %.1f s, peak RSS %.1f MiB\n", r.wall_s, r.peak_rss_mib);
    if (!r.gpu) return s;
    fprintf(out, "monitor: GPU mean load %.1f%%, mean power %.1f W, energy ", r.mean_load_pct, r.mean_power_w);
    if (isnan(r.energy_j)) {
        fprintf(out, "unknown");
    } else {
        print_energy(out, r.energy_j);
        if (epochs > 0) {
            fprintf(out, " (");
            print_energy(out, r.energy_j / epochs);
            fprintf(out, " per epoch)");
        }
    }
    fprintf(out, ", peak memory used %.0f MiB, %d samples\n", r.peak_mem_used_mib, r.samples);
    return s;
}
