/* sink.c - the sink interface's generic part and the null sink (sink.h). */
#include "sink.h"

#include <errno.h>
#include <stdlib.h>

static int null_close(struct sink *s)
{
    free(s->buf);
    return 0;
}

static const struct sink_ops null_ops = { .close = null_close };

void sink_init(struct sink *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

int sink_open_null(struct sink *s)
{
    sink_init(s);
    s->kind = SINK_NULL;
    s->cap = FE_MAX_FRAME;
    s->buf = malloc(s->cap);
    if (!s->buf)
        return -ENOMEM;
    s->ops = &null_ops;
    return 0;
}

int sink_close(struct sink *s)
{
    if (!s->ops)
        return 0;
    int rc = s->ops->close(s);
    s->ops = NULL;
    s->buf = NULL;
    s->used = s->cap = 0;
    return rc;
}
