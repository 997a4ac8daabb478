/* halt.h - the stop request of the whole process.
 *
 * SIGINT and SIGTERM store their number here (gen_cmd.c and multiply install the handler);
 * the generation loops check it before every packet, pacing waits and TX
 * waits check it while they wait. It lives in its own file so that low-level
 * modules (pace, afpacket) can see it without depending on the engine.
 *
 * Thread safety: a lock-free atomic, written by a signal handler running on
 * any thread and read by every thread. */
#ifndef FE_HALT_H
#define FE_HALT_H

#include <stdatomic.h>

/* 0, or the number of the first SIGINT/SIGTERM received. */
extern _Atomic int halt_signal;

/* Records sig unless a signal was recorded already (the first one counts).
 * Async-signal-safe; keeps errno. */
void halt_request(int sig);

#endif
