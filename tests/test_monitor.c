/* test_monitor.c — the GPU monitor without a GPU: a fake source and a fake
 * clock feed known readings, and the CSV rows, the time-weighted means, the
 * trapezoid and counter energies and the window marks are checked against
 * numbers worked out by hand; the sampler thread runs on its schedule and
 * stops at once; bad options and unwritable CSVs fail cleanly; and the real
 * NVML source either works (GPU machine) or says clearly why not. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/error.h"
#include "monitor/gpu_monitor.h"

#define NA NAN

typedef struct {
    const mp_gpu_sample *v;
    int n, next, reads, closes;
    int fail_read; /* index of a read that fails (-1: none) */
} fake_source;

static bool fake_read(void *ctx, mp_gpu_sample *s) {
    fake_source *f = ctx;
    int i = f->reads++;
    if (i == f->fail_read || f->next >= f->n) return false;
    *s = f->v[f->next++];
    return true;
}

static void fake_close(void *ctx) { ((fake_source *)ctx)->closes++; }

static mp_monitor_source fake(fake_source *f) {
    return (mp_monitor_source){.ctx = f, .name = "fake GPU", .read = fake_read, .close = fake_close};
}

static double fake_clock(void *ctx) { return *(const double *)ctx; }

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* Line k (0 = header) of text, without the newline, into buf. */
static bool csv_line(const char *text, int k, char *buf, size_t n) {
    for (int i = 0; i < k && text; i++) text = strchr(text, '\n') ? strchr(text, '\n') + 1 : NULL;
    if (!text || !*text) return false;
    size_t len = strcspn(text, "\n");
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), text);
    return true;
}

static int count_lines(const char *text) {
    int n = 0;
    for (; *text; text++) n += *text == '\n';
    return n;
}

/* Row k without its timestamp (which is wall-clock time): "0.000,1410,...". */
static const char *row_after_stamp(const char *text, int k, char *buf, size_t n) {
    if (!csv_line(text, k, buf, n)) return "";
    int y, mo, d, h, mi, s, ms;
    CHECK(sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d.%3d,", &y, &mo, &d, &h, &mi, &s, &ms) == 7, "bad timestamp in '%s'", buf);
    const char *comma = strchr(buf, ',');
    return comma ? comma + 1 : "";
}

/* Samples at t = 0, 5, 10 (mark), 12, 15 (mark), 20 (stop); power and load
 * integrated by the trapezoid rule, fan unsupported (empty field). */
static void test_trapezoid_and_marks(void) {
    const mp_gpu_sample v[] = {
        /* sm, mem clk, load, mem used, power, temp, fan, energy counter */
        {1410, 2619, 10, 1000, 100, 35, NA, NA},
        {1980, 2619, 20, 1500, 200, 40, NA, NA},
        {1980, 2619, 60, 1200, 300, 45, NA, NA},
        {1755, 2619, 100, 1300, 400, 50, NA, NA},
        {1410, 2619, 0, 900, 100, 42, NA, NA},
        {1410, 2619, 0, 900, 100, 41, NA, NA},
    };
    fake_source f = {v, 6, 0, 0, 0, -1};
    mp_monitor_source src = fake(&f);
    double t = 0;
    char *text = NULL;
    size_t text_len = 0;
    FILE *csv = open_memstream(&text, &text_len);
    mp_monitor *m = NULL;
    mp_status s = mp_monitor_start(
        &(mp_monitor_opts){.interval_s = 0, .csv = csv, .source = &src, .clock = fake_clock, .clock_ctx = &t}, &m);
    CHECK(s == MP_OK && m, "start: %s", mp_last_error());
    if (!m) return;
    CHECK(mp_monitor_has_gpu(m) && !strcmp(mp_monitor_source_name(m), "fake GPU"), "source name '%s'",
          mp_monitor_source_name(m));
    t = 5;
    mp_monitor_sample_now(m);
    t = 10;
    mp_monitor_summary w1 = mp_monitor_mark(m);
    /* [0, 10]: load (10+20)/2*5 + (20+60)/2*5 = 275 -> 27.5 %; power 750 + 1250 = 2000 J -> 200 W */
    CHECK(w1.gpu && w1.samples == 3, "window 1: gpu %d, %d samples", w1.gpu, w1.samples);
    CHECK(near(w1.wall_s, 10), "window 1 wall %g", w1.wall_s);
    CHECK(near(w1.mean_load_pct, 27.5), "window 1 mean load %g, expected 27.5", w1.mean_load_pct);
    CHECK(near(w1.mean_power_w, 200), "window 1 mean power %g, expected 200", w1.mean_power_w);
    CHECK(near(w1.energy_j, 2000) && !w1.energy_from_counter, "window 1 energy %g J, expected 2000 (trapezoid)",
          w1.energy_j);
    CHECK(near(w1.peak_mem_used_mib, 1500), "window 1 peak memory %g", w1.peak_mem_used_mib);
    CHECK(w1.peak_rss_mib > 1, "peak RSS %g MiB", w1.peak_rss_mib);
    t = 12;
    mp_monitor_sample_now(m);
    t = 15;
    mp_monitor_summary w2 = mp_monitor_mark(m);
    /* [10, 15]: power (300+400)/2*2 + (400+100)/2*3 = 700 + 750 = 1450 J -> 290 W;
     * load (60+100)/2*2 + (100+0)/2*3 = 160 + 150 = 310 -> 62 % */
    CHECK(w2.samples == 3 && near(w2.wall_s, 5), "window 2: %d samples, wall %g", w2.samples, w2.wall_s);
    CHECK(near(w2.energy_j, 1450), "window 2 energy %g J, expected 1450", w2.energy_j);
    CHECK(near(w2.mean_power_w, 290), "window 2 mean power %g, expected 290", w2.mean_power_w);
    CHECK(near(w2.mean_load_pct, 62), "window 2 mean load %g, expected 62", w2.mean_load_pct);
    CHECK(near(w2.peak_mem_used_mib, 1300), "window 2 peak memory %g (the window's, not the run's)",
          w2.peak_mem_used_mib);
    t = 20;
    mp_monitor_summary total;
    s = mp_monitor_stop(m, &total);
    CHECK(s == MP_OK, "stop: %s", mp_last_error());
    /* [0, 20]: energy 2000 + 1450 + 100*5 = 3950 J -> 197.5 W; load 275 + 310 + 0 = 585 -> 29.25 % */
    CHECK(total.samples == 6 && near(total.wall_s, 20), "total: %d samples, wall %g", total.samples, total.wall_s);
    CHECK(near(total.energy_j, 3950), "total energy %g J, expected 3950", total.energy_j);
    CHECK(near(total.mean_power_w, 197.5), "total mean power %g, expected 197.5", total.mean_power_w);
    CHECK(near(total.mean_load_pct, 29.25), "total mean load %g, expected 29.25", total.mean_load_pct);
    CHECK(near(total.peak_mem_used_mib, 1500), "total peak memory %g", total.peak_mem_used_mib);
    CHECK(f.closes == 1, "source closed %d times", f.closes);
    fclose(csv);
    char buf[256];
    CHECK(csv_line(text, 0, buf, sizeof buf) && !strcmp(buf, MP_MONITOR_CSV_HEADER), "header '%s'", buf);
    CHECK(count_lines(text) == 7, "%d CSV lines, expected header + 6 rows:\n%s", count_lines(text), text);
    const char *want[] = {"0.000,1410,2619,10,1000,100.00,35,",  "5.000,1980,2619,20,1500,200.00,40,",
                          "10.000,1980,2619,60,1200,300.00,45,", "12.000,1755,2619,100,1300,400.00,50,",
                          "15.000,1410,2619,0,900,100.00,42,",   "20.000,1410,2619,0,900,100.00,41,"};
    for (int k = 0; k < 6; k++) {
        const char *row = row_after_stamp(text, k + 1, buf, sizeof buf);
        CHECK(!strcmp(row, want[k]), "row %d: '%s', expected '%s'", k + 1, row, want[k]);
    }
    free(text);
}

/* A device energy counter read at both ends of a window wins over the
 * trapezoid; a failed read leaves no row and no segment. */
static void test_energy_counter_and_failed_read(void) {
    const mp_gpu_sample v[] = {
        {NA, NA, 50, NA, 100, NA, NA, 1000.0},
        {NA, NA, 50, NA, 100, NA, NA, 1600.0},
        {NA, NA, 50, NA, 100, NA, NA, 2500.0},
        {NA, NA, 50, NA, 100, NA, NA, 2500.0},
    };
    fake_source f = {v, 4, 0, 0, 0, 1}; /* the read at t = 5 fails */
    mp_monitor_source src = fake(&f);
    double t = 0;
    char *text = NULL;
    size_t text_len = 0;
    FILE *csv = open_memstream(&text, &text_len);
    mp_monitor *m = NULL;
    mp_status s = mp_monitor_start(
        &(mp_monitor_opts){.csv = csv, .source = &src, .clock = fake_clock, .clock_ctx = &t}, &m);
    CHECK(s == MP_OK, "start: %s", mp_last_error());
    if (!m) return;
    t = 5;
    mp_monitor_sample_now(m); /* fails: no row */
    t = 7;
    mp_monitor_sample_now(m);
    t = 10;
    mp_monitor_summary w = mp_monitor_mark(m);
    CHECK(w.samples == 3 && near(w.wall_s, 10), "window: %d samples, wall %g", w.samples, w.wall_s);
    CHECK(w.energy_from_counter && near(w.energy_j, 1500), "energy %g J from counter %d, expected 1500 from the counter",
          w.energy_j, w.energy_from_counter);
    CHECK(near(w.mean_power_w, 100) && near(w.mean_load_pct, 50), "means %g W, %g %%", w.mean_power_w,
          w.mean_load_pct);
    CHECK(isnan(w.peak_mem_used_mib), "peak memory %g, expected NaN (never reported)", w.peak_mem_used_mib);
    t = 10.5; /* 0.5 s with the counter standing still: too short for it, the trapezoid counts */
    w = mp_monitor_mark(m);
    CHECK(!w.energy_from_counter && near(w.energy_j, 50), "short window: %g J from counter %d, expected 50 J (trapezoid)",
          w.energy_j, w.energy_from_counter);
    mp_monitor_summary total;
    t = 11; /* the source is exhausted: the stop sample fails (no row); the energy stays the counter's */
    CHECK(mp_monitor_stop(m, &total) == MP_OK, "stop: %s", mp_last_error());
    CHECK(total.energy_from_counter && near(total.energy_j, 1500), "total energy %g", total.energy_j);
    fclose(csv);
    char buf[256];
    CHECK(count_lines(text) == 5, "%d CSV lines, expected header + 4 rows:\n%s", count_lines(text), text);
    const char *row = row_after_stamp(text, 2, buf, sizeof buf);
    CHECK(!strcmp(row, "7.000,,,50,,100.00,,"), "row with unknown fields: '%s'", row);
    free(text);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* The thread samples on its own every interval and stop wakes it at once. */
static void test_sampler_thread(void) {
    mp_gpu_sample v[64];
    for (int i = 0; i < 64; i++) v[i] = (mp_gpu_sample){1000, 2000, 50, 100, 150, 40, NA, NA};
    fake_source f = {v, 64, 0, 0, 0, -1};
    mp_monitor_source src = fake(&f);
    mp_monitor *m = NULL;
    CHECK(mp_monitor_start(&(mp_monitor_opts){.interval_s = 0.02, .source = &src}, &m) == MP_OK, "start: %s",
          mp_last_error());
    if (!m) return;
    struct timespec nap = {0, 250000000};
    nanosleep(&nap, NULL);
    mp_monitor_summary r;
    CHECK(mp_monitor_stop(m, &r) == MP_OK, "stop: %s", mp_last_error());
    /* ~0.25 s / 0.02 s = 12 thread samples + start + stop: never more than the
     * schedule allows, and a busy machine may skip a few deadlines */
    int most = (int)(r.wall_s / 0.02) + 2;
    CHECK(r.samples >= 5 && r.samples <= most, "%d samples in %g s at 0.02 s (at most %d)", r.samples, r.wall_s, most);
    CHECK(r.wall_s >= 0.2 && r.wall_s < 5, "wall %g s", r.wall_s);
    CHECK(near(r.mean_power_w, 150) && fabs(r.energy_j - 150 * r.wall_s) < 1e-6 * 150 * r.wall_s + 1e-9,
          "constant 150 W over %g s: mean %g W, energy %g J", r.wall_s, r.mean_power_w, r.energy_j);

    fake_source g = {v, 64, 0, 0, 0, -1};
    src = fake(&g);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(mp_monitor_start(&(mp_monitor_opts){.interval_s = 60, .source = &src}, &m) == MP_OK, "start: %s",
          mp_last_error());
    CHECK(mp_monitor_stop(m, &r) == MP_OK, "stop: %s", mp_last_error());
    double took = seconds_since(&t0);
    CHECK(took < 1.0, "stop with a 60 s interval took %g s (the thread must wake at once)", took);
    CHECK(r.samples == 2 && g.closes == 1, "%d samples (start + stop), closed %d", r.samples, g.closes);
}

/* Bad options and unwritable CSVs fail before anything runs; the source is
 * closed either way. no_gpu: time and RSS only, the source never read. */
static void test_errors_and_no_gpu(void) {
    const mp_gpu_sample v[] = {{1, 1, 1, 1, 1, 1, 1, NA}};
    fake_source f = {v, 1, 0, 0, 0, -1};
    mp_monitor_source src = fake(&f);
    mp_monitor *m = (mp_monitor *)&f;
    CHECK_ERR(mp_monitor_start(&(mp_monitor_opts){.interval_s = -1, .source = &src}, &m), MP_ERR_INVALID_ARG,
              "interval -1");
    CHECK(m == NULL && f.closes == 1, "failed start: monitor %p, source closed %d times", (void *)m, f.closes);
    CHECK_ERR(mp_monitor_start(&(mp_monitor_opts){.interval_s = NAN, .source = &src}, &m), MP_ERR_INVALID_ARG,
              "interval");
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        setvbuf(full, NULL, _IONBF, 0);
        f.closes = 0;
        CHECK_ERR(mp_monitor_start(&(mp_monitor_opts){.csv = full, .csv_name = "/dev/full", .source = &src}, &m),
                  MP_ERR_IO, "monitor CSV /dev/full: cannot write: No space left");
        CHECK(m == NULL && f.closes == 1 && f.reads == 0, "CSV failure: source closed %d, read %d", f.closes, f.reads);
        fclose(full);
    }
    /* room for the header only: the first row fails, and stop says so naming the file */
    static char room[sizeof MP_MONITOR_CSV_HEADER + 1];
    FILE *small = fmemopen(room, sizeof room, "w");
    CHECK(small != NULL, "fmemopen");
    if (small) {
        setvbuf(small, NULL, _IONBF, 0);
        f.reads = 0, f.next = 0;
        CHECK(mp_monitor_start(&(mp_monitor_opts){.csv = small, .csv_name = "run.csv", .source = &src}, &m) == MP_OK,
              "start: %s", mp_last_error());
        CHECK_ERR(mp_monitor_stop(m, NULL), MP_ERR_IO, "monitor CSV run.csv: cannot write a row");
        fclose(small);
        f.reads = 0;
    }
    f.closes = 0;
    CHECK(mp_monitor_start(&(mp_monitor_opts){.interval_s = 5, .no_gpu = true, .source = &src}, &m) == MP_OK,
          "no_gpu start: %s", mp_last_error());
    CHECK(m && !mp_monitor_has_gpu(m) && f.closes == 1, "no_gpu: has_gpu %d, source closed %d",
          mp_monitor_has_gpu(m), f.closes);
    mp_monitor_summary r;
    CHECK(mp_monitor_stop(m, &r) == MP_OK, "stop");
    CHECK(!r.gpu && r.samples == 0 && isnan(r.energy_j) && isnan(r.mean_power_w) && r.peak_rss_mib > 1 &&
              r.wall_s >= 0,
          "no_gpu summary: gpu %d, %d samples, energy %g, RSS %g", r.gpu, r.samples, r.energy_j, r.peak_rss_mib);
    CHECK(f.reads == 0, "the source was read %d times with no_gpu", f.reads);
    CHECK(mp_monitor_stop(NULL, NULL) == MP_OK, "stop(NULL)");
    /* a run refused before its monitor began ends it as NULL: no summary */
    FILE *out = tmpfile();
    CHECK(out && mp_monitor_end_run(NULL, out, 3) == MP_OK && ftell(out) == 0, "end_run(NULL) wrote %ld bytes",
          out ? ftell(out) : -1L);
    if (out) fclose(out);
}

/* The real NVML source: on a machine without NVML the status says why in
 * one line and the monitor still measures time and RSS; with NVML (GPU
 * machine) it reads real power and clocks. */
static void test_nvml(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    mp_monitor_source src;
    mp_monitor *m = NULL;
    mp_monitor_summary r;
    if (!lib) {
        CHECK_ERR(mp_monitor_source_nvml(0, &src), MP_ERR_UNSUPPORTED, "NVML not found: ", "libnvidia-ml.so.1");
        CHECK(!strchr(mp_last_error(), '\n'), "the reason is one line: %s", mp_last_error());
        CHECK_ERR(mp_monitor_start(&(mp_monitor_opts){.interval_s = 5}, &m), MP_ERR_UNSUPPORTED, "NVML not found");
        CHECK(m && !mp_monitor_has_gpu(m), "without NVML the monitor still runs (time, RSS)");
        CHECK(mp_monitor_stop(m, &r) == MP_OK && !r.gpu && r.peak_rss_mib > 1, "CPU-only summary: RSS %g",
              r.peak_rss_mib);
        printf("  NVML absent: %s\n", "checked the 'NVML not found' status");
        return;
    }
    dlclose(lib);
    mp_status s = mp_monitor_source_nvml(0, &src);
    CHECK(s == MP_OK, "NVML present but the source failed: %s", mp_last_error());
    if (s != MP_OK) return;
    mp_gpu_sample g = {NA, NA, NA, NA, NA, NA, NA, NA};
    CHECK(src.read(src.ctx, &g), "NVML read failed");
    CHECK(g.power_w > 1 && g.power_w < 2000, "NVML power %g W", g.power_w);
    CHECK(g.sm_clock_mhz > 0 && g.mem_used_mib >= 0 && g.temp_c > 0, "NVML clock %g MHz, memory %g MiB, %g C",
          g.sm_clock_mhz, g.mem_used_mib, g.temp_c);
    printf("  NVML %s: sm %g MHz, mem %g MHz, load %g %%, %g MiB, %g W, %g C, fan %g %%, counter %g J\n", src.name,
           g.sm_clock_mhz, g.mem_clock_mhz, g.gpu_load_pct, g.mem_used_mib, g.power_w, g.temp_c, g.fan_pct,
           g.energy_j);
    src.close(src.ctx);
    CHECK(mp_monitor_start(&(mp_monitor_opts){.interval_s = 0.05}, &m) == MP_OK, "NVML monitor: %s", mp_last_error());
    struct timespec nap = {0, 300000000};
    nanosleep(&nap, NULL);
    CHECK(mp_monitor_stop(m, &r) == MP_OK, "stop");
    CHECK(r.gpu && r.samples >= 3 && r.mean_power_w > 1 && r.energy_j > 0, "NVML summary: %d samples, %g W, %g J",
          r.samples, r.mean_power_w, r.energy_j);
}

int main(void) {
    test_trapezoid_and_marks();
    test_energy_counter_and_failed_read();
    test_sampler_thread();
    test_errors_and_no_gpu();
    test_nvml();
    return test_summary("test_monitor");
}
