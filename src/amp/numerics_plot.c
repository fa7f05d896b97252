/* numerics_plot.c — a numerics log drawn as range bands (numerics_plot.h):
 * the JSONL read line by line with cJSON into one series per (tensor, kind),
 * each series' steps written as a gnuplot data block (step, smallest
 * non-zero |x|, largest |x|), one data file and one panel per kind, and a
 * script drawing the panels stacked, run by gnuplot (io/gnuplot.h). */
#include "amp/numerics_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "io/gnuplot.h"
#include "io/input_file.h"
#include "io/output_path.h"

#define PANELS 3
#define LOG_MAX_LINE (64 << 20) /* bytes: far above a log line of any model */
static const char *const kind_key[PANELS] = {"output", "grad", "param_grad"};
static const char *const kind_title[PANELS] = {
    "activations (forward outputs)",
    "activation gradients (x loss scale, as fp16 sees them)",
    "parameter gradients (x loss scale, as fp16 sees them)",
};

typedef struct {
    char name[96];
    int kind, n, cap;
    double *step, *lo, *hi;
    unsigned char *bad; /* NaN or inf among the values at that step */
    int n_bad;
    double margin; /* octaves to the nearest fp16 limit (negative: beyond it; -inf: NaN/inf seen) */
} series;

typedef struct {
    series *s;
    int n, cap;
} series_set;

static void set_free(series_set *ss) {
    for (int i = 0; i < ss->n; i++) free(ss->s[i].step), free(ss->s[i].lo), free(ss->s[i].hi), free(ss->s[i].bad);
    free(ss->s);
}

/* Characters safe in a file name and inside gnuplot's single quotes. */
static void safe(char *dst, size_t n, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) {
        const char c = src[i];
        dst[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                         c == '+' || c == '_'
                     ? c
                     : '_';
    }
    dst[i] = '\0';
}

static series *find_or_add(series_set *ss, const char *name, int kind) {
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].kind == kind && !strcmp(ss->s[i].name, name)) return &ss->s[i];
    if (ss->n == ss->cap) {
        const int cap = ss->cap ? 2 * ss->cap : 32;
        series *p = realloc(ss->s, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        ss->s = p, ss->cap = cap;
    }
    series *s = &ss->s[ss->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = kind;
    return s;
}

static mp_status push(series *s, double step, double lo, double hi, bool bad) {
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 64;
        double *a = realloc(s->step, (size_t)cap * sizeof *a);
        if (a) s->step = a;
        double *b = realloc(s->lo, (size_t)cap * sizeof *b);
        if (b) s->lo = b;
        double *c = realloc(s->hi, (size_t)cap * sizeof *c);
        if (c) s->hi = c;
        unsigned char *d = realloc(s->bad, (size_t)cap * sizeof *d);
        if (d) s->bad = d;
        if (!a || !b || !c || !d) return mp_error(MP_ERR_NOMEM, "numerics plot: out of memory");
        s->cap = cap;
    }
    s->step[s->n] = step, s->lo[s->n] = lo, s->hi[s->n] = hi, s->bad[s->n] = bad;
    s->n++, s->n_bad += bad;
    return MP_OK;
}

static const cJSON *number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 ? v : NULL;
}

/* One log line into ss. */
static mp_status read_line(const char *path, long line, const char *text, size_t len, series_set *ss) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return mp_error(MP_ERR_FORMAT, "%s:%ld: not JSON (a numerics log has one JSON object per line)", path, line);
    mp_status s = MP_OK;
    const cJSON *step = number(root, "step"), *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!cJSON_IsObject(root)) s = mp_error(MP_ERR_FORMAT, "%s:%ld: not a JSON object", path, line);
    else if (!step) s = mp_error(MP_ERR_FORMAT, "%s:%ld: step: missing or not a number >= 0", path, line);
    else if (!cJSON_IsArray(tensors)) s = mp_error(MP_ERR_FORMAT, "%s:%ld: tensors: missing or not an array", path, line);
    int k = 0;
    for (const cJSON *t = s == MP_OK ? tensors->child : NULL; s == MP_OK && t; t = t->next, k++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"), *kind = cJSON_GetObjectItemCaseSensitive(t, "kind");
        const cJSON *amax = number(t, "amax"), *amin = number(t, "amin_nonzero");
        const char *bad = !cJSON_IsObject(t)       ? ""
                          : !cJSON_IsString(name)  ? ".name"
                          : !cJSON_IsString(kind)  ? ".kind"
                          : !amax                  ? ".amax"
                          : !amin                  ? ".amin_nonzero"
                                                   : NULL;
        if (bad) {
            s = mp_error(MP_ERR_FORMAT, "%s:%ld: tensors[%d]%s: missing or of the wrong type", path, line, k, bad);
            break;
        }
        int p = -1;
        for (int q = 0; q < PANELS; q++)
            if (!strcmp(kind->valuestring, kind_key[q])) p = q;
        if (p < 0 && strcmp(kind->valuestring, "param")) {
            s = mp_error(MP_ERR_FORMAT, "%s:%ld: tensors[%d].kind: '%.40s' unknown (output, grad, param, param_grad)",
                         path, line, k, kind->valuestring);
            break;
        }
        if (p < 0) continue; /* parameters: not drawn */
        /* amax and amin cover finite values only: NaN/inf (counts, absent in
         * older logs) are marked beside them */
        const cJSON *nan = number(t, "nan"), *inf = number(t, "inf");
        const bool nonfinite = (nan && nan->valuedouble > 0) || (inf && inf->valuedouble > 0);
        series *se = find_or_add(ss, name->valuestring, p);
        s = se ? push(se, step->valuedouble, amin->valuedouble, amax->valuedouble, nonfinite)
               : mp_error(MP_ERR_NOMEM, "numerics plot: out of memory");
    }
    cJSON_Delete(root);
    return s;
}

/* The next line of f into *buf without its newline (*len; *got false at the
 * end of the file). A line longer than LOG_MAX_LINE is an error naming the
 * file and line: an endless one is never held whole in memory. */
static mp_status next_line(FILE *f, const char *path, long line, char **buf, size_t *cap, size_t *len, bool *got) {
    *len = 0, *got = false;
    for (int c; (c = getc_unlocked(f)) != EOF;) {
        *got = true;
        if (c == '\n') return MP_OK;
        if (*len >= LOG_MAX_LINE)
            return mp_error(MP_ERR_FORMAT, "%s:%ld: a line longer than %d MiB: not a numerics log", path, line,
                            LOG_MAX_LINE >> 20);
        if (*len + 1 >= *cap) {
            const size_t n = *cap ? 2 * *cap : 4096;
            char *p = realloc(*buf, n);
            if (!p) return mp_error(MP_ERR_NOMEM, "%s:%ld: out of memory", path, line);
            *buf = p, *cap = n;
        }
        (*buf)[(*len)++] = (char)c;
    }
    return MP_OK;
}

static mp_status read_log(const char *path, series_set *ss, int *records) {
    *records = 0;
    FILE *f;
    MP_TRY(mp_input_fopen(path, &f, NULL)); /* never blocks on a FIFO or reads a device */
    char *buf = NULL;
    size_t cap = 0, len;
    long line = 0;
    bool got = true;
    mp_status s = MP_OK;
    while (s == MP_OK && (s = next_line(f, path, ++line, &buf, &cap, &len, &got)) == MP_OK && got) {
        while (len > 0 && buf[len - 1] == '\r') len--;
        if (len == 0) continue;
        s = read_line(path, line, buf, len, ss);
        *records += s == MP_OK;
    }
    if (s == MP_OK && ferror(f)) s = mp_error(MP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    if (s == MP_OK && *records == 0)
        s = mp_error(MP_ERR_FORMAT, "%s: no records (an empty numerics log; `mixprec train --numerics-log` writes one)",
                     path);
    if (s == MP_OK && ss->n == 0) s = mp_error(MP_ERR_FORMAT, "%s: no activation or gradient statistics to plot", path);
    bool drawable = false;
    for (int i = 0; s == MP_OK && i < ss->n; i++)
        for (int k = 0; k < ss->s[i].n; k++) drawable = drawable || ss->s[i].hi[k] > 0 || ss->s[i].bad[k];
    if (s == MP_OK && !drawable)
        s = mp_error(MP_ERR_FORMAT, "%s: every tensor is zero at every step: nothing to plot", path);
    return s;
}

/* Octaves from the series' range to the nearest fp16 limit (65504, 2^-24). */
static double margin(const series *s) {
    if (s->n_bad) return -INFINITY;
    double m = INFINITY;
    for (int i = 0; i < s->n; i++) {
        if (s->hi[i] > 0) m = fmin(m, log2(65504.0) - log2(s->hi[i]));
        if (s->lo[i] > 0) m = fmin(m, log2(s->lo[i]) + 24);
    }
    return m;
}

static mp_status write_data(const char *path, const series_set *ss, int panel) {
    FILE *f;
    MP_TRY(mp_output_open(path, NULL, false, &f));
    fprintf(f, "# %s: one block per tensor: step smallest_nonzero_abs largest_abs (? = none) nan_or_inf (1 = some)\n",
            kind_key[panel]);
    int block = 0;
    for (int i = 0; i < ss->n; i++) {
        const series *s = &ss->s[i];
        if (s->kind != panel) continue;
        fprintf(f, "%s# %s\n", block++ ? "\n\n" : "", s->name);
        for (int k = 0; k < s->n; k++) {
            fprintf(f, "%.17g", s->step[k]);
            if (s->lo[k] > 0) fprintf(f, " %.9g", s->lo[k]);
            else fputs(" ?", f);
            if (s->hi[k] > 0) fprintf(f, " %.9g", s->hi[k]);
            else fputs(" ?", f);
            fprintf(f, " %d\n", s->bad[k] ? 1 : 0);
        }
    }
    return mp_output_close(f, path, NULL);
}

static const char *const colours[] = {"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f"};

static int by_margin(const void *a, const void *b) {
    const series *x = *(series *const *)a, *y = *(series *const *)b;
    return (x->margin > y->margin) - (x->margin < y->margin);
}

/* One panel: grey bands for every tensor, the `highlight` closest to a limit
 * in colour, the fp16 (and, in range, bf16) limits as lines. */
static mp_status script_panel(FILE *f, const char *stem, series_set *ss, int panel, int highlight, bool last) {
    int n = 0, n_bad = 0;
    double lo = INFINITY, hi = 0;
    series **order = malloc((size_t)(ss->n ? ss->n : 1) * sizeof *order);
    if (!order) return mp_error(MP_ERR_NOMEM, "numerics plot: out of memory");
    for (int i = 0; i < ss->n; i++) {
        series *s = &ss->s[i];
        if (s->kind != panel) continue;
        s->margin = margin(s);
        order[n++] = s;
        n_bad += s->n_bad > 0;
        for (int k = 0; k < s->n; k++) {
            if (s->lo[k] > 0) lo = fmin(lo, s->lo[k]);
            hi = fmax(hi, s->hi[k]);
        }
    }
    const int shown = n < highlight ? n : highlight;
    fprintf(f, "\nset title '%s: %d tensor%s, the %d closest to an fp16 limit in colour%s' noenhanced\n",
            kind_title[panel], n, n == 1 ? "" : "s", shown, n_bad ? "; red x at the top: NaN/inf at that step" : "");
    if (last) fputs("set xlabel 'optimizer step'\n", f);
    else fputs("unset xlabel\n", f);
    if (!n) {
        fputs("unset key\nset yrange [2**-26:2**18]\nset xrange [0:1]\nplot 65504 with lines lc rgb '#000000' "
              "notitle\nset xrange [*:*]\n", f);
        free(order);
        return MP_OK;
    }
    qsort(order, (size_t)n, sizeof *order, by_margin);
    const double ylo = fmin(exp2(-26), isfinite(lo) ? lo / 4 : 1), yhi = fmax(exp2(18), hi * 4);
    fprintf(f, "set key outside right top noenhanced\nset yrange [%.6g:%.6g]\n", ylo, yhi);
    char data[600];
    snprintf(data, sizeof data, "%s_%s.dat", stem, kind_key[panel]);
    fprintf(f, "plot for [i=0:%d] '%s' index i using 1:2:3 with filledcurves fc rgb '#b0b0b0' "
               "fs transparent solid 0.3 noborder notitle", n - 1, data);
    if (n_bad) /* NaN/inf: a mark at the panel's top, whatever the finite range */
        fprintf(f, ", \\\n  for [i=0:%d] '%s' index i using 1:($4 > 0 ? %.6g : 1/0) with points pt 2 ps 1.2 "
                   "lc rgb '#ff0000' notitle", n - 1, data, yhi / 2);
    for (int h = 0; h < shown; h++) {
        int idx = 0; /* the series' block in the data file */
        for (int i = 0; i < ss->n && &ss->s[i] != order[h]; i++) idx += ss->s[i].kind == panel;
        char name[96];
        safe(name, sizeof name, order[h]->name);
        const char *c = colours[h % (sizeof colours / sizeof *colours)];
        fprintf(f, ", \\\n  '%s' index %d using 1:2:3 with filledcurves fc rgb '%s' fs transparent solid 0.25 "
                   "noborder notitle, \\\n  '' index %d using 1:3 with linespoints pt 7 ps 0.4 lw 1.5 lc rgb '%s' "
                   "title '%s', \\\n  '' index %d using 1:2 with lines dt 2 lw 1.5 lc rgb '%s' notitle",
                data, idx, c, idx, c, name, idx, c);
    }
    const struct {
        double v;
        const char *label, *colour;
        int dt;
    } limits[] = {
        {65504, "fp16 max 65504", "#000000", 1},
        {exp2(-14), "fp16 min normal 2^-14", "#000000", 2},
        {exp2(-24), "fp16 min subnormal 2^-24", "#000000", 3},
        {3.3895313892515355e38, "bf16 max 3.39e38", "#8b4513", 1},
        {exp2(-126), "bf16 min normal 2^-126", "#8b4513", 2},
        {exp2(-133), "bf16 min subnormal 2^-133", "#8b4513", 3},
    };
    for (size_t k = 0; k < sizeof limits / sizeof *limits; k++)
        if (limits[k].v >= ylo && limits[k].v <= yhi)
            fprintf(f, ", \\\n  %.17g with lines lw 2 dt %d lc rgb '%s' title '%s'", limits[k].v, limits[k].dt,
                    limits[k].colour, limits[k].label);
    fputc('\n', f);
    free(order);
    return MP_OK;
}

mp_status mp_numerics_plot(const char *log, const char *dir, int highlight, mp_numerics_plot_result *r) {
    memset(r, 0, sizeof *r);
    series_set ss = {0};
    mp_status s = read_log(log, &ss, &r->records);
    r->tensors = ss.n;
    char stem[256], path[4600];
    const char *base = strrchr(log, '/');
    safe(stem, sizeof stem, base ? base + 1 : log);
    const size_t sl = strlen(stem);
    if (sl > 6 && !strcmp(stem + sl - 6, ".jsonl")) stem[sl - 6] = '\0';
    for (int p = 0; s == MP_OK && p < PANELS; p++) {
        snprintf(path, sizeof path, "%s/%s_%s.dat", dir, stem, kind_key[p]);
        s = write_data(path, &ss, p);
    }
    FILE *f = NULL;
    snprintf(path, sizeof path, "%s/%s.gp", dir, stem);
    if (s == MP_OK) s = mp_output_open(path, NULL, false, &f);
    if (s == MP_OK) {
        fprintf(f, "# %s.gp - written by `mixprec numerics plot`; `gnuplot %s.gp` in this folder redraws %s.svg and "
                   "%s.png.\n# Bands: each tensor's smallest non-zero |x| (dashed) to its largest |x| (solid) per "
                   "logged step.\nset datafile missing '?'\nset grid\nset logscale y 2\nset format y '2^{%%L}'\n"
                   "set lmargin 12\nset rmargin 34\n",
                stem, stem, stem, stem);
        for (int t = 0; s == MP_OK && t < 2; t++) {
            if (t == 0) fprintf(f, "\nset terminal svg size 1100,1200 dynamic enhanced font 'sans,11'\n");
            else fputs("\nif (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n  set terminal pngcairo size 1100,1200 "
                       "enhanced font 'sans,10'\n} else {\n  set terminal png size 1100,1200\n}\n", f);
            fprintf(f, "set output '%s.%s'\nset multiplot layout 3,1 title \"numerics log %s: per-tensor range over "
                       "training against the fp16/bf16 limits\\nband per tensor and step: smallest non-zero |x| "
                       "(dashed) to largest |x| (solid)\" noenhanced\n", stem, t ? "png" : "svg", stem);
            for (int p = 0; s == MP_OK && p < PANELS; p++) s = script_panel(f, stem, &ss, p, highlight, p == PANELS - 1);
            fputs("unset multiplot\nunset output\n", f);
        }
        mp_status c = mp_output_close(f, path, NULL);
        if (s == MP_OK) s = c;
    }
    set_free(&ss);
    if (s != MP_OK) return s;
    if (!mp_gnuplot_on_path())
        return mp_error(MP_ERR_UNSUPPORTED, "gnuplot not found on PATH: no plot drawn (install the Debian package "
                                            "gnuplot-nox, then run `gnuplot %s.gp` in %s)", stem, dir);
    snprintf(path, sizeof path, "%s.gp", stem);
    MP_TRY(mp_gnuplot_run(dir, path));
    snprintf(r->svg, sizeof r->svg, "%s/%s.svg", dir, stem);
    snprintf(r->png, sizeof r->png, "%s/%s.png", dir, stem);
    return MP_OK;
}
