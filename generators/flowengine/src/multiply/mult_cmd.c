/* mult_cmd.c - `flowengine multiply`: command line, input checks, the two
 * passes over the capture and the plan file. The rewriting is mult.c's. */
#define _POSIX_C_SOURCE 200809L
#include "mult_cmd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "bigmem.h"
#include "halt.h"
#include "mult.h"
#include "mult_args.h"
#include "mult_live.h"
#include "pcapfile.h"
#include "pcapread.h"
#include "sink.h"

/* What the up-front check of the run's duration assumes: at least this many
 * frames and bytes a second out (well below a core's measured rate), so an
 * estimate above --max-seconds is a run that is surely too long. */
#define MULT_EST_PPS 2e6
#define MULT_EST_BPS 100e6
#define MULT_MAX_URLS 65536u

/* The usage text, its choices (--order, --ports) from the tables the parser uses. */
static const char *mult_usage(void)
{
    static char text[1024];
    char order[64], ports[64];
    if (!text[0])
        snprintf(text, sizeof text,
                 "usage: flowengine multiply IN.pcap (-o OUT.pcap | --null) -T N --ranges "
                 "CIDR[,CIDR...]\n"
                 "                           [--seed S] [--order %s] [--ports %s]\n"
                 "                           [--urls FILE] [--mtu N] [--plan PLAN.csv|PLAN.json]\n"
                 "                           [--original CIDR[,CIDR...]] [--max-flows N] "
                 "[--max-seconds N]\n"
                 "                           [--upto-damage] [--summary FILE]\n"
                 "                           [--home CIDR[,CIDR...] --home-ranges CIDR[,CIDR...]]\n"
                 "       flowengine multiply --live IN_IFACE OUT_IFACE DUT_IFACE -T N --ranges "
                 "CIDR[,...] (see --live -h)\n",
                 opt_choice_names(mult_order_choices, "|", order, sizeof order),
                 opt_choice_names(mult_ports_choices, "|", ports, sizeof ports));
    return text;
}

struct mult_opts {
    const char *in, *out, *plan, *urls, *summary;
    const char *ranges, *original, *home, *home_ranges;
    uint64_t copies, seed, mtu, max_flows, max_seconds;
    int order, ports, null, upto_damage;
};

/* ---- URLs ------------------------------------------------------------------------------- */

/* One request target a line; empty lines skipped. */
static int mult_urls_read(const char *path, char ***urls, uint32_t *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return mult_fail("--urls %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned lineno = 0;
    int rc = 0;
    *urls = NULL;
    *n = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!len)
            continue;
        if ((size_t)len > MULT_MAX_URL || strpbrk(line, " \t") || *n >= MULT_MAX_URLS) {
            rc = mult_fail("--urls %s:%u: a request target must be 1..%u bytes without blanks "
                           "(at most %u of them)",
                           path, lineno, MULT_MAX_URL, MULT_MAX_URLS);
            break;
        }
        char **u = realloc(*urls, (*n + 1) * sizeof **urls);
        if (!u || !(u[*n] = strdup(line))) {
            rc = mult_fail("--urls %s: out of memory", path);
            if (u)
                *urls = u;
            break;
        }
        *urls = u;
        (*n)++;
    }
    free(line);
    fclose(f);
    if (!rc && !*n)
        rc = mult_fail("--urls %s: no request target in the file", path);
    return rc;
}

/* ---- the plan file ---------------------------------------------------------------------- */

static void mult_endpoint(FILE *f, int json, int family, const uint8_t *a, uint16_t port)
{
    char s[INET6_ADDRSTRLEN];
    mult_ntop(family, a, s);
    fprintf(f, json ? "\"%s\",%u" : "%s,%u", s, port);
}

/* Every flow with its T shadows: copy 0 is the original. */
static int mult_plan_write(const struct mult *m, const struct mult_opts *o, const char *path)
{
    size_t pl = strlen(o->plan); /* the name asked for: path is its temporary twin */
    int json = pl > 5 && !strcmp(o->plan + pl - 5, ".json");
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    const uint32_t T = (uint32_t)o->copies, n = mult_flow_count(m);
    if (json)
        fprintf(f,
                "{\"format\": \"ntg-multiply-plan/1\", \"seed\": %" PRIu64
                ", \"copies\": %u, \"order\": \"%s\", \"ports\": \"%s\", \"flows\": [\n",
                o->seed, T, o->order == MULT_ORDER_SPFO ? "spfo" : "interleaved",
                o->ports == MULT_PORTS_SHIFT ? "shift" : "keep");
    else
        fputs("flow,copy,family,proto,a_addr,a_port,b_addr,b_port,packets_ab,packets_ba\n", f);
    for (uint32_t i = 0; i < n; i++) {
        struct mult_flow_view v;
        mult_flow_get(m, i, &v);
        if (json) {
            fprintf(f,
                    "%s{\"flow\": %u, \"family\": %u, \"proto\": %u, \"packets\": [%" PRIu64
                    ", %" PRIu64 "], \"copies\": [",
                    i ? ",\n" : "", i, v.family, v.proto, v.packets[0], v.packets[1]);
        }
        for (uint32_t c = 0; c <= T; c++) {
            const uint8_t *a = c ? mult_shadow_addr(m, v.family, v.addr_a, c) : v.addr_a;
            const uint8_t *b = c ? mult_shadow_addr(m, v.family, v.addr_b, c) : v.addr_b;
            uint16_t pa = c ? mult_shadow_port(m, v.proto, v.port_a, v.port_b, c) : v.port_a;
            uint16_t pb = c ? mult_shadow_port(m, v.proto, v.port_b, v.port_a, c) : v.port_b;
            if (!a || !b)
                continue;
            if (json) {
                fputs(c ? ", [" : "[", f);
                mult_endpoint(f, 1, v.family, a, pa);
                fputc(',', f);
                mult_endpoint(f, 1, v.family, b, pb);
                fputc(']', f);
            } else {
                fprintf(f, "%u,%u,%u,%u,", i, c, v.family, v.proto);
                mult_endpoint(f, 0, v.family, a, pa);
                fputc(',', f);
                mult_endpoint(f, 0, v.family, b, pb);
                fprintf(f, ",%" PRIu64 ",%" PRIu64 "\n", v.packets[0], v.packets[1]);
            }
        }
        if (json)
            fputs("]}", f);
    }
    if (json)
        fputs("\n]}\n", f);
    int bad = ferror(f);
    if (fclose(f) || bad)
        return -EIO;
    return 0;
}

static void mult_summary(FILE *f, const struct mult *m, const struct mult_opts *o, double secs,
                         uint64_t damaged_at, const char *damage)
{
    const struct mult_stats *s = mult_stats(m);
    static const char *const why[MULT_PASS_REASONS] = { "not_ip", "truncated",  "routing",
                                                        "auth",   "table_full", "no_range" };
    fprintf(f,
            "{\"packets_in\": %" PRIu64 ", \"packets_out\": %" PRIu64 ", \"rewritten\": %" PRIu64
            ", \"bytes_in\": %" PRIu64 ", \"bytes_out\": %" PRIu64 ", \"copies\": %" PRIu64
            ", \"flows\": %u, \"passthrough\": {",
            s->in, s->out, s->rewritten, s->bytes_in, s->bytes_out, o->copies, mult_flow_count(m));
    for (int i = 0; i < MULT_PASS_REASONS; i++)
        fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", why[i], s->pass[i]);
    fprintf(f,
            "}, \"vlan\": %" PRIu64 ", \"ipv6_ext\": %" PRIu64 ", \"fragments\": %" PRIu64
            ", \"icmp_errors\": %" PRIu64 ", \"url_requests\": %" PRIu64
            ", \"url_too_long\": %" PRIu64 ", \"url_unparsed\": %" PRIu64
            ", \"url_overflow\": %" PRIu64 ", \"bytes_per_flow\": %zu, \"bytes_per_address\": %zu"
            ", \"rewrite_seconds\": %.6f, \"out_pps\": %.0f",
            s->vlan, s->ipv6_ext, s->fragments, s->icmp_errors, s->url_requests, s->url_too_long,
            s->url_unparsed, s->url_overflow, mult_flow_bytes(),
            mult_addr_bytes((uint32_t)o->copies), secs, secs > 0 ? (double)s->out / secs : 0.0);
    if (damage)
        fprintf(f, ", \"damaged_at\": %" PRIu64 ", \"damage\": \"%s\"", damaged_at, damage);
    fputs("}\n", f);
}

/* ---- the command ------------------------------------------------------------------------ */

enum {
    OPT_NULL = 256,
    OPT_UPTO_DAMAGE,
    OPT_PLAN,
    OPT_URLS,
    OPT_SUMMARY,
    OPT_RANGES,
    OPT_ORIGINAL,
    OPT_HOME,
    OPT_HOME_RANGES,
    OPT_SEED,
    OPT_MTU,
    OPT_MAX_FLOWS,
    OPT_MAX_SECONDS,
    OPT_ORDER,
    OPT_PORTS
};

static const struct option mult_options[] = {
    { "help", no_argument, NULL, 'h' },
    { "null", no_argument, NULL, OPT_NULL },
    { "upto-damage", no_argument, NULL, OPT_UPTO_DAMAGE },
    { "plan", required_argument, NULL, OPT_PLAN },
    { "urls", required_argument, NULL, OPT_URLS },
    { "summary", required_argument, NULL, OPT_SUMMARY },
    { "ranges", required_argument, NULL, OPT_RANGES },
    { "original", required_argument, NULL, OPT_ORIGINAL },
    { "home", required_argument, NULL, OPT_HOME },
    { "home-ranges", required_argument, NULL, OPT_HOME_RANGES },
    { "seed", required_argument, NULL, OPT_SEED },
    { "mtu", required_argument, NULL, OPT_MTU },
    { "max-flows", required_argument, NULL, OPT_MAX_FLOWS },
    { "max-seconds", required_argument, NULL, OPT_MAX_SECONDS },
    { "order", required_argument, NULL, OPT_ORDER },
    { "ports", required_argument, NULL, OPT_PORTS },
    { NULL, 0, NULL, 0 }
};

/* argv[0] is "multiply". */
static int mult_args(int argc, char **argv, struct mult_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mtu = 1500;
    o->max_seconds = 3600;
    opterr = 0;
    int c, li, rc;
    char name[32];
    /* "-": the input capture comes back in order as 1; ":": a missing value is ':' */
    while ((li = -1, c = getopt_long(argc, argv, "-:ho:T:", mult_options, &li)) != -1) {
        const char *a = name, *v = optarg;
        uint64_t *num = NULL;
        if (li >= 0)
            snprintf(name, sizeof name, "--%s", mult_options[li].name);
        else if (c == 'T' || c == 'o')
            snprintf(name, sizeof name, "-%c", c);
        else
            a = argv[optind - 1]; /* a missing value's, an unknown option's or the input */
        switch (c) {
        case 'h':
            fputs(mult_usage(), stdout);
            exit(0);
        case OPT_NULL:
            o->null = 1;
            break;
        case OPT_UPTO_DAMAGE:
            o->upto_damage = 1;
            break;
        case 1:
            if (o->in)
                return mult_fail("more than one input capture ('%s')\n%s", v, mult_usage());
            o->in = v;
            break;
        case ':':
            return mult_fail("%s needs a value\n%s", a, mult_usage());
        case 'o':
            o->out = v;
            break;
        case OPT_PLAN:
            o->plan = v;
            break;
        case OPT_URLS:
            o->urls = v;
            break;
        case OPT_SUMMARY:
            o->summary = v;
            break;
        case OPT_RANGES:
            o->ranges = v;
            break;
        case OPT_ORIGINAL:
            o->original = v;
            break;
        case OPT_HOME:
            o->home = v;
            break;
        case OPT_HOME_RANGES:
            o->home_ranges = v;
            break;
        case 'T':
            num = &o->copies;
            break;
        case OPT_SEED:
            num = &o->seed;
            break;
        case OPT_MTU:
            num = &o->mtu;
            break;
        case OPT_MAX_FLOWS:
            num = &o->max_flows;
            break;
        case OPT_MAX_SECONDS:
            num = &o->max_seconds;
            break;
        case OPT_ORDER:
            if ((rc = mult_choice(a, mult_order_choices, v, &o->order)))
                return rc;
            break;
        case OPT_PORTS:
            if ((rc = mult_choice(a, mult_ports_choices, v, &o->ports)))
                return rc;
            break;
        default: /* '?' */
            return mult_fail("unknown option '%s'\n%s", a, mult_usage());
        }
        if (num && mult_u64(v, num))
            return mult_fail("%s: expected a non-negative integer (got '%s')", a, v);
    }
    for (; optind < argc; optind++) { /* after "--": operands only */
        if (o->in)
            return mult_fail("more than one input capture ('%s')\n%s", argv[optind], mult_usage());
        o->in = argv[optind];
    }
    if (!o->in)
        return mult_fail("missing the input capture\n%s", mult_usage());
    if (!o->out == !o->null)
        return mult_fail("give exactly one of -o OUT.pcap and --null");
    if (!o->ranges)
        return mult_fail("missing --ranges (the shadow address ranges, e.g. "
                         "--ranges 198.18.0.0/16,2001:db8:100::/48)");
    if (!o->home != !o->home_ranges || (o->home && (!*o->home || !*o->home_ranges)))
        return mult_fail("give --home (the CIDRs of the original home addresses) together with "
                         "--home-ranges (the shadow ranges of the home side), or neither");
    if (o->copies < 1 || o->copies > MULT_MAX_COPIES)
        return mult_fail("-T %" PRIu64 ": the number of copies must be 1..%u", o->copies,
                         MULT_MAX_COPIES);
    if (o->mtu < 68 || o->mtu > 65535)
        return mult_fail("--mtu %" PRIu64 ": expected 68..65535", o->mtu);
    return 0;
}

static double mult_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The directory part of path, for the free-space check and the temporary file. */
static void mult_dir(const char *path, char *dir, size_t n)
{
    const char *sl = strrchr(path, '/');
    if (!sl)
        snprintf(dir, n, ".");
    else if (sl == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(sl - path), path);
}

/* Pass 1: every packet's flow and addresses, before anything is written. */
static int mult_pass1(struct mult *m, pr_reader *r, const struct mult_opts *o, uint64_t *npk,
                      uint64_t *nbytes, uint32_t *need, uint32_t *maxlen)
{
    pr_packet p;
    *npk = *nbytes = 0;
    while (pr_next(r, &p)) {
        if (p.link_type != 1)
            return mult_fail("%s: packet %" PRIu64 " has link type %u; only Ethernet (1) is "
                             "multiplied",
                             o->in, *npk + 1, p.link_type);
        int rc = mult_scan(m, p.data, p.cap_len, need);
        if (rc == -ENOSPC)
            return mult_fail("%s: more than %" PRIu64 " flows (at packet %" PRIu64 ", byte offset "
                             "%" PRIu64 "): the flow table's bound, %zu bytes a flow and %zu an "
                             "address with T=%" PRIu64 "; raise --max-flows if memory allows",
                             o->in, o->max_flows, *npk + 1, pr_offset(r), mult_flow_bytes(),
                             mult_addr_bytes((uint32_t)o->copies), o->copies);
        if (rc)
            return mult_fail("%s: %s", o->in, strerror(-rc));
        (*npk)++;
        *nbytes += p.cap_len;
        if (p.cap_len > *maxlen)
            *maxlen = p.cap_len;
    }
    return 0;
}

/* The sided plan's room: each side's ranges hold T shadows of each of its addresses. */
static int mult_check_sides(const struct mult *m, const struct mult_opts *o)
{
    for (int fam = 4; fam <= 6; fam += 2)
        for (int home = 0; home < 2; home++) {
            uint64_t need = mult_side_need(m, fam, home), have = mult_side_size(m, fam, home);
            const char *opt = home ? "--home-ranges" : "--ranges";
            if (need > have)
                return mult_fail("%s: the IPv%d ranges hold %" PRIu64 " addresses; T=%" PRIu64
                                 " copies "
                                 "of the %" PRIu64 " original %s addresses need %" PRIu64,
                                 opt, fam, have, o->copies, need / o->copies,
                                 home ? "home (--home)" : "other", need);
        }
    return 0;
}

/* Checks of the input against the plan: shadow ranges vs the originals. */
static int mult_check_plan(struct mult *m, const struct mult_opts *o, const struct mult_range *rg,
                           uint32_t nr, const struct mult_range *og, uint32_t no)
{
    char a[INET6_ADDRSTRLEN], b[64];
    for (uint32_t i = 0; i < mult_flow_count(m); i++) {
        struct mult_flow_view v;
        mult_flow_get(m, i, &v);
        const uint8_t *ep[2] = { v.addr_a, v.addr_b };
        for (int e = 0; e < 2; e++) {
            for (uint32_t k = 0; k < nr; k++)
                if (mult_in_range(&rg[k], v.family, ep[e]))
                    return mult_fail("%s: original address %s lies in the shadow range %s: the "
                                     "original traffic must keep a range of its own",
                                     o->in, mult_ntop(v.family, ep[e], a),
                                     mult_range_str(&rg[k], b));
            int inside = !no;
            for (uint32_t k = 0; k < no; k++)
                inside |= mult_in_range(&og[k], v.family, ep[e]);
            if (!inside)
                return mult_fail("%s: original address %s is outside --original %s", o->in,
                                 mult_ntop(v.family, ep[e], a), o->original);
        }
    }
    if (o->home)
        return mult_check_sides(m, o);
    for (int fam = 4; fam <= 6; fam += 2) {
        uint64_t need = mult_plan_need(m, fam), have = mult_range_size(m, fam);
        if (need && !have)
            return mult_fail("%s: the capture has %" PRIu64 " IPv%d addresses but --ranges has no "
                             "IPv%d range",
                             o->in, need / o->copies, fam, fam);
        if (need > have)
            return mult_fail("--ranges: the IPv%d ranges hold %" PRIu64 " addresses; T=%" PRIu64
                             " copies of %" PRIu64 " original addresses need %" PRIu64,
                             fam, have, o->copies, need / o->copies, need);
    }
    return 0;
}

int mult_cmd(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--live"))
        return mult_live_cmd(argc - 1, argv + 1);
    struct mult_opts o;
    int rc = mult_args(argc, argv, &o);
    if (rc)
        return rc;

    /* rg: --ranges then --home-ranges (nh), all shadow ranges, checked against each other */
    struct mult_range rg[2 * MULT_MAX_RANGES], og[MULT_MAX_RANGES], hg[MULT_MAX_RANGES];
    uint32_t nr = 0, no = 0, nh = 0, nhome = 0;
    char b1[64], b2[64];
    if ((rc = mult_range_list(o.ranges, rg, &nr, "--ranges")))
        return rc;
    if (o.original && (rc = mult_range_list(o.original, og, &no, "--original")))
        return rc;
    if (o.home && ((rc = mult_range_list(o.home, hg, &nhome, "--home")) ||
                   (rc = mult_range_list(o.home_ranges, rg + nr, &nh, "--home-ranges"))))
        return rc;
    for (uint32_t i = 0; i < nr + nh; i++) {
        for (uint32_t j = i + 1; j < nr + nh; j++)
            if (mult_overlap(&rg[i], &rg[j]))
                return mult_fail("%s: %s and %s overlap",
                                 i < nr && j >= nr ? "--ranges and --home-ranges"
                                 : i < nr          ? "--ranges"
                                                   : "--home-ranges",
                                 mult_range_str(&rg[i], b1), mult_range_str(&rg[j], b2));
        for (uint32_t j = 0; j < nhome; j++)
            if (mult_overlap(&rg[i], &hg[j]))
                return mult_fail("%s %s overlaps the home range %s",
                                 i < nr ? "--ranges" : "--home-ranges", mult_range_str(&rg[i], b1),
                                 mult_range_str(&hg[j], b2));
        for (uint32_t j = 0; j < no; j++)
            if (mult_overlap(&rg[i], &og[j]))
                return mult_fail("%s %s overlaps the original range %s",
                                 i < nr ? "--ranges" : "--home-ranges", mult_range_str(&rg[i], b1),
                                 mult_range_str(&og[j], b2));
    }
    char **urls = NULL;
    uint32_t nurls = 0;
    if (o.urls && (rc = mult_urls_read(o.urls, &urls, &nurls)))
        return rc;

    struct stat ist, ost1;
    if (o.out && !stat(o.in, &ist) && !stat(o.out, &ost1) && ist.st_dev == ost1.st_dev &&
        ist.st_ino == ost1.st_ino)
        return mult_fail("-o %s is the input itself; choose another output", o.out);
    char err[512];
    pr_reader *r = pr_open(o.in, err, sizeof err);
    if (!r)
        return mult_fail("%s", err);

    const uint64_t per_flow = mult_flow_bytes() + 2 * mult_addr_bytes((uint32_t)o.copies);
    if (!o.max_flows) { /* half of the available memory */
        uint64_t avail = bigmem_available();
        o.max_flows = avail ? avail / 2 / per_flow : 1000000;
        if (o.max_flows > UINT32_MAX / 4)
            o.max_flows = UINT32_MAX / 4;
    }
    struct mult_params mp = {
        .copies = (uint32_t)o.copies,
        .seed = o.seed,
        .order = o.order,
        .ports = o.ports,
        .ranges = rg,
        .nranges = nr,
        .urls = (const char *const *)urls,
        .nurls = nurls,
        .max_ip_len = (uint32_t)o.mtu,
        .max_flows = (uint32_t)o.max_flows,
        .max_addrs = (uint32_t)(o.max_flows * 2 < UINT32_MAX ? o.max_flows * 2 : UINT32_MAX),
        .home = hg,
        .nhome = nhome,
        .home_ranges = rg + nr,
        .nhome_ranges = nh,
    };
    struct mult *m = NULL;
    uint64_t npk = 0, nbytes = 0, damaged_at = 0;
    uint32_t need = 0, maxlen = 0;
    const char *damage = NULL;
    char *tmp = NULL, *ptmp = NULL;
    struct sink s;
    sink_init(&s);
    uint8_t *scratch = NULL;
    struct mult_frame *fr = NULL;

    if ((rc = mult_create(&m, &mp))) {
        rc = mult_fail("cannot set up the multiplier: %s", strerror(-rc));
        goto out;
    }
    if ((rc = mult_pass1(m, r, &o, &npk, &nbytes, &need, &maxlen)))
        goto out;
    damage = pr_problem(r, &damaged_at);
    if (damage && !o.upto_damage) {
        rc = mult_fail("%s: damaged at byte offset %" PRIu64 " (%s); %" PRIu64 " packets before "
                       "it; nothing written (--upto-damage multiplies those)",
                       o.in, damaged_at, damage, npk);
        goto out;
    }
    if ((rc = mult_check_plan(m, &o, rg, nr + nh, og, no)))
        goto out;
    if (need > o.mtu) {
        rc = mult_fail("--urls: a substituted request would make a %u-byte IP packet, more than "
                       "--mtu %" PRIu64 " holds (the longest request target in %s is too long "
                       "for its packet)",
                       need, o.mtu, o.urls);
        goto out;
    }
    if ((rc = mult_plan(m))) {
        rc = mult_fail("planning the shadow addresses: %s", strerror(-rc));
        goto out;
    }

    /* the egress, said before starting when it cannot fit the disk or a sane time */
    const uint64_t T1 = o.copies + 1;
    const uint64_t out_pk = T1 * npk, out_bytes = 24 + T1 * (nbytes + 16 * npk);
    const double est = (double)out_pk / MULT_EST_PPS > (double)out_bytes / MULT_EST_BPS
                           ? (double)out_pk / MULT_EST_PPS
                           : (double)out_bytes / MULT_EST_BPS;
    if (o.out) {
        char dir[4096];
        struct statvfs vfs;
        mult_dir(o.out, dir, sizeof dir);
        struct stat ost0;
        if ((stat(o.out, &ost0) || S_ISREG(ost0.st_mode)) && !statvfs(dir, &vfs)) {
            uint64_t freeb = (uint64_t)vfs.f_bavail * vfs.f_frsize;
            if (out_bytes > freeb) {
                rc =
                    mult_fail("the output would take %" PRIu64 " bytes (%" PRIu64 " packets x "
                              "%" PRIu64 " = %" PRIu64 " frames) but %s has %" PRIu64 " bytes free",
                              out_bytes, npk, T1, out_pk, dir, freeb);
                goto out;
            }
        }
    }
    if (est > (double)o.max_seconds) {
        rc = mult_fail("%" PRIu64 " packets x %" PRIu64 " = %" PRIu64 " frames, %" PRIu64 " bytes, "
                       "would take about %.0f s at the assumed %.0f frames/s and %.0f MB/s, more "
                       "than --max-seconds %" PRIu64,
                       npk, T1, out_pk, out_bytes, est, MULT_EST_PPS, MULT_EST_BPS / 1e6,
                       o.max_seconds);
        goto out;
    }

    /* pass 2: the rewrite, into a temporary file renamed into place at the end */
    struct stat ost;
    if (o.out && !stat(o.out, &ost) && !S_ISREG(ost.st_mode)) { /* /dev/null, a FIFO: as it is */
        if ((rc = pcapfile_open(&s, o.out))) {
            rc = mult_fail("%s: %s", o.out, strerror(-rc));
            goto out;
        }
    } else if (o.out) {
        size_t n = strlen(o.out) + 32;
        tmp = malloc(n);
        snprintf(tmp, n, "%s.tmp.%ld", o.out, (long)getpid());
        if ((rc = pcapfile_open(&s, tmp))) {
            rc = mult_fail("%s: %s", tmp, strerror(-rc));
            free(tmp);
            tmp = NULL;
            goto out;
        }
    }
    const size_t room_max = mult_room(m, maxlen, SINK_PCAP_REC);
    scratch = o.null ? malloc(room_max) : NULL;
    if (o.out && room_max > s.cap) { /* one ingress frame's T+1 frames always fit the buffer */
        uint8_t *nb = realloc(s.buf, room_max);
        if (!nb) {
            rc = mult_fail("out of memory");
            goto out;
        }
        s.buf = nb;
        s.cap = room_max;
    }
    fr = malloc((o.copies + 1) * sizeof *fr);
    if ((o.null && !scratch) || !fr) {
        rc = mult_fail("out of memory");
        goto out;
    }
    /* SIGINT/SIGTERM (halt.h): the rewrite stops, the temporary files go, nothing is left */
    struct sigaction sa = { 0 };
    sa.sa_handler = halt_request;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pr_rewind(r);
    pr_packet p;
    uint64_t k = 0;
    double t0 = mult_now();
    while (k < npk && !halt_signal && pr_next(r, &p)) {
        size_t room = mult_room(m, p.cap_len, SINK_PCAP_REC);
        uint8_t *dst;
        size_t cap;
        if (o.null) {
            dst = scratch;
            cap = room_max;
        } else {
            if (s.cap - s.used < room && sink_flush(&s))
                break;
            dst = s.buf + s.used;
            cap = s.cap - s.used;
        }
        int nf = mult_packet(m, p.data, p.cap_len, dst, cap, SINK_PCAP_REC, fr);
        if (nf < 0) {
            rc = mult_fail("packet %" PRIu64 ": %s", k + 1, strerror(-nf));
            goto out;
        }
        if (!o.null) {
            const uint32_t sec = (uint32_t)(p.ts_ns / 1000000000),
                           ns = (uint32_t)(p.ts_ns % 1000000000);
            size_t end = 0;
            for (int i = 0; i < nf; i++) {
                uint32_t wire = p.wire_len + fr[i].len - p.cap_len;
                uint32_t rec[4] = { sec, ns, fr[i].len, wire };
                memcpy(dst + fr[i].off - SINK_PCAP_REC, rec, SINK_PCAP_REC);
                end = fr[i].off + fr[i].len;
            }
            s.used += end;
        }
        k++;
    }
    double secs = mult_now() - t0;
    if (halt_signal) {
        fprintf(stderr,
                "flowengine multiply: interrupted at packet %" PRIu64 " of %" PRIu64
                "; nothing written\n",
                k, npk);
        rc = 128 + halt_signal;
        goto out;
    }
    if (o.out) {
        int crc = sink_close(&s);
        if (crc || s.err) {
            rc = 1;
            fprintf(stderr, "flowengine multiply: writing %s: %s\n", tmp ? tmp : o.out,
                    strerror(-(crc ? crc : s.err)));
            goto out;
        }
    }
    if (o.plan) {
        size_t n = strlen(o.plan) + 32;
        ptmp = malloc(n);
        snprintf(ptmp, n, "%s.tmp.%ld", o.plan, (long)getpid());
        if ((rc = mult_plan_write(m, &o, ptmp))) {
            fprintf(stderr, "flowengine multiply: writing %s: %s\n", ptmp, strerror(-rc));
            rc = 1;
            goto out;
        }
    }
    if ((tmp && rename(tmp, o.out)) || (ptmp && rename(ptmp, o.plan))) {
        fprintf(stderr, "flowengine multiply: renaming into place: %s\n", strerror(errno));
        rc = 1;
        goto out;
    }
    free(tmp);
    free(ptmp);
    tmp = ptmp = NULL;
    if (damage)
        fprintf(stderr,
                "flowengine multiply: %s: damaged at byte offset %" PRIu64 " (%s); "
                "multiplied the %" PRIu64 " packets before it\n",
                o.in, damaged_at, damage, npk);
    FILE *sf = o.summary ? fopen(o.summary, "w") : stdout;
    if (!sf) {
        rc = mult_fail("--summary %s: %s", o.summary, strerror(errno));
        goto out;
    }
    mult_summary(sf, m, &o, secs, damaged_at, damage);
    if (sf != stdout)
        fclose(sf);
    rc = 0;
out:
    if (s.ops)
        sink_close(&s);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    if (ptmp) {
        unlink(ptmp);
        free(ptmp);
    }
    free(scratch);
    free(fr);
    mult_free(m);
    pr_close(r);
    for (uint32_t i = 0; i < nurls; i++)
        free(urls[i]);
    free(urls);
    return rc;
}
