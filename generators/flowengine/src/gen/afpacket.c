/* afpacket.c - AF_PACKET TX ring / sendmmsg back end and paced sinks
 * (afpacket.h). */
#define _GNU_SOURCE /* sendmmsg */
#include "afpacket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "halt.h"
#include "sink.h"
#include "stats.h"
#include "summary.h"

#define DEF_BATCH 256u /* bench_live.py: 256 beat 16 and 64 on veth, both back ends */
#define DEF_RING_FRAMES 4096u
#define RING_MAX_BYTES (64u << 20)
#define STALL_NS 1000000000ull /* no progress for this long: the interface is stuck */
#define CLOSE_WAIT_NS 2000000000ull
/* Data of a TPACKET_V2 TX frame starts right after the aligned header. */
#define TX_DATA_OFF (TPACKET2_HDRLEN - sizeof(struct sockaddr_ll))
#define ST_MASK (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING | TP_STATUS_WRONG_FORMAT)

enum cur_state { CUR_NONE, CUR_SLOT, CUR_DISCARD };

struct afpacket {
    int live, ring, pace;
    uint64_t late_thr;
    unsigned batch;
    const char *iface;
    int fd;
    uint32_t max_frame; /* largest frame of the session */

    /* TX ring: slots are indexed by free-running counters, slot = idx & mask.
     * [reclaim, flushed): handed to the kernel; [flushed, head): committed
     * (SEND_REQUEST) but not yet flushed. */
    uint8_t *map;
    size_t map_len;
    uint32_t frame_size, nframes, mask;
    uint64_t head, flushed, reclaim;

    /* sendmmsg: batch buffers of slot bytes; queued = committed messages. */
    uint8_t *bufs;
    uint32_t slot;
    struct mmsghdr *msgs;
    struct iovec *iov;
    unsigned queued;

    uint64_t *dues; /* absolute due time per slot (paced only) */
    int cur_state;
    uint8_t *cur;
    uint32_t cur_len;
    uint64_t cur_due;

    int started;
    uint64_t t0; /* CLOCK_MONOTONIC of the run start (ns) */
    uint64_t sent, sent_bytes, failed, late, max_late;
    uint64_t paused_ns; /* held in a pause that came during a pacing wait */
    int fatal;          /* the back end cannot go on */
    int warned;

    struct sink inner; /* the loop's own sink, moved here by afpacket_attach */
    struct stats *st;
};

/* ---- preflight ------------------------------------------------------------- */

static void list_interfaces(const char *iface)
{
    struct if_nameindex *ni = if_nameindex();
    fprintf(stderr, "flowengine: --iface %s: no such interface (here: ", iface);
    int n = 0;
    for (struct if_nameindex *p = ni; p && p->if_index; p++)
        fprintf(stderr, "%s%s", n++ ? ", " : "", p->if_name);
    fprintf(stderr, "%s): name one of them or create it (e.g. a veth pair in a test namespace)\n",
            n ? "" : "none");
    if (ni)
        if_freenameindex(ni);
}

static uint32_t pow2_at_least(uint64_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

static int ring_setup(struct afpacket *h, unsigned want_frames, char *why, size_t whylen)
{
    int v = TPACKET_V2;
    if (setsockopt(h->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v)) {
        int rc = -errno;
        snprintf(why, whylen, "PACKET_VERSION: %s", strerror(-rc));
        return rc;
    }
    uint32_t fs = pow2_at_least(TPACKET_ALIGN(TX_DATA_OFF + h->max_frame));
    if (fs < 128)
        fs = 128;
    uint32_t nf = pow2_at_least(want_frames ? want_frames : DEF_RING_FRAMES);
    while (nf > 64 && (uint64_t)nf * fs > RING_MAX_BYTES)
        nf >>= 1;
    uint32_t bs = fs > (1u << 16) ? fs : (1u << 16);
    if ((uint64_t)nf * fs < bs)
        nf = bs / fs;
    struct tpacket_req req = { .tp_block_size = bs,
                               .tp_block_nr = (uint32_t)((uint64_t)nf * fs / bs),
                               .tp_frame_size = fs,
                               .tp_frame_nr = nf };
    if (setsockopt(h->fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof req)) {
        int rc = -errno;
        snprintf(why, whylen, "PACKET_TX_RING: %s", strerror(-rc));
        return rc;
    }
    h->map_len = (size_t)nf * fs;
    void *m = mmap(NULL, h->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, h->fd, 0);
    if (m == MAP_FAILED) {
        int rc = -errno;
        snprintf(why, whylen, "mmap: %s", strerror(-rc));
        struct tpacket_req zero = { 0 };
        setsockopt(h->fd, SOL_PACKET, PACKET_TX_RING, &zero, sizeof zero);
        return rc;
    }
    h->map = m;
    h->frame_size = fs;
    h->nframes = nf;
    h->mask = nf - 1;
    return 0;
}

static int mmsg_setup(struct afpacket *h)
{
    h->slot = (h->max_frame + 63) & ~63u;
    h->bufs = malloc((size_t)h->batch * h->slot);
    h->msgs = calloc(h->batch, sizeof *h->msgs);
    h->iov = calloc(h->batch, sizeof *h->iov);
    if (!h->bufs || !h->msgs || !h->iov)
        return -ENOMEM;
    for (unsigned i = 0; i < h->batch; i++) {
        h->iov[i].iov_base = h->bufs + (size_t)i * h->slot;
        h->msgs[i].msg_hdr.msg_iov = &h->iov[i];
        h->msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int sz = 4 << 20;
    if (setsockopt(h->fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz))
        setsockopt(h->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    return 0;
}

int afpacket_open(struct afpacket **out, const struct afpacket_opts *o, const struct fe_session *s,
                  const char *session_name)
{
    struct afpacket *h = calloc(1, sizeof *h);
    int rc;
    if (!h) {
        fprintf(stderr, "flowengine: out of memory\n");
        return -ENOMEM;
    }
    h->fd = -1;
    h->pace = o->pace;
    h->late_thr = o->late_ns;
    h->batch = o->batch ? o->batch : DEF_BATCH;
    h->iface = o->iface;
    *out = NULL;
    if (!o->iface) {
        *out = h;
        return 0;
    }
    h->live = 1;

    unsigned ifindex = if_nametoindex(o->iface);
    if (!ifindex) {
        rc = -ENODEV;
        list_interfaces(o->iface);
        goto fail;
    }
    h->fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: transmit only, nothing received */
    if (h->fd < 0) {
        rc = -errno;
        if (rc == -EPERM || rc == -EACCES)
            fprintf(stderr,
                    "flowengine: --iface %s: AF_PACKET socket: %s: needs CAP_NET_RAW: run "
                    "as root or inside `unshare -Urn`\n",
                    o->iface, strerror(-rc));
        else
            fprintf(stderr, "flowengine: --iface %s: AF_PACKET socket: %s\n", o->iface,
                    strerror(-rc));
        goto fail;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", o->iface);
    if (ioctl(h->fd, SIOCGIFFLAGS, &ifr)) {
        rc = -errno;
        fprintf(stderr, "flowengine: --iface %s: cannot read its flags: %s\n", o->iface,
                strerror(-rc));
        goto fail;
    }
    rc = -ENETDOWN;
    if (!(ifr.ifr_flags & IFF_UP)) {
        fprintf(stderr,
                "flowengine: --iface %s: the interface is down: bring it up with "
                "`ip link set %s up`\n",
                o->iface, o->iface);
        goto fail;
    }
    if (!(ifr.ifr_flags & IFF_RUNNING)) {
        fprintf(stderr,
                "flowengine: --iface %s: the interface has no carrier (for a veth: its "
                "peer is down): bring the peer up with `ip link set PEER up`\n",
                o->iface);
        goto fail;
    }
    if (ioctl(h->fd, SIOCGIFMTU, &ifr)) {
        rc = -errno;
        fprintf(stderr, "flowengine: --iface %s: cannot read its MTU: %s\n", o->iface,
                strerror(-rc));
        goto fail;
    }
    uint32_t mtu = (uint32_t)ifr.ifr_mtu, limit = mtu + FE_ETH_LEN;
    for (size_t k = 0; k < s->nflows; k++) {
        const struct fe_flow *f = &s->flows[k];
        uint32_t fl = f->hdr_len + f->size_hi; /* a stream line: hdr_len 0, its largest frame */
        if (fl > limit && f->kind == FE_K_STREAM) {
            rc = -EMSGSIZE;
            fprintf(stderr,
                    "flowengine: %s:%u: stream: frames up to %u bytes do not fit the MTU of %s "
                    "(%u, i.e. frames of at most %u bytes): use smaller frames or raise the MTU "
                    "with `ip link set %s mtu %u`\n",
                    session_name, f->lineno, fl, o->iface, mtu, limit, o->iface, fl - FE_ETH_LEN);
            goto fail;
        }
        if (fl > limit) {
            rc = -EMSGSIZE;
            fprintf(stderr,
                    "flowengine: %s:%u: %s: frames up to %u bytes do not fit the MTU of "
                    "%s (%u, i.e. frames of at most %u bytes): lower %s to at most %u or raise "
                    "the MTU with `ip link set %s mtu %u`\n",
                    session_name, f->lineno, f->kind == FE_K_SESS ? "session" : "flow", fl,
                    o->iface, mtu, limit, f->kind == FE_K_SESS ? "mss" : "size", limit - f->hdr_len,
                    o->iface, fl - FE_ETH_LEN);
            goto fail;
        }
        if (fl > h->max_frame)
            h->max_frame = fl;
    }
    if (!h->max_frame)
        h->max_frame = 64;

    if (o->qdisc_bypass) {
        int one = 1;
        setsockopt(h->fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one); /* best effort */
    }
    char why[160] = "";
    if (o->mode == AFPACKET_TX_RING && ring_setup(h, o->ring_frames, why, sizeof why) == 0) {
        h->ring = 1;
        if (h->batch > h->nframes / 2)
            h->batch = h->nframes / 2;
    } else {
        if (o->mode == AFPACKET_TX_RING)
            fprintf(stderr, "flowengine: --iface %s: TX ring unavailable (%s): using sendmmsg\n",
                    o->iface, why);
        if ((rc = mmsg_setup(h))) {
            fprintf(stderr, "flowengine: out of memory\n");
            goto fail;
        }
    }
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_ifindex = (int)ifindex;
    sll.sll_protocol = 0;
    if (bind(h->fd, (struct sockaddr *)&sll, sizeof sll)) {
        rc = -errno;
        fprintf(stderr, "flowengine: --iface %s: bind: %s\n", o->iface, strerror(-rc));
        goto fail;
    }
    if (h->pace == PACE_REALTIME) {
        h->dues = malloc((h->ring ? h->nframes : h->batch) * sizeof *h->dues);
        if (!h->dues) {
            rc = -ENOMEM;
            fprintf(stderr, "flowengine: out of memory\n");
            goto fail;
        }
    }
    *out = h;
    return 0;
fail:
    afpacket_free(h);
    return rc;
}

const char *afpacket_sink_name(const struct afpacket *h)
{
    return !h || !h->live ? NULL : h->ring ? "afpacket-ring" : "afpacket-sendmmsg";
}

int afpacket_paced(const struct afpacket *h)
{
    return h && h->pace == PACE_REALTIME;
}

void afpacket_free(struct afpacket *h)
{
    if (!h)
        return;
    if (h->map)
        munmap(h->map, h->map_len);
    if (h->fd >= 0)
        close(h->fd);
    free(h->bufs);
    free(h->msgs);
    free(h->iov);
    free(h->dues);
    free(h);
}

/* ---- lateness ------------------------------------------------------------- */

static inline void account_late(struct afpacket *h, uint64_t now, uint64_t due)
{
    uint64_t l = now > due ? now - due : 0;
    if (l > h->max_late)
        h->max_late = l;
    if (l > h->late_thr) {
        h->late++;
        h->st->late++;
    }
}

/* ---- TX ring ----------------------------------------------------------------- */

static inline struct tpacket2_hdr *ring_hdr(const struct afpacket *h, uint64_t idx)
{
    return (struct tpacket2_hdr *)(h->map + (size_t)(idx & h->mask) * h->frame_size);
}

static inline uint32_t slot_status(const struct tpacket2_hdr *ph)
{
    return __atomic_load_n(&ph->tp_status, __ATOMIC_ACQUIRE) & ST_MASK;
}

/* Counts the slots the kernel is done with. Returns -1 on a refused frame. */
static int ring_reclaim(struct afpacket *h)
{
    while (h->reclaim < h->flushed) {
        struct tpacket2_hdr *ph = ring_hdr(h, h->reclaim);
        uint32_t st = slot_status(ph);
        if (st == TP_STATUS_AVAILABLE) {
            h->sent++;
            h->sent_bytes += ph->tp_len;
        } else if (st == TP_STATUS_WRONG_FORMAT) {
            /* The kernel refused it and stops at this slot: what follows is
             * never sent either. */
            fprintf(stderr,
                    "flowengine: --iface %s: the kernel refused a frame of %u bytes "
                    "(TP_STATUS_WRONG_FORMAT)\n",
                    h->iface, ph->tp_len);
            h->failed += h->head - h->reclaim;
            h->reclaim = h->flushed = h->head;
            h->fatal = 1;
            return -EIO;
        } else {
            break;
        }
        h->reclaim++;
    }
    return 0;
}

static void give_up(struct afpacket *h, const char *what, int err)
{
    if (err)
        fprintf(stderr, "flowengine: --iface %s: %s: %s\n", h->iface, what, strerror(err));
    else
        fprintf(stderr, "flowengine: --iface %s: %s\n", h->iface, what);
    /* Nothing after reclaim is known to be accepted. */
    if (h->ring) {
        h->failed += h->head - h->reclaim;
        h->reclaim = h->flushed = h->head;
    }
    h->fatal = 1;
}

static void short_nap(void)
{
    struct timespec ts = { 0, 20000 };
    nanosleep(&ts, NULL);
}

/* Hands the committed slots to the kernel. ENOBUFS/EAGAIN are retried until
 * no progress for STALL_NS. */
static int ring_flush(struct afpacket *h)
{
    if (h->fatal)
        return -EIO;
    if (h->flushed < h->head) {
        if (h->dues) {
            uint64_t now = pace_now();
            for (uint64_t i = h->flushed; i < h->head; i++)
                account_late(h, now, h->dues[i & h->mask]);
        }
        h->flushed = h->head;
    }
    uint64_t last_progress = 0;
    for (;;) {
        ssize_t r = send(h->fd, NULL, 0, MSG_DONTWAIT);
        if (ring_reclaim(h))
            return -EIO;
        if (r >= 0)
            return 0;
        int e = errno;
        if (e == EINTR)
            continue;
        if (e != ENOBUFS && e != EAGAIN) {
            give_up(h, "send", e);
            return -EIO;
        }
        /* Still frames waiting for the kernel? */
        int waiting = 0;
        for (uint64_t i = h->reclaim; i < h->flushed; i++)
            if (slot_status(ring_hdr(h, i)) == TP_STATUS_SEND_REQUEST) {
                waiting = 1;
                break;
            }
        if (!waiting)
            return 0;
        uint64_t now = pace_now();
        if (!last_progress)
            last_progress = now;
        else if (now - last_progress > STALL_NS) {
            give_up(h, "the interface accepted nothing for 1 s (send keeps failing)", e);
            return -EIO;
        }
        short_nap();
    }
}

/* A free slot at head, waiting (bounded) for the kernel to release one. */
static uint8_t *ring_slot(struct afpacket *h)
{
    if (h->head - h->reclaim >= h->nframes) {
        if (ring_reclaim(h))
            return NULL;
        uint64_t since = 0;
        while (h->head - h->reclaim >= h->nframes) {
            if (halt_signal)
                return NULL;
            if (ring_flush(h))
                return NULL;
            if (h->head - h->reclaim < h->nframes)
                break;
            uint64_t now = pace_now();
            if (!since)
                since = now;
            else if (now - since > STALL_NS) {
                give_up(h, "the TX ring did not drain for 1 s", 0);
                return NULL;
            }
            short_nap();
            if (ring_reclaim(h))
                return NULL;
        }
    }
    return (uint8_t *)ring_hdr(h, h->head) + TX_DATA_OFF;
}

/* ---- sendmmsg ------------------------------------------------------------- */

static int mmsg_flush(struct afpacket *h)
{
    unsigned off = 0;
    uint64_t since = 0;
    if (h->fatal)
        return -EIO;
    if (h->dues && h->queued) {
        uint64_t now = pace_now();
        for (unsigned i = 0; i < h->queued; i++)
            account_late(h, now, h->dues[i]);
    }
    while (off < h->queued) {
        int r = sendmmsg(h->fd, h->msgs + off, h->queued - off, MSG_DONTWAIT);
        if (r > 0) {
            for (int i = 0; i < r; i++)
                h->sent_bytes += h->iov[off + (unsigned)i].iov_len;
            h->sent += (unsigned)r;
            off += (unsigned)r;
            since = 0;
            continue;
        }
        int e = r < 0 ? errno : EAGAIN;
        if (e == EINTR)
            continue;
        if (e == ENOBUFS || e == EAGAIN) {
            uint64_t now = pace_now();
            if (!since)
                since = now;
            else if (now - since > STALL_NS) {
                h->failed += h->queued - off;
                h->queued = 0;
                give_up(h, "the interface accepted nothing for 1 s (sendmmsg keeps failing)", e);
                return -EIO;
            }
            short_nap();
            continue;
        }
        /* This one frame was refused: count it and go on with the rest. */
        if (!h->warned++)
            fprintf(stderr,
                    "flowengine: --iface %s: sendmmsg refused a frame: %s (counted in "
                    "\"failed\")\n",
                    h->iface, strerror(e));
        h->failed++;
        off++;
    }
    h->queued = 0;
    return 0;
}

/* ---- the hook ------------------------------------------------------------- */

static inline int flush(struct afpacket *h)
{
    return h->ring ? ring_flush(h) : mmsg_flush(h);
}

static inline unsigned queued(const struct afpacket *h)
{
    return h->ring ? (unsigned)(h->head - h->flushed) : h->queued;
}

/* Makes the frame handed out last time part of the next flush. */
static inline void commit(struct afpacket *h)
{
    if (h->cur_state == CUR_SLOT) {
        if (h->ring) {
            struct tpacket2_hdr *ph = ring_hdr(h, h->head);
            ph->tp_len = h->cur_len;
            if (h->dues)
                h->dues[h->head & h->mask] = h->cur_due;
            __atomic_store_n(&ph->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
            h->head++;
        } else {
            h->iov[h->queued].iov_len = h->cur_len;
            if (h->dues)
                h->dues[h->queued] = h->cur_due;
            h->queued++;
        }
    }
    h->cur_state = CUR_NONE;
}

/* A pause seen while waiting for a frame's due time (nothing is queued then):
 * holds, shifts the run clock by the time held; returns the frame's new due
 * time. */
static uint64_t hold_in_wait(struct afpacket *h, uint64_t due_ns)
{
    uint64_t held = pace_hold();
    h->t0 += held;
    h->paused_ns += held;
    return h->t0 + due_ns;
}

void afpacket_hold(void *ctx, int resume, uint64_t held_ns)
{
    struct afpacket *h = ctx;
    if (resume) {
        if (h->started)
            h->t0 += held_ns;
        return;
    }
    if (h->live && !h->fatal) {
        commit(h);
        if (queued(h))
            flush(h); /* a failure is sticky (fatal): the next frame reports it */
    }
}

uint64_t afpacket_paused_ns(const struct afpacket *h)
{
    return h ? h->paused_ns : 0;
}

static void before_row(void *ctx)
{
    struct afpacket *h = ctx;
    /* Packets of the second about to be written are released (and their
     * lateness known) before its row: only happens at a second boundary. */
    if (h->live && h->dues) {
        commit(h);
        if (queued(h))
            flush(h);
    }
}

/* The sink's frame entry (sink_ops.frame). */
static uint8_t *afpacket_frame(struct sink *s, uint64_t due_ns, uint64_t serial, uint32_t len)
{
    struct afpacket *h = s->priv;
    if (!h->started) {
        h->started = 1;
        h->t0 = pace_now();
    }
    uint64_t due = h->t0 + due_ns;

    if (!h->live) {
        /* -o / --null with --pace realtime: the frame is built at its time. */
        if (h->pace == PACE_REALTIME) {
            /* A stop cuts the wait short (the loop ends next); a pause holds
             * and shifts the clock. */
            while (pace_wait_until(due) == -EAGAIN)
                due = hold_in_wait(h, due_ns);
            account_late(h, pace_now(), due);
        }
        uint8_t *p = sink_frame(&h->inner, due_ns, serial, len);
        if (!p)
            s->err = h->inner.err;
        return p;
    }

    commit(h);
    if (h->fatal)
        return NULL;
    if (h->pace == PACE_REALTIME) {
        if (pace_now() < due) {
            /* Release what is due, then wait for this one (a pause holds
             * with nothing queued, then the wait goes on for the shifted due
             * time). */
            if (queued(h) && flush(h))
                return NULL;
            int w;
            while ((w = pace_wait_until(due)) == -EAGAIN)
                due = hold_in_wait(h, due_ns);
            if (w) {
                h->cur_state = CUR_DISCARD; /* stopped before it was due */
                return s->buf;
            }
        } else if (queued(h) >= h->batch && flush(h)) {
            return NULL;
        }
    } else if (queued(h) >= h->batch && flush(h)) {
        return NULL;
    }

    uint8_t *p;
    if (h->ring) {
        p = ring_slot(h);
        if (!p) {
            if (h->fatal)
                return NULL;
            h->cur_state = CUR_DISCARD; /* a stop while waiting for a slot */
            return s->buf;
        }
    } else {
        p = h->bufs + (size_t)h->queued * h->slot;
    }
    h->cur_state = CUR_SLOT;
    h->cur = p;
    h->cur_len = len;
    h->cur_due = due;
    return p;
}

/* The live part of closing: commits and flushes what is queued, waits
 * (bounded) for the ring's slots and counts the frames still held. 0 or
 * -EIO. */
static int afpacket_drain(struct afpacket *h)
{
    int rc = 0;
    if (h->st)
        h->st->before_row = NULL;
    if (!h->live)
        return 0;
    commit(h);
    if (queued(h) && flush(h))
        rc = -EIO;
    if (h->ring && !h->fatal) {
        /* Wait (bounded) until the kernel is done with every slot. */
        uint64_t until = pace_now() + CLOSE_WAIT_NS;
        while (h->reclaim < h->flushed && pace_now() < until) {
            if (ring_flush(h)) {
                rc = -EIO;
                break;
            }
            if (h->reclaim < h->flushed)
                short_nap();
        }
        /* Still held by the kernel: accepted if sending, else never sent. */
        for (; h->reclaim < h->flushed; h->reclaim++) {
            struct tpacket2_hdr *ph = ring_hdr(h, h->reclaim);
            if (slot_status(ph) == TP_STATUS_SENDING) {
                h->sent++;
                h->sent_bytes += ph->tp_len;
            } else {
                h->failed++;
                rc = -EIO;
            }
        }
    }
    if (h->fatal)
        rc = -EIO;
    return rc;
}

/* Flushes the live back end (bounded wait for the ring), then closes the
 * inner sink: h owns it from afpacket_attach on. */
static int afpacket_close(struct sink *s)
{
    struct afpacket *h = s->priv;
    int rc = afpacket_drain(h);
    if (rc)
        s->err = rc;
    int irc = sink_close(&h->inner);
    if (irc && !s->err)
        s->err = irc;
    return rc ? rc : irc;
}

static const struct sink_ops afpacket_ops = {
    .frame = afpacket_frame,
    .close = afpacket_close,
};

void afpacket_attach(struct afpacket *h, struct sink *s, struct stats *st)
{
    /* A struct sink holds no pointer to itself: it moves by copy. */
    h->inner = *s;
    sink_init(s);
    s->kind = SINK_OPS;
    s->ops = &afpacket_ops;
    s->priv = h;
    s->buf = h->inner.buf; /* live: where a frame that will not be sent is built */
    h->st = st;
    st->before_row = before_row;
    st->before_row_ctx = h;
}

void afpacket_start(struct afpacket *h, uint64_t t0)
{
    h->started = 1;
    h->t0 = t0;
}

void afpacket_summary_add(const struct afpacket *h, struct summary *sum)
{
    if (!h)
        return;
    if (h->live) {
        sum->sent += h->sent;
        sum->sent_bytes += h->sent_bytes;
        sum->failed += h->failed;
    }
    sum->late += h->late;
    if (h->max_late > sum->max_late_ns)
        sum->max_late_ns = h->max_late;
    sum->paced = h->pace;
}

int afpacket_live(const struct afpacket *h)
{
    return h && h->live;
}

void afpacket_summary(const struct afpacket *h, struct summary *sum)
{
    if (!h)
        return;
    if (h->live) {
        sum->sent = h->sent;
        sum->sent_bytes = h->sent_bytes;
        sum->failed = h->failed;
    }
    sum->late = h->late;
    sum->max_late_ns = h->max_late;
    sum->paced = h->pace;
}
