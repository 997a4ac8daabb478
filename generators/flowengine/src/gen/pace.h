/* pace.h - the run clock of paced sending: CLOCK_MONOTONIC in nanoseconds, a
 * sleep/spin wait until a packet's due time, and pause/resume (SIGUSR1 /
 * SIGUSR2, README "Pause and resume"): the signal handlers set a flag that
 * the loop checks before every packet and the wait checks while it waits;
 * the thread that sees it first hands on what is queued, then holds in
 * pace_hold until resumed, and shifts its clock by the time held.
 *
 * Thread safety: every function may be called from any thread;
 * pace_pause_request also from a signal handler. */
#ifndef FE_PACE_H
#define FE_PACE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

enum fe_pace { PACE_NONE, PACE_REALTIME, PACE_TOPSPEED };

/* clock_nanosleep until this much before the deadline, then spin. */
#define PACE_SPIN_NS 50000u
/* Longest single sleep: a pause is seen within this even by a thread the
 * signal does not interrupt (a --threads worker). Also the poll of pace_hold. */
#define PACE_NAP_NS 1000000u

/* Nonzero while a pause is requested (SIGUSR1 until SIGUSR2). */
extern _Atomic int pace_pause_flag;

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t pace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in seconds: the wall time of a run (summary wall_seconds). */
static inline double pace_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits until CLOCK_MONOTONIC reaches abs_ns. Returns 0, -EINTR as soon as
 * halt_signal is set (a stop cuts the wait short), or -EAGAIN as soon as a
 * pause is requested (the caller flushes, calls pace_hold and waits again
 * for its shifted due time). */
int pace_wait_until(uint64_t abs_ns);

/* Requests (on != 0) or ends a pause. Async-signal-safe; keeps errno. */
void pace_pause_request(int on);
/* Where pace_hold publishes the run state (the counters file's state word:
 * 1 while held, 0 after), or NULL (the default). Set before the run. */
void pace_publish(_Atomic uint64_t *state);
/* Holds while a pause is requested and no stop is (halt_signal); returns the
 * nanoseconds held (0 when no pause was requested). */
uint64_t pace_hold(void);

#endif
