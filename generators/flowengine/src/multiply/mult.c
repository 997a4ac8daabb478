/* mult.c - the multiplier's rewrite core; see mult.h for the contract. */
#include "mult.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "csum.h"
#include "hash.h"
#include "rng.h"

__extension__ typedef unsigned __int128 mult_u128;

#define MULT_NONE UINT32_MAX
#define MULT_MAX_SIZE (1ull << 62) /* addresses of a family's ranges taken into account */

/* A planned shadow of an address in one copy, with the one's complement
 * difference (shadow - original) that the checksums of its packets take. */
struct mult_shadow {
    uint8_t a[16];
    uint16_t delta;
};

/* HTTP requests of one flow whose URL is substituted: the shadow sessions'
 * byte streams shift by (URL length - original length) after each. */
struct mult_req {
    uint32_t seq;    /* sequence number of the request's first byte */
    uint32_t ip_len; /* the original packet's IP length */
    uint16_t olen;   /* length of the original request target */
    uint8_t dir;     /* 0: a -> b */
};
struct mult_reqs {
    uint32_t n;
    struct mult_req r[MULT_MAX_REQUESTS];
};

struct mult_flow {
    uint8_t a[16], b[16];
    uint16_t pa, pb;
    uint8_t family, proto;
    uint8_t pad[2];
    uint32_t ia, ib; /* address indexes of a and b in their family */
    uint64_t packets[2];
    struct mult_reqs *reqs; /* NULL until the flow's first substituted request */
};
#define MULT_FLOW_KEY offsetof(struct mult_flow, pad)

/* One side of a sided plan (mult_params.home): its ranges, its affine map, its addresses. */
struct mult_side {
    const struct mult_range *r[MULT_MAX_RANGES];
    uint64_t rsize[MULT_MAX_RANGES];
    uint32_t nr, n, m;
    uint64_t size, mul, add;
};

/* Open addressing over a dense array: slot holds the dense index + 1 (0: empty). */
struct mult_index {
    uint32_t *slot;
    uint32_t mask;
};

struct mult_family {
    uint8_t (*addr)[16]; /* dense, in order of first appearance */
    uint32_t n, cap;
    struct mult_index ix;
    struct mult_shadow *shadow; /* [idx * T + c - 1]; NULL until planned */
    uint32_t m;                 /* M: addresses the plan has room for */
    uint64_t size;              /* S: addresses of the family's ranges */
    uint64_t mul, add;          /* the affine map */
    const struct mult_range *r[MULT_MAX_RANGES];
    uint64_t rsize[MULT_MAX_RANGES];
    uint32_t nr;
    struct mult_side side[2]; /* sided plan: [0] the others, [1] the home side */
    uint32_t *sidx, scap;     /* sided plan: each address's index within its side */
};

struct mult {
    struct mult_params p;
    uint32_t T;
    struct mult_flow *flows;
    uint32_t nflows, capflows;
    struct mult_index fix;
    struct mult_family fam[2]; /* [0]: IPv4, [1]: IPv6 */
    uint16_t port_off[MULT_MAX_COPIES + 1];
    uint16_t *ulen;
    uint32_t maxulen;
    struct mult_stats st;
};

/* The parse of one frame: offsets into it and what the rewrite needs. */
struct mult_hdr {
    uint32_t l3, l4, end; /* l4 = 0: no upper-layer header here (later fragment) */
    uint8_t family, proto, frag, vlan, ext, icmp_err;
    uint16_t sport, dport;
    uint32_t csum_off; /* offset of the L4 checksum, 0: none to update */
    int has_ports;     /* TCP/UDP/UDP-Lite/DCCP/SCTP */
    /* an ICMP error's quoted packet: its IP header (0: none whole in the capture), its L4
     * header (0: not rewritten), the offset of its L4 checksum (0: none to update), its ports */
    uint32_t in3, in4, in_csum;
    uint8_t in_proto, in_ports;
    uint16_t in_sport, in_dport;
};

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* One's complement difference new - old of a 16-bit word, for csum_fold. */
static inline uint64_t mult_d16(uint16_t old, uint16_t neu)
{
    return (uint64_t)(uint16_t)~old + neu;
}
static inline uint64_t mult_d32(uint32_t old, uint32_t neu)
{
    return mult_d16((uint16_t)(old >> 16), (uint16_t)(neu >> 16)) +
           mult_d16((uint16_t)old, (uint16_t)neu);
}
/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), the differences summed in d. */
static inline uint16_t mult_csum_apply(uint16_t hc, uint64_t d)
{
    return (uint16_t)~csum_fold((uint64_t)(uint16_t)~hc + d);
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* The packet an ICMP error quotes, when its IP header is whole in the capture: rewritten like
 * the packets of its own flow, so a shadow error speaks of a shadow packet. */
static void mult_quoted(struct mult_hdr *h, const uint8_t *f)
{
    const uint32_t q = h->l4 + 8, end = h->end;
    uint32_t q4;
    uint8_t pr;
    if (h->proto == 1) {
        if (q + 20 > end || (f[q] >> 4) != 4)
            return;
        uint32_t ihl = (f[q] & 15u) * 4;
        if (ihl < 20 || q + ihl > end)
            return;
        pr = f[q + 9];
        q4 = (rd16(f + q + 6) & 0x1fff) ? 0 : q + ihl;
    } else {
        if (q + 40 > end || (f[q] >> 4) != 6)
            return;
        pr = f[q + 6];
        /* behind extension headers the quoted upper layer keeps its bytes */
        q4 = (pr == 0 || pr == 43 || pr == 44 || pr == 60 || pr == 51 || pr == 50 || pr == 135)
                 ? 0
                 : q + 40;
    }
    h->in3 = q;
    h->in_proto = pr;
    h->csum_off = h->l4 + 2; /* the ICMP checksum covers the quoted bytes */
    if (!q4)
        return;
    h->in4 = q4;
    if ((pr == 6 || pr == 17) && q4 + 4 <= end) {
        h->in_ports = 1;
        h->in_sport = rd16(f + q4);
        h->in_dport = rd16(f + q4 + 2);
    }
    if (pr == 17 && q4 + 8 <= end && !(h->family == 4 && rd16(f + q4 + 6) == 0))
        h->in_csum = q4 + 6;
    else if (pr == 6 && q4 + 18 <= end)
        h->in_csum = q4 + 16;
    else if (pr == 58 && q4 + 4 <= end)
        h->in_csum = q4 + 2;
}

static int mult_l4(struct mult_hdr *h, const uint8_t *f)
{
    const uint32_t l4 = h->l4, room = h->end - l4;
    const uint8_t pr = h->proto;
    if (h->frag == 2) {
        h->l4 = 0;
        return 0;
    }
    if (pr == 6 || pr == 17 || pr == 136 || pr == 33 || pr == 132) {
        if (room < 4)
            return -MULT_PASS_TRUNCATED - 1;
        h->sport = rd16(f + l4);
        h->dport = rd16(f + l4 + 2);
        h->has_ports = 1;
        if (pr == 6) {
            if (room < 18)
                return -MULT_PASS_TRUNCATED - 1;
            h->csum_off = l4 + 16;
        } else if (pr != 132) {
            if (room < 8)
                return -MULT_PASS_TRUNCATED - 1;
            h->csum_off = l4 + 6;
            /* IPv4 UDP with no checksum: stays without one */
            if (pr == 17 && h->family == 4 && rd16(f + l4 + 6) == 0)
                h->csum_off = 0;
        }
    } else if (pr == 1 || pr == 58) {
        if (room < 4)
            return -MULT_PASS_TRUNCATED - 1;
        uint8_t t = f[l4];
        int echo = pr == 1 ? (t == 8 || t == 0) : (t == 128 || t == 129);
        if (echo && room >= 6)
            h->sport = h->dport = rd16(f + l4 + 4);
        h->icmp_err =
            pr == 1 ? (t == 3 || t == 4 || t == 5 || t == 11 || t == 12) : (t >= 1 && t <= 4);
        if (pr == 58)
            h->csum_off = l4 + 2;
        if (h->icmp_err)
            mult_quoted(h, f);
    }
    return 0;
}

static int mult_parse(const uint8_t *f, uint32_t len, struct mult_hdr *h)
{
    memset(h, 0, sizeof *h);
    if (len < 14)
        return -MULT_PASS_NOT_IP - 1;
    uint32_t off = 12;
    uint16_t et = rd16(f + off);
    while ((et == 0x8100 || et == 0x88a8 || et == 0x9100) && h->vlan < 2) {
        if (len < off + 6)
            return -MULT_PASS_NOT_IP - 1;
        off += 4;
        h->vlan++;
        et = rd16(f + off);
    }
    off += 2;
    h->l3 = off;
    if (et == 0x0800) {
        if (len < off + 20 || (f[off] >> 4) != 4)
            return -MULT_PASS_TRUNCATED - 1;
        uint32_t ihl = (f[off] & 15u) * 4, tot = rd16(f + off + 2);
        if (ihl < 20 || len < off + ihl || tot < ihl)
            return -MULT_PASS_TRUNCATED - 1;
        for (uint32_t o = 20; o < ihl;) { /* loose and strict source routes */
            uint8_t t = f[off + o];
            if (t == 0)
                break;
            if (t == 1) {
                o++;
                continue;
            }
            if (t == 0x83 || t == 0x89)
                return -MULT_PASS_ROUTING - 1;
            if (o + 1 >= ihl || f[off + o + 1] < 2)
                break;
            o += f[off + o + 1];
        }
        h->family = 4;
        h->proto = f[off + 9];
        h->end = off + tot < len ? off + tot : len;
        uint16_t fo = rd16(f + off + 6);
        if (fo & 0x1fff)
            h->frag = 2;
        else if (fo & 0x2000)
            h->frag = 1;
        if (h->proto == 51 || h->proto == 50)
            return -MULT_PASS_AUTH - 1;
        h->l4 = off + ihl;
        return mult_l4(h, f);
    }
    if (et == 0x86dd) {
        if (len < off + 40 || (f[off] >> 4) != 6)
            return -MULT_PASS_TRUNCATED - 1;
        h->family = 6;
        uint32_t pl = rd16(f + off + 4);
        h->end = off + 40 + pl < len ? off + 40 + pl : len;
        uint8_t nh = f[off + 6];
        uint32_t o = off + 40;
        for (;;) {
            if (nh == 0 || nh == 60 || nh == 43 || nh == 135 || nh == 44) {
                if (h->end < o + 8)
                    return -MULT_PASS_TRUNCATED - 1;
                h->ext = 1;
                if (nh == 43 && f[o + 3] != 0)
                    return -MULT_PASS_ROUTING - 1;
                if (nh == 44) {
                    uint16_t fo = rd16(f + o + 2);
                    h->frag = (fo & 0xfff8) ? 2 : 1;
                    nh = f[o];
                    o += 8;
                    if (h->frag == 2)
                        break;
                    continue;
                }
                uint32_t hl = ((uint32_t)f[o + 1] + 1) * 8;
                nh = f[o];
                o += hl;
                continue;
            }
            if (nh == 51 || nh == 50)
                return -MULT_PASS_AUTH - 1;
            break;
        }
        if (o > h->end)
            return -MULT_PASS_TRUNCATED - 1;
        h->proto = nh;
        h->l4 = o;
        return mult_l4(h, f);
    }
    return -MULT_PASS_NOT_IP - 1;
}

/* ---- tables ----------------------------------------------------------------------------- */

static int mult_index_init(struct mult_index *ix, uint32_t entries)
{
    uint32_t cap = 16;
    while (cap < 2ull * entries && cap < (1u << 31))
        cap <<= 1;
    ix->slot = calloc(cap, sizeof *ix->slot);
    ix->mask = cap - 1;
    return ix->slot ? 0 : -ENOMEM;
}

static const uint8_t *mult_flow_key(const void *base, uint32_t i)
{
    return (const uint8_t *)&((const struct mult_flow *)base)[i];
}
static const uint8_t *mult_addr_key(const void *base, uint32_t i)
{
    return ((const uint8_t(*)[16])base)[i];
}

/* The slot of key in ix (its value, or the empty slot where it goes). */
static inline uint32_t *mult_index_find(const struct mult_index *ix, const void *base,
                                        const uint8_t *(*at)(const void *, uint32_t),
                                        const uint8_t *key, size_t n)
{
    uint32_t i = (uint32_t)hash_crc32c(key, n, 0) & ix->mask; /* the project's one hash (hash.h) */
    for (;;) {
        uint32_t *s = &ix->slot[i];
        if (!*s || !memcmp(at(base, *s - 1), key, n))
            return s;
        i = (i + 1) & ix->mask;
    }
}

/* Doubles ix when count reaches half of it (offline tables grow; live ones never get here). */
static int mult_index_grow(struct mult_index *ix, uint32_t count, const void *base,
                           const uint8_t *(*at)(const void *, uint32_t), size_t n)
{
    if (2ull * (count + 1) <= (uint64_t)ix->mask + 1)
        return 0;
    struct mult_index nx;
    if (mult_index_init(&nx, (ix->mask + 1)) < 0)
        return -ENOMEM;
    for (uint32_t i = 0; i < count; i++)
        *mult_index_find(&nx, base, at, at(base, i), n) = i + 1;
    free(ix->slot);
    *ix = nx;
    return 0;
}

static int mult_grow(void **arr, uint32_t *cap, size_t elem, uint32_t need)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

static void mult_plan_addr(struct mult *m, struct mult_family *fm, uint32_t idx);
static int mult_home_has(const struct mult *m, const struct mult_family *fm, const uint8_t *a16);

/* The index of addr in its family, adding it when new. -ENOSPC past the bound. */
static int64_t mult_addr_get(struct mult *m, struct mult_family *fm, const uint8_t *a16)
{
    uint32_t *s = mult_index_find(&fm->ix, fm->addr, mult_addr_key, a16, 16);
    if (*s)
        return *s - 1;
    if (fm->n >= m->p.max_addrs)
        return -ENOSPC;
    if (!m->p.live) {
        if (mult_grow((void **)&fm->addr, &fm->cap, 16, fm->n + 1) < 0)
            return -ENOMEM;
        if (m->p.nhome && mult_grow((void **)&fm->sidx, &fm->scap, sizeof *fm->sidx, fm->n + 1) < 0)
            return -ENOMEM;
    }
    uint32_t i = fm->n++;
    memcpy(fm->addr[i], a16, 16);
    if (m->p.nhome)
        fm->sidx[i] = fm->side[mult_home_has(m, fm, a16)].n++;
    *s = i + 1;
    if (!m->p.live && mult_index_grow(&fm->ix, fm->n, fm->addr, mult_addr_key, 16) < 0)
        return -ENOMEM;
    if (m->p.live)
        mult_plan_addr(m, fm, i);
    return i;
}

/* The flow of a parsed frame and its direction (0: src is endpoint a); NULL with *rc set
 * when it cannot be added. */
static struct mult_flow *mult_flow_get_or_add(struct mult *m, const uint8_t *f,
                                              const struct mult_hdr *h, int *dir, int *rc)
{
    struct mult_flow k;
    const uint32_t al = h->family == 4 ? 4 : 16, so = h->family == 4 ? 12 : 8;
    const uint8_t *src = f + h->l3 + so, *dst = src + al;
    uint8_t s16[16] = { 0 }, d16[16] = { 0 };
    memcpy(s16, src, al);
    memcpy(d16, dst, al);
    int c = memcmp(s16, d16, 16);
    if (!c)
        c = (h->sport > h->dport) - (h->sport < h->dport);
    *dir = c > 0;
    memset(&k, 0, MULT_FLOW_KEY);
    memcpy(k.a, *dir ? d16 : s16, 16);
    memcpy(k.b, *dir ? s16 : d16, 16);
    k.pa = *dir ? h->dport : h->sport;
    k.pb = *dir ? h->sport : h->dport;
    k.family = h->family;
    k.proto = h->proto;
    uint32_t *s =
        mult_index_find(&m->fix, m->flows, mult_flow_key, (const uint8_t *)&k, MULT_FLOW_KEY);
    if (*s)
        return &m->flows[*s - 1];
    if (m->nflows >= m->p.max_flows) {
        *rc = -ENOSPC;
        return NULL;
    }
    struct mult_family *fm = &m->fam[h->family == 6];
    int64_t ia = mult_addr_get(m, fm, k.a), ib = ia < 0 ? ia : mult_addr_get(m, fm, k.b);
    if (ia < 0 || ib < 0) {
        *rc = (int)(ia < 0 ? ia : ib);
        return NULL;
    }
    if (!m->p.live &&
        mult_grow((void **)&m->flows, &m->capflows, sizeof *m->flows, m->nflows + 1) < 0) {
        *rc = -ENOMEM;
        return NULL;
    }
    uint32_t i = m->nflows++;
    struct mult_flow *fl = &m->flows[i];
    *fl = k;
    fl->ia = (uint32_t)ia;
    fl->ib = (uint32_t)ib;
    fl->packets[0] = fl->packets[1] = 0;
    fl->reqs = NULL;
    *s = i + 1;
    if (!m->p.live &&
        mult_index_grow(&m->fix, m->nflows, m->flows, mult_flow_key, MULT_FLOW_KEY) < 0) {
        *rc = -ENOMEM;
        return NULL;
    }
    return fl;
}

/* ---- the plan --------------------------------------------------------------------------- */

static uint64_t mult_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The affine map x -> (mul * x + add) mod size of one stream of the seed. */
static void mult_affine(uint64_t seed, uint64_t stream, uint64_t size, uint64_t *mul, uint64_t *add)
{
    uint64_t st = rng_seed(seed, stream);
    if (size <= 1) {
        *mul = 1;
        *add = 0;
        return;
    }
    uint64_t a = (rng_next(&st) % (size - 1)) + 1;
    while (mult_gcd(a, size) != 1)
        a = a % (size - 1) + 1;
    *mul = a;
    *add = rng_next(&st) % size;
}

static void mult_family_map(struct mult *m, struct mult_family *fm, int fi)
{
    mult_affine(m->p.seed, 0x6d756c7400ull + (uint64_t)fi, fm->size, &fm->mul, &fm->add);
    for (int s = 0; s < 2 && m->p.nhome; s++) /* each side a stream of its own */
        mult_affine(m->p.seed, 0x6d756c7402ull + (uint64_t)(2 * s + fi), fm->side[s].size,
                    &fm->side[s].mul, &fm->side[s].add);
}

int mult_range_has(const struct mult_range *r, int family, const uint8_t *a)
{
    if (r->family != family)
        return 0;
    for (unsigned b = 0; b < r->plen; b++)
        if ((a[b / 8] ^ r->addr[b / 8]) & (0x80u >> (b % 8)))
            return 0;
    return 1;
}

/* 1 when a16 (an address of fm) is inside a home CIDR. */
static int mult_home_has(const struct mult *m, const struct mult_family *fm, const uint8_t *a16)
{
    for (uint32_t i = 0; i < m->p.nhome; i++)
        if (mult_range_has(&m->p.home[i], fm == &m->fam[0] ? 4 : 6, a16))
            return 1;
    return 0;
}

/* Shadow number off of the ranges r (sizes rs) as address idx's shadow in copy c. */
static void mult_shadow_set(struct mult *m, struct mult_family *fm, uint32_t idx, uint32_t c,
                            const struct mult_range *const *r, const uint64_t *rs, uint64_t off)
{
    const uint32_t al = fm == &m->fam[0] ? 4 : 16;
    uint32_t k = 0;
    while (off >= rs[k])
        off -= rs[k++];
    struct mult_shadow *sh = &fm->shadow[(size_t)idx * m->T + c - 1];
    memset(sh->a, 0, 16);
    memcpy(sh->a, r[k]->addr, al);
    for (int b = (int)al - 1; b >= 0 && off; b--) { /* base (host bits zero) + off */
        uint64_t v = sh->a[b] + (off & 0xff);
        sh->a[b] = (uint8_t)v;
        off = (off >> 8) + (v >> 8);
    }
    uint64_t old = csum_partial(fm->addr[idx], al, 0), neu = csum_partial(sh->a, al, 0);
    sh->delta = csum_fold((uint64_t)(uint16_t)~csum_fold(old) + csum_fold(neu));
}

/* The sided plan of address idx: x = (c-1) * M_side + its index within its side. */
static void mult_plan_side(struct mult *m, struct mult_family *fm, uint32_t idx)
{
    const struct mult_side *sd = &fm->side[mult_home_has(m, fm, fm->addr[idx])];
    for (uint32_t c = 1; c <= m->T; c++) {
        uint64_t x = (uint64_t)(c - 1) * sd->m + fm->sidx[idx];
        mult_shadow_set(m, fm, idx, c, sd->r, sd->rsize,
                        (uint64_t)(((mult_u128)sd->mul * x + sd->add) % sd->size));
    }
}

static void mult_plan_addr(struct mult *m, struct mult_family *fm, uint32_t idx)
{
    if (m->p.nhome) {
        mult_plan_side(m, fm, idx);
        return;
    }
    for (uint32_t c = 1; c <= m->T; c++) {
        uint64_t x = (uint64_t)(c - 1) * fm->m + idx;
        mult_shadow_set(m, fm, idx, c, fm->r, fm->rsize,
                        (uint64_t)(((mult_u128)fm->mul * x + fm->add) % fm->size));
    }
}

static int mult_family_alloc(struct mult *m, struct mult_family *fm, uint32_t mm)
{
    fm->m = mm ? mm : 1;
    free(fm->shadow);
    fm->shadow = calloc((size_t)fm->m * m->T, sizeof *fm->shadow);
    return fm->shadow ? 0 : -ENOMEM;
}

uint64_t mult_plan_need(const struct mult *m, int family)
{
    return (uint64_t)m->T * m->fam[family == 6].n;
}

uint64_t mult_range_size(const struct mult *m, int family)
{
    return m->fam[family == 6].size;
}

uint64_t mult_side_need(const struct mult *m, int family, int home)
{
    return (uint64_t)m->T * m->fam[family == 6].side[home != 0].n;
}

uint64_t mult_side_size(const struct mult *m, int family, int home)
{
    return m->fam[family == 6].side[home != 0].size;
}

/* Offline sided plan: each side's M is its addresses; -ENOSPC when a side's ranges are short. */
static int mult_sides_fit(struct mult *m, struct mult_family *fm)
{
    for (int s = 0; s < 2; s++) {
        struct mult_side *sd = &fm->side[s];
        if ((uint64_t)m->T * sd->n > sd->size)
            return -ENOSPC;
        sd->m = sd->n ? sd->n : 1;
    }
    return 0;
}

int mult_plan(struct mult *m)
{
    for (int fi = 0; fi < 2; fi++) {
        struct mult_family *fm = &m->fam[fi];
        if (!fm->n)
            continue;
        if (m->p.nhome ? mult_sides_fit(m, fm) < 0 : (uint64_t)m->T * fm->n > fm->size)
            return -ENOSPC;
        int rc = mult_family_alloc(m, fm, fm->n);
        if (rc)
            return rc;
        for (uint32_t i = 0; i < fm->n; i++)
            mult_plan_addr(m, fm, i);
    }
    return 0;
}

/* ---- create ----------------------------------------------------------------------------- */

static uint64_t mult_cidr_size(const struct mult_range *r)
{
    uint32_t hb = (r->family == 4 ? 32u : 128u) - r->plen;
    return hb >= 62 ? MULT_MAX_SIZE : 1ull << hb;
}

static int mult_cidr_ok(const struct mult_range *r)
{
    return (r->family == 4 || r->family == 6) && r->plen <= (r->family == 4 ? 32 : 128);
}

/* Live sided plan: each side of a family with ranges has room for max_addrs addresses. */
static int mult_sides_live(struct mult *m, struct mult_family *fm)
{
    if (!fm->side[0].nr && !fm->side[1].nr)
        return 0;
    for (int s = 0; s < 2; s++) {
        if ((uint64_t)m->T * m->p.max_addrs > fm->side[s].size)
            return -ENOSPC;
        fm->side[s].m = m->p.max_addrs;
    }
    fm->sidx = malloc((size_t)m->p.max_addrs * sizeof *fm->sidx);
    fm->scap = m->p.max_addrs;
    return fm->sidx ? mult_family_alloc(m, fm, m->p.max_addrs) : -ENOMEM;
}

/* The sides of a sided plan: [0] the family's ranges, [1] the home ranges. -EINVAL: a bad CIDR. */
static int mult_sides_create(struct mult *m)
{
    for (uint32_t i = 0; i < m->p.nhome; i++)
        if (!mult_cidr_ok(&m->p.home[i]))
            return -EINVAL;
    for (int s = 0; s < 2; s++) {
        const struct mult_range *rg = s ? m->p.home_ranges : m->p.ranges;
        for (uint32_t i = 0, n = s ? m->p.nhome_ranges : m->p.nranges; i < n; i++) {
            if (!mult_cidr_ok(&rg[i]))
                return -EINVAL;
            struct mult_side *sd = &m->fam[rg[i].family == 6].side[s];
            uint64_t sz = mult_cidr_size(&rg[i]);
            sd->r[sd->nr] = &rg[i];
            sd->rsize[sd->nr++] = sz;
            sd->size = sd->size + sz > MULT_MAX_SIZE ? MULT_MAX_SIZE : sd->size + sz;
        }
    }
    return 0;
}

int mult_create(struct mult **out, const struct mult_params *p)
{
    *out = NULL;
    if (p->copies < 1 || p->copies > MULT_MAX_COPIES || !p->nranges ||
        p->nranges > MULT_MAX_RANGES || !p->max_flows || !p->max_addrs ||
        p->nhome > MULT_MAX_RANGES || p->nhome_ranges > MULT_MAX_RANGES ||
        (p->nhome && !p->nhome_ranges))
        return -EINVAL;
    struct mult *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->p = *p;
    m->T = p->copies;
    for (uint32_t i = 0; i < p->nranges; i++) {
        const struct mult_range *r = &p->ranges[i];
        if (!mult_cidr_ok(r)) {
            mult_free(m);
            return -EINVAL;
        }
        struct mult_family *fm = &m->fam[r->family == 6];
        uint64_t sz = mult_cidr_size(r);
        fm->r[fm->nr] = r;
        fm->rsize[fm->nr++] = sz;
        fm->size = fm->size + sz > MULT_MAX_SIZE ? MULT_MAX_SIZE : fm->size + sz;
    }
    if (p->nhome && mult_sides_create(m) < 0) {
        mult_free(m);
        return -EINVAL;
    }
    m->ulen = p->nurls ? calloc(p->nurls, sizeof *m->ulen) : NULL;
    for (uint32_t i = 0; i < p->nurls; i++) {
        size_t n = strlen(p->urls[i]);
        if (!n || n > MULT_MAX_URL) {
            mult_free(m);
            return -EINVAL;
        }
        m->ulen[i] = (uint16_t)n;
        if (n > m->maxulen)
            m->maxulen = (uint32_t)n;
    }
    if (!m->p.max_ip_len)
        m->p.max_ip_len = 1500;
    uint64_t st = rng_seed(p->seed, 0x706f7274ull);
    uint16_t step = (uint16_t)(rng_next(&st) % 64511 + 1);
    for (uint32_t c = 1; c <= m->T; c++)
        m->port_off[c] = (uint16_t)(((uint64_t)step * c) % 64512);
    int rc = 0;
    for (int fi = 0; fi < 2; fi++)
        mult_family_map(m, &m->fam[fi], fi);
    uint32_t fcap = p->live ? p->max_flows : 64, acap = p->live ? p->max_addrs : 64;
    if (mult_index_init(&m->fix, fcap) || mult_index_init(&m->fam[0].ix, acap) ||
        mult_index_init(&m->fam[1].ix, acap))
        rc = -ENOMEM;
    if (!rc && p->live) {
        m->flows = malloc((size_t)p->max_flows * sizeof *m->flows);
        m->capflows = p->max_flows;
        for (int fi = 0; fi < 2 && !rc; fi++) {
            struct mult_family *fm = &m->fam[fi];
            fm->addr = malloc((size_t)p->max_addrs * 16);
            fm->cap = p->max_addrs;
            if (!m->flows || !fm->addr)
                rc = -ENOMEM;
            else if (p->nhome)
                rc = mult_sides_live(m, fm);
            else if (fm->nr && (uint64_t)m->T * p->max_addrs > fm->size)
                rc = -ENOSPC;
            else if (fm->nr)
                rc = mult_family_alloc(m, fm, p->max_addrs);
        }
    }
    if (rc) {
        mult_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void mult_free(struct mult *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < m->nflows; i++)
        free(m->flows[i].reqs);
    free(m->flows);
    free(m->fix.slot);
    for (int fi = 0; fi < 2; fi++) {
        free(m->fam[fi].addr);
        free(m->fam[fi].ix.slot);
        free(m->fam[fi].shadow);
        free(m->fam[fi].sidx);
    }
    free(m->ulen);
    free(m);
}

/* ---- HTTP requests ---------------------------------------------------------------------- */

/* The request target of an HTTP request line starting the TCP payload: its offset and
 * length in *at, *n. 1: found; 0: not a request; -1: looks like one but the line is cut. */
static int mult_http_target(const uint8_t *f, uint32_t pay, uint32_t end, uint32_t *at, uint32_t *n)
{
    static const char *const meth[] = { "GET ",     "POST ",  "HEAD ",    "PUT ",  "DELETE ",
                                        "OPTIONS ", "PATCH ", "CONNECT ", "TRACE " };
    uint32_t room = end - pay, ml = 0;
    for (size_t i = 0; i < sizeof meth / sizeof *meth; i++) {
        uint32_t l = (uint32_t)strlen(meth[i]);
        if (room >= l && !memcmp(f + pay, meth[i], l)) {
            ml = l;
            break;
        }
    }
    if (!ml)
        return 0;
    uint32_t s = pay + ml, e = s;
    while (e < end && f[e] != ' ' && f[e] != '\r' && f[e] != '\n')
        e++;
    if (e + 6 > end || f[e] != ' ' || memcmp(f + e + 1, "HTTP/", 5) || e == s)
        return -1;
    *at = s;
    *n = e - s;
    return 1;
}

/* TCP payload offset of a parsed frame, 0 when none. */
static inline uint32_t mult_tcp_payload(const uint8_t *f, const struct mult_hdr *h)
{
    if (h->proto != 6 || !h->l4 || h->frag)
        return 0;
    uint32_t doff = (uint32_t)(f[h->l4 + 12] >> 4) * 4;
    if (doff < 20 || h->l4 + doff >= h->end)
        return 0;
    return h->l4 + doff;
}

static inline uint32_t mult_ip_len(const uint8_t *f, const struct mult_hdr *h)
{
    return h->family == 4 ? rd16(f + h->l3 + 2) : 40u + rd16(f + h->l3 + 4);
}

/* Does copy c substitute request q (its URL fits)? */
static inline int mult_fits(const struct mult *m, const struct mult_req *q, uint32_t c)
{
    uint32_t ul = m->ulen[(c - 1) % m->p.nurls];
    return (uint64_t)q->ip_len - q->olen + ul <= m->p.max_ip_len;
}

/* Bytes the shadow stream of copy c, direction dir, has gained before position pos. */
static int32_t mult_shift(const struct mult *m, const struct mult_reqs *rq, int dir, uint32_t pos,
                          uint32_t c)
{
    int32_t d = 0;
    for (uint32_t i = 0; i < rq->n; i++) {
        const struct mult_req *q = &rq->r[i];
        if (q->dir == dir && (int32_t)(pos - q->seq) > 0 && mult_fits(m, q, c))
            d += (int32_t)m->ulen[(c - 1) % m->p.nurls] - q->olen;
    }
    return d;
}

/* The address indexes of an ICMP error's quoted packet (added when new). 0, or -1 when one is
 * not planned (offline: unseen by the scan; live: the table is full). */
static int mult_quoted_index(struct mult *m, const uint8_t *f, const struct mult_hdr *h,
                             uint32_t qi[2])
{
    struct mult_family *fm = &m->fam[h->family == 6];
    const uint32_t al = h->family == 4 ? 4 : 16, so = h->family == 4 ? 12 : 8;
    for (int k = 0; k < 2; k++) {
        uint8_t a16[16] = { 0 };
        memcpy(a16, f + h->in3 + so + (uint32_t)k * al, al);
        int64_t i = mult_addr_get(m, fm, a16);
        if (i < 0 || !fm->shadow || (uint32_t)i >= fm->m)
            return -1;
        qi[k] = (uint32_t)i;
    }
    return 0;
}

int mult_scan(struct mult *m, const uint8_t *frame, uint32_t len, uint32_t *need)
{
    struct mult_hdr h;
    if (mult_parse(frame, len, &h) < 0)
        return 0;
    int dir, rc = 0;
    struct mult_flow *fl = mult_flow_get_or_add(m, frame, &h, &dir, &rc);
    if (!fl)
        return rc;
    uint32_t pay, at, n, qi[2];
    if (h.in3)
        mult_quoted_index(m, frame, &h, qi); /* learns the quoted addresses */
    if (m->p.nurls && (pay = mult_tcp_payload(frame, &h)) &&
        h.end == h.l3 + mult_ip_len(frame, &h) &&
        mult_http_target(frame, pay, h.end, &at, &n) == 1) {
        uint32_t want = mult_ip_len(frame, &h) - n + m->maxulen;
        if (need && want > *need)
            *need = want;
    }
    return 0;
}

/* ---- the hot path ----------------------------------------------------------------------- */

size_t mult_room(const struct mult *m, uint32_t len, uint32_t gap)
{
    return (size_t)(m->T + 1) * (gap + len + m->maxulen);
}

/* Rewrites an ICMP error's quoted packet in copy c; returns the one's complement difference
 * this makes to the ICMP message's sum. */
static uint64_t mult_copy_quoted(const struct mult *m, const uint8_t *f, const struct mult_hdr *h,
                                 uint8_t *dst, uint32_t c, const uint32_t qi[2])
{
    const struct mult_family *fm = &m->fam[h->family == 6];
    const struct mult_shadow *qs = &fm->shadow[(size_t)qi[0] * m->T + c - 1];
    const struct mult_shadow *qd = &fm->shadow[(size_t)qi[1] * m->T + c - 1];
    const uint32_t q = h->in3, al = h->family == 4 ? 4 : 16, so = h->family == 4 ? 12 : 8;
    const uint64_t dq = (uint64_t)qs->delta + qd->delta;
    uint64_t d = dq;
    memcpy(dst + q + so, qs->a, al);
    memcpy(dst + q + so + al, qd->a, al);
    if (h->family == 4) {
        uint16_t old = rd16(f + q + 10), neu = mult_csum_apply(old, dq);
        wr16(dst + q + 10, neu);
        d += mult_d16(old, neu);
    }
    uint64_t dp = 0;
    if (h->in_ports && m->p.ports == MULT_PORTS_SHIFT) {
        int sp_hi = h->in_sport > h->in_dport;
        uint16_t p = sp_hi ? h->in_sport : h->in_dport;
        uint16_t np = mult_shadow_port(m, h->in_proto, p, sp_hi ? h->in_dport : h->in_sport, c);
        if (np != p) {
            wr16(dst + h->in4 + (sp_hi ? 0 : 2), np);
            dp = mult_d16(p, np);
            d += dp;
        }
    }
    if (h->in_csum) {
        uint16_t old = rd16(f + h->in_csum), neu = mult_csum_apply(old, dq + dp);
        if (h->in_proto == 17 && neu == 0)
            neu = 0xffff;
        wr16(dst + h->in_csum, neu);
        d += mult_d16(old, neu);
    }
    return d;
}

/* Writes copy c of the parsed frame f at dst, with the URL substituted when tgt_n > 0.
 * Returns the copy's length. */
static uint32_t mult_copy(struct mult *m, const uint8_t *f, uint32_t len, const struct mult_hdr *h,
                          const struct mult_flow *fl, int dir, uint32_t c, uint8_t *dst,
                          uint32_t tgt_at, uint32_t tgt_n, int subst, const uint32_t qi[2])
{
    const struct mult_family *fm = &m->fam[h->family == 6];
    const struct mult_shadow *sa = &fm->shadow[(size_t)fl->ia * m->T + c - 1];
    const struct mult_shadow *sb = &fm->shadow[(size_t)fl->ib * m->T + c - 1];
    const struct mult_shadow *ss = dir ? sb : sa, *sd = dir ? sa : sb;
    const uint32_t l3 = h->l3;
    uint32_t out = len;
    int32_t grow = 0;
    const char *url = NULL;
    if (subst) {
        url = m->p.urls[(c - 1) % m->p.nurls];
        grow = (int32_t)m->ulen[(c - 1) % m->p.nurls] - (int32_t)tgt_n;
        memcpy(dst, f, tgt_at);
        memcpy(dst + tgt_at, url, tgt_n + grow);
        memcpy(dst + tgt_at + tgt_n + grow, f + tgt_at + tgt_n, len - tgt_at - tgt_n);
        out = (uint32_t)((int32_t)len + grow);
    } else {
        memcpy(dst, f, len);
    }
    uint64_t dl = (uint64_t)ss->delta + sd->delta; /* the pseudo-header's difference */
    if (h->family == 4) {
        memcpy(dst + l3 + 12, ss->a, 4);
        memcpy(dst + l3 + 16, sd->a, 4);
        uint64_t d3 = dl;
        if (grow) {
            uint16_t tl = rd16(f + l3 + 2);
            wr16(dst + l3 + 2, (uint16_t)(tl + grow));
            d3 += mult_d16(tl, (uint16_t)(tl + grow));
        }
        wr16(dst + l3 + 10, mult_csum_apply(rd16(f + l3 + 10), d3));
    } else {
        memcpy(dst + l3 + 8, ss->a, 16);
        memcpy(dst + l3 + 24, sd->a, 16);
        if (grow)
            wr16(dst + l3 + 4, (uint16_t)(rd16(f + l3 + 4) + grow));
    }
    if (!h->l4)
        return out;
    const uint32_t l4 = h->l4;
    uint64_t d4 = h->proto == 1 ? 0 : dl; /* ICMPv4 has no pseudo-header */
    if (h->in3)
        d4 += mult_copy_quoted(m, f, h, dst, c, qi);
    if (m->p.ports == MULT_PORTS_SHIFT && h->has_ports) {
        /* the flow's higher port, the ephemeral side, moves inside 1024..65535 */
        int sp_hi = h->sport > h->dport;
        uint16_t p = sp_hi ? h->sport : h->dport;
        uint16_t np = mult_shadow_port(m, h->proto, p, sp_hi ? h->dport : h->sport, c);
        if (np != p) {
            wr16(dst + l4 + (sp_hi ? 0 : 2), np);
            d4 += mult_d16(p, np);
        }
    }
    if (fl->reqs && h->proto == 6) {
        uint32_t seq = rd32(f + l4 + 4), ack = rd32(f + l4 + 8);
        int32_t ds = mult_shift(m, fl->reqs, dir, seq, c);
        int32_t da = (f[l4 + 13] & 0x10) ? mult_shift(m, fl->reqs, !dir, ack, c) : 0;
        if (ds) {
            wr32(dst + l4 + 4, seq + (uint32_t)ds);
            d4 += mult_d32(seq, seq + (uint32_t)ds);
        }
        if (da) {
            wr32(dst + l4 + 8, ack + (uint32_t)da);
            d4 += mult_d32(ack, ack + (uint32_t)da);
        }
    }
    if (subst) {
        /* the segment changed length: its checksum is summed anew */
        uint32_t tl = h->end - l4 + (uint32_t)grow;
        uint8_t *t = dst + l4;
        wr16(t + 16, 0);
        uint64_t s = h->family == 4 ? csum_pseudo4(dst + l3 + 12, dst + l3 + 16, 6)
                                    : csum_pseudo6(dst + l3 + 8, dst + l3 + 24, 6);
        s = csum_add32(s, tl);
        wr16(t + 16, csum_finish(csum_partial(t, tl, s)));
        return out;
    }
    if (h->csum_off) {
        uint16_t v = mult_csum_apply(rd16(f + h->csum_off), d4);
        if (h->proto == 17 && v == 0)
            v = 0xffff; /* 0 would mean "no checksum" */
        wr16(dst + h->csum_off, v);
    }
    return out;
}

/* mult_packet and mult_packet_slots: slot NULL, the frames one after the other in buf (each
 * after `gap` bytes); else copy c in slot[c-1] (cap bytes each) and the original not written. */
static int mult_packet_into(struct mult *m, const uint8_t *frame, uint32_t len, uint8_t *buf,
                            size_t cap, uint32_t gap, uint8_t *const *slot, struct mult_frame *fr)
{
    struct mult_hdr h;
    const uint32_t T = m->T;
    int pass = mult_parse(frame, len, &h), dir = 0, rc = 0;
    struct mult_flow *fl = NULL;
    if (pass == 0) {
        if (!m->fam[h.family == 6].nr && !m->fam[h.family == 6].side[1].nr) {
            pass = -MULT_PASS_NO_RANGE - 1;
        } else {
            fl = mult_flow_get_or_add(m, frame, &h, &dir, &rc);
            if (!fl) {
                if (rc != -ENOSPC)
                    return rc;
                pass = -MULT_PASS_TABLE_FULL - 1;
            } else if (!m->fam[h.family == 6].shadow) {
                pass = -MULT_PASS_NO_RANGE - 1;
            }
        }
    }
    m->st.in++;
    m->st.bytes_in += len;
    if (pass < 0) {
        if (slot) {
            fr[0] = (struct mult_frame){ 0, len, 0 };
        } else {
            if (cap < (size_t)gap + len)
                return -ENOBUFS;
            memcpy(buf + gap, frame, len);
            fr[0] = (struct mult_frame){ gap, len, 0 };
        }
        m->st.pass[-pass - 1]++;
        m->st.out++;
        m->st.bytes_out += len;
        return 1;
    }
    if (slot ? cap < (size_t)len + m->maxulen : cap < mult_room(m, len, gap))
        return -ENOBUFS;
    fl->packets[dir]++;
    uint32_t qi[2] = { 0, 0 };
    if (h.in3 && mult_quoted_index(m, frame, &h, qi) < 0) {
        h.in3 = 0; /* the quoted packet stays as it is */
        if (h.proto == 1)
            h.csum_off = 0;
    }

    /* an HTTP request: remember it so the shadow streams shift after it */
    uint32_t tgt_at = 0, tgt_n = 0;
    int req = 0;
    uint32_t pay;
    if (m->p.nurls && (pay = mult_tcp_payload(frame, &h))) {
        int t = mult_http_target(frame, pay, h.end, &tgt_at, &tgt_n);
        if (t < 0)
            m->st.url_unparsed++;
        if (t > 0 && h.end == h.l3 + mult_ip_len(frame, &h)) { /* whole segment captured */
            uint32_t seq = rd32(frame + h.l4 + 4);
            if (!fl->reqs && !(fl->reqs = calloc(1, sizeof *fl->reqs)))
                return -ENOMEM;
            struct mult_reqs *rq = fl->reqs;
            uint32_t i = 0;
            while (i < rq->n && !(rq->r[i].seq == seq && rq->r[i].dir == dir))
                i++;
            if (i < rq->n) {
                req = 1; /* a retransmission: the same substitution again */
            } else if (rq->n < MULT_MAX_REQUESTS && tgt_n <= 0xffff) {
                rq->r[rq->n++] = (struct mult_req){ .seq = seq,
                                                    .ip_len = mult_ip_len(frame, &h),
                                                    .olen = (uint16_t)tgt_n,
                                                    .dir = (uint8_t)dir };
                req = 1;
                m->st.url_requests++;
            } else {
                m->st.url_overflow++;
            }
            if (req) {
                const struct mult_req *q = &rq->r[i < rq->n ? i : rq->n - 1];
                for (uint32_t c = 1; c <= T; c++)
                    if (!mult_fits(m, q, c))
                        m->st.url_too_long++;
            }
        }
    }

    const uint32_t orig_at = m->p.order == MULT_ORDER_SPFO ? T : (uint32_t)(m->st.in % (T + 1));
    size_t pos = 0;
    uint32_t c = 1;
    for (uint32_t k = 0; k <= T; k++) {
        uint8_t *dst = slot ? (k == orig_at ? NULL : slot[c - 1]) : buf + pos + gap;
        uint32_t n;
        if (k == orig_at) {
            if (dst)
                memcpy(dst, frame, len);
            n = len;
            fr[k] = (struct mult_frame){ slot ? 0 : (uint32_t)(pos + gap), n, 0 };
        } else {
            int subst = 0;
            if (req) {
                struct mult_req q = { .ip_len = mult_ip_len(frame, &h), .olen = (uint16_t)tgt_n };
                subst = mult_fits(m, &q, c);
            }
            n = mult_copy(m, frame, len, &h, fl, dir, c, dst, tgt_at, tgt_n, subst, qi);
            fr[k] = (struct mult_frame){ slot ? 0 : (uint32_t)(pos + gap), n, (uint16_t)c };
            c++;
        }
        pos += gap + n;
        m->st.bytes_out += n;
    }
    m->st.out += T + 1;
    m->st.rewritten++;
    m->st.vlan += h.vlan != 0;
    m->st.ipv6_ext += h.ext;
    m->st.fragments += h.frag != 0;
    m->st.icmp_errors += h.icmp_err;
    return (int)T + 1;
}

int mult_packet(struct mult *m, const uint8_t *frame, uint32_t len, uint8_t *buf, size_t cap,
                uint32_t gap, struct mult_frame *fr)
{
    return mult_packet_into(m, frame, len, buf, cap, gap, NULL, fr);
}

int mult_packet_slots(struct mult *m, const uint8_t *frame, uint32_t len, uint8_t *const *slot,
                      size_t cap, struct mult_frame *fr)
{
    return mult_packet_into(m, frame, len, NULL, cap, 0, slot, fr);
}

/* ---- views ------------------------------------------------------------------------------ */

const struct mult_stats *mult_stats(const struct mult *m)
{
    return &m->st;
}
uint32_t mult_flow_count(const struct mult *m)
{
    return m->nflows;
}

void mult_flow_get(const struct mult *m, uint32_t i, struct mult_flow_view *v)
{
    const struct mult_flow *fl = &m->flows[i];
    v->family = fl->family;
    v->proto = fl->proto;
    v->addr_a = fl->a;
    v->addr_b = fl->b;
    v->port_a = fl->pa;
    v->port_b = fl->pb;
    v->packets[0] = fl->packets[0];
    v->packets[1] = fl->packets[1];
}

const uint8_t *mult_shadow_addr(const struct mult *m, int family, const uint8_t *addr, uint32_t c)
{
    const struct mult_family *fm = &m->fam[family == 6];
    uint8_t a16[16] = { 0 };
    memcpy(a16, addr, family == 6 ? 16 : 4);
    if (!fm->shadow || c < 1 || c > m->T)
        return NULL;
    const uint32_t *s = mult_index_find(&fm->ix, fm->addr, mult_addr_key, a16, 16);
    if (!*s || *s - 1 >= fm->m)
        return NULL;
    return fm->shadow[(size_t)(*s - 1) * m->T + c - 1].a;
}

uint16_t mult_shadow_port(const struct mult *m, uint8_t proto, uint16_t port, uint16_t other,
                          uint32_t c)
{
    /* SCTP's CRC32c covers its ports: they are kept */
    if (m->p.ports != MULT_PORTS_SHIFT || port < 1024 || port <= other ||
        !(proto == 6 || proto == 17 || proto == 136 || proto == 33))
        return port;
    return (uint16_t)(1024 + ((uint32_t)(port - 1024) + m->port_off[c]) % 64512);
}

size_t mult_flow_bytes(void)
{
    /* the entry and, at a load of at most 1/2, two index slots */
    return sizeof(struct mult_flow) + 2 * sizeof(uint32_t);
}

size_t mult_addr_bytes(uint32_t copies)
{
    return 16 + 2 * sizeof(uint32_t) + (size_t)copies * sizeof(struct mult_shadow);
}
