/* match.h - `flowengine match`: the flow-matching emulator of seed 000. One
 * structure (match_table.h), one hash (the registry of hash.h), one feed (match_feed.h):
 * the feed is materialised, then the timed loop matches every packet to its
 * flow (match_engine.h) and the run is reported on stdout and in --json.
 * Usage and fields: docs/flow-match.md. */
#ifndef FE_MATCH_H
#define FE_MATCH_H

#include <stdint.h>

/* argv[0] is "match", the rest its arguments (getopt_long). MEM_AVAILABLE: the default memory
 * budget in bytes (0: none). Returns the exit status: 0, 1 (an output could not be written), 2 (bad
 * input, refused before anything is written; or a damaged pcap, analysed up to the damage). */
int match_main(int argc, char **argv, uint64_t mem_available);

#endif
