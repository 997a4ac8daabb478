/* main.c - flowengine: subcommand dispatch and the command line of `gen`. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "session.h"

#define FE_VERSION "0.1.0"

static const char usage_text[] =
    "usage: flowengine gen SESSION (-o PCAP | --null) [--seed N] [--summary FILE]\n"
    "                      [--flows FILE] [--stats FILE] [--max-packets N]\n"
    "       flowengine version\n";

static int usage(const char *msg, const char *arg)
{
    if (msg)
        fprintf(stderr, "flowengine: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    fputs(usage_text, stderr);
    return 2;
}

static void on_signal(int sig)
{
    if (!engine_signal)
        engine_signal = sig;
}

static int cmd_gen(int argc, char **argv)
{
    struct engine_opts o = { .max_packets = UINT64_MAX };
    const char *session = NULL;
    int null_sink = 0;

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--null")) {
            null_sink = 1;
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
    if (!o.pcap == !null_sink)
        return usage("give exactly one of -o PCAP and --null", NULL);

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

    int rc = engine_run(&s, &o);
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
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage_text, stdout);
        return 0;
    }
    return usage("unknown subcommand", argv[1]);
}
