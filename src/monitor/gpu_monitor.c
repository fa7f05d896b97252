/* gpu_monitor.c — see gpu_monitor.h: the sampler thread, CSV rows and the
 * time-weighted window integrals. */
#include "monitor/gpu_monitor.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/error.h"

/* Trapezoid integral of one quantity, plus a plain sum for windows too
 * short to have a segment. */
typedef struct {
    double integral, covered_s, sum;
    int n;
} time_mean;

/* Shortest window whose energy comes from the device counter: NVML's
 * counter advances in steps (measured on an H200: 0 J over 50 ms at 78 W). */
#define MP_MONITOR_COUNTER_MIN_S 1.0

typedef struct {
    double t0;
    int samples;
    time_mean load, power;
    double counter_start, counter_last; /* the energy counter at the window's first and last sample */
    double peak_mem;
} window;

struct mp_monitor {
    mp_monitor_opts o;
    mp_monitor_source src;
    bool has_gpu;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_on, stopping;
    double t_start;
    bool have_prev;
    mp_gpu_sample prev;
    double prev_t;
    window win, total;
    int csv_errno; /* first CSV write error, 0 = none */
};

static double monotonic_s(void *ctx) {
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(const mp_monitor *m) {
    return m->o.clock ? m->o.clock(m->o.clock_ctx) : monotonic_s(NULL);
}

static double peak_rss_mib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : NAN; /* ru_maxrss: KiB */
}

/* ---- windows ---------------------------------------------------------------- */

static void mean_add(time_mean *q, double prev, double cur, double dt, bool have_prev) {
    if (isnan(cur)) return;
    q->sum += cur;
    q->n++;
    if (have_prev && !isnan(prev) && dt > 0) {
        q->integral += 0.5 * (prev + cur) * dt;
        q->covered_s += dt;
    }
}

static double mean_get(const time_mean *q) {
    if (q->covered_s > 0) return q->integral / q->covered_s;
    return q->n ? q->sum / q->n : NAN;
}

/* A window starting at t, seeded with the sample s taken at t (or none). */
static void window_begin(window *w, double t, const mp_gpu_sample *s) {
    *w = (window){.t0 = t, .counter_start = NAN, .counter_last = NAN, .peak_mem = NAN};
    if (!s) return;
    w->samples = 1;
    mean_add(&w->load, NAN, s->gpu_load_pct, 0, false);
    mean_add(&w->power, NAN, s->power_w, 0, false);
    w->counter_start = w->counter_last = s->energy_j;
    w->peak_mem = s->mem_used_mib;
}

/* Adds sample s at time t; prev (at prev_t) is the sample before it. */
static void window_add(window *w, const mp_gpu_sample *prev, double prev_t, const mp_gpu_sample *s, double t) {
    if (w->samples == 0) {
        window_begin(w, w->t0, s);
        return;
    }
    double dt = prev ? t - prev_t : 0;
    mean_add(&w->load, prev ? prev->gpu_load_pct : NAN, s->gpu_load_pct, dt, prev != NULL);
    mean_add(&w->power, prev ? prev->power_w : NAN, s->power_w, dt, prev != NULL);
    w->counter_last = s->energy_j;
    if (!isnan(s->mem_used_mib) && !(s->mem_used_mib <= w->peak_mem)) w->peak_mem = s->mem_used_mib;
    w->samples++;
}

static mp_monitor_summary window_summary(const mp_monitor *m, const window *w, double t) {
    mp_monitor_summary r = {.wall_s = t - w->t0, .samples = w->samples, .peak_rss_mib = peak_rss_mib()};
    r.gpu = m->has_gpu && w->samples > 0;
    r.mean_load_pct = mean_get(&w->load);
    r.mean_power_w = mean_get(&w->power);
    r.peak_mem_used_mib = w->peak_mem;
    r.energy_j = NAN;
    /* the counter is coarse in time: trusted over windows of a second or more in which it moved */
    if (w->samples >= 2 && r.wall_s >= MP_MONITOR_COUNTER_MIN_S && !isnan(w->counter_start) &&
        !isnan(w->counter_last) && w->counter_last > w->counter_start) {
        r.energy_j = w->counter_last - w->counter_start;
        r.energy_from_counter = true;
    } else if (w->power.covered_s > 0) {
        r.energy_j = w->power.integral;
    }
    if (!r.gpu) r.mean_load_pct = r.mean_power_w = r.energy_j = r.peak_mem_used_mib = NAN;
    return r;
}

/* ---- samples ---------------------------------------------------------------- */

static void csv_field(FILE *f, const char *fmt, double v) {
    fputc(',', f);
    if (!isnan(v)) fprintf(f, fmt, v);
}

static void csv_row(mp_monitor *m, const mp_gpu_sample *s, double t) {
    FILE *f = m->o.csv;
    if (!f || m->csv_errno) return;
    struct timespec ts;
    struct tm tm;
    char stamp[32] = "";
    clock_gettime(CLOCK_REALTIME, &ts);
    if (localtime_r(&ts.tv_sec, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    errno = 0;
    fprintf(f, "%s.%03ld,%.3f", stamp, ts.tv_nsec / 1000000, t - m->t_start);
    csv_field(f, "%.0f", s->sm_clock_mhz);
    csv_field(f, "%.0f", s->mem_clock_mhz);
    csv_field(f, "%.0f", s->gpu_load_pct);
    csv_field(f, "%.0f", s->mem_used_mib);
    csv_field(f, "%.2f", s->power_w);
    csv_field(f, "%.0f", s->temp_c);
    csv_field(f, "%.0f", s->fan_pct);
    fputc('\n', f);
    if (fflush(f) != 0 || ferror(f)) m->csv_errno = errno ? errno : EIO;
}

/* Reads the source and records the sample at time t (taken just before the
 * read); called with mu held. Returns the sample through *out (when
 * non-NULL) and whether it was read. */
static bool sample_locked(mp_monitor *m, double t, mp_gpu_sample *out) {
    if (!m->has_gpu) return false;
    mp_gpu_sample s = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    if (!m->src.read(m->src.ctx, &s)) return false;
    csv_row(m, &s, t);
    const mp_gpu_sample *prev = m->have_prev ? &m->prev : NULL;
    window_add(&m->win, prev, m->prev_t, &s, t);
    window_add(&m->total, prev, m->prev_t, &s, t);
    m->prev = s;
    m->prev_t = t;
    m->have_prev = true;
    if (out) *out = s;
    return true;
}

/* ---- thread ----------------------------------------------------------------- */

static struct timespec deadline_after(const struct timespec *start, double seconds) {
    double ns = (double)start->tv_nsec + seconds * 1e9;
    struct timespec d = {start->tv_sec + (time_t)(ns / 1e9), 0};
    d.tv_nsec = (long)(ns - 1e9 * (double)(time_t)(ns / 1e9));
    if (d.tv_nsec >= 1000000000L) d.tv_sec++, d.tv_nsec -= 1000000000L;
    return d;
}

/* Samples at start + k * interval (no drift); deadlines already missed are
 * skipped, not caught up. */
static void *sampler(void *arg) {
    mp_monitor *m = arg;
    struct timespec start, cur;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long k = 1;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping) {
        struct timespec d = deadline_after(&start, k * m->o.interval_s);
        int rc = pthread_cond_timedwait(&m->cv, &m->mu, &d);
        if (m->stopping) break;
        if (rc != ETIMEDOUT) continue; /* spurious wake-up */
        sample_locked(m, now(m), NULL);
        clock_gettime(CLOCK_MONOTONIC, &cur);
        double elapsed = (double)(cur.tv_sec - start.tv_sec) + 1e-9 * (double)(cur.tv_nsec - start.tv_nsec);
        k++;
        if (k * m->o.interval_s < elapsed) k = (long)(elapsed / m->o.interval_s) + 1;
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- API -------------------------------------------------------------------- */

/* A failed write of the CSV (what: "cannot write", ...) as an error naming it. */
static mp_status csv_error(const mp_monitor_opts *o, const char *what, int e) {
    return mp_error(MP_ERR_IO, "monitor CSV%s%s: %s: %s", o->csv_name ? " " : "", o->csv_name ? o->csv_name : "",
                    what, strerror(e ? e : EIO));
}

static void close_source(mp_monitor_source *s) {
    if (s->close) s->close(s->ctx);
    s->close = NULL;
}

static void destroy(mp_monitor *m) {
    if (m->has_gpu) close_source(&m->src);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

mp_status mp_monitor_start(const mp_monitor_opts *o, mp_monitor **out) {
    *out = NULL;
    mp_monitor_source given = o->source ? *o->source : (mp_monitor_source){0};
    if (!(o->interval_s >= 0) || isinf(o->interval_s)) {
        close_source(&given);
        return mp_error(MP_ERR_INVALID_ARG, "monitor: interval %g s must be a finite number >= 0", o->interval_s);
    }
    mp_monitor *m = calloc(1, sizeof *m);
    if (!m) {
        close_source(&given);
        return mp_error(MP_ERR_NOMEM, "monitor: out of memory");
    }
    m->o = *o;
    m->o.source = NULL;
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);

    mp_status gpu = MP_OK;
    char why[512] = "";
    if (o->no_gpu) {
        close_source(&given);
    } else if (o->source) {
        m->src = given;
        m->has_gpu = given.read != NULL;
        if (!m->has_gpu) {
            close_source(&given);
            gpu = MP_ERR_UNSUPPORTED;
            snprintf(why, sizeof why, "monitor: the source has no read function");
        }
    } else {
        gpu = mp_monitor_source_nvml(o->device, &m->src);
        m->has_gpu = gpu == MP_OK;
        if (gpu != MP_OK) snprintf(why, sizeof why, "%s", mp_last_error());
    }
    if (o->csv && (fprintf(o->csv, "%s\n", MP_MONITOR_CSV_HEADER) < 0 || fflush(o->csv) != 0)) {
        const int e = errno;
        const mp_status s = csv_error(o, "cannot write", e);
        destroy(m);
        return s;
    }
    m->t_start = now(m);
    window_begin(&m->win, m->t_start, NULL);
    window_begin(&m->total, m->t_start, NULL);
    pthread_mutex_lock(&m->mu);
    sample_locked(m, m->t_start, NULL);
    pthread_mutex_unlock(&m->mu);
    if (m->has_gpu && o->interval_s > 0) {
        if (pthread_create(&m->thread, NULL, sampler, m) != 0) {
            destroy(m);
            return mp_error(MP_ERR_INTERNAL, "monitor: cannot start the sampler thread");
        }
        m->thread_on = true;
    }
    *out = m;
    return gpu == MP_OK ? MP_OK : mp_error(gpu, "%s", why);
}

bool mp_monitor_has_gpu(const mp_monitor *m) { return m && m->has_gpu; }

const char *mp_monitor_source_name(const mp_monitor *m) {
    return m && m->has_gpu && m->src.name ? m->src.name : "";
}

void mp_monitor_sample_now(mp_monitor *m) {
    pthread_mutex_lock(&m->mu);
    sample_locked(m, now(m), NULL);
    pthread_mutex_unlock(&m->mu);
}

mp_monitor_summary mp_monitor_mark(mp_monitor *m) {
    pthread_mutex_lock(&m->mu);
    mp_gpu_sample s;
    double t = now(m);
    bool got = sample_locked(m, t, &s);
    mp_monitor_summary r = window_summary(m, &m->win, t);
    window_begin(&m->win, t, got ? &s : NULL);
    pthread_mutex_unlock(&m->mu);
    return r;
}

mp_status mp_monitor_stop(mp_monitor *m, mp_monitor_summary *total) {
    if (!m) return MP_OK;
    pthread_mutex_lock(&m->mu);
    double t = now(m);
    sample_locked(m, t, NULL);
    m->stopping = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->thread_on) pthread_join(m->thread, NULL);
    if (total) *total = window_summary(m, &m->total, t);
    const mp_status s = m->csv_errno ? csv_error(&m->o, "cannot write a row", m->csv_errno) : MP_OK;
    destroy(m);
    return s;
}
