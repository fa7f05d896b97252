/* numerics_cmd.c — `mixprec numerics plot FILE.jsonl [-o DIR]`: the numerics
 * log `train --numerics-log` writes, drawn as per-layer range bands over
 * training against the fp16/bf16 limits (amp/numerics_plot.h), SVG and PNG
 * by gnuplot. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "amp/numerics_plot.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/common_opts.h"
#include "core/error.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec numerics plot FILE.jsonl [-o DIR] [--highlight N]\n\n"
            "Draw a numerics log (`mixprec train --numerics-log FILE.jsonl`) as per-layer range bands over\n"
            "training: for every tensor its largest and smallest non-zero magnitude per logged step (log2\n"
            "axis), one panel each for activations, activation gradients and parameter gradients (gradients\n"
            "as logged: times the loss scale, as fp16 sees them), against fp16's limits (max 65504, min\n"
            "normal 2^-14, min subnormal 2^-24) and bf16's where the axis reaches them. The tensors closest\n"
            "to an fp16 limit are drawn in colour and named, the others grey.\n\n"
            "  -o, --out DIR       output folder (default .; created): STEM.svg, STEM.png, the gnuplot\n"
            "                      script STEM.gp and its data STEM_*.dat, STEM the log's name without .jsonl\n"
            "  --highlight N       tensors per panel drawn in colour (default 5)\n"
            "  -h, --help          this help\n\n"
            "Needs gnuplot (Debian gnuplot-nox); without it the script and data are written and the command\n"
            "fails saying so.\n\n" INPUT_FILES_HELP);
}

static int plot(int argc, char **argv) {
    const char *log = NULL, *dir = ".";
    int highlight = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        const bool out = !strcmp(a, "-o") || !strcmp(a, "--out"), hl = !strcmp(a, "--highlight");
        if (out || hl) {
            if (i + 1 >= argc) {
                fprintf(stderr, "mixprec numerics plot: %s needs a value (see --help)\n", a);
                return 2;
            }
            if (out) dir = argv[++i];
            else if (!arg_int("numerics plot", a, argv[++i], 0, 10, &highlight)) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "mixprec numerics plot: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (log) {
            fprintf(stderr, "mixprec numerics plot: one log file, not '%s' and '%s'\n", log, a);
            return 2;
        } else {
            log = a;
        }
    }
    if (!log) {
        fprintf(stderr, "mixprec numerics plot: which log? (usage: mixprec numerics plot FILE.jsonl [-o DIR])\n");
        return 2;
    }
    int rc = cli_check_output_dir("numerics plot", "-o", dir);
    if (rc) return rc;
    if (!cli_make_dirs(dir)) {
        fprintf(stderr, "mixprec numerics plot: -o %s: cannot create directory: %s\n", dir, strerror(errno));
        return 2;
    }
    mp_numerics_plot_result r;
    if (mp_numerics_plot(log, dir, highlight, &r) != MP_OK) {
        fprintf(stderr, "mixprec numerics plot: %s\n", mp_last_error());
        return 1;
    }
    printf("%d records, %d tensors: %s, %s\n", r.records, r.tensors, r.svg, r.png);
    return 0;
}

int cmd_numerics(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "plot")) return plot(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "mixprec numerics: %s (the subcommand is `plot`; see `mixprec numerics plot --help`)\n",
            argc < 2 ? "which subcommand?" : "unknown subcommand");
    return 2;
}
