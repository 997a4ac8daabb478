/* gen_cmd.c - `flowengine gen`: the command line (a getopt_long table) and the
 * run (gen_cmd.h). */
#define _POSIX_C_SOURCE 200809L
#include "gen_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "afpacket.h"
#include "bigmem.h"
#include "engine.h"
#include "halt.h"
#include "opt.h"
#include "pace.h"
#include "packet.h"
#include "sess.h"
#include "session.h"
#include "workers.h"

static const struct opt_choice pace_choices[] = { { "realtime", PACE_REALTIME },
                                                  { "topspeed", PACE_TOPSPEED },
                                                  { NULL, 0 } };
static const struct opt_choice tx_choices[] = { { "ring", AFPACKET_TX_RING },
                                                { "sendmmsg", AFPACKET_TX_SENDMMSG },
                                                { NULL, 0 } };
static const struct opt_choice planner_choices[] = { { "exact", ENGINE_PLANNER_EXACT },
                                                     { "stochastic", ENGINE_PLANNER_STOCHASTIC },
                                                     { NULL, 0 } };

/* The long options without a short form: getopt_long returns these. */
enum {
    OPT_NULL = 256,
    OPT_CSUM_OFFLOAD,
    OPT_NO_QDISC_BYPASS,
    OPT_SUMMARY,
    OPT_FLOWS,
    OPT_STATS,
    OPT_SEED,
    OPT_IFACE,
    OPT_PACE,
    OPT_TX,
    OPT_LATE_NS,
    OPT_TX_BATCH,
    OPT_RING_FRAMES,
    OPT_PLANNER,
    OPT_THREADS,
    OPT_START_AT,
    OPT_MAX_PACKETS,
    OPT_COUNTERS
};

static const struct option gen_options[] = {
    { "help", no_argument, NULL, 'h' },
    { "null", no_argument, NULL, OPT_NULL },
    { "csum-offload", no_argument, NULL, OPT_CSUM_OFFLOAD },
    { "no-qdisc-bypass", no_argument, NULL, OPT_NO_QDISC_BYPASS },
    { "summary", required_argument, NULL, OPT_SUMMARY },
    { "flows", required_argument, NULL, OPT_FLOWS },
    { "stats", required_argument, NULL, OPT_STATS },
    { "seed", required_argument, NULL, OPT_SEED },
    { "iface", required_argument, NULL, OPT_IFACE },
    { "pace", required_argument, NULL, OPT_PACE },
    { "tx", required_argument, NULL, OPT_TX },
    { "late-ns", required_argument, NULL, OPT_LATE_NS },
    { "tx-batch", required_argument, NULL, OPT_TX_BATCH },
    { "ring-frames", required_argument, NULL, OPT_RING_FRAMES },
    { "planner", required_argument, NULL, OPT_PLANNER },
    { "threads", required_argument, NULL, OPT_THREADS },
    { "start-at", required_argument, NULL, OPT_START_AT },
    { "max-packets", required_argument, NULL, OPT_MAX_PACKETS },
    { "counters", required_argument, NULL, OPT_COUNTERS },
    { NULL, 0, NULL, 0 }
};
/* "-": non-options come back in order as 1 (the SESSION); ":": a missing value is ':'. */
static const char gen_short[] = "-:ho:";

void gen_usage(FILE *f)
{
    char pace[64], tx[64], planner[64];
    fprintf(
        f,
        "usage: flowengine gen SESSION (-o PCAP | --null | --iface NAME) [--seed N]\n"
        "                      [--summary FILE] [--flows FILE] [--stats FILE] [--max-packets N]\n"
        "                      [--pace %s] [--late-ns N] [--csum-offload]\n"
        "                      [--tx %s] [--tx-batch N] [--ring-frames N]\n"
        "                      [--no-qdisc-bypass]\n"
        "                      [--planner %s] [--threads N] [--start-at NS]\n"
        "                      [--counters FILE]\n"
        "SIGUSR1 pauses the run, SIGUSR2 resumes it.\n",
        opt_choice_names(pace_choices, "|", pace, sizeof pace),
        opt_choice_names(tx_choices, "|", tx, sizeof tx),
        opt_choice_names(planner_choices, "|", planner, sizeof planner));
}

/* Refuse, before anything is sent, a session whose live instances cannot fit in memory: the
 * pool would otherwise grow until malloc fails in the middle of the run. 0 or -ENOMEM
 * (reported). */
static int check_memory(const struct fe_session *s, const char *name, int planner)
{
    double per =
        (double)sizeof(struct fe_inst) + 4 + (planner == ENGINE_PLANNER_STOCHASTIC ? 16 : 0);
    double need = (double)s->max_concurrent * per, have = (double)bigmem_available();
    need += (double)s->sess_concurrent * (double)sizeof(struct sess_state);
    if (have <= 0 || need <= have)
        return 0;
    fprintf(stderr,
            "flowengine: %s: up to %llu flow instances are alive at once, which needs about "
            "%.1f GiB; only %.1f GiB of memory is available: lower reps or packets, shorten the "
            "period, or space the repetitions (rep_period; session lines: reps, arrival)\n",
            name, (unsigned long long)s->max_concurrent, need / (1u << 30), have / (1u << 30));
    return -ENOMEM;
}

static int usage_error(void (*usage)(FILE *f), const char *msg, const char *arg)
{
    fprintf(stderr, "flowengine: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    usage(stderr);
    return 2;
}

/* "--pace: expected realtime or topspeed" from the option's table. */
static int choice_error(void (*usage)(FILE *f), const char *opt, const struct opt_choice *c,
                        const char *arg)
{
    char names[128], msg[192];
    snprintf(msg, sizeof msg, "%s: expected %s", opt, opt_choice_prose(c, names, sizeof names));
    return usage_error(usage, msg, arg);
}

static void on_signal(int sig)
{
    halt_request(sig); /* the first signal counts */
}

static void on_pause_signal(int sig)
{
    pace_pause_request(sig == SIGUSR1);
}

/* Sleeps until CLOCK_REALTIME reaches at_ns (ns since the epoch); a stop
 * request (SIGINT/SIGTERM) ends the wait. Called after the set-up, so that
 * hosts started together send their first packets together. A set-up that
 * ended after at_ns is said on stderr: every packet then goes that late. */
static void wait_until_realtime(uint64_t at_ns)
{
    struct timespec ts = { .tv_sec = (time_t)(at_ns / 1000000000u),
                           .tv_nsec = (long)(at_ns % 1000000000u) };
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    if (now_ns > at_ns + 1000000u)
        fprintf(stderr,
                "flowengine: warning: the set-up ended %.3f s after --start-at; the "
                "schedule starts now, that late\n",
                (double)(now_ns - at_ns) / 1e9);
    while (!atomic_load(&halt_signal) &&
           clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

int gen_cmd(int argc, char **argv, void (*usage)(FILE *f))
{
    uint64_t start_at = 0;
    struct engine_opts o = { .max_packets = UINT64_MAX, .threads = 1 };
    const char *session = NULL;
    int null_sink = 0;
    /* sendmmsg batches measured faster than the TX ring on veth here (benchmarks/bench_live.py). */
    struct afpacket_opts to = {
        .pace = -1, .late_ns = 100000, .mode = AFPACKET_TX_SENDMMSG, .qdisc_bypass = 1
    };

    opterr = 0;
    int c, li;
    while ((li = -1, c = getopt_long(argc, argv, gen_short, gen_options, &li)) != -1) {
        /* the argument in error: a missing value's or an unknown option's is the last one */
        const char *a = argv[optind - 1], *v = optarg;
        const char **dst = NULL;
        uint64_t n;
        switch (c) {
        case 1:
            if (session)
                return usage_error(usage, "more than one SESSION", v);
            session = v;
            continue;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return usage_error(usage, "option needs a value", a);
        case '?':
            return usage_error(usage, "unknown option", a);
        case OPT_NULL:
            null_sink = 1;
            continue;
        case OPT_CSUM_OFFLOAD:
            o.csum_offload = 1;
            continue;
        case OPT_NO_QDISC_BYPASS:
            to.qdisc_bypass = 0;
            continue;
        case 'o':
            dst = &o.pcap;
            break;
        case OPT_SUMMARY:
            dst = &o.summary;
            break;
        case OPT_FLOWS:
            dst = &o.flows;
            break;
        case OPT_STATS:
            dst = &o.stats;
            break;
        case OPT_COUNTERS:
            dst = &o.counters;
            break;
        case OPT_IFACE:
            dst = &to.iface;
            break;
        case OPT_SEED:
            if (session_parse_u64(v, &o.seed))
                return usage_error(usage, "--seed: expected an integer 0..2^64-1", v);
            o.has_seed = 1;
            continue;
        case OPT_PACE:
            if (opt_choice(pace_choices, v, &to.pace))
                return choice_error(usage, "--pace", pace_choices, v);
            continue;
        case OPT_TX:
            if (opt_choice(tx_choices, v, &to.mode))
                return choice_error(usage, "--tx", tx_choices, v);
            continue;
        case OPT_PLANNER:
            if (opt_choice(planner_choices, v, &o.planner))
                return choice_error(usage, "--planner", planner_choices, v);
            continue;
        case OPT_LATE_NS:
            if (session_parse_u64(v, &n))
                return usage_error(usage, "--late-ns: expected a non-negative integer", v);
            to.late_ns = n;
            continue;
        case OPT_TX_BATCH:
        case OPT_RING_FRAMES:
            if (session_parse_u64(v, &n) || n < 1 || n > 1000000)
                return usage_error(usage, "expected an integer 1..1000000", v);
            if (c == OPT_TX_BATCH)
                to.batch = (unsigned)n;
            else
                to.ring_frames = (unsigned)n;
            continue;
        case OPT_THREADS:
            if (session_parse_u64(v, &n) || n < 1 || n > ENGINE_MAX_THREADS)
                return usage_error(usage, "--threads: expected an integer 1..256", v);
            o.threads = (unsigned)n;
            continue;
        case OPT_START_AT:
            if (session_parse_u64(v, &start_at) || start_at == 0)
                return usage_error(usage,
                                   "--start-at: expected ns since the epoch (CLOCK_REALTIME)", v);
            continue;
        case OPT_MAX_PACKETS:
            if (session_parse_u64(v, &o.max_packets))
                return usage_error(usage, "--max-packets: expected a non-negative integer", v);
            continue;
        default:
            return usage_error(usage, "unknown option", a);
        }
        if (*dst) {
            char name[32] = "-o";
            if (li >= 0)
                snprintf(name, sizeof name, "--%s", gen_options[li].name);
            return usage_error(usage, "option given twice", name);
        }
        *dst = v;
    }
    for (; optind < argc; optind++) { /* after "--": operands only */
        if (session)
            return usage_error(usage, "more than one SESSION", argv[optind]);
        session = argv[optind];
    }
    if (!session)
        return usage_error(usage, "missing SESSION", NULL);
    if ((o.pcap != NULL) + null_sink + (to.iface != NULL) != 1)
        return usage_error(usage, "give exactly one of -o PCAP, --null and --iface NAME", NULL);
    if (to.pace < 0)
        to.pace = to.iface ? PACE_REALTIME : PACE_NONE;
    else if (!to.iface && to.pace == PACE_TOPSPEED)
        to.pace = PACE_NONE; /* -o / --null are unpaced anyway */

    /* Installed before the session is read: a stop during a long load still
     * ends with valid (empty) outputs and the right status. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* reads of a piped session just go on */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_pause_signal; /* SIGUSR1 pauses, SIGUSR2 resumes (pace.h) */
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    /* A closed stdout or --stats pipe becomes a write error (exit 1), not a
     * silent death without summary. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    if (o.counters && o.threads > 1)
        return usage_error(usage, "--counters needs --threads 1", NULL);

    struct fe_session s;
    if (session_load(&s, session))
        return 2;
    if (s.nstreams && o.threads > 1) {
        fprintf(stderr,
                "flowengine: --threads %u: %s:%u: stream lines need --threads 1 (the session "
                "has %zu)\n",
                o.threads, strcmp(session, "-") ? session : "<stdin>", s.stream_lineno, s.nstreams);
        usage(stderr);
        session_free(&s);
        return 2;
    }
    if (check_memory(&s, strcmp(session, "-") ? session : "<stdin>", o.planner)) {
        session_free(&s);
        return 2;
    }

    struct afpacket *txs[ENGINE_MAX_THREADS] = { NULL };
    if (to.iface || to.pace != PACE_NONE) {
        /* One live or paced sink (socket, TX ring or batch buffers) per worker. */
        for (unsigned i = 0; i < o.threads; i++)
            if (afpacket_open(&txs[i], &to, &s, strcmp(session, "-") ? session : "<stdin>")) {
                for (unsigned j = 0; j < i; j++)
                    afpacket_free(txs[j]);
                session_free(&s);
                return 2;
            }
        o.tx = txs[0];
        o.txs = txs;
    }

    if (start_at)
        wait_until_realtime(start_at); /* a stop while waiting: the run below ends at once */
    int rc = o.threads > 1 ? workers_run(&s, &o) : engine_run(&s, &o);
    for (unsigned i = 0; i < o.threads; i++)
        afpacket_free(txs[i]);
    session_free(&s);
    return rc;
}
