/* match.c - see match.h: the command line, the timed loop and the report. */
#define _POSIX_C_SOURCE 200809L
#include "match.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hash.h"
#include "match_engine.h"
#include "match_feed.h"
#include "match_table.h"

#define DEFAULT_PACKETS 1000000
#define DEFAULT_BUDGET 8

/* The usage lines; the choices (structures, hashes, feeds) follow from their
 * tables in match_usage(). */
static const char match_usage_lines[] =
    "usage: flowengine match --struct NAME --size N --feed KIND[:ARGS] [--hash NAME]\n"
    "                        [--pcap FILE] [--packets N] [--rate PPS] [--ipv6] [--seed N]\n"
    "                        [--hash-seed N] [--timeout-idle S] [--timeout-active S]\n"
    "                        [--expire-budget K] [--memory BYTES] [--warmup] [--json OUT]\n"
    "                        [--dump CSV] [--save-feed CSV]\n";

struct match_opts {
    const char *structure, *hash, *feed, *pcap, *json, *dump, *save_feed;
    uint64_t size, packets, seed, hash_seed, memory, budget;
    double rate, idle_s, active_s;
    int ipv6, warmup, size_set, packets_set;
};

static int fail(const char *fmt, const char *a, const char *b)
{
    fputs("flowengine match: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

static void table_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (const struct match_ops *const *o = match_tables; *o && used < len; o++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", (*o)->name);
}

/* --help: the usage lines, then every choice from the tables the parser and
 * match_main look names up in (match_tables, the hash registry, the feed kinds). */
static void match_usage(FILE *f)
{
    char names[512];
    fputs(match_usage_lines, f);
    table_names(names, sizeof names);
    fprintf(f, "  --struct: %s\n", names);
    hash_names(names, sizeof names);
    fprintf(f, "  --hash: %s (default crc32c)\n", names);
    fprintf(f, "  --feed: %s\n", match_feed_kind_list(names, sizeof names));
    fputs("  N may be written 2^K. The pcap feed reads --pcap FILE (--packets beyond its packets\n"
          "  replays it in order); file:PATH reads a CSV (as --save-feed writes). See\n"
          "  docs/flow-match.md.\n",
          f);
}

/* A count: digits, or 2^K. */
static int parse_count(const char *s, uint64_t *v)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    if (!strncmp(s, "2^", 2)) {
        unsigned long k = strtoul(s + 2, &end, 10);
        if (errno || *end || end == s + 2 || k > 63)
            return -1;
        *v = 1ull << k;
        return 0;
    }
    *v = strtoull(s, &end, 10);
    return errno || *end ? -1 : 0;
}

/* BYTES with an optional K, M, G or T (powers of 1024). */
static int parse_bytes(const char *s, uint64_t *v)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    double x = strtod(s, &end);
    double unit = 1;
    if (*end == 'K' || *end == 'k')
        unit = 1024.0;
    else if (*end == 'M')
        unit = 1024.0 * 1024;
    else if (*end == 'G')
        unit = 1024.0 * 1024 * 1024;
    else if (*end == 'T')
        unit = 1024.0 * 1024 * 1024 * 1024;
    if (unit > 1)
        end++;
    if (errno || *end || !(x * unit < 1.8e19))
        return -1;
    *v = (uint64_t)(x * unit);
    return 0;
}

static int parse_seconds(const char *s, double *v)
{
    char *end;
    if (!s || !*s)
        return -1;
    *v = strtod(s, &end);
    return *end || !(*v >= 0) || !isfinite(*v) ? -1 : 0;
}

enum {
    OPT_IPV6 = 256,
    OPT_WARMUP,
    OPT_STRUCT,
    OPT_HASH,
    OPT_FEED,
    OPT_PCAP,
    OPT_JSON,
    OPT_DUMP,
    OPT_SAVE_FEED,
    OPT_SIZE,
    OPT_PACKETS,
    OPT_SEED,
    OPT_HASH_SEED,
    OPT_EXPIRE_BUDGET,
    OPT_MEMORY,
    OPT_RATE,
    OPT_TIMEOUT_IDLE,
    OPT_TIMEOUT_ACTIVE
};

static const struct option match_options[] = {
    { "help", no_argument, NULL, 'h' },
    { "ipv6", no_argument, NULL, OPT_IPV6 },
    { "warmup", no_argument, NULL, OPT_WARMUP },
    { "struct", required_argument, NULL, OPT_STRUCT },
    { "hash", required_argument, NULL, OPT_HASH },
    { "feed", required_argument, NULL, OPT_FEED },
    { "pcap", required_argument, NULL, OPT_PCAP },
    { "json", required_argument, NULL, OPT_JSON },
    { "dump", required_argument, NULL, OPT_DUMP },
    { "save-feed", required_argument, NULL, OPT_SAVE_FEED },
    { "size", required_argument, NULL, OPT_SIZE },
    { "packets", required_argument, NULL, OPT_PACKETS },
    { "seed", required_argument, NULL, OPT_SEED },
    { "hash-seed", required_argument, NULL, OPT_HASH_SEED },
    { "expire-budget", required_argument, NULL, OPT_EXPIRE_BUDGET },
    { "memory", required_argument, NULL, OPT_MEMORY },
    { "rate", required_argument, NULL, OPT_RATE },
    { "timeout-idle", required_argument, NULL, OPT_TIMEOUT_IDLE },
    { "timeout-active", required_argument, NULL, OPT_TIMEOUT_ACTIVE },
    { NULL, 0, NULL, 0 }
};

/* argv[0] is "match". 0, 1 after --help, 2 for bad arguments (said). */
static int parse_args(int argc, char **argv, struct match_opts *o)
{
    int c, li;
    char name[32];
    opterr = 0;
    /* "-": a stray word comes back as 1 (refused in order); ":": a missing value is ':' */
    while ((li = -1, c = getopt_long(argc, argv, "-:h", match_options, &li)) != -1) {
        const char *v = optarg;
        const char *a = name;
        if (li >= 0)
            snprintf(name, sizeof name, "--%s", match_options[li].name);
        else
            a = argv[optind - 1]; /* a missing value's, an unknown option's or a stray word */
        switch (c) {
        case 'h':
            match_usage(stdout);
            return 1;
        case OPT_IPV6:
            o->ipv6 = 1;
            break;
        case OPT_WARMUP:
            o->warmup = 1;
            break;
        case ':':
            return fail("%s: option needs a value%s", a, "");
        case OPT_STRUCT:
            o->structure = v;
            break;
        case OPT_HASH:
            o->hash = v;
            break;
        case OPT_FEED:
            o->feed = v;
            break;
        case OPT_PCAP:
            o->pcap = v;
            break;
        case OPT_JSON:
            o->json = v;
            break;
        case OPT_DUMP:
            o->dump = v;
            break;
        case OPT_SAVE_FEED:
            o->save_feed = v;
            break;
        case OPT_SIZE:
            if (parse_count(v, &o->size) || !o->size)
                return fail("--size %s: expected a number of lines >= 1 (digits or 2^K)%s", v, "");
            o->size_set = 1;
            break;
        case OPT_PACKETS:
            if (parse_count(v, &o->packets) || !o->packets)
                return fail("--packets %s: expected a positive integer%s", v, "");
            o->packets_set = 1;
            break;
        case OPT_SEED:
        case OPT_HASH_SEED:
            if (parse_count(v, c == OPT_SEED ? &o->seed : &o->hash_seed))
                return fail("%s %s: expected an integer 0..2^64-1", a, v);
            break;
        case OPT_EXPIRE_BUDGET:
            if (parse_count(v, &o->budget) || !o->budget || o->budget > 1000000)
                return fail("--expire-budget %s: expected an integer 1..1000000%s", v, "");
            break;
        case OPT_MEMORY:
            if (parse_bytes(v, &o->memory) || !o->memory)
                return fail("--memory %s: expected bytes > 0, optionally with K, M, G or T%s", v,
                            "");
            break;
        case OPT_RATE:
            if (parse_seconds(v, &o->rate) || !(o->rate > 0))
                return fail("--rate %s: expected packets per second > 0%s", v, "");
            break;
        case OPT_TIMEOUT_IDLE:
        case OPT_TIMEOUT_ACTIVE: {
            double *d = c == OPT_TIMEOUT_IDLE ? &o->idle_s : &o->active_s;
            if (parse_seconds(v, d) || *d > 1e9)
                return fail("%s %s: expected seconds >= 0 (0: none)", a, v);
            break;
        }
        default: /* '?' and 1 */
            return fail("unknown option: %s%s\n(see flowengine match --help)", a, "");
        }
    }
    if (optind < argc) /* after "--": match takes no operands */
        return fail("unknown option: %s%s\n(see flowengine match --help)", argv[optind], "");
    if (!o->structure || !o->size_set || !o->feed)
        return fail("--struct, --size and --feed are required%s%s\n(see flowengine match --help)",
                    "", "");
    return 0;
}

static double gib(uint64_t b)
{
    return (double)b / (1u << 30);
}

/* Closed and live flows as CSV (the test's view of the table). */
static void dump_flow(const struct match_flow *f, void *arg)
{
    const struct match_key *k = &f->key;
    fprintf((FILE *)arg, "%u,%u,%llu,%llu,%llu,%llu,%u,%u,%llu,%llu,%lld,%lld\n", k->ip_version,
            k->proto, (unsigned long long)k->src_hi, (unsigned long long)k->src_lo,
            (unsigned long long)k->dst_hi, (unsigned long long)k->dst_lo, k->sport, k->dport,
            (unsigned long long)f->c.packets, (unsigned long long)f->c.bytes,
            (long long)f->c.first_ns, (long long)f->c.last_ns);
}

static FILE *open_temp(const char *path, char *tmp, size_t len)
{
    snprintf(tmp, len, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        fprintf(stderr, "flowengine match: %s: %s\n", tmp, strerror(errno));
    return f;
}

/* Close F and move TMP over PATH; 0, or 1 with a message. */
static int commit_temp(FILE *f, const char *tmp, const char *path)
{
    if (fclose(f) || rename(tmp, path)) {
        fprintf(stderr, "flowengine match: %s: %s\n", path, strerror(errno));
        remove(tmp);
        return 1;
    }
    return 0;
}

struct report {
    const struct match_opts *o;
    const struct match_ops *ops;
    const struct match_feed *feed;
    const struct match_stats *st;
    double seconds, cpu_seconds; /* wall and this thread's CPU time of the timed loop */
    uint64_t flows, used, memory, fixed, per_flow;
};

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void write_report(FILE *out, const struct report *r, int json)
{
    const struct match_stats *st = r->st;
    uint64_t hits = st->packets - st->refused;
    double mpps = r->seconds > 0 ? (double)st->packets / r->seconds / 1e6 : 0;
    double mpps_cpu = r->cpu_seconds > 0 ? (double)st->packets / r->cpu_seconds / 1e6 : 0;
    double mean = hits ? (double)st->probe_sum / (double)hits : 0;
    double pl1 = hits ? (double)st->hist[1] / (double)hits : 0;
    double occupancy = (double)r->used / (double)r->o->size;
    uint64_t expiries = st->expired_sweep + st->expired_on_hit;
    double per_s = r->seconds > 0 ? 1 / r->seconds : 0;
    double bpf = r->flows ? (double)r->memory / (double)r->flows : 0;
    if (!json) {
        fprintf(out,
                "%s/%s size %llu feed %s: %llu packets in %.6f s = %.2f Mpps (%.2f a CPU second)\n"
                "  probes: P(L=1) %.4f, mean %.3f, max %llu; occupancy %.4f; flows at end %llu\n"
                "  memory %.1f MiB = %.1f bytes a flow (%.1f a line, +%llu a flow added)\n"
                "  inserts %llu (%.3g/s), expiries %llu (%.3g/s), refused %llu; worst packet: %llu "
                "probes, %llu expiry steps\n",
                r->ops->name, r->o->hash, (unsigned long long)r->o->size, r->o->feed,
                (unsigned long long)st->packets, r->seconds, mpps, mpps_cpu, pl1, mean,
                (unsigned long long)st->probe_max, occupancy, (unsigned long long)r->flows,
                (double)r->memory / (1 << 20), bpf, (double)r->fixed / (double)r->o->size,
                (unsigned long long)r->per_flow, (unsigned long long)st->inserts,
                (double)st->inserts * per_s, (unsigned long long)expiries, (double)expiries * per_s,
                (unsigned long long)st->refused, (unsigned long long)st->work_max,
                (unsigned long long)st->steps_max);
        return;
    }
    fprintf(out, "{\n  \"struct\": \"%s\",\n  \"struct_what\": \"%s\",\n  \"hash\": \"%s\",\n",
            r->ops->name, r->ops->what, r->o->hash);
    fprintf(out, "  \"size\": %llu,\n  \"feed\": ", (unsigned long long)r->o->size);
    json_string(out, r->o->feed);
    fprintf(out, ",\n  \"feed_kind\": \"%s\",\n", r->feed->kind);
    fprintf(out, "  \"feed_flows\": %llu,\n  \"ipv6\": %s,\n  \"warmup\": %s,\n",
            (unsigned long long)r->feed->flows, r->o->ipv6 ? "true" : "false",
            r->o->warmup ? "true" : "false");
    fprintf(out, "  \"packets\": %llu,\n  \"seconds\": %.9f,\n  \"mpps\": %.4f,\n",
            (unsigned long long)st->packets, r->seconds, mpps);
    fprintf(out, "  \"cpu_seconds\": %.9f,\n  \"mpps_cpu\": %.4f,\n", r->cpu_seconds, mpps_cpu);
    fprintf(out, "  \"probe_hist\": [");
    for (int i = 1; i <= MATCH_HIST; i++)
        fprintf(out, "%s%llu", i > 1 ? ", " : "", (unsigned long long)st->hist[i]);
    fprintf(out,
            "],\n  \"probe_hist_note\": \"element i: lookups of i+1 probes; the last: %d or "
            "more\",\n",
            MATCH_HIST);
    fprintf(out, "  \"p_l1\": %.6f,\n  \"probe_mean\": %.6f,\n  \"probe_max\": %llu,\n", pl1, mean,
            (unsigned long long)st->probe_max);
    fprintf(out, "  \"used_lines\": %llu,\n  \"occupancy\": %.6f,\n  \"flows_end\": %llu,\n",
            (unsigned long long)r->used, occupancy, (unsigned long long)r->flows);
    fprintf(out,
            "  \"memory_bytes\": %llu,\n  \"bytes_per_flow\": %.2f,\n"
            "  \"bytes_per_line\": %.2f,\n  \"bytes_per_added_flow\": %llu,\n",
            (unsigned long long)r->memory, bpf, (double)r->fixed / (double)r->o->size,
            (unsigned long long)r->per_flow);
    fprintf(out,
            "  \"inserts\": %llu,\n  \"inserts_per_s\": %.1f,\n  \"expiries\": %llu,\n"
            "  \"expiries_per_s\": %.1f,\n  \"expired_sweep\": %llu,\n"
            "  \"expired_on_hit\": %llu,\n  \"refused\": %llu,\n",
            (unsigned long long)st->inserts, (double)st->inserts * per_s,
            (unsigned long long)expiries, (double)expiries * per_s,
            (unsigned long long)st->expired_sweep, (unsigned long long)st->expired_on_hit,
            (unsigned long long)st->refused);
    fprintf(out,
            "  \"timeout_idle_s\": %.9g,\n  \"timeout_active_s\": %.9g,\n"
            "  \"expire_budget\": %llu,\n",
            r->o->idle_s, r->o->active_s, (unsigned long long)r->o->budget);
    fprintf(out, "  \"worst_packet\": {\"probes\": %llu, \"expiry_steps\": %llu},\n",
            (unsigned long long)st->work_max, (unsigned long long)st->steps_max);
    fprintf(out,
            "  \"adversarial_tries\": %llu,\n  \"pcap\": ", (unsigned long long)r->feed->tries);
    if (r->o->pcap && !strcmp(r->feed->kind, "pcap")) {
        fprintf(out, "{\"path\": ");
        json_string(out, r->o->pcap);
        fprintf(out,
                ", \"skipped_not_ip\": %llu, \"pass_packets\": %llu, \"passes\": %.6f, "
                "\"pass_step_ns\": %lld, \"damaged\": %s",
                (unsigned long long)r->feed->skipped, (unsigned long long)r->feed->pass_packets,
                r->feed->pass_packets ? (double)r->feed->n / (double)r->feed->pass_packets : 0.0,
                (long long)r->feed->pass_step_ns, r->feed->damaged ? "true" : "false");
        if (r->feed->damaged) {
            fprintf(out, ", \"problem\": ");
            json_string(out, r->feed->problem);
            fprintf(out, ", \"offset\": %llu", (unsigned long long)r->feed->problem_offset);
        }
        fputs("}\n}\n", out);
    } else {
        fputs("null\n}\n", out);
    }
}

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int match_main(int argc, char **argv, uint64_t mem_available)
{
    struct match_opts o = { .hash = "crc32c", .rate = 1e7, .budget = DEFAULT_BUDGET };
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    char names[512], err[512];
    const struct match_ops *ops = match_table_find_ops(o.structure);
    if (!ops) {
        table_names(names, sizeof names);
        return fail("--struct %s: unknown structure (known: %s)", o.structure, names);
    }
    const struct hash_algo *algo;
    rc = hash_find(o.hash, &algo);
    if (rc == -ENOTSUP)
        return fail("--hash %s: this CPU lacks the instructions it needs%s", o.hash, "");
    if (rc) {
        hash_names(names, sizeof names);
        return fail("--hash %s: unknown hash (known: %s)", o.hash, names);
    }
    hash_fn hash = algo->fn;
    uint64_t fixed, per_flow;
    if (ops->footprint(o.size, &fixed, &per_flow)) {
        snprintf(err, sizeof err, "%llu", (unsigned long long)o.size);
        return fail("--size %s: out of range for %s", err, ops->name);
    }
    if (ops->key_bytes == 16 && o.ipv6)
        return fail("--struct %s keeps IPv4 keys only (16 bytes a key): drop --ipv6, or use %s",
                    ops->name, "--struct linear");
    if (!o.packets_set)
        o.packets = DEFAULT_PACKETS;
    struct match_feed_params fp = {
        .spec = o.feed,
        .pcap = o.pcap,
        .packets = o.packets_set ? o.packets : 0,
        .rate_pps = o.rate,
        .ipv6 = o.ipv6,
        .seed = o.seed,
        .hash = hash,
        .hash_seed = o.hash_seed,
        .ops = ops,
        /* cuckoo: one line is a bucket of 8; the line-0 keys of SIZE (hashes
         * = 0 mod SIZE) are also in bucket 0 of SIZE/8 when 8 divides SIZE */
        .lines = o.size,
    };
    if (strncmp(o.feed, "pcap", 4) && strncmp(o.feed, "file", 4))
        fp.packets = o.packets;
    uint64_t feed_bytes;
    if (match_feed_bytes(&fp, &feed_bytes, err, sizeof err))
        return fail("%s%s", err, "");
    uint64_t budget = o.memory ? o.memory : mem_available;
    if (budget && (fixed > budget || feed_bytes > budget - fixed)) {
        fprintf(stderr,
                "flowengine match: --size %llu: the %s table needs %.3f GiB (%.1f bytes a line%s) "
                "and the feed %.3f GiB: %.3f GiB in all, over the %.3f GiB %s; lower --size or "
                "--packets\n",
                (unsigned long long)o.size, ops->name, gib(fixed), (double)fixed / (double)o.size,
                per_flow ? ", more as flows are added" : "", gib(feed_bytes),
                gib(fixed) + gib(feed_bytes), gib(budget),
                o.memory ? "given by --memory" : "of memory available");
        return 2;
    }

    struct match_feed feed;
    rc = match_feed_load(&feed, &fp, err, sizeof err);
    if (rc) {
        match_feed_free(&feed);
        return fail("%s%s", err[0] ? err : strerror(-rc), "");
    }
    for (size_t i = 0; ops->key_bytes == 16 && i < feed.n; i++) {
        struct match_key16 packed;
        if (match_key_pack16(&feed.keys[i], &packed)) {
            match_feed_free(&feed);
            snprintf(err, sizeof err, "packet %zu of the feed is IPv6", i + 1);
            return fail("--struct %s keeps IPv4 keys only (16 bytes a key), but %s: use --struct "
                        "linear",
                        ops->name, err);
        }
    }
    if (feed.damaged)
        fprintf(stderr,
                "flowengine match: %s: damaged at byte %llu (%s): the %zu IP packets before it "
                "are analysed\n",
                o.pcap, (unsigned long long)feed.problem_offset, feed.problem,
                (size_t)feed.pass_packets);

    char tmp_dump[4096], tmp_json[4096], tmp_feed[4096];
    FILE *dump = NULL;
    if (o.save_feed) {
        snprintf(tmp_feed, sizeof tmp_feed, "%s.tmp", o.save_feed);
        if (match_feed_save(&feed, tmp_feed) || rename(tmp_feed, o.save_feed)) {
            fprintf(stderr, "flowengine match: %s: %s\n", o.save_feed, strerror(errno));
            remove(tmp_feed);
            match_feed_free(&feed);
            return 1;
        }
    }
    if (o.dump && !(dump = open_temp(o.dump, tmp_dump, sizeof tmp_dump))) {
        match_feed_free(&feed);
        return 1;
    }
    if (dump)
        fputs("ip_version,proto,src_hi,src_lo,dst_hi,dst_lo,sport,dport,packets,bytes,first_ns,"
              "last_ns\n",
              dump);

    struct match_engine_params ep = {
        .ops = ops,
        .table = { .size = o.size, .memory_budget = budget ? budget - feed_bytes : 0 },
        .hash = hash,
        .algo = algo,
        .seed = o.hash_seed,
        .idle_ns = (int64_t)(o.idle_s * 1e9),
        .active_ns = (int64_t)(o.active_s * 1e9),
        .budget = (unsigned)o.budget,
        .on_close = dump ? dump_flow : NULL,
        .on_close_arg = dump,
    };
    struct match_engine *e;
    rc = match_engine_create(&e, &ep);
    if (rc) {
        if (dump) {
            fclose(dump);
            remove(tmp_dump);
        }
        match_feed_free(&feed);
        fprintf(stderr, "flowengine match: creating the %s table of %llu lines: %s\n", ops->name,
                (unsigned long long)o.size, strerror(-rc));
        return 2;
    }
    if (o.warmup) {
        match_engine_bulk(e, feed.keys, feed.len, feed.ts, feed.n);
        match_engine_reset_stats(e);
    }
    /* Wall time, and the CPU time of this thread (what the loop cost on a
     * machine shared with other jobs: time the core ran something else is not
     * counted; their cache pollution is). */
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t0 = clock_s(CLOCK_MONOTONIC);
    match_engine_bulk(e, feed.keys, feed.len, feed.ts, feed.n);
    double seconds = clock_s(CLOCK_MONOTONIC) - t0;
    double cpu_seconds = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;

    const struct match_ops *ops_used = ops;
    void *table = match_engine_table(e);
    struct report r = {
        .o = &o,
        .ops = ops_used,
        .feed = &feed,
        .st = match_engine_stats(e),
        .seconds = seconds,
        .cpu_seconds = cpu_seconds,
        .flows = ops->flows(table),
        .used = ops->used_lines(table),
        .memory = match_engine_memory(e),
        .fixed = fixed,
        .per_flow = per_flow,
    };
    write_report(stdout, &r, 0);
    int status = 0;
    if (dump) {
        match_engine_walk(e, dump_flow, dump);
        status |= commit_temp(dump, tmp_dump, o.dump);
    }
    if (o.json) {
        FILE *j = open_temp(o.json, tmp_json, sizeof tmp_json);
        if (!j) {
            status = 1;
        } else {
            write_report(j, &r, 1);
            status |= commit_temp(j, tmp_json, o.json);
        }
    }
    match_engine_free(e);
    int damaged = feed.damaged;
    match_feed_free(&feed);
    return damaged ? 2 : status;
}
