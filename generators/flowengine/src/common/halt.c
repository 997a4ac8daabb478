/* halt.c - the stop flag (halt.h). */
#include "halt.h"

#include <errno.h>

_Atomic int halt_signal;

void halt_request(int sig)
{
    int zero = 0, saved = errno;
    atomic_compare_exchange_strong(&halt_signal, &zero, sig);
    errno = saved;
}
