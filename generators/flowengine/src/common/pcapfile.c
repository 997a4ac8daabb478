/* pcapfile.c - the pcap file sink (pcapfile.h): two buffers, one writer
 * thread. */
#define _POSIX_C_SOURCE 200809L
#include "pcapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pcapfile {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *other;   /* the buffer the loop gets back */
    uint8_t *pending; /* handed to the writer, NULL when idle */
    size_t pending_len;
    int fd, stop, werr;
};

static int write_all(int fd, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += (size_t)w;
    }
    return 0;
}

static void *writer(void *arg)
{
    struct pcapfile *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->pending && !pf->stop)
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (!pf->pending && pf->stop)
            break;
        uint8_t *p = pf->pending;
        size_t n = pf->pending_len;
        pthread_mutex_unlock(&pf->mu);
        int rc = pf->werr ? 0 : write_all(pf->fd, p, n);
        pthread_mutex_lock(&pf->mu);
        if (rc && !pf->werr)
            pf->werr = rc;
        pf->other = p;
        pf->pending = NULL;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

/* Waits until the writer is idle; its first error, or 0. */
static int wait_idle(struct pcapfile *pf)
{
    pthread_mutex_lock(&pf->mu);
    while (pf->pending)
        pthread_cond_wait(&pf->cv, &pf->mu);
    int rc = pf->werr;
    pthread_mutex_unlock(&pf->mu);
    return rc;
}

static int pcapfile_flush(struct sink *s)
{
    struct pcapfile *pf = s->priv;
    if (s->err)
        return s->err;
    int rc = wait_idle(pf);
    if (rc)
        return s->err = rc;
    if (!s->used)
        return 0;
    pthread_mutex_lock(&pf->mu);
    pf->pending = s->buf;
    pf->pending_len = s->used;
    s->buf = pf->other;
    pf->other = NULL;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    s->used = 0;
    return 0;
}

static int pcapfile_close(struct sink *s)
{
    struct pcapfile *pf = s->priv;
    int rc = pcapfile_flush(s);
    int w = wait_idle(pf);
    if (!rc && w)
        rc = s->err = w;
    pthread_mutex_lock(&pf->mu);
    pf->stop = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->th, NULL);
    if (close(s->fd) && !s->err)
        rc = s->err = -errno;
    s->fd = -1;
    free(s->buf);
    free(pf->other);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    free(pf);
    s->priv = NULL;
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
    struct pcapfile *pf = calloc(1, sizeof *pf);
    s->buf = malloc(s->cap);
    if (pf)
        pf->other = malloc(s->cap);
    if (!pf || !s->buf || !pf->other) {
        if (pf)
            free(pf->other);
        free(pf);
        free(s->buf);
        sink_init(s);
        return -ENOMEM;
    }
    s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (s->fd < 0) {
        int rc = -errno;
        free(pf->other);
        free(pf);
        free(s->buf);
        sink_init(s);
        return rc;
    }
    pf->fd = s->fd;
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    if (pthread_create(&pf->th, NULL, writer, pf)) {
        close(s->fd);
        free(pf->other);
        free(pf);
        free(s->buf);
        sink_init(s);
        return -EAGAIN;
    }
    s->priv = pf;
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
