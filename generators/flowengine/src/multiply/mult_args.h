/* mult_args.h - the command-line pieces both modes of `flowengine multiply`
 * take (the offline command, mult_cmd.c, and the live one, mult_live.c):
 * the error line, numbers, --order and --ports, and CIDR range lists.
 *
 * Errors: each parser says what was wrong on stderr ("flowengine multiply:
 * ...") and returns MULT_EXIT_INPUT, the command's exit status for bad input.
 *
 * Thread safety: for the main thread's argument parsing (mult_range_list
 * uses strtok_r on a copy; the rest is pure). */
#ifndef FE_MULT_ARGS_H
#define FE_MULT_ARGS_H

#include <stdint.h>

#include "mult.h"
#include "opt.h"

#define MULT_EXIT_INPUT 2

/* Prints "flowengine multiply: ..." on stderr; returns MULT_EXIT_INPUT. */
int mult_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A decimal 0..2^64-1 into *v: 0, or -EINVAL (nothing said). */
int mult_u64(const char *s, uint64_t *v);
/* The choices of --order and --ports, which both modes take. */
extern const struct opt_choice mult_order_choices[], mult_ports_choices[];
/* V, the value of option OPT, looked up in C into *out: 0, or MULT_EXIT_INPUT
 * ("OPT: expected a or b (got 'V')", said). */
int mult_choice(const char *opt, const struct opt_choice *c, const char *v, int *out);
/* A comma-separated CIDR list into r[] (at most MULT_MAX_RANGES); 0 or MULT_EXIT_INPUT (said). */
int mult_range_list(const char *list, struct mult_range *r, uint32_t *n, const char *what);
int mult_in_range(const struct mult_range *r, int family, const uint8_t *a);
int mult_overlap(const struct mult_range *x, const struct mult_range *y);
/* An address as text into buf (INET6_ADDRSTRLEN bytes); returns buf. */
const char *mult_ntop(int family, const uint8_t *a, char *buf);
/* "ADDR/PLEN" into buf (64 bytes); returns buf. */
const char *mult_range_str(const struct mult_range *r, char *buf);

#endif
