/* args.h — strict option parsing for the CLI: every value is checked and a
 * bad one names the option and the text given. */
#ifndef MP_CLI_ARGS_H
#define MP_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns false after printing "mixprec <cmd>: --opt 'text': why". */
bool arg_int(const char *cmd, const char *opt, const char *text, int lo, int hi, int *out);
bool arg_u64(const char *cmd, const char *opt, const char *text, uint64_t *out);
bool arg_float(const char *cmd, const char *opt, const char *text, double lo, double hi, float *out);
/* arg_float's double twin, for values a float would move (a fraction such as 0.35) */
bool arg_double(const char *cmd, const char *opt, const char *text, double lo, double hi, double *out);
/* --monitor-interval S: 0 (off) or 0.01 .. 86400 seconds; one error line otherwise. */
bool arg_monitor_interval(const char *cmd, const char *opt, const char *text, float *out);
/* argv[*i] as one of the n options that take a value (options[]): 1 with
 * *value its value and *i advanced past it, 0 when it is none of them, -1
 * after printing "mixprec <cmd>: --opt needs a value". */
int arg_option_value(const char *cmd, int argc, char **argv, int *i, const char *const *options, size_t n,
                     const char **value);
/* n (1..8) decimal integers in [lo, hi] joined by 'x' ("3x32x32") into out,
 * or false after printing "--opt 'text' must be <form>, each an integer in lo..hi". */
bool arg_dims(const char *cmd, const char *opt, const char *text, int n, int lo, int hi, const char *form, int *out);
/* "CxHxW", each in 1..4096 */
bool arg_shape3(const char *cmd, const char *opt, const char *text, int *c, int *h, int *w);

#endif
