/* test_checksum.c - known-answer driver for src/csum.c.
 *
 * Built and run by tests/test_engine_checksum.py, which checks every line
 * against constants and against its own reference implementation:
 *   sum  NAME HEX FOLDED    folded one's complement sum of the bytes
 *   csum NAME HEX CHECKSUM  the checksum field value (~sum)
 *   chain NAME HEX CHECKSUM the same, summed in pieces at even offsets
 *   udp6 NAME SRC DST SEGMENT CHECKSUM   UDP over IPv6, checksum field zeroed
 *   tcp4 NAME SRC DST SEGMENT CHECKSUM   TCP over IPv4, checksum field zeroed
 * Values are 4 lowercase hex digits. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "csum.h"

static void hex(const uint8_t *p, size_t n)
{
    if (!n)
        fputs("-", stdout);
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

static void sum_case(const char *name, const uint8_t *p, size_t n)
{
    printf("sum %s ", name);
    hex(p, n);
    printf(" %04x\n", csum_fold(csum_partial(p, n, 0)));
    printf("csum %s ", name);
    hex(p, n);
    printf(" %04x\n", csum_finish(csum_partial(p, n, 0)));
}

static void chain_case(const char *name, const uint8_t *p, size_t n, size_t piece)
{
    uint64_t s = 0;
    size_t off = 0;
    while (off < n) {
        size_t k = n - off < piece ? n - off : piece;
        s = csum_partial(p + off, k, s);
        off += k;
    }
    printf("chain %s ", name);
    hex(p, n);
    printf(" %04x\n", csum_finish(s));
}

int main(void)
{
    static const uint8_t rfc1071[] = { 0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7 };
    static const uint8_t ipv4[] = { 0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                                    0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7 };
    uint8_t buf[1500];

    sum_case("rfc1071", rfc1071, sizeof rfc1071);
    sum_case("ipv4hdr", ipv4, sizeof ipv4);
    sum_case("empty", buf, 0);
    buf[0] = 0xab;
    sum_case("one", buf, 1);
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 37 + 11);
    sum_case("odd3", buf, 3);
    sum_case("odd7", buf, 7);
    sum_case("odd13", buf, 13);
    sum_case("odd1499", buf, 1499);
    sum_case("even1500", buf, 1500);
    for (size_t piece = 2; piece <= 64; piece *= 2) {
        char name[32];
        snprintf(name, sizeof name, "pieces%zu", piece);
        chain_case(name, buf, 1001, piece);
    }
    memset(buf, 0xff, sizeof buf);
    sum_case("ff2", buf, 2);
    sum_case("ff1024", buf, 1024);
    sum_case("ff1025", buf, 1025);

    /* UDP over IPv6: 2001:db8::1 -> 2001:db8::2, ports 1234 -> 53, 11 bytes. */
    {
        uint8_t src[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
        uint8_t dst[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 2 };
        uint8_t seg[8 + 11] = { 0x04, 0xd2, 0x00, 0x35, 0x00, 19,  0,   0,   'h', 'e',
                                'l',  'l',  'o',  ' ',  'w',  'o', 'r', 'l', 'd' };
        uint64_t s = csum_pseudo6(src, dst, 17) + sizeof seg;
        uint16_t c = csum_finish(csum_partial(seg, sizeof seg, s));
        printf("udp6 hello ");
        hex(src, 16);
        putchar(' ');
        hex(dst, 16);
        putchar(' ');
        hex(seg, sizeof seg);
        printf(" %04x\n", c);
    }
    /* TCP over IPv4: 192.0.2.1 -> 198.51.100.7, SYN|ACK with 5 bytes. */
    {
        uint8_t src[4] = { 192, 0, 2, 1 }, dst[4] = { 198, 51, 100, 7 };
        uint8_t seg[20 + 5] = { 0xc3, 0x50, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x9a,
                                0xbc, 0xde, 0xf0, 0x50, 0x12, 0xff, 0xff, 0,    0,
                                0,    0,    1,    2,    3,    4,    5 };
        uint64_t s = csum_pseudo4(src, dst, 6) + sizeof seg;
        uint16_t c = csum_finish(csum_partial(seg, sizeof seg, s));
        printf("tcp4 synack ");
        hex(src, 4);
        putchar(' ');
        hex(dst, 4);
        putchar(' ');
        hex(seg, sizeof seg);
        printf(" %04x\n", c);
    }
    return 0;
}
