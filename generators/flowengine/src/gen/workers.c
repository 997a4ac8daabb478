/* workers.c - the --threads driver (workers.h). */
#define _POSIX_C_SOURCE 200809L
#include "workers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "afpacket.h"
#include "crew.h"
#include "feed.h"
#include "flowlog.h"
#include "halt.h"
#include "loop.h"
#include "merge.h"
#include "mq.h"
#include "pace.h"
#include "pcapfile.h"
#include "stats.h"
#include "summary.h"

/* Cache-line aligned: the worker's loop (written per packet by the worker)
 * never shares a line with the next worker's. */
struct worker {
    _Alignas(64) struct loop e;
    const struct engine_opts *o;
    struct feed feed;
    struct mq mq;
    struct loop_res r;
    const char *what; /* the worker's own failure outside the loop, or NULL */
    int err;          /* ... and its negative errno (0: none shown) */
    pthread_t tid;
    int running; /* created, not joined */
    _Atomic int finished;
    _Alignas(64) char end_pad;
};

/* The main thread's periodic work while the workers run. */
struct housekeeping {
    struct merge_rows rows;
    struct worker *w;
    unsigned n;
    int forwarded; /* the stop signal went to every worker */
    int rows_err;  /* 0, or the negative errno of a failed row write (no more tries) */
};

/* The failure of worker x, NULL if none: the loop's, else its own. */
static const char *worker_failure(const struct worker *x, int pcap, int *err)
{
    const char *what = loop_failure(&x->r, pcap, err);
    if (!what) {
        what = x->what;
        *err = x->err;
    }
    return what;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct loop *e = &w->e;
    const int pcap = w->o->pcap != NULL;
    int rc, err;

    loop_run_worker(e, &w->r);
    crew_leave(w->r.unused, w->r.waiting);
    if (w->r.fail)
        crew_abort();
    rc = sink_close(&e->sink);
    /* -ECANCELED: the queue stopped waiting because another thread failed. */
    if (rc && rc != -ECANCELED && !worker_failure(w, pcap, &err)) {
        w->what = pcap ? "pcap: write error" : "afpacket: send error";
        w->err = pcap ? rc : 0;
    }
    if (stats_end(&e->st) && !worker_failure(w, pcap, &err)) {
        w->what = "statistics: out of memory";
        w->err = 0;
    }
    if (e->flog) {
        /* The rows of the instances still running follow a marker line. */
        rc = fputs("#\n", e->flog) < 0 ? (errno ? -errno : -EIO) : 0;
        if (!rc)
            rc = loop_log_unfinished(e);
        if (!rc && fflush(e->flog))
            rc = errno ? -errno : -EIO;
        if (rc && !worker_failure(w, pcap, &err)) {
            w->what = "--flows: write error";
            w->err = rc;
        }
    }
    if (worker_failure(w, pcap, &err))
        crew_abort();
    atomic_store_explicit(&w->finished, 1, memory_order_release);
    return NULL;
}

/* Rows, and a stop passed on to every worker (a signal interrupts a worker's
 * pacing sleep). */
static void housekeeping(void *ctx)
{
    struct housekeeping *hk = ctx;
    if (halt_signal && !hk->forwarded) {
        hk->forwarded = 1;
        for (unsigned i = 0; i < hk->n; i++)
            if (hk->w[i].running && !atomic_load(&hk->w[i].finished))
                pthread_kill(hk->w[i].tid, halt_signal);
    }
    if (!hk->rows_err)
        hk->rows_err = merge_rows_poll(&hk->rows, 0);
}

static void nap(long ns)
{
    struct timespec ts = { 0, ns };
    nanosleep(&ts, NULL);
}

int workers_run(const struct fe_session *s, const struct engine_opts *o)
{
    const unsigned n = o->threads;
    struct summary sum;
    struct worker *w = aligned_alloc(64, n * sizeof *w);
    struct sink out;
    struct housekeeping hk;
    struct feed *feeds[ENGINE_MAX_THREADS];
    struct mq *queues[ENGINE_MAX_THREADS];
    FILE *flogs[ENGINE_MAX_THREADS];
    FILE *flog = NULL;
    char *flog_buf = NULL;
    const char *what = NULL; /* the first failure, for the message */
    int err = 0, rc;
    double t0 = 0, t1 = 0;
    const int live = afpacket_live(o->tx);
    const struct loop_cfg cfg = { o->max_packets, o->csum_offload,
                                  o->planner == ENGINE_PLANNER_STOCHASTIC };

    memset(&sum, 0, sizeof sum);
    memset(&hk, 0, sizeof hk);
    sink_init(&out);
    sum.seed = o->has_seed ? o->seed : s->seed;
    sum.threads = n;
    sum.sink = afpacket_sink_name(o->tx) ? afpacket_sink_name(o->tx) : o->pcap ? "pcap" : "null";
    sum.status = "completed";
    sum.planner = o->planner == ENGINE_PLANNER_STOCHASTIC ? "stochastic" : "exact";
    crew_init(n, o->max_packets);
    hk.rows.late_col = afpacket_paced(o->tx);
    hk.rows.feed = feeds;
    hk.rows.n = n;
    hk.n = n;
    hk.w = w;
    if (!w) {
        what = "out of memory";
        goto fail_early;
    }
    memset(w, 0, n * sizeof *w);
    for (unsigned i = 0; i < n; i++) {
        struct worker *x = &w[i];
        x->o = o;
        x->r.status = "completed";
        feeds[i] = &x->feed;
        queues[i] = &x->mq;
        if (loop_init(&x->e, s, &cfg, sum.seed, i, n)) {
            what = "out of memory";
            goto fail_early;
        }
        if (feed_init(&x->feed) || (o->pcap && mq_init(&x->mq, &crew.stop))) {
            what = "out of memory";
            goto fail_early;
        }
        if (o->flows && !(x->e.flog = tmpfile())) {
            what = "--flows: cannot create a temporary file";
            err = -errno;
            goto fail_early;
        }
        flogs[i] = x->e.flog;
        stats_init_feed(&x->e.st, &x->feed, hk.rows.late_col);
        if (o->pcap) {
            mq_open_sink(&x->e.sink, &x->mq);
        } else if (sink_open_null(&x->e.sink)) {
            what = "out of memory";
            goto fail_early;
        }
        if (o->txs && o->txs[i]) {
            afpacket_attach(o->txs[i], &x->e.sink, &x->e.st);
            x->e.hold = afpacket_hold;
            x->e.hold_ctx = o->txs[i];
        }
    }
    hk.rows.csv = o->stats ? fopen(o->stats, "w") : stdout;
    if (!hk.rows.csv) {
        fprintf(stderr, "flowengine: --stats %s: cannot open: %s\n", o->stats, strerror(errno));
        goto fail_early_quiet;
    }
    stats_header(hk.rows.csv, hk.rows.late_col);
    if (fflush(hk.rows.csv)) {
        what = "statistics: write error";
        err = -errno;
        goto fail_early;
    }
    if (o->flows) {
        flog = fopen(o->flows, "w");
        if (!flog) {
            fprintf(stderr, "flowengine: --flows %s: cannot open: %s\n", o->flows, strerror(errno));
            goto fail_early_quiet;
        }
        flog_buf = malloc(1 << 20);
        if (flog_buf)
            setvbuf(flog, flog_buf, _IOFBF, 1 << 20);
        if ((rc = flowlog_header(flog, s->nsess > 0))) {
            what = "--flows: write error";
            err = rc;
            goto fail_early;
        }
    }
    if (o->pcap && (rc = pcapfile_open(&out, o->pcap))) {
        fprintf(stderr, "flowengine: %s: cannot open: %s\n", o->pcap, strerror(-rc));
        goto fail_early_quiet;
    }

    t0 = pace_seconds();
    if (o->txs) {
        /* Every worker paces from one common start. */
        uint64_t start = pace_now();
        for (unsigned i = 0; i < n; i++)
            if (o->txs[i])
                afpacket_start(o->txs[i], start);
    }
    for (unsigned i = 0; i < n; i++) {
        rc = pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
        if (rc) {
            what = "cannot start a thread";
            err = -rc;
            crew_abort();
            break;
        }
        w[i].running = 1;
    }
    if (o->pcap && !what) {
        if ((rc = merge_pcap(&out, queues, n, housekeeping, &hk, &crew.stop))) {
            what = "pcap: write error";
            err = rc;
        }
    } else {
        for (;;) {
            int all = 1;
            for (unsigned i = 0; i < n; i++)
                if (w[i].running && !atomic_load_explicit(&w[i].finished, memory_order_acquire))
                    all = 0;
            if (all)
                break;
            housekeeping(&hk);
            nap(1000000);
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (w[i].running) {
            pthread_join(w[i].tid, NULL);
            w[i].running = 0;
        }
    if (o->pcap && (rc = sink_close(&out)) && !what) {
        what = "pcap: write error";
        err = rc;
    }
    t1 = pace_seconds();

    int interrupted = 0, limited = 0;
    for (unsigned i = 0; i < n; i++) {
        struct worker *x = &w[i];
        int xerr;
        const char *xwhat = worker_failure(x, o->pcap != NULL, &xerr);
        if (xwhat && !what) {
            what = xwhat;
            err = xerr;
        }
        interrupted |= !strcmp(x->r.status, "interrupted");
        limited |= !strcmp(x->r.status, "limited");
        sum.packets += x->e.st.t_packets;
        sum.bytes += x->e.st.t_bytes;
        sum.flows_started += x->e.st.t_started;
        sum.flows_finished += x->e.st.t_finished;
        /* Every worker holds each pause: the longest is the run's. */
        uint64_t held = x->e.paused_ns + (o->txs ? afpacket_paused_ns(o->txs[i]) : 0);
        if (held > sum.paused_ns)
            sum.paused_ns = held;
        if (x->r.packets) {
            if (!sum.has_packets || x->r.first_ns < sum.first_ns)
                sum.first_ns = x->r.first_ns;
            if (!sum.has_packets || x->r.last_ns > sum.last_ns)
                sum.last_ns = x->r.last_ns;
            sum.has_packets = 1;
        }
    }
    if (interrupted)
        sum.status = "interrupted";
    else if (limited)
        sum.status = "limited";
    rc = hk.rows_err ? hk.rows_err : merge_rows_poll(&hk.rows, 1);
    if (rc && !what) {
        what = "statistics: write error";
        err = rc;
    }
    if (flog) {
        if ((rc = merge_flowlog(flog, flogs, n)) && !what) {
            what = "--flows: write error";
            err = rc;
        }
        if (fclose(flog) && !what) {
            what = "--flows: write error";
            err = -errno;
        }
        flog = NULL;
    }
    sum.wall_seconds = t1 - t0;
    sum.peak_rss = summary_peak_rss();
    sum.sent = sum.packets;
    sum.sent_bytes = sum.bytes;
    if (live)
        sum.sent = sum.sent_bytes = 0;
    if (o->txs)
        for (unsigned i = 0; i < n; i++)
            afpacket_summary_add(o->txs[i], &sum);
    summary_settle(&sum, what, err);
    goto done;

fail_early:
    summary_perror(what, err);
fail_early_quiet:
    summary_fail(&sum, NULL, 0);
    sink_close(&out);
    if (flog)
        fclose(flog);

done:
    summary_write(&sum, o->summary);
    if (hk.rows.csv && hk.rows.csv != stdout)
        fclose(hk.rows.csv);
    free(flog_buf);
    if (w) {
        for (unsigned i = 0; i < n; i++) {
            struct worker *x = &w[i];
            sink_close(&x->e.sink); /* not started (early failure); a no-op once closed */
            if (x->e.flog)
                fclose(x->e.flog);
            feed_free(&x->feed);
            mq_free(&x->mq);
            loop_free(&x->e);
        }
        free(w);
    }
    return sum.exit_code;
}
