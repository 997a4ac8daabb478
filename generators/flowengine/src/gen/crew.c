/* crew.c - the workers' shared stop flag and packet budget (crew.h). */
#define _POSIX_C_SOURCE 200809L
#include "crew.h"

#include <time.h>

#include "halt.h"

struct crew crew;

void crew_init(unsigned n, uint64_t max_packets)
{
    atomic_store(&crew.stop, 0);
    atomic_store(&crew.budget, max_packets);
    atomic_store(&crew.waiting, 0);
    atomic_store(&crew.done, 0);
    crew.n = n;
}

/* Up to CREW_CLAIM packets without waiting, 0 when the budget is empty. */
static uint64_t claim(void)
{
    uint64_t b = atomic_load(&crew.budget);
    while (b) {
        uint64_t take = b < CREW_CLAIM ? b : CREW_CLAIM;
        if (atomic_compare_exchange_weak(&crew.budget, &b, b - take))
            return take;
    }
    return 0;
}

uint64_t crew_claim_wait(void)
{
    uint64_t got = claim();
    if (got)
        return got;
    atomic_fetch_add(&crew.waiting, 1);
    for (;;) {
        if ((got = claim()))
            break;
        if (atomic_load(&crew.waiting) + atomic_load(&crew.done) >= crew.n) {
            got = claim();
            if (!got)
                return 0;
            break;
        }
        if (halt_signal || atomic_load_explicit(&crew.stop, memory_order_relaxed))
            break;
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    }
    atomic_fetch_sub(&crew.waiting, 1);
    return got;
}

void crew_leave(uint64_t unused, int waiting)
{
    if (unused)
        atomic_fetch_add(&crew.budget, unused);
    if (waiting)
        atomic_fetch_sub(&crew.waiting, 1);
    atomic_fetch_add(&crew.done, 1);
}
