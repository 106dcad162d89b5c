/* The subcommands of the psgraph binary; each returns the process's exit code. */
#ifndef PSGRAPH_CLI_COMMANDS_H
#define PSGRAPH_CLI_COMMANDS_H

int psg_cmd_train(int argc, char **argv);
int psg_cmd_server(int argc, char **argv);
int psg_cmd_launch(int argc, char **argv);
int psg_cmd_bench(int argc, char **argv);
int psg_cmd_simulate(int argc, char **argv);
/* `psgraph train --model inception3 ...`: the bench's loop with the Inception recipe. */
int psg_cmd_train_inception3(int argc, char **argv);
int psg_cmd_inspect(int argc, char **argv);
int psg_cmd_plot(int argc, char **argv);

#endif
