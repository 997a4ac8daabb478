"""The echo of a fail-over DUT, run as a script inside its namespace (stdlib only):

    python echo.py --bind VIP --port 7777 --reply-port 7778 --name master

UDP: listens on VIP:PORT and sends every datagram back from VIP:REPLY-PORT with `|NAME` appended,
so the reply's source port tells in any capture which DUT answered. TCP: accepts on VIP:PORT and
echoes what a connection sends (a session in flight, to see whether it survives a fail-over).
Both sockets use IP_FREEBIND: the address may not be there yet (keepalived adds it when the DUT
becomes master). Prints `ready` once bound; ends on SIGTERM or SIGINT with status 0.
"""

from __future__ import annotations

import argparse
import selectors
import signal
import socket
import sys

IP_FREEBIND = 15


def bound(kind: int, addr: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    return s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reply-port", type=int, required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    rx, tx = (
        bound(socket.SOCK_DGRAM, args.bind, args.port),
        bound(socket.SOCK_DGRAM, args.bind, args.reply_port),
    )
    listener = bound(socket.SOCK_STREAM, args.bind, args.port)
    listener.listen(16)
    marker = b"|" + args.name.encode()
    sel = selectors.DefaultSelector()
    sel.register(rx, selectors.EVENT_READ, "udp")
    sel.register(listener, selectors.EVENT_READ, "accept")
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            if key.data == "udp":
                data, peer = sock.recvfrom(2048)
                try:
                    tx.sendto(data + marker, peer)
                except OSError:
                    pass  # no route or neighbour now (the link is down): lost, as on a wire
            elif key.data == "accept":
                conn, _ = sock.accept()
                sel.register(conn, selectors.EVENT_READ, "tcp")
            else:
                try:
                    data = sock.recv(4096)
                    if data:
                        sock.sendall(data)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(sock)
                    sock.close()


if __name__ == "__main__":
    sys.exit(main())
