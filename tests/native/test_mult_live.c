/* test_mult_live.c - drives the multiplier core the way the inline multiplier will: live
 * planning (mult_params.live), one packet at a time into a caller's buffer, no scan pass.
 *
 * Built and run by tests/test_multiply_live.py:
 *     test_mult_live IN.pcap OUT.pcap T MAX_FLOWS [home]
 * (home: the sided plan, 10.1.0.0/16 and 2001:db8:a::/48 home, their shadows in 198.19.0.0/24
 * and 2001:db8:200::/64)
 * writes the frames to OUT.pcap (microsecond pcap, written here with stdio) and prints
 * "in N out N table_full N slots_mismatch N" on stdout. A second multiplier with the same
 * parameters gets the same packets through mult_packet_slots (each copy in a slot of its own,
 * as the inline multiplier's TX ring); slots_mismatch counts the packets whose frames differ. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mult.h"
#include "pcapread.h"

int main(int argc, char **argv)
{
    if (argc != 5 && !(argc == 6 && !strcmp(argv[5], "home")))
        return 2;
    char err[256];
    pr_reader *r = pr_open(argv[1], err, sizeof err);
    FILE *out = fopen(argv[2], "wb");
    if (!r || !out)
        return 1;
    struct mult_range rg[2] = {
        { .family = 4, .plen = 16, .addr = { 198, 18 } },
        { .family = 6, .plen = 48, .addr = { 0x20, 0x01, 0x0d, 0xb8, 0x01, 0x00 } }
    };
    struct mult_params p = { .copies = (uint32_t)atoi(argv[3]),
                             .seed = 3,
                             .order = MULT_ORDER_SPFO,
                             .ranges = rg,
                             .nranges = 2,
                             .max_flows = (uint32_t)atoi(argv[4]),
                             .max_addrs = 64,
                             .live = 1 };
    struct mult_range home[2] = {
        { .family = 4, .plen = 16, .addr = { 10, 1 } },
        { .family = 6, .plen = 48, .addr = { 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a } }
    };
    struct mult_range hr[2] = {
        { .family = 4, .plen = 24, .addr = { 198, 19 } },
        { .family = 6, .plen = 64, .addr = { 0x20, 0x01, 0x0d, 0xb8, 0x02, 0x00 } }
    };
    if (argc == 6) {
        p.home = home;
        p.nhome = 2;
        p.home_ranges = hr;
        p.nhome_ranges = 2;
    }
    struct mult *m, *m2;
    if (mult_create(&m, &p) || mult_create(&m2, &p))
        return 1;
    uint32_t hdr[6] = { 0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1 };
    fwrite(hdr, 4, 6, out);
    struct mult_frame *fr = calloc(p.copies + 1, sizeof *fr);
    size_t cap = mult_room(m, 65535, 0);
    uint8_t *buf = malloc(cap);
    const size_t room = 65535 + MULT_MAX_GROWTH;
    uint8_t *sbuf = malloc(room * p.copies), **slot = calloc(p.copies, sizeof *slot);
    struct mult_frame *fr2 = calloc(p.copies + 1, sizeof *fr2);
    if (!buf || !sbuf || !slot || !fr2)
        return 1;
    for (uint32_t c = 0; c < p.copies; c++)
        slot[c] = sbuf + room * c;
    unsigned long long mismatch = 0;
    pr_packet pk;
    while (pr_next(r, &pk)) {
        int n = mult_packet(m, pk.data, pk.cap_len, buf, cap, 0, fr);
        if (n < 1)
            return 1;
        int same = mult_packet_slots(m2, pk.data, pk.cap_len, slot, room, fr2) == n;
        for (int i = 0; same && i < n; i++) {
            const uint8_t *got = fr2[i].copy ? slot[fr2[i].copy - 1] : pk.data;
            same = fr2[i].copy == fr[i].copy && fr2[i].len == fr[i].len && fr2[i].off == 0 &&
                   !memcmp(got, buf + fr[i].off, fr[i].len);
        }
        mismatch += !same;
        for (int i = 0; i < n; i++) {
            uint32_t rec[4] = { (uint32_t)(pk.ts_ns / 1000000000),
                                (uint32_t)(pk.ts_ns % 1000000000 / 1000), fr[i].len, fr[i].len };
            fwrite(rec, 4, 4, out);
            fwrite(buf + fr[i].off, 1, fr[i].len, out);
        }
    }
    const struct mult_stats *s = mult_stats(m);
    printf("in %llu out %llu table_full %llu slots_mismatch %llu\n", (unsigned long long)s->in,
           (unsigned long long)s->out, (unsigned long long)s->pass[MULT_PASS_TABLE_FULL], mismatch);
    mult_free(m);
    mult_free(m2);
    free(sbuf);
    free(slot);
    free(fr2);
    pr_close(r);
    free(buf);
    free(fr);
    return fclose(out) ? 1 : 0;
}
