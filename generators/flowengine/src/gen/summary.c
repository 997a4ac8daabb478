/* summary.c - the summary JSON, the final status and the report (summary.h). */
#define _POSIX_C_SOURCE 200809L
#include "summary.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "halt.h"

size_t summary_json(const struct summary *s, char *buf, size_t size)
{
    char sig[32] = "null", first[24] = "null", last[24] = "null";
    double mpps = s->wall_seconds > 0 ? (double)s->packets / s->wall_seconds / 1e6 : 0.0;

    if (s->signal)
        snprintf(sig, sizeof sig, "\"%s\"", s->signal);
    if (s->has_packets) {
        snprintf(first, sizeof first, "%" PRIu64, s->first_ns);
        snprintf(last, sizeof last, "%" PRIu64, s->last_ns);
    }
    int n = snprintf(buf, size,
                     "{\"status\": \"%s\", \"exit_code\": %d, \"signal\": %s, \"sink\": \"%s\", "
                     "\"seed\": %" PRIu64 ", \"packets\": %" PRIu64 ", \"bytes\": %" PRIu64 ", "
                     "\"flows_started\": %" PRIu64 ", \"flows_finished\": %" PRIu64 ", "
                     "\"first_ns\": %s, \"last_ns\": %s, \"wall_seconds\": %.6f, "
                     "\"mpps\": %.3f, \"errors\": %" PRIu64 ", \"sent\": %" PRIu64 ", "
                     "\"sent_bytes\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"pace\": \"%s\", "
                     "\"late\": %" PRIu64 ", \"max_late_ns\": %" PRIu64 ", "
                     "\"paused_ns\": %" PRIu64 ", "
                     "\"planner\": \"%s\", \"peak_rss_bytes\": %" PRIu64 ", \"threads\": %u}\n",
                     s->status, s->exit_code, sig, s->sink, s->seed, s->packets, s->bytes,
                     s->flows_started, s->flows_finished, first, last, s->wall_seconds, mpps,
                     s->errors, s->sent, s->sent_bytes, s->failed,
                     s->paced == 1   ? "realtime"
                     : s->paced == 2 ? "topspeed"
                                     : "none",
                     s->late, s->max_late_ns, s->paused_ns, s->planner ? s->planner : "exact",
                     s->peak_rss, s->threads ? s->threads : 1);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

void summary_perror(const char *what, int err)
{
    fprintf(stderr, "flowengine: %s%s%s\n", what, err ? ": " : "", err ? strerror(-err) : "");
}

void summary_fail(struct summary *sum, const char *what, int err)
{
    if (what)
        summary_perror(what, err);
    sum->status = "error";
    sum->exit_code = 1;
    sum->errors = 1;
}

void summary_settle(struct summary *sum, const char *what, int err)
{
    if (what) {
        summary_fail(sum, what, err);
    } else if (!strcmp(sum->status, "interrupted")) {
        sum->signal = halt_signal == SIGTERM ? "SIGTERM" : "SIGINT";
        sum->exit_code = halt_signal == SIGTERM ? 143 : 130;
    }
}

void summary_write(struct summary *sum, const char *path)
{
    char line[1024];
    size_t n = summary_json(sum, line, sizeof line);
    fwrite(line, 1, n, stderr);
    if (path) {
        FILE *fp = fopen(path, "w");
        if (!fp || fwrite(line, 1, n, fp) != n || fclose(fp)) {
            fprintf(stderr, "flowengine: --summary %s: cannot write: %s\n", path, strerror(errno));
            if (sum->exit_code == 0)
                sum->exit_code = 1;
        }
    }
}

uint64_t summary_peak_rss(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char buf[256];
    uint64_t kb = 0;
    if (!fp)
        return 0;
    while (fgets(buf, sizeof buf, fp))
        if (!strncmp(buf, "VmHWM:", 6)) {
            kb = strtoull(buf + 6, NULL, 10);
            break;
        }
    fclose(fp);
    return kb * 1024;
}
