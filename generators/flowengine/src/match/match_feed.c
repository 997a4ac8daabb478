/* match_feed.c - see match_feed.h. */
#define _POSIX_C_SOURCE 200809L
#include "match_feed.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bigmem.h"
#include "pcapread.h"
#include "rng.h"

#define FEED_T0_NS 1700000000000000000ll
#define ADVERSARIAL_MAX_TRIES (1ull << 34)
#define FILE_LINE_MIN 20 /* shortest CSV line: bounds the packets of a file */

enum feed_kind {
    FEED_DET,
    FEED_UNIFORM,
    FEED_ZIPF,
    FEED_NETSCAN,
    FEED_PORTSCAN,
    FEED_ADVERSARIAL,
    FEED_PCAP,
    FEED_FILE
};

struct feed_spec {
    enum feed_kind kind;
    uint64_t n;
    double alpha;
    const char *path;
};

/* In the order of enum feed_kind. */
const struct match_feed_kind match_feed_kinds[] = {
    { "det", "det" },           { "uniform", "uniform:N" },   { "zipf", "zipf:N:ALPHA" },
    { "netscan", "netscan:N" }, { "portscan", "portscan:N" }, { "adversarial", "adversarial:N" },
    { "pcap", "pcap" },         { "file", "file:PATH" },      { NULL, NULL }
};
#define kind_names(k) (match_feed_kinds[k].name)

const char *match_feed_kind_list(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (const struct match_feed_kind *k = match_feed_kinds; k->name && used < len; k++) {
        int n =
            snprintf(buf + used, len - used, "%s%s", k == match_feed_kinds ? "" : ", ", k->syntax);
        used += n > 0 ? (size_t)n : 0;
    }
    return buf;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *v = strtoull(s, &end, 10);
    return errno || (*end && *end != ':') ? -1 : 0;
}

static int parse_spec(const struct match_feed_params *p, struct feed_spec *s, char *err,
                      size_t errlen)
{
    const char *spec = p->spec, *colon = strchr(spec, ':');
    size_t klen = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *arg = colon ? colon + 1 : NULL;
    memset(s, 0, sizeof *s);
    int k = -1;
    for (int i = 0; match_feed_kinds[i].name; i++)
        if (strlen(kind_names(i)) == klen && !strncmp(kind_names(i), spec, klen))
            k = i;
    if (k < 0) {
        char known[256];
        snprintf(err, errlen, "--feed %s: unknown kind (known: %s)", spec,
                 match_feed_kind_list(known, sizeof known));
        return -EINVAL;
    }
    s->kind = (enum feed_kind)k;
    switch (s->kind) {
    case FEED_DET:
    case FEED_PCAP:
        if (arg) {
            snprintf(err, errlen, "--feed %s: %s takes no parameter", spec, kind_names(k));
            return -EINVAL;
        }
        if (s->kind == FEED_PCAP && !p->pcap) {
            snprintf(err, errlen, "--feed pcap needs --pcap FILE");
            return -EINVAL;
        }
        s->path = p->pcap;
        return 0;
    case FEED_FILE:
        if (!arg || !*arg) {
            snprintf(err, errlen, "--feed file:PATH: missing PATH");
            return -EINVAL;
        }
        s->path = arg;
        return 0;
    default:
        break;
    }
    if (parse_u64(arg, &s->n) || !s->n) {
        snprintf(err, errlen, "--feed %s: expected %s:N with N a positive integer", spec,
                 kind_names(k));
        return -EINVAL;
    }
    const char *second = strchr(arg, ':');
    if (s->kind == FEED_ZIPF) {
        char *end;
        s->alpha = second ? strtod(second + 1, &end) : NAN;
        if (!second || *end || !(s->alpha > 0) || !isfinite(s->alpha)) {
            snprintf(err, errlen, "--feed %s: zipf:N:ALPHA needs ALPHA > 0 (got %s)", spec,
                     second ? second + 1 : "none");
            return -EINVAL;
        }
    } else if (second) {
        snprintf(err, errlen, "--feed %s: %s takes one parameter", spec, kind_names(k));
        return -EINVAL;
    }
    if (s->kind == FEED_PORTSCAN && s->n > 65535) {
        snprintf(err, errlen, "--feed %s: a portscan has at most 65535 ports", spec);
        return -EINVAL;
    }
    uint64_t lines = p->lines ? p->lines : 1;
    if (s->kind == FEED_ADVERSARIAL &&
        (s->n > ADVERSARIAL_MAX_TRIES / lines || s->n * lines > ADVERSARIAL_MAX_TRIES)) {
        snprintf(err, errlen,
                 "--feed %s: finding %llu keys of one line among %llu takes about %.3g hashes, "
                 "over the limit of %.3g: lower N or --size",
                 spec, (unsigned long long)s->n, (unsigned long long)p->lines,
                 (double)s->n * (double)p->lines, (double)ADVERSARIAL_MAX_TRIES);
        return -E2BIG;
    }
    return 0;
}

int match_feed_bytes(const struct match_feed_params *p, uint64_t *bytes, char *err, size_t errlen)
{
    struct feed_spec s;
    int rc = parse_spec(p, &s, err, errlen);
    if (rc)
        return rc;
    uint64_t packets = p->packets;
    if (s.kind == FEED_PCAP || s.kind == FEED_FILE) {
        struct stat st;
        if (stat(s.path, &st)) {
            snprintf(err, errlen, "%s: %s", s.path, strerror(errno));
            return -EINVAL;
        }
        /* A pcap record is at least 16 bytes of header; the columns of the
         * reader (61 bytes a packet) live while the keys are built. */
        uint64_t most = (uint64_t)st.st_size / (s.kind == FEED_PCAP ? 16 : FILE_LINE_MIN) + 1;
        uint64_t pass = packets && packets < most ? packets : most;
        /* pcap: --packets beyond one pass replays it (match_feed_load) */
        uint64_t total = s.kind == FEED_PCAP && packets > pass ? packets : pass;
        *bytes = match_mul_bytes(total, MATCH_FEED_PACKET_BYTES) +
                 (s.kind == FEED_PCAP ? match_mul_bytes(pass, 61) : 0);
        return 0;
    }
    *bytes = match_mul_bytes(packets, MATCH_FEED_PACKET_BYTES) +
             (s.kind == FEED_ZIPF ? match_mul_bytes(s.n, sizeof(double)) : 0);
    return 0;
}

void match_feed_flow_key(struct match_key *k, uint64_t i, int ipv6)
{
    memset(k, 0, sizeof *k);
    k->proto = 6;
    k->dport = 443;
    k->sport = (uint16_t)(1024 + (i >> 24) % 64512);
    if (ipv6) {
        k->ip_version = 6;
        k->src_hi = 0x20010db800000000ull;
        k->src_lo = i;
        k->dst_hi = 0x20010db800000001ull;
        k->dst_lo = 1;
    } else {
        k->ip_version = 4;
        k->src_lo = 0x0a000000u | (i & 0xffffffu);
        k->dst_lo = 0xc0000201u;
    }
}

static int feed_alloc(struct match_feed *f, size_t n)
{
    f->n = n;
    f->keys = bigmem_alloc((n ? n : 1) * sizeof *f->keys);
    f->len = bigmem_alloc((n ? n : 1) * sizeof *f->len);
    f->ts = bigmem_alloc((n ? n : 1) * sizeof *f->ts);
    return f->keys && f->len && f->ts ? 0 : -ENOMEM;
}

/* Repeat the F->n packets of one pass in order until TOTAL, each pass's time
 * stamps later than the last one's by the pass's span and one mean gap (time
 * keeps going forward, as it did when seed 000 replayed its trace). */
static int replay(struct match_feed *f, uint64_t total)
{
    size_t n = f->n;
    f->pass_packets = n;
    if (!n || total <= n)
        return 0;
    struct match_key *keys = bigmem_alloc(total * sizeof *keys);
    uint32_t *len = bigmem_alloc(total * sizeof *len);
    int64_t *ts = bigmem_alloc(total * sizeof *ts);
    if (!keys || !len || !ts) {
        free(keys);
        free(len);
        free(ts);
        return -ENOMEM;
    }
    int64_t lo = f->ts[0], hi = f->ts[0];
    for (size_t i = 1; i < n; i++) {
        lo = f->ts[i] < lo ? f->ts[i] : lo;
        hi = f->ts[i] > hi ? f->ts[i] : hi;
    }
    int64_t gap = n > 1 ? (hi - lo) / (int64_t)(n - 1) : 0;
    int64_t step = hi - lo + (gap > 0 ? gap : 1);
    for (uint64_t i = 0; i < total; i++) {
        uint64_t pass = i / n, j = i % n;
        keys[i] = f->keys[j];
        len[i] = f->len[j];
        ts[i] = f->ts[j] + (int64_t)pass * step;
    }
    free(f->keys);
    free(f->len);
    free(f->ts);
    f->keys = keys;
    f->len = len;
    f->ts = ts;
    f->n = total;
    f->pass_step_ns = step;
    return 0;
}

static int load_pcap(struct match_feed *f, const struct match_feed_params *p, const char *path,
                     char *err, size_t errlen)
{
    pr_reader *r = pr_open(path, err, errlen);
    if (!r)
        return -EINVAL;
    int64_t count = pr_count(r);
    size_t n = (size_t)(count > 0 ? count : 0);
    if (p->packets && p->packets < n)
        n = (size_t)p->packets;
    size_t cap = n ? n : 1;
    pr_columns c = {
        .ts_ns = malloc(cap * sizeof(int64_t)),
        .wire_len = malloc(cap * sizeof(uint32_t)),
        .cap_len = malloc(cap * sizeof(uint32_t)),
        .link_type = malloc(cap * sizeof(uint16_t)),
        .ip_version = malloc(cap),
        .proto = malloc(cap),
        .src_hi = malloc(cap * 8),
        .src_lo = malloc(cap * 8),
        .dst_hi = malloc(cap * 8),
        .dst_lo = malloc(cap * 8),
        .sport = malloc(cap * 2),
        .dport = malloc(cap * 2),
        .tcp_flags = malloc(cap),
    };
    int rc = -ENOMEM;
    if (c.ts_ns && c.wire_len && c.cap_len && c.link_type && c.ip_version && c.proto && c.src_hi &&
        c.src_lo && c.dst_hi && c.dst_lo && c.sport && c.dport && c.tcp_flags &&
        !feed_alloc(f, n)) {
        size_t got = pr_read(r, &c, n), k = 0;
        for (size_t i = 0; i < got; i++) {
            if (!c.ip_version[i]) {
                f->skipped++;
                continue;
            }
            struct match_key *key = &f->keys[k];
            memset(key, 0, sizeof *key);
            key->ip_version = c.ip_version[i];
            key->proto = c.proto[i];
            key->src_hi = c.src_hi[i];
            key->src_lo = c.src_lo[i];
            key->dst_hi = c.dst_hi[i];
            key->dst_lo = c.dst_lo[i];
            key->sport = c.sport[i];
            key->dport = c.dport[i];
            f->len[k] = c.wire_len[i];
            f->ts[k] = c.ts_ns[i];
            k++;
        }
        f->n = k;
        const char *why = pr_problem(r, &f->problem_offset);
        if (why && !(p->packets && got == p->packets)) {
            f->damaged = 1;
            snprintf(f->problem, sizeof f->problem, "%s", why);
        }
        rc = p->packets > f->n ? replay(f, p->packets) : (f->pass_packets = f->n, 0);
    }
    free(c.ts_ns);
    free(c.wire_len);
    free(c.cap_len);
    free(c.link_type);
    free(c.ip_version);
    free(c.proto);
    free(c.src_hi);
    free(c.src_lo);
    free(c.dst_hi);
    free(c.dst_lo);
    free(c.sport);
    free(c.dport);
    free(c.tcp_flags);
    pr_close(r);
    return rc;
}

static int load_file(struct match_feed *f, const struct match_feed_params *p, const char *path,
                     char *err, size_t errlen)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -EINVAL;
    }
    size_t cap = 1024, n = 0;
    if (feed_alloc(f, cap)) {
        fclose(in);
        return -ENOMEM;
    }
    char line[512];
    unsigned long long lineno = 0;
    while (fgets(line, sizeof line, in) && !(p->packets && n == p->packets)) {
        lineno++;
        if (line[0] < '0' || line[0] > '9')
            continue; /* the header */
        unsigned ipv, proto, sport, dport, len;
        unsigned long long sh, sl, dh, dl;
        long long ts;
        if (sscanf(line, "%u,%u,%llu,%llu,%llu,%llu,%u,%u,%u,%lld", &ipv, &proto, &sh, &sl, &dh,
                   &dl, &sport, &dport, &len, &ts) != 10 ||
            (ipv != 4 && ipv != 6) || proto > 255 || sport > 65535 || dport > 65535) {
            snprintf(err, errlen,
                     "%s:%llu: expected ip_version(4|6),proto,src_hi,src_lo,dst_hi,dst_lo,sport,"
                     "dport,len,ts_ns",
                     path, lineno);
            fclose(in);
            return -EINVAL;
        }
        if (n == cap) {
            cap *= 2;
            struct match_key *k = realloc(f->keys, cap * sizeof *k);
            if (k)
                f->keys = k;
            uint32_t *l = realloc(f->len, cap * sizeof *l);
            if (l)
                f->len = l;
            int64_t *t = realloc(f->ts, cap * sizeof *t);
            if (t)
                f->ts = t;
            if (!k || !l || !t) {
                fclose(in);
                return -ENOMEM;
            }
        }
        struct match_key *k = &f->keys[n];
        memset(k, 0, sizeof *k);
        k->ip_version = (uint8_t)ipv;
        k->proto = (uint8_t)proto;
        k->src_hi = sh;
        k->src_lo = sl;
        k->dst_hi = dh;
        k->dst_lo = dl;
        k->sport = (uint16_t)sport;
        k->dport = (uint16_t)dport;
        f->len[n] = len;
        f->ts[n] = ts;
        n++;
    }
    fclose(in);
    f->n = n;
    return 0;
}

/* Keys of N flows that all land in line 0 of P->lines: candidates i = 0, 1, ...
 * in turn (a line is chosen by the hash's bits, so any line is as easy). */
static int search_adversarial(uint64_t *ids, uint64_t n, const struct match_feed_params *p,
                              uint64_t *tries)
{
    struct match_key k;
    uint64_t found = 0, i = 0;
    struct match_mod mod;
    match_mod_init(&mod, p->lines);
    for (; found < n && i < ADVERSARIAL_MAX_TRIES; i++) {
        match_feed_flow_key(&k, i, p->ipv6);
        if (match_line(&mod, match_key_hash(p->ops, p->hash, p->hash_seed, &k)) == 0)
            ids[found++] = i;
    }
    *tries = i;
    return found == n ? 0 : -E2BIG;
}

int match_feed_load(struct match_feed *f, const struct match_feed_params *p, char *err,
                    size_t errlen)
{
    struct feed_spec s;
    memset(f, 0, sizeof *f);
    int rc = parse_spec(p, &s, err, errlen);
    if (rc)
        return rc;
    snprintf(f->kind, sizeof f->kind, "%s", kind_names(s.kind));
    if (s.kind == FEED_PCAP)
        return load_pcap(f, p, s.path, err, errlen);
    if (s.kind == FEED_FILE)
        return load_file(f, p, s.path, err, errlen);

    if (feed_alloc(f, p->packets)) {
        snprintf(err, errlen, "out of memory for %llu packets", (unsigned long long)p->packets);
        return -ENOMEM;
    }
    double *cdf = NULL;
    uint64_t *ids = NULL;
    f->flows = s.kind == FEED_DET ? 1 : s.n;
    if (s.kind == FEED_ZIPF) {
        cdf = malloc(s.n * sizeof *cdf);
        if (!cdf)
            return -ENOMEM;
        double sum = 0;
        for (uint64_t r = 0; r < s.n; r++)
            cdf[r] = sum += pow((double)(r + 1), -s.alpha);
        for (uint64_t r = 0; r < s.n; r++)
            cdf[r] /= sum;
    }
    if (s.kind == FEED_ADVERSARIAL) {
        ids = malloc(s.n * sizeof *ids);
        if (!ids)
            return -ENOMEM;
        if (search_adversarial(ids, s.n, p, &f->tries)) {
            snprintf(err, errlen, "--feed %s: found fewer than %llu keys of one line in %llu tries",
                     p->spec, (unsigned long long)s.n, (unsigned long long)f->tries);
            free(ids);
            return -E2BIG;
        }
    }
    uint64_t rng = rng_seed(p->seed, 0);
    double gap = 1e9 / (p->rate_pps > 0 ? p->rate_pps : 1e7);
    for (size_t j = 0; j < f->n; j++) {
        struct match_key *k = &f->keys[j];
        switch (s.kind) {
        case FEED_UNIFORM:
            match_feed_flow_key(k, rng_next(&rng) % s.n, p->ipv6);
            break;
        case FEED_ZIPF: {
            double u = (double)(rng_next(&rng) >> 11) * 0x1.0p-53;
            uint64_t lo = 0, hi = s.n - 1;
            while (lo < hi) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (cdf[mid] < u)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            match_feed_flow_key(k, lo, p->ipv6);
            break;
        }
        case FEED_NETSCAN:
            match_feed_flow_key(k, 0, p->ipv6);
            if (p->ipv6)
                k->dst_lo = 1 + j % s.n;
            else
                k->dst_lo = 0xc6120000u + (uint32_t)(j % s.n); /* 198.18.0.0/15 onwards */
            k->sport = 40000;
            k->dport = 80;
            break;
        case FEED_PORTSCAN:
            match_feed_flow_key(k, 0, p->ipv6);
            k->sport = 40000;
            k->dport = (uint16_t)(1 + j % s.n);
            break;
        case FEED_ADVERSARIAL:
            match_feed_flow_key(k, ids[j % s.n], p->ipv6);
            break;
        default:
            match_feed_flow_key(k, 0, p->ipv6);
            break;
        }
        f->len[j] = 64;
        f->ts[j] = FEED_T0_NS + (int64_t)((double)j * gap);
    }
    free(cdf);
    free(ids);
    return 0;
}

void match_feed_free(struct match_feed *f)
{
    free(f->keys);
    free(f->len);
    free(f->ts);
    memset(f, 0, sizeof *f);
}

int match_feed_save(const struct match_feed *f, const char *path)
{
    FILE *out = fopen(path, "w");
    if (!out)
        return -errno;
    fputs("ip_version,proto,src_hi,src_lo,dst_hi,dst_lo,sport,dport,len,ts_ns\n", out);
    for (size_t i = 0; i < f->n; i++) {
        const struct match_key *k = &f->keys[i];
        fprintf(out, "%u,%u,%llu,%llu,%llu,%llu,%u,%u,%u,%lld\n", k->ip_version, k->proto,
                (unsigned long long)k->src_hi, (unsigned long long)k->src_lo,
                (unsigned long long)k->dst_hi, (unsigned long long)k->dst_lo, k->sport, k->dport,
                f->len[i], (long long)f->ts[i]);
    }
    return fclose(out) ? -errno : 0;
}
