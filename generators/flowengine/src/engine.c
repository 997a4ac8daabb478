/* engine.c - the generation loop. */
#define _POSIX_C_SOURCE 200809L
#include "engine.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

_Atomic int engine_signal;

/* --threads: set when any thread fails, so that every worker stops. */
static _Atomic int g_stop;
/* --threads with --max-packets: packets not yet claimed by a worker. */
static _Atomic uint64_t g_budget;
#define CLAIM 1024u

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

/* qsort has no context argument in C11 (one per thread: workers sort too). */
static _Thread_local const struct engine *sort_engine;

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

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

struct loop_res {
    const char *err;
    int err_no;
    const char *status;
    uint64_t packets, first_ns, last_ns;
    uint64_t unused;          /* threads: budget claimed and not used */
    int waiting;              /* threads: counted in g_waiting */
};

/* --threads with --max-packets: up to CLAIM more packets for this worker. */
static uint64_t claim(void)
{
    uint64_t b = atomic_load(&g_budget);
    while (b) {
        uint64_t take = b < CLAIM ? b : CLAIM;
        if (atomic_compare_exchange_weak(&g_budget, &b, b - take))
            return take;
    }
    return 0;
}

/* Workers waiting for budget and workers done (their unused budget given
 * back): the budget is gone for good only when all of them are one or the
 * other, so the total is exactly min(--max-packets, all packets). */
static _Atomic unsigned g_waiting, g_done;
static unsigned g_nthreads;

static void nap(long ns)
{
    struct timespec ts = { 0, ns };
    nanosleep(&ts, NULL);
}

/* More budget, or 0: none will come (the worker then stays counted as
 * waiting until it is done), or a stop. */
static uint64_t claim_wait(void)
{
    uint64_t got = claim();
    if (got)
        return got;
    atomic_fetch_add(&g_waiting, 1);
    for (;;) {
        if ((got = claim()))
            break;
        if (atomic_load(&g_waiting) + atomic_load(&g_done) >= g_nthreads) {
            got = claim();
            if (!got)
                return 0;
            break;
        }
        if (engine_signal || atomic_load_explicit(&g_stop, memory_order_relaxed))
            break;
        nap(50000);
    }
    atomic_fetch_sub(&g_waiting, 1);
    return got;
}

/* The generation loop. `threaded` is a constant at both call sites, so the
 * one-thread loop carries none of the worker's extra work: workers spawn
 * every rep_step-th repetition, key their pcap records for the merge, claim
 * --max-packets budget and stop when another thread failed. */
static ALWAYS_INLINE void run_loop(struct engine *e, const struct engine_opts *o, const uint64_t seed,
                                   struct loop_res *r, const int threaded)
{
    uint64_t max_packets = threaded ? (o->max_packets == UINT64_MAX ? UINT64_MAX : 0)
                                    : o->max_packets;
    uint64_t packets = 0, first_ns = 0, last_ns = 0;
    /* Locals, stored to *r once at the end: r needs no register in the loop. */
    const char *err = NULL, *status = r->status;
    int err_no = 0, waiting = 0;
    const int csum = o->csum_offload;
    const char *sink_err = o->pcap ? "pcap: write error" : "afpacket: send error";
    struct fe_flow *const flows = e->flows;
    const uint32_t ncls = e->sched.nclasses;
    const int stoch = o->planner == ENGINE_PLANNER_STOCHASTIC;
    for (;;) {
        uint32_t src = sched_min(&e->sched), id, pos = 0;
        int from_tree = stoch && e->tree.n &&
                        (src == SCHED_NONE || e->tclock < e->sched.node[src].due);
        if (src == SCHED_NONE && !from_tree)
            break;
        if (atomic_load_explicit(&engine_signal, memory_order_relaxed)) {
            status = "interrupted";
            break;
        }
        if (threaded && atomic_load_explicit(&g_stop, memory_order_relaxed))
            break; /* another thread failed */
        if (packets >= max_packets) {
            uint64_t more = threaded ? claim_wait() : 0;
            if (!more) {
                if (threaded && (engine_signal || atomic_load(&g_stop)))
                    continue; /* the checks above end the loop */
                status = "limited";
                waiting = threaded;
                break;
            }
            max_packets += more;
        }

        const uint64_t due = from_tree ? e->tclock : e->sched.node[src].due;
        struct fe_inst *in;
        struct fe_flow *f;

        if (due >= e->st.sec_end && stats_advance(&e->st, due)) {
            err = "statistics: write error";
            err_no = errno;
            break;
        }

        if (from_tree) {
            /* Stochastic: the next tree packet, from a flow picked with
             * probability proportional to its intensity. */
            pos = dtree_pick(&e->tree, rng_next(&e->trng) % e->tree.total);
            id = dtree_id(&e->tree, pos);
            in = &e->pool[id];
            f = &flows[in->flow];
        } else if (src >= ncls) {
            /* A flow line spawns its next repetition, which sends its packet 0
             * right now (same key) and then joins its period's FIFO. */
            uint32_t k = src - ncls;
            f = &flows[k];
            id = pool_get(e);
            if (id == POOL_NONE) {
                err = "out of memory (flow instances)";
                break;
            }
            uint64_t rep = f->next_rep;
            f->next_rep += threaded ? f->rep_step : 1;
            in = &e->pool[id];
            packet_activate(in, f, k, rep, f->offset + rep, seed);
            e->st.started++;
            sched_pop(&e->sched);
            if (f->next_rep < f->reps)
                sched_insert(&e->sched, src, f->start + f->next_rep * f->rep_period,
                             f->offset + f->next_rep);
            if (stoch && e->weight[k]) {
                /* FLOR's "immediate" insertion: the tree's next packet (of
                 * any of its flows) is due now, the following ones at the
                 * new aggregate rate. */
                if (dtree_insert(&e->tree, id, e->weight[k])) {
                    err = "out of memory (distribution tree)";
                    break;
                }
                tree_rate(e);
                e->tclock = due;
                continue;
            }
        } else {
            const struct sched_fifo *q = &e->sched.fifo[src];
            id = q->q[q->head];
            /* With many classes this one comes back only after the others
             * had their turn: fetch what a later visit needs now (the
             * instance that keys the class a few visits on, FIFO slots
             * further on), so neither misses then; measured best at +5. */
            if (q->len > 5) {
                const char *p = (const char *)&e->pool[q->q[(q->head + 5) & q->mask]];
                PREFETCH(p);
                PREFETCH(p + sizeof(struct fe_inst) - 1);
            }
            PREFETCH(&q->q[(q->head + 32) & q->mask]);
            sched_pop(&e->sched);
            sched_fifo_pop(&e->sched, src);
            in = &e->pool[id];
            f = &flows[in->flow];
        }

        uint32_t plen = packet_payload_len(f, in);
        uint32_t flen = f->hdr_len + plen;
        uint8_t *frame;
        if (threaded) {
            e->sink.key = in->serial;
            frame = sink_frame_k(&e->sink, due, in->serial, flen);
        } else {
            frame = sink_frame(&e->sink, due, flen);
        }
        if (!frame) {
            err = sink_err;
            err_no = e->sink.error;
            break;
        }
        packet_write(f, in, frame, plen);
        if (csum)
            offload_fix(f, frame, flen);
        in->sent++;
        in->bytes += flen;
        stats_packet(&e->st, flen);
        if (!packets)
            first_ns = due;
        packets++;
        last_ns = due;

        int done = in->sent == f->packets;
        if (from_tree) {
            in->due = due;
            if (done) {
                dtree_remove(&e->tree, pos);
                tree_rate(e);
            }
            /* The aggregate rule: the tree's next packet follows after
             * 1 / (sum of the tree's intensities). */
            e->tclock = due + e->tq;
            e->tfrac += e->tr;
            if (e->tfrac >= e->tree.total && e->tree.total) {
                e->tfrac -= e->tree.total;
                e->tclock++;
            }
        } else {
            uint32_t c = f->klass, len = 0;
            if (!done) {
                in->due = due + f->period;
                len = sched_fifo_push(&e->sched, c, id);
                if (!len) {
                    err = "out of memory (scheduler)";
                    break;
                }
            }
            if (src < ncls) {
                /* The class left the wheel with its head: back with the new head. */
                if (e->sched.fifo[c].len) {
                    const struct fe_inst *h = &e->pool[sched_fifo_head(&e->sched, c)];
                    sched_insert_last(&e->sched, c, h->due, h->serial);
                }
            } else if (len == 1) {
                sched_insert(&e->sched, c, in->due, in->serial);
            }
        }
        if (done) {
            e->st.finished++;
            int bad_log = e->flog && log_inst(e, in);
            pool_put(e, id);
            if (bad_log) {
                err = "--flows: write error";
                err_no = errno;
                break;
            }
        }
    }

    r->err = err;
    r->err_no = err_no;
    r->status = status;
    r->waiting = waiting;
    r->packets = packets;
    r->unused = max_packets == UINT64_MAX ? 0 : max_packets - packets;
    r->first_ns = first_ns;
    r->last_ns = last_ns;
}

static void loop_single(struct engine *e, const struct engine_opts *o, uint64_t seed,
                        struct loop_res *r)
{
    run_loop(e, o, seed, r, 0);
}

static void loop_threaded(struct engine *e, const struct engine_opts *o, uint64_t seed,
                          struct loop_res *r)
{
    run_loop(e, o, seed, r, 1);
}

/* Everything the loop needs for the instances of worker w of nthr (serials
 * congruent to w modulo nthr; one thread: all of them). NULL or what failed. */
static const char *engine_setup(struct engine *e, const struct fe_session *s,
                                const struct engine_opts *o, uint64_t seed, unsigned w,
                                unsigned nthr)
{
    memset(e, 0, sizeof *e);
    e->free_head = POOL_NONE;
    e->sink.fd = -1;
    e->flows = big_alloc((s->nflows ? s->nflows : 1) * sizeof *e->flows); /* own lines */
    uint64_t cap = s->max_concurrent / nthr + (nthr > 1);
    if (cap > POOL_INITIAL_MAX)
        cap = POOL_INITIAL_MAX;
    e->pool_cap = cap ? (uint32_t)cap : 1;
    e->pool = pool_alloc(e->pool_cap);
    if (!e->flows || !e->pool)
        return "out of memory";
    if (s->nflows)
        memcpy(e->flows, s->flows, s->nflows * sizeof *e->flows);
    uint32_t nclasses, *init_cap = NULL;
    for (size_t k = 0; k < s->nflows; k++) {
        struct fe_flow *f = &e->flows[k];
        packet_prepare(f);
        /* Serial offset + rep belongs to worker (offset + rep) mod nthr. */
        f->next_rep = (w + nthr - f->offset % nthr) % nthr;
        f->rep_step = nthr;
        if (nthr > 1)
            f->max_live = f->max_live / nthr + 1;
    }
    if (o->planner == ENGINE_PLANNER_STOCHASTIC) {
        /* Flows of at least 1 pps and more than one packet go to the tree,
         * weighted by their intensity rounded to pps; the others to the
         * slow-flow calendar (the exact planner's structures). */
        e->weight = calloc(s->nflows ? s->nflows : 1, sizeof *e->weight);
        if (!e->weight || dtree_init(&e->tree, (uint32_t)cap))
            return "out of memory";
        for (size_t k = 0; k < s->nflows; k++)
            if (e->flows[k].packets > 1 && e->flows[k].period <= 1000000000u)
                e->weight[k] = (uint32_t)((1000000000u + e->flows[k].period / 2) /
                                          e->flows[k].period);
        /* Worker 0 (and the one-thread run) keeps the documented stream. */
        e->trng = rng_mix(seed ^ 0x6a09e667f3bcc909ull) + (uint64_t)w * RNG_GOLDEN;
    }
    if (assign_classes(e, s->nflows, &nclasses, &init_cap) ||
        sched_init(&e->sched, nclasses, init_cap, (uint32_t)s->nflows)) {
        free(init_cap);
        return "out of memory";
    }
    free(init_cap);
    for (size_t k = 0; k < s->nflows; k++) {
        const struct fe_flow *f = &e->flows[k];
        if (f->next_rep < f->reps)
            sched_insert(&e->sched, nclasses + (uint32_t)k, f->start + f->next_rep * f->rep_period,
                         f->offset + f->next_rep);
    }
    return NULL;
}

static void engine_free(struct engine *e)
{
    free(e->flog_buf);
    sched_free(&e->sched);
    dtree_free(&e->tree);
    free(e->weight);
    free(e->pool);
    free(e->flows);
}

/* Prints the summary and writes --summary; may turn exit code 0 into 1. */
/* The final status of a run that got past its start: error, interrupted, or as it is. */
static void print_error(const char *err, int err_no)
{
    fprintf(stderr, "flowengine: %s%s%s\n", err, err_no ? ": " : "",
            err_no ? strerror(err_no) : "");
}

static void mark_failed(struct summary *sum)
{
    sum->status = "error";
    sum->exit_code = 1;
    sum->errors = 1;
}

static void settle_status(struct summary *sum, const char *err, int err_no)
{
    if (err) {
        print_error(err, err_no);
        mark_failed(sum);
    } else if (!strcmp(sum->status, "interrupted")) {
        sum->signal = engine_signal == SIGTERM ? "SIGTERM" : "SIGINT";
        sum->exit_code = engine_signal == SIGTERM ? 143 : 130;
    }
}

static void report(struct summary *sum, const struct engine_opts *o)
{
    char line[1024];
    size_t n = summary_json(sum, line, sizeof line);
    fwrite(line, 1, n, stderr);
    if (o->summary) {
        FILE *fp = fopen(o->summary, "w");
        if (!fp || fwrite(line, 1, n, fp) != n || fclose(fp)) {
            fprintf(stderr, "flowengine: --summary %s: cannot write: %s\n", o->summary,
                    strerror(errno));
            if (sum->exit_code == 0)
                sum->exit_code = 1;
        }
    }
}

static int engine_run_threads(const struct fe_session *s, const struct engine_opts *o);

int engine_run(const struct fe_session *s, const struct engine_opts *o)
{
    struct engine e;
    struct summary sum;
    const char *err = NULL;   /* what failed, for the message */
    int err_no = 0;
    uint64_t packets = 0, first_ns = 0, last_ns = 0;
    double t0, t1;

    if (o->threads > 1)
        return engine_run_threads(s, o);
    memset(&sum, 0, sizeof sum);
    sum.seed = o->has_seed ? o->seed : s->seed;
    sum.threads = 1;
    sum.sink = txhook_sink_name(o->hook) ? txhook_sink_name(o->hook) : o->pcap ? "pcap" : "null";
    const char *sink_err = o->pcap ? "pcap: write error" : "afpacket: send error";
    sum.status = "completed";
    sum.planner = o->planner == ENGINE_PLANNER_STOCHASTIC ? "stochastic" : "exact";
    err = engine_setup(&e, s, o, sum.seed, 0, 1);
    if (err)
        goto fail_early;

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

    t0 = now_seconds();
    {
        struct loop_res r = { NULL, 0, sum.status, 0, 0, 0, 0, 0 };
        loop_single(&e, o, sum.seed, &r);
        err = r.err;
        err_no = r.err_no;
        sum.status = r.status;
        packets = r.packets;
        first_ns = r.first_ns;
        last_ns = r.last_ns;
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
    settle_status(&sum, err, err_no);
    goto report;

fail_early:
    print_error(err, err_no);
fail_early_quiet:
    mark_failed(&sum);
    sink_close(&e.sink);
    if (e.flog)
        fclose(e.flog);

report:
    report(&sum, o);
    if (e.csv && e.csv != stdout)
        fclose(e.csv);
    engine_free(&e);
    return sum.exit_code;
}

/* ---- --threads -------------------------------------------------------------
 *
 * Worker w of N runs the loop above over the instances whose serial is
 * congruent to w modulo N (every line's repetitions from its first such one,
 * step N): its own scheduler, pool, tree, sink and statistics, nothing shared
 * in the hot path. Its packets are exactly the one-thread run's packets of
 * those serials, in the same relative order. The main thread merges: pcap
 * records by (due, serial) from the workers' block queues (pcapout.h), the
 * per-second rows from their feeds (stats.h) once every worker has passed a
 * second, and at the end the flow log rows. */

/* Cache-line aligned parts: the worker's engine (written per packet by the
 * worker) and the merge cursor (written per record by the main thread) never
 * share a line with each other or with the next worker's. */
struct worker {
    _Alignas(64) struct engine e;
    const struct engine_opts *o;
    uint64_t seed;
    struct stats_feed feed;
    struct mqueue mq;
    struct loop_res r;
    pthread_t tid;
    int running;             /* created, not joined */
    _Atomic int finished;
    /* The main thread's merge cursor in the worker's current block. */
    _Alignas(64) const uint8_t *p, *end;
    int holding, state;      /* state: 0 no head yet, 1 head (kdue, kser), 2 exhausted */
    uint64_t kdue, kser;
    /* Flow log merge. */
    char *line;
    size_t line_cap;
    int has, eof;
    uint64_t k1, k2;
    _Alignas(64) char end_pad;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct engine *e = &w->e;
    const char *sink_err = w->o->pcap ? "pcap: write error" : "afpacket: send error";

    loop_threaded(e, w->o, w->seed, &w->r);
    /* Unused budget back first, then counted done (a waiting worker that
     * sees all done or waiting finds the budget there). */
    if (w->r.unused)
        atomic_fetch_add(&g_budget, w->r.unused);
    if (w->r.waiting)
        atomic_fetch_sub(&g_waiting, 1);
    atomic_fetch_add(&g_done, 1);
    if (w->r.err)
        atomic_store(&g_stop, 1);
    if (sink_close(&e->sink) && !w->r.err) {
        w->r.err = sink_err;
        w->r.err_no = w->o->pcap ? e->sink.error : 0;
        if (w->r.err_no == ECANCELED) /* stopped by another thread's error */
            w->r.err = NULL;
    }
    if (stats_end(&e->st) && !w->r.err) {
        w->r.err = "statistics: out of memory";
        w->r.err_no = 0;
    }
    if (e->flog) {
        /* The rows of the instances still running follow a marker line. */
        if ((fputs("#\n", e->flog) < 0 || flowlog_unfinished(e) || fflush(e->flog)) &&
            !w->r.err) {
            w->r.err = "--flows: write error";
            w->r.err_no = errno;
        }
    }
    if (w->r.err)
        atomic_store(&g_stop, 1);
    atomic_store_explicit(&w->finished, 1, memory_order_release);
    return NULL;
}

struct rowmerge {
    FILE *csv;
    int late_col;
    uint64_t next, active;
};

static void put_row(struct rowmerge *m, const struct stats_row *r)
{
    m->active += r->started - r->finished;
    fprintf(m->csv, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64,
            r->sec, r->packets, r->bytes, r->started, r->finished, m->active);
    if (m->late_col)
        fprintf(m->csv, ",%" PRIu64, r->late);
    fputc('\n', m->csv);
}

/* Writes the rows of the seconds every worker has passed (final: all rows),
 * gaps included, as the one-thread run writes them. */
static int rows_poll(struct rowmerge *m, struct worker *w, unsigned n, int final)
{
    uint64_t lim = UINT64_MAX;
    int wrote = 0;
    if (!final)
        for (unsigned i = 0; i < n; i++) {
            uint64_t p = atomic_load_explicit(&w[i].feed.passed, memory_order_acquire);
            if (p < lim)
                lim = p;
        }
    for (;;) {
        uint64_t smin = UINT64_MAX;
        for (unsigned i = 0; i < n; i++) {
            const struct stats_row *r = feed_peek(&w[i].feed);
            if (r && r->sec < smin)
                smin = r->sec;
        }
        if (smin == UINT64_MAX || smin >= lim)
            break;
        for (; m->next < smin; m->next++) {
            struct stats_row z = { m->next, 0, 0, 0, 0, 0 };
            put_row(m, &z);
        }
        struct stats_row t = { smin, 0, 0, 0, 0, 0 };
        for (unsigned i = 0; i < n; i++) {
            const struct stats_row *r;
            while ((r = feed_peek(&w[i].feed)) && r->sec == smin) {
                t.packets += r->packets;
                t.bytes += r->bytes;
                t.started += r->started;
                t.finished += r->finished;
                t.late += r->late;
                feed_next(&w[i].feed);
            }
        }
        put_row(m, &t);
        m->next = smin + 1;
        wrote = 1;
    }
    if (wrote && fflush(m->csv))
        return -1;
    return ferror(m->csv) ? -1 : 0;
}

/* Periodic work of the main thread: rows, and a stop passed on to every
 * worker (a signal interrupts a worker's pacing sleep). */
static int housekeeping(struct rowmerge *m, struct worker *w, unsigned n, int *forwarded)
{
    if (engine_signal && !*forwarded) {
        *forwarded = 1;
        for (unsigned i = 0; i < n; i++)
            if (w[i].running && !atomic_load(&w[i].finished))
                pthread_kill(w[i].tid, engine_signal);
    }
    return rows_poll(m, w, n, 0);
}

/* The worker's next record (state 1), none yet (0) or no more (2). */
static int cur_load(struct worker *w)
{
    struct mqueue *q = &w->mq;
    for (;;) {
        if (w->p < w->end) {
            uint32_t sec, nsec;
            memcpy(&w->kser, w->p, 8);
            memcpy(&sec, w->p + 8, 4);
            memcpy(&nsec, w->p + 12, 4);
            w->kdue = (uint64_t)sec * 1000000000u + nsec;
            return 1;
        }
        uint64_t c = atomic_load_explicit(&q->cons, memory_order_relaxed);
        if (w->holding) {
            atomic_store_explicit(&q->cons, ++c, memory_order_release);
            w->holding = 0;
        }
        int done = atomic_load_explicit(&q->done, memory_order_acquire);
        if (c < atomic_load_explicit(&q->prod, memory_order_acquire)) {
            w->p = q->blk[c % MQ_NBLK];
            w->end = w->p + q->len[c % MQ_NBLK];
            w->holding = 1;
            continue;
        }
        return done ? 2 : 0;
    }
}

/* k-way merge of the workers' records by (due, serial) into out. */
static int merge_pcap(struct sink *out, struct rowmerge *m, struct worker *w, unsigned n,
                      int *forwarded, int *rows_bad)
{
    int bad = 0;
    uint64_t since = 0;
    for (;;) {
        int waiting = 0;
        for (unsigned i = 0; i < n; i++)
            if (w[i].state == 0 && (w[i].state = cur_load(&w[i])) == 0)
                waiting = 1;
        if (waiting) {
            if (!*rows_bad && housekeeping(m, w, n, forwarded))
                *rows_bad = 1;
            nap(20000);
            continue;
        }
        int b = -1, c = -1;
        for (unsigned i = 0; i < n; i++) {
            if (w[i].state != 1)
                continue;
            if (b < 0 || w[i].kdue < w[b].kdue ||
                (w[i].kdue == w[b].kdue && w[i].kser < w[b].kser)) {
                c = b;
                b = (int)i;
            } else if (c < 0 || w[i].kdue < w[c].kdue ||
                       (w[i].kdue == w[c].kdue && w[i].kser < w[c].kser)) {
                c = (int)i;
            }
        }
        if (b < 0)
            break;
        struct worker *x = &w[b];
        uint64_t cd = c >= 0 ? w[c].kdue : UINT64_MAX, cs = c >= 0 ? w[c].kser : UINT64_MAX;
        /* Records of x up to the runner-up's key. */
        for (;;) {
            const uint8_t *p = x->p;
            uint32_t len, sec, nsec;
            memcpy(&len, p + 16, 4);
            if (!bad && sink_put(out, p + 8, 16 + (size_t)len)) {
                bad = 1;
                atomic_store(&g_stop, 1); /* workers stop; the merge drains them */
            }
            x->p = p + 24 + len;
            if (x->p >= x->end) {
                x->state = 0;
                if (++since >= 4) {
                    since = 0;
                    if (!*rows_bad && housekeeping(m, w, n, forwarded))
                        *rows_bad = 1;
                }
                break;
            }
            memcpy(&x->kser, x->p, 8);
            memcpy(&sec, x->p + 8, 4);
            memcpy(&nsec, x->p + 12, 4);
            x->kdue = (uint64_t)sec * 1000000000u + nsec;
            if (x->kdue > cd || (x->kdue == cd && x->kser > cs))
                break;
        }
    }
    return bad ? -1 : 0;
}

/* Reads a worker's next flow log line of the current part: finished rows
 * keyed (last_ns, serial), after the marker unfinished rows keyed serial. */
static void flog_next(struct worker *w, FILE *fp, int part)
{
    w->has = 0;
    if (w->eof)
        return;
    ssize_t len = getline(&w->line, &w->line_cap, fp);
    if (len < 0) {
        w->eof = 1;
        return;
    }
    if (w->line[0] == '#')
        return;
    const char *p = w->line;
    uint64_t serial = strtoull(p, NULL, 10), last = 0;
    for (int f = 0; f < 10 && p; f++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (p)
        last = strtoull(p, NULL, 10);
    w->k1 = part ? serial : last;
    w->k2 = serial;
    w->has = 1;
}

/* The workers' flow logs (temporary files) merged into out: finished rows in
 * the order of their last packet (due, serial), as one thread writes them,
 * then the rows of unfinished instances by serial. */
static int flog_merge(FILE *out, struct worker *w, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (fflush(w[i].e.flog) || fseek(w[i].e.flog, 0, SEEK_SET))
            return -1;
        w[i].eof = 0;
    }
    for (int part = 0; part < 2; part++) {
        for (unsigned i = 0; i < n; i++)
            flog_next(&w[i], w[i].e.flog, part);
        for (;;) {
            int b = -1;
            for (unsigned i = 0; i < n; i++)
                if (w[i].has && (b < 0 || w[i].k1 < w[b].k1 ||
                                 (w[i].k1 == w[b].k1 && w[i].k2 < w[b].k2)))
                    b = (int)i;
            if (b < 0)
                break;
            if (fputs(w[b].line, out) < 0)
                return -1;
            flog_next(&w[b], w[b].e.flog, part);
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (ferror(w[i].e.flog))
            return -1;
    return ferror(out) ? -1 : 0;
}

static int engine_run_threads(const struct fe_session *s, const struct engine_opts *o)
{
    const unsigned n = o->threads;
    struct summary sum;
    struct worker *w = aligned_alloc(64, n * sizeof *w);
    struct sink out;
    struct rowmerge m = { NULL, 0, 0, 0 };
    FILE *flog = NULL;
    char *flog_buf = NULL;
    const char *err = NULL;
    int err_no = 0, forwarded = 0, rows_bad = 0;
    double t0 = 0, t1 = 0;
    int live = txhook_live(o->hook);

    memset(&sum, 0, sizeof sum);
    memset(&out, 0, sizeof out);
    out.fd = -1;
    sum.seed = o->has_seed ? o->seed : s->seed;
    sum.threads = n;
    sum.sink = txhook_sink_name(o->hook) ? txhook_sink_name(o->hook) : o->pcap ? "pcap" : "null";
    sum.status = "completed";
    sum.planner = o->planner == ENGINE_PLANNER_STOCHASTIC ? "stochastic" : "exact";
    atomic_store(&g_stop, 0);
    atomic_store(&g_budget, o->max_packets);
    atomic_store(&g_waiting, 0);
    atomic_store(&g_done, 0);
    g_nthreads = n;
    m.late_col = txhook_paced(o->hook);
    if (!w) {
        err = "out of memory";
        goto fail_early;
    }
    memset(w, 0, n * sizeof *w);
    for (unsigned i = 0; i < n; i++) {
        struct worker *x = &w[i];
        x->o = o;
        x->seed = sum.seed;
        x->r.status = "completed";
        if ((err = engine_setup(&x->e, s, o, sum.seed, i, n)))
            goto fail_early;
        if (feed_init(&x->feed) || (o->pcap && mq_init(&x->mq, &g_stop))) {
            err = "out of memory";
            goto fail_early;
        }
        if (o->flows && !(x->e.flog = tmpfile())) {
            err = "--flows: cannot create a temporary file";
            err_no = errno;
            goto fail_early;
        }
        stats_init_feed(&x->e.st, &x->feed, m.late_col);
        if (o->pcap) {
            sink_open_mq(&x->e.sink, &x->mq);
        } else if (sink_open_null(&x->e.sink)) {
            err = "out of memory";
            goto fail_early;
        }
        if (o->hooks && o->hooks[i])
            txhook_attach(o->hooks[i], &x->e.sink, &x->e.st);
    }
    m.csv = o->stats ? open_out(o->stats, "--stats") : stdout;
    if (!m.csv)
        goto fail_early_quiet;
    stats_header(m.csv, m.late_col);
    if (fflush(m.csv)) {
        err = "statistics: write error";
        err_no = errno;
        goto fail_early;
    }
    if (o->flows) {
        flog = open_out(o->flows, "--flows");
        if (!flog)
            goto fail_early_quiet;
        flog_buf = malloc(1 << 20);
        if (flog_buf)
            setvbuf(flog, flog_buf, _IOFBF, 1 << 20);
        if (flowlog_header(flog)) {
            err = "--flows: write error";
            err_no = errno;
            goto fail_early;
        }
    }
    if (o->pcap && sink_open_pcap(&out, o->pcap)) {
        fprintf(stderr, "flowengine: %s: cannot open: %s\n", o->pcap,
                strerror(out.error ? out.error : ENOMEM));
        goto fail_early_quiet;
    }

    t0 = now_seconds();
    if (o->hooks) {
        /* Every worker paces from one common start. */
        uint64_t start = pace_now();
        for (unsigned i = 0; i < n; i++)
            if (o->hooks[i])
                txhook_start(o->hooks[i], start);
    }
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
        if (rc) {
            err = "cannot start a thread";
            err_no = rc;
            atomic_store(&g_stop, 1);
            break;
        }
        w[i].running = 1;
    }
    if (o->pcap && !err) {
        if (merge_pcap(&out, &m, w, n, &forwarded, &rows_bad)) {
            err = "pcap: write error";
            err_no = out.error;
        }
    } else {
        for (;;) {
            int all = 1;
            for (unsigned i = 0; i < n; i++)
                if (w[i].running && !atomic_load_explicit(&w[i].finished, memory_order_acquire))
                    all = 0;
            if (all)
                break;
            if (!rows_bad && housekeeping(&m, w, n, &forwarded))
                rows_bad = 1;
            nap(1000000);
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (w[i].running) {
            pthread_join(w[i].tid, NULL);
            w[i].running = 0;
        }
    if (o->pcap && sink_close(&out) && !err) {
        err = "pcap: write error";
        err_no = out.error;
    }
    t1 = now_seconds();

    int interrupted = 0, limited = 0;
    for (unsigned i = 0; i < n; i++) {
        struct worker *x = &w[i];
        if (x->r.err && !err) {
            err = x->r.err;
            err_no = x->r.err_no;
        }
        interrupted |= !strcmp(x->r.status, "interrupted");
        limited |= !strcmp(x->r.status, "limited");
        sum.packets += x->e.st.t_packets;
        sum.bytes += x->e.st.t_bytes;
        sum.flows_started += x->e.st.t_started;
        sum.flows_finished += x->e.st.t_finished;
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
    if ((rows_bad || rows_poll(&m, w, n, 1)) && !err) {
        err = "statistics: write error";
        err_no = errno;
    }
    if (flog) {
        if (flog_merge(flog, w, n) && !err) {
            err = "--flows: write error";
            err_no = errno;
        }
        if (fclose(flog) && !err) {
            err = "--flows: write error";
            err_no = errno;
        }
        flog = NULL;
    }
    sum.wall_seconds = t1 - t0;
    sum.peak_rss = peak_rss();
    sum.sent = sum.packets;
    sum.sent_bytes = sum.bytes;
    if (live)
        sum.sent = sum.sent_bytes = 0;
    if (o->hooks)
        for (unsigned i = 0; i < n; i++)
            txhook_summary_add(o->hooks[i], &sum);
    settle_status(&sum, err, err_no);
    goto done;

fail_early:
    print_error(err, err_no);
fail_early_quiet:
    mark_failed(&sum);
    sink_close(&out);
    if (flog)
        fclose(flog);

done:
    report(&sum, o);
    if (m.csv && m.csv != stdout)
        fclose(m.csv);
    free(flog_buf);
    if (w) {
        for (unsigned i = 0; i < n; i++) {
            struct worker *x = &w[i];
            if (x->e.sink.mq || (x->e.sink.buf && !o->pcap)) {
                x->e.sink.hook = NULL;
                sink_close(&x->e.sink); /* not started (early failure) */
            }
            if (x->e.flog)
                fclose(x->e.flog);
            free(x->line);
            feed_free(&x->feed);
            mq_free(&x->mq);
            engine_free(&x->e);
        }
        free(w);
    }
    return sum.exit_code;
}
