/* train_cmd.c — `mixprec train`: parse options, build the model, train. */
#include <stdio.h>

#include "cli/commands.h"

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mixprec train: not built yet\n");
    return 1;
}
