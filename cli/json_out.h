/* json_out.h — writing JSON strings for the CLI's --json outputs. */
#ifndef MP_CLI_JSON_OUT_H
#define MP_CLI_JSON_OUT_H

#include <stdio.h>

/* s as a JSON string literal (quotes, backslashes and control characters
 * escaped) on f. */
void cli_json_string(FILE *f, const char *s);

#endif
