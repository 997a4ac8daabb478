/* crew.h - what the workers of one --threads run share: a stop flag and the
 * --max-packets budget. Nothing else is shared in the hot path.
 *
 * Budget: workers claim packets in chunks of CREW_CLAIM and give back what
 * they did not use when they finish. A worker that finds the budget empty
 * waits: the budget is gone for good only when every worker is either
 * waiting or done (its leftover given back), so the total sent is exactly
 * min(--max-packets, all packets).
 *
 * Thread safety: crew_init before the workers start (one thread); everything
 * else from any thread (atomics, no lock). */
#ifndef FE_CREW_H
#define FE_CREW_H

#include <stdatomic.h>
#include <stdint.h>

#define CREW_CLAIM 1024u

struct crew {
    /* Read before every packet by every worker: a line of its own. */
    _Alignas(64) _Atomic int stop;        /* set when any thread fails */
    _Alignas(64) _Atomic uint64_t budget; /* packets not yet claimed (UINT64_MAX: no limit) */
    _Atomic unsigned waiting, done;       /* workers waiting for budget / finished */
    unsigned n;                           /* workers */
};

/* The one crew of the process (one run per process). */
extern struct crew crew;

/* Resets the crew for n workers and a budget of max_packets. */
void crew_init(unsigned n, uint64_t max_packets);

/* Nonzero once any thread failed: workers stop at their next packet. */
static inline int crew_stopped(void)
{
    return atomic_load_explicit(&crew.stop, memory_order_relaxed);
}

/* Makes every worker stop (an error somewhere). */
static inline void crew_abort(void)
{
    atomic_store(&crew.stop, 1);
}

/* Up to CREW_CLAIM more packets for the calling worker, waiting while other
 * workers may still give some back. Returns the packets claimed, or 0: none
 * will come (the caller then stays counted as waiting until crew_leave), or
 * a stop (halt_signal or crew_stopped()). */
uint64_t crew_claim_wait(void);

/* A worker is finished: gives back `unused` claimed packets, stops counting
 * as waiting if it was (`waiting`: its last crew_claim_wait returned 0), and
 * counts as done - in that order, so a waiting worker that sees everyone
 * done or waiting finds the budget already back. */
void crew_leave(uint64_t unused, int waiting);

#endif
