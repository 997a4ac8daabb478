/* loop.h - the generation loop and the state it runs on.
 *
 * A struct loop is everything one thread needs to generate its share of a
 * session: its own copy of the flow lines (their next repetition changes),
 * the instance pool, the exact planner's wheel, the stochastic planner's
 * Distribution Tree and clock, its sink(s) and per-second statistics. One
 * thread: the whole session. Worker w of N (--threads): the instances whose
 * serial is congruent to w modulo N.
 *
 * Stream lines (stream.h) have no FIFO: the line's own wheel node carries
 * the key of its next packet, and the loop copies its frames.
 *
 * Session lines (sess.h) have FIFO classes of their own (one per distinct h
 * and gap over the session lines), numbered after the flow lines' classes
 * and the line nodes, so the flow path never meets a session instance; a
 * session instance goes to the FIFO of the delay before its next packet.
 *
 * Before every packet the loop checks the stop flag (halt.h) and the pause
 * flag (pace.h); a pause is held there (or in the sink's pacing wait).
 *
 * The loop body is one always-inline function instantiated twice in loop.c:
 * loop_run for one thread, loop_run_worker with the worker's extra checks
 * (another thread failed, --max-packets budget from crew.h). The one-thread
 * instance carries none of them.
 *
 * Errors: setup returns 0 or -ENOMEM; a failing loop stops and reports which
 * step failed and its negative errno in struct loop_res (loop_failure turns
 * that into the user's message).
 *
 * Thread safety: a struct loop belongs to one thread from loop_init to
 * loop_free; the loops of different workers share nothing but the crew. */
#ifndef FE_LOOP_H
#define FE_LOOP_H

#include <stdint.h>
#include <stdio.h>

#include "counters.h"
#include "dtree.h"
#include "pool.h"
#include "sess.h"
#include "session.h"
#include "sink.h"
#include "stats.h"
#include "wheel.h"

struct loop_cfg {
    uint64_t max_packets; /* --max-packets, UINT64_MAX: no limit */
    int csum_offload;     /* --csum-offload (offload.h) */
    int stochastic;       /* --planner stochastic */
};

/* What stopped a loop with an error. */
enum loop_fail {
    LOOP_OK,
    LOOP_FAIL_STATS,   /* writing the per-second rows */
    LOOP_FAIL_POOL,    /* no memory for a new instance */
    LOOP_FAIL_TREE,    /* no memory to grow the Distribution Tree */
    LOOP_FAIL_WHEEL,   /* no memory to grow a FIFO */
    LOOP_FAIL_SINK,    /* the sink refused a frame */
    LOOP_FAIL_FLOWLOG, /* writing a flow log row */
};

struct loop_res {
    int fail;           /* enum loop_fail */
    int err;            /* 0 or the negative errno of the failure */
    const char *status; /* in: "completed"; out: as is, "interrupted" or "limited" */
    uint64_t packets, first_ns, last_ns; /* sent by this loop; due times of first/last */
    uint64_t unused;                     /* workers: budget claimed and not used */
    int waiting;                         /* workers: still counted as waiting in the crew */
};

struct loop {
    struct fe_flow *flows; /* a copy: next_rep changes */
    size_t nflows;
    struct pool pool;
    struct wheel wheel;
    uint32_t nfcls; /* wheel nodes: flow classes 0..nfcls-1, line k at nfcls + k, then the
                     * session lines' classes (loop.c, assign_classes) */
    /* Session lines (sess.h): per instance id, its two-way state; NULL when
     * the session has none. Grows with the pool. */
    struct sess_state *sess;
    uint32_t sess_cap;
    uint32_t sess_id; /* the instance sess_spawn started */
    int sess_fail;    /* enum loop_fail of a session step that failed */
    int flog_ext;     /* the flow log has the session columns */
    /* Stochastic planner: fast instances in the Distribution Tree, their
     * clock (ns plus a fraction in units of 1/total ns) and its stream. */
    struct dtree tree;
    uint32_t *weight; /* per line: pps weight in the tree, 0: slow (calendar) */
    uint64_t tclock, tfrac, tq, tr, trng;
    /* Where frames go: pcap, null or merge queue (the driver opens it), or
     * the live / paced sink wrapping one of them (afpacket_attach). */
    struct sink sink;
    struct stats st;
    FILE *csv, *flog; /* per-second CSV (one thread), flow log or NULL */
    char *flog_buf;
    struct loop_cfg cfg;
    uint64_t seed;
    /* --counters: per session line, packets and bytes handed to the sink
     * (counters.h), or NULL. Set by the driver before loop_run. */
    struct counters_line *cnt;
    /* Pause (pace.h): the sink's part of a pause the loop holds before a
     * packet (afpacket_hold: resume 0 before, 1 after holding held_ns), or
     * NULL; and the time the loop held. */
    void (*hold)(void *ctx, int resume, uint64_t held_ns);
    void *hold_ctx;
    uint64_t paused_ns;
};

/* Prepares e for the instances of worker w of nthr (one thread: 0 of 1):
 * copies and prepares the flow lines, sizes pool, wheel and (stochastic)
 * tree, and puts each line's first repetition of this worker in the wheel.
 * The sink is closed, outputs NULL. Returns 0 or -ENOMEM
 * (then call loop_free). */
int loop_init(struct loop *e, const struct fe_session *s, const struct loop_cfg *cfg, uint64_t seed,
              unsigned w, unsigned nthr);
/* Frees what loop_init allocated and e->flog_buf (not the sinks or files). */
void loop_free(struct loop *e);

/* Runs the loop of a one-thread run until every instance finished, a stop,
 * --max-packets or an error; the result goes to r (r->status preset). */
void loop_run(struct loop *e, struct loop_res *r);
/* The same for a --threads worker. */
void loop_run_worker(struct loop *e, struct loop_res *r);

/* Writes the flow log rows of the instances still running, in serial order.
 * Returns 0 or a negative errno (-ENOMEM, or the write's). */
int loop_log_unfinished(struct loop *e);

/* The user's message for a failed loop (NULL: r did not fail); *err gets the
 * negative errno to print after it, 0 for none. pcap: the run writes -o
 * (else a sink failure is a send error). */
const char *loop_failure(const struct loop_res *r, int pcap, int *err);

#endif
