/* bigmem.c - see bigmem.h. */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "bigmem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_SIZE ((size_t)2 << 20)

void *bigmem_alloc(size_t bytes)
{
    if (bytes < HUGE_SIZE) {
        size_t n = (bytes + 63) & ~(size_t)63;
        return aligned_alloc(64, n ? n : 64);
    }
    size_t n = (bytes + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);
    void *p = aligned_alloc(HUGE_SIZE, n);
#ifdef MADV_HUGEPAGE
    if (p)
        madvise(p, n, MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    return p;
}

uint64_t bigmem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    uint64_t kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}
