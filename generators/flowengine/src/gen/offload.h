/* offload.h - TX checksum offload simulation (--csum-offload, FLOR 6.3.4).
 *
 * Thread safety: touches only the frame it is given. */
#ifndef FE_OFFLOAD_H
#define FE_OFFLOAD_H

#include <stdint.h>

#include "session.h"

/* Rewrites the checksums of a frame built by packet_write as a driver leaves
 * them for a NIC with TX checksum offload: TCP, UDP and ICMPv6 carry the
 * folded, not complemented, pseudo-header sum (addresses, protocol, L4
 * length); the IPv4 header checksum and the ICMPv4 checksum are 0. */
void offload_fix(const struct fe_flow *f, uint8_t *frame, uint32_t flen);

#endif
