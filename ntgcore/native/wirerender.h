/* wirerender.h - evasion variant sessions rendered as pcap records, offline.
 *
 * The contract of idsrules/evasion/model.py's `render` in C: the same frames, byte for byte
 * (tests/test_wire_render.py holds the two equal on every variant class). Python decides what
 * goes on the wire (a WirePlan: messages, segments, fragments, tricks) and encodes it as a
 * program (idsrules/evasion/native.py); this file only lays out the headers, the checksums
 * and the pcap records, which is most of the time of an evasion run when done in Python.
 *
 * A program is a sequence of sessions, every number little-endian:
 *
 *   session header, WR_SESSION_LEN (48) bytes:
 *     u8  proto      6 (TCP) or 17 (UDP)
 *     u8  family     4 or 6 (the address length)
 *     u8  flags      WR_F_TIMESTAMPS: the client offers TCP timestamps
 *     u8  pad
 *     u16 cport, sport
 *     u32 cisn       the client's initial sequence number (the server's is cisn ^ 0x5A5A5A5A)
 *     u32 nsteps
 *     u8  client[16], server[16]   (IPv4: the first 4 bytes)
 *   nsteps steps, each:
 *     u8  from_client, u8 pad[3], u32 data_len, u32 nsegs
 *     u8  data[data_len]           what the step means (server: what it sends)
 *     nsegs segments (client steps; WR_PLAIN_SEGS: segments of at most WR_MSS bytes, TCP, or
 *     one datagram, UDP), each WR_SEG_LEN (28) bytes and what follows it:
 *       u32 off        stream offset of data[0] (0: the first byte after the SYN)
 *       u32 data_len
 *       u32 seq_shift  added to the sequence number (mod 2^32)
 *       u32 ts_back    TSval this much older than the connection's clock (mod 2^32)
 *       u16 flags      TCP flags (URG added when urgent > 0)
 *       u16 urgent
 *       u16 nfrags     the IP packet sent as these fragments, in this order (0: whole)
 *       u8  hops       IPv4 TTL, IPv6 hop limit
 *       u8  bits       WR_S_BAD_CHECKSUM, WR_S_ATOMIC, WR_S_SHIFTED (out of the stream's
 *                      end: acknowledgements and the FIN do not count the segment)
 *       u8  next_ext   IPv6 extension headers ahead of the fragment/transport header
 *       u8  pad[3]
 *       u8  ext[next_ext]   each a kind: 43 a routing header, any other an options header
 *       u8  data[data_len]
 *       nfrags fragments: u32 offset, u32 length, u32 fill_len (WR_NO_FILL: the true bytes),
 *                         u8 fill[fill_len]
 *
 * Packets, timestamps: each frame at t, t += pkt_gap; after each session t += session_gap.
 * The frames and their order are model.py's `render` (handshake, each client step's packets and
 * the server's acknowledgement, the server's segments each acknowledged, FIN both ways).
 *
 * Pure function of its arguments: safe from any thread. */
#ifndef NTG_WIRERENDER_H
#define NTG_WIRERENDER_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define WR_API __attribute__((visibility("default")))
#else
#define WR_API
#endif

#define WR_SESSION_LEN 48
#define WR_STEP_LEN 12
#define WR_SEG_LEN 28
#define WR_FRAG_LEN 12
#define WR_MSS 1400
#define WR_PLAIN_SEGS 0xffffffffu
#define WR_NO_FILL 0xffffffffu
#define WR_F_TIMESTAMPS 0x01
#define WR_S_BAD_CHECKSUM 0x01
#define WR_S_ATOMIC 0x02
#define WR_S_SHIFTED 0x04 /* seq_shift is not 0 (a multiple of 2^32 is still a shift) */

struct wr_result {
    uint64_t packets;  /* records written */
    uint64_t sessions; /* sessions rendered */
    uint64_t t_ns;     /* the time after the last session (its gap added) */
    uint64_t at;       /* -EINVAL: the program offset that was malformed */
};

/* Render PROG (LEN bytes) into OUT (CAP bytes) as pcap records (microsecond, or nanosecond when
 * NANOSECOND is nonzero; no file header), the first frame at T_NS. Returns the bytes written, or
 * -ENOBUFS when OUT is too small (nothing in it to use: call again with more room), -EINVAL for a
 * malformed program (res->at says where), -EMSGSIZE for a packet whose length a header cannot
 * hold. */
WR_API int64_t wr_render(const uint8_t *prog, size_t len, uint64_t t_ns, uint64_t pkt_gap_ns,
                         uint64_t session_gap_ns, int nanosecond, uint8_t *out, size_t cap,
                         struct wr_result *res);

/* WR_SESSION_LEN, so that a caller can check it speaks the same program as the library. */
WR_API unsigned wr_session_len(void);

#endif
