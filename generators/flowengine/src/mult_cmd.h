/* mult_cmd.h - `flowengine multiply`: the offline multiplier, a pcap in and a
 * pcap T+1 times as long out (mult.h does the rewriting). */
#ifndef FE_MULT_CMD_H
#define FE_MULT_CMD_H

/* argv holds the arguments after "multiply". Returns the exit status: 0,
 * 2 for bad input (nothing written), 1 for a failure while writing. */
int mult_cmd(int argc, char **argv);

/* The helpers the live mode (mult_live.c) shares with the offline command. */
#include <stdint.h>
#include "mult.h"
#define MULT_EXIT_INPUT 2
/* Prints "flowengine multiply: ..." on stderr; returns MULT_EXIT_INPUT. */
int mult_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int mult_u64(const char *s, uint64_t *v);
/* --order and --ports, which both commands take: -1 when `a` is neither, else 0 (the value parsed
 * into *order or *ports) or MULT_EXIT_INPUT (a bad value, said). */
int mult_shape_option(const char *a, const char *v, int *order, int *ports);
/* A comma-separated CIDR list into r[] (at most MULT_MAX_RANGES); 0 or MULT_EXIT_INPUT (said). */
int mult_range_list(const char *list, struct mult_range *r, uint32_t *n, const char *what);
int mult_in_range(const struct mult_range *r, int family, const uint8_t *a);
int mult_overlap(const struct mult_range *x, const struct mult_range *y);
const char *mult_range_str(const struct mult_range *r, char *buf);
uint64_t mult_mem_available(void);

#endif
