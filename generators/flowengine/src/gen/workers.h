/* workers.h - the --threads driver (README, "Threads").
 *
 * Worker w of N runs the loop (loop.h) over the instances whose serial is
 * congruent to w modulo N: its own scheduler, pool, tree, sink and
 * statistics, nothing shared in the hot path but the crew's stop flag and
 * budget (crew.h). Its packets are exactly the one-thread run's packets of
 * those serials, in the same relative order. The main thread starts the
 * workers, then merges their outputs (merge.h) while they run, joins them and
 * writes the summary.
 *
 * Thread safety: call from the main thread; it creates and joins the workers
 * itself. */
#ifndef FE_WORKERS_H
#define FE_WORKERS_H

#include "engine.h"
#include "session.h"

/* Runs session s with o->threads (2..ENGINE_MAX_THREADS) workers, the
 * calling thread merging; returns the exit status as engine_run does. */
int workers_run(const struct fe_session *s, const struct engine_opts *o);

#endif
