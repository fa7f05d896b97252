/* progress.c — see progress.h. */
#include "train/progress.h"

#include <time.h>
#include <unistd.h>

void mp_progress_begin(mp_progress *p, FILE *out, int epoch, int epochs, int total) {
    p->out = out;
    p->tty = isatty(fileno(out));
    p->total = total;
    p->start = mp_now_seconds();
    p->last_draw = 0;
    p->last_printed = 0;
    fprintf(out, "Epoch %d/%d\n", epoch, epochs);
    fflush(out);
}

static void draw(mp_progress *p, int step, double loss, double acc) {
    double el = mp_now_seconds() - p->start;
    char bar[31];
    int fill = p->total ? (int)(30.0 * step / p->total) : 30;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : '.');
    bar[30] = '\0';
    fprintf(p->out, "%s%5d/%d [%s] - %.0fs %.0fms/step - loss: %.4f - acc: %.4f%s", p->tty ? "\r" : "", step,
            p->total, bar, el, 1000.0 * el / (step ? step : 1), loss, acc, p->tty ? "" : "\n");
    fflush(p->out);
}

void mp_progress_update(mp_progress *p, int step, double loss, double acc) {
    if (p->tty) {
        double now = mp_now_seconds();
        if (now - p->last_draw < 0.1 && step != p->total) return;
        p->last_draw = now;
        draw(p, step, loss, acc);
    } else {
        int every = p->total >= 10 ? p->total / 10 : 1;
        if (step - p->last_printed >= every || step == p->total) {
            p->last_printed = step;
            draw(p, step, loss, acc);
        }
    }
}

void mp_progress_end(mp_progress *p) {
    if (p->tty) fputc('\n', p->out);
    fflush(p->out);
}
