/* sched.h - the exact planner: sorted per-period FIFOs under a hierarchical
 * timing wheel.
 *
 * Output order is by (due time, serial); a serial is live at most once (an
 * instance has one next packet, a flow line one next repetition), so the
 * packet index never needs comparing.
 *
 * FIFOs: an instance re-enters with due + period and packets leave in key
 * order, so the re-entries of all instances that share a period arrive in
 * increasing key order. Each distinct period (a "class") has a FIFO of
 * instance ids (4 bytes each) that stays sorted by construction; the key
 * (due, serial) lives in the instance (fe_inst.due, .serial).
 *
 * Sources: every non-empty class (keyed by its head) and every flow line with
 * repetitions left (keyed by its next repetition: meta-flows are expanded
 * lazily) is one node of a hierarchical timing wheel: 8 levels of 256 slots
 * over the 64-bit due time in nanoseconds, exact to the nanosecond. A node
 * sits at the level of the highest byte in which its due time differs from
 * the wheel's cursor; level 0 slots hold nodes of one due time, kept sorted by
 * serial. Insert is O(1) (plus the sorted insert among equal due times),
 * finding the minimum is a bitmap scan, and a node cascades down at most 7
 * times over its life: O(1) amortized per packet, whatever the number of
 * classes or flows. */
#ifndef FE_SCHED_H
#define FE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#define SCHED_NONE UINT32_MAX
#define SCHED_LEVELS 8

struct sched_node {
    uint64_t due, serial;
    uint32_t next;          /* next node in its slot, SCHED_NONE at the end */
    uint32_t pad;
};

struct sched_fifo {
    uint32_t *q;            /* ring of instance ids, capacity mask + 1 (a power of
                             * two); NULL with mask UINT32_MAX until first used */
    uint32_t head, len, mask, init_cap;
};

struct sched {
    struct sched_node *node; /* sources: class c is node c, flow line k is nclasses + k */
    uint32_t nnodes, nclasses;
    uint64_t cur;           /* the wheel's cursor: no node is due before it */
    uint64_t bits[SCHED_LEVELS][4];
    uint32_t head[SCHED_LEVELS][256], tail[SCHED_LEVELS][256];
    uint64_t nodes_in;      /* nodes in the wheel */
    struct sched_fifo *fifo;
    uint64_t queued;        /* ids in all FIFOs */
};

/* init_cap[c]: first capacity of FIFO c (a hint: they grow). */
int sched_init(struct sched *s, uint32_t nclasses, const uint32_t *init_cap, uint32_t nlines);
void sched_free(struct sched *s);
int sched_fifo_grow(struct sched_fifo *f);

/* Node src enters the wheel with key (due, serial); due >= the last minimum. */
void sched_insert(struct sched *s, uint32_t src, uint64_t due, uint64_t serial);
/* sched_insert when no other insert follows before the next sched_min: an
 * only node moves the cursor to its due time, so a lone class (one period,
 * however many flows) never cascades. */
static inline void sched_insert_last(struct sched *s, uint32_t src, uint64_t due,
                                     uint64_t serial)
{
    if (!s->nodes_in)
        s->cur = due;
    sched_insert(s, src, due, serial);
}

/* The smallest node (its key in s->node[]), SCHED_NONE when empty. Cascades. */
uint32_t sched_min_slow(struct sched *s);

static inline uint32_t sched_min(struct sched *s)
{
    uint32_t slot = (uint32_t)(s->cur & 255);
    uint32_t h = s->head[0][slot];
    return h != SCHED_NONE ? h : sched_min_slow(s);
}

/* Removes the node sched_min returned. */
static inline void sched_pop(struct sched *s)
{
    uint32_t slot = (uint32_t)(s->cur & 255);
    uint32_t h = s->head[0][slot];
    uint32_t n = s->node[h].next;
    s->head[0][slot] = n;
    if (n == SCHED_NONE) {
        s->tail[0][slot] = SCHED_NONE;
        s->bits[0][slot >> 6] &= ~(1ull << (slot & 63));
    }
    s->nodes_in--;
}

static inline uint32_t sched_fifo_head(const struct sched *s, uint32_t c)
{
    const struct sched_fifo *f = &s->fifo[c];
    return f->q[f->head];
}

static inline uint32_t sched_fifo_next(const struct sched *s, uint32_t c)
{
    const struct sched_fifo *f = &s->fifo[c];
    return f->len > 1 ? f->q[(f->head + 1) & f->mask] : SCHED_NONE;
}

static inline void sched_fifo_pop(struct sched *s, uint32_t c)
{
    struct sched_fifo *f = &s->fifo[c];
    f->head = (f->head + 1) & f->mask;
    f->len--;
    s->queued--;
}

/* Appends id (its key greater than every key in FIFO c); returns the new
 * length, 0 when out of memory. */
static inline uint32_t sched_fifo_push(struct sched *s, uint32_t c, uint32_t id)
{
    struct sched_fifo *f = &s->fifo[c];
    if (f->len == (uint32_t)(f->mask + 1) && sched_fifo_grow(f))
        return 0;
    f->q[(f->head + f->len++) & f->mask] = id;
    s->queued++;
    return f->len;
}

#endif
