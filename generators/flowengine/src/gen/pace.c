/* pace.c - hybrid wait: sleep through most of the gap, spin the rest. */
#define _POSIX_C_SOURCE 200809L
#include "pace.h"

#include <errno.h>

#include "halt.h"

int pace_wait_until(uint64_t abs_ns)
{
    for (;;) {
        if (halt_signal)
            return -EINTR;
        uint64_t now = pace_now();
        if (now >= abs_ns)
            return 0;
        if (abs_ns - now > PACE_SPIN_NS) {
            uint64_t wake = abs_ns - PACE_SPIN_NS;
            struct timespec ts = { (time_t)(wake / 1000000000u), (long)(wake % 1000000000u) };
            /* EINTR (a signal) just loops back to the flag check. */
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        /* else spin: the loop re-reads the clock */
    }
}
