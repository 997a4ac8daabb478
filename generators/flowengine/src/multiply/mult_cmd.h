/* mult_cmd.h - `flowengine multiply`: the offline multiplier, a pcap in and a
 * pcap T+1 times as long out (mult.h does the rewriting). */
#ifndef FE_MULT_CMD_H
#define FE_MULT_CMD_H

/* argv[0] is "multiply" (its arguments follow; "--live" first: mult_live_cmd). Returns the exit
 * status: 0, 2 for bad input (nothing written), 1 for a failure while writing. */
int mult_cmd(int argc, char **argv);

#endif
