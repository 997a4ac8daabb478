/* flowlog.h - rows of the flow log (--flows; README, "Flow log"): the ground
 * truth of every flow instance, one CSV row each.
 *
 * Thread safety: each function writes only to the FILE it is given; a FILE
 * belongs to one thread (--threads workers write their own temporary files,
 * merged by the main thread, merge.h). */
#ifndef FE_FLOWLOG_H
#define FE_FLOWLOG_H

#include <stdint.h>
#include <stdio.h>

#include "packet.h"
#include "sess.h"
#include "session.h"

/* Writes the header line; ext: the session has session lines, so every row
 * has the four session columns (s_packets, s_bytes, c_payload, s_payload).
 * Returns 0 or a negative errno of the write. */
int flowlog_header(FILE *fp, int ext);
/* The row of instance in of flow line f, its first and last due times
 * computed from the line (exact planner; a stream line: stream_due). A
 * stream line's af, proto, addresses and ports are those of its first frame
 * (stream_endpoints). Returns 0 or a negative errno. */
int flowlog_row(FILE *fp, const struct fe_flow *f, const struct fe_inst *in, int ext);
/* The same with explicit first and last due times (the stochastic planner's
 * tree instances). Returns 0 or a negative errno. */
int flowlog_row_at(FILE *fp, const struct fe_flow *f, const struct fe_inst *in, uint64_t first,
                   uint64_t last, int ext);
/* The row of a session line's instance (always with the session columns):
 * client -> server endpoints, packets and bytes of both directions. */
int flowlog_row_sess(FILE *fp, const struct fe_flow *f, const struct fe_inst *in,
                     const struct sess_state *ss);

#endif
