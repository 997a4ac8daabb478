/* wheel.h - the exact planner: sorted per-period FIFOs under a hierarchical
 * timing wheel (named so as not to shadow POSIX <sched.h>).
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
 * classes or flows.
 *
 * Thread safety: none. A wheel belongs to one thread (each --threads worker
 * has its own); nothing here locks or uses atomics. */
#ifndef FE_WHEEL_H
#define FE_WHEEL_H

#include <stddef.h>
#include <stdint.h>

#define WHEEL_NONE UINT32_MAX
#define WHEEL_LEVELS 8

struct wheel_node {
    uint64_t due, serial;
    uint32_t next; /* next node in its slot, WHEEL_NONE at the end */
    uint32_t pad;
};

struct wheel_fifo {
    uint32_t *q; /* ring of instance ids, capacity mask + 1 (a power of
                  * two); NULL with mask UINT32_MAX until first used */
    uint32_t head, len, mask, init_cap;
};

struct wheel {
    struct wheel_node *node; /* sources: class c is node c, flow line k is nclasses + k */
    uint32_t nnodes, nclasses;
    uint64_t cur; /* the wheel's cursor: no node is due before it */
    uint64_t bits[WHEEL_LEVELS][4];
    uint32_t head[WHEEL_LEVELS][256], tail[WHEEL_LEVELS][256];
    uint64_t nodes_in; /* nodes in the wheel */
    struct wheel_fifo *fifo;
    uint64_t queued; /* ids in all FIFOs */
};

/* Allocates a wheel of nclasses FIFOs and nclasses + nlines nodes, all empty.
 * init_cap[c] is the first capacity of FIFO c (a hint: FIFOs grow; the ring
 * itself is allocated at the first push). Returns 0 or -ENOMEM (then *w is
 * freed and zeroed). */
int wheel_init(struct wheel *w, uint32_t nclasses, const uint32_t *init_cap, uint32_t nlines);
/* Frees everything wheel_init and the FIFO pushes allocated; a zeroed wheel is fine. */
void wheel_free(struct wheel *w);
/* Doubles FIFO f (or gives it its first ring). Returns 0 or -ENOMEM (f unchanged). */
int wheel_fifo_grow(struct wheel_fifo *f);

/* Node src enters the wheel with key (due, serial); due must be >= the key of
 * the last wheel_min (the cursor never moves back). */
void wheel_insert(struct wheel *w, uint32_t src, uint64_t due, uint64_t serial);
/* wheel_insert when no other insert follows before the next wheel_min: an
 * only node moves the cursor to its due time, so a lone class (one period,
 * however many flows) never cascades. */
static inline void wheel_insert_last(struct wheel *w, uint32_t src, uint64_t due, uint64_t serial)
{
    if (!w->nodes_in)
        w->cur = due;
    wheel_insert(w, src, due, serial);
}

/* The out-of-line part of wheel_min: scans level 0 and cascades higher levels
 * down. Returns the smallest node or WHEEL_NONE when the wheel is empty. */
uint32_t wheel_min_slow(struct wheel *w);

/* The node with the smallest key (read it in w->node[]), WHEEL_NONE when
 * empty. Does not remove it; may cascade (moves the cursor). */
static inline uint32_t wheel_min(struct wheel *w)
{
    uint32_t slot = (uint32_t)(w->cur & 255);
    uint32_t h = w->head[0][slot];
    return h != WHEEL_NONE ? h : wheel_min_slow(w);
}

/* Removes the node the last wheel_min returned (no other change in between). */
static inline void wheel_pop(struct wheel *w)
{
    uint32_t slot = (uint32_t)(w->cur & 255);
    uint32_t h = w->head[0][slot];
    uint32_t n = w->node[h].next;
    w->head[0][slot] = n;
    if (n == WHEEL_NONE) {
        w->tail[0][slot] = WHEEL_NONE;
        w->bits[0][slot >> 6] &= ~(1ull << (slot & 63));
    }
    w->nodes_in--;
}

/* The instance id at the head of FIFO c, which must not be empty. */
static inline uint32_t wheel_fifo_head(const struct wheel *w, uint32_t c)
{
    const struct wheel_fifo *f = &w->fifo[c];
    return f->q[f->head];
}

/* The id after the head of FIFO c, WHEEL_NONE when there is none. */
static inline uint32_t wheel_fifo_next(const struct wheel *w, uint32_t c)
{
    const struct wheel_fifo *f = &w->fifo[c];
    return f->len > 1 ? f->q[(f->head + 1) & f->mask] : WHEEL_NONE;
}

/* Drops the head of FIFO c, which must not be empty. */
static inline void wheel_fifo_pop(struct wheel *w, uint32_t c)
{
    struct wheel_fifo *f = &w->fifo[c];
    f->head = (f->head + 1) & f->mask;
    f->len--;
    w->queued--;
}

/* Appends id to FIFO c; its key must exceed every key in the FIFO. Returns
 * the FIFO's new length (>= 1; a FIFO holds at most 2^31 ids), or -ENOMEM
 * (nothing appended). */
static inline int64_t wheel_fifo_push(struct wheel *w, uint32_t c, uint32_t id)
{
    struct wheel_fifo *f = &w->fifo[c];
    if (f->len == (uint32_t)(f->mask + 1)) {
        int rc = wheel_fifo_grow(f);
        if (rc)
            return rc;
    }
    f->q[(f->head + f->len++) & f->mask] = id;
    w->queued++;
    return f->len;
}

#endif
