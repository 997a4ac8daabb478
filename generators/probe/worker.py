"""The probe sender, run inside the client's namespace (stdlib only): `python worker.py PLAN`.

Sends the plan's flows through the kernel's IP stack (so the neighbour table follows a virtual
address from one device to another, as a host's would), each packet numbered:

    icmp  echo requests from a raw socket; identifier = sequence = the packet's number mod 2^16;
          payload `NTGP` + number (4 bytes) + send time (CLOCK_REALTIME ns, 8 bytes)
    udp   datagrams from `ports` sockets bound to base_port, base_port+1, ...: packet n leaves
          from base_port + n mod ports, so a reply's destination port names its request; the
          payload as for icmp
    tcp   one connection, made before the first packet is due, carrying the same payload as one
          message per packet (a session in flight); the echo is read and dropped; the first
          error (a reset once another device owns the address) ends it and is reported

Replies are not read here: the capture on the client's interface is what counts. Writes the
summary (sent, failed, bytes, per flow) at exit; SIGTERM/SIGINT end it early (status 143/130).
"""

from __future__ import annotations

import heapq
import json
import signal
import socket
import struct
import sys
import time

MAGIC = b"NTGP"


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def payload(n: int, size: int) -> bytes:
    head = MAGIC + struct.pack("!IQ", n & 0xFFFFFFFF, time.time_ns())
    return head + b"\0" * max(0, size - len(head))


class Flow:
    def __init__(self, f: dict, plan: dict) -> None:
        self.f = f
        self.sent = self.failed = self.bytes = 0
        self.tcp: dict = {}
        if f["protocol"] == "icmp":
            self.socks = [socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)]
            self.socks[0].bind((f["src"], 0))
        elif f["protocol"] == "tcp":
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((f["src"], 0))
            s.settimeout(2.0)
            self.socks = [s]
            self.tcp = {"connected": False, "ended": None, "echoed_bytes": 0}
            try:
                s.connect((f["dst"], f["dport"]))
                s.setblocking(False)
                self.tcp["connected"] = True
                self.tcp["local_port"] = s.getsockname()[1]
            except OSError as exc:
                self.tcp["ended"] = f"could not connect: {exc.strerror or exc}"
        else:
            self.socks = []
            for k in range(plan["ports"]):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
                s.bind((f["src"], plan["base_port"] + k))
                self.socks.append(s)

    def send(self, n: int) -> None:
        f = self.f
        data = payload(n, f["size"])
        if f["protocol"] == "tcp":
            self.send_tcp(data)
            return
        try:
            if f["protocol"] == "icmp":
                code = n & 0xFFFF
                head = struct.pack("!BBHHH", 8, 0, 0, code, code)
                pkt = struct.pack("!BBHHH", 8, 0, checksum(head + data), code, code) + data
                self.socks[0].sendto(pkt, (f["dst"], 0))
                nbytes = len(pkt)
            else:
                self.socks[n % len(self.socks)].sendto(data, (f["dst"], f["dport"]))
                nbytes = len(data) + 8
            self.sent += 1
            self.bytes += nbytes + 20
        except OSError:
            self.failed += 1  # no neighbour answered (EHOSTUNREACH): counted, and on to the next

    def send_tcp(self, data: bytes) -> None:
        if self.tcp["ended"] is not None:
            self.failed += 1
            return
        s = self.socks[0]
        try:
            while True:  # the echo so far
                got = s.recv(65536)
                if not got:
                    raise ConnectionResetError(0, "closed by the peer")
                self.tcp["echoed_bytes"] += len(got)
        except BlockingIOError:
            pass
        except OSError as exc:
            self.tcp["ended"], self.tcp["ended_realtime_ns"] = (
                exc.strerror or str(exc),
                time.time_ns(),
            )
            self.failed += 1
            return
        try:
            s.sendall(data)
            self.sent += 1
            self.bytes += len(data) + 40
        except OSError as exc:
            self.tcp["ended"], self.tcp["ended_realtime_ns"] = (
                exc.strerror or str(exc),
                time.time_ns(),
            )
            self.failed += 1


def main(path: str) -> int:
    plan = json.loads(open(path).read())
    flows = [Flow(f, plan) for f in plan["flows"]]
    status = {"code": 0}

    def end(signum, frame):
        status["code"] = 128 + signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    t0 = time.monotonic_ns()
    queue = [(f.f["start_ns"], i, 0) for i, f in enumerate(flows) if f.f["packets"] > 0]
    heapq.heapify(queue)
    try:
        while queue:
            due, i, n = heapq.heappop(queue)
            wait = (t0 + due - time.monotonic_ns()) / 1e9
            if wait > 0:
                time.sleep(wait)
            flows[i].send(n)
            if n + 1 < flows[i].f["packets"]:
                heapq.heappush(queue, (due + flows[i].f["period_ns"], i, n + 1))
    except KeyboardInterrupt:
        pass
    summary = {
        "sent": sum(f.sent for f in flows),
        "failed": sum(f.failed for f in flows),
        "bytes": sum(f.bytes for f in flows),
        "flows": [
            {
                "name": f.f["name"],
                "protocol": f.f["protocol"],
                "sent": f.sent,
                "failed": f.failed,
                **({"tcp": f.tcp} if f.tcp else {}),
            }
            for f in flows
        ],
    }
    with open(plan["summary"], "w") as out:
        json.dump(summary, out, indent=1)
    return status["code"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
