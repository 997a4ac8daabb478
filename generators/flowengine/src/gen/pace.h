/* pace.h - the run clock of paced sending: CLOCK_MONOTONIC in nanoseconds and
 * a sleep/spin wait until a packet's due time.
 *
 * Thread safety: every function may be called from any thread. */
#ifndef FE_PACE_H
#define FE_PACE_H

#include <stdint.h>
#include <time.h>

enum fe_pace { PACE_NONE, PACE_REALTIME, PACE_TOPSPEED };

/* clock_nanosleep until this much before the deadline, then spin. */
#define PACE_SPIN_NS 50000u

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

/* Waits until CLOCK_MONOTONIC reaches abs_ns. Returns 0, or -EINTR as soon
 * as halt_signal is set (a stop cuts the wait short). */
int pace_wait_until(uint64_t abs_ns);

#endif
