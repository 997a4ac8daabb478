/* pcapfile.h - the pcap file sink (-o): a sink (sink.h) of kind SINK_PCAP.
 *
 * Nanosecond pcap (magic 0xa1b23c4d in host byte order, version 2.4, link
 * type 1, snaplen 65535). Records collect in a 4 MiB buffer; a full one is
 * handed to the sink's writer thread, which write(2)s it while the loop fills
 * the other buffer (double buffering: generation and I/O overlap; one system
 * call per 4 MiB, no stdio, no copy). A flush waits only when the writer is
 * still busy with the previous buffer; close waits for it and joins it. A
 * write error is the sink's error from the next flush or the close on.
 *
 * Thread safety: the sink belongs to one thread (its writer thread touches
 * only the buffer handed to it, under the sink's mutex). */
#ifndef FE_PCAPFILE_H
#define FE_PCAPFILE_H

#include "sink.h"

#ifndef PCAPFILE_BUF_SIZE
#define PCAPFILE_BUF_SIZE (4u << 20)
#endif

/* Creates (or truncates) the file at path and makes s a pcap sink whose
 * buffer already holds the file header. Returns 0 or a negative errno
 * (-ENOMEM, or open(2)'s); on failure s is closed. */
int pcapfile_open(struct sink *s, const char *path);

#endif
