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
"""

from __future__ import annotations

import asyncio
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyshark

from ntgcore.errors import NtgError, ToolMissing
from ntgcore.packets import short_address

# our application names -> Wireshark's protocol (layer) names
DISSECTORS = {"http": "http", "ftp": "ftp", "smtp": "smtp", "pop3": "pop", "imap": "imap", "sip": "sip",
              "dns": "dns", "tls": "tls", "ssl": "tls", "dcerpc": "dcerpc", "ssh": "ssh", "telnet": "telnet",
              "tcp": "tcp", "udp": "udp", "icmp": "icmp"}
SEVERITY_ERROR = 0x00800000          # Wireshark's PI_ERROR
MALFORMED = "_ws.malformed"
INSTALL_HINT = "tshark is not installed: apt-get install tshark"


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


def _field_values(layer, name: str) -> list[str]:
    f = layer.get_field(name)
    if f is None:
        return []
    return [x.show for x in f.all_fields]


def _packet_problems(pkt, want: str) -> tuple[list[str], list[str]]:
    """(problems at or below the `want` layer, problems above it) of one packet."""
    names = [layer.layer_name.lower() for layer in pkt.layers]
    top = names.index(want) if want in names else len(names)
    own: list[str] = []
    above: list[str] = []
    for pos, layer in enumerate(pkt.layers):
        # a malformed packet is the fault of the dissector that ran last before the marker
        where = pos - 1 if layer.layer_name == MALFORMED else pos
        out = above if where > top else own
        severities = _field_values(layer, "_ws_expert_severity")
        messages = _field_values(layer, "_ws_expert_message")
        for k, sev in enumerate(severities):
            try:
                level = int(sev)
            except ValueError:
                continue
            if level >= SEVERITY_ERROR:
                msg = messages[k] if k < len(messages) else "expert error"
                what = (f"malformed {names[where]}" if layer.layer_name == MALFORMED
                        else f"expert error in {layer.layer_name}")
                out.append(f"frame {pkt.number}: {what}: {msg}")
        if layer.layer_name == MALFORMED and not severities:
            out.append(f"frame {pkt.number}: malformed {names[where]}")
    return own, above


def _packet_key(pkt) -> frozenset | None:
    if hasattr(pkt, "ip"):
        net, proto = pkt.ip, pkt.ip.proto
    elif hasattr(pkt, "ipv6"):
        net, proto = pkt.ipv6, pkt.ipv6.nxt
    else:
        return None
    src, dst = short_address(net.src), short_address(net.dst)
    # the outer header's transport (an ICMP error quotes an inner UDP or TCP header)
    transport = {"6": "tcp", "17": "udp"}.get(proto)
    if transport and hasattr(pkt, transport):
        t = getattr(pkt, transport)
        return _key(src, int(t.srcport), dst, int(t.dstport))
    return _key(src, 0, dst, 0)


def _wanted(d: Dissected) -> str:
    """Wireshark's name for the session's protocol (ICMP over IPv6 is `icmpv6`)."""
    want = DISSECTORS.get(d.app, d.app)
    if want == "icmp" and ":" in d.client:
        return "icmpv6"
    return want


def _drop_child_watcher() -> None:
    """Undo what pyshark does to the process: it sets a SIGCHLD handler and a wakeup fd (a
    SafeChildWatcher, which it needs: asyncio's threaded watcher loses races with subprocess's own
    reaping) on an event loop that no longer runs once it is done; every later child exit would
    then write to a pipe nobody reads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # child watchers: deprecated in 3.12
        watcher = asyncio.get_child_watcher()
        if isinstance(watcher, asyncio.SafeChildWatcher):
            watcher.close()
            asyncio.set_child_watcher(None)


def dissect(pcap: str | Path, sessions: list) -> list[Dissected]:
    """One `Dissected` per session (a `synth.Session` or its manifest dict), in the same order."""
    rows = [s if isinstance(s, dict) else s.as_dict() for s in sessions]
    out = [Dissected(r["sid"], r.get("app") or r.get("proto", ""), short_address(r["client"]),
                     short_address(r["server"])) for r in rows]
    index: dict[frozenset, list[Dissected]] = {}
    for r, d in zip(rows, out):
        ports = (r["cport"], r["sport"]) if r.get("proto") in ("tcp", "udp") else (0, 0)
        index.setdefault(_key(d.client, ports[0], d.server, ports[1]), []).append(d)
    try:
        cap = pyshark.FileCapture(str(pcap), keep_packets=False)
        try:
            for pkt in cap:
                key = _packet_key(pkt)
                for d in index.get(key, ()) if key else ():
                    d.protocols.update(layer.layer_name.lower() for layer in pkt.layers)
                    own, above = _packet_problems(pkt, _wanted(d))
                    d.problems += own
                    d.payload_problems += above
        finally:
            cap.close()
            _drop_child_watcher()
    except pyshark.tshark.tshark.TSharkNotFoundException:
        raise ToolMissing(INSTALL_HINT) from None
    except pyshark.capture.capture.TSharkCrashException as exc:
        raise DissectError(f"{pcap}: tshark failed: {exc}") from None
    for d in out:
        want = _wanted(d)
        if want not in d.protocols:
            seen = ", ".join(sorted(p for p in d.protocols if p not in ("eth", "ip", "ipv6"))) or "nothing"
            d.problems.insert(0, f"not dissected as {want} (saw: {seen})")
    return out


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
