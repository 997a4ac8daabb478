/* counters.c - the live per-line counters file (counters.h). */
#define _POSIX_C_SOURCE 200809L
#include "counters.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The whole file from the buffer, in one pwrite (a reader sees the magic
 * with the rest). */
static int copy_once(struct counters *c)
{
    ssize_t n = pwrite(c->fd, c->map, c->len, 0);
    return n == (ssize_t)c->len ? 0 : n < 0 ? -errno : -EIO;
}

static void *copy_loop(void *arg)
{
    struct counters *c = arg;
    const struct timespec nap = { 0, COUNTERS_SYNC_NS };
    while (!atomic_load_explicit(&c->stop, memory_order_acquire)) {
        nanosleep(&nap, NULL);
        copy_once(c); /* a failure shows at the last copy (counters_close) */
    }
    return NULL;
}

/* The first copy, then the thread (with every signal blocked: the engine's
 * stop and pause signals stay with the sending thread). */
static int copy_start(struct counters *c)
{
    sigset_t all, old;
    int rc = copy_once(c);
    if (!rc) {
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = -pthread_create(&c->writer, NULL, copy_loop, c);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (rc) {
        fprintf(stderr, "flowengine: --counters %s: cannot write: %s\n", c->path, strerror(-rc));
        close(c->fd);
        free(c->map);
        memset(c, 0, sizeof *c);
    }
    return rc;
}

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
    if (m == MAP_FAILED && (errno == EINVAL || errno == ENODEV)) {
        /* A file system that maps files read-only (9p without a cache): the
         * values live in memory and a thread copies them into the file. */
        m = calloc(1, len);
        if (!m) {
            fprintf(stderr, "flowengine: --counters %s: out of memory\n", path);
            close(fd);
            return -ENOMEM;
        }
        c->copying = 1;
        c->fd = fd;
        c->path = path;
    } else if (m == MAP_FAILED) {
        rc = -errno;
        fprintf(stderr, "flowengine: --counters %s: cannot map: %s\n", path, strerror(-rc));
        close(fd);
        return rc;
    } else {
        close(fd);
    }
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
    if (c->copying)
        return copy_start(c);
    return 0;
}

void counters_state(struct counters *c, uint64_t state)
{
    if (c->map)
        atomic_store_explicit(c->state, state, memory_order_release);
}

int counters_close(struct counters *c)
{
    int rc = 0;
    if (c->map && c->copying) {
        atomic_store_explicit(&c->stop, 1, memory_order_release);
        pthread_join(c->writer, NULL);
        if ((rc = copy_once(c)))
            fprintf(stderr, "flowengine: --counters %s: write error: %s\n", c->path, strerror(-rc));
        close(c->fd);
        free(c->map);
    } else if (c->map) {
        munmap(c->map, c->len);
    }
    memset(c, 0, sizeof *c);
    return rc;
}
