/* mult.h - the traffic multiplier's rewrite core (seed 003): one ingress frame
 * in, T shadow copies plus the original out.
 *
 * The plan. Every original IP address gets, for each copy c = 1..T, one
 * shadow address from the user's ranges of its family: index i of the address
 * (in order of first appearance) and the copy give x = (c-1)*M + i, and an
 * affine map x -> (a*x + b) mod S (a coprime to S, both from the seed) picks
 * one of the S addresses of the ranges. M is the number of original addresses
 * of the family the plan has room for, so the T*M shadow addresses are all
 * distinct and never an original's (ranges that hold an original address are
 * refused by the caller). Because the map is per address, the request and the
 * response of a session land on the same shadow pair, and a client keeps one
 * shadow client per copy across all its sessions. With MULT_PORTS_SHIFT the
 * flow's higher port (>= 1024, the ephemeral side) also moves by a per-copy
 * offset inside 1024..65535, a bijection, so distinct flows stay distinct.
 *
 * Checksums are updated incrementally (RFC 1624, eqn. 3): the one's
 * complement difference between an address's shadow and itself is computed
 * once, when the shadow is planned, and each copy adds two of them (and a
 * port's) to the IPv4 header checksum and to the pseudo-header checksum of
 * TCP, UDP, UDP-Lite, DCCP and ICMPv6. ICMPv4 has no pseudo-header: only an
 * echo's identifier would change it, and it is kept. A request whose URL is
 * substituted changes length: that one packet's TCP checksum is summed anew.
 *
 * Two ways to plan: offline (mult_scan over the whole input, then mult_plan,
 * then mult_packet over it again; M is exactly the number of addresses seen)
 * or live (params.live: M = max_addrs, each address planned when first seen,
 * mult_packet only). Tables hold at most max_flows flows and max_addrs
 * addresses per family; offline, mult_scan refuses the flow past the bound
 * (-ENOSPC) before anything is written; live, a packet of a flow that does
 * not fit passes through as the original alone (counted).
 *
 * Errors: negative errno. Thread safety: a struct mult belongs to one thread;
 * several instances (one per core, packets spread by flow) are independent. */
#ifndef FE_MULT_H
#define FE_MULT_H

#include <stddef.h>
#include <stdint.h>

#define MULT_MAX_COPIES 1024u
#define MULT_MAX_RANGES 16u
#define MULT_MAX_URL 4096u
/* Frames out of one ingress frame grow at most by this (a longer URL). */
#define MULT_MAX_GROWTH MULT_MAX_URL
/* HTTP requests per flow whose URL substitution is remembered for the
 * sequence-number shift; later requests of the flow keep their URL (counted). */
#define MULT_MAX_REQUESTS 32u

enum mult_order { MULT_ORDER_SPFO, MULT_ORDER_INTERLEAVED };
enum mult_ports { MULT_PORTS_KEEP, MULT_PORTS_SHIFT };

/* Why a frame went out as the original alone (it then counts once in the
 * egress, not T+1 times). */
enum mult_pass {
    MULT_PASS_NOT_IP,     /* not IPv4/IPv6 over Ethernet (ARP, LLDP, ...) */
    MULT_PASS_TRUNCATED,  /* the headers to rewrite are not all captured */
    MULT_PASS_ROUTING,    /* IPv6 routing header with segments left, IPv4 source route:
                             the pseudo-header uses an address we do not rewrite */
    MULT_PASS_AUTH,       /* AH or ESP: the ICV or the encrypted checksum covers addresses */
    MULT_PASS_TABLE_FULL, /* live: flow or address table at its bound */
    MULT_PASS_NO_RANGE,   /* no shadow range for the packet's family */
    MULT_PASS_REASONS
};

/* A CIDR range: family 4 or 6, address in network order, prefix length. */
struct mult_range {
    uint8_t family;
    uint8_t plen;
    uint8_t addr[16];
};

struct mult_params {
    uint32_t copies; /* T, 1..MULT_MAX_COPIES */
    uint64_t seed;
    int order;                       /* enum mult_order */
    int ports;                       /* enum mult_ports */
    const struct mult_range *ranges; /* shadow ranges, both families, disjoint */
    uint32_t nranges;
    const char *const *urls; /* copy c's request target is urls[(c-1) % nurls]; */
    uint32_t nurls;          /* nurls = 0: payload untouched */
    uint32_t max_ip_len;     /* a substituted request longer than this keeps its URL */
    uint32_t max_flows;      /* flow table bound */
    uint32_t max_addrs;      /* address table bound, per family */
    int live;                /* 1: plan each address when first seen (M = max_addrs) */
    /* The sided plan (nhome > 0): an original address inside one of the home CIDRs takes its
     * shadows from home_ranges, any other from ranges, each side with an affine map and an M
     * of its own (its addresses in order of first appearance), so the shadows of the home
     * side are a few CIDRs an IDS can take as HOME_NET. nhome = 0: the one plan above. */
    const struct mult_range *home;
    uint32_t nhome;
    const struct mult_range *home_ranges;
    uint32_t nhome_ranges;
};

struct mult_stats {
    uint64_t in, out, rewritten, bytes_in, bytes_out;
    uint64_t pass[MULT_PASS_REASONS];
    uint64_t vlan, ipv6_ext, fragments, icmp_errors; /* rewritten frames with these features */
    uint64_t url_requests; /* original HTTP requests whose URL was substituted */
    uint64_t url_too_long; /* (request, copy) pairs that kept the original URL: too long */
    uint64_t url_unparsed; /* HTTP-looking first segments without a whole request line */
    uint64_t url_overflow; /* requests past MULT_MAX_REQUESTS in a flow */
};

/* One flow of the plan as seen from outside (mult_flow_get). Endpoint a is
 * the lower (address, port); packets[0] went a -> b, packets[1] b -> a. */
struct mult_flow_view {
    uint8_t family, proto;
    const uint8_t *addr_a, *addr_b; /* network order, 4 or 16 bytes */
    uint16_t port_a, port_b;
    uint64_t packets[2];
};

/* One output frame in a caller's buffer (mult_packet). */
struct mult_frame {
    uint32_t off, len; /* where in buf, and how long */
    uint16_t copy;     /* 0: the original, 1..T: shadow copy */
};

struct mult;

/* Creates a multiplier. 0 or -EINVAL (bad params: T out of range, no range,
 * more than MULT_MAX_RANGES, a URL longer than MULT_MAX_URL, home CIDRs without
 * home ranges), -ENOSPC (live: a family's ranges, or with home CIDRs each side's,
 * hold fewer than T * max_addrs addresses), -ENOMEM. */
int mult_create(struct mult **out, const struct mult_params *p);
void mult_free(struct mult *m);

/* Offline pass 1: learns the frame's flow and addresses. 0, -ENOSPC (more
 * than max_flows flows or max_addrs addresses of a family), -ENOMEM. Also
 * tallies into *need the largest IP packet length a substituted request
 * reaches (0 when none). */
int mult_scan(struct mult *m, const uint8_t *frame, uint32_t len, uint32_t *need);

/* Offline, after the scan: plans the shadow addresses of every address seen.
 * 0, or -ENOSPC when a family's ranges hold fewer than T * (its addresses)
 * (mult_plan_need tells how many). */
int mult_plan(struct mult *m);
uint64_t mult_plan_need(const struct mult *m, int family);
uint64_t mult_range_size(const struct mult *m, int family);
/* The same for one side of a sided plan (home: 1 the home side, 0 the others). */
uint64_t mult_side_need(const struct mult *m, int family, int home);
uint64_t mult_side_size(const struct mult *m, int family, int home);
/* 1 when the address (network order, 4 or 16 bytes) of the family lies in r. */
int mult_range_has(const struct mult_range *r, int family, const uint8_t *addr);

/* The hot path: writes the T+1 frames of one ingress frame (or the original
 * alone, see enum mult_pass) into buf, each preceded by `gap` bytes left for
 * the caller (a pcap record header), and describes them in fr[] (room for T+1).
 * buf needs (T+1) * (gap + len + MULT_MAX_GROWTH) bytes at most; mult_room
 * tells the exact bound. Returns the number of frames (>= 1), or -ENOBUFS
 * when cap is too small (nothing written). */
int mult_packet(struct mult *m, const uint8_t *frame, uint32_t len, uint8_t *buf, size_t cap,
                uint32_t gap, struct mult_frame *fr);
size_t mult_room(const struct mult *m, uint32_t len, uint32_t gap);
/* The same, each copy written straight where the caller wants it (a TX ring's
 * slots): copy c (1..T) into slot[c-1], which holds cap bytes; the original is
 * not written (it is the input, unchanged). fr[] as above, every off 0.
 * -ENOBUFS (nothing written) when cap < len + the longest URL growth. */
int mult_packet_slots(struct mult *m, const uint8_t *frame, uint32_t len, uint8_t *const *slot,
                      size_t cap, struct mult_frame *fr);

const struct mult_stats *mult_stats(const struct mult *m);
uint32_t mult_flow_count(const struct mult *m);
/* Flow i (0 .. count-1, in order of first appearance). */
void mult_flow_get(const struct mult *m, uint32_t i, struct mult_flow_view *v);
/* The shadow of one endpoint address of a family in copy c (1..T); NULL when
 * the address is not planned. */
const uint8_t *mult_shadow_addr(const struct mult *m, int family, const uint8_t *addr, uint32_t c);
/* The shadow in copy c of the port of a flow of protocol proto whose other
 * port is other (only TCP, UDP, UDP-Lite and DCCP ports move). */
uint16_t mult_shadow_port(const struct mult *m, uint8_t proto, uint16_t port, uint16_t other,
                          uint32_t c);
/* Bytes of table memory per tracked flow and per tracked address (with T copies). */
size_t mult_flow_bytes(void);
size_t mult_addr_bytes(uint32_t copies);

#endif
