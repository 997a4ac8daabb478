/* counters.h - the live per-line counters file (--counters; README,
 * "Counters file").
 *
 * The file is created (0644, truncated) and mapped shared; other processes
 * read it while the engine runs (Python: mmap and struct). Layout, native
 * byte order, every field a u64:
 *   magic "NTGCNT01" (8 bytes, written last: a reader that sees it sees the
 *   whole header), number of lines, state (COUNTERS_RUNNING, _PAUSED,
 *   _FINISHED), then per session line (flow and stream lines in session
 *   order) packets and bytes handed to the sink.
 * The loop adds each packet when its frame is handed to the sink (where the
 * summary's `packets` and `bytes` count it), so at exit the lines sum to the
 * summary's. Words are single-writer relaxed atomics: a reader sees whole
 * values, but a line's packets and bytes may be one packet apart.
 *
 * Errors: counters_open prints "flowengine: --counters PATH: ..." and returns
 * a negative errno.
 *
 * Thread safety: one writer thread (the one-thread loop: --counters needs
 * --threads 1); the state word may also be written by pace_hold (pace.h) on
 * that thread. */
#ifndef FE_COUNTERS_H
#define FE_COUNTERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define COUNTERS_MAGIC "NTGCNT01"
#define COUNTERS_HEADER 24u /* magic, lines, state */

enum { COUNTERS_RUNNING, COUNTERS_PAUSED, COUNTERS_FINISHED };

struct counters_line {
    _Atomic uint64_t packets, bytes;
};

struct counters {
    void *map; /* NULL: not open */
    size_t len;
    _Atomic uint64_t *state;
    struct counters_line *line; /* [k]: session line k */
    /* When the file cannot be mapped shared for writing (9p without a cache,
     * as a VM guest's shared folder: mmap gives EINVAL), map is a private
     * buffer that a thread of ours copies into the file with pwrite every
     * COUNTERS_SYNC_NS, and once more at counters_close. */
    int fd; /* the file while copying, else unused */
    const char *path;
    int copying;
    _Atomic int stop;
    pthread_t writer;
};

#define COUNTERS_SYNC_NS 20000000u /* 20 ms: the copy's period when not mapped */

/* Creates path for nlines lines, all zero, state running. 0 or a negative
 * errno (reported). */
int counters_open(struct counters *c, const char *path, uint64_t nlines);
/* Sets the state word (COUNTERS_*); nothing when c is not open. */
void counters_state(struct counters *c, uint64_t state);
/* Unmaps the file (it stays, with its last values); when copying, stops the
 * thread and writes the last values first. A closed one is fine. 0, or a
 * negative errno when the last copy failed (reported). */
int counters_close(struct counters *c);

/* One packet of len bytes of line l (single writer: plain loads and stores). */
static inline void counters_add(struct counters_line *l, uint32_t len)
{
    atomic_store_explicit(&l->packets, atomic_load_explicit(&l->packets, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&l->bytes, atomic_load_explicit(&l->bytes, memory_order_relaxed) + len,
                          memory_order_relaxed);
}

#endif
