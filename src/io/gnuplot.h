/* gnuplot.h — the plots' gnuplot: find it on PATH and run a script written
 * into a folder (the bench's plots, `mixprec numerics plot`). */
#ifndef MP_IO_GNUPLOT_H
#define MP_IO_GNUPLOT_H

#include <stdio.h>

#include "mixprec.h"

/* Writes s to f as a gnuplot single-quoted string, quotes included: a quote
 * doubled (''), each control character (a newline would end the command) as
 * '?'. Neither macros (@) nor backquotes are expanded in such a string, so any
 * text written this way stays text. */
void mp_gnuplot_quoted(FILE *f, const char *s);

/* Whether an executable gnuplot is on PATH. */
bool mp_gnuplot_on_path(void);

/* `gnuplot script` in dir (its output to dir/gnuplot.log); a failure names
 * the script and quotes the log's last line. */
mp_status mp_gnuplot_run(const char *dir, const char *script);

#endif
