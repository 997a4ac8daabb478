/* engine.h - a run of the engine: a session in, packets, statistics, flow log
 * and summary out (README, "Command line" and "Exit status").
 *
 * struct engine_opts is what the command line asks for; both drivers take it:
 * engine_run here runs the loop in the main thread (--threads 1), workers_run
 * (workers.h) runs --threads N > 1. gen_cmd.c picks one.
 *
 * Thread safety: engine_run is called once, from the main thread. */
#ifndef FE_ENGINE_H
#define FE_ENGINE_H

#include <stdint.h>

#include "session.h"

#define ENGINE_MAX_THREADS 256

enum { ENGINE_PLANNER_EXACT, ENGINE_PLANNER_STOCHASTIC };

struct afpacket;

struct engine_opts {
    const char *pcap; /* -o, or NULL (--null, --iface) */
    int has_seed;
    uint64_t seed;                       /* --seed (has_seed), else the session's */
    const char *summary, *flows, *stats; /* output paths, or NULL */
    uint64_t max_packets;                /* UINT64_MAX: no limit */
    struct afpacket *tx;   /* --iface / --pace: the (first) live or paced sink, or NULL */
    int csum_offload;      /* --csum-offload (offload.h) */
    int planner;           /* ENGINE_PLANNER_EXACT or ENGINE_PLANNER_STOCHASTIC */
    unsigned threads;      /* --threads: workers (1: the loop runs in the main thread) */
    struct afpacket **txs; /* one per worker (txs[0] == tx), or NULL */
    const char *counters;  /* --counters FILE (needs threads 1), or NULL */
};

/* Runs session s with options o in the calling thread (o->threads must be 1);
 * returns the exit status: 0 completed or limited, 1 runtime error (message
 * on stderr, summary still written), 130 / 143 stopped by SIGINT / SIGTERM. */
int engine_run(const struct fe_session *s, const struct engine_opts *o);

#endif
