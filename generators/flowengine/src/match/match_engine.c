/* match_engine.c - see match_engine.h. */
#include "match_engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WHEEL_SLOTS 1024
#define NO_CURSOR UINT64_MAX

struct wheel_slot {
    struct match_key *keys;
    uint32_t n, cap;
};

struct match_engine {
    struct match_engine_params p;
    void *table;
    struct match_stats st;
    struct wheel_slot *wheel; /* NULL without timeouts */
    int64_t granule;
    uint64_t cursor; /* granule of the next slot to sweep */
    uint64_t wheel_bytes;
};

int match_engine_create(struct match_engine **out, const struct match_engine_params *p)
{
    if (!p->ops || !p->hash || p->idle_ns < 0 || p->active_ns < 0 ||
        ((p->idle_ns || p->active_ns) && !p->budget))
        return -EINVAL;
    struct match_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->p = *p;
    int rc = p->ops->create(&e->table, &p->table);
    if (rc) {
        free(e);
        return rc;
    }
    if (p->idle_ns || p->active_ns) {
        int64_t shortest = !p->idle_ns ? p->active_ns
                           : !p->active_ns
                               ? p->idle_ns
                               : (p->idle_ns < p->active_ns ? p->idle_ns : p->active_ns);
        e->granule = shortest / 128 > 0 ? shortest / 128 : 1;
        e->wheel = calloc(WHEEL_SLOTS, sizeof *e->wheel);
        if (!e->wheel) {
            match_engine_free(e);
            return -ENOMEM;
        }
    }
    e->cursor = NO_CURSOR;
    *out = e;
    return 0;
}

void match_engine_free(struct match_engine *e)
{
    if (!e)
        return;
    if (e->wheel)
        for (int i = 0; i < WHEEL_SLOTS; i++)
            free(e->wheel[i].keys);
    free(e->wheel);
    e->p.ops->destroy(e->table);
    free(e);
}

static int64_t flow_due(const struct match_engine *e, const struct match_count *f)
{
    int64_t due = INT64_MAX;
    if (e->p.idle_ns)
        due = f->last_ns + e->p.idle_ns;
    if (e->p.active_ns && f->first_ns + e->p.active_ns < due)
        due = f->first_ns + e->p.active_ns;
    return due;
}

/* File KEY under DUE: never in the slot being swept, never beyond the wheel's
 * turn (a far record comes round early and is put back). */
static int wheel_add(struct match_engine *e, const struct match_key *key, int64_t due)
{
    uint64_t g = due > 0 ? (uint64_t)(due / e->granule) : 0;
    if (g <= e->cursor)
        g = e->cursor + 1;
    if (g - e->cursor >= WHEEL_SLOTS)
        g = e->cursor + WHEEL_SLOTS - 1;
    struct wheel_slot *s = &e->wheel[g % WHEEL_SLOTS];
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 16;
        struct match_key *k = realloc(s->keys, (size_t)cap * sizeof *k);
        if (!k)
            return -ENOMEM;
        e->wheel_bytes += (uint64_t)(cap - s->cap) * sizeof *k;
        s->keys = k;
        s->cap = cap;
    }
    s->keys[s->n++] = *key;
    e->st.wheel_records++;
    return 0;
}

static void close_flow(struct match_engine *e, const struct match_key *key,
                       const struct match_count *c)
{
    if (e->p.on_close) {
        struct match_flow f = { .key = *key, .c = *c };
        e->p.on_close(&f, e->p.on_close_arg);
    }
}

/* At most BUDGET steps of the sweep up to NOW; returns the probes spent. */
static uint64_t sweep(struct match_engine *e, int64_t now, uint64_t *steps_out)
{
    uint64_t target = now > 0 ? (uint64_t)(now / e->granule) : 0, steps = 0, probes = 0;
    if (e->cursor == NO_CURSOR)
        e->cursor = target;
    while (steps < e->p.budget && e->cursor <= target) {
        struct wheel_slot *s = &e->wheel[e->cursor % WHEEL_SLOTS];
        steps++;
        if (!s->n) {
            e->cursor++;
            continue;
        }
        struct match_key key = s->keys[--s->n];
        e->st.wheel_records--;
        uint64_t h = match_key_hash(e->p.ops, e->p.hash, e->p.seed, &key);
        struct match_count *f;
        int rc = e->p.ops->find(e->table, &key, h, 0, &f);
        if (rc < 0)
            continue; /* cannot happen: a live flow has exactly one record */
        probes += (uint64_t)rc;
        int64_t due = flow_due(e, f);
        if (due <= now) {
            close_flow(e, &key, f);
            e->p.ops->remove(e->table, &key, h);
            e->st.expired_sweep++;
        } else {
            wheel_add(e, &key, due);
        }
    }
    *steps_out = steps;
    return probes;
}

/* Count the packet (LEN, TS) in F, found by a lookup of PROBES probes after
 * STEPS expiry steps that took WORK probes. */
static void count_packet(struct match_engine *e, const struct match_key *key, struct match_count *f,
                         uint64_t probes, uint64_t work, uint64_t steps, uint32_t len, int64_t ts)
{
    e->st.hist[probes < MATCH_HIST ? probes : MATCH_HIST]++;
    e->st.probe_sum += probes;
    if (probes > e->st.probe_max)
        e->st.probe_max = probes;
    work += probes;
    if (work > e->st.work_max)
        e->st.work_max = work;
    if (steps > e->st.steps_max)
        e->st.steps_max = steps;
    int fresh = !f->packets; /* inserted just now */
    if (fresh) {
        e->st.inserts++;
    } else if (e->wheel && ts >= flow_due(e, f)) {
        close_flow(e, key, f); /* the same key starts again in place; its wheel record stays */
        f->packets = f->bytes = 0;
        e->st.expired_on_hit++;
    }
    if (!f->packets) {
        f->first_ns = f->last_ns = ts;
        if (fresh && e->wheel)
            wheel_add(e, key, flow_due(e, f)); /* -ENOMEM: the flow ends on a hit only */
    } else {
        if (ts < f->first_ns)
            f->first_ns = ts;
        if (ts > f->last_ns)
            f->last_ns = ts;
    }
    f->packets++;
    f->bytes += len;
}

/* One packet whose key hashes to H; the flow it was counted in (NULL:
 * refused) in *OUT and its lookup's probes in *PROBES. */
static int packet_found(struct match_engine *e, const struct match_key *key, uint64_t h,
                        uint32_t len, int64_t ts, struct match_count **out, int *probes)
{
    uint64_t steps = 0, work = 0;
    e->st.packets++;
    if (e->wheel)
        work = sweep(e, ts, &steps);
    struct match_count *f;
    int rc = e->p.ops->find(e->table, key, h, 1, &f);
    *out = NULL;
    if (rc < 0) {
        e->st.refused++;
        return rc;
    }
    count_packet(e, key, f, (uint64_t)rc, work, steps, len, ts);
    *out = f;
    *probes = rc;
    return 0;
}

static int packet_hashed(struct match_engine *e, const struct match_key *key, uint64_t h,
                         uint32_t len, int64_t ts)
{
    struct match_count *f;
    int probes;
    return packet_found(e, key, h, len, ts, &f, &probes);
}

int match_engine_packet(struct match_engine *e, const struct match_key *key, uint32_t len,
                        int64_t ts_ns)
{
    return packet_hashed(e, key, match_key_hash(e->p.ops, e->p.hash, e->p.seed, key), len, ts_ns);
}

/* The hashes of the N (<= MATCH_AHEAD) keys at KEYS into OUT: by the hash's
 * bulk loop when the engine has its registry entry (one call a block, the key
 * length a constant inside), else key by key. */
static void hash_block(const struct match_engine *e, const struct match_key *keys, size_t n,
                       uint64_t *out)
{
    if (!e->p.algo) {
        for (size_t i = 0; i < n; i++)
            out[i] = match_key_hash(e->p.ops, e->p.hash, e->p.seed, &keys[i]);
    } else if (e->p.ops->key_bytes == 16) {
        struct match_key16 packed[MATCH_AHEAD];
        for (size_t i = 0; i < n; i++)
            match_key_pack16(&keys[i], &packed[i]);
        hash_bulk(e->p.algo, packed, sizeof *packed, sizeof *packed, n, e->p.seed, out);
    } else {
        hash_bulk(e->p.algo, keys, sizeof *keys, sizeof *keys, n, e->p.seed, out);
    }
}

/* The hashes of N (<= MATCH_BLOCK) keys, and their home lines staged (the
 * table's stage op: computed and prefetched). */
static void stage_block(const struct match_engine *e, const struct match_key *keys, size_t n,
                        uint64_t *h, uint64_t *line)
{
    for (size_t i = 0; i < n; i += MATCH_AHEAD)
        hash_block(e, &keys[i], n - i < MATCH_AHEAD ? n - i : MATCH_AHEAD, &h[i]);
    e->p.ops->stage(e->table, h, n, line);
}

/* match_engine_bulk with the table's staged lookup (no timeouts), three
 * blocks of MATCH_BLOCK keys in flight: block b + 2 hashed and its home lines
 * prefetched (stage), block b + 1's lines, in cache by now, asked for what
 * they point to (prefetch_next, if the table has it), block b compared from
 * its lines; a miss goes the one-packet way (find with insert). A packet of
 * the key of the packet before, a hit, is counted in its flow without a
 * lookup, as in match_engine_bulk. Counts as packet_found would. */
static void staged_bulk(struct match_engine *e, const struct match_key *keys, const uint32_t *len,
                        const int64_t *ts_ns, size_t n)
{
    uint64_t h[3][MATCH_BLOCK], line[3][MATCH_BLOCK];
    void (*next)(void *, uint64_t) = e->p.ops->prefetch_next;
    struct match_count *last = NULL; /* the flow of the packet before, when it was a hit */
    int last_probes = 0;
    for (size_t b = 0; b < n && b < 2 * MATCH_BLOCK; b += MATCH_BLOCK)
        stage_block(e, &keys[b], n - b < MATCH_BLOCK ? n - b : MATCH_BLOCK, h[b / MATCH_BLOCK],
                    line[b / MATCH_BLOCK]);
    for (size_t b = 0; b < n; b += MATCH_BLOCK) {
        size_t cur = (b / MATCH_BLOCK) % 3, m = n - b < MATCH_BLOCK ? n - b : MATCH_BLOCK;
        size_t b2 = b + 2 * MATCH_BLOCK, b1 = b + MATCH_BLOCK;
        if (b2 < n)
            stage_block(e, &keys[b2], n - b2 < MATCH_BLOCK ? n - b2 : MATCH_BLOCK, h[(cur + 2) % 3],
                        line[(cur + 2) % 3]);
        for (size_t j = 0; next && b1 + j < n && j < MATCH_BLOCK; j++)
            next(e->table, h[(cur + 1) % 3][j]);
        for (size_t j = 0; j < m; j++) {
            size_t i = b + j;
            if (last && i && match_key_eq(&keys[i], &keys[i - 1])) {
                e->st.packets++; /* the key of the packet before: its flow, no lookup */
                count_packet(e, &keys[i], last, (uint64_t)last_probes, 0, 0, len[i], ts_ns[i]);
                continue;
            }
            int rc = e->p.ops->find_line(e->table, &keys[i], line[cur][j], &last);
            if (rc < 0) {
                packet_found(e, &keys[i], h[cur][j], len[i], ts_ns[i], &last, &last_probes);
                last = NULL; /* inserted now (or refused): see match_engine_bulk */
                continue;
            }
            last_probes = rc;
            e->st.packets++;
            count_packet(e, &keys[i], last, (uint64_t)rc, 0, 0, len[i], ts_ns[i]);
        }
    }
}

void match_engine_bulk(struct match_engine *e, const struct match_key *keys, const uint32_t *len,
                       const int64_t *ts_ns, size_t n)
{
    if (e->p.ops->stage && e->p.ops->find_line && !e->wheel) {
        staged_bulk(e, keys, len, ts_ns, n);
        return;
    }
    /* The hashes of two blocks of MATCH_AHEAD packets: packet i's is
     * h[(i / MATCH_AHEAD) % 2][i % MATCH_AHEAD]; the next block is hashed when
     * a block starts, so packet i + MATCH_AHEAD's hash is there for its
     * prefetch at packet i. */
    uint64_t h[2][MATCH_AHEAD];
    uint8_t again[MATCH_AHEAD]; /* packet i has the key of packet i - 1 */
    void (*next)(void *, uint64_t) = e->p.ops->prefetch_next;
#define HASH_OF(i) h[((i) / MATCH_AHEAD) % 2][(i) % MATCH_AHEAD]
    /* The last packet's flow and probes: a packet of the same key as the one
     * before it is counted there without a lookup when nothing can have moved
     * or removed that flow in between (no expiry: no wheel). Its line is not
     * prefetched again. Not after an insert, whose probes may differ from a
     * later lookup's. */
    struct match_count *last = NULL;
    int last_probes = 0;
    hash_block(e, keys, n < MATCH_AHEAD ? n : MATCH_AHEAD, h[0]);
    for (size_t i = 0; i < n && i < MATCH_AHEAD; i++) {
        again[i] = i && match_key_eq(&keys[i], &keys[i - 1]);
        if (!again[i])
            e->p.ops->prefetch(e->table, h[0][i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (i % MATCH_AHEAD == 0 && i + MATCH_AHEAD < n) {
            size_t b = i + MATCH_AHEAD, m = n - b < MATCH_AHEAD ? n - b : MATCH_AHEAD;
            hash_block(e, &keys[b], m, h[(b / MATCH_AHEAD) % 2]);
        }
        uint64_t hi = HASH_OF(i);
        int repeat = again[i % MATCH_AHEAD];
        if (next && i + MATCH_AHEAD / 2 < n && !again[(i + MATCH_AHEAD / 2) % MATCH_AHEAD])
            next(e->table, HASH_OF(i + MATCH_AHEAD / 2));
        if (i + MATCH_AHEAD < n) {
            size_t a = i + MATCH_AHEAD;
            again[i % MATCH_AHEAD] = (uint8_t)match_key_eq(&keys[a], &keys[a - 1]);
            if (!again[i % MATCH_AHEAD])
                e->p.ops->prefetch(e->table, HASH_OF(a));
        }
        if (last && repeat && !e->wheel) {
            e->st.packets++;
            count_packet(e, &keys[i], last, (uint64_t)last_probes, 0, 0, len[i], ts_ns[i]);
            continue;
        }
        packet_found(e, &keys[i], hi, len[i], ts_ns[i], &last, &last_probes);
        if (last && last->packets == 1)
            last = NULL; /* inserted now: a lookup of it may take other probes than the insert */
    }
#undef HASH_OF
}

void match_engine_walk(struct match_engine *e, void (*fn)(const struct match_flow *, void *),
                       void *arg)
{
    e->p.ops->walk(e->table, fn, arg);
}

const struct match_stats *match_engine_stats(const struct match_engine *e)
{
    return &e->st;
}
void match_engine_reset_stats(struct match_engine *e)
{
    uint64_t records = e->st.wheel_records;
    memset(&e->st, 0, sizeof e->st);
    e->st.wheel_records = records;
}

void *match_engine_table(const struct match_engine *e)
{
    return e->table;
}

uint64_t match_engine_memory(const struct match_engine *e)
{
    return e->p.ops->memory(e->table) + e->wheel_bytes;
}
