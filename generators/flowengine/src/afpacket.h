/* afpacket.h - live sending through AF_PACKET (--iface) and paced sinks.
 *
 * A "tx hook" sits in front of a sink (pcapout.h): with --iface it replaces
 * the null sink's scratch frame by TX ring slots (TPACKET_V2, qdisc bypass,
 * flushed with send(MSG_DONTWAIT) in batches) or, when the ring cannot be set
 * up, by sendmmsg batches; with --pace realtime on -o/--null it only waits
 * for each packet's due time. It also keeps the counters of the summary. */
#ifndef FE_AFPACKET_H
#define FE_AFPACKET_H

#include <stdint.h>

#include "pace.h"
#include "session.h"

enum txmode { TX_RING, TX_SENDMMSG };

struct txhook_opts {
    const char *iface;      /* NULL: no live sending (pacing of -o/--null only) */
    int pace;               /* enum fe_pace */
    uint64_t late_ns;       /* a packet sent later than this after its due time is late */
    int mode;               /* enum txmode: TX_RING falls back to TX_SENDMMSG */
    unsigned batch;         /* frames per flush (0: default) */
    unsigned ring_frames;   /* TX ring slots (0: default) */
    int qdisc_bypass;       /* PACKET_QDISC_BYPASS */
};

struct txhook;
struct sink;
struct stats;
struct summary;

/* Checks the interface and the session against it and opens the socket.
 * On failure prints "flowengine: ...: what to do" and returns -1 (exit
 * status 2): nothing has been sent. session_name names the session in
 * messages about a flow line. */
int txhook_open(struct txhook **out, const struct txhook_opts *o, const struct fe_session *s,
                const char *session_name);
/* "afpacket-ring", "afpacket-sendmmsg", or NULL (no live sending). */
const char *txhook_sink_name(const struct txhook *h);
int txhook_paced(const struct txhook *h);
/* Hooks into an opened sink and the statistics (after stats_init). */
void txhook_attach(struct txhook *h, struct sink *sink, struct stats *st);
/* sent, failed, late, max_late_ns (and sent_bytes) into the summary. */
void txhook_summary(const struct txhook *h, struct summary *sum);
void txhook_free(struct txhook *h);
/* --threads: one hook per worker, all paced from the same run start t0
 * (CLOCK_MONOTONIC ns) instead of each hook's first frame. */
void txhook_start(struct txhook *h, uint64_t t0);
/* Adds sent, sent_bytes, failed (live only) and late to the summary, max_late_ns as a maximum. */
void txhook_summary_add(const struct txhook *h, struct summary *sum);
int txhook_live(const struct txhook *h);

/* Called by sink_frame / sink_close (pcapout.h) when a hook is attached. */
uint8_t *txhook_frame(struct sink *s, uint64_t due_ns, uint32_t len);
int txhook_close(struct sink *s);

#endif
