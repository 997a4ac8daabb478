/* sink.h - where built frames go: the sink interface.
 *
 * The loop asks its sink for room for one frame (sink_frame), builds the
 * frame there, and asks again for the next one; sink_close hands the rest on.
 * Implementations, told apart by `kind`:
 *
 *   SINK_NULL  --null: one scratch frame, overwritten every time (sink.c)
 *   SINK_PCAP  -o: pcap records in a 4 MiB buffer, written with write(2) by
 *              a writer thread while the loop fills a second one (pcapfile.h)
 *   SINK_MQ    a --threads worker with -o: pcap records keyed by instance
 *              serial, in the blocks of its merge queue (mq.h)
 *   SINK_OPS   every frame comes from ops->frame: live AF_PACKET sending and
 *              the paced sinks of --pace realtime, which wrap one of the
 *              above (afpacket.h)
 *
 * The first three are dispatched inside sink_frame without a call: they are
 * the hot path of -o, --null and --threads. Their slow paths (a full buffer,
 * close) go through `ops`, like the whole of SINK_OPS, so this header and
 * sink.c know no implementation: each implementation includes this header and
 * fills in a struct sink, and the dependency goes one way.
 *
 * Errors: functions return 0 or a negative errno; a sink also keeps its
 * first error in `err` (sticky: every later call fails the same way).
 *
 * A struct sink holds no pointer to itself, so it may be moved by copy while
 * no frame is outstanding (afpacket_attach moves the loop's sink inside the
 * live/paced sink that takes its place).
 *
 * Thread safety: a sink belongs to one thread. (The merge queue behind a
 * SINK_MQ sink is shared with the main thread, see mq.h.) */
#ifndef FE_SINK_H
#define FE_SINK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The pcap snaplen: a frame never exceeds it (sessions are checked against it). */
#define FE_MAX_FRAME 65535u
/* A pcap record header: seconds, nanoseconds, captured and original length. */
#define SINK_PCAP_REC 16u
/* A merge queue record: the instance serial (8 bytes, host order), then a pcap record. */
#define SINK_MQ_REC (8u + SINK_PCAP_REC)

enum sink_kind { SINK_NULL, SINK_PCAP, SINK_MQ, SINK_OPS };

#if defined(__GNUC__)
#define SINK_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define SINK_ALWAYS_INLINE inline
#endif

struct sink;

/* What an implementation provides. Unused entries may be NULL. */
struct sink_ops {
    /* SINK_OPS only: room for a frame of len bytes due at ts_ns, of instance
     * serial; NULL on error (s->err holds the errno when there is one). */
    uint8_t *(*frame)(struct sink *s, uint64_t ts_ns, uint64_t serial, uint32_t len);
    /* SINK_PCAP, SINK_MQ: hands buf[0, used) on and makes room again
     * (used = 0, buf may change). 0 or negative errno (also stored in s->err). */
    int (*flush)(struct sink *s);
    /* Hands on what is left and releases the implementation's resources.
     * 0 or negative errno (also stored in s->err). */
    int (*close)(struct sink *s);
};

struct sink {
    int kind;                   /* enum sink_kind */
    int err;                    /* 0, or the negative errno of the first failure (sticky) */
    uint8_t *buf;               /* PCAP/MQ: records not yet handed on; NULL/OPS: scratch frame */
    size_t used, cap;           /* bytes of buf in use and available */
    const struct sink_ops *ops; /* NULL: closed (or never opened) */
    void *priv;                 /* the implementation's state (merge queue, live sender) */
    int fd;                     /* SINK_PCAP: the file; -1 otherwise */
};

/* Flushes a buffered sink (SINK_PCAP, SINK_MQ). 0 or negative errno. */
static inline int sink_flush(struct sink *s)
{
    return s->ops->flush(s);
}

/* A record of a buffered sink: the key (SINK_MQ only), the pcap record
 * header and room for the frame. Always inlined with a constant `keyed`. */
static SINK_ALWAYS_INLINE uint8_t *sink_record(struct sink *s, uint64_t ts_ns, uint64_t serial,
                                               uint32_t len, const int keyed)
{
    const size_t hdr = keyed ? SINK_MQ_REC : SINK_PCAP_REC;
    if (s->cap - s->used < hdr + (size_t)len && sink_flush(s))
        return NULL;
    uint8_t *p = s->buf + s->used;
    uint32_t rec[4] = { (uint32_t)(ts_ns / 1000000000u), (uint32_t)(ts_ns % 1000000000u), len,
                        len };
    if (keyed)
        memcpy(p, &serial, 8);
    memcpy(p + hdr - SINK_PCAP_REC, rec, SINK_PCAP_REC);
    s->used += hdr + (size_t)len;
    return p + hdr;
}

/* Room for one frame of len bytes (at most 65535) due at ts_ns, from the
 * instance with that serial. Returns where to build it, or NULL on error
 * (see s->err). The null sink hands out the same scratch frame every time;
 * only SINK_MQ and SINK_OPS use the serial. */
static inline uint8_t *sink_frame(struct sink *s, uint64_t ts_ns, uint64_t serial, uint32_t len)
{
    /* Tests in this order, not a switch: the null sink, whose frames cost
     * least, pays one compare (GCC 12 ordered a switch's tests by value and
     * put it last). */
    const int kind = s->kind;
    if (kind == SINK_NULL)
        return s->buf;
    if (kind == SINK_PCAP)
        return sink_record(s, ts_ns, serial, len, 0);
    if (kind == SINK_MQ)
        return sink_record(s, ts_ns, serial, len, 1);
    return s->ops->frame(s, ts_ns, serial, len);
}

/* Appends n bytes, one whole pcap record, to a SINK_PCAP sink (the main
 * thread's merge of --threads). 0 or negative errno. */
static inline int sink_put(struct sink *s, const uint8_t *p, size_t n)
{
    if (s->cap - s->used < n) {
        int rc = sink_flush(s);
        if (rc)
            return rc;
    }
    memcpy(s->buf + s->used, p, n);
    s->used += n;
    return 0;
}

/* Makes s the null sink (kind SINK_NULL). 0 or -ENOMEM (s stays closed). */
int sink_open_null(struct sink *s);

/* A closed sink: sink_close does nothing on it. */
void sink_init(struct sink *s);

/* Closes s through its implementation (flushing what is buffered) and marks
 * it closed; on a closed sink does nothing and returns 0. Returns 0 or
 * negative errno (also in s->err). */
int sink_close(struct sink *s);

#endif
