/* feed.c - the per-second row feed of a --threads worker (feed.h). */
#include "feed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int feed_init(struct feed *f)
{
    memset(f, 0, sizeof *f);
    f->tail = f->rd = calloc(1, sizeof *f->tail);
    return f->tail ? 0 : -ENOMEM;
}

void feed_free(struct feed *f)
{
    struct feed_chunk *c = f->rd;
    while (c) {
        struct feed_chunk *n = atomic_load(&c->next);
        free(c);
        c = n;
    }
    f->rd = f->tail = NULL;
}

const struct feed_row *feed_peek(struct feed *f)
{
    struct feed_chunk *c = f->rd;
    if (!c)
        return NULL;
    if (f->rd_i == FEED_CHUNK) {
        struct feed_chunk *n = atomic_load_explicit(&c->next, memory_order_acquire);
        if (!n)
            return NULL;
        free(c);
        f->rd = c = n;
        f->rd_i = 0;
    }
    return f->rd_i < atomic_load_explicit(&c->n, memory_order_acquire) ? &c->row[f->rd_i] : NULL;
}

void feed_next(struct feed *f)
{
    f->rd_i++;
}

int feed_push(struct feed *f, const struct feed_row *r)
{
    struct feed_chunk *c = f->tail;
    uint32_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
    if (n == FEED_CHUNK) {
        struct feed_chunk *nc = calloc(1, sizeof *nc);
        if (!nc)
            return -ENOMEM;
        atomic_store_explicit(&c->next, nc, memory_order_release);
        f->tail = c = nc;
        n = 0;
    }
    c->row[n] = *r;
    atomic_store_explicit(&c->n, n + 1, memory_order_release);
    return 0;
}
