/* report_plot.c — the benchmark's plots: per model, time per epoch, speed-up
 * and test accuracy against batch size, a line per precision, as SVG and PNG,
 * for the cells of 1 GPU (the first GPU count when the matrix has no 1).
 * Writes plotdata/<model>_<precision>.dat and plots.gp into the output folder
 * and runs gnuplot there (fork + exec), checking its exit status. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/matrix.h"
#include "core/error.h"
#include "io/gnuplot.h"
#include "io/output_path.h"

typedef struct {
    const char *file;   /* time, speedup, accuracy */
    const char *title;
    const char *ylabel;
    int column;         /* in the data files */
    bool percent, from_zero;
} plot_kind;

static const plot_kind plot_kinds[] = {
    {"time", "training time per epoch", "seconds per epoch", 2, false, true},
    {"speedup", "speed-up vs fp32 (T_fp32 / T - 1)", "speed-up", 3, true, false},
    {"accuracy", "test accuracy", "test accuracy", 4, true, false},
};

/* Characters safe in a file name; others become '_'. */
static void safe_name(char *dst, size_t n, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) {
        char ch = src[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                  ch == '.' || ch == '+';
        dst[i] = ok ? ch : '_';
    }
    dst[i] = '\0';
}

static double cell_value(const mp_bench_cell *c, int column) {
    if (c->status != MP_CELL_OK) return NAN;
    switch (column) {
    case 2: return c->time_per_epoch_s;
    case 3: return 100 * c->speedup;
    case 4: return 100 * c->res.test_acc;
    default: return c->res.images_per_s;
    }
}

/* The GPU count the plots show: 1, else the first. */
static int plotted_gpus(const mp_bench_opts *o) {
    int one = mp_bench_one_gpu_index(o);
    return one >= 0 ? one : 0;
}

static void data_path(char *buf, size_t n, const mp_bench_matrix *m, int model, int precision) {
    char sm[128], sp[64];
    safe_name(sm, sizeof sm, m->o->models[model]);
    safe_name(sp, sizeof sp, mp_precision_name(m->o->precisions[precision]));
    snprintf(buf, n, "plotdata/%s_%s.dat", sm, sp);
}

static mp_status write_data(const char *dir, const mp_bench_matrix *m, int model, int precision) {
    const mp_bench_opts *o = m->o;
    char rel[256], path[4096];
    data_path(rel, sizeof rel, m, model, precision);
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f;
    MP_TRY(mp_output_open(path, NULL, false, &f));
    fprintf(f, "# %s %s: batch time_per_epoch_s speedup_pct test_acc_pct images_per_s (? = missing)\n",
            o->models[model], mp_precision_name(o->precisions[precision]));
    for (int b = 0; b < o->n_batches; b++) {
        const mp_bench_cell *c = mp_bench_cell_at(m, model, plotted_gpus(m->o), precision, b);
        fprintf(f, "%d", c->batch);
        for (int col = 2; col <= 5; col++) {
            double v = cell_value(c, col);
            if (isfinite(v)) fprintf(f, " %.6g", v);
            else fputs(" ?", f);
        }
        fputc('\n', f);
    }
    MP_TRY(mp_output_close(f, path, NULL));
    return MP_OK;
}

static bool has_values(const mp_bench_matrix *m, int model, int precision, int column) {
    for (int b = 0; b < m->o->n_batches; b++)
        if (isfinite(cell_value(mp_bench_cell_at(m, model, plotted_gpus(m->o), precision, b), column))) return true;
    return false;
}

static void script_header(FILE *f, const mp_bench_matrix *m) {
    const mp_bench_opts *o = m->o;
    int lo = o->batches[0], hi = o->batches[0];
    for (int b = 1; b < o->n_batches; b++) {
        if (o->batches[b] < lo) lo = o->batches[b];
        if (o->batches[b] > hi) hi = o->batches[b];
    }
    fputs("# plots.gp - written by `mixprec bench`; `gnuplot plots.gp` in this folder redraws the plots.\n"
          "set datafile missing '?'\nset grid\nset key outside right top noenhanced\nset logscale x 2\n"
          "set xlabel 'batch size'\nset pointsize 1.3\n", f);
    /* a margin of half a doubling on either side keeps the end points off the frame */
    fprintf(f, "set xrange [%g:%g]\nset xtics (", lo / 1.41, hi * 1.41);
    for (int b = 0; b < o->n_batches; b++) fprintf(f, "%s'%d' %d", b ? ", " : "", o->batches[b], o->batches[b]);
    fputs(")\nsvg_term = \"svg size 800,500 dynamic noenhanced font 'sans,12'\"\n"
          "png_term = strstrt(GPVAL_TERMINALS, 'pngcairo') > 0 ? "
          "\"pngcairo size 800,500 noenhanced font 'sans,11'\" : \"png size 800,500 noenhanced\"\n",
          f);
}

/* One plot (both formats); returns the number of image files it makes. */
static int script_plot(FILE *f, const mp_bench_matrix *m, int model, const plot_kind *k) {
    const mp_bench_opts *o = m->o;
    int lines = 0;
    for (int p = 0; p < o->n_precisions; p++) lines += has_values(m, model, p, k->column);
    if (!lines) return 0;
    char sm[128];
    safe_name(sm, sizeof sm, o->models[model]);
    int gpus = o->gpus[plotted_gpus(o)];
    char on_gpus[32] = "";
    if (gpus > 1) snprintf(on_gpus, sizeof on_gpus, ", %d GPUs", gpus);
    /* the data name is the user's --data text: every string goes through mp_gnuplot_quoted */
    char text[8192];
    snprintf(text, sizeof text, "%s on %s%s: %s", sm, o->data_name, on_gpus, k->title);
    fputs("\nset title ", f);
    mp_gnuplot_quoted(f, text);
    fputs(" noenhanced\nset ylabel ", f);
    mp_gnuplot_quoted(f, k->ylabel);
    fprintf(f, "\nset format y '%s'\nset yrange [%s:*]\n", k->percent ? "%g%%" : "%g", k->from_zero ? "0" : "*");
    snprintf(text, sizeof text, "%s_%s.svg", k->file, sm);
    fputs("set terminal @svg_term\nset output ", f);
    mp_gnuplot_quoted(f, text);
    fputs("\nplot ", f);
    int written = 0;
    for (int p = 0; p < o->n_precisions; p++) {
        if (!has_values(m, model, p, k->column)) continue;
        data_path(text, sizeof text, m, model, p);
        fputs(written++ ? ", \\\n     " : "", f);
        mp_gnuplot_quoted(f, text);
        fprintf(f, " using 1:%d with linespoints lw 2 title ", k->column);
        mp_gnuplot_quoted(f, mp_precision_name(o->precisions[p]));
    }
    snprintf(text, sizeof text, "%s_%s.png", k->file, sm);
    fputs("\nset terminal @png_term\nset output ", f);
    mp_gnuplot_quoted(f, text);
    fputs("\nreplot\nunset output\n", f);
    return 2;
}

mp_status mp_bench_write_plots(const char *dir, const mp_bench_matrix *m, int *n_images) {
    const mp_bench_opts *o = m->o;
    *n_images = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/plotdata", dir);
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return mp_error(MP_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
    for (int model = 0; model < o->n_models; model++)
        for (int p = 0; p < o->n_precisions; p++) MP_TRY(write_data(dir, m, model, p));
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    FILE *f;
    MP_TRY(mp_output_open(path, NULL, false, &f));
    script_header(f, m);
    int images = 0;
    for (int model = 0; model < o->n_models; model++)
        for (size_t k = 0; k < sizeof plot_kinds / sizeof *plot_kinds; k++)
            images += script_plot(f, m, model, &plot_kinds[k]);
    MP_TRY(mp_output_close(f, path, NULL));
    if (!images) return MP_OK;
    if (!mp_gnuplot_on_path())
        return mp_error(MP_ERR_UNSUPPORTED, "gnuplot not found on PATH: no plots drawn (install the Debian package "
                                            "gnuplot-nox, then run `gnuplot plots.gp` in %s)", dir);
    MP_TRY(mp_gnuplot_run(dir, "plots.gp"));
    *n_images = images;
    return MP_OK;
}
