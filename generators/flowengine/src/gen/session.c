/* session.c - session file parser (format: README.md, "Session file"). */
#define _POSIX_C_SOURCE 200809L
#include "session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csum.h"
#include "dist.h"
#include "sess.h"
#include "sink.h"
#include "stream.h"

/* Last due time the pcap can carry: its seconds field is 32-bit unsigned. */
#define FE_TIME_LIMIT 4294967296000000000ull

enum {
    K_AF,
    K_PROTO,
    K_SMAC,
    K_DMAC,
    K_SRC,
    K_SRC_MODE,
    K_DST,
    K_DST_MODE,
    K_SPORT,
    K_SPORT_MODE,
    K_DPORT,
    K_DPORT_MODE,
    K_START,
    K_PERIOD,
    K_PACKETS,
    K_SIZE,
    K_PAYLOAD,
    K_REPS,
    K_REP_PERIOD,
    K_COUNT
};

static const char *const key_names[K_COUNT] = {
    "af",       "proto", "smac",       "dmac",  "src",        "src_mode", "dst",
    "dst_mode", "sport", "sport_mode", "dport", "dport_mode", "start",    "period",
    "packets",  "size",  "payload",    "reps",  "rep_period",
};

/* The keys of a `stream` line (README, "Stream lines"). */
enum {
    SK_FIRST,
    SK_COUNT_KEY,
    SK_START,
    SK_PERIOD,
    SK_PACKETS,
    SK_BURST,
    SK_BURST_PERIOD,
    SK_SEQ_OFF,
    SK_CSUM_OFF,
    SK_FCS, /* optional: 0 when left out */
    SK_COUNT
};

static const char *const stream_key_names[SK_COUNT] = {
    "first", "count",        "start",   "period",   "packets",
    "burst", "burst_period", "seq_off", "csum_off", "fcs",
};

/* The keys of a `session` line (README, "Session lines"). */
enum {
    XK_AF,
    XK_PROTO,
    XK_CMAC,
    XK_SMAC,
    XK_CLIENT,
    XK_SERVER,
    XK_CLIENT_MODE,
    XK_SERVER_MODE,
    XK_CPORT,
    XK_SPORT,
    XK_CPORT_MODE,
    XK_SPORT_MODE,
    XK_START,
    XK_REPS,
    XK_ARRIVAL,
    XK_RTT,
    XK_GAP,
    XK_MSS,
    XK_WIN,
    XK_ROUNDS,
    XK_REQ,
    XK_RESP,
    XK_CLOSE,
    XK_THINK,  /* optional: 0 when left out */
    XK_LINGER, /* optional: 0 when left out */
    XK_DECK,   /* optional: the line's own index and 0 when left out */
    XK_OPEN,   /* optional: syn (a handshake) when left out */
    XK_COUNT
};

static const char *const sess_key_names[XK_COUNT] = {
    "af",          "proto", "cmac",  "smac",       "client",     "server", "client_mode",
    "server_mode", "cport", "sport", "cport_mode", "sport_mode", "start",  "reps",
    "arrival",     "rtt",   "gap",   "mss",        "win",        "rounds", "req",
    "resp",        "close", "think", "linger",     "deck",       "open",
};

struct parser {
    const char *name;
    unsigned lineno;
};

static int fail(const struct parser *p, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%u: ", p->name, p->lineno);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -EINVAL;
}

/* A value quoted in a message, shortened so a huge payload stays readable. */
static const char *shown(const char *v)
{
    static char buf[96];
    size_t n = strlen(v);
    if (n < 72)
        return v;
    snprintf(buf, sizeof buf, "%.60s...(%zu chars)", v, n);
    return buf;
}

int session_parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_range(const char *s, uint64_t *lo, uint64_t *hi)
{
    char tmp[48];
    const char *dash = strchr(s, '-');
    size_t n = dash ? (size_t)(dash - s) : 0;
    if (!dash || n >= sizeof tmp)
        return -EINVAL;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    return session_parse_u64(tmp, lo) || session_parse_u64(dash + 1, hi) ? -EINVAL : 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -EINVAL;
}

static int parse_mac(const char *s, uint8_t mac[6])
{
    for (int i = 0; i < 6; i++) {
        int h = hexval((unsigned char)s[0]), l = h < 0 ? -1 : hexval((unsigned char)s[1]);
        if (h < 0 || l < 0 || s[2] != (i == 5 ? '\0' : ':'))
            return -EINVAL;
        mac[i] = (uint8_t)(h << 4 | l);
        s += 3;
    }
    return 0;
}

static int parse_mode(const char *s)
{
    if (!strcmp(s, "fixed"))
        return FE_FIXED;
    if (!strcmp(s, "random"))
        return FE_RANDOM;
    if (!strcmp(s, "increment"))
        return FE_INCREMENT;
    return -EINVAL;
}

static int check_addr(const struct parser *p, const char *key, const char *v, int af,
                      uint8_t addr[16], uint8_t *prefix)
{
    char tmp[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(v, '/');
    size_t n = slash ? (size_t)(slash - v) : 0;
    uint64_t pl;
    unsigned maxp = af == 4 ? 32 : 128;

    if (!slash)
        return fail(p, "%s: expected ADDRESS/PREFIX (got %s)", key, shown(v));
    if (n >= sizeof tmp || n == 0)
        return fail(p, "%s: not an IPv%d address (got %s)", key, af, shown(v));
    memcpy(tmp, v, n);
    tmp[n] = 0;
    memset(addr, 0, 16);
    if (inet_pton(af == 4 ? AF_INET : AF_INET6, tmp, addr) != 1)
        return fail(p, "%s: not an IPv%d address, as af=%d requires (got %s)", key, af, af,
                    shown(v));
    if (session_parse_u64(slash + 1, &pl) || pl > maxp)
        return fail(p, "%s: prefix must be 0..%u (got %s)", key, maxp, shown(v));
    *prefix = (uint8_t)pl;
    return 0;
}

static int check_ports(const struct parser *p, const char *key, const char *v, uint16_t *lo,
                       uint16_t *hi)
{
    uint64_t a, b;
    if (parse_range(v, &a, &b))
        return fail(p, "%s: expected LO-HI (got %s)", key, shown(v));
    if (a > 65535 || b > 65535)
        return fail(p, "%s: ports must be 0..65535 (got %s)", key, shown(v));
    if (a > b)
        return fail(p, "%s: LO must not exceed HI (got %s)", key, shown(v));
    *lo = (uint16_t)a;
    *hi = (uint16_t)b;
    return 0;
}

static int check_mode(const struct parser *p, const char *key, const char *v, uint8_t *mode)
{
    int m = parse_mode(v);
    if (m < 0)
        return fail(p, "%s: must be fixed, random or increment (got %s)", key, shown(v));
    *mode = (uint8_t)m;
    return 0;
}

static int check_u64(const struct parser *p, const char *key, const char *v, uint64_t min,
                     uint64_t *out)
{
    if (session_parse_u64(v, out))
        return fail(p, "%s: expected a non-negative integer (got %s)", key, shown(v));
    if (*out < min)
        return fail(p, "%s: must be >= %llu (got %s)", key, (unsigned long long)min, v);
    return 0;
}

static int check_payload(const struct parser *p, const char *v, struct fe_flow *f)
{
    size_t n = strlen(v);
    if (!strcmp(v, "-"))
        return 0;
    if (n == 0 || n % 2)
        return fail(p, "payload: expected - or an even number of hex digits (got %s)", shown(v));
    if (n / 2 > FE_MAX_FRAME)
        return fail(p, "payload: longer than any payload can be (%zu bytes)", n / 2);
    for (size_t i = 0; i < n; i++)
        if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f')))
            return fail(p, "payload: expected lowercase hex (got %s)", shown(v));

    uint32_t len = (uint32_t)(n / 2);
    uint32_t *sum = malloc((len + 1) * sizeof *sum + len);
    if (!sum)
        return fail(p, "payload: out of memory");
    uint8_t *bytes = (uint8_t *)(sum + len + 1);
    for (uint32_t i = 0; i < len; i++)
        bytes[i] = (uint8_t)(hexval(v[2 * i]) << 4 | hexval(v[2 * i + 1]));
    /* Per-length sums so a truncated prefix costs a lookup, not a pass. */
    sum[0] = 0;
    for (uint32_t k = 1; k <= len; k++)
        sum[k] = (k & 1) ? sum[k - 1] + ((uint32_t)bytes[k - 1] << 8)
                         : sum[k - 2] + ((uint32_t)bytes[k - 2] << 8 | bytes[k - 1]);
    f->payload = bytes;
    f->payload_len = len;
    f->payload_sum = sum;
    return 0;
}

/* a * b + c in *out, or -ERANGE past the pcap time limit. */
static int time_muladd(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    if (c >= FE_TIME_LIMIT)
        return -ERANGE;
    if (a && b > (FE_TIME_LIMIT - 1) / a)
        return -ERANGE;
    uint64_t m = a * b;
    if (m > FE_TIME_LIMIT - 1 - c)
        return -ERANGE;
    *out = m + c;
    return 0;
}

static int check_flow(const struct parser *p, char **val, struct fe_flow *f)
{
    uint64_t v, lo, hi;

    if (check_u64(p, "af", val[K_AF], 0, &v))
        return -EINVAL;
    if (v != 4 && v != 6)
        return fail(p, "af: must be 4 or 6 (got %s)", val[K_AF]);
    f->af = (uint8_t)v;

    if (check_u64(p, "proto", val[K_PROTO], 0, &v))
        return -EINVAL;
    if (v != 6 && v != 17 && v != 1 && v != 58)
        return fail(p, "proto: must be 6, 17, 1 or 58 (got %s)", val[K_PROTO]);
    if (v == 1 && f->af != 4)
        return fail(p, "proto: 1 (ICMP) needs af=4 (got 1 with af=%d)", f->af);
    if (v == 58 && f->af != 6)
        return fail(p, "proto: 58 (ICMPv6) needs af=6 (got 58 with af=%d)", f->af);
    f->proto = (uint8_t)v;

    if (parse_mac(val[K_SMAC], f->smac))
        return fail(p, "smac: expected xx:xx:xx:xx:xx:xx (got %s)", shown(val[K_SMAC]));
    if (parse_mac(val[K_DMAC], f->dmac))
        return fail(p, "dmac: expected xx:xx:xx:xx:xx:xx (got %s)", shown(val[K_DMAC]));
    if (check_addr(p, "src", val[K_SRC], f->af, f->src, &f->src_prefix) ||
        check_mode(p, "src_mode", val[K_SRC_MODE], &f->src_mode) ||
        check_addr(p, "dst", val[K_DST], f->af, f->dst, &f->dst_prefix) ||
        check_mode(p, "dst_mode", val[K_DST_MODE], &f->dst_mode) ||
        check_ports(p, "sport", val[K_SPORT], &f->sport_lo, &f->sport_hi) ||
        check_mode(p, "sport_mode", val[K_SPORT_MODE], &f->sport_mode) ||
        check_ports(p, "dport", val[K_DPORT], &f->dport_lo, &f->dport_hi) ||
        check_mode(p, "dport_mode", val[K_DPORT_MODE], &f->dport_mode) ||
        check_u64(p, "start", val[K_START], 0, &f->start) ||
        check_u64(p, "period", val[K_PERIOD], 1, &f->period) ||
        check_u64(p, "packets", val[K_PACKETS], 1, &f->packets) ||
        check_u64(p, "reps", val[K_REPS], 1, &f->reps) ||
        check_u64(p, "rep_period", val[K_REP_PERIOD], 0, &f->rep_period))
        return -EINVAL;

    unsigned ip_len = f->af == 4 ? 20 : 40;
    unsigned l4_len = f->proto == 6 ? 20 : 8;
    f->l4_off = (uint8_t)(FE_ETH_LEN + ip_len);
    f->hdr_len = (uint8_t)(FE_ETH_LEN + ip_len + l4_len);
    if (f->af == 4)
        f->kind = f->proto == 17 ? FE_K4_UDP : f->proto == 6 ? FE_K4_TCP : FE_K4_ICMP;
    else
        f->kind = f->proto == 17 ? FE_K6_UDP : f->proto == 6 ? FE_K6_TCP : FE_K6_ICMP;

    if (parse_range(val[K_SIZE], &lo, &hi))
        return fail(p, "size: expected LO-HI (got %s)", shown(val[K_SIZE]));
    if (lo > hi)
        return fail(p, "size: LO must not exceed HI (got %s)", val[K_SIZE]);
    if (hi > FE_MAX_FRAME - f->hdr_len)
        return fail(p,
                    "size: at most %u payload bytes fit a %u-byte frame with these headers "
                    "(got %s)",
                    FE_MAX_FRAME - f->hdr_len, FE_MAX_FRAME, val[K_SIZE]);
    f->size_lo = (uint32_t)lo;
    f->size_hi = (uint32_t)hi;

    if (check_payload(p, val[K_PAYLOAD], f))
        return -EINVAL;

    uint64_t last;
    if (time_muladd(f->reps - 1, f->rep_period, f->start, &last) ||
        time_muladd(f->packets - 1, f->period, last, &last))
        return fail(p,
                    "start: the last packet (start + (reps-1)*rep_period + "
                    "(packets-1)*period) must be due before 2^32 s, the pcap limit "
                    "(got start=%s reps=%s rep_period=%s packets=%s period=%s)",
                    val[K_START], val[K_REPS], val[K_REP_PERIOD], val[K_PACKETS], val[K_PERIOD]);
    return 0;
}

/* Splits the line in place on blanks; returns the number of tokens. */
static size_t tokenize(char *s, char **tok, size_t max)
{
    size_t n = 0;
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        if (!*s)
            return n;
        if (n == max)
            return max + 1;
        tok[n++] = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r')
            s++;
        if (*s)
            *s++ = 0;
    }
}

/* The KEY=VALUE tokens of a line (tok[1..ntok-1]) into val[] by their index in names[0..count-1]
 * (the tokens are cut at their `=`); -EINVAL with the message for a token without `=`, an unknown
 * key or a key given twice. The one reader of flow, stream and session lines' keys. */
static int split_keys(const struct parser *p, char **tok, size_t ntok, const char *const *names,
                      int count, char **val)
{
    for (size_t i = 1; i < ntok; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq)
            return fail(p, "%s: expected key=value", shown(tok[i]));
        *eq = 0;
        int j;
        for (j = 0; j < count; j++)
            if (!strcmp(tok[i], names[j]))
                break;
        if (j == count)
            return fail(p, "%s: unknown key (got %s=%s)", shown(tok[i]), tok[i], shown(eq + 1));
        if (val[j])
            return fail(p, "%s: given twice", names[j]);
        val[j] = eq + 1;
    }
    return 0;
}

static int parse_flow(const struct parser *p, char **tok, size_t ntok, struct fe_flow *f)
{
    char *val[K_COUNT] = { 0 };

    if (split_keys(p, tok, ntok, key_names, K_COUNT, val))
        return -EINVAL;
    for (int k = 0; k < K_COUNT; k++)
        if (!val[k])
            return fail(p, "%s: missing (every flow line needs all %d keys)", key_names[k],
                        K_COUNT);
    f->lineno = p->lineno;
    return check_flow(p, val, f);
}

/* `-` (STREAM_NONE) or a byte offset below 65535. */
static int check_off(const struct parser *p, const char *key, const char *v, uint32_t *out)
{
    uint64_t n;
    if (!strcmp(v, "-")) {
        *out = STREAM_NONE;
        return 0;
    }
    if (session_parse_u64(v, &n) || n >= FE_MAX_FRAME)
        return fail(p, "%s: expected - or a byte offset 0..%u (got %s)", key, FE_MAX_FRAME - 1,
                    shown(v));
    *out = (uint32_t)n;
    return 0;
}

static int parse_stream(const struct parser *p, char **tok, size_t ntok,
                        const struct stream_frames *fr, struct fe_flow *f)
{
    char *val[SK_COUNT] = { 0 };
    struct stream_keys k;
    char why[512];

    if (split_keys(p, tok, ntok, stream_key_names, SK_COUNT, val))
        return -EINVAL;
    for (int j = 0; j < SK_FCS; j++)
        if (!val[j])
            return fail(p, "%s: missing (every stream line needs these %d keys; fcs is optional)",
                        stream_key_names[j], SK_FCS);
    f->lineno = p->lineno;
    if (!fr)
        return fail(p, "stream: needs a `frames PATH` line before it");
    if (check_u64(p, "first", val[SK_FIRST], 0, &k.first) ||
        check_u64(p, "count", val[SK_COUNT_KEY], 1, &k.count) ||
        check_u64(p, "start", val[SK_START], 0, &k.start) ||
        check_u64(p, "period", val[SK_PERIOD], 0, &k.period) ||
        check_u64(p, "packets", val[SK_PACKETS], 1, &k.packets) ||
        check_u64(p, "burst", val[SK_BURST], 0, &k.burst) ||
        check_u64(p, "burst_period", val[SK_BURST_PERIOD], 0, &k.burst_period) ||
        check_off(p, "seq_off", val[SK_SEQ_OFF], &k.seq_off) ||
        check_off(p, "csum_off", val[SK_CSUM_OFF], &k.csum_off) ||
        check_u64(p, "fcs", val[SK_FCS] ? val[SK_FCS] : "0", 0, &k.fcs))
        return -EINVAL;
    if (stream_line_build(f, &k, fr, why, sizeof why))
        return fail(p, "%s", why);
    return 0;
}

/* ---- dist and session lines (README, "Dist lines", "Session lines") ---- */

/* `dist ID LO-HI:W ...`, the line after `dist` (its own scan: up to 65536
 * bins, far more tokens than other lines). */
static int parse_dist(const struct parser *p, char *rest, struct fe_session *s)
{
    uint64_t id, n = 0, cap = 0;
    uint64_t *lo = NULL, *hi = NULL;
    uint32_t *w = NULL;
    int rc = -EINVAL;
    char *tok = rest, *end;

    while (*tok == ' ' || *tok == '\t' || *tok == '\r')
        tok++;
    for (end = tok; *end && *end != ' ' && *end != '\t' && *end != '\r'; end++)
        ;
    if (*end)
        *end++ = 0;
    if (!*tok)
        return fail(p, "dist: expected `dist ID LO-HI:W ...`");
    if (session_parse_u64(tok, &id) || id > DIST_MAX_ID)
        return fail(p, "dist: ID must be 0..%u (got %s)", DIST_MAX_ID, shown(tok));
    if (!s->dists && !(s->dists = calloc(DIST_MAX_ID + 1, sizeof *s->dists)))
        return fail(p, "out of memory");
    if (s->dists[id])
        return fail(p, "dist: ID %llu defined twice", (unsigned long long)id);
    for (tok = end;;) {
        while (*tok == ' ' || *tok == '\t' || *tok == '\r')
            tok++;
        if (!*tok)
            break;
        for (end = tok; *end && *end != ' ' && *end != '\t' && *end != '\r'; end++)
            ;
        if (*end)
            *end++ = 0;
        if (n == DIST_MAX_BINS) {
            fail(p, "dist %llu: more than %u bins", (unsigned long long)id, DIST_MAX_BINS);
            goto out;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            uint64_t *nlo = realloc(lo, cap * sizeof *lo),
                     *nhi = nlo ? realloc(hi, cap * sizeof *hi) : NULL;
            if (nlo)
                lo = nlo;
            if (nhi)
                hi = nhi;
            uint32_t *nw = nhi ? realloc(w, cap * sizeof *w) : NULL;
            if (!nw) {
                fail(p, "out of memory");
                goto out;
            }
            w = nw;
        }
        char *colon = strchr(tok, ':');
        uint64_t a, b, wt;
        if (!colon) {
            fail(p, "dist %llu: bin %llu: expected LO-HI:W (got %s)", (unsigned long long)id,
                 (unsigned long long)n, shown(tok));
            goto out;
        }
        *colon = 0;
        if (parse_range(tok, &a, &b) || session_parse_u64(colon + 1, &wt)) {
            *colon = ':';
            fail(p, "dist %llu: bin %llu: expected LO-HI:W with unsigned decimals (got %s)",
                 (unsigned long long)id, (unsigned long long)n, shown(tok));
            goto out;
        }
        *colon = ':';
        if (a > b || b > DIST_MAX_VALUE) {
            fail(p, "dist %llu: bin %llu: need LO <= HI < 2^63 (got %s)", (unsigned long long)id,
                 (unsigned long long)n, shown(tok));
            goto out;
        }
        if (wt < 1 || wt > UINT32_MAX) {
            fail(p, "dist %llu: bin %llu: weight must be 1..4294967295 (got %s)",
                 (unsigned long long)id, (unsigned long long)n, shown(tok));
            goto out;
        }
        lo[n] = a;
        hi[n] = b;
        w[n] = (uint32_t)wt;
        n++;
        tok = end;
    }
    if (!n) {
        fail(p, "dist %llu: needs at least one bin LO-HI:W", (unsigned long long)id);
        goto out;
    }
    struct fe_dist *d = calloc(1, sizeof *d);
    if (!d || dist_build(d, (uint32_t)n, lo, hi, w)) {
        free(d);
        fail(p, "out of memory");
        goto out;
    }
    s->dists[id] = d;
    rc = 0;
out:
    free(lo);
    free(hi);
    free(w);
    return rc;
}

/* The dist a `D:ID` or `P:ID` (v) names: defined before; `what` says the
 * forms the key takes. */
static int dist_ref(const struct parser *p, const struct fe_session *s, const char *key,
                    const char *v, const char *what, const struct fe_dist **d)
{
    uint64_t id;
    if (session_parse_u64(v + 2, &id) || id > DIST_MAX_ID)
        return fail(p, "%s: expected %s with ID 0..%u (got %s)", key, what, DIST_MAX_ID, shown(v));
    if (!s->dists || !s->dists[id])
        return fail(p,
                    "%s: dist %llu is not defined (a `dist %llu ...` line must come "
                    "before this line) (got %s)",
                    key, (unsigned long long)id, (unsigned long long)id, shown(v));
    *d = s->dists[id];
    return 0;
}

/* `N` or `D:ID` (a dist defined before). */
static int check_val(const struct parser *p, const struct fe_session *s, const char *key,
                     const char *v, struct sess_val *out)
{
    out->dist = NULL;
    out->fixed = 0;
    if (!strncmp(v, "D:", 2))
        return dist_ref(p, s, key, v, "N or D:ID", &out->dist);
    if (session_parse_u64(v, &out->fixed))
        return fail(p, "%s: expected a non-negative integer or D:ID (got %s)", key, shown(v));
    return 0;
}

/* A session line's address or port mode: fixed, random, increment, D:ID or
 * (ports: deck set) P:ID, a deck: every bin one value, at most DIST_MAX_DECK
 * cards. */
static int check_sess_mode(const struct parser *p, const struct fe_session *s, const char *key,
                           const char *v, int deck, uint8_t *mode, const struct fe_dist **d)
{
    const struct fe_dist *x;
    *d = NULL;
    if (!strncmp(v, "P:", 2)) {
        if (!deck)
            return fail(p, "%s: P:ID (a deck) is for ports only; use D:ID (got %s)", key, shown(v));
        if (dist_ref(p, s, key, v, "P:ID", &x))
            return -EINVAL;
        if (!x->cum) {
            for (uint32_t i = 0; i < x->n; i++)
                if (x->bin[i].span)
                    return fail(p,
                                "%s: P: needs bins of one value (LO-LO:W); bin %u of the dist "
                                "is %llu-%llu (got %s)",
                                key, i, (unsigned long long)x->bin[i].lo,
                                (unsigned long long)(x->bin[i].lo + x->bin[i].span), shown(v));
            return fail(p,
                        "%s: P: needs a deck of at most %u values, the dist's weights sum to "
                        "%llu (got %s)",
                        key, DIST_MAX_DECK, (unsigned long long)x->total, shown(v));
        }
        *mode = FE_DECK;
        *d = x;
        return 0;
    }
    if (strncmp(v, "D:", 2)) {
        int m = parse_mode(v);
        if (m < 0)
            return fail(p, "%s: must be fixed, random, increment or D:ID%s (got %s)", key,
                        deck ? " or P:ID" : "", shown(v));
        *mode = (uint8_t)m;
        return 0;
    }
    if (dist_ref(p, s, key, v, "D:ID", &x))
        return -EINVAL;
    *mode = FE_DIST;
    *d = x;
    return 0;
}

/* A host offset dist must stay inside the prefix: every HI < 2^(host bits). */
static int check_host_dist(const struct parser *p, const char *key, const char *v,
                           const struct fe_dist *d, int af, unsigned prefix)
{
    unsigned bits = (af == 4 ? 32 : 128) - prefix;
    if (!d || bits >= 63 || d->hi < (1ull << bits))
        return 0;
    return fail(p,
                "%s: dist values must be host offsets below 2^%u, inside the prefix (the "
                "dist's largest value is %llu) (got %s)",
                key, bits, (unsigned long long)d->hi, shown(v));
}

/* think or linger (v, NULL: left out, 0): `N` ns, or `D:ID`, a dist of at most
 * SESS_MAX_PAUSES bins of one value each, every value 1 ns .. below 2^32 s
 * (*d; *out 0). The fixed value's range is checked by the caller. */
/* deck=LINE:OFFSET (optional): the line's P: ports are the cards of line
 * LINE's deck (an earlier session line, or this one), from position OFFSET
 * on: the lines of one scenario entry (its protocols, closes, profile steps)
 * deal from one deck, so none of them repeats a card another used. */
static int parse_deck(const struct parser *p, const char *v, size_t index, uint64_t *key,
                      uint64_t *off)
{
    char head[32];
    const char *colon = strchr(v, ':');
    if (!colon || (size_t)(colon - v) >= sizeof head)
        return fail(p, "deck: expected LINE:OFFSET (got %s)", shown(v));
    memcpy(head, v, (size_t)(colon - v));
    head[colon - v] = 0;
    if (session_parse_u64(head, key) || session_parse_u64(colon + 1, off))
        return fail(p, "deck: expected LINE:OFFSET, two unsigned numbers (got %s)", shown(v));
    if (*key > index)
        return fail(p, "deck: LINE must be this line's index (%zu) or an earlier one (got %s)",
                    index, shown(v));
    return 0;
}

static int check_pause(const struct parser *p, const struct fe_session *s, const char *key,
                       const char *v, uint64_t *out, const struct fe_dist **d)
{
    const struct fe_dist *x;
    *d = NULL;
    *out = 0;
    if (!v)
        return 0;
    if (strncmp(v, "D:", 2)) {
        if (session_parse_u64(v, out))
            return fail(p, "%s: expected a non-negative integer or D:ID (got %s)", key, shown(v));
        return 0;
    }
    if (dist_ref(p, s, key, v, "N or D:ID", &x))
        return -EINVAL;
    for (uint32_t i = 0; i < x->n; i++)
        if (x->bin[i].span)
            return fail(p,
                        "%s: D: needs bins of one value (LO-LO:W); bin %u of the dist is "
                        "%llu-%llu (got %s)",
                        key, i, (unsigned long long)x->bin[i].lo,
                        (unsigned long long)(x->bin[i].lo + x->bin[i].span), shown(v));
    if (x->n > SESS_MAX_PAUSES)
        return fail(p,
                    "%s: D: needs a dist of at most %u bins (one FIFO class each), it has %u "
                    "(got %s)",
                    key, SESS_MAX_PAUSES, x->n, shown(v));
    if (x->lo < 1)
        return fail(p, "%s: dist values must be at least 1 ns (the smallest is 0) (got %s)", key,
                    shown(v));
    if (x->hi >= FE_TIME_LIMIT)
        return fail(p,
                    "%s: dist values must be below 2^32 s, the pcap limit (the largest is %llu) "
                    "(got %s)",
                    key, (unsigned long long)x->hi, shown(v));
    *d = x;
    return 0;
}

static int parse_session(const struct parser *p, char **tok, size_t ntok, struct fe_session *s,
                         struct fe_flow *f)
{
    char *val[XK_COUNT] = { 0 };
    struct sess_keys k = { 0 };
    struct sess_line tmp; /* the dists of the modes, until the line is built */
    uint64_t v;
    char why[768];

    if (split_keys(p, tok, ntok, sess_key_names, XK_COUNT, val))
        return -EINVAL;
    for (int j = 0; j < XK_THINK; j++)
        if (!val[j])
            return fail(p,
                        "%s: missing (every session line needs these %d keys; think, linger "
                        "and deck are optional)",
                        sess_key_names[j], XK_THINK);
    f->lineno = p->lineno;

    if (check_u64(p, "af", val[XK_AF], 0, &v))
        return -EINVAL;
    if (v != 4 && v != 6)
        return fail(p, "af: must be 4 or 6 (got %s)", val[XK_AF]);
    f->af = (uint8_t)v;
    if (check_u64(p, "proto", val[XK_PROTO], 0, &v))
        return -EINVAL;
    if (v != 6 && v != 17)
        return fail(p, "proto: must be 6 (TCP) or 17 (UDP) (got %s)", val[XK_PROTO]);
    f->proto = (uint8_t)v;
    if (parse_mac(val[XK_CMAC], f->smac))
        return fail(p, "cmac: expected xx:xx:xx:xx:xx:xx (got %s)", shown(val[XK_CMAC]));
    if (parse_mac(val[XK_SMAC], f->dmac))
        return fail(p, "smac: expected xx:xx:xx:xx:xx:xx (got %s)", shown(val[XK_SMAC]));
    memset(&tmp, 0, sizeof tmp);
    if (check_addr(p, "client", val[XK_CLIENT], f->af, f->src, &f->src_prefix) ||
        check_sess_mode(p, s, "client_mode", val[XK_CLIENT_MODE], 0, &f->src_mode, &tmp.cdist) ||
        check_host_dist(p, "client_mode", val[XK_CLIENT_MODE], tmp.cdist, f->af, f->src_prefix) ||
        check_addr(p, "server", val[XK_SERVER], f->af, f->dst, &f->dst_prefix) ||
        check_sess_mode(p, s, "server_mode", val[XK_SERVER_MODE], 0, &f->dst_mode, &tmp.sdist) ||
        check_host_dist(p, "server_mode", val[XK_SERVER_MODE], tmp.sdist, f->af, f->dst_prefix) ||
        check_ports(p, "cport", val[XK_CPORT], &f->sport_lo, &f->sport_hi) ||
        check_sess_mode(p, s, "cport_mode", val[XK_CPORT_MODE], 1, &f->sport_mode, &tmp.cpdist) ||
        check_ports(p, "sport", val[XK_SPORT], &f->dport_lo, &f->dport_hi) ||
        check_sess_mode(p, s, "sport_mode", val[XK_SPORT_MODE], 1, &f->dport_mode, &tmp.spdist) ||
        check_u64(p, "start", val[XK_START], 0, &f->start) ||
        check_u64(p, "reps", val[XK_REPS], 1, &f->reps) ||
        check_val(p, s, "arrival", val[XK_ARRIVAL], &k.arrival) ||
        check_u64(p, "rtt", val[XK_RTT], 2, &k.h) || check_u64(p, "gap", val[XK_GAP], 1, &k.gap) ||
        check_u64(p, "mss", val[XK_MSS], 1, &k.mss) ||
        check_u64(p, "win", val[XK_WIN], 1, &k.win) ||
        check_val(p, s, "rounds", val[XK_ROUNDS], &k.rounds) ||
        check_val(p, s, "req", val[XK_REQ], &k.req) ||
        check_val(p, s, "resp", val[XK_RESP], &k.resp) ||
        check_pause(p, s, "think", val[XK_THINK], &k.think, &k.think_d) ||
        check_pause(p, s, "linger", val[XK_LINGER], &k.linger, &k.linger_d))
        return -EINVAL;
    if (tmp.cpdist && tmp.cpdist->hi > 65535)
        return fail(p, "cport_mode: dist values must be ports 0..65535 (largest %llu) (got %s)",
                    (unsigned long long)tmp.cpdist->hi, val[XK_CPORT_MODE]);
    if (tmp.spdist && tmp.spdist->hi > 65535)
        return fail(p, "sport_mode: dist values must be ports 0..65535 (largest %llu) (got %s)",
                    (unsigned long long)tmp.spdist->hi, val[XK_SPORT_MODE]);
    if (k.win > 65535)
        return fail(p, "win: must be 1..65535 segments (got %s)", val[XK_WIN]);
    k.deck_key = s->nflows - 1; /* this line's own index (counted in nflows already) */
    k.deck_off = 0;
    if (val[XK_DECK] && parse_deck(p, val[XK_DECK], s->nflows - 1, &k.deck_key, &k.deck_off))
        return -EINVAL;
    if (k.think >= FE_TIME_LIMIT)
        return fail(p, "think: must be below 2^32 s, the pcap limit (got %s)", val[XK_THINK]);
    if (k.linger >= FE_TIME_LIMIT)
        return fail(p, "linger: must be below 2^32 s, the pcap limit (got %s)", val[XK_LINGER]);
    if (!k.rounds.dist && (k.rounds.fixed < 1 || k.rounds.fixed > SESS_MAX_ROUNDS))
        return fail(p, "rounds: must be 1..%u (got %s)", SESS_MAX_ROUNDS, val[XK_ROUNDS]);
    if (k.rounds.dist && k.rounds.dist->hi > SESS_MAX_ROUNDS)
        return fail(p, "rounds: dist values must be at most %u (largest %llu) (got %s)",
                    SESS_MAX_ROUNDS, (unsigned long long)k.rounds.dist->hi, val[XK_ROUNDS]);
    if (!strcmp(val[XK_CLOSE], "fin"))
        k.close_rst = SESS_CLOSE_FIN;
    else if (!strcmp(val[XK_CLOSE], "rst"))
        k.close_rst = SESS_CLOSE_RST;
    else if (!strcmp(val[XK_CLOSE], "none"))
        k.close_rst = SESS_CLOSE_NONE;
    else
        return fail(p, "close: must be fin, rst or none (got %s)", shown(val[XK_CLOSE]));
    k.open_none = val[XK_OPEN] && !strcmp(val[XK_OPEN], "none");
    if (val[XK_OPEN] && !k.open_none && strcmp(val[XK_OPEN], "syn"))
        return fail(p, "open: must be syn or none (got %s)", shown(val[XK_OPEN]));
    k.h /= 2; /* rtt -> h */
    if (sess_line_build(f, &k, why, sizeof why))
        return fail(p, "%s", why);
    f->sess->cdist = tmp.cdist;
    f->sess->sdist = tmp.sdist;
    f->sess->cpdist = tmp.cpdist;
    f->sess->spdist = tmp.spdist;
    return 0;
}

static char *read_all(FILE *fp, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, fp);
        if (n < cap - 1)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    if (!buf || ferror(fp)) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* The session's next line (flow or stream, `what`), its array grown as needed and the line
 * zeroed and counted at once, so session_free sees what the parse gives it; NULL, the error
 * said, for a line with far more tokens than its `nkeys` keys, no memory or too many lines. */
static struct fe_flow *next_line(const struct parser *p, struct fe_session *s, size_t *cap,
                                 const char *what, size_t ntok, int nkeys)
{
    if (ntok > 2 * (size_t)nkeys + 1) {
        fail(p, "%s: far more than the %d key=value pairs", what, nkeys);
        return NULL;
    }
    if (s->nflows == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct fe_flow *nf = realloc(s->flows, ncap * sizeof *nf);
        if (!nf) {
            fail(p, "out of memory");
            return NULL;
        }
        s->flows = nf;
        *cap = ncap;
    }
    if (s->nflows >= 0x7fffffffu) {
        fail(p, "%s: too many lines", what);
        return NULL;
    }
    struct fe_flow *f = &s->flows[s->nflows];
    memset(f, 0, sizeof *f);
    s->nflows++;
    return f;
}

int session_load(struct fe_session *s, const char *path)
{
    struct parser p = { strcmp(path, "-") ? path : "<stdin>", 0 };
    FILE *fp = strcmp(path, "-") ? fopen(path, "r") : stdin;
    size_t len = 0, cap = 0;
    char *text;
    int seen_seed = 0, rc = -EINVAL;

    memset(s, 0, sizeof *s);
    if (!fp) {
        rc = -errno;
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(-rc));
        return rc;
    }
    text = read_all(fp, &len);
    if (fp != stdin)
        fclose(fp);
    if (!text) {
        rc = errno ? -errno : -ENOMEM;
        fprintf(stderr, "%s: cannot read: %s\n", p.name, strerror(-rc));
        return rc;
    }

    char *line = text, *end = text + len;
    while (line < end || p.lineno == 0) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *next = nl ? nl + 1 : end;
        if (nl)
            *nl = 0;
        p.lineno++;
        if (strlen(line) != (size_t)((nl ? nl : end) - line)) {
            fail(&p, "NUL byte in the line");
            goto out;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        if (p.lineno > 1 && !strncmp(line + strspn(line, " \t\r"), "dist", 4) &&
            strchr(" \t\r", line[strspn(line, " \t\r") + 4])) {
            /* Its own scan (up to 65536 bins); a bare `dist` ends at NUL. */
            char *rest = line + strspn(line, " \t\r") + 4;
            line = next;
            if (parse_dist(&p, rest, s))
                goto out;
            continue;
        }

        /* Room for more than the keys, so extra ones are named in the error. */
        char *tok[2 * K_COUNT + 2];
        size_t ntok = tokenize(line, tok, 2 * K_COUNT + 1);
        line = next;

        if (p.lineno == 1) {
            if (ntok != 2 || strcmp(tok[0], "ntg-session") != 0) {
                fail(&p, "the first line must be 'ntg-session 1'");
                goto out;
            }
            if (strcmp(tok[1], "1") != 0) {
                fail(&p, "ntg-session: unsupported version (got %s)", shown(tok[1]));
                goto out;
            }
            continue;
        }
        if (ntok == 0)
            continue;
        if (!strcmp(tok[0], "seed")) {
            if (ntok != 2) {
                fail(&p, "seed: expected one value");
                goto out;
            }
            if (seen_seed) {
                fail(&p, "seed: given twice");
                goto out;
            }
            if (check_u64(&p, "seed", tok[1], 0, &s->seed))
                goto out;
            seen_seed = 1;
        } else if (!strcmp(tok[0], "flow")) {
            struct fe_flow *f = next_line(&p, s, &cap, "flow", ntok, K_COUNT);
            if (!f)
                goto out;
            if (parse_flow(&p, tok, ntok, f))
                goto out;
            if (f->reps > UINT64_MAX - s->instances) {
                fail(&p, "reps: the session has more than 2^64 flow instances (got %llu)",
                     (unsigned long long)f->reps);
                goto out;
            }
            f->offset = s->instances;
            s->instances += f->reps;

            uint64_t conc = f->reps;
            if (f->rep_period && f->reps > 1) {
                uint64_t span = (f->packets - 1) * f->period; /* checked above */
                if (span / f->rep_period + 1 < conc)
                    conc = span / f->rep_period + 1;
            }
            f->max_live = conc;
            s->max_concurrent =
                conc > UINT64_MAX - s->max_concurrent ? UINT64_MAX : s->max_concurrent + conc;
        } else if (!strcmp(tok[0], "session")) {
            if (ntok > 2 * K_COUNT + 1) {
                fail(&p, "session: far more than the %d key=value pairs", XK_COUNT);
                goto out;
            }
            struct fe_flow *f = next_line(&p, s, &cap, "session", ntok, XK_COUNT);
            if (!f)
                goto out;
            if (parse_session(&p, tok, ntok, s, f))
                goto out;
            if (f->reps > UINT64_MAX - s->instances) {
                fail(&p, "reps: the session has more than 2^64 flow instances (got %llu)",
                     (unsigned long long)f->reps);
                goto out;
            }
            f->offset = s->instances;
            s->instances += f->reps;
            s->nsess++;
            s->max_concurrent = f->max_live > UINT64_MAX - s->max_concurrent
                                    ? UINT64_MAX
                                    : s->max_concurrent + f->max_live;
            s->sess_concurrent = f->max_live > UINT64_MAX - s->sess_concurrent
                                     ? UINT64_MAX
                                     : s->sess_concurrent + f->max_live;
        } else if (!strcmp(tok[0], "frames")) {
            char why[512];
            if (ntok != 2) {
                fail(&p, "frames: expected one PATH (without blanks or #)");
                goto out;
            }
            if (s->frames) {
                fail(&p, "frames: given twice");
                goto out;
            }
            s->frames = calloc(1, sizeof *s->frames);
            if (!s->frames) {
                fail(&p, "out of memory");
                goto out;
            }
            if (stream_frames_load(s->frames, tok[1], why, sizeof why)) {
                fail(&p, "frames: %s", why);
                goto out;
            }
        } else if (!strcmp(tok[0], "stream")) {
            struct fe_flow *f = next_line(&p, s, &cap, "stream", ntok, SK_COUNT);
            if (!f)
                goto out;
            if (parse_stream(&p, tok, ntok, s->frames, f))
                goto out;
            if (s->instances == UINT64_MAX) {
                fail(&p, "stream: the session has more than 2^64 flow instances");
                goto out;
            }
            f->offset = s->instances++;
            if (!s->nstreams++)
                s->stream_lineno = p.lineno;
            if (s->max_concurrent < UINT64_MAX)
                s->max_concurrent++;
        } else {
            fail(&p,
                 "%s: unknown directive (expected seed, flow, frames or stream) (two-way "
                 "sessions: dist, session)",
                 shown(tok[0]));
            goto out;
        }
    }
    rc = 0;
out:
    free(text);
    if (rc)
        session_free(s);
    return rc;
}

void session_free(struct fe_session *s)
{
    for (size_t i = 0; i < s->nflows; i++) {
        free((void *)s->flows[i].payload_sum);
        stream_line_free(s->flows[i].stream);
        sess_line_free(s->flows[i].sess);
    }
    free(s->flows);
    if (s->dists) {
        for (size_t i = 0; i <= DIST_MAX_ID; i++)
            if (s->dists[i]) {
                dist_free(s->dists[i]);
                free(s->dists[i]);
            }
        free(s->dists);
    }
    if (s->frames) {
        stream_frames_free(s->frames);
        free(s->frames);
    }
    memset(s, 0, sizeof *s);
}
