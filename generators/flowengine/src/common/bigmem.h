/* bigmem.h - large arrays (instance pool, FIFO rings, the Distribution Tree):
 * 2 MiB aligned and, where the kernel allows, backed by transparent huge
 * pages, so random access over millions of flows does not miss the TLB at
 * every packet. Untouched pages still cost nothing.
 *
 * Thread safety: as malloc. */
#ifndef FE_BIGMEM_H
#define FE_BIGMEM_H

#include <stddef.h>
#include <stdint.h>

/* At least `bytes` bytes, uninitialized: below 2 MiB 64-byte aligned and
 * rounded up to whole cache lines (two threads' arrays never share a line),
 * else 2 MiB aligned with MADV_HUGEPAGE. NULL when out of memory (the one
 * pointer-returning allocator: read it as -ENOMEM). Free with free(). */
void *bigmem_alloc(size_t bytes);

/* MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read (then
 * callers make no memory check). The one reading of it: `gen`, `match` and
 * `multiply` size their tables against it before they allocate. */
uint64_t bigmem_available(void);

#endif
