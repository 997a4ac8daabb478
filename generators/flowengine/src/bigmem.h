/* bigmem.h - large arrays (instance pool, FIFO rings, the Distribution Tree):
 * 2 MiB aligned and, where the kernel allows, backed by transparent huge
 * pages, so random access over millions of flows does not miss the TLB at
 * every packet. Untouched pages still cost nothing. Free with free(). */
#ifndef FE_BIGMEM_H
#define FE_BIGMEM_H

#include <stddef.h>

void *big_alloc(size_t bytes);

#endif
