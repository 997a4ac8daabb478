/* engine.c - the one-thread driver (engine.h). */
#define _POSIX_C_SOURCE 200809L
#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "afpacket.h"
#include "counters.h"
#include "flowlog.h"
#include "loop.h"
#include "pace.h"
#include "pcapfile.h"
#include "stats.h"
#include "summary.h"

int engine_run(const struct fe_session *s, const struct engine_opts *o)
{
    struct loop e;
    struct summary sum;
    struct counters cnt = { 0 };
    const char *what = NULL; /* what failed, for the message */
    int err = 0, rc;
    uint64_t packets = 0, first_ns = 0, last_ns = 0;
    double t0, t1;

    memset(&sum, 0, sizeof sum);
    sum.seed = o->has_seed ? o->seed : s->seed;
    sum.threads = 1;
    sum.sink = afpacket_sink_name(o->tx) ? afpacket_sink_name(o->tx) : o->pcap ? "pcap" : "null";
    sum.status = "completed";
    sum.planner = o->planner == ENGINE_PLANNER_STOCHASTIC ? "stochastic" : "exact";
    const struct loop_cfg cfg = { o->max_packets, o->csum_offload,
                                  o->planner == ENGINE_PLANNER_STOCHASTIC };
    if (loop_init(&e, s, &cfg, sum.seed, 0, 1)) {
        what = "out of memory";
        goto fail_early;
    }

    e.csv = o->stats ? fopen(o->stats, "w") : stdout;
    if (!e.csv) {
        fprintf(stderr, "flowengine: --stats %s: cannot open: %s\n", o->stats, strerror(errno));
        goto fail_early_quiet;
    }
    if (o->flows) {
        e.flog = fopen(o->flows, "w");
        if (!e.flog) {
            fprintf(stderr, "flowengine: --flows %s: cannot open: %s\n", o->flows, strerror(errno));
            goto fail_early_quiet;
        }
        e.flog_buf = malloc(1 << 20);
        if (e.flog_buf)
            setvbuf(e.flog, e.flog_buf, _IOFBF, 1 << 20);
        if ((rc = flowlog_header(e.flog, s->nsess > 0))) {
            what = "--flows: write error";
            err = rc;
            goto fail_early;
        }
    }
    if ((rc = o->pcap ? pcapfile_open(&e.sink, o->pcap) : sink_open_null(&e.sink))) {
        fprintf(stderr, "flowengine: %s: cannot open: %s\n", o->pcap ? o->pcap : "null sink",
                strerror(-rc));
        goto fail_early_quiet;
    }
    if ((rc = stats_init(&e.st, e.csv, afpacket_paced(o->tx)))) {
        what = "statistics: write error";
        err = rc;
        goto fail_early;
    }
    if (o->tx) {
        afpacket_attach(o->tx, &e.sink, &e.st);
        e.hold = afpacket_hold;
        e.hold_ctx = o->tx;
    }
    if (o->counters) {
        if (counters_open(&cnt, o->counters, s->nflows))
            goto fail_early_quiet;
        e.cnt = cnt.line;
        pace_publish(cnt.state);
    }

    t0 = pace_seconds();
    {
        struct loop_res r = { .status = sum.status };
        loop_run(&e, &r);
        what = loop_failure(&r, o->pcap != NULL, &err);
        sum.status = r.status;
        packets = r.packets;
        first_ns = r.first_ns;
        last_ns = r.last_ns;
    }

    /* Closing the pcap (and the live sender's last flush) is part of the
     * measured time; freeing the null sink is not. */
    if ((o->pcap || o->tx) && (rc = sink_close(&e.sink)) && !what) {
        what = o->pcap ? "pcap: write error" : "afpacket: send error";
        err = o->pcap ? rc : 0;
    }
    t1 = pace_seconds();
    if (!o->pcap && !o->tx)
        sink_close(&e.sink);

    if ((rc = stats_end(&e.st)) && !what) {
        what = "statistics: write error";
        err = rc;
    }
    if (e.flog) {
        if ((rc = loop_log_unfinished(&e)) && !what) {
            what = "--flows: write error";
            err = rc;
        }
        if (fclose(e.flog) && !what) {
            what = "--flows: write error";
            err = -errno;
        }
        e.flog = NULL;
    }

    sum.packets = e.st.t_packets;
    sum.bytes = e.st.t_bytes;
    sum.flows_started = e.st.t_started;
    sum.flows_finished = e.st.t_finished;
    sum.has_packets = packets > 0;
    sum.first_ns = first_ns;
    sum.last_ns = last_ns;
    sum.wall_seconds = t1 - t0;
    sum.peak_rss = summary_peak_rss();
    sum.sent = sum.packets;
    sum.sent_bytes = sum.bytes;
    sum.paused_ns = e.paused_ns + afpacket_paused_ns(o->tx);
    afpacket_summary(o->tx, &sum);
    summary_settle(&sum, what, err);
    goto report;

fail_early:
    summary_perror(what, err);
fail_early_quiet:
    summary_fail(&sum, NULL, 0);
    sink_close(&e.sink);
    if (e.flog)
        fclose(e.flog);

report:
    pace_publish(NULL);
    counters_state(&cnt, COUNTERS_FINISHED); /* the lines hold the final counts */
    counters_close(&cnt);
    summary_write(&sum, o->summary);
    if (e.csv && e.csv != stdout)
        fclose(e.csv);
    loop_free(&e);
    return sum.exit_code;
}
