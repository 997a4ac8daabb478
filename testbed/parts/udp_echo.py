"""A UDP echo for the fail-over method, run as a script inside a DUT's namespace (stdlib only):

    python udp_echo.py --bind VIP --port 7777 --reply-port 7001 --name master

It listens on VIP:PORT (IP_FREEBIND: the address may not be there yet; keepalived adds it when
the DUT becomes master) and sends every datagram back from VIP:REPLY-PORT with `NAME` appended,
so the reply's source port tells in any capture which DUT answered. Prints `ready` once bound;
ends on SIGTERM or SIGINT with status 0.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys

IP_FREEBIND = 15


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reply-port", type=int, required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    socks = []
    for port in (args.port, args.reply_port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        s.bind((args.bind, port))
        socks.append(s)
    rx, tx = socks
    marker = b"|" + args.name.encode()
    print("ready", flush=True)
    while True:
        data, peer = rx.recvfrom(2048)
        try:
            tx.sendto(data + marker, peer)
        except OSError:
            pass  # no route or neighbour now (the link is down): the reply is lost, as on a wire


if __name__ == "__main__":
    sys.exit(main())
