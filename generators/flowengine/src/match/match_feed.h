/* match_feed.h - the packets `flowengine match` times: keys, lengths and time
 * stamps materialised into arrays before the timed loop, so no parsing or
 * random draw is timed with the lookups (the two-step loop of seed 000).
 *
 * Kinds (SPEC of --feed):
 *   det                 one 5-tuple over and over (seed 000's deterministic feed)
 *   uniform:N           each packet a flow drawn uniformly among N
 *   zipf:N:ALPHA        flow of rank r drawn with probability ~ r^-ALPHA (ALPHA > 0)
 *   netscan:N           one source, one packet to each of N hosts in turn (port 80)
 *   portscan:N          one source, one host, ports 1..N in turn (N <= 65535)
 *   adversarial:N       N flows whose keys all land in one line of the table
 *                       (found by hashing candidates with the chosen hash and size;
 *                       about N x SIZE hashes): chaining becomes a list of N
 *   pcap                the IP packets of --pcap FILE (through ntgcore/native/pcapread.h);
 *                       packets that are not IP are skipped and counted. PACKETS below one
 *                       pass: the first PACKETS; beyond it: the pass replayed in order until
 *                       PACKETS, each pass's time stamps shifted past the last one's by the
 *                       pass's span and one mean gap (a flow then counts every pass)
 *   file:PATH           packets from a CSV written by match_feed_save (tests)
 * Synthetic flows are IPv4 10.0.0.0/8 -> 192.0.2.1:443 TCP (2001:db8::/32 with
 * ipv6), one source address per flow; time stamps are evenly spaced at RATE
 * packets per second from 2023-11-14 (1.7e18 ns).
 *
 * Memory: 52 bytes a packet (40 key, 4 length, 8 time stamp), plus 8 a flow
 * for zipf's CDF. */
#ifndef FE_MATCH_FEED_H
#define FE_MATCH_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "match_table.h"

#define MATCH_FEED_PACKET_BYTES (sizeof(struct match_key) + sizeof(uint32_t) + sizeof(int64_t))

/* The feed kinds, ended by a NULL name: what --feed takes (name) and how it is
 * written (syntax: "uniform:N"); the parser and `flowengine match --help` read
 * this one table. */
struct match_feed_kind {
    const char *name, *syntax;
};
extern const struct match_feed_kind match_feed_kinds[];

/* The kinds' syntaxes joined by ", " into buf (cut at len); returns buf. */
const char *match_feed_kind_list(char *buf, size_t len);

struct match_feed_params {
    const char *spec;
    const char *pcap; /* the file of the pcap kind */
    uint64_t packets; /* synthetic: how many; pcap: how many (0 = one pass, more
                       * replays it); file: at most (0 = all) */
    double rate_pps;  /* synthetic time stamps */
    int ipv6;
    uint64_t seed;
    hash_fn hash; /* adversarial: the hash, its seed, the table (its key form is what
                   * is hashed: match_key_hash) and the lines to attack */
    const struct match_ops *ops;
    uint64_t hash_seed;
    uint64_t lines;
};

struct match_feed {
    size_t n;
    struct match_key *keys;
    uint32_t *len;
    int64_t *ts;
    char kind[16];
    uint64_t flows;        /* synthetic: the flows drawn from */
    uint64_t skipped;      /* pcap: packets that are not IP */
    uint64_t pass_packets; /* pcap: the IP packets of one pass (n / pass_packets passes) */
    int64_t pass_step_ns;  /* pcap replayed: the time shift from one pass to the next */
    uint64_t tries;        /* adversarial: candidate keys hashed */
    int damaged;           /* pcap: read up to damage at problem_offset */
    uint64_t problem_offset;
    char problem[200];
};

/* Bytes the feed of P will take (for the up-front memory check; pcap and
 * file kinds: an upper bound from the file size). -EINVAL with ERR. */
int match_feed_bytes(const struct match_feed_params *p, uint64_t *bytes, char *err, size_t errlen);

/* Build the feed. 0, or -EINVAL (bad spec, unreadable file: ERR says what),
 * -ENOMEM, -E2BIG (adversarial search beyond its limit). A damaged pcap is not
 * an error here: the packets before the damage are kept and DAMAGED is set. */
int match_feed_load(struct match_feed *f, const struct match_feed_params *p, char *err,
                    size_t errlen);
void match_feed_free(struct match_feed *f);

/* Write the feed as CSV (the format the file kind reads). 0 or -errno. */
int match_feed_save(const struct match_feed *f, const char *path);

/* The key of synthetic flow I. */
void match_feed_flow_key(struct match_key *k, uint64_t i, int ipv6);

#endif
