/* commands.h — the CLI's subcommands; each returns the process exit code. */
#ifndef MP_CLI_COMMANDS_H
#define MP_CLI_COMMANDS_H

#include "mixprec.h"

int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train_gan(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_numerics(int argc, char **argv);

#endif
