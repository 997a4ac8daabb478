/* sched.c - 4-ary min-heap over sorted FIFOs. */
#define _POSIX_C_SOURCE 200809L
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* Children of i are 4i+1..4i+4, 96 bytes. With h[1] on a 64-byte boundary
 * every such group starts 32-byte aligned and so spans two cache lines, never
 * three: hence the shift of 64 - 24 bytes. */
/* Below this many entries (96 KB) the heap stays in L2 and prefetching only
 * costs instructions. */
#define PREFETCH_MIN 4096

#define HEAP_SHIFT (64 - sizeof(struct sched_ent))

static struct sched_ent *alloc_heap(size_t cap, void **mem)
{
    size_t bytes = (cap + 4) * sizeof(struct sched_ent) + HEAP_SHIFT;
    bytes = (bytes + 63) & ~(size_t)63;
    char *p = aligned_alloc(64, bytes);
    *mem = p;
    return p ? (struct sched_ent *)(p + HEAP_SHIFT) : NULL;
}

int sched_init(struct sched *s, uint32_t nclasses, const uint32_t *init_cap, size_t heap_cap)
{
    memset(s, 0, sizeof *s);
    if (heap_cap < 16)
        heap_cap = 16;
    s->h = alloc_heap(heap_cap, &s->mem);
    s->fifo = calloc(nclasses ? nclasses : 1, sizeof *s->fifo);
    if (!s->h || !s->fifo) {
        sched_free(s);
        return -1;
    }
    for (uint32_t c = 0; c < nclasses; c++) {
        uint32_t cap = 4;
        while (cap < init_cap[c] && cap < (1u << 20))
            cap *= 2;
        s->fifo[c].init_cap = cap;
        s->fifo[c].mask = UINT32_MAX; /* no ring yet: the first append allocates */
        s->fifo[c].len = 0;
    }
    s->nfifo = nclasses;
    s->cap = heap_cap;
    return 0;
}

void sched_free(struct sched *s)
{
    for (uint32_t c = 0; c < s->nfifo; c++)
        free(s->fifo[c].q);
    free(s->fifo);
    free(s->mem);
    memset(s, 0, sizeof *s);
}

/* Rings are allocated at first use and double when full: memory follows the
 * number of instances alive at once, and the steady state allocates nothing. */
int sched_fifo_grow(struct sched_fifo *f)
{
    uint32_t cap = f->q ? f->mask + 1 : 0;
    uint32_t ncap = cap ? cap * 2 : f->init_cap;
    if (cap > UINT32_MAX / 2)
        return -1;
    struct sched_ent *q = malloc((size_t)ncap * sizeof *q);
    if (!q)
        return -1;
    for (uint32_t i = 0; i < f->len; i++)
        q[i] = f->q[(f->head + i) & f->mask];
    free(f->q);
    f->q = q;
    f->head = 0;
    f->mask = ncap - 1;
    return 0;
}

int sched_heap_push(struct sched *s, struct sched_ent e)
{
    if (s->n == s->cap) {
        void *mem;
        struct sched_ent *h = alloc_heap(s->cap * 2, &mem);
        if (!h)
            return -1;
        memcpy(h, s->h, s->n * sizeof *h);
        free(s->mem);
        s->mem = mem;
        s->h = h;
        s->cap *= 2;
    }
    size_t i = s->n++;
    while (i) {
        size_t parent = (i - 1) / 4;
        if (!sched_less(&e, &s->h[parent]))
            break;
        s->h[i] = s->h[parent];
        i = parent;
    }
    s->h[i] = e;
    return 0;
}

void sched_sift_down(struct sched *s, size_t i, struct sched_ent e)
{
    struct sched_ent *h = s->h;
    size_t n = s->n;

    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= n)
            break;
        /* The grandchildren of i are the 16 entries from 4c+1, 384 bytes:
         * fetching them now overlaps the next level's miss with this level's
         * compares, which matters once the heap outgrows the cache. */
        size_t g = 4 * c + 1;
        if (n > PREFETCH_MIN && g + 16 <= n) {
            const char *p = (const char *)&h[g];
            for (int k = 0; k <= 384; k += 64)
                PREFETCH(p + k);
        }
        size_t m;
        if (c + 4 <= n) {
            /* Tournament of four, selections as conditional moves. */
            size_t a = c + (size_t)sched_less(&h[c + 1], &h[c]);
            size_t b = c + 2 + (size_t)sched_less(&h[c + 3], &h[c + 2]);
            m = sched_less(&h[b], &h[a]) ? b : a;
        } else {
            m = c;
            for (size_t j = c + 1; j < n; j++)
                if (sched_less(&h[j], &h[m]))
                    m = j;
        }
        if (!sched_less(&h[m], &e))
            break;
        h[i] = h[m];
        i = m;
    }
    h[i] = e;
}
