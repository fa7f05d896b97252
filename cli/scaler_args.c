/* scaler_args.c — the loss scaler's command-line options (scaler_args.h). */
#include "cli/scaler_args.h"

#include <string.h>

#include "cli/args.h"

void scaler_args_help(FILE *f) {
    fprintf(f, "  --loss-scale S      static loss scale S, 'dynamic' (the default, starting at 65536) or\n"
               "                      'dynamic:X' (starting at X)\n"
               "  --loss-scale-growth X   dynamic growth factor (default 2)\n"
               "  --loss-scale-backoff X  dynamic backoff factor (default 0.5)\n"
               "  --loss-scale-window N   clean steps before growing (default 2000)\n"
               "  --min-loss-scale X / --max-loss-scale X   clamps (Apex: max 16777216; the dynamic scale\n"
               "                      starts at 65536 clamped into them)\n"
               "  --loss-scale-hysteresis N  absorb N-1 overflows before backing off (DeepSpeed)\n");
}

static const char *const OPTIONS[] = {"--loss-scale",     "--loss-scale-growth", "--loss-scale-backoff",
                                      "--loss-scale-window", "--min-loss-scale", "--max-loss-scale",
                                      "--loss-scale-hysteresis"};

int scaler_arg_parse(const char *cmd, int argc, char **argv, int *i, mp_scaler_opts *s, bool *set) {
    const char *a = argv[*i], *v = NULL;
    const int taken = arg_option_value(cmd, argc, argv, i, OPTIONS, sizeof OPTIONS / sizeof *OPTIONS, &v);
    if (taken <= 0) return taken;
    bool ok = true;
    if (!strcmp(a, "--loss-scale")) {
        if (!strcmp(v, "dynamic")) { /* the default: an earlier --loss-scale's static or initial scale goes */
            s->static_scale = false;
            s->init_scale = 0;
        } else if (!strncmp(v, "dynamic:", 8)) {
            ok = arg_float(cmd, "--loss-scale dynamic:", v + 8, 0, 3.4e38, &s->init_scale);
            if (ok && !(s->init_scale > 0)) {
                fprintf(stderr, "mixprec %s: --loss-scale %s: the initial scale must be a number > 0\n", cmd, v);
                ok = false;
            }
            s->static_scale = false;
        } else {
            ok = arg_float(cmd, a, v, 0, 3.4e38, &s->init_scale);
            if (ok && !(s->init_scale > 0)) {
                fprintf(stderr, "mixprec %s: --loss-scale %s must be a number > 0 or 'dynamic'\n", cmd, v);
                ok = false;
            }
            s->static_scale = true;
        }
    } else if (!strcmp(a, "--loss-scale-growth")) {
        ok = arg_float(cmd, a, v, -1e30, 1e30, &s->growth_factor);
    } else if (!strcmp(a, "--loss-scale-backoff")) {
        ok = arg_float(cmd, a, v, -1e30, 1e30, &s->backoff_factor);
    } else if (!strcmp(a, "--loss-scale-window")) {
        ok = arg_int(cmd, a, v, 1, 1 << 30, &s->growth_interval);
    } else if (!strcmp(a, "--min-loss-scale")) {
        ok = arg_float(cmd, a, v, 0, 3.4e38, &s->min_scale);
    } else if (!strcmp(a, "--max-loss-scale")) {
        ok = arg_float(cmd, a, v, 0, 3.4e38, &s->max_scale);
    } else {
        ok = arg_int(cmd, a, v, 0, 1 << 20, &s->hysteresis);
    }
    if (!ok) return -1;
    *set = true;
    return 1;
}
