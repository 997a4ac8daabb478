/* mult_live.h - `flowengine multiply --live IN OUT DUT`: the inline multiplier
 * (seed 003, Fig. 6). It sits between a client side (IN) and a server side
 * (OUT) like a two-port bridge: every frame from IN goes to OUT unchanged and
 * every frame from OUT to IN; each IP frame of a multiplied direction (IN->OUT,
 * and OUT->IN with --both) also gives T shadow copies (mult.c, live planning)
 * sent on DUT. SPFO: each original leaves right after its own T copies
 * (--spfo-scope batch: a received batch's originals after all its copies).
 * AF_PACKET sockets, promiscuous, own frames ignored; frames come in through
 * a TPACKET_V2 RX ring per side (no receive call; poll only when both are
 * empty). --tx sendmmsg (the default): one sendmmsg per received batch on
 * DUT's socket carries its copies (to DUT, no address) and originals (to OUT
 * or IN, each with that interface's address) in SPFO order, the originals
 * straight from the RX ring;
 * --tx ring: the copies are written by mult_packet_slots straight into a
 * TPACKET_V2 TX ring's slots, one kick before the originals. The qdisc is
 * bypassed only with --qdisc-bypass (a capture on OUT or DUT then misses what
 * the multiplier sends). Runs until SIGINT or SIGTERM,
 * then writes its counters (--summary, JSON, with the sockets' ingress drops)
 * and exits 0.
 *
 * The flow table's bound (--max-flows, --max-addrs) is checked before any
 * socket opens: tables larger than half the available memory, or ranges too
 * small for T x max-addrs shadows, are refused (exit 2). A flow past the bound
 * while running goes through as the original alone (counted as table_full). */
#ifndef FE_MULT_LIVE_H
#define FE_MULT_LIVE_H

/* argv holds the arguments after "--live". Exit status: 0 (stopped by a
 * signal), 2 bad input or interface (nothing sent), 1 a failure while running. */
int mult_live_cmd(int argc, char **argv);

#endif
