/* engine.h - the generation loop: session in, packets, statistics and logs out. */
#ifndef FE_ENGINE_H
#define FE_ENGINE_H

#include <signal.h>
#include <stdint.h>

#include "session.h"

struct engine_opts {
    const char *pcap;       /* NULL with --null */
    int has_seed;
    uint64_t seed;
    const char *summary, *flows, *stats;
    uint64_t max_packets;   /* UINT64_MAX: no limit */
    struct txhook *hook;    /* --iface / --pace (afpacket.h), or NULL */
    int csum_offload;       /* --csum-offload (offload.h) */
    int planner;            /* ENGINE_PLANNER_EXACT or ENGINE_PLANNER_STOCHASTIC */
    unsigned threads;       /* --threads: workers (1: the loop runs in the main thread) */
    struct txhook **hooks;  /* threads > 1: one hook per worker (hooks[0] == hook), or NULL */
};

#define ENGINE_MAX_THREADS 256

enum { ENGINE_PLANNER_EXACT, ENGINE_PLANNER_STOCHASTIC };

/* Set by the SIGINT/SIGTERM handler to the signal number; the loop checks it
 * before every packet. A lock-free atomic: the handler may run in any thread
 * and every worker reads it (--threads). */
extern _Atomic int engine_signal;

/* Runs the session; returns the exit status (README, "Exit status"). */
int engine_run(const struct fe_session *s, const struct engine_opts *o);

#endif
