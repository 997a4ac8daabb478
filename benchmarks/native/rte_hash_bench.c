/* rte_hash_bench.c - the DPDK rte_hash peer of `flowengine match` (issue 12).
 *
 * Inserts FLOWS keys, then times lookups of a feed of PACKETS keys drawn
 * uniformly among them (all hits, one core), three ways: rte_hash_lookup one
 * key at a time, rte_hash_lookup_bulk 64 at a time, rte_hash_lookup_bulk_data
 * 64 at a time. Each lookup that hits adds to a per-flow packet counter (the
 * position or data returned indexes an array), so the work per packet is the
 * lookup plus one counter update, as in the emulator.
 *
 * The keys are the emulator's synthetic flows (match_feed.c): IPv4 10.0.0.0/8
 * -> 192.0.2.1:443 TCP, one source address per flow. KEYLEN 40 is the
 * emulator's struct match_key (the same bytes it hashes and compares); 16 is
 * a packed IPv4 5-tuple (13 bytes padded to 16), the usual DPDK flow key.
 * The hash is rte_hash_crc (CRC32C with the SSE4.2 instruction), the same
 * function as the emulator's default crc32c.
 *
 * Output: one JSON object on stdout (rates by wall time; bulk_cpu_mpps: the
 * bulk lookups by this thread's CPU time, for a machine shared with others).
 *
 *   rte_hash_bench [--flows N] [--packets N] [--keylen 16|40] [--seed N] -- EAL args
 *
 * Built only by benchmarks/bench_match_rte.py, only when pkg-config finds
 * libdpdk; nothing in the product or the tests needs it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_version.h>

#define BULK 64

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* this thread's CPU time (the core's time spent on other jobs not counted) */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* splitmix64: the feed's draws (any good generator; not timed) */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Flow I's key, KEYLEN bytes at K (zeroed first). */
static void flow_key(uint8_t *k, size_t keylen, uint64_t i)
{
    uint32_t src = 0x0a000000u + (uint32_t)(i & 0xffffff) + (uint32_t)(i >> 24); /* 10/8 */
    uint32_t dst = 0xc0000201u;                                                  /* 192.0.2.1 */
    uint16_t sport = (uint16_t)(1024 + (i >> 24)), dport = 443;
    memset(k, 0, keylen);
    if (keylen == 40) {
        /* struct match_key: src_hi, src_lo, dst_hi, dst_lo, sport, dport, proto, ip_version */
        uint64_t lo = src, dlo = dst;
        memcpy(k + 8, &lo, 8);
        memcpy(k + 24, &dlo, 8);
        memcpy(k + 32, &sport, 2);
        memcpy(k + 34, &dport, 2);
        k[36] = 6;
        k[37] = 4;
    } else {
        memcpy(k, &src, 4);
        memcpy(k + 4, &dst, 4);
        memcpy(k + 8, &sport, 2);
        memcpy(k + 10, &dport, 2);
        k[12] = 6;
    }
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0) {
        fprintf(stderr, "rte_hash_bench: rte_eal_init: %s\n", rte_strerror(rte_errno));
        return 2;
    }
    argc -= used;
    argv += used;
    uint64_t flows = 1u << 22, packets = 8000000, seed = 1;
    size_t keylen = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--flows"))
            flows = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--packets"))
            packets = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--keylen"))
            keylen = strtoul(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 0);
        else {
            fprintf(stderr, "rte_hash_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if ((keylen != 16 && keylen != 40) || !flows || flows > (1u << 30) || !packets) {
        fprintf(stderr, "rte_hash_bench: --keylen 16|40, --flows 1..2^30, --packets >= 1\n");
        return 2;
    }
    /* Entries: the flows plus a fifth, like the emulator's cuckoo at 80 %. */
    uint64_t entries = flows + flows / 4;
    struct rte_hash_parameters hp = {
        .name = "ntg_rte_bench",
        .entries = (uint32_t)entries,
        .key_len = (uint32_t)keylen,
        .hash_func = rte_hash_crc,
        .hash_func_init_val = 0,
        .socket_id = 0,
    };
    struct rte_hash *h = rte_hash_create(&hp);
    if (!h) {
        fprintf(stderr, "rte_hash_bench: rte_hash_create(%" PRIu64 " entries): %s\n", entries,
                rte_strerror(rte_errno));
        return 2;
    }
    uint8_t *keys = malloc(flows * keylen);
    uint8_t *feed = malloc(packets * keylen);
    uint64_t *count = calloc(entries + 1, sizeof *count);
    if (!keys || !feed || !count) {
        fprintf(stderr, "rte_hash_bench: out of memory\n");
        return 2;
    }
    double t0 = now_s();
    for (uint64_t i = 0; i < flows; i++) {
        flow_key(keys + i * keylen, keylen, i);
        int rc = rte_hash_add_key_data(h, keys + i * keylen, (void *)(uintptr_t)i);
        if (rc < 0) {
            fprintf(stderr, "rte_hash_bench: add %" PRIu64 ": %s\n", i, strerror(-rc));
            return 2;
        }
    }
    double insert_s = now_s() - t0;
    uint64_t s = seed;
    for (uint64_t p = 0; p < packets; p++)
        memcpy(feed + p * keylen, keys + (next_rand(&s) % flows) * keylen, keylen);

    /* single */
    uint64_t misses = 0;
    t0 = now_s();
    for (uint64_t p = 0; p < packets; p++) {
        int32_t pos = rte_hash_lookup(h, feed + p * keylen);
        if (pos < 0)
            misses++;
        else
            count[pos]++;
    }
    double single_s = now_s() - t0;

    /* bulk: positions */
    const void *kp[BULK];
    int32_t pos[BULK];
    double c0 = cpu_s();
    t0 = now_s();
    for (uint64_t p = 0; p < packets; p += BULK) {
        unsigned n = packets - p < BULK ? (unsigned)(packets - p) : BULK;
        for (unsigned j = 0; j < n; j++)
            kp[j] = feed + (p + j) * keylen;
        rte_hash_lookup_bulk(h, kp, n, pos);
        for (unsigned j = 0; j < n; j++) {
            if (pos[j] < 0)
                misses++;
            else
                count[pos[j]]++;
        }
    }
    double bulk_s = now_s() - t0, bulk_cpu_s = cpu_s() - c0;

    /* bulk with data: the data is the flow number */
    void *data[BULK];
    t0 = now_s();
    for (uint64_t p = 0; p < packets; p += BULK) {
        unsigned n = packets - p < BULK ? (unsigned)(packets - p) : BULK;
        for (unsigned j = 0; j < n; j++)
            kp[j] = feed + (p + j) * keylen;
        uint64_t hit = 0;
        int found = rte_hash_lookup_bulk_data(h, kp, n, &hit, data);
        misses += n - (unsigned)found;
        for (unsigned j = 0; j < n; j++)
            if (hit >> j & 1)
                count[(uintptr_t)data[j]]++;
    }
    double bulk_data_s = now_s() - t0;

    uint64_t total = 0;
    for (uint64_t i = 0; i <= entries; i++)
        total += count[i];
    printf("{\"peer\": \"rte_hash\", \"dpdk\": \"%s\", \"key_len\": %zu, \"flows\": %" PRIu64
           ", \"entries\": %" PRIu64 ", \"packets\": %" PRIu64 ", \"bulk\": %d,"
           " \"insert_mps\": %.4f, \"single_mpps\": %.4f, \"bulk_mpps\": %.4f,"
           " \"bulk_data_mpps\": %.4f, \"bulk_cpu_mpps\": %.4f, \"misses\": %" PRIu64
           ", \"counted\": %" PRIu64 "}\n",
           rte_version(), keylen, flows, entries, packets, BULK, flows / insert_s / 1e6,
           packets / single_s / 1e6, packets / bulk_s / 1e6, packets / bulk_data_s / 1e6,
           packets / bulk_cpu_s / 1e6, misses, total);
    rte_hash_free(h);
    free(keys);
    free(feed);
    free(count);
    rte_eal_cleanup();
    return misses ? 1 : 0;
}
