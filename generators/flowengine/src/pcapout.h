/* pcapout.h - packet sinks: a nanosecond pcap file, or nothing (--null). */
#ifndef FE_PCAPOUT_H
#define FE_PCAPOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef PCAP_BUF_SIZE
#define PCAP_BUF_SIZE (4u << 20)
#endif

struct sink {
    int fd;                 /* -1 for the null sink */
    int error;              /* errno of the first failed write, sticky */
    uint8_t *buf;           /* pcap: records waiting for write(2); null: one frame */
    size_t used, cap;
    uint64_t file_bytes;    /* bytes handed to the kernel */
    struct txhook *hook;    /* live sending / pacing (afpacket.h), or NULL */
};

struct txhook;
uint8_t *txhook_frame(struct sink *s, uint64_t due_ns, uint32_t len);
int txhook_close(struct sink *s);

int sink_open_pcap(struct sink *s, const char *path);
int sink_open_null(struct sink *s);
int sink_flush(struct sink *s);
/* Flushes and closes; returns -1 (errno in s->error) if anything failed. */
int sink_close(struct sink *s);

/* Room for one frame of len bytes stamped ts_ns; NULL on a write error. The
 * null sink hands out the same scratch frame every time. */
static inline uint8_t *sink_frame(struct sink *s, uint64_t ts_ns, uint32_t len)
{
    if (s->hook)
        return txhook_frame(s, ts_ns, len);
    if (s->fd < 0)
        return s->buf;
    if (s->cap - s->used < 16 + (size_t)len && sink_flush(s))
        return NULL;
    uint8_t *p = s->buf + s->used;
    uint32_t rec[4] = { (uint32_t)(ts_ns / 1000000000u), (uint32_t)(ts_ns % 1000000000u),
                        len, len };
    memcpy(p, rec, 16);
    s->used += 16 + (size_t)len;
    return p + 16;
}

#endif
