/* mq.c - the merge queue of a --threads worker (mq.h). */
#define _POSIX_C_SOURCE 200809L
#include "mq.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int mq_init(struct mq *q, _Atomic int *stop)
{
    memset(q, 0, sizeof *q);
    q->stop = stop;
    for (unsigned i = 0; i < MQ_NBLK; i++)
        if (!(q->blk[i] = malloc(MQ_BLK))) {
            mq_free(q);
            return -ENOMEM;
        }
    return 0;
}

void mq_free(struct mq *q)
{
    for (unsigned i = 0; i < MQ_NBLK; i++)
        free(q->blk[i]);
    memset(q->blk, 0, sizeof q->blk);
}

/* Publishes the current block and takes the next free one, waiting for the
 * consumer while all are queued: yield first (it is usually quick), then
 * sleep briefly so a stalled consumer does not cost a core. */
static int mq_flush(struct sink *s)
{
    struct mq *q = s->priv;
    if (s->err)
        return s->err;
    if (!s->used)
        return 0;
    uint64_t p = atomic_load_explicit(&q->prod, memory_order_relaxed);
    q->len[p % MQ_NBLK] = s->used;
    atomic_store_explicit(&q->prod, ++p, memory_order_release);
    s->used = 0;
    for (unsigned spin = 0; p - atomic_load_explicit(&q->cons, memory_order_acquire) >= MQ_NBLK;
         spin++) {
        if (atomic_load_explicit(q->stop, memory_order_relaxed))
            return s->err = -ECANCELED;
        if (spin < 64) {
            sched_yield();
        } else {
            struct timespec ts = { 0, 20000 };
            nanosleep(&ts, NULL);
        }
    }
    s->buf = q->blk[p % MQ_NBLK];
    return 0;
}

static int mq_close(struct sink *s)
{
    struct mq *q = s->priv;
    int rc = mq_flush(s);
    atomic_store_explicit(&q->done, 1, memory_order_release);
    return rc; /* the blocks are the queue's: nothing to free */
}

static const struct sink_ops mq_ops = {
    .flush = mq_flush,
    .close = mq_close,
};

void mq_open_sink(struct sink *s, struct mq *q)
{
    sink_init(s);
    s->kind = SINK_MQ;
    s->priv = q;
    s->buf = q->blk[0];
    s->cap = MQ_BLK;
    s->ops = &mq_ops;
}

int mq_read(struct mq *q, struct mq_reader *r)
{
    for (;;) {
        if (r->p < r->end)
            return MQ_READY;
        uint64_t c = atomic_load_explicit(&q->cons, memory_order_relaxed);
        if (r->holding) {
            atomic_store_explicit(&q->cons, ++c, memory_order_release);
            r->holding = 0;
        }
        int done = atomic_load_explicit(&q->done, memory_order_acquire);
        if (c < atomic_load_explicit(&q->prod, memory_order_acquire)) {
            r->p = q->blk[c % MQ_NBLK];
            r->end = r->p + q->len[c % MQ_NBLK];
            r->holding = 1;
            continue;
        }
        return done ? MQ_END : MQ_EMPTY;
    }
}
