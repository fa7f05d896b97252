/* main.c — the `mixprec` command: dispatch to subcommands. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec <command> [options]\n\n"
            "Mixed-precision training of neural networks (fp32/fp16/bf16) on CPUs and GPUs.\n\n"
            "commands:\n"
            "  train     train a model (bare `mixprec train` trains the default CNN on Fashion-MNIST)\n"
            "  train-gan train an AC-GAN; a sample grid per epoch, per-batch times (JSONL)\n"
            "  doctor    probe a run in fp32, predict where fp16/bf16 fails, write the policy avoiding it\n"
            "  numerics  plot a numerics log (train --numerics-log): per-layer ranges vs the fp16/bf16 limits\n"
            "  bench     train a models x precisions x batch sizes matrix; tables, JSONL and plots\n"
            "  eval      accuracy and loss of a checkpoint or ONNX model on a dataset, in any precision\n"
            "  export    write a trained model as an ONNX model (--format onnx)\n"
            "  info      devices, CPU features, tensor-core dtypes and library versions (--json)\n"
            "  version   print the version\n\n"
            "`mixprec <command> --help` describes each command's options.\n");
}

/* `mixprec version`: no options but --help. */
static int cmd_version(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: mixprec version\n\nPrint mixprec's version.\n");
            return 0;
        }
        fprintf(stderr, "mixprec version: unknown option '%s' (see mixprec version --help)\n", argv[i]);
        return 2;
    }
    printf("mixprec %s\n", MP_VERSION_STRING);
    return 0;
}

static int run(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train-gan")) return cmd_train_gan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "doctor")) return cmd_doctor(argc - 1, argv + 1);
    if (!strcmp(argv[1], "numerics")) return cmd_numerics(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) return cmd_version(argc - 1, argv + 1);
    fprintf(stderr, "mixprec: unknown command '%s' (try `mixprec --help`)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv) {
    mp_prefer_passive_openmp(argv);
    int rc = run(argc, argv);
    /* output lost on a full disk or a closed pipe is a failure, not a silent exit 0 */
    errno = 0;
    const bool flush_failed = fflush(stdout) != 0;
    const int err = flush_failed ? errno : 0;
    if (flush_failed || ferror(stdout)) {
        fprintf(stderr, "mixprec%s%s: cannot write standard output: %s\n", argc > 1 ? " " : "", argc > 1 ? argv[1] : "",
                err ? strerror(err) : "a write failed");
        if (rc == 0) rc = 1;
    }
    return rc;
}
