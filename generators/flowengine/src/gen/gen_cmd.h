/* gen_cmd.h - `flowengine gen`: the command line of the generator (a session
 * file in; a pcap, nothing or an interface out), then engine_run or
 * workers_run. */
#ifndef FE_GEN_CMD_H
#define FE_GEN_CMD_H

#include <stdio.h>

/* Prints the usage lines of `flowengine gen` on f, its choices (--pace,
 * --tx, --planner) from the tables the parser uses. */
void gen_usage(FILE *f);

/* argv[0] is "gen", the rest its arguments. USAGE prints the whole program's
 * usage (on a usage error and for --help). Returns the exit status: 0, 1 a
 * failure while running, 2 bad input (nothing sent), 128+N stopped by
 * signal N. */
int gen_cmd(int argc, char **argv, void (*usage)(FILE *f));

#endif
