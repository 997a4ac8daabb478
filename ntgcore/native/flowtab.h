/* flowtab.h — a flow table: packets grouped by their exact unidirectional key
 * (ip_version, proto, src, dst, sport, dport), for analysis.metrics.FlowAccumulator.
 *
 *     ft_table *t = ft_new();
 *     ft_add(t, &packets, n);          // once per chunk, in file order
 *     size_t k = ft_count(t);
 *     ... allocate k elements per output column ...
 *     ft_columns(t, &flows);
 *     ft_free(t);
 *
 * Packets whose ip_version is 0 are skipped. Flows are numbered in order of first appearance;
 * each has its packets, bytes (sum of wire_len), first and last time stamp (min and max of
 * ts_ns). Keys are compared exactly (a hash only chooses where to look). Memory: about 88 bytes
 * a flow (the flows, and a hash table at most half full), grown by doubling.
 *
 * Thread-safety: a table is used by one thread at a time; distinct tables are independent.
 */
#ifndef NTG_FLOWTAB_H
#define NTG_FLOWTAB_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FT_API __attribute__((visibility("default")))
#else
#define FT_API
#endif

typedef struct ft_table ft_table;

/* N packets, one array per column (the reader's columns, see pcapread.h). */
typedef struct ft_packets {
    const int64_t *ts_ns;
    const uint32_t *wire_len;
    const uint8_t *ip_version;
    const uint8_t *proto;
    const uint64_t *src_hi, *src_lo, *dst_hi, *dst_lo;
    const uint16_t *sport, *dport;
} ft_packets;

/* The flows, one array per column, each with room for ft_count elements. */
typedef struct ft_flows {
    uint8_t *ip_version;
    uint8_t *proto;
    uint64_t *src_hi, *src_lo, *dst_hi, *dst_lo;
    uint16_t *sport, *dport;
    int64_t *packets, *bytes, *first_ns, *last_ns;
} ft_flows;

FT_API ft_table *ft_new(void); /* NULL when out of memory */
FT_API void ft_free(ft_table *t);

/* Count N packets. Returns 0, or -ENOMEM when out of memory (the table then holds part of the
 * packets: free it). */
FT_API int ft_add(ft_table *t, const ft_packets *p, size_t n);

FT_API size_t ft_count(const ft_table *t);
FT_API void ft_columns(const ft_table *t, const ft_flows *out);

#endif
