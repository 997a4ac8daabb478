/* engine.c - the generation loop. */
#define _POSIX_C_SOURCE 200809L
#include "engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "afpacket.h"
#include "offload.h"
#include "bigmem.h"
#include "dtree.h"
#include "packet.h"
#include "pcapout.h"
#include "sched.h"
#include "stats.h"

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

#define POOL_NONE UINT32_MAX
/* Upfront pool size cap; malloc'd pages cost nothing until touched. */
#define POOL_INITIAL_MAX (1u << 25)
#define POOL_MAX 0x7fffffffu /* ids stay below SCHED_NONE and fit the tree's 32 bits */

volatile sig_atomic_t engine_signal;

struct engine {
    struct fe_flow *flows;       /* a copy: next_rep changes */
    struct fe_inst *pool;
    uint32_t pool_cap, pool_used, free_head;
    struct sched sched;
    /* Stochastic planner: fast instances in the Distribution Tree, their
     * clock (ns plus a fraction in units of 1/total ns) and its stream. */
    struct dtree tree;
    uint32_t *weight;            /* per line: pps weight in the tree, 0: slow (calendar) */
    uint64_t tclock, tfrac, tq, tr, trng;
    struct sink sink;
    struct stats st;
    FILE *csv, *flog;
    char *flog_buf;
};

static struct fe_inst *pool_alloc(uint32_t cap)
{
    return big_alloc((size_t)cap * sizeof(struct fe_inst));
}

/* Only grows when more instances are alive at once than ever before, so the
 * steady state allocates nothing. */
static uint32_t pool_get(struct engine *e)
{
    if (e->free_head != POOL_NONE) {
        uint32_t id = e->free_head;
        e->free_head = e->pool[id].flow;
        return id;
    }
    if (e->pool_used == e->pool_cap) {
        if (e->pool_cap >= POOL_MAX)
            return POOL_NONE;
        uint32_t ncap = e->pool_cap > POOL_MAX / 2 ? POOL_MAX : e->pool_cap * 2;
        struct fe_inst *np = pool_alloc(ncap);
        if (!np)
            return POOL_NONE;
        memcpy(np, e->pool, (size_t)e->pool_used * sizeof *np);
        free(e->pool);
        e->pool = np;
        e->pool_cap = ncap;
    }
    return e->pool_used++;
}

static void pool_put(struct engine *e, uint32_t id)
{
    e->pool[id].flow = e->free_head;
    e->free_head = id;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* qsort has no context argument in C11. */
static const struct engine *sort_engine;

static int cmp_serial(const void *a, const void *b)
{
    const struct fe_inst *pool = sort_engine->pool;
    uint64_t x = pool[*(const uint32_t *)a].serial, y = pool[*(const uint32_t *)b].serial;
    return x < y ? -1 : x > y;
}

/* A flow log row. Instances of the stochastic planner's tree carry the due
 * time of their last packet in `due`; first_ns is then their start. */
static int log_inst(struct engine *e, const struct fe_inst *in)
{
    const struct fe_flow *f = &e->flows[in->flow];
    if (e->weight && e->weight[in->flow] && in->sent)
        return flowlog_row_at(e->flog, f, in,
                              f->start + (in->serial - f->offset) * f->rep_period, in->due);
    return flowlog_row(e->flog, f, in);
}

/* The tree's gap between two packets, 10^9 / total ns, as quotient and remainder. */
static void tree_rate(struct engine *e)
{
    uint64_t t = e->tree.total;
    e->tq = t ? 1000000000u / t : 0;
    e->tr = t ? 1000000000u % t : 0;
    e->tfrac = 0;
}

static uint64_t peak_rss(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char buf[256];
    uint64_t kb = 0;
    if (!fp)
        return 0;
    while (fgets(buf, sizeof buf, fp))
        if (!strncmp(buf, "VmHWM:", 6)) {
            kb = strtoull(buf + 6, NULL, 10);
            break;
        }
    fclose(fp);
    return kb * 1024;
}

/* Rows of the instances still running at a stop, in serial order. */
static int flowlog_unfinished(struct engine *e)
{
    const struct sched *s = &e->sched;
    size_t n = 0;
    uint32_t *ids = malloc((s->queued + e->tree.n + 1) * sizeof *ids);
    int rc = 0;
    if (!ids)
        return -1;
    for (uint32_t c = 0; c < s->nclasses; c++) {
        const struct sched_fifo *f = &s->fifo[c];
        for (uint32_t i = 0; i < f->len; i++)
            ids[n++] = f->q[(f->head + i) & f->mask];
    }
    for (uint32_t i = 0; i < e->tree.n; i++)
        ids[n++] = dtree_id(&e->tree, e->tree.n - 1 + i);
    sort_engine = e;
    qsort(ids, n, sizeof *ids, cmp_serial);
    for (size_t i = 0; i < n && !rc; i++)
        rc = log_inst(e, &e->pool[ids[i]]);
    free(ids);
    return rc;
}

/* Period classes: flows that share a period share a FIFO (sched.h). */
static int assign_classes(struct engine *e, size_t nflows, uint32_t *nclasses,
                          uint32_t **init_cap)
{
    uint64_t *periods = malloc((nflows ? nflows : 1) * sizeof *periods);
    uint32_t n = 0;
    if (!periods)
        return -1;
    for (size_t k = 0; k < nflows; k++)
        periods[k] = e->flows[k].period;
    qsort(periods, nflows, sizeof *periods, cmp_u64);
    for (size_t k = 0; k < nflows; k++)
        if (!n || periods[n - 1] != periods[k])
            periods[n++] = periods[k];
    *init_cap = calloc(n ? n : 1, sizeof **init_cap);
    if (!*init_cap) {
        free(periods);
        return -1;
    }
    for (size_t k = 0; k < nflows; k++) {
        struct fe_flow *f = &e->flows[k];
        uint32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (periods[mid] < f->period)
                lo = mid + 1;
            else
                hi = mid;
        }
        f->klass = lo;
        uint64_t c = (*init_cap)[lo] + f->max_live;
        (*init_cap)[lo] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
    }
    free(periods);
    *nclasses = n;
    return 0;
}

static FILE *open_out(const char *path, const char *what)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        fprintf(stderr, "flowengine: %s %s: cannot open: %s\n", what, path, strerror(errno));
    return fp;
}

int engine_run(const struct fe_session *s, const struct engine_opts *o)
{
    struct engine e;
    struct summary sum;
    const char *err = NULL;   /* what failed, for the message */
    int err_no = 0;
    uint64_t packets = 0, first_ns = 0, last_ns = 0;
    double t0, t1;

    memset(&e, 0, sizeof e);
    memset(&sum, 0, sizeof sum);
    e.free_head = POOL_NONE;
    e.sink.fd = -1;
    sum.seed = o->has_seed ? o->seed : s->seed;
    sum.sink = txhook_sink_name(o->hook) ? txhook_sink_name(o->hook) : o->pcap ? "pcap" : "null";
    const char *sink_err = o->pcap ? "pcap: write error" : "afpacket: send error";
    sum.status = "completed";

    e.flows = malloc((s->nflows ? s->nflows : 1) * sizeof *e.flows);
    uint64_t cap = s->max_concurrent < POOL_INITIAL_MAX ? s->max_concurrent : POOL_INITIAL_MAX;
    e.pool_cap = cap ? (uint32_t)cap : 1;
    e.pool = pool_alloc(e.pool_cap);
    if (!e.flows || !e.pool) {
        err = "out of memory";
        goto fail_early;
    }
    if (s->nflows)
        memcpy(e.flows, s->flows, s->nflows * sizeof *e.flows);
    uint32_t nclasses, *init_cap = NULL;
    for (size_t k = 0; k < s->nflows; k++)
        packet_prepare(&e.flows[k]);
    sum.planner = o->planner == ENGINE_PLANNER_STOCHASTIC ? "stochastic" : "exact";
    if (o->planner == ENGINE_PLANNER_STOCHASTIC) {
        /* Flows of at least 1 pps and more than one packet go to the tree,
         * weighted by their intensity rounded to pps; the others to the
         * slow-flow calendar (the exact planner's structures). */
        e.weight = calloc(s->nflows ? s->nflows : 1, sizeof *e.weight);
        if (!e.weight || dtree_init(&e.tree, (uint32_t)cap)) {
            err = "out of memory";
            goto fail_early;
        }
        for (size_t k = 0; k < s->nflows; k++)
            if (e.flows[k].packets > 1 && e.flows[k].period <= 1000000000u)
                e.weight[k] = (uint32_t)((1000000000u + e.flows[k].period / 2) /
                                         e.flows[k].period);
        e.trng = rng_mix(sum.seed ^ 0x6a09e667f3bcc909ull);
    }
    if (assign_classes(&e, s->nflows, &nclasses, &init_cap) ||
        sched_init(&e.sched, nclasses, init_cap, (uint32_t)s->nflows)) {
        free(init_cap);
        err = "out of memory";
        goto fail_early;
    }
    free(init_cap);

    e.csv = o->stats ? open_out(o->stats, "--stats") : stdout;
    if (!e.csv)
        goto fail_early_quiet;
    if (o->flows) {
        e.flog = open_out(o->flows, "--flows");
        if (!e.flog)
            goto fail_early_quiet;
        e.flog_buf = malloc(1 << 20);
        if (e.flog_buf)
            setvbuf(e.flog, e.flog_buf, _IOFBF, 1 << 20);
        if (flowlog_header(e.flog)) {
            err = "--flows: write error";
            err_no = errno;
            goto fail_early;
        }
    }
    if (o->pcap ? sink_open_pcap(&e.sink, o->pcap) : sink_open_null(&e.sink)) {
        fprintf(stderr, "flowengine: %s: cannot open: %s\n", o->pcap ? o->pcap : "null sink",
                strerror(e.sink.error ? e.sink.error : ENOMEM));
        goto fail_early_quiet;
    }
    if (stats_init(&e.st, e.csv, txhook_paced(o->hook))) {
        err = "statistics: write error";
        err_no = errno;
        goto fail_early;
    }
    if (o->hook)
        txhook_attach(o->hook, &e.sink, &e.st);

    for (size_t k = 0; k < s->nflows; k++) {
        e.flows[k].next_rep = 0;
        sched_insert(&e.sched, nclasses + (uint32_t)k, e.flows[k].start, e.flows[k].offset);
    }

    t0 = now_seconds();
    const uint64_t seed = sum.seed, max_packets = o->max_packets;
    struct fe_flow *const flows = e.flows;
    const uint32_t ncls = e.sched.nclasses;
    const int stoch = o->planner == ENGINE_PLANNER_STOCHASTIC;
    for (;;) {
        uint32_t src = sched_min(&e.sched), id, pos = 0;
        int from_tree = stoch && e.tree.n &&
                        (src == SCHED_NONE || e.tclock < e.sched.node[src].due);
        if (src == SCHED_NONE && !from_tree)
            break;
        if (engine_signal) {
            sum.status = "interrupted";
            break;
        }
        if (packets >= max_packets) {
            sum.status = "limited";
            break;
        }

        const uint64_t due = from_tree ? e.tclock : e.sched.node[src].due;
        struct fe_inst *in;
        struct fe_flow *f;

        if (due >= e.st.sec_end && stats_advance(&e.st, due)) {
            err = "statistics: write error";
            err_no = errno;
            break;
        }

        if (from_tree) {
            /* Stochastic: the next tree packet, from a flow picked with
             * probability proportional to its intensity. */
            pos = dtree_pick(&e.tree, rng_next(&e.trng) % e.tree.total);
            id = dtree_id(&e.tree, pos);
            in = &e.pool[id];
            f = &flows[in->flow];
        } else if (src >= ncls) {
            /* A flow line spawns its next repetition, which sends its packet 0
             * right now (same key) and then joins its period's FIFO. */
            uint32_t k = src - ncls;
            f = &flows[k];
            id = pool_get(&e);
            if (id == POOL_NONE) {
                err = "out of memory (flow instances)";
                break;
            }
            uint64_t rep = f->next_rep++;
            in = &e.pool[id];
            packet_activate(in, f, k, rep, f->offset + rep, seed);
            e.st.started++;
            sched_pop(&e.sched);
            if (f->next_rep < f->reps)
                sched_insert(&e.sched, src, f->start + f->next_rep * f->rep_period,
                             f->offset + f->next_rep);
            if (stoch && e.weight[k]) {
                /* FLOR's "immediate" insertion: the tree's next packet (of
                 * any of its flows) is due now, the following ones at the
                 * new aggregate rate. */
                if (dtree_insert(&e.tree, id, e.weight[k])) {
                    err = "out of memory (distribution tree)";
                    break;
                }
                tree_rate(&e);
                e.tclock = due;
                continue;
            }
        } else {
            const struct sched_fifo *q = &e.sched.fifo[src];
            id = q->q[q->head];
            /* With many classes this one comes back only after the others
             * had their turn: fetch what a later visit needs now (the
             * instance that keys the class a few visits on, FIFO slots
             * further on), so neither misses then; measured best at +5. */
            if (q->len > 5) {
                const char *p = (const char *)&e.pool[q->q[(q->head + 5) & q->mask]];
                PREFETCH(p);
                PREFETCH(p + sizeof(struct fe_inst) - 1);
            }
            PREFETCH(&q->q[(q->head + 32) & q->mask]);
            sched_pop(&e.sched);
            sched_fifo_pop(&e.sched, src);
            in = &e.pool[id];
            f = &flows[in->flow];
        }

        uint32_t plen = packet_payload_len(f, in);
        uint32_t flen = f->hdr_len + plen;
        uint8_t *frame = sink_frame(&e.sink, due, flen);
        if (!frame) {
            err = sink_err;
            err_no = e.sink.error;
            break;
        }
        packet_write(f, in, frame, plen);
        if (o->csum_offload)
            offload_fix(f, frame, flen);
        in->sent++;
        in->bytes += flen;
        stats_packet(&e.st, flen);
        if (!packets)
            first_ns = due;
        packets++;
        last_ns = due;

        int done = in->sent == f->packets;
        if (from_tree) {
            in->due = due;
            if (done) {
                dtree_remove(&e.tree, pos);
                tree_rate(&e);
            }
            /* The aggregate rule: the tree's next packet follows after
             * 1 / (sum of the tree's intensities). */
            e.tclock = due + e.tq;
            e.tfrac += e.tr;
            if (e.tfrac >= e.tree.total && e.tree.total) {
                e.tfrac -= e.tree.total;
                e.tclock++;
            }
        } else {
            uint32_t c = f->klass, len = 0;
            if (!done) {
                in->due = due + f->period;
                len = sched_fifo_push(&e.sched, c, id);
                if (!len) {
                    err = "out of memory (scheduler)";
                    break;
                }
            }
            if (src < ncls) {
                /* The class left the wheel with its head: back with the new head. */
                if (e.sched.fifo[c].len) {
                    const struct fe_inst *h = &e.pool[sched_fifo_head(&e.sched, c)];
                    sched_insert_last(&e.sched, c, h->due, h->serial);
                }
            } else if (len == 1) {
                sched_insert(&e.sched, c, in->due, in->serial);
            }
        }
        if (done) {
            e.st.finished++;
            int bad_log = e.flog && log_inst(&e, in);
            pool_put(&e, id);
            if (bad_log) {
                err = "--flows: write error";
                err_no = errno;
                break;
            }
        }
    }

    if ((o->pcap || o->hook) && sink_close(&e.sink) && !err) {
        err = sink_err;
        err_no = o->pcap ? e.sink.error : 0;
    }
    t1 = now_seconds();
    if (!o->pcap && !o->hook)
        sink_close(&e.sink);

    if (stats_end(&e.st) && !err) {
        err = "statistics: write error";
        err_no = errno;
    }
    if (e.flog) {
        if (flowlog_unfinished(&e) && !err) {
            err = "--flows: write error";
            err_no = errno;
        }
        if (fclose(e.flog) && !err) {
            err = "--flows: write error";
            err_no = errno;
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
    sum.peak_rss = peak_rss();
    sum.sent = sum.packets;
    sum.sent_bytes = sum.bytes;
    txhook_summary(o->hook, &sum);
    if (err) {
        fprintf(stderr, "flowengine: %s%s%s\n", err, err_no ? ": " : "",
                err_no ? strerror(err_no) : "");
        sum.status = "error";
        sum.exit_code = 1;
        sum.errors = 1;
    } else if (!strcmp(sum.status, "interrupted")) {
        sum.signal = engine_signal == SIGTERM ? "SIGTERM" : "SIGINT";
        sum.exit_code = engine_signal == SIGTERM ? 143 : 130;
    }
    goto report;

fail_early:
    fprintf(stderr, "flowengine: %s%s%s\n", err, err_no ? ": " : "",
            err_no ? strerror(err_no) : "");
fail_early_quiet:
    sum.status = "error";
    sum.exit_code = 1;
    sum.errors = 1;
    sink_close(&e.sink);
    if (e.flog)
        fclose(e.flog);

report:;
    char line[1024];
    size_t n = summary_json(&sum, line, sizeof line);
    fwrite(line, 1, n, stderr);
    if (o->summary) {
        FILE *fp = fopen(o->summary, "w");
        if (!fp || fwrite(line, 1, n, fp) != n || fclose(fp)) {
            fprintf(stderr, "flowengine: --summary %s: cannot write: %s\n", o->summary,
                    strerror(errno));
            if (sum.exit_code == 0)
                sum.exit_code = 1;
        }
    }
    if (e.csv && e.csv != stdout)
        fclose(e.csv);
    free(e.flog_buf);
    sched_free(&e.sched);
    dtree_free(&e.tree);
    free(e.weight);
    free(e.pool);
    free(e.flows);
    return sum.exit_code;
}
