/* wheel.c - hierarchical timing wheel over sorted FIFOs (wheel.h). */
#define _POSIX_C_SOURCE 200809L
#include "wheel.h"

#include "bigmem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int wheel_init(struct wheel *s, uint32_t nclasses, const uint32_t *init_cap, uint32_t nlines)
{
    memset(s, 0, sizeof *s);
    s->nnodes = nclasses + nlines;
    s->nclasses = nclasses;
    /* Cache-line aligned and padded (bigmem_alloc): with --threads, the small
     * arrays of two workers' schedulers, written for every packet, must not
     * share a line. */
    size_t nb = (s->nnodes ? s->nnodes : 1) * sizeof *s->node;
    size_t fb = (nclasses ? nclasses : 1) * sizeof *s->fifo;
    s->node = bigmem_alloc(nb);
    s->fifo = bigmem_alloc(fb);
    if (!s->node || !s->fifo) {
        wheel_free(s);
        return -ENOMEM;
    }
    memset(s->node, 0, nb);
    memset(s->fifo, 0, fb);
    memset(s->head, 0xff, sizeof s->head);
    memset(s->tail, 0xff, sizeof s->tail);
    for (uint32_t c = 0; c < nclasses; c++) {
        uint32_t cap = 4;
        /* Untouched pages cost nothing: a generous first ring avoids the
         * copy (and its doubled peak) of growing a large one. */
        while (cap < init_cap[c] && cap < (1u << 25))
            cap *= 2;
        s->fifo[c].init_cap = cap;
        s->fifo[c].mask = UINT32_MAX; /* no ring yet: the first push allocates */
    }
    return 0;
}

void wheel_free(struct wheel *s)
{
    if (s->fifo)
        for (uint32_t c = 0; c < s->nclasses; c++)
            free(s->fifo[c].q);
    free(s->fifo);
    free(s->node);
    memset(s, 0, sizeof *s);
}

/* Rings are allocated at first use and double when full: memory follows the
 * number of instances alive at once, and the steady state allocates nothing. */
int wheel_fifo_grow(struct wheel_fifo *f)
{
    uint32_t cap = f->q ? f->mask + 1 : 0;
    uint32_t ncap = cap ? cap * 2 : f->init_cap;
    if (cap > UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t *q = bigmem_alloc((size_t)ncap * sizeof *q);
    if (!q)
        return -ENOMEM;
    for (uint32_t i = 0; i < f->len; i++)
        q[i] = f->q[(f->head + i) & f->mask];
    free(f->q);
    f->q = q;
    f->head = 0;
    f->mask = ncap - 1;
    return 0;
}

static inline void link_node(struct wheel *s, uint32_t src, int lvl, uint32_t slot)
{
    struct wheel_node *n = s->node;
    uint32_t *hd = &s->head[lvl][slot], *tl = &s->tail[lvl][slot];
    if (*hd == WHEEL_NONE) {
        n[src].next = WHEEL_NONE;
        *hd = *tl = src;
        s->bits[lvl][slot >> 6] |= 1ull << (slot & 63);
        return;
    }
    if (lvl > 0 || n[*tl].serial < n[src].serial) {
        /* Higher levels are unordered; level 0 gets serials mostly in order. */
        n[src].next = WHEEL_NONE;
        n[*tl].next = src;
        *tl = src;
        return;
    }
    /* Level 0, one due time: sorted by serial. */
    uint32_t prev = WHEEL_NONE, c = *hd;
    while (c != WHEEL_NONE && n[c].serial < n[src].serial) {
        prev = c;
        c = n[c].next;
    }
    n[src].next = c;
    if (prev == WHEEL_NONE)
        *hd = src;
    else
        n[prev].next = src;
}

static inline void place(struct wheel *s, uint32_t src)
{
    uint64_t due = s->node[src].due, x = due ^ s->cur;
    int lvl = x ? (63 - __builtin_clzll(x)) >> 3 : 0;
    link_node(s, src, lvl, (uint32_t)(due >> (8 * lvl)) & 255);
}

void wheel_insert(struct wheel *s, uint32_t src, uint64_t due, uint64_t serial)
{
    s->node[src].due = due;
    s->node[src].serial = serial;
    s->nodes_in++;
    place(s, src);
}

/* First set bit at or after slot `from` of level lvl, or -1. */
static inline int first_slot(const struct wheel *s, int lvl, uint32_t from)
{
    for (uint32_t w = from >> 6; w < 4; w++) {
        uint64_t b = s->bits[lvl][w];
        if (w == from >> 6)
            b &= ~0ull << (from & 63);
        if (b)
            return (int)(w * 64 + (uint32_t)__builtin_ctzll(b));
    }
    return -1;
}

uint32_t wheel_min_slow(struct wheel *s)
{
    if (!s->nodes_in)
        return WHEEL_NONE;
    for (;;) {
        int slot = first_slot(s, 0, (uint32_t)(s->cur & 255));
        if (slot >= 0) {
            s->cur = (s->cur & ~(uint64_t)255) | (uint64_t)slot;
            return s->head[0][slot];
        }
        /* Level 0 is empty: move the first slot of the lowest non-empty
         * level down, with the cursor at its start. */
        int lvl = 1;
        for (; lvl < WHEEL_LEVELS; lvl++) {
            slot = first_slot(s, lvl, 0);
            if (slot >= 0)
                break;
        }
        if (lvl == WHEEL_LEVELS)
            return WHEEL_NONE; /* not reached: nodes_in > 0 */
        int sh = 8 * lvl;
        uint64_t low = sh + 8 >= 64 ? ~0ull : (1ull << (sh + 8)) - 1;
        s->cur = (s->cur & ~low) | ((uint64_t)slot << sh);
        uint32_t c = s->head[lvl][slot];
        s->head[lvl][slot] = s->tail[lvl][slot] = WHEEL_NONE;
        s->bits[lvl][slot >> 6] &= ~(1ull << (slot & 63));
        while (c != WHEEL_NONE) {
            uint32_t nx = s->node[c].next;
            place(s, c);
            c = nx;
        }
    }
}
