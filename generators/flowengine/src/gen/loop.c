/* loop.c - the generation loop (loop.h). */
#define _POSIX_C_SOURCE 200809L
#include "loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bigmem.h"
#include "crew.h"
#include "flowlog.h"
#include "halt.h"
#include "offload.h"
#include "pace.h"
#include "packet.h"
#include "rng.h"
#include "stream.h"

#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define PREFETCH(p) ((void)(p))
#define ALWAYS_INLINE inline
#endif

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* qsort has no context argument in C11 (one per thread: workers sort too). */
static _Thread_local const struct loop *sort_loop;

static int cmp_serial(const void *a, const void *b)
{
    const struct fe_inst *pool = sort_loop->pool.inst;
    uint64_t x = pool[*(const uint32_t *)a].serial, y = pool[*(const uint32_t *)b].serial;
    return x < y ? -1 : x > y;
}

/* A flow log row. Instances of the stochastic planner's tree carry the due
 * time of their last packet in `due`; first_ns is then their start. */
static int log_inst(struct loop *e, const struct fe_inst *in)
{
    const struct fe_flow *f = &e->flows[in->flow];
    if (f->kind == FE_K_SESS)
        return flowlog_row_sess(e->flog, f, in, &e->sess[in - e->pool.inst]);
    if (e->weight && e->weight[in->flow] && in->sent)
        return flowlog_row_at(e->flog, f, in, f->start + (in->serial - f->offset) * f->rep_period,
                              in->due, e->flog_ext);
    return flowlog_row(e->flog, f, in, e->flog_ext);
}

/* The session state array covers every pool id (it grows with the pool). */
static int sess_fit(struct loop *e)
{
    if (e->sess_cap >= e->pool.cap)
        return 0;
    struct sess_state *n = bigmem_alloc((size_t)e->pool.cap * sizeof *n);
    if (!n)
        return -ENOMEM;
    if (e->sess)
        memcpy(n, e->sess, (size_t)e->sess_cap * sizeof *n);
    free(e->sess);
    e->sess = n;
    e->sess_cap = e->pool.cap;
    return 0;
}

/* The tree's gap between two packets, 10^9 / total ns, as quotient and remainder. */
static void tree_rate(struct loop *e)
{
    uint64_t t = e->tree.total;
    e->tq = t ? 1000000000u / t : 0;
    e->tr = t ? 1000000000u % t : 0;
    e->tfrac = 0;
}

/* Rows of the instances still running at a stop, in serial order. */
int loop_log_unfinished(struct loop *e)
{
    const struct wheel *s = &e->wheel;
    size_t n = 0;
    uint32_t *ids = malloc((s->queued + e->tree.n + e->nflows + 1) * sizeof *ids);
    int rc = 0;
    if (!ids)
        return -ENOMEM;
    for (size_t k = 0; k < e->nflows; k++)
        if (e->flows[k].kind == FE_K_STREAM && e->flows[k].sid != POOL_NONE)
            ids[n++] = e->flows[k].sid;
    for (uint32_t c = 0; c < s->nclasses; c++) {
        const struct wheel_fifo *f = &s->fifo[c];
        for (uint32_t i = 0; i < f->len; i++)
            ids[n++] = f->q[(f->head + i) & f->mask];
    }
    for (uint32_t i = 0; i < e->tree.n; i++)
        ids[n++] = dtree_id(&e->tree, e->tree.n - 1 + i);
    sort_loop = e;
    qsort(ids, n, sizeof *ids, cmp_serial);
    for (size_t i = 0; i < n && !rc; i++)
        rc = log_inst(e, &e->pool.inst[ids[i]]);
    free(ids);
    return rc;
}

/* Sorted distinct values of v[0..n), in place; returns how many. */
static uint32_t distinct(uint64_t *v, size_t n)
{
    uint32_t m = 0;
    qsort(v, n, sizeof *v, cmp_u64);
    for (size_t k = 0; k < n; k++)
        if (!m || v[m - 1] != v[k])
            v[m++] = v[k];
    return m;
}

/* Index of x in the sorted v[0..n). */
static uint32_t find_class(const uint64_t *v, uint32_t n, uint64_t x)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void add_cap(uint32_t *cap, uint64_t n)
{
    uint64_t c = *cap + n;
    *cap = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
}

/* The FIFO classes a session line's instances use (h, gap, think and linger
 * or every value of their dists), each once, into cl; returns how many. */
static uint32_t sess_line_classes(const struct fe_flow *f, uint32_t *cl)
{
    const struct sess_line *sl = f->sess;
    uint32_t n = 0, c[4 + 2 * SESS_MAX_PAUSES];
    c[n++] = f->klass;
    c[n++] = f->klass_gap;
    c[n++] = f->klass_think;
    c[n++] = f->klass_linger;
    for (uint32_t i = 0; sl->think_d && i < sl->think_d->n; i++)
        c[n++] = sl->think_k[i];
    for (uint32_t i = 0; sl->linger_d && i < sl->linger_d->n; i++)
        c[n++] = sl->linger_k[i];
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = 0;
        while (j < m && cl[j] != c[i])
            j++;
        if (j == m)
            cl[m++] = c[i];
    }
    return m;
}

/* Period classes: flows that share a period share a FIFO (wheel.h). The
 * wheel's nodes (and FIFOs, by the same index) are: the flow lines' classes
 * 0..nfcls-1, then one node per session line (line k is nfcls + k, its FIFO
 * unused), then the session lines' classes (their h's, gaps, and thinks and
 * lingers when set, every value of a D:ID one: the distinct values of all of
 * them). So no FIFO mixes flows and sessions, and the flow path tells its
 * classes from everything else with the one compare src < nfcls it always
 * had. A D:ID think or linger gets its bins' classes in the line's think_k
 * and linger_k (sess.h), read per pause in O(1). */
static int assign_classes(struct loop *e, size_t nflows, uint32_t *nclasses, uint32_t **init_cap)
{
    size_t want = 2 * nflows + 1;
    for (size_t k = 0; k < nflows; k++)
        if (e->flows[k].kind == FE_K_SESS) {
            const struct sess_line *sl = e->flows[k].sess;
            want += 2 + (sl->think_d ? sl->think_d->n : 1) + (sl->linger_d ? sl->linger_d->n : 1);
        }
    uint64_t *periods = malloc(want * sizeof *periods);
    if (!periods)
        return -ENOMEM;
    size_t np = 0, ns = 0;
    for (size_t k = 0; k < nflows; k++) /* a stream has no FIFO */
        if (e->flows[k].kind != FE_K_STREAM && e->flows[k].kind != FE_K_SESS)
            periods[np++] = e->flows[k].period;
    uint32_t nf = distinct(periods, np);
    uint64_t *sp = periods + nf;
    for (size_t k = 0; k < nflows; k++)
        if (e->flows[k].kind == FE_K_SESS) {
            const struct sess_line *sl = e->flows[k].sess;
            sp[ns++] = sl->h;
            sp[ns++] = sl->gap;
            if (sl->think_d)
                for (uint32_t i = 0; i < sl->think_d->n; i++)
                    sp[ns++] = sl->think_d->bin[i].lo;
            else if (sl->think)
                sp[ns++] = sl->think;
            if (sl->linger_d)
                for (uint32_t i = 0; i < sl->linger_d->n; i++)
                    sp[ns++] = sl->linger_d->bin[i].lo;
            else if (sl->linger)
                sp[ns++] = sl->linger;
        }
    uint32_t nsc = distinct(sp, ns), s0 = nf + (uint32_t)nflows, n = s0 + nsc;
    *init_cap = calloc(n ? n : 1, sizeof **init_cap);
    if (!*init_cap) {
        free(periods);
        return -ENOMEM;
    }
    for (size_t k = 0; k < nflows; k++) {
        struct fe_flow *f = &e->flows[k];
        if (f->kind == FE_K_STREAM)
            continue;
        if (f->kind == FE_K_SESS) {
            struct sess_line *sl = f->sess;
            uint32_t cl[4 + 2 * SESS_MAX_PAUSES];
            f->klass = s0 + find_class(sp, nsc, sl->h);
            f->klass_gap = s0 + find_class(sp, nsc, sl->gap);
            f->klass_think =
                sl->think && !sl->think_d ? s0 + find_class(sp, nsc, sl->think) : f->klass;
            f->klass_linger =
                sl->linger && !sl->linger_d ? s0 + find_class(sp, nsc, sl->linger) : f->klass;
            for (uint32_t i = 0; sl->think_d && i < sl->think_d->n; i++)
                sl->think_k[i] = s0 + find_class(sp, nsc, sl->think_d->bin[i].lo);
            for (uint32_t i = 0; sl->linger_d && i < sl->linger_d->n; i++)
                sl->linger_k[i] = s0 + find_class(sp, nsc, sl->linger_d->bin[i].lo);
            uint32_t m = sess_line_classes(f, cl);
            for (uint32_t i = 0; i < m; i++)
                add_cap(&(*init_cap)[cl[i]], f->max_live);
            continue;
        }
        f->klass = find_class(periods, nf, f->period);
        add_cap(&(*init_cap)[f->klass], f->max_live);
    }
    free(periods);
    e->nfcls = nf;
    *nclasses = n;
    return 0;
}

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

/* A session line (index k) spawns its repetition due now: the instance in
 * e->sess_id, its first packet current; the line goes back into the wheel
 * with its next repetition of this loop (step: the loop's rep_step). Every
 * loop walks the line's whole arrival stream. 0, or -ENOMEM (e->sess_fail
 * set). */
static NOINLINE int sess_spawn(struct loop *e, uint32_t k, uint64_t due, uint64_t step)
{
    struct fe_flow *f = &e->flows[k];
    uint32_t id;
    int rc;
    if ((rc = pool_get(&e->pool, &id)) || (rc = sess_fit(e))) {
        e->sess_fail = LOOP_FAIL_POOL;
        return rc;
    }
    uint64_t rep = f->next_rep;
    sess_activate(f, &e->sess[id], &e->pool.inst[id], k, rep, f->offset + rep, e->seed, due);
    e->st.started++;
    wheel_pop(&e->wheel);
    for (uint64_t i = 0; i < step && f->next_rep + 1 < f->reps; i++) {
        f->next_start = sess_arrival_next(f->sess, f->next_start, &f->arr_rng);
        f->next_rep++;
    }
    if (f->next_rep - rep < step)
        f->next_rep = f->reps; /* no repetition of this loop is left */
    else
        wheel_insert(&e->wheel, e->nfcls + k, f->next_start, f->offset + f->next_rep);
    e->sess_id = id;
    return 0;
}

/* Takes the head of session class c (it left the wheel with it): the class
 * goes back with its next head. Returns the instance id. */
static NOINLINE uint32_t sess_class_pop(struct loop *e, uint32_t c)
{
    uint32_t id = wheel_fifo_head(&e->wheel, c);
    wheel_pop(&e->wheel);
    wheel_fifo_pop(&e->wheel, c);
    if (e->wheel.fifo[c].len) {
        const struct fe_inst *h = &e->pool.inst[wheel_fifo_head(&e->wheel, c)];
        wheel_insert(&e->wheel, c, h->due, h->serial);
    }
    return id;
}

/* Session instance id sends its current packet, due now, and goes to the
 * FIFO of the delay before its next one, or finishes (flow log row, id
 * back to the pool). 0, or a negative errno with e->sess_fail set. The
 * caller counts the packet in its totals. */
static NOINLINE int sess_packet(struct loop *e, uint32_t id, uint64_t due)
{
    struct fe_inst *in = &e->pool.inst[id];
    const struct fe_flow *f = &e->flows[in->flow];
    struct sess_state *ss = &e->sess[id];
    uint32_t len = f->hdr_len + ss->plen, c = 0;
    uint8_t *frame = sink_frame(&e->sink, due, in->serial, len);
    int rc;
    if (!frame) {
        e->sess_fail = LOOP_FAIL_SINK;
        return e->sink.err ? e->sink.err : -EIO;
    }
    sess_write(f, ss, in, frame);
    if (e->cfg.csum_offload)
        offload_fix(f, frame, len);
    in->sent++;
    in->bytes += len;
    stats_packet(&e->st, len);
    if (e->cnt)
        counters_add(&e->cnt[in->flow], len);
    ss->last = due;
    uint64_t delay = sess_next(f, ss, in, &c);
    if (delay) {
        in->due = due + delay;
        int64_t n = wheel_fifo_push(&e->wheel, c, id);
        if (n < 0) {
            e->sess_fail = LOOP_FAIL_WHEEL;
            return (int)n;
        }
        if (n == 1)
            wheel_insert(&e->wheel, c, in->due, in->serial);
        return 0;
    }
    e->st.finished++;
    rc = e->flog ? log_inst(e, in) : 0;
    pool_put(&e->pool, id);
    if (rc)
        e->sess_fail = LOOP_FAIL_FLOWLOG;
    return rc;
}

/* The generation loop. `threaded` is a constant at both call sites, so the
 * one-thread loop carries none of the worker's extra work: workers spawn
 * every rep_step-th repetition, claim --max-packets budget and stop when
 * another thread failed. */
static ALWAYS_INLINE void run_loop(struct loop *e, struct loop_res *r, const int threaded)
{
    uint64_t max_packets =
        threaded ? (e->cfg.max_packets == UINT64_MAX ? UINT64_MAX : 0) : e->cfg.max_packets;
    uint64_t packets = 0, first_ns = 0, last_ns = 0;
    /* Locals, stored to *r once at the end: r needs no register in the loop. */
    const char *status = r->status;
    int fail = LOOP_OK, err = 0, waiting = 0, rc;
    const uint64_t seed = e->seed;
    const int csum = e->cfg.csum_offload;
    struct fe_flow *const flows = e->flows;
    const uint32_t ncls = e->nfcls, nsc0 = ncls + (uint32_t)e->nflows;
    const int stoch = e->cfg.stochastic;
    struct counters_line *const cnt = e->cnt;
    for (;;) {
        uint32_t src = wheel_min(&e->wheel), id, pos = 0;
        int from_tree =
            stoch && e->tree.n && (src == WHEEL_NONE || e->tclock < e->wheel.node[src].due);
        if (src == WHEEL_NONE && !from_tree)
            break;
        if (atomic_load_explicit(&halt_signal, memory_order_relaxed)) {
            status = "interrupted";
            break;
        }
        if (threaded && crew_stopped())
            break; /* another thread failed */
        if (atomic_load_explicit(&pace_pause_flag, memory_order_relaxed)) {
            /* Paused: the sink hands on what it queued, the loop holds, and
             * the sink's clock moves on by the time held. */
            if (e->hold)
                e->hold(e->hold_ctx, 0, 0);
            uint64_t held = pace_hold();
            e->paused_ns += held;
            if (e->hold)
                e->hold(e->hold_ctx, 1, held);
            continue;
        }
        if (packets >= max_packets) {
            uint64_t more = threaded ? crew_claim_wait() : 0;
            if (!more) {
                if (threaded && (halt_signal || crew_stopped()))
                    continue; /* the checks above end the loop */
                status = "limited";
                waiting = threaded;
                break;
            }
            max_packets += more;
        }

        const uint64_t due = from_tree ? e->tclock : e->wheel.node[src].due;
        struct fe_inst *in;
        struct fe_flow *f;

        if (due >= e->st.sec_end && (rc = stats_advance(&e->st, due))) {
            fail = LOOP_FAIL_STATS;
            err = rc;
            break;
        }

        if (from_tree) {
            /* Stochastic: the next tree packet, from a flow picked with
             * probability proportional to its intensity. */
            pos = dtree_pick(&e->tree, rng_next(&e->trng) % e->tree.total);
            id = dtree_id(&e->tree, pos);
            in = &e->pool.inst[id];
            f = &flows[in->flow];
        } else if (src < ncls) {
            const struct wheel_fifo *q = &e->wheel.fifo[src];
            id = q->q[q->head];
            /* With many classes this one comes back only after the others
             * had their turn: fetch what a later visit needs now (the
             * instance that keys the class a few visits on, FIFO slots
             * further on), so neither misses then; measured best at +5. */
            if (q->len > 5) {
                const char *p = (const char *)&e->pool.inst[q->q[(q->head + 5) & q->mask]];
                PREFETCH(p);
                PREFETCH(p + sizeof(struct fe_inst) - 1);
            }
            PREFETCH(&q->q[(q->head + 32) & q->mask]);
            wheel_pop(&e->wheel);
            wheel_fifo_pop(&e->wheel, src);
            in = &e->pool.inst[id];
            f = &flows[in->flow];
        } else if (src >= nsc0) {
            /* A session class: its head sends its packet (out of line, so
             * that the flow path keeps its registers). */
            if ((rc = sess_packet(e, sess_class_pop(e, src), due))) {
                fail = e->sess_fail;
                err = rc;
                break;
            }
            if (!packets)
                first_ns = due;
            packets++;
            last_ns = due;
            continue;
        } else if (flows[src - ncls].kind == FE_K_STREAM) {
            /* A stream line (one instance): its node carries the key of its
             * next packet; the packet is a copy of its frame, patched. */
            uint32_t k = src - ncls;
            f = &flows[k];
            if (f->sid == POOL_NONE) {
                if ((rc = pool_get(&e->pool, &f->sid))) {
                    fail = LOOP_FAIL_POOL;
                    err = rc;
                    break;
                }
                in = &e->pool.inst[f->sid];
                memset(in, 0, sizeof *in); /* rng: index in the burst; seq: frame cursor */
                in->serial = f->offset;
                in->flow = k;
                e->st.started++;
            }
            id = f->sid;
            in = &e->pool.inst[id];
            wheel_pop(&e->wheel);
            const struct stream_line *sl = f->stream;
            const struct stream_tpl *t = &sl->tpl[in->seq];
            uint8_t *frame = sink_frame(&e->sink, due, in->serial, t->len);
            if (!frame) {
                fail = LOOP_FAIL_SINK;
                err = e->sink.err;
                break;
            }
            stream_fill(sl, t, frame, in->sent);
            in->sent++;
            in->bytes += t->len;
            stats_packet(&e->st, t->len);
            if (cnt)
                counters_add(&cnt[k], t->len);
            if (!packets)
                first_ns = due;
            packets++;
            last_ns = due;
            if (++in->seq == sl->count)
                in->seq = 0;
            if (in->sent < f->packets) {
                if (sl->burst && ++in->rng == sl->burst) {
                    in->due = due - (sl->burst - 1) * f->period + sl->burst_period;
                    in->rng = 0;
                } else {
                    in->due = due + f->period;
                }
                wheel_insert_last(&e->wheel, src, in->due, in->serial);
                continue;
            }
            in->due = due; /* the flow log's last_ns comes from stream_due */
            f->sid = POOL_NONE;
            e->st.finished++;
            rc = e->flog ? log_inst(e, in) : 0;
            pool_put(&e->pool, id);
            if (rc) {
                fail = LOOP_FAIL_FLOWLOG;
                err = rc;
                break;
            }
            continue;
        } else if (flows[src - ncls].kind == FE_K_SESS) {
            /* A session line spawns its next repetition, which sends its
             * first packet right now (same key). */
            if ((rc = sess_spawn(e, src - ncls, due, threaded ? flows[src - ncls].rep_step : 1)) ||
                (rc = sess_packet(e, e->sess_id, due))) {
                fail = e->sess_fail;
                err = rc;
                break;
            }
            if (!packets)
                first_ns = due;
            packets++;
            last_ns = due;
            continue;
        } else {
            /* A flow line spawns its next repetition, which sends its packet 0
             * right now (same key) and then joins its period's FIFO. */
            uint32_t k = src - ncls;
            f = &flows[k];
            if ((rc = pool_get(&e->pool, &id))) {
                fail = LOOP_FAIL_POOL;
                err = rc;
                break;
            }
            uint64_t rep = f->next_rep;
            f->next_rep += threaded ? f->rep_step : 1;
            in = &e->pool.inst[id];
            packet_activate(in, f, k, rep, f->offset + rep, seed);
            e->st.started++;
            wheel_pop(&e->wheel);
            if (f->next_rep < f->reps)
                wheel_insert(&e->wheel, src, f->start + f->next_rep * f->rep_period,
                             f->offset + f->next_rep);
            if (stoch && e->weight[k]) {
                /* FLOR's "immediate" insertion: the tree's next packet (of
                 * any of its flows) is due now, the following ones at the
                 * new aggregate rate. */
                if ((rc = dtree_insert(&e->tree, id, e->weight[k]))) {
                    fail = LOOP_FAIL_TREE;
                    err = rc;
                    break;
                }
                tree_rate(e);
                e->tclock = due;
                continue;
            }
        }

        uint32_t plen = packet_payload_len(f, in);
        uint32_t flen = f->hdr_len + plen;
        uint8_t *frame = sink_frame(&e->sink, due, in->serial, flen);
        if (!frame) {
            fail = LOOP_FAIL_SINK;
            err = e->sink.err;
            break;
        }
        packet_write(f, in, frame, plen);
        if (csum)
            offload_fix(f, frame, flen);
        in->sent++;
        in->bytes += flen;
        stats_packet(&e->st, flen);
        if (cnt)
            counters_add(&cnt[in->flow], flen);
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
            uint32_t c = f->klass;
            int64_t len = 0;
            if (!done) {
                in->due = due + f->period;
                len = wheel_fifo_push(&e->wheel, c, id);
                if (len < 0) {
                    fail = LOOP_FAIL_WHEEL;
                    err = (int)len;
                    break;
                }
            }
            if (src < ncls) {
                /* The class left the wheel with its head: back with the new head. */
                if (e->wheel.fifo[c].len) {
                    const struct fe_inst *h = &e->pool.inst[wheel_fifo_head(&e->wheel, c)];
                    wheel_insert_last(&e->wheel, c, h->due, h->serial);
                }
            } else if (len == 1) {
                wheel_insert(&e->wheel, c, in->due, in->serial);
            }
        }
        if (done) {
            e->st.finished++;
            rc = e->flog ? log_inst(e, in) : 0;
            pool_put(&e->pool, id);
            if (rc) {
                fail = LOOP_FAIL_FLOWLOG;
                err = rc;
                break;
            }
        }
    }

    r->fail = fail;
    r->err = err;
    r->status = status;
    r->waiting = waiting;
    r->packets = packets;
    r->unused = max_packets == UINT64_MAX ? 0 : max_packets - packets;
    r->first_ns = first_ns;
    r->last_ns = last_ns;
}

void loop_run(struct loop *e, struct loop_res *r)
{
    run_loop(e, r, 0);
}

void loop_run_worker(struct loop *e, struct loop_res *r)
{
    run_loop(e, r, 1);
}

int loop_init(struct loop *e, const struct fe_session *s, const struct loop_cfg *cfg, uint64_t seed,
              unsigned w, unsigned nthr)
{
    memset(e, 0, sizeof *e);
    sink_init(&e->sink);
    e->cfg = *cfg;
    e->seed = seed;
    e->flows = bigmem_alloc((s->nflows ? s->nflows : 1) * sizeof *e->flows); /* own lines */
    uint64_t cap = s->max_concurrent / nthr + (nthr > 1);
    if (cap > POOL_INITIAL_MAX)
        cap = POOL_INITIAL_MAX;
    if (!e->flows || pool_init(&e->pool, cap))
        return -ENOMEM;
    if (s->nflows)
        memcpy(e->flows, s->flows, s->nflows * sizeof *e->flows);
    uint32_t nclasses, *init_cap = NULL;
    e->nflows = s->nflows;
    for (size_t k = 0; k < s->nflows; k++) {
        struct fe_flow *f = &e->flows[k];
        f->sid = POOL_NONE;
        if (f->kind != FE_K_STREAM)
            packet_prepare(f);
        /* Serial offset + rep belongs to worker (offset + rep) mod nthr. */
        f->next_rep = (w + nthr - f->offset % nthr) % nthr;
        f->rep_step = nthr;
        if (f->kind == FE_K_SESS) {
            /* The arrival stream from repetition 0 to this loop's first. */
            f->arr_rng = sess_arrival_seed(seed, k);
            f->next_start = f->start;
            for (uint64_t r = 0; r < f->next_rep && r + 1 < f->reps; r++)
                f->next_start = sess_arrival_next(f->sess, f->next_start, &f->arr_rng);
        }
        if (nthr > 1)
            f->max_live = f->max_live / nthr + 1;
    }
    if (cfg->stochastic) {
        /* Flows of at least 1 pps and more than one packet go to the tree,
         * weighted by their intensity rounded to pps; the others to the
         * slow-flow calendar (the exact planner's structures). */
        e->weight = calloc(s->nflows ? s->nflows : 1, sizeof *e->weight);
        if (!e->weight || dtree_init(&e->tree, (uint32_t)cap))
            return -ENOMEM;
        for (size_t k = 0; k < s->nflows; k++)
            if (e->flows[k].kind != FE_K_STREAM && e->flows[k].kind != FE_K_SESS &&
                e->flows[k].packets > 1 && e->flows[k].period <= 1000000000u)
                e->weight[k] =
                    (uint32_t)((1000000000u + e->flows[k].period / 2) / e->flows[k].period);
        /* Worker 0 (and the one-thread run) keeps the documented stream. */
        e->trng = rng_mix(seed ^ 0x6a09e667f3bcc909ull) + (uint64_t)w * RNG_GOLDEN;
    }
    if (assign_classes(e, s->nflows, &nclasses, &init_cap) ||
        wheel_init(&e->wheel, nclasses, init_cap, 0)) {
        free(init_cap);
        return -ENOMEM;
    }
    free(init_cap);
    for (size_t k = 0; k < s->nflows; k++) {
        const struct fe_flow *f = &e->flows[k];
        if (f->next_rep < f->reps)
            wheel_insert(&e->wheel, e->nfcls + (uint32_t)k,
                         f->kind == FE_K_SESS ? f->next_start
                                              : f->start + f->next_rep * f->rep_period,
                         f->offset + f->next_rep);
    }
    e->flog_ext = s->nsess > 0;
    if (s->nsess && sess_fit(e))
        return -ENOMEM;
    return 0;
}

void loop_free(struct loop *e)
{
    free(e->flog_buf);
    e->flog_buf = NULL;
    wheel_free(&e->wheel);
    dtree_free(&e->tree);
    free(e->weight);
    e->weight = NULL;
    pool_free(&e->pool);
    free(e->sess);
    e->sess = NULL;
    e->sess_cap = 0;
    free(e->flows);
    e->flows = NULL;
}

const char *loop_failure(const struct loop_res *r, int pcap, int *err)
{
    *err = r->err;
    switch (r->fail) {
    case LOOP_FAIL_STATS:
        return "statistics: write error";
    case LOOP_FAIL_SINK:
        return pcap ? "pcap: write error" : "afpacket: send error";
    case LOOP_FAIL_FLOWLOG:
        return "--flows: write error";
    }
    /* Out of memory: the message names what ran out, no errno after it. */
    *err = 0;
    switch (r->fail) {
    case LOOP_FAIL_POOL:
        return "out of memory (flow instances)";
    case LOOP_FAIL_TREE:
        return "out of memory (distribution tree)";
    case LOOP_FAIL_WHEEL:
        return "out of memory (scheduler)";
    }
    return NULL;
}
