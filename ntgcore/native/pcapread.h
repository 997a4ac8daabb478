/* pcapread.h — read a classic pcap or pcapng file into caller-owned columns.
 *
 * The file is memory-mapped; nothing is allocated per packet. Typical use:
 *
 *     pr_reader *r = pr_open(path, err, sizeof err);
 *     int64_t n = pr_count(r);              // packets before the end or the first problem
 *     ... allocate n elements per column ...
 *     size_t got = pr_read(r, &cols, n);     // got == n
 *     uint64_t where; const char *why = pr_problem(r, &where);
 *     pr_close(r);
 *
 * pr_read may also be called repeatedly with a smaller capacity: each call resumes where the
 * previous one stopped (pr_offset tells the byte offset of the next record). The pages of the
 * file behind the cursor are dropped from the mapping as it advances (every 65,536 packets), so
 * the process holds a window of the file, not the whole file (they stay in the page cache).
 *
 * A damaged file is never an error of pr_read: it returns the packets before the damage and
 * pr_problem then tells the byte offset of the bad record or block and what is wrong with it.
 *
 * Formats: classic pcap in either byte order with microsecond (a1b2c3d4) or nanosecond
 * (a1b23c4d) timestamps; pcapng sections in either byte order, with per-interface if_tsresol
 * (powers of 10 up to 10^-18 or of 2 up to 2^-63) and if_tsoffset, enhanced, simple and obsolete
 * packet blocks (a simple packet block has no timestamp: it gets the previous packet's), other
 * blocks skipped. Dissected link types: Ethernet (up to two 802.1Q/802.1ad tags), raw IP (101,
 * 12, 14, 228, 229), Linux cooked SLL and SLL2, BSD loopback (0, 108); others get only the
 * record columns. IPv6 extension headers (hop-by-hop, routing, fragment, destination options,
 * AH, mobility) are skipped to the upper-layer protocol; IPv4 and IPv6 fragments other than the
 * first have no ports.
 *
 * Thread-safety: a reader is used by one thread at a time; distinct readers are independent.
 */
#ifndef NTG_PCAPREAD_H
#define NTG_PCAPREAD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PR_API __attribute__((visibility("default")))
#else
#define PR_API
#endif

#define PR_FORMAT_PCAP 1
#define PR_FORMAT_PCAPNG 2

typedef struct pr_reader pr_reader;

/* One array per column, each with room for the capacity passed to pr_read. The columns up to
 * tcp_flags are required; those after it may be NULL (not filled: a caller written before they
 * existed, with designated initialisers, gets NULL and stays correct).
 * Addresses are big-endian numbers split in two: IPv6 bytes 0..7 in *_hi, 8..15 in *_lo;
 * IPv4 in the low 32 bits of *_lo with *_hi = 0. Fields a packet does not have are 0. */
typedef struct pr_columns {
    int64_t *ts_ns;      /* nanoseconds since the Unix epoch */
    uint32_t *wire_len;  /* original length on the wire */
    uint32_t *cap_len;   /* bytes present in the file */
    uint16_t *link_type; /* LINKTYPE_ of the packet's interface */
    uint8_t *ip_version; /* 4 or 6; 0 when not IP or the IP header is not fully captured */
    uint8_t *proto;      /* IPv4 protocol / IPv6 upper-layer next header */
    uint64_t *src_hi, *src_lo, *dst_hi, *dst_lo;
    uint16_t *sport, *dport; /* TCP/UDP/SCTP/DCCP/UDP-Lite ports; ICMP(v6) echo: identifier, 0 */
    uint8_t *tcp_flags;      /* TCP flags byte (CWR..FIN) */
    /* Optional columns (NULL: not filled). */
    uint16_t *vlan;      /* Ethernet: the outer 802.1Q/802.1ad tag's VLAN id; 0 untagged */
    uint32_t *l3_len;    /* IPv4 total length field; IPv6 40 + payload length field (from the
                            header, so a capture cut short by its snap length still has it) */
    uint8_t *frag;       /* 0 not a fragment, 1 first fragment (offset 0, more fragments), 2 a
                            later one (offset > 0); an IPv6 atomic fragment (RFC 6946) is 0 */
    uint16_t *icmp_type; /* ICMP / ICMPv6 (not a later fragment): type * 256 + code; else 0 */
    /* TCP / UDP (not a later fragment): the payload bytes after the L4 header, from the IP
     * length field minus the IP, extension and L4 headers (TCP data offset, UDP 8), so
     * independent of the captured length; 0 for other packets or when the length fields are
     * smaller than the headers (e.g. IPv4 total length 0 of an offloaded segment). */
    uint32_t *l4_payload;
} pr_columns;

/* The number of column pointers in pr_columns (18): a caller binding the struct by hand (ctypes)
 * checks that the library it loaded has the layout it was written for. */
#define PR_COLUMN_COUNT 18
PR_API unsigned pr_column_count(void);

/* Map PATH and check its file header. Returns NULL with a message in ERR when the file cannot be
 * opened or is not a pcap/pcapng file. */
PR_API pr_reader *pr_open(const char *path, char *err, size_t errlen);
PR_API void pr_close(pr_reader *r);

PR_API int pr_format(const pr_reader *r);         /* PR_FORMAT_PCAP or PR_FORMAT_PCAPNG */
PR_API uint32_t pr_link_type(const pr_reader *r); /* pcap header, or the first pcapng interface */
PR_API uint64_t pr_ts_units(const pr_reader *r);  /* timestamp units per second, same source
                                                     (0: pcapng without interfaces) */
PR_API uint64_t pr_size(const pr_reader *r);      /* file size in bytes */

/* Packets from the start of the file to its end or to the first problem. Does not move the
 * read position. */
PR_API int64_t pr_count(pr_reader *r);

/* Fill at most CAPACITY packets from the read position into C; returns how many. Fewer than
 * CAPACITY means the end of the file or a problem (see pr_problem). */
PR_API size_t pr_read(pr_reader *r, const pr_columns *c, size_t capacity);

PR_API uint64_t pr_offset(const pr_reader *r); /* byte offset of the next record to read */
PR_API void pr_rewind(pr_reader *r);           /* back to the first record */

/* One packet's bytes, for a caller that rewrites packets rather than reading columns. */
typedef struct pr_packet {
    const uint8_t *data; /* cap_len bytes inside the mapping: valid until the next pr_next,
                            pr_read, pr_rewind or pr_close on this reader */
    uint32_t cap_len, wire_len;
    int64_t ts_ns;
    uint16_t link_type;
} pr_packet;

/* The packet at the read position into *P, and moves past it. Returns 1, or 0 at the end of the
 * file or at a problem (see pr_problem). Pages behind the cursor are dropped as in pr_read. */
PR_API int pr_next(pr_reader *r, pr_packet *p);

/* NULL when the file read cleanly so far; else what is wrong, with the byte offset of the
 * record or block where it starts in *OFFSET (if OFFSET is not NULL). */
PR_API const char *pr_problem(const pr_reader *r, uint64_t *offset);

#endif
