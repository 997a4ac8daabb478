"""The server application of live host labelling: `python -m testbed.ids.hostpeer SCRIPT.json
OUT.json`, run inside the server namespace by `testbed.ids.hostlabel`, ended by SIGTERM.

It listens on every port of the script (TCP and UDP, on the server's address) with plain sockets
and default options, so what it records is what a Linux application gets: per connection, keyed
by the client's port, the bytes `recv` returned (urgent data as Linux hands it by default: out of
the stream) and how the connection ended (fin, rst, timeout, or open at SIGTERM); per UDP client
port, every datagram. It plays each session's server messages in order: before a server step it
reads until it has the client bytes that precede the step in the plan, or until QUIET_S pass
without new bytes, then sends the step. UDP: a datagram equal to a client step answered by the
server step that follows it in the plan, once.

SCRIPT.json: {"address", "ready" (a file written once listening), "sessions": [{"proto",
"sport", "cport", "steps": [{"from_client", "data" (hex)}]}]}. OUT.json: {"connections":
[{"proto", "sport", "cport", "received" (hex), "datagrams" (hex list), "ended"}]}.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

QUIET_S = 0.2  # before a server step: this long without new client bytes, send it anyway
END_S = 3.0  # after the last step: this long without anything, the connection timed out
POLL_S = 0.05

STOP = threading.Event()
LOCK = threading.Lock()
RECORDS: list[dict] = []


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def serve_tcp(conn: socket.socket, cport: int, sport: int, steps: list[dict]) -> None:
    """One connection: read, answer at the plan's points, record until it ends."""
    rec = {"proto": "tcp", "sport": sport, "cport": cport, "received": "", "ended": "open"}
    got = bytearray()
    conn.settimeout(POLL_S)

    def read(until: int | None, quiet: float) -> str | None:
        """Read until `until` bytes are in (None: until the end); the end's kind, or None."""
        idle = 0.0
        while not STOP.is_set() and (until is None or len(got) < until):
            try:
                data = conn.recv(65536)
            except TimeoutError:
                idle += POLL_S
                if idle >= quiet:
                    return "timeout" if until is None else None
                continue
            except ConnectionResetError:
                return "rst"
            except OSError:
                return "error"
            if not data:
                return "fin"
            got.extend(data)
            idle = 0.0
        return "open" if STOP.is_set() else None

    ended = None
    need = 0
    try:
        for step in steps:
            data = bytes.fromhex(step["data"])
            if step["from_client"]:
                need += len(data)
                continue
            ended = read(need, QUIET_S)
            if ended is not None:
                break
            try:
                conn.sendall(data)
            except OSError:
                ended = "rst"
                break
        if ended is None:
            ended = read(None, END_S)
    finally:
        conn.close()
        rec["received"], rec["ended"] = bytes(got).hex(), ended or "open"
        with LOCK:
            RECORDS.append(rec)


def listen_tcp(sock: socket.socket, sport: int, by_cport: dict[int, list[dict]]) -> None:
    sock.settimeout(POLL_S)
    while not STOP.is_set():
        try:
            conn, peer = sock.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        cport = int(peer[1])
        t = threading.Thread(
            target=serve_tcp, args=(conn, cport, sport, by_cport.get(cport, [])), daemon=True
        )
        t.start()
        WORKERS.append(t)


def serve_udp(sock: socket.socket, sport: int, by_cport: dict[int, list[dict]]) -> None:
    sock.settimeout(POLL_S)
    recs: dict[int, dict] = {}
    answered: set[tuple[int, int]] = set()
    while not STOP.is_set():
        try:
            data, peer = sock.recvfrom(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        cport = int(peer[1])
        rec = recs.setdefault(
            cport, {"proto": "udp", "sport": sport, "cport": cport, "datagrams": [], "ended": ""}
        )
        rec["datagrams"].append(data.hex())
        steps = by_cport.get(cport, [])
        for i, step in enumerate(steps[:-1]):
            nxt = steps[i + 1]
            if (
                step["from_client"]
                and bytes.fromhex(step["data"]) == data
                and not nxt["from_client"]
                and (cport, i) not in answered
            ):
                answered.add((cport, i))
                sock.sendto(bytes.fromhex(nxt["data"]), peer)
                break
    with LOCK:
        RECORDS.extend(recs.values())


WORKERS: list[threading.Thread] = []


def _stop(signum: int, frame: FrameType | None) -> None:
    STOP.set()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m testbed.ids.hostpeer SCRIPT.json OUT.json", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    script = json.loads(Path(argv[0]).read_text())
    address = script["address"]
    family = _family(address)
    ports: dict[tuple[str, int], dict[int, list[dict]]] = {}
    for s in script["sessions"]:
        ports.setdefault((s["proto"], int(s["sport"])), {})[int(s["cport"])] = s["steps"]
    threads = []
    socks = []
    for (proto, sport), by_cport in sorted(ports.items()):
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        sock = socket.socket(family, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, sport))
        if proto == "tcp":
            sock.listen(128)
            target = listen_tcp
        else:
            target = serve_udp
        socks.append(sock)
        threads.append(threading.Thread(target=target, args=(sock, sport, by_cport), daemon=True))
    for t in threads:
        t.start()
    Path(script["ready"]).write_text("listening\n")
    while not STOP.wait(0.2):
        pass
    for t in threads + WORKERS:
        t.join(1.0)
    for sock in socks:
        sock.close()
    with LOCK:
        out = {"connections": list(RECORDS)}
    Path(argv[1]).write_text(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
