/* pace.c - hybrid wait: sleep through most of the gap, spin the rest; pause
 * and resume (pace.h). */
#define _POSIX_C_SOURCE 200809L
#include "pace.h"

#include <errno.h>

#include "halt.h"

_Atomic int pace_pause_flag;
static _Atomic(_Atomic uint64_t *) published;

static void nap_until(uint64_t wake)
{
    struct timespec ts = { (time_t)(wake / 1000000000u), (long)(wake % 1000000000u) };
    /* EINTR (a signal) just returns to the caller's checks. */
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

int pace_wait_until(uint64_t abs_ns)
{
    for (;;) {
        if (halt_signal)
            return -EINTR;
        if (atomic_load_explicit(&pace_pause_flag, memory_order_relaxed))
            return -EAGAIN;
        uint64_t now = pace_now();
        if (now >= abs_ns)
            return 0;
        if (abs_ns - now > PACE_SPIN_NS) {
            uint64_t wake = abs_ns - PACE_SPIN_NS;
            nap_until(wake - now > PACE_NAP_NS ? now + PACE_NAP_NS : wake);
        }
        /* else spin: the loop re-reads the clock */
    }
}

void pace_pause_request(int on)
{
    int saved = errno;
    atomic_store(&pace_pause_flag, on != 0);
    errno = saved;
}

void pace_publish(_Atomic uint64_t *state)
{
    atomic_store(&published, state);
}

uint64_t pace_hold(void)
{
    if (!atomic_load(&pace_pause_flag) || halt_signal)
        return 0;
    _Atomic uint64_t *st = atomic_load(&published);
    uint64_t t0 = pace_now();
    if (st)
        atomic_store_explicit(st, 1, memory_order_release);
    while (atomic_load(&pace_pause_flag) && !halt_signal)
        nap_until(pace_now() + PACE_NAP_NS);
    uint64_t held = pace_now() - t0;
    if (st)
        atomic_store_explicit(st, 0, memory_order_release);
    return held;
}
