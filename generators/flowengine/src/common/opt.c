/* opt.c - see opt.h. */
#include "opt.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int opt_choice(const struct opt_choice *c, const char *name, int *value)
{
    for (; c->name; c++)
        if (!strcmp(c->name, name)) {
            *value = c->value;
            return 0;
        }
    return -EINVAL;
}

/* Appends S to buf[*used, len), keeping buf terminated. */
static void append(char *buf, size_t len, size_t *used, const char *s)
{
    int n = snprintf(buf + *used, len - *used, "%s", s);
    if (n > 0)
        *used += (size_t)n < len - *used ? (size_t)n : len - *used - 1;
}

const char *opt_choice_names(const struct opt_choice *c, const char *sep, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (const struct opt_choice *e = c; e->name; e++) {
        if (e != c)
            append(buf, len, &used, sep);
        append(buf, len, &used, e->name);
    }
    return buf;
}

const char *opt_choice_prose(const struct opt_choice *c, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (const struct opt_choice *e = c; e->name; e++) {
        if (e != c)
            append(buf, len, &used, e[1].name ? ", " : " or ");
        append(buf, len, &used, e->name);
    }
    return buf;
}
