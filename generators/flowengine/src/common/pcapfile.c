/* pcapfile.c - the pcap file sink (pcapfile.h). */
#define _POSIX_C_SOURCE 200809L
#include "pcapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes the whole buffer, retrying short writes and EINTR. */
static int pcapfile_flush(struct sink *s)
{
    size_t off = 0;
    if (s->err)
        return s->err;
    while (off < s->used) {
        ssize_t w = write(s->fd, s->buf + off, s->used - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return s->err = -errno;
        }
        off += (size_t)w;
    }
    s->used = 0;
    return 0;
}

static int pcapfile_close(struct sink *s)
{
    int rc = pcapfile_flush(s);
    if (close(s->fd) && !s->err)
        rc = s->err = -errno;
    s->fd = -1;
    free(s->buf);
    return rc ? rc : s->err;
}

static const struct sink_ops pcapfile_ops = {
    .flush = pcapfile_flush,
    .close = pcapfile_close,
};

int pcapfile_open(struct sink *s, const char *path)
{
    sink_init(s);
    s->kind = SINK_PCAP;
    s->cap = PCAPFILE_BUF_SIZE;
    s->buf = malloc(s->cap);
    if (!s->buf)
        return -ENOMEM;
    s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (s->fd < 0) {
        int rc = -errno;
        free(s->buf);
        sink_init(s);
        return rc;
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
    s->ops = &pcapfile_ops;
    return 0;
}
