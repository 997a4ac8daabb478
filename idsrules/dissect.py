"""Check synthesized sessions with Wireshark's dissectors (tshark, read through pyshark).

An IDS that does not recognise a session's protocol cannot fire the rules written for it, and a
session Wireshark calls malformed is not what a real client and server would send. `dissect(pcap,
sessions)` reads the pcap in one tshark pass and returns, per session of the synthesis manifest
(each with its intended protocol, `app`), the protocols Wireshark saw in it and its problems:

- the intended protocol's dissector never ran on it ("not dissected as ftp (saw: tcp, data)");
- a packet Wireshark marks malformed, or any expert item of severity error, in the intended
  protocol or below it (our framing: handshake, headers, commands, lengths).

What a dissector *above* the intended protocol says is kept apart, in `payload_problems`: there
Wireshark reads the rule's own bytes as the application they attack (a DCE/RPC stub for the
interface the rule names, a MySQL packet in a raw TCP rule, a form body with a bad %-escape), and
an exploit is malformed for that application by design.

Sessions are matched to packets by their address pair and ports (every rule has its own address
pair). `dissect_manifest(manifest)` does the same from a manifest file (`synth.write_manifest`).

pyshark runs in a worker process of its own (dissect_worker.py, through `ntgcore.proc.Process`),
which streams each packet's layers and problems back: its child watcher then sees tshark's exit
whoever else reaps children in the calling process, and its SIGCHLD handler never lands there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ntgcore.errors import NtgError, ToolMissing
from ntgcore.packets import short_address
from ntgcore.proc import Process

# our application names -> Wireshark's protocol (layer) names
DISSECTORS = {
    "http": "http",
    "ftp": "ftp",
    "smtp": "smtp",
    "pop3": "pop",
    "imap": "imap",
    "sip": "sip",
    "dns": "dns",
    "tls": "tls",
    "ssl": "tls",
    "dcerpc": "dcerpc",
    "ssh": "ssh",
    "telnet": "telnet",
    "tcp": "tcp",
    "udp": "udp",
    "icmp": "icmp",
}
INSTALL_HINT = "tshark is not installed: apt-get install tshark"
# run by path: it imports nothing of the project (see dissect_worker.py)
WORKER = Path(__file__).resolve().parent / "dissect_worker.py"


class DissectError(NtgError):
    pass


@dataclass
class Dissected:
    sid: int
    app: str
    client: str
    server: str
    protocols: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    payload_problems: list[str] = field(default_factory=list)


def _key(a: str, ap: int, b: str, bp: int) -> frozenset:
    return frozenset(((a, ap), (b, bp)))


def _wanted(d: Dissected) -> str:
    """Wireshark's name for the session's protocol (ICMP over IPv6 is `icmpv6`)."""
    want = DISSECTORS.get(d.app, d.app)
    if want == "icmp" and ":" in d.client:
        return "icmpv6"
    return want


def dissect(pcap: str | Path, sessions: list) -> list[Dissected]:
    """One `Dissected` per session (a `synth.Session` or its manifest dict), in the same order."""
    rows = [s if isinstance(s, dict) else s.as_dict() for s in sessions]
    out = [
        Dissected(
            r["sid"],
            r.get("app") or r.get("proto", ""),
            short_address(r["client"]),
            short_address(r["server"]),
        )
        for r in rows
    ]
    index: dict[frozenset, list[Dissected]] = {}
    for r, d in zip(rows, out):
        ports = (r["cport"], r["sport"]) if r.get("proto") in ("tcp", "udp") else (0, 0)
        index.setdefault(_key(d.client, ports[0], d.server, ports[1]), []).append(d)
    for pkt in _worker_packets(pcap):
        key = _key(short_address(pkt["src"]), pkt["sport"], short_address(pkt["dst"]), pkt["dport"])
        names = pkt["layers"]
        for d in index.get(key, ()):
            d.protocols.update(names)
            want = _wanted(d)
            top = names.index(want) if want in names else len(names)
            # at or below the intended protocol: ours; above it: the rule's own bytes
            d.problems += [text for where, text in pkt["problems"] if where <= top]
            d.payload_problems += [text for where, text in pkt["problems"] if where > top]
    for d in out:
        want = _wanted(d)
        if want not in d.protocols:
            seen = (
                ", ".join(sorted(p for p in d.protocols if p not in ("eth", "ip", "ipv6")))
                or "nothing"
            )
            d.problems.insert(0, f"not dissected as {want} (saw: {seen})")
    return out


def _worker_packets(pcap: str | Path):
    """The worker's `packet` events for PCAP, as they come; its failure raised as ToolMissing
    (no tshark) or DissectError. Interrupted, the worker (and its tshark) is stopped."""
    with tempfile.TemporaryFile() as err:
        proc = Process(
            "dissect", [sys.executable, str(WORKER), str(pcap)], stdout=subprocess.PIPE, stderr=err
        ).start()
        assert proc.popen is not None and proc.popen.stdout is not None
        end: dict = {}
        try:
            with proc.popen.stdout as lines:
                for line in lines:
                    try:
                        event = json.loads(line)
                    except ValueError:  # cut short (the worker was killed while writing)
                        end = {"message": f"unreadable output of the worker: {line[:80]!r}"}
                        break
                    if event["event"] == "packet":
                        yield event
                    else:
                        end = event
        except BaseException:
            proc.stop(grace=1)
            raise
        proc.wait()
        if end.get("event") == "done":
            return
        if end.get("kind") == "tshark-missing":
            raise ToolMissing(INSTALL_HINT)
        if end.get("kind") == "tshark-failed":
            raise DissectError(f"{pcap}: tshark failed: {end['message']}")
        err.seek(0)
        tail = [x for x in err.read().decode(errors="replace").splitlines() if x.strip()][-1:]
        why = end.get("message") or (tail[0] if tail else proc.record.status)
        raise DissectError(f"{pcap}: the dissection failed: {why}")


def dissect_manifest(manifest: str | Path, pcap: str | Path | None = None) -> list[Dissected]:
    """`dissect` on the sessions of a synthesis manifest (and its pcap, unless `pcap` is given)."""
    doc = json.loads(Path(manifest).read_text())
    return dissect(pcap or doc["pcap"], doc["sessions"])


def problems_by_sid(results: list[Dissected], *, payload: bool = False) -> dict[int, list[str]]:
    """sid -> the problems of its sessions (with `payload`: those of the rule's own bytes);
    sids without problems left out."""
    out: dict[int, list[str]] = {}
    for d in results:
        found = d.payload_problems if payload else d.problems
        if found:
            out.setdefault(d.sid, []).extend(f"{d.app} {d.client}->{d.server}: {p}" for p in found)
    return out
