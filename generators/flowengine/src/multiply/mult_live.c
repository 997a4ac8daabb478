/* mult_live.c - the inline multiplier: AF_PACKET in, mult.c's rewrite, AF_PACKET out. */
#define _GNU_SOURCE
#include "mult_live.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bigmem.h"
#include "halt.h"
#include "mult.h"
#include "mult_args.h"

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define LIVE_BATCH 64u /* received frames handled between two flushes */
#define RX_RING_BYTES                                                                              \
    (16u << 20) /* each receive ring (TPACKET_V2): 8192 slots of 2 KiB at MTU 1500 */
#define RX_BLOCK (1u << 16)
#define LIVE_MAX_FRAME 9216u /* larger frames are forwarded, never multiplied */
#define LIVE_TAG_LEN 4u      /* a VLAN tag the kernel took off a received frame, put back */
#define RING_FRAME 2048u     /* TX ring slot; longer copies go through sendmmsg */
#define RING_BLOCK (1u << 16)
#define RING_BLOCKS 64u /* 2048 slots */
#define RING_FLUSH 256u /* slots filled between two kicks of the ring */

static const struct opt_choice tx_choices[] = { { "ring", 1 }, { "sendmmsg", 0 }, { NULL, 0 } };
static const struct opt_choice scope_choices[] = { { "packet", 0 }, { "batch", 1 }, { NULL, 0 } };

/* The usage text, its choices from the tables the parser uses. */
static const char *live_usage(void)
{
    static char text[2048];
    char order[64], ports[64], tx[64], scope[64];
    if (!text[0])
        snprintf(
            text, sizeof text,
            "usage: flowengine multiply --live IN_IFACE OUT_IFACE DUT_IFACE -T N --ranges "
            "CIDR[,CIDR...]\n"
            "                           [--both] [--seed S] [--order %s] [--ports %s]\n"
            "                           [--original CIDR[,CIDR...]] [--max-flows N] [--max-addrs N "
            "(default 256)]\n"
            "                           [--tx %s] [--qdisc-bypass] [--spfo-scope %s]\n"
            "                           [--summary FILE]\n"
            "  --tx: how the copies leave (sendmmsg, the default: one call a received batch "
            "carries its\n"
            "  copies and originals in order; ring: a TPACKET_V2 TX ring, the copies written in "
            "its slots);\n"
            "  --qdisc-bypass: as the engine's live sender, but then a capture on OUT or DUT no "
            "longer sees\n"
            "  what leaves there; --spfo-scope: each original right after its own copies (packet, "
            "the\n"
            "  default), or a received batch's originals after all the batch's copies (batch).\n"
            "  IN -> OUT frames are forwarded and multiplied (T copies on DUT, before the "
            "original);\n"
            "  OUT -> IN frames are forwarded (and multiplied too with --both). Runs until "
            "SIGINT/SIGTERM.\n",
            opt_choice_names(mult_order_choices, "|", order, sizeof order),
            opt_choice_names(mult_ports_choices, "|", ports, sizeof ports),
            opt_choice_names(tx_choices, "|", tx, sizeof tx),
            opt_choice_names(scope_choices, "|", scope, sizeof scope));
    return text;
}

struct live_opts {
    const char *ifn[3]; /* in, out, dut */
    const char *ranges, *original, *summary;
    uint64_t copies, seed, max_flows, max_addrs;
    int order, ports, both, bypass, ring, batch;
};

/* One direction's receive side: a socket and its RX ring (TPACKET_V2 frames). */
struct live_port {
    int fd, ifindex;
    const char *name;
    struct sockaddr_ll sll; /* where a frame sent to this interface from another socket goes */
    uint8_t *map;
    size_t len;
    unsigned frames, fsize, head;
};

/* The copies' TX ring on the DUT interface (TPACKET_V2), as the engine's live sender uses. */
struct live_ring {
    uint8_t *map;
    size_t len;
    unsigned frames, head, pending;
    int fd;
};

struct live_dir {
    uint64_t in, multiplied, copies_sent, originals_sent, send_failed, oversize, vlan_restored;
};

enum {
    OPT_BOTH = 256,
    OPT_QDISC_BYPASS,
    OPT_RANGES,
    OPT_ORIGINAL,
    OPT_SUMMARY,
    OPT_SEED,
    OPT_MAX_FLOWS,
    OPT_MAX_ADDRS,
    OPT_SPFO_SCOPE,
    OPT_TX,
    OPT_ORDER,
    OPT_PORTS
};

static const struct option live_options[] = {
    { "help", no_argument, NULL, 'h' },
    { "both", no_argument, NULL, OPT_BOTH },
    { "qdisc-bypass", no_argument, NULL, OPT_QDISC_BYPASS },
    { "ranges", required_argument, NULL, OPT_RANGES },
    { "original", required_argument, NULL, OPT_ORIGINAL },
    { "summary", required_argument, NULL, OPT_SUMMARY },
    { "seed", required_argument, NULL, OPT_SEED },
    { "max-flows", required_argument, NULL, OPT_MAX_FLOWS },
    { "max-addrs", required_argument, NULL, OPT_MAX_ADDRS },
    { "spfo-scope", required_argument, NULL, OPT_SPFO_SCOPE },
    { "tx", required_argument, NULL, OPT_TX },
    { "order", required_argument, NULL, OPT_ORDER },
    { "ports", required_argument, NULL, OPT_PORTS },
    { NULL, 0, NULL, 0 }
};

/* argv[0] is "--live". */
static int live_args(int argc, char **argv, struct live_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_flows = 65536;
    o->ring = 0;
    int pos = 0, c, li, rc;
    char name[32];
    opterr = 0;
    /* "-": the interfaces come back in order as 1; ":": a missing value is ':' */
    while ((li = -1, c = getopt_long(argc, argv, "-:hT:", live_options, &li)) != -1) {
        const char *a = name, *v = optarg;
        uint64_t *num = NULL;
        if (li >= 0)
            snprintf(name, sizeof name, "--%s", live_options[li].name);
        else if (c == 'T')
            snprintf(name, sizeof name, "-T");
        else
            a = argv[optind - 1]; /* a missing value's, an unknown option's or an interface */
        switch (c) {
        case 'h':
            fputs(live_usage(), stdout);
            exit(0);
        case OPT_BOTH:
            o->both = 1;
            break;
        case OPT_QDISC_BYPASS:
            o->bypass = 1;
            break;
        case 1:
            if (pos >= 3)
                return mult_fail("--live: more than three interfaces ('%s')\n%s", v, live_usage());
            if (strlen(v) >= IFNAMSIZ)
                return mult_fail("--live: '%s' is not an interface name", v);
            o->ifn[pos++] = v;
            break;
        case ':':
            return mult_fail("%s needs a value\n%s", a, live_usage());
        case OPT_RANGES:
            o->ranges = v;
            break;
        case OPT_ORIGINAL:
            o->original = v;
            break;
        case OPT_SUMMARY:
            o->summary = v;
            break;
        case 'T':
            num = &o->copies;
            break;
        case OPT_SEED:
            num = &o->seed;
            break;
        case OPT_MAX_FLOWS:
            num = &o->max_flows;
            break;
        case OPT_MAX_ADDRS:
            num = &o->max_addrs;
            break;
        case OPT_SPFO_SCOPE:
            if ((rc = mult_choice(a, scope_choices, v, &o->batch)))
                return rc;
            break;
        case OPT_TX:
            if ((rc = mult_choice(a, tx_choices, v, &o->ring)))
                return rc;
            break;
        case OPT_ORDER:
            if ((rc = mult_choice(a, mult_order_choices, v, &o->order)))
                return rc;
            break;
        case OPT_PORTS:
            if ((rc = mult_choice(a, mult_ports_choices, v, &o->ports)))
                return rc;
            break;
        default: /* '?' */
            return mult_fail("unknown option '%s'\n%s", a, live_usage());
        }
        if (num && mult_u64(v, num))
            return mult_fail("%s: expected a non-negative integer (got '%s')", a, v);
    }
    for (; optind < argc; optind++) { /* after "--": operands only */
        const char *v = argv[optind];
        if (pos >= 3)
            return mult_fail("--live: more than three interfaces ('%s')\n%s", v, live_usage());
        if (strlen(v) >= IFNAMSIZ)
            return mult_fail("--live: '%s' is not an interface name", v);
        o->ifn[pos++] = v;
    }
    if (pos != 3)
        return mult_fail("--live needs three interfaces: IN OUT DUT\n%s", live_usage());
    if (!strcmp(o->ifn[0], o->ifn[1]) || !strcmp(o->ifn[0], o->ifn[2]) ||
        !strcmp(o->ifn[1], o->ifn[2]))
        return mult_fail("--live: IN, OUT and DUT must be three different interfaces");
    if (!o->ranges)
        return mult_fail("missing --ranges (the shadow address ranges)");
    if (o->copies < 1 || o->copies > MULT_MAX_COPIES)
        return mult_fail("-T %" PRIu64 ": the number of copies must be 1..%u", o->copies,
                         MULT_MAX_COPIES);
    if (o->max_flows < 1 || o->max_flows > UINT32_MAX / 4)
        return mult_fail("--max-flows %" PRIu64 ": expected 1..%u", o->max_flows, UINT32_MAX / 4);
    if (!o->max_addrs)
        o->max_addrs = o->max_flows * 2 < 256 ? o->max_flows * 2 : 256;
    if (o->max_addrs > UINT32_MAX / 4)
        return mult_fail("--max-addrs %" PRIu64 ": expected 1..%u", o->max_addrs, UINT32_MAX / 4);
    return 0;
}

/* A raw socket on one interface: promiscuous, blind to its own sends; proto 0 sends only. */
static int live_open(struct live_port *p, const char *name, int receive, int bypass)
{
    p->name = name;
    p->ifindex = (int)if_nametoindex(name);
    if (!p->ifindex)
        return mult_fail("--live: no interface '%s' here (run it inside the namespace that has it)",
                         name);
    p->fd = socket(AF_PACKET, SOCK_RAW, receive ? htons(ETH_P_ALL) : 0);
    if (p->fd < 0)
        return mult_fail("--live %s: AF_PACKET socket: %s (needs CAP_NET_RAW: run as root)", name,
                         strerror(errno));
    struct sockaddr_ll sll = { .sll_family = AF_PACKET,
                               .sll_ifindex = p->ifindex,
                               .sll_protocol = receive ? htons(ETH_P_ALL) : 0 };
    p->sll = (struct sockaddr_ll){ .sll_family = AF_PACKET, .sll_ifindex = p->ifindex };
    if (bind(p->fd, (struct sockaddr *)&sll, sizeof sll))
        return mult_fail("--live %s: bind: %s", name, strerror(errno));
    struct ifreq ifr = { 0 };
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    if (ioctl(p->fd, SIOCGIFFLAGS, &ifr) == 0 && !(ifr.ifr_flags & IFF_UP))
        return mult_fail("--live %s: the interface is down (ip link set %s up)", name, name);
    int one = 1, big = 8 << 20;
    /* FORCE (root, which AF_PACKET needs anyway): past net.core.[rw]mem_max, so a burst
     * waits in the buffer instead of being dropped */
    if (setsockopt(p->fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big))
        setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (bypass) /* as the engine's sender; frames sent so are invisible to a capture on this
                   interface */
        setsockopt(p->fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
    if (receive) {
        struct packet_mreq mr = { .mr_ifindex = p->ifindex, .mr_type = PACKET_MR_PROMISC };
        if (setsockopt(p->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr))
            return mult_fail("--live %s: promiscuous mode: %s", name, strerror(errno));
        if (setsockopt(p->fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one))
            return mult_fail("--live %s: PACKET_IGNORE_OUTGOING: %s (Linux 4.20 or later)", name,
                             strerror(errno));
        /* the RX ring: a frame slot holds an MTU-sized frame with a VLAN tag (larger ones
         * could not be sent on anyway); the kernel writes frames there, no recv calls */
        if (ioctl(p->fd, SIOCGIFMTU, &ifr))
            return mult_fail("--live %s: MTU: %s", name, strerror(errno));
        unsigned need = TPACKET2_HDRLEN + LIVE_TAG_LEN + (unsigned)ifr.ifr_mtu + 22u, fs = 2048;
        while (fs < need && fs < RX_BLOCK)
            fs <<= 1;
        if (fs < need)
            return mult_fail("--live %s: MTU %d is too large for the receive ring (at most %u)",
                             name, ifr.ifr_mtu,
                             RX_BLOCK - (unsigned)TPACKET2_HDRLEN - LIVE_TAG_LEN - 22u);
        int v = TPACKET_V2;
        unsigned reserve = LIVE_TAG_LEN; /* room before each frame to put a VLAN tag back */
        struct tpacket_req req = { .tp_block_size = RX_BLOCK,
                                   .tp_block_nr = RX_RING_BYTES / RX_BLOCK,
                                   .tp_frame_size = fs,
                                   .tp_frame_nr = RX_RING_BYTES / fs };
        if (setsockopt(p->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) ||
            setsockopt(p->fd, SOL_PACKET, PACKET_RESERVE, &reserve, sizeof reserve) ||
            setsockopt(p->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req))
            return mult_fail("--live %s: receive ring: %s", name, strerror(errno));
        p->len = RX_RING_BYTES;
        p->map = mmap(NULL, p->len, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
        if (p->map == MAP_FAILED) {
            p->map = NULL;
            return mult_fail("--live %s: mapping the receive ring: %s", name, strerror(errno));
        }
        p->fsize = fs;
        p->frames = req.tp_frame_nr;
    }
    return 0;
}

/* Sends n frames on fd (blocking: a full queue waits rather than drops), frame i to the
 * interface to[i] (to or to[i] NULL: fd's own); returns the failures, and in *lost_orig those of
 * the frames i with orig[i] set (orig NULL: none). */
static uint64_t live_send(int fd, struct mmsghdr *mh, struct iovec *iov,
                          const struct sockaddr_ll *const *to, const uint8_t *orig,
                          uint64_t *lost_orig, unsigned n)
{
    uint64_t failed = 0;
    unsigned done = 0;
    for (unsigned i = 0; i < n; i++) {
        memset(&mh[i].msg_hdr, 0, sizeof mh[i].msg_hdr);
        mh[i].msg_hdr.msg_iov = &iov[i];
        mh[i].msg_hdr.msg_iovlen = 1;
        if (to && to[i]) {
            mh[i].msg_hdr.msg_name = (void *)(uintptr_t)to[i]; /* only read */
            mh[i].msg_hdr.msg_namelen = sizeof *to[i];
        }
    }
    while (done < n) {
        int r = sendmmsg(fd, mh + done, n - done, 0);
        if (r < 0) {
            if (errno == EINTR && !halt_signal)
                continue;
            if (errno == EINTR) {
                for (unsigned i = done; orig && i < n; i++)
                    *lost_orig += orig[i];
                return failed + (n - done);
            }
            if (orig)
                *lost_orig += orig[done];
            failed++; /* this frame is lost (ENOBUFS, EMSGSIZE, ENXIO...): go on with the next */
            done++;
            continue;
        }
        done += (unsigned)r;
    }
    return failed;
}

static int live_ring_open(struct live_ring *r, int fd)
{
    int v = TPACKET_V2;
    struct tpacket_req req = { .tp_block_size = RING_BLOCK,
                               .tp_block_nr = RING_BLOCKS,
                               .tp_frame_size = RING_FRAME,
                               .tp_frame_nr = RING_BLOCKS * (RING_BLOCK / RING_FRAME) };
    memset(r, 0, sizeof *r);
    r->fd = fd;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) ||
        setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof req))
        return -errno;
    r->len = (size_t)RING_BLOCK * RING_BLOCKS;
    r->map = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->map == MAP_FAILED) {
        r->map = NULL;
        return -errno;
    }
    r->frames = req.tp_frame_nr;
    return 0;
}

/* Hands the filled slots to the kernel and waits until they are sent (blocking send). */
static void live_ring_kick(struct live_ring *r)
{
    if (!r->pending)
        return;
    while (send(r->fd, NULL, 0, 0) < 0 && errno == EINTR && !halt_signal) {
    }
    r->pending = 0;
}

/* Waits until the ring slot i is free (kicking what is queued, so it drains) and returns it. */
static struct tpacket2_hdr *live_ring_slot(struct live_ring *r, unsigned i)
{
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)(r->map + (size_t)(i % r->frames) * RING_FRAME);
    uint32_t st;
    /* a slot the kernel refused (wrong format) is taken again: its frame counts as lost there */
    while ((st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE)) != TP_STATUS_AVAILABLE &&
           !(st & TP_STATUS_WRONG_FORMAT)) {
        live_ring_kick(r);
        struct pollfd pf = { .fd = r->fd, .events = POLLOUT };
        poll(&pf, 1, 10);
        if (halt_signal)
            return NULL;
    }
    return h;
}

/* Hands slot h, holding len bytes, to the kernel (sent at the next kick). */
static void live_ring_fill(struct live_ring *r, struct tpacket2_hdr *h, uint32_t len)
{
    h->tp_len = len;
    __atomic_store_n(&h->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
    r->head = (r->head + 1) % r->frames;
    if (++r->pending >= RING_FLUSH)
        live_ring_kick(r);
}

/* Queues one frame; returns 0, or 1 when it was lost (halted while waiting for a slot). */
static int live_ring_put(struct live_ring *r, const uint8_t *f, uint32_t len)
{
    struct tpacket2_hdr *h = live_ring_slot(r, r->head);
    if (!h)
        return 1;
    memcpy((uint8_t *)h + TPACKET2_HDRLEN - sizeof(struct sockaddr_ll), f, len);
    live_ring_fill(r, h, len);
    return 0;
}

struct live {
    struct mult *m;
    struct live_ring ring; /* map NULL: the copies go through sendmmsg */
    int per_packet;        /* SPFO per packet (else per batch) */
    uint32_t T;
    uint8_t *tx; /* rewrite buffer for one batch (copies that skip the ring) */
    size_t txcap;
    struct mult_frame *fr; /* T+1 */
    uint8_t **slot;        /* T: the ring slots a frame's copies are written in */
    struct tpacket2_hdr **sh;
    struct mmsghdr *smh;
    struct iovec *civ, *oiv;
    /* --tx sendmmsg, SPFO per packet: civ holds copies and originals in their order, frame i
     * for the interface cto[i] (corig[i]: an original), all sent in one call on DUT's socket */
    const struct sockaddr_ll **cto;
    uint8_t *corig;
};

/* Queues frame p for the one call: to port `to`, an original or a copy. */
static void live_queue(struct live *L, unsigned *nc, uint8_t *p, uint32_t len,
                       const struct live_port *to, int orig)
{
    L->civ[*nc].iov_base = p;
    L->civ[*nc].iov_len = len;
    /* a copy goes to DUT, the interface the sending socket is bound to: no address to pass
     * (the kernel then skips copying and looking one up for 10 of every 11 frames at T=10) */
    L->cto[*nc] = orig ? &to->sll : NULL;
    L->corig[(*nc)++] = (uint8_t)orig;
}

/* Sends what is queued: the copies (the ring's, then civ[0..nc)) first, then the originals
 * (oiv[0..no)). With --tx sendmmsg and SPFO per packet, civ holds the originals too, each after
 * its copies, and oiv is empty. */
static void live_flush(struct live *L, const struct live_port *to, const struct live_port *dut,
                       unsigned nc, unsigned no, struct live_dir *d)
{
    if (L->ring.map)
        live_ring_kick(&L->ring); /* every copy sent before the originals */
    if (nc && L->ring.map) {
        uint64_t f = 0;
        for (unsigned i = 0; i < nc; i++) /* only too long for the ring's slots */
            f += (uint64_t)live_ring_put(&L->ring, L->civ[i].iov_base, (uint32_t)L->civ[i].iov_len);
        live_ring_kick(&L->ring);
        d->copies_sent += nc - f;
        d->send_failed += f;
    } else if (nc) {
        uint64_t lo = 0, f = live_send(dut->fd, L->smh, L->civ, L->cto, L->corig, &lo, nc),
                 norig = 0;
        for (unsigned i = 0; i < nc; i++)
            norig += L->corig[i];
        d->copies_sent += nc - norig - (f - lo);
        d->originals_sent += norig - lo;
        d->send_failed += f;
    }
    if (no) {
        uint64_t f = live_send(to->fd, L->smh, L->oiv, NULL, NULL, NULL, no);
        d->originals_sent += no - f;
        d->send_failed += f;
    }
}

/* The kernel hands a received frame over without its (outer) VLAN tag, which it keeps in the
 * header (tp_vlan_tci, tp_vlan_tpid): put it back in front of the EtherType, in the room
 * PACKET_RESERVE left before the frame, so that the original and its copies leave tagged as they
 * came. Returns 1 when a tag was put back (*f and *len then cover it). */
static int live_restore_tag(const struct tpacket2_hdr *h, uint8_t **f, uint32_t *len)
{
    if (!(h->tp_status & TP_STATUS_VLAN_VALID) || *len < 12 ||
        h->tp_mac < TPACKET2_HDRLEN + LIVE_TAG_LEN) /* no room: cannot happen with the reserve */
        return 0;
    uint16_t tpid = (h->tp_status & TP_STATUS_VLAN_TPID_VALID) && h->tp_vlan_tpid ? h->tp_vlan_tpid
                                                                                  : ETH_P_8021Q;
    uint8_t *p = *f - LIVE_TAG_LEN;
    memmove(p, *f, 12); /* the two MAC addresses */
    p[12] = (uint8_t)(tpid >> 8);
    p[13] = (uint8_t)tpid;
    p[14] = (uint8_t)(h->tp_vlan_tci >> 8);
    p[15] = (uint8_t)h->tp_vlan_tci;
    *f = p;
    *len += LIVE_TAG_LEN;
    return 1;
}

/* Writes frame f's copies straight into T ring slots; the original goes to oiv. Returns the
 * number of frames (as mult_packet), or 0 when halted while waiting for slots. */
static int live_ring_copies(struct live *L, uint8_t *f, uint32_t len, unsigned *no,
                            struct live_dir *d)
{
    struct live_ring *r = &L->ring;
    for (uint32_t c = 0; c < L->T; c++) {
        if (!(L->sh[c] = live_ring_slot(r, r->head + c)))
            return 0;
        L->slot[c] = (uint8_t *)L->sh[c] + TPACKET2_HDRLEN - sizeof(struct sockaddr_ll);
    }
    int nf = mult_packet_slots(L->m, f, len, L->slot, RING_FRAME - TPACKET2_HDRLEN, L->fr);
    if (nf < 0)
        nf = 1; /* cannot happen: the caller checked the room; forward it as it is */
    for (int k = 0; k < nf; k++) {
        if (L->fr[k].copy) {
            live_ring_fill(r, L->sh[L->fr[k].copy - 1], L->fr[k].len);
            d->copies_sent++;
        } else {
            L->oiv[*no].iov_base = f;
            L->oiv[(*no)++].iov_len = len;
        }
    }
    return nf;
}

/* Up to LIVE_BATCH frames waiting in port `from`'s RX ring: originals to `to`, copies (when
 * multiplied) to dut. SPFO per packet (the default): each multiplied frame's copies, then that
 * original, before the next frame; per batch (--spfo-scope batch): all the batch's copies, then
 * all its originals. The originals are sent from the RX ring, whose slots go back to the kernel
 * after that. Returns the number of frames handled. */
static unsigned live_batch(struct live *L, struct live_port *from, const struct live_port *to,
                           const struct live_port *dut, int multiply, struct live_dir *d)
{
    unsigned nc = 0, no = 0, n = 0;
    size_t used = 0;
    const int one = L->per_packet && !L->ring.map; /* one sendmmsg for the batch, order kept */
    const uint32_t ring_room = RING_FRAME - TPACKET2_HDRLEN;
    for (; n < LIVE_BATCH; n++) {
        struct tpacket2_hdr *h =
            (struct tpacket2_hdr *)(from->map +
                                    (size_t)((from->head + n) % from->frames) * from->fsize);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
            break;
        uint8_t *f = (uint8_t *)h + h->tp_mac;
        uint32_t len = h->tp_snaplen, wire = h->tp_len;
        d->in++;
        if (live_restore_tag(h, &f, &len)) {
            wire += LIVE_TAG_LEN;
            d->vlan_restored++;
        }
        if (len < wire) { /* longer than the interface's MTU allows: it could not be sent */
            d->oversize++;
            d->send_failed++;
            continue;
        }
        if (!multiply || len > LIVE_MAX_FRAME) {
            if (multiply)
                d->oversize++;
            if (one) {
                live_queue(L, &nc, f, len, to, 1);
            } else {
                L->oiv[no].iov_base = f;
                L->oiv[no++].iov_len = len;
            }
            continue;
        }
        if (L->per_packet && no) { /* what is queued has no copies: it goes before this frame */
            live_flush(L, to, dut, nc, no, d);
            nc = no = 0;
            used = 0;
        }
        int nf;
        if (L->ring.map && mult_room(L->m, len, 0) / (L->T + 1) <= ring_room) {
            if (!(nf = live_ring_copies(L, f, len, &no, d)))
                break;
        } else {
            nf = mult_packet(L->m, f, len, L->tx + used, L->txcap - used, 0, L->fr);
            if (nf < 0) { /* cannot happen: the buffer holds a whole batch; forward it as it is */
                L->fr[0] = (struct mult_frame){ 0, len, 0 };
                nf = 0;
            }
            size_t end = used;
            for (int k = 0; k < (nf ? nf : 1); k++) {
                /* the original is the received frame unchanged: sent from the RX ring */
                uint8_t *p = L->fr[k].copy ? L->tx + used + L->fr[k].off : f;
                if (L->fr[k].copy || one) {
                    live_queue(L, &nc, p, L->fr[k].len, L->fr[k].copy ? dut : to, !L->fr[k].copy);
                } else {
                    L->oiv[no].iov_base = p;
                    L->oiv[no++].iov_len = L->fr[k].len;
                }
                if (used + L->fr[k].off + L->fr[k].len > end)
                    end = used + L->fr[k].off + L->fr[k].len;
            }
            used = end;
        }
        if (nf > 1)
            d->multiplied++;
        if (L->per_packet && !one) {
            live_flush(L, to, dut, nc, no, d);
            nc = no = 0;
            used = 0;
        }
    }
    live_flush(L, to, dut, nc, no, d);
    for (unsigned i = 0; i < n; i++) { /* the frames are sent: their slots back to the kernel */
        struct tpacket2_hdr *h =
            (struct tpacket2_hdr *)(from->map +
                                    (size_t)((from->head + i) % from->frames) * from->fsize);
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    }
    from->head = (from->head + n) % from->frames;
    return n;
}

static void live_summary(FILE *f, const struct live_opts *o, const struct mult *m,
                         const struct live_dir d[2], double secs, const char *dut_tx,
                         uint64_t in_dropped)
{
    const struct mult_stats *s = mult_stats(m);
    static const char *const why[MULT_PASS_REASONS] = { "not_ip", "truncated",  "routing",
                                                        "auth",   "table_full", "no_range" };
    fprintf(f,
            "{\"mode\": \"live\", \"copies\": %" PRIu64 ", \"both\": %s, \"seconds\": %.3f"
            ", \"dut_tx\": \"%s\", \"spfo_scope\": \"%s\", \"ingress_dropped_by_socket\": %" PRIu64,
            o->copies, o->both ? "true" : "false", secs, dut_tx, o->batch ? "batch" : "packet",
            in_dropped);
    static const char *const dn[2] = { "forward", "reverse" };
    for (int k = 0; k < 2; k++)
        fprintf(f,
                ", \"%s\": {\"received\": %" PRIu64 ", \"multiplied\": %" PRIu64
                ", \"copies_sent\": %" PRIu64 ", \"originals_sent\": %" PRIu64
                ", \"send_failed\": %" PRIu64 ", \"oversize\": %" PRIu64
                ", \"vlan_restored\": %" PRIu64 "}",
                dn[k], d[k].in, d[k].multiplied, d[k].copies_sent, d[k].originals_sent,
                d[k].send_failed, d[k].oversize, d[k].vlan_restored);
    fprintf(f,
            ", \"flows\": %u, \"max_flows\": %" PRIu64 ", \"max_addrs\": %" PRIu64
            ", \"bytes_per_flow\": %zu, \"bytes_per_address\": %zu, \"passthrough\": {",
            mult_flow_count(m), o->max_flows, o->max_addrs, mult_flow_bytes(),
            mult_addr_bytes((uint32_t)o->copies));
    for (int i = 0; i < MULT_PASS_REASONS; i++)
        fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", why[i], s->pass[i]);
    fputs("}}\n", f);
}

static double live_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int mult_live_cmd(int argc, char **argv)
{
    struct live_opts o;
    int rc = live_args(argc, argv, &o);
    if (rc)
        return rc;
    struct mult_range rg[MULT_MAX_RANGES], og[MULT_MAX_RANGES];
    uint32_t nr = 0, no = 0;
    char b1[64], b2[64];
    if ((rc = mult_range_list(o.ranges, rg, &nr, "--ranges")))
        return rc;
    if (o.original && (rc = mult_range_list(o.original, og, &no, "--original")))
        return rc;
    for (uint32_t i = 0; i < nr; i++) {
        for (uint32_t j = i + 1; j < nr; j++)
            if (mult_overlap(&rg[i], &rg[j]))
                return mult_fail("--ranges: %s and %s overlap", mult_range_str(&rg[i], b1),
                                 mult_range_str(&rg[j], b2));
        for (uint32_t j = 0; j < no; j++)
            if (mult_overlap(&rg[i], &og[j]))
                return mult_fail("--ranges %s overlaps the original range %s",
                                 mult_range_str(&rg[i], b1), mult_range_str(&og[j], b2));
    }
    /* the table bound, refused up front */
    const uint64_t tables = o.max_flows * mult_flow_bytes() +
                            2 * o.max_addrs * (16 + mult_addr_bytes((uint32_t)o.copies));
    const uint64_t avail = bigmem_available();
    if (avail && tables > avail / 2)
        return mult_fail("--max-flows %" PRIu64 " and --max-addrs %" PRIu64 " with T=%" PRIu64
                         " need %" PRIu64
                         " bytes of tables (%zu a flow, %zu an address), more than "
                         "half the %" PRIu64 " bytes available: lower them",
                         o.max_flows, o.max_addrs, o.copies, tables, mult_flow_bytes(),
                         mult_addr_bytes((uint32_t)o.copies), avail);
    struct mult_params mp = {
        .copies = (uint32_t)o.copies,
        .seed = o.seed,
        .order = o.order,
        .ports = o.ports,
        .ranges = rg,
        .nranges = nr,
        .max_ip_len = 65535,
        .max_flows = (uint32_t)o.max_flows,
        .max_addrs = (uint32_t)o.max_addrs,
        .live = 1,
    };
    struct live L = { 0 };
    L.T = (uint32_t)o.copies;
    L.per_packet = !o.batch;
    if ((rc = mult_create(&L.m, &mp))) {
        if (rc == -ENOSPC)
            return mult_fail(
                "--ranges: T=%" PRIu64 " copies of up to --max-addrs %" PRIu64 " addresses "
                "a family need %" PRIu64 " shadow addresses; a family's ranges hold fewer "
                "(widen --ranges or lower --max-addrs)",
                o.copies, o.max_addrs, o.copies * o.max_addrs);
        return mult_fail("cannot set up the multiplier: %s", strerror(-rc));
    }
    struct live_port port[3] = { { .fd = -1 }, { .fd = -1 }, { .fd = -1 } };
    struct live_dir d[2] = { { 0 }, { 0 } };
    for (int k = 0; k < 3 && !rc; k++)
        rc = live_open(&port[k], o.ifn[k], k < 2, o.bypass);
    if (!rc) {
        L.txcap = LIVE_BATCH * mult_room(L.m, LIVE_MAX_FRAME, 0);
        L.tx = malloc(L.txcap);
        L.fr = malloc((L.T + 1) * sizeof *L.fr);
        L.slot = calloc(L.T, sizeof *L.slot);
        L.sh = calloc(L.T, sizeof *L.sh);
        L.cto = calloc((size_t)LIVE_BATCH * (L.T + 1), sizeof *L.cto);
        L.corig = calloc((size_t)LIVE_BATCH * (L.T + 1), 1);
        size_t nmax = (size_t)LIVE_BATCH * (L.T + 1);
        L.smh = calloc(nmax, sizeof *L.smh);
        L.civ = calloc(nmax, sizeof *L.civ);
        L.oiv = calloc(nmax, sizeof *L.oiv);
        if (!L.tx || !L.fr || !L.slot || !L.sh || !L.cto || !L.corig || !L.smh || !L.civ || !L.oiv)
            rc = mult_fail("out of memory");
        else if (!o.ring || live_ring_open(&L.ring, port[2].fd))
            L.ring.map = NULL; /* sendmmsg (asked for, or no ring here) */
    }
    if (!rc) {
        struct sigaction sa = { 0 };
        sa.sa_handler = halt_request;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        printf("ready %s -> %s, T=%" PRIu64 " copies -> %s%s\n", o.ifn[0], o.ifn[1], o.copies,
               o.ifn[2], o.both ? " (both directions)" : "");
        fflush(stdout);
        double t0 = live_now();
        struct pollfd pf[2] = { { .fd = port[0].fd, .events = POLLIN },
                                { .fd = port[1].fd, .events = POLLIN } };
        while (!halt_signal) {
            /* drain both rings; sleep in poll only when both are empty */
            unsigned got = live_batch(&L, &port[0], &port[1], &port[2], 1, &d[0]);
            got += live_batch(&L, &port[1], &port[0], &port[2], o.both, &d[1]);
            if (got)
                continue;
            int pr = poll(pf, 2, 200);
            if (pr < 0 && errno != EINTR) {
                fprintf(stderr, "flowengine multiply --live: poll: %s\n", strerror(errno));
                rc = 1;
                break;
            }
            if (pr <= 0)
                continue;
            if ((pf[0].revents | pf[1].revents) & (POLLERR | POLLNVAL)) {
                fprintf(stderr, "flowengine multiply --live: an interface went away\n");
                rc = 1;
                break;
            }
        }
        double secs = live_now() - t0;
        FILE *sf = o.summary ? fopen(o.summary, "w") : stdout;
        if (!sf) {
            fprintf(stderr, "flowengine multiply --live: --summary %s: %s\n", o.summary,
                    strerror(errno));
            rc = 1;
        } else {
            uint64_t dropped = 0;
            for (int k = 0; k < 2; k++) {
                struct tpacket_stats st; /* with a ring, tp_drops: frames the full ring missed */
                socklen_t sl = sizeof st;
                if (!getsockopt(port[k].fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl))
                    dropped += st.tp_drops;
            }
            live_summary(sf, &o, L.m, d, secs, L.ring.map ? "ring" : "sendmmsg", dropped);
            if (sf != stdout)
                fclose(sf);
        }
    }
    if (L.ring.map)
        munmap(L.ring.map, L.ring.len);
    for (int k = 0; k < 3; k++) {
        if (port[k].map)
            munmap(port[k].map, port[k].len);
        if (port[k].fd >= 0)
            close(port[k].fd);
    }
    free(L.tx);
    free(L.fr);
    free(L.slot);
    free(L.sh);
    free(L.cto);
    free(L.corig);
    free(L.smh);
    free(L.civ);
    free(L.oiv);
    mult_free(L.m);
    return rc;
}
