/* sched.h - the v1 planner: a k-way merge of sorted FIFOs under a 4-ary heap.
 *
 * Output order is by (due time, serial); a serial is live at most once (an
 * instance has one next packet, a flow line one next repetition), so the
 * packet index never needs comparing.
 *
 * Why FIFOs: an instance re-enters with due + period and packets leave in key
 * order, so the re-entries of all instances that share a period arrive in
 * increasing key order. Each distinct period (a "class") therefore gets a FIFO
 * that stays sorted by construction: appending is O(1) and touches memory
 * sequentially. The min-heap holds one entry per non-empty FIFO (keyed by its
 * head) and one per flow line with repetitions left (keyed by the start of the
 * next one: meta-flows are expanded lazily). One packet costs one sift-down
 * in a heap of (classes + pending lines) entries, not (live instances): with
 * 10^6 flows of one period the heap has two entries. With all periods
 * distinct it degrades to a plain heap of instances. */
#ifndef FE_SCHED_H
#define FE_SCHED_H

#include <stddef.h>
#include <stdint.h>

struct sched_ent {
    uint64_t due;
    uint64_t serial;
    /* FIFO: instance index; heap: class or SCHED_META | line. 64 bits so the
     * struct has no padding: a 4-byte store read back as 8 by a struct copy
     * defeats store forwarding and cost a third of the loop. */
    uint64_t id;
};

#define SCHED_META 0x80000000u

struct sched_fifo {
    struct sched_ent *q;    /* ring of capacity mask + 1 (a power of two); NULL with
                             * mask UINT32_MAX (capacity 0) until first used */
    uint32_t head, len, mask, init_cap;
};

struct sched {
    struct sched_ent *h;    /* heap; h[1] is 64-byte aligned (sched.c) */
    void *mem;
    size_t n, cap;
    struct sched_fifo *fifo;
    uint32_t nfifo;
    uint64_t queued;        /* entries in all FIFOs */
};

/* init_cap[c]: first capacity of FIFO c (a hint: they grow). */
int sched_init(struct sched *s, uint32_t nclasses, const uint32_t *init_cap, size_t heap_cap);
void sched_free(struct sched *s);
int sched_heap_push(struct sched *s, struct sched_ent e);
void sched_sift_down(struct sched *s, size_t i, struct sched_ent e);
int sched_fifo_grow(struct sched_fifo *f);

static inline int sched_less(const struct sched_ent *a, const struct sched_ent *b)
{
    /* Branch-free: the heap's compares are coin flips, and mispredictions
     * would cost more than the compares themselves. */
    return (a->due < b->due) | ((a->due == b->due) & (a->serial < b->serial));
}

static inline int sched_empty(const struct sched *s)
{
    return s->n == 0;
}

/* The smallest source: a class (id < SCHED_META) or a line's next repetition. */
static inline const struct sched_ent *sched_top(const struct sched *s)
{
    return &s->h[0];
}

static inline struct sched_ent *sched_fifo_head(const struct sched *s, uint32_t c)
{
    const struct sched_fifo *f = &s->fifo[c];
    return &f->q[f->head];
}

/* The top is a line: replace its key by that of its next repetition. */
static inline void sched_meta_next(struct sched *s, uint64_t due, uint64_t serial)
{
    struct sched_ent e = { due, serial, s->h[0].id };
    sched_sift_down(s, 0, e);
}

/* The top is a line with no repetition left, or an emptied class. */
static inline void sched_pop_top(struct sched *s)
{
    if (--s->n)
        sched_sift_down(s, 0, s->h[s->n]);
}

/* Appends e (greater than every key already in FIFO c) to class c; the class
 * enters the heap if its FIFO was empty. Only when the top is not class c. */
static inline int sched_append(struct sched *s, uint32_t c, struct sched_ent e)
{
    struct sched_fifo *f = &s->fifo[c];
    if (f->len == (uint32_t)(f->mask + 1) && sched_fifo_grow(f))
        return -1;
    f->q[(f->head + f->len++) & f->mask] = e;
    s->queued++;
    if (f->len == 1) {
        struct sched_ent he = { e.due, e.serial, c };
        return sched_heap_push(s, he);
    }
    return 0;
}

/* The top is class c: its head was sent. Removes it, appends next (the same
 * instance's next packet) unless NULL, and re-keys the class: one sift-down. */
static inline void sched_advance(struct sched *s, uint32_t c, const struct sched_ent *next)
{
    struct sched_fifo *f = &s->fifo[c];
    f->head = (f->head + 1) & f->mask;
    f->len--;
    s->queued--;
    if (next) {
        /* len < capacity here: the slot just freed is available. */
        f->q[(f->head + f->len++) & f->mask] = *next;
        s->queued++;
    }
    if (!f->len) {
        sched_pop_top(s);
        return;
    }
    const struct sched_ent *hd = &f->q[f->head];
    struct sched_ent he = { hd->due, hd->serial, c };
    sched_sift_down(s, 0, he);
}

#endif
