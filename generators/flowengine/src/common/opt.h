/* opt.h - the named choices of the command lines (--pace realtime|topspeed,
 * --struct chain|tree|..., --feed det|uniform|...): one table per option that
 * both the getopt_long parser and the --help text read, so what the help
 * lists is what the parser takes.
 *
 * A table is an array of struct opt_choice ended by an entry whose name is
 * NULL. Errors: negative errno (-EINVAL: not a name of the table).
 *
 * Thread safety: pure functions of their arguments (tables are constant). */
#ifndef FE_OPT_H
#define FE_OPT_H

#include <stddef.h>

struct opt_choice {
    const char *name;
    int value;
};

/* The value of NAME in table C into *value: 0, or -EINVAL (*value unchanged). */
int opt_choice(const struct opt_choice *c, const char *name, int *value);

/* The table's names joined by SEP into buf (always terminated, cut at len);
 * returns buf, so that it can be an argument of printf. */
const char *opt_choice_names(const struct opt_choice *c, const char *sep, char *buf, size_t len);

/* The names joined as prose: "a or b", "a, b or c". Returns buf, as above. */
const char *opt_choice_prose(const struct opt_choice *c, char *buf, size_t len);

#endif
