/* scaler_args.h — the loss scaler's command-line options (--loss-scale,
 * --loss-scale-growth, ...), one parser and one help text for every command
 * that trains: train (and doctor, which takes train's options) and
 * train-gan. */
#ifndef MP_CLI_SCALER_ARGS_H
#define MP_CLI_SCALER_ARGS_H

#include <stdio.h>

#include "mixprec.h"

/* argv[*i] as a scaler option: 1 when it was one (its value consumed, *i
 * advanced, *set true), 0 when it is not one, -1 after printing the error of
 * a missing or bad value. */
int scaler_arg_parse(const char *cmd, int argc, char **argv, int *i, mp_scaler_opts *s, bool *set);

/* The options' help lines. */
void scaler_args_help(FILE *f);

#endif
