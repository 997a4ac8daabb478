/* offload.c - pseudo-header-only checksums for --csum-offload. */
#include "offload.h"

#include "bytes.h"
#include "csum.h"

void offload_fix(const struct fe_flow *f, uint8_t *frame, uint32_t flen)
{
    uint32_t l4len = flen - f->l4_off;
    uint8_t *l4 = frame + f->l4_off;
    uint64_t s;
    int kind = f->kind;

    if (kind == FE_K_SESS) /* TCP or UDP, as a flow line of the same af and proto */
        kind = f->af == 4 ? (f->proto == 6 ? FE_K4_TCP : FE_K4_UDP)
                          : (f->proto == 6 ? FE_K6_TCP : FE_K6_UDP);
    switch (kind) {
    case FE_K4_UDP:
    case FE_K4_TCP:
        put16(frame + 24, 0); /* IPv4 header checksum left to the NIC */
        s = csum_pseudo4(frame + 26, frame + 30, f->proto) + l4len;
        put16(l4 + (kind == FE_K4_UDP ? 6 : 16), csum_fold(s));
        break;
    case FE_K4_ICMP:
        put16(frame + 24, 0);
        put16(l4 + 2, 0); /* ICMPv4 has no pseudo-header: all of it is the NIC's */
        break;
    case FE_K6_UDP:
    case FE_K6_TCP:
    case FE_K6_ICMP:
        s = csum_pseudo6(frame + 22, frame + 38, f->proto) + l4len;
        put16(l4 + (kind == FE_K6_UDP ? 6 : kind == FE_K6_TCP ? 16 : 2), csum_fold(s));
        break;
    }
}
