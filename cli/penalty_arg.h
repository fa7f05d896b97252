/* penalty_arg.h — the --gradient-penalty KIND:WEIGHT option of `mixprec
 * train` (l2) and `mixprec train-gan` (r1, wgan-gp). */
#ifndef MP_CLI_PENALTY_ARG_H
#define MP_CLI_PENALTY_ARG_H

#include <stdbool.h>

#include "mixprec.h"

/* Parses text into *kind and *weight; gan: the command is train-gan. Returns
 * false after printing "mixprec <cmd>: --gradient-penalty 'text': why"
 * (malformed, unknown kind, a kind of the other command, a weight that is
 * negative or not a finite number). */
bool penalty_arg_parse(const char *cmd, const char *text, bool gan, mp_penalty_kind *kind, float *weight);

#endif
