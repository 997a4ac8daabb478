/* counters.c - the live per-line counters file (counters.h). */
#define _POSIX_C_SOURCE 200809L
#include "counters.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int counters_open(struct counters *c, const char *path, uint64_t nlines)
{
    memset(c, 0, sizeof *c);
    if (nlines > (SIZE_MAX - COUNTERS_HEADER) / sizeof(struct counters_line)) {
        fprintf(stderr, "flowengine: --counters %s: too many lines\n", path);
        return -EOVERFLOW;
    }
    size_t len = COUNTERS_HEADER + nlines * sizeof(struct counters_line);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = 0;
    if (fd < 0 || ftruncate(fd, (off_t)len)) {
        rc = -errno;
        fprintf(stderr, "flowengine: --counters %s: cannot create: %s\n", path, strerror(-rc));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        rc = -errno;
        fprintf(stderr, "flowengine: --counters %s: cannot map: %s\n", path, strerror(-rc));
        close(fd);
        return rc;
    }
    close(fd);
    c->map = m;
    c->len = len;
    _Atomic uint64_t *w = m;
    atomic_store_explicit(&w[1], nlines, memory_order_relaxed);
    atomic_store_explicit(&w[2], COUNTERS_RUNNING, memory_order_relaxed);
    c->state = &w[2];
    c->line = (struct counters_line *)((uint8_t *)m + COUNTERS_HEADER);
    /* The magic last: a reader that sees it sees the rest of the header. */
    uint64_t magic;
    memcpy(&magic, COUNTERS_MAGIC, 8);
    atomic_store_explicit(&w[0], magic, memory_order_release);
    return 0;
}

void counters_state(struct counters *c, uint64_t state)
{
    if (c->map)
        atomic_store_explicit(c->state, state, memory_order_release);
}

void counters_close(struct counters *c)
{
    if (c->map)
        munmap(c->map, c->len);
    memset(c, 0, sizeof *c);
}
