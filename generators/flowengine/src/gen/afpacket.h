/* afpacket.h - live sending through AF_PACKET (--iface) and paced sinks: an
 * implementation of the sink interface (sink.h, kind SINK_OPS).
 *
 * A struct afpacket is opened once per loop (one per --threads worker),
 * before anything is generated, and attached in front of the loop's own sink
 * (which it then wraps):
 *   - with --iface it replaces that sink: frames are built straight into TX
 *     ring slots (TPACKET_V2, qdisc bypass, released with send(MSG_DONTWAIT)
 *     every --tx-batch frames) or, by default and when the ring cannot be set
 *     up, into batch buffers sent with sendmmsg; the inner sink (the null
 *     sink) only lends its scratch frame for frames a stop leaves unsent;
 *   - with --pace realtime on -o/--null (no --iface) it waits for each
 *     packet's due time, then hands the frame request to the inner sink.
 * It keeps the counters of the summary (sent, failed, late) and, when paced
 * and live, releases the due frames before each per-second row.
 *
 * Dependencies go one way: this file uses sink.h; sink.c does not know it.
 *
 * Errors: afpacket_open prints what is wrong and returns a negative errno
 * (exit status 2: nothing has been sent). Later failures print their cause
 * once and make the sink fail (-EIO).
 *
 * Thread safety: an afpacket belongs to the thread of the loop it is attached
 * to; afpacket_open/start/free and the summary functions run on the main
 * thread before the loop starts or after it ended. */
#ifndef FE_AFPACKET_H
#define FE_AFPACKET_H

#include <stdint.h>

#include "pace.h"
#include "session.h"

enum afpacket_mode { AFPACKET_TX_RING, AFPACKET_TX_SENDMMSG };

struct afpacket_opts {
    const char *iface;    /* NULL: no live sending (pacing of -o/--null only) */
    int pace;             /* enum fe_pace */
    uint64_t late_ns;     /* a packet sent later than this after its due time is late */
    int mode;             /* enum afpacket_mode: AFPACKET_TX_RING falls back to sendmmsg */
    unsigned batch;       /* frames per flush (0: default) */
    unsigned ring_frames; /* TX ring slots (0: default) */
    int qdisc_bypass;     /* PACKET_QDISC_BYPASS */
};

struct afpacket;
struct sink;
struct stats;
struct summary;

/* Without o->iface: a pacing-only hook. With it: checks the interface (exists,
 * up, carrier, MTU against every flow line of s) and opens the socket and its
 * ring or batch buffers. On failure prints "flowengine: ...: what to do" and
 * returns a negative errno (-ENODEV, -EPERM, -ENETDOWN, -EMSGSIZE, -ENOMEM...);
 * *out is then NULL. session_name names the session in messages about a
 * flow line. */
int afpacket_open(struct afpacket **out, const struct afpacket_opts *o, const struct fe_session *s,
                  const char *session_name);
/* Closes the socket and frees h (NULL is fine). */
void afpacket_free(struct afpacket *h);

/* "afpacket-ring", "afpacket-sendmmsg", or NULL (h NULL or not live). */
const char *afpacket_sink_name(const struct afpacket *h);
/* Nonzero when h paces (--pace realtime): the CSV gets a `late` column. */
int afpacket_paced(const struct afpacket *h);
/* Nonzero when h sends on an interface. */
int afpacket_live(const struct afpacket *h);

/* Puts h in front of the open sink s: s's implementation moves into h (the
 * inner sink) and s becomes a SINK_OPS sink that sends through h, or paces
 * frames into the inner sink; hooks h into the statistics st (after
 * stats_init). Closing s then closes the inner sink too. The loop keeps
 * writing to s, so its hot path has one sink at a fixed place. */
void afpacket_attach(struct afpacket *h, struct sink *s, struct stats *st);
/* --threads: paces from the common run start t0 (CLOCK_MONOTONIC ns) instead
 * of the time of h's first frame. */
void afpacket_start(struct afpacket *h, uint64_t t0);

/* The sink's part of a pause the loop holds (the loop's hold hook; ctx is h):
 * resume 0, before holding: hands every queued frame to the kernel; resume 1,
 * after holding held_ns: later due times shift by held_ns (no catch-up).
 * A pause that comes while h waits for a due time is held there instead
 * (pace_hold) and shifts the clock the same way. */
void afpacket_hold(void *ctx, int resume, uint64_t held_ns);
/* Nanoseconds held in pauses that came during h's waits (0 for NULL). */
uint64_t afpacket_paused_ns(const struct afpacket *h);

/* sent, sent_bytes, failed (live only), late, max_late_ns and pace into sum
 * (h may be NULL: nothing). */
void afpacket_summary(const struct afpacket *h, struct summary *sum);
/* The same, added to sum (--threads: one hook per worker); max_late_ns as a
 * maximum. */
void afpacket_summary_add(const struct afpacket *h, struct summary *sum);

#endif
