/* pcapout.c - pcap writer with its own large buffer and write(2). */
#define _POSIX_C_SOURCE 200809L
#include "pcapout.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session.h"

int sink_open_null(struct sink *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->cap = FE_MAX_FRAME;
    s->buf = malloc(s->cap);
    return s->buf ? 0 : -1;
}

int sink_open_pcap(struct sink *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->cap = PCAP_BUF_SIZE;
    s->buf = malloc(s->cap);
    if (!s->buf) {
        s->error = ENOMEM;
        return -1;
    }
    s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (s->fd < 0) {
        s->error = errno;
        return -1;
    }
    /* Host byte order, as libpcap writes it; readers detect it by the magic. */
    uint32_t magic = 0xa1b23c4d, zero = 0, snaplen = FE_MAX_FRAME, linktype = 1;
    uint16_t major = 2, minor = 4;
    memcpy(s->buf, &magic, 4);
    memcpy(s->buf + 4, &major, 2);
    memcpy(s->buf + 6, &minor, 2);
    memcpy(s->buf + 8, &zero, 4);  /* thiszone */
    memcpy(s->buf + 12, &zero, 4); /* sigfigs */
    memcpy(s->buf + 16, &snaplen, 4);
    memcpy(s->buf + 20, &linktype, 4);
    s->used = 24;
    return 0;
}

int mq_init(struct mqueue *q, _Atomic int *stop)
{
    memset(q, 0, sizeof *q);
    q->stop = stop;
    for (unsigned i = 0; i < MQ_NBLK; i++)
        if (!(q->blk[i] = malloc(MQ_BLK))) {
            mq_free(q);
            return -1;
        }
    return 0;
}

void mq_free(struct mqueue *q)
{
    for (unsigned i = 0; i < MQ_NBLK; i++)
        free(q->blk[i]);
    memset(q->blk, 0, sizeof q->blk);
}

void sink_open_mq(struct sink *s, struct mqueue *q)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->mq = q;
    s->buf = q->blk[0];
    s->cap = MQ_BLK;
}

/* Publishes the current block and takes the next free one (waiting for the
 * main thread when all are queued). */
static int mq_flush(struct sink *s)
{
    struct mqueue *q = s->mq;
    if (s->error)
        return -1;
    if (!s->used)
        return 0;
    uint64_t p = atomic_load_explicit(&q->prod, memory_order_relaxed);
    q->len[p % MQ_NBLK] = s->used;
    atomic_store_explicit(&q->prod, ++p, memory_order_release);
    s->file_bytes += s->used;
    s->used = 0;
    for (unsigned spin = 0; p - atomic_load_explicit(&q->cons, memory_order_acquire) >= MQ_NBLK;
         spin++) {
        if (atomic_load_explicit(q->stop, memory_order_relaxed)) {
            s->error = ECANCELED;
            return -1;
        }
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

int sink_flush(struct sink *s)
{
    size_t off = 0;
    if (s->mq)
        return mq_flush(s);
    if (s->error)
        return -1;
    while (off < s->used) {
        ssize_t w = write(s->fd, s->buf + off, s->used - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            s->error = errno;
            return -1;
        }
        off += (size_t)w;
    }
    s->file_bytes += s->used;
    s->used = 0;
    return 0;
}

int sink_close(struct sink *s)
{
    int rc = 0;
    if (s->hook)
        rc = txhook_close(s); /* flushes the TX ring; the socket is the hook's */
    if (s->mq) {
        if (mq_flush(s))
            rc = -1;
        atomic_store_explicit(&s->mq->done, 1, memory_order_release);
        s->mq = NULL;
        s->buf = NULL; /* the queue's */
        return rc;
    }
    if (s->fd >= 0) {
        rc = sink_flush(s) || rc ? -1 : 0;
        if (close(s->fd) && !s->error) {
            s->error = errno;
            rc = -1;
        }
        s->fd = -1;
    }
    free(s->buf);
    s->buf = NULL;
    return rc;
}
