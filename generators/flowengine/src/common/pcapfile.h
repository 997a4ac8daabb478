/* pcapfile.h - the pcap file sink (-o): a sink (sink.h) of kind SINK_PCAP.
 *
 * Nanosecond pcap (magic 0xa1b23c4d in host byte order, version 2.4, link
 * type 1, snaplen 65535). Records collect in a 4 MiB buffer that goes to the
 * file with write(2) when full and at close: one system call per 4 MiB,
 * no stdio.
 *
 * Thread safety: the sink belongs to one thread. */
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
