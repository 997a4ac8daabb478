"""Scapy sender process: `python -m generators.scapysend.worker PLAN.json`.

Builds one frame per flow of the plan (written by the `scapy` adapter) and sends it with
`sendp` on one reused layer-2 socket: in `realtime`, each flow's packets at their due times;
in `topspeed`, the same sequence back to back, repeated until `duration_s` when there is one.
At exit, also after SIGINT or SIGTERM, it writes the summary JSON the plan names:
sent, bytes, failed, failed_bytes, attempted, late, status, signal, exit_code, wall_seconds.
"""

from __future__ import annotations

import heapq
import json
import signal
import sys
import time
from pathlib import Path

from ntgcore.files import replacing

LATE_NS = 1_000_000  # a packet sent more than 1 ms after its due time counts as late

_stop_signal: int | None = None


def _on_signal(signum, _frame) -> None:
    global _stop_signal
    _stop_signal = signum


def build_frame(f: dict):
    """The Scapy frame of one plan flow: Ether / IP|IPv6 / TCP|UDP|ICMP / payload."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
    from scapy.layers.l2 import Ether
    from scapy.packet import Packet, Raw

    content = bytes.fromhex(f["payload_hex"])
    payload = (content + bytes(max(0, f["size"] - len(content))))[: max(f["size"], len(content))]
    l3 = IP(src=f["src"], dst=f["dst"]) if f["af"] == 4 else IPv6(src=f["src"], dst=f["dst"])
    proto = f["protocol"]
    l4: Packet
    if proto == "tcp":
        l4 = TCP(sport=f["sport"], dport=f["dport"], flags="PA" if payload else "A")
    elif proto == "udp":
        l4 = UDP(sport=f["sport"], dport=f["dport"])
    elif proto == "icmp":
        l4 = ICMP(type=8)
    else:
        l4 = ICMPv6EchoRequest()
    pkt = Ether(src=f["smac"], dst=f["dmac"]) / l3 / l4 / Raw(payload)
    return Ether(bytes(pkt))  # dissected once: sendp reuses the cached bytes


def schedule(flows: list[dict]):
    """(due ns, flow index) of every packet of every flow, in time order."""

    def one(i: int, f: dict):
        for r in range(f["reps"]):
            base = f["start_ns"] + r * f["rep_period_ns"]
            for k in range(f["packets"]):
                yield base + k * f["period_ns"], i

    return heapq.merge(*(one(i, f) for i, f in enumerate(flows)))


def run(plan: dict) -> dict:
    from scapy.config import conf
    from scapy.sendrecv import sendp

    conf.verb = 0
    frames = [build_frame(f) for f in plan["flows"]]
    sizes = [len(bytes(fr)) for fr in frames]
    pace, duration = plan["pace"], plan.get("duration_s")
    counts: dict[str, float] = {"sent": 0, "bytes": 0, "failed": 0, "failed_bytes": 0, "late": 0}
    sock = conf.L2socket(iface=plan["iface"])
    t0 = time.monotonic_ns()
    end = t0 + int(duration * 1e9) if duration else None
    try:
        while True:
            for due, i in schedule(plan["flows"]):
                if _stop_signal is not None:
                    break
                now = time.monotonic_ns()
                if end is not None and now >= end:
                    break
                if pace == "realtime":
                    wait = t0 + due - now
                    if end is not None and t0 + due >= end:
                        break
                    if wait > 0:
                        time.sleep(wait / 1e9)
                        if _stop_signal is not None:
                            break
                    elif -wait > LATE_NS:
                        counts["late"] += 1
                try:
                    sendp(frames[i], socket=sock, verbose=False)
                    counts["sent"] += 1
                    counts["bytes"] += sizes[i]
                except OSError:
                    counts["failed"] += 1
                    counts["failed_bytes"] += sizes[i]
            else:
                if pace == "topspeed" and end is not None and _stop_signal is None:
                    continue  # topspeed with a duration: go round again until it is over
            break
    finally:
        sock.close()
    counts["wall_seconds"] = round((time.monotonic_ns() - t0) / 1e9, 6)
    return counts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m generators.scapysend.worker PLAN.json", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    plan = json.loads(Path(argv[0]).read_text())
    summary: dict = {"pace": plan.get("pace"), "iface": plan.get("iface")}
    code = 0
    try:
        import scapy

        summary["scapy"] = scapy.VERSION
        summary.update(run(plan))
        summary["status"] = "completed"
    except (OSError, ValueError) as exc:
        error = (
            f"interface {plan.get('iface')}: {exc} (check the interface names of the "
            "topology: `ip -n NAMESPACE link`)"
        )
        print(f"scapy sender: {error}", file=sys.stderr)
        summary.update(status="failed", error=error)
        code = 2
    if _stop_signal is not None:
        name = signal.Signals(_stop_signal).name
        code = 128 + _stop_signal
        summary.update(status="interrupted", signal=name)
    summary["exit_code"] = code
    summary.setdefault("sent", 0)
    summary["attempted"] = summary["sent"] + summary.get("failed", 0)
    with replacing(plan["summary"]) as tmp:
        tmp.write_text(json.dumps(summary, indent=1) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
