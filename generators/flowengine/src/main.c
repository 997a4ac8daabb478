/* main.c - flowengine: subcommand dispatch and the command line of `gen`. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "afpacket.h"
#include "engine.h"
#include "halt.h"
#include "mult_cmd.h"
#include "match.h"
#include "packet.h"
#include "session.h"
#include "workers.h"

#define FE_VERSION "0.1.0"

static const char usage_text[] =
    "usage: flowengine gen SESSION (-o PCAP | --null | --iface NAME) [--seed N]\n"
    "                      [--summary FILE] [--flows FILE] [--stats FILE] [--max-packets N]\n"
    "                      [--pace realtime|topspeed] [--late-ns N] [--csum-offload]\n"
    "                      [--tx ring|sendmmsg] [--tx-batch N] [--ring-frames N]\n"
    "                      [--no-qdisc-bypass]\n"
    "                      [--planner exact|stochastic] [--threads N] [--start-at NS]\n"
    "       flowengine multiply IN.pcap -o OUT.pcap -T N --ranges CIDR[,...] (see multiply -h)\n"
    "       flowengine multiply --live IN OUT DUT -T N --ranges CIDR[,...] (see multiply --live -h)\n"
    "       flowengine match --struct NAME --size N --feed KIND[:ARGS] ... (match --help)\n"
    "       flowengine version\n";

/* MemAvailable from /proc/meminfo in bytes, 0 when it cannot be read (then no check is made). */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kib = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return (uint64_t)kib * 1024;
}

/* Refuse, before anything is sent, a session whose live instances cannot fit in memory: the
 * pool would otherwise grow until malloc fails in the middle of the run. 0 or -ENOMEM
 * (reported). */
static int check_memory(const struct fe_session *s, const char *name, int planner)
{
    double per = (double)sizeof(struct fe_inst) + 4 + (planner == ENGINE_PLANNER_STOCHASTIC ? 16 : 0);
    double need = (double)s->max_concurrent * per, have = (double)mem_available();
    if (have <= 0 || need <= have)
        return 0;
    fprintf(stderr,
            "flowengine: %s: up to %llu flow instances are alive at once, which needs about "
            "%.1f GiB; only %.1f GiB of memory is available: lower reps or packets, shorten the "
            "period, or space the repetitions (rep_period)\n",
            name, (unsigned long long)s->max_concurrent, need / (1u << 30), have / (1u << 30));
    return -ENOMEM;
}

static int usage(const char *msg, const char *arg)
{
    if (msg)
        fprintf(stderr, "flowengine: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    fputs(usage_text, stderr);
    return 2;
}

static void on_signal(int sig)
{
    halt_request(sig); /* the first signal counts */
}

/* Sleeps until CLOCK_REALTIME reaches at_ns (ns since the epoch); a stop
 * request (SIGINT/SIGTERM) ends the wait. Called after the set-up, so that
 * hosts started together send their first packets together. */
static void wait_until_realtime(uint64_t at_ns)
{
    struct timespec ts = { .tv_sec = (time_t)(at_ns / 1000000000u),
                           .tv_nsec = (long)(at_ns % 1000000000u) };
    while (!atomic_load(&halt_signal) &&
           clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int cmd_gen(int argc, char **argv)
{
    uint64_t start_at = 0;
    struct engine_opts o = { .max_packets = UINT64_MAX, .threads = 1 };
    const char *session = NULL;
    int null_sink = 0;
    /* sendmmsg batches measured faster than the TX ring on veth here (benchmarks/bench_live.py). */
    struct afpacket_opts to = { .pace = -1, .late_ns = 100000, .mode = AFPACKET_TX_SENDMMSG,
                                .qdisc_bypass = 1 };

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--null")) {
            null_sink = 1;
            continue;
        }
        if (!strcmp(a, "--csum-offload")) {
            o.csum_offload = 1;
            continue;
        }
        if (!strcmp(a, "--no-qdisc-bypass")) {
            to.qdisc_bypass = 0;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(a, "-") || a[0] != '-') {
            if (session)
                return usage("more than one SESSION", a);
            session = a;
            continue;
        }
        if (i + 1 >= argc)
            return usage("option needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "-o"))
            dst = &o.pcap;
        else if (!strcmp(a, "--summary"))
            dst = &o.summary;
        else if (!strcmp(a, "--flows"))
            dst = &o.flows;
        else if (!strcmp(a, "--stats"))
            dst = &o.stats;
        else if (!strcmp(a, "--seed")) {
            if (session_parse_u64(v, &o.seed))
                return usage("--seed: expected an integer 0..2^64-1", v);
            o.has_seed = 1;
            continue;
        } else if (!strcmp(a, "--iface")) {
            dst = &to.iface;
        } else if (!strcmp(a, "--pace")) {
            if (!strcmp(v, "realtime"))
                to.pace = PACE_REALTIME;
            else if (!strcmp(v, "topspeed"))
                to.pace = PACE_TOPSPEED;
            else
                return usage("--pace: expected realtime or topspeed", v);
            continue;
        } else if (!strcmp(a, "--tx")) {
            if (!strcmp(v, "ring"))
                to.mode = AFPACKET_TX_RING;
            else if (!strcmp(v, "sendmmsg"))
                to.mode = AFPACKET_TX_SENDMMSG;
            else
                return usage("--tx: expected ring or sendmmsg", v);
            continue;
        } else if (!strcmp(a, "--late-ns") || !strcmp(a, "--tx-batch") ||
                   !strcmp(a, "--ring-frames")) {
            uint64_t n;
            if (session_parse_u64(v, &n) || (a[2] != 'l' && (n < 1 || n > 1000000)))
                return usage(a[2] == 'l' ? "--late-ns: expected a non-negative integer"
                                         : "expected an integer 1..1000000", v);
            if (a[2] == 'l')
                to.late_ns = n;
            else if (a[5] == 'b')
                to.batch = (unsigned)n;
            else
                to.ring_frames = (unsigned)n;
            continue;
        } else if (!strcmp(a, "--planner")) {
            if (!strcmp(v, "exact"))
                o.planner = ENGINE_PLANNER_EXACT;
            else if (!strcmp(v, "stochastic"))
                o.planner = ENGINE_PLANNER_STOCHASTIC;
            else
                return usage("--planner: expected exact or stochastic", v);
            continue;
        } else if (!strcmp(a, "--threads")) {
            uint64_t n;
            if (session_parse_u64(v, &n) || n < 1 || n > ENGINE_MAX_THREADS)
                return usage("--threads: expected an integer 1..256", v);
            o.threads = (unsigned)n;
            continue;
        } else if (!strcmp(a, "--start-at")) {
            if (session_parse_u64(v, &start_at) || start_at == 0)
                return usage("--start-at: expected ns since the epoch (CLOCK_REALTIME)", v);
            continue;
        } else if (!strcmp(a, "--max-packets")) {
            if (session_parse_u64(v, &o.max_packets))
                return usage("--max-packets: expected a non-negative integer", v);
            continue;
        } else {
            return usage("unknown option", a);
        }
        if (*dst)
            return usage("option given twice", a);
        *dst = v;
    }
    if (!session)
        return usage("missing SESSION", NULL);
    if ((o.pcap != NULL) + null_sink + (to.iface != NULL) != 1)
        return usage("give exactly one of -o PCAP, --null and --iface NAME", NULL);
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
    /* A closed stdout or --stats pipe becomes a write error (exit 1), not a
     * silent death without summary. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    struct fe_session s;
    if (session_load(&s, session))
        return 2;
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

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(NULL, NULL);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        puts("flowengine " FE_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "gen"))
        return cmd_gen(argc - 2, argv + 2);
    if (!strcmp(argv[1], "multiply"))
        return mult_cmd(argc - 2, argv + 2);
    if (!strcmp(argv[1], "match"))
        return match_main(argc - 2, argv + 2, mem_available());
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    return usage("unknown subcommand", argv[1]);
}
