/* mult_args.c - the command-line pieces both modes of `flowengine multiply` take
 * (mult_args.h). */
#define _POSIX_C_SOURCE 200809L
#include "mult_args.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mult_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("flowengine multiply: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return MULT_EXIT_INPUT;
}

const struct opt_choice mult_order_choices[] = { { "spfo", MULT_ORDER_SPFO },
                                                 { "interleaved", MULT_ORDER_INTERLEAVED },
                                                 { NULL, 0 } };
const struct opt_choice mult_ports_choices[] = { { "keep", MULT_PORTS_KEEP },
                                                 { "shift", MULT_PORTS_SHIFT },
                                                 { NULL, 0 } };

int mult_choice(const char *opt, const struct opt_choice *c, const char *v, int *out)
{
    char names[128];
    if (!opt_choice(c, v, out))
        return 0;
    return mult_fail("%s: expected %s (got '%s')", opt, opt_choice_prose(c, names, sizeof names),
                     v);
}

int mult_u64(const char *s, uint64_t *v)
{
    char *e;
    errno = 0;
    if (!*s || *s == '-')
        return -EINVAL;
    unsigned long long x = strtoull(s, &e, 10);
    if (errno || *e)
        return -EINVAL;
    *v = x;
    return 0;
}

/* ---- ranges ----------------------------------------------------------------------------- */

static int mult_range_parse(const char *s, struct mult_range *r)
{
    char buf[64];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n >= sizeof buf)
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = 0;
    memset(r, 0, sizeof *r);
    if (inet_pton(AF_INET, buf, r->addr) == 1)
        r->family = 4;
    else if (inet_pton(AF_INET6, buf, r->addr) == 1)
        r->family = 6;
    else
        return -EINVAL;
    uint64_t pl = r->family == 4 ? 32 : 128;
    if (slash && (mult_u64(slash + 1, &pl) || pl > (r->family == 4 ? 32u : 128u)))
        return -EINVAL;
    r->plen = (uint8_t)pl;
    for (unsigned b = r->plen; b < (r->family == 4 ? 32u : 128u); b++) /* the network itself */
        r->addr[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
    return 0;
}

int mult_range_list(const char *list, struct mult_range *r, uint32_t *n, const char *what)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    *n = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n >= MULT_MAX_RANGES) {
            rc = mult_fail("%s: more than %u ranges", what, MULT_MAX_RANGES);
            break;
        }
        if (mult_range_parse(t, &r[*n])) {
            rc = mult_fail("%s: '%s' is not an IPv4 or IPv6 CIDR range (e.g. 198.18.0.0/15, "
                           "2001:db8:1::/48)",
                           what, t);
            break;
        }
        (*n)++;
    }
    free(copy);
    return rc;
}

int mult_in_range(const struct mult_range *r, int family, const uint8_t *a)
{
    return mult_range_has(r, family, a);
}

int mult_overlap(const struct mult_range *x, const struct mult_range *y)
{
    return x->plen <= y->plen ? mult_in_range(x, y->family, y->addr)
                              : mult_in_range(y, x->family, x->addr);
}

const char *mult_ntop(int family, const uint8_t *a, char *buf)
{
    return inet_ntop(family == 4 ? AF_INET : AF_INET6, a, buf, INET6_ADDRSTRLEN);
}

const char *mult_range_str(const struct mult_range *r, char *buf)
{
    char a[INET6_ADDRSTRLEN];
    snprintf(buf, 64, "%s/%u", mult_ntop(r->family, r->addr, a), r->plen);
    return buf;
}
