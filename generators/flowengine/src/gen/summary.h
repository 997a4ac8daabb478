/* summary.h - the run's summary (README, "Summary") and its final status.
 *
 * The drivers (engine.c, workers.c) fill a struct summary, settle the status
 * from the first error and the stop signal, and write it: one JSON line on
 * stderr, and to --summary. User messages are "flowengine: WHAT" or
 * "flowengine: WHAT: strerror" and come from here, so both drivers print the
 * same text.
 *
 * Thread safety: the main thread only (after the workers are joined). */
#ifndef FE_SUMMARY_H
#define FE_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

struct summary {
    const char *status; /* completed, limited, interrupted, error */
    int exit_code;
    const char *signal; /* NULL: JSON null */
    const char *sink;
    uint64_t seed;
    uint64_t packets, bytes, flows_started, flows_finished;
    int has_packets;
    uint64_t first_ns, last_ns;
    double wall_seconds;
    uint64_t errors;
    const char *planner;               /* "exact" or "stochastic" */
    uint64_t peak_rss;                 /* VmHWM of the process, bytes (0: unknown) */
    unsigned threads;                  /* --threads */
    uint64_t sent, sent_bytes, failed; /* what the sink took (pcap/null: everything) */
    uint64_t late, max_late_ns;        /* pacing: packets sent > --late-ns after due */
    int paced;                         /* enum fe_pace (pace.h) */
    uint64_t paused_ns;                /* time held in pauses (SIGUSR1 .. SIGUSR2) */
};

/* The summary as one JSON line (with '\n') in buf; returns its length
 * (truncated to size - 1). */
size_t summary_json(const struct summary *s, char *buf, size_t size);

/* Prints "flowengine: what", followed by ": strerror(-err)" when err is a
 * negative errno (0: no cause to show). */
void summary_perror(const char *what, int err);

/* The run failed: prints what (with err as for summary_perror) unless what
 * is NULL (already reported), and sets status error, exit code 1, errors 1. */
void summary_fail(struct summary *sum, const char *what, int err);

/* The final status of a run that got past its start: with what, as
 * summary_fail; else, when interrupted, the signal and its exit code
 * (130 SIGINT, 143 SIGTERM). */
void summary_settle(struct summary *sum, const char *what, int err);

/* Prints the JSON line on stderr and writes it to path (--summary, or NULL).
 * A --summary that cannot be written is reported and turns exit code 0 into 1. */
void summary_write(struct summary *sum, const char *path);

/* The process's peak resident set (VmHWM of /proc/self/status) in bytes,
 * 0 when unavailable. */
uint64_t summary_peak_rss(void);

#endif
