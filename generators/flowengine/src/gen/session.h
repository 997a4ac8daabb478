/* session.h - the session file (README.md, "Session file"): parse and check.
 *
 * struct fe_flow is one `flow` line, checked and with everything derived from
 * it that the engine reads per packet (kind, header length, payload sums),
 * or one `stream` line (kind FE_K_STREAM: stream.h); the loop's copy also
 * carries scheduler state (next_rep, klass, sid).
 *
 * Thread safety: session_load/free on one thread; a loaded session is only
 * read afterwards (each loop copies the flow lines it changes). */
#ifndef FE_SESSION_H
#define FE_SESSION_H

#include <stddef.h>
#include <stdint.h>

/* FE_DIST: session lines only, the value drawn from a `dist` (dist.h);
 * FE_DECK: session lines' ports only, a card of a shuffled deck (P:ID, sess.h). */
enum fe_mode { FE_FIXED, FE_RANDOM, FE_INCREMENT, FE_DIST, FE_DECK };

/* Frame kinds: the per-packet writer switches on this. FE_K_STREAM: a
 * `stream` line (stream.h), whose frames come from the frames file;
 * FE_K_SESS: a `session` line (sess.h), written by sess_write. */
enum fe_kind {
    FE_K4_UDP,
    FE_K4_TCP,
    FE_K4_ICMP,
    FE_K6_UDP,
    FE_K6_TCP,
    FE_K6_ICMP,
    FE_K_STREAM,
    FE_K_SESS
};

#define FE_ETH_LEN 14

struct stream_frames;
struct stream_line;
struct sess_line;
struct fe_dist;

struct fe_flow {
    /* Hot: read for every packet. */
    uint64_t period;
    uint64_t packets;
    uint32_t size_lo, size_hi;
    uint8_t kind; /* enum fe_kind */
    uint8_t af, proto;
    uint8_t l4_off;              /* offset of the L4 header in the frame */
    uint8_t hdr_len;             /* Ethernet + IP + L4 header bytes */
    uint32_t payload_len;        /* bytes of the custom payload prefix */
    const uint8_t *payload;      /* the prefix, or NULL */
    const uint32_t *payload_sum; /* [k]: checksum sum of the first k prefix bytes */
    struct stream_line *stream;  /* FE_K_STREAM: its frames and patch (stream.h), else NULL */

    /* Activation. */
    uint64_t start, reps, rep_period;
    uint64_t offset; /* serial of repetition 0 */
    uint8_t smac[6], dmac[6];
    uint8_t src[16], dst[16]; /* network order; IPv4 uses the first 4 bytes */
    uint8_t src_prefix, dst_prefix;
    uint8_t src_mode, dst_mode, sport_mode, dport_mode;
    uint16_t sport_lo, sport_hi, dport_lo, dport_hi;

    uint64_t max_live; /* upper bound on its instances alive at once */

    /* Emit-time header template (packet_prepare): the line's constant bytes
     * and sums; the per-instance fields are rebuilt per packet (packet.c). */
    uint8_t tpl[76];
    uint32_t tpl_sum_ip; /* IPv4 header constants, folded */
    uint32_t tpl_sum_l4; /* L4 constants (TCP offset/window, ICMP type), folded */
    uint8_t d_src, d_dst, d_sport, d_dport, d_isn, d_ack; /* 1-based draw index, 0: none */
    uint8_t ndraw;                                        /* draws made at activation */

    /* Scheduler. */
    uint64_t next_rep; /* the next repetition to spawn */
    uint64_t rep_step; /* repetitions this engine spawns: next_rep, + rep_step, ...
                        * (1; N with --threads N: a worker's share) */
    uint32_t klass;    /* index of the flow's period among the distinct ones (FE_K_SESS: h's) */
    uint32_t sid;      /* FE_K_STREAM: its instance while it runs, else POOL_NONE */
    unsigned lineno;
    uint32_t klass_gap; /* FE_K_SESS: the class of its gap (klass: of its h), in what
                         * would be padding before `sess` */

    /* Session lines (FE_K_SESS), after everything else so that the flow
     * lines' fields keep their offsets. */
    struct sess_line *sess; /* the session's own keys (sess.h), else NULL */
    uint64_t arr_rng;       /* the arrival stream's state (sess.h) */
    uint64_t next_start;    /* start of repetition next_rep */
    uint32_t klass_think;   /* the classes of its think and linger (when > 0; else klass) */
    uint32_t klass_linger;
};
/* The flow path indexes lines by this size: 336 bytes cost it 3 instructions per packet. */
_Static_assert(sizeof(void *) != 8 || sizeof(struct fe_flow) == 328,
               "struct fe_flow should stay 328 bytes on 64-bit platforms");

struct fe_session {
    uint64_t seed;
    struct fe_flow *flows; /* flow and stream lines, in session order */
    size_t nflows;
    size_t nstreams;              /* of them stream lines */
    unsigned stream_lineno;       /* the first stream line's line number, 0: none */
    struct stream_frames *frames; /* the `frames` file, or NULL */
    uint64_t instances;           /* sum of reps */
    uint64_t max_concurrent;      /* an upper bound on instances alive at once */
    void *blob;                   /* payload prefixes and their sums */
    size_t nsess;                 /* of the lines, session lines */
    uint64_t sess_concurrent;     /* an upper bound on session instances alive at once */
    struct fe_dist **dists;       /* [DIST_MAX_ID + 1]: the `dist` lines, NULL until the first */
};

/* Reads and checks the session at path ("-": standard input). Returns 0, or
 * on error prints "NAME:LINE: message" (or why the file cannot be read) to
 * stderr and returns a negative errno: -EINVAL for an invalid session, else
 * the failed open/read's (exit status 2 either way). *s is then empty. */
int session_load(struct fe_session *s, const char *path);
/* Frees the lines, their payloads and stream data, and the frames; an empty
 * session is fine. */
void session_free(struct fe_session *s);

/* Decimal digits only, no sign: 0 with the value in *out, -EINVAL (not a
 * number) or -ERANGE (above 2^64-1). */
int session_parse_u64(const char *s, uint64_t *out);

#endif
