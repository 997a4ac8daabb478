"""Live host labelling: whether an evasion variant's attack reached a real end host.

`label_live` sends every `WirePlan` live through a three-namespace lab, a client `cli`, a router
`rtr` and a server `srv` joined by two veth pairs, and asks the server application what it read:
the Linux stack in `srv` decides what a segment out of order, an overlap, a bad checksum, an IP
fragment or an old timestamp delivers, the router drops what has too few hops left (`Seg.hops`)
and forwards fragments as they are (no conntrack, so no defragmentation, in its namespace).

The client's address (198.19.250.2, 2001:db8:1:fa::2: the outside) is configured nowhere: the
router has a static neighbour entry for it pointing at the client veth's MAC, and the raw client
(`testbed.ids.hostclient`) sends and receives whole frames there, so no kernel answers the
server's SYN-ACK with a RST. The server application is `testbed.ids.hostpeer` on 198.18.250.2,
2001:db8:0:fa::2 (the home side). The capture is the client veth's traffic, both directions: what
an IDS in front of the router sees, the host's real replies included. Checksum and segmentation
offloads are off on every veth, so those replies carry real checksums and segments of at most one
MSS, as on a wire (with them on, the capture holds partial checksums and 64 KiB segments).

Everything is made for the call and removed afterwards, also on an exception, SIGINT or SIGTERM
(the namespaces carry the topology's mark; `on_places` hands their names to a caller that
records them for `testbed cleanup`, which is above this layer).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from idsrules.evasion.model import (
    Conn,
    WirePlan,
    client_packets,
    client_segs,
    plan_to_dict,
)
from idsrules.evasion.model import reached as plan_reached
from ntgcore import packets as P
from ntgcore.errors import BadInput, NtgError
from ntgcore.proc import Interrupts, Process, packet_ring_mapped

from ..endpoints.netns.topology import Topology, netns_argv, parse_topology, run_command

CLIENT = {4: "198.19.250.2", 6: "2001:db8:1:fa::2"}
SERVER = {4: "198.18.250.2", 6: "2001:db8:0:fa::2"}
ROUTER_OUT = ("198.19.250.1/24", "2001:db8:1:fa::1/64")  # the router's client side
ROUTER_IN = ("198.18.250.1/24", "2001:db8:0:fa::1/64")  # its server side
CLIENT_NETS = ("198.19.250.0/24", "2001:db8:1:fa::/64")
FIRST_CPORT = 20000
MTU = 1500
PROGRESS = "host labelling:"  # the raw client's progress lines (every 200 sessions)
MAX_ITEMS = 65535 - FIRST_CPORT + 1
IFACE = "veth0"  # the client's, the server's, and the router's client side
ROUTER_SERVER_SIDE = "veth1"
# Offloads off: the host's replies with real checksums, in segments of one MSS at most.
OFFLOADS = {"rx": False, "tx": False, "tso": False, "gso": False, "gro": False}
READY_WAIT_S = 10.0
GAP_S = 0.0005  # between two client frames: the veth keeps their order
FILES = {
    "script": "hostpeer-script.json",
    "peer_out": "hostpeer-out.json",
    "ready": "hostpeer-ready",
    "plans": "hostclient-plans.json",
    "client_out": "hostclient-out.json",
    "capture": "capture.pcap",
    "server_capture": "server.pcap",
}
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the packages the helpers import


class HostLabelError(NtgError):
    """The live lab could not be built or a helper failed; the message says which and why."""


@dataclass(frozen=True)
class HostOutcome:
    """What the host's application got from one variant. `received`: the bytes it read (TCP);
    `datagrams`: the datagrams it read (UDP); `reached`: the attack arrived whole (TCP: `received`
    contains the plan's client stream; UDP: every client message is among the datagrams)."""

    variant: str
    cls: str
    sport: int
    received: bytes
    datagrams: list[bytes]
    reached: bool
    detail: str
    cport: int = 0  # the client's port: the session's key in the capture
    server_data: bytes = b""  # TCP: the server's bytes the client received, in order
    server_datagrams: list[bytes] = field(default_factory=list)  # UDP: the server's datagrams


@dataclass
class LiveResult:
    """Per item (in order) its outcome; `capture`: the client veth's pcap (both directions);
    `server_capture`: the server veth's, when asked for; the addresses the sessions used."""

    outcomes: list[HostOutcome]
    capture: Path
    client: str
    server: str
    server_capture: Path | None = None
    commands: list[dict] = field(default_factory=list)


def lab_topology(name: str) -> Topology:
    """The three namespaces and two veth pairs (addresses of both families)."""
    return parse_topology(
        {
            "name": name,
            "mtu": MTU,
            "offloads": {k: "on" if v else "off" for k, v in OFFLOADS.items()},
            "namespaces": ["cli", "rtr", "srv"],
            "links": [
                {
                    "a": {"ns": "cli", "iface": IFACE},
                    "b": {"ns": "rtr", "iface": IFACE, "address": list(ROUTER_OUT)},
                },
                {
                    "a": {"ns": "rtr", "iface": ROUTER_SERVER_SIDE, "address": list(ROUTER_IN)},
                    "b": {
                        "ns": "srv",
                        "iface": IFACE,
                        "address": [SERVER[4] + "/24", SERVER[6] + "/64"],
                    },
                },
            ],
        },
        "host labelling lab",
    )


def _mac(topo: Topology, role: str, iface: str) -> str:
    out = run_command(topo, "ip", "-n", topo.netns(role), "-j", "link", "show", iface)
    return str(json.loads(out)[0]["address"])


def _route(topo: Topology) -> tuple[str, str]:
    """Forwarding in the router, the client's static neighbour entries, the server's way back.
    Returns (client MAC, the router's MAC on the client side)."""
    rtr, srv = topo.netns("rtr"), topo.netns("srv")
    cli_mac, gw_mac = _mac(topo, "cli", IFACE), _mac(topo, "rtr", IFACE)
    run_command(
        topo,
        *netns_argv(
            rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"
        ),
    )
    for version, client in CLIENT.items():
        run_command(
            topo,
            "ip",
            f"-{version}",
            "-n",
            rtr,
            "neigh",
            "replace",
            client,
            "lladdr",
            cli_mac,
            "dev",
            IFACE,
            "nud",
            "permanent",
        )
    for net, via in zip(CLIENT_NETS, ROUTER_IN):
        family = "6" if ":" in net else "4"
        run_command(
            topo, "ip", f"-{family}", "-n", srv, "route", "replace", net, "via", via.split("/")[0]
        )
    return cli_mac, gw_mac


def _check_items(items: Sequence[tuple[WirePlan, int]], ip_version: int) -> None:
    if ip_version not in (4, 6):
        raise BadInput(f"ip_version {ip_version!r}: use 4 or 6")
    if len(items) > MAX_ITEMS:
        raise BadInput(
            f"{len(items)} variants: at most {MAX_ITEMS} per call (one client port each); "
            "label them in several calls"
        )
    for i, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], WirePlan)):
            raise BadInput(f"item {i}: expected (WirePlan, server port), got {type(item).__name__}")
        plan, sport = item
        if plan.proto not in ("tcp", "udp"):
            raise BadInput(f"item {i} ({plan.variant}): protocol {plan.proto!r}: tcp or udp")
        if not isinstance(sport, int) or not 1 <= sport <= 65535:
            raise BadInput(f"item {i} ({plan.variant}): server port {sport!r}: 1-65535")
        if plan.family not in (0, ip_version):
            raise BadInput(
                f"item {i} ({plan.variant}): an IPv{plan.family} variant in a call with "
                f"ip_version={ip_version}: label it in a call of its own family"
            )
        conn = Conn(P.addr(CLIENT[ip_version]), P.addr(SERVER[ip_version]), 1, sport)
        for _off, _step, segs in client_segs(plan):
            for seg in segs:
                try:
                    big = max(len(p) for p in client_packets(seg, conn, plan.proto))
                except (struct.error, ValueError, OverflowError, TypeError) as exc:
                    raise BadInput(
                        f"item {i} ({plan.variant}): the segment at stream offset {seg.off} "
                        f"cannot be built ({exc}): check its hops (0-255), urgent pointer "
                        "(0-65535) and fragments"
                    ) from None
                if big > MTU:
                    raise BadInput(
                        f"item {i} ({plan.variant}): a packet of {big} bytes (stream offset "
                        f"{seg.off}) exceeds the lab's MTU of {MTU}: cut the segment or fragment it"
                    )


def _budget(items: Sequence[tuple[WirePlan, int]]) -> float:
    """An upper bound of the client's run time: every wait of every session timing out."""
    total = 10.0
    for plan, _ in items:
        servers = sum(1 for s in plan.steps if not s.from_client)
        total += 2.0 + 5.5 * servers + 0.01 * sum(len(s.segs) for s in plan.steps)
    return total


def _helper(name: str, ns: str, module: str, files: dict[str, Path], log: Path) -> Process:
    """`python -m module IN.json OUT.json` in namespace `ns`, importing these packages."""
    io = {"hostpeer": ("script", "peer_out"), "hostclient": ("plans", "client_out")}[name]
    path = os.pathsep.join(p for p in (str(SOURCE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    argv = netns_argv(
        ns, "env", f"PYTHONPATH={path}", sys.executable, "-m", module, *(str(files[k]) for k in io)
    )
    return Process(name, argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def label_live(
    items: Sequence[tuple[WirePlan, int]],
    out_dir: Path,
    *,
    ip_version: int = 4,
    server_capture: bool = False,
    on_up: Callable[[list[str]], None] | None = None,
    on_places: Callable[[list[str]], None] | None = None,
) -> LiveResult:
    """Send each (plan, server port) live to a Linux host and label it by what the host's
    application read. `out_dir` receives capture.pcap (the client veth), with `server_capture`
    server.pcap (the server veth), and the helpers' files. `on_up(namespaces)` is called once the
    lab is up and the server listens; `on_places(namespaces)` before any is made (a caller
    records them in its run mark, `testbed.cleanup.RunMark`, so that `testbed cleanup` removes
    them after a kill -9; the helpers it sees through `ntgcore.proc.watch_spawns`)."""
    _check_items(items, ip_version)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    client, server = CLIENT[ip_version], SERVER[ip_version]
    if not items:  # nothing to send: no lab, an empty capture
        with open(out_dir / FILES["capture"], "wb") as f:
            P.PcapWriter(f, nanosecond=True)
        return LiveResult([], out_dir / FILES["capture"], client, server)
    topo = lab_topology(f"ntghl{secrets.token_hex(3)}")
    sessions: list[dict[str, Any]] = [
        {"proto": plan.proto, "sport": sport, "cport": FIRST_CPORT + i, "plan": plan_to_dict(plan)}
        for i, (plan, sport) in enumerate(items)
    ]
    files = {k: out_dir / v for k, v in FILES.items()}
    for stale in ("peer_out", "ready", "client_out"):
        files[stale].unlink(missing_ok=True)
    _write_json(files["script"], _peer_script(server, files["ready"], sessions))
    procs: list[Process] = []
    if on_places is not None:
        on_places([topo.netns(r) for r in topo.namespaces])
    with Interrupts(raising=True) as interrupts:
        try:
            topo.apply()
            cli_mac, gw_mac = _route(topo)
            peer = _start_peer(topo, files, out_dir / "hostpeer.log")
            procs.append(peer)
            if server_capture:
                procs.append(_server_tcpdump(topo, files["server_capture"]))
            if on_up is not None:
                on_up([topo.netns(r) for r in topo.namespaces])
            plans = {
                "iface": IFACE,
                "mac": cli_mac,
                "gw_mac": gw_mac,
                "client": client,
                "server": server,
                "capture": str(files["capture"]),
                "gap_s": GAP_S,
                "sessions": [
                    {"cport": s["cport"], "sport": s["sport"], "plan": s["plan"]} for s in sessions
                ],
            }
            _write_json(files["plans"], plans)
            log = out_dir / "hostclient.log"
            cli = _helper("hostclient", topo.netns("cli"), "testbed.ids.hostclient", files, log)
            procs.append(cli.start())
            budget = _budget(items)
            code = _wait_relaying(cli, budget, log)
            if code is None:
                raise HostLabelError(f"the raw client did not finish within {budget:.0f} s: {log}")
            if code != 0:
                raise HostLabelError(f"the raw client failed ({cli.record.status}): {_tail(log)}")
            for proc in reversed(procs):  # tcpdump, then the server: it writes what it read
                proc.stop(signal.SIGTERM, grace=5)
            if not files["peer_out"].exists():
                raise HostLabelError(
                    f"the server application wrote no result ({peer.record.status}): "
                    f"{_tail(out_dir / 'hostpeer.log')}"
                )
            outcomes = _outcomes(
                items,
                sessions,
                json.loads(files["client_out"].read_text()),
                json.loads(files["peer_out"].read_text()),
            )
        finally:
            interrupts.raising = False  # a second signal does not cut the clean-up short
            for proc in reversed(procs):
                proc.stop(grace=2)
                if proc.stdout is not None and not isinstance(proc.stdout, int):
                    proc.stdout.close()  # a log file of ours
            topo.remove()
    return LiveResult(
        outcomes,
        files["capture"],
        client,
        server,
        files["server_capture"] if server_capture else None,
        [r.as_dict() for r in topo.records] + [p.record.as_dict() for p in procs],
    )


def _write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc) + "\n")


def _peer_script(server: str, ready: Path, sessions: list[dict[str, Any]]) -> dict:
    """What the server application is told: its address, and each session's messages."""
    return {
        "address": server,
        "ready": str(ready),
        "sessions": [
            {
                "proto": s["proto"],
                "sport": s["sport"],
                "cport": s["cport"],
                "steps": [
                    {"from_client": st["from_client"], "data": st["data"]}
                    for st in s["plan"]["steps"]
                ],
            }
            for s in sessions
        ],
    }


def _start_peer(topo: Topology, files: dict[str, Path], log: Path) -> Process:
    """The server application, started and listening (HostLabelError if it does not)."""
    peer = _helper("hostpeer", topo.netns("srv"), "testbed.ids.hostpeer", files, log)
    peer.start()
    deadline = time.monotonic() + READY_WAIT_S
    while not files["ready"].exists():
        if peer.poll() is not None or time.monotonic() > deadline:
            peer.stop(grace=1)
            raise HostLabelError(
                f"the server application did not start listening ({peer.record.status}): "
                f"{_tail(log)}"
            )
        time.sleep(0.01)
    return peer


def _wait_relaying(proc: Process, budget: float, log: Path) -> int | None:
    """Wait for the raw client (None after `budget` s), its progress lines relayed to stderr."""
    deadline = time.monotonic() + budget
    seen = 0
    while True:
        code = proc.wait(min(1.0, max(deadline - time.monotonic(), 0)))
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        for line in lines[seen:]:
            if line.startswith(PROGRESS):
                print(line, file=sys.stderr)
        seen = len(lines)
        if code is not None or time.monotonic() >= deadline:
            return code


def _server_tcpdump(topo: Topology, path: Path) -> Process:
    argv = netns_argv(
        topo.netns("srv"),
        "tcpdump",
        "-n",
        "-U",
        "-Z",
        "root",
        "-s",
        "0",
        "--immediate-mode",
        "--time-stamp-precision=nano",
        "-w",
        str(path),
        "-i",
        IFACE,
    )
    proc = Process("tcpdump server side", argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc.start()
    except FileNotFoundError:
        raise HostLabelError(
            "the server-side capture needs tcpdump: apt-get install tcpdump"
        ) from None
    deadline = time.monotonic() + READY_WAIT_S
    while not packet_ring_mapped(proc.pid or 0):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.stop(grace=1)
            raise HostLabelError(f"tcpdump on the server side did not start ({proc.record.status})")
        time.sleep(0.01)
    return proc


def _outcomes(
    items: Sequence[tuple[WirePlan, int]], sessions: list[dict], client: dict, peer: dict
) -> list[HostOutcome]:
    played = {int(s["cport"]): s for s in client.get("sessions", [])}
    read = {(c["proto"], int(c["cport"])): c for c in peer.get("connections", [])}
    out = []
    for (plan, sport), s in zip(items, sessions):
        cport = s["cport"]
        mine = played.get(cport, {})
        got = read.get((plan.proto, cport))
        said = f"client: {mine.get('status', 'not played')}" + (
            f" ({mine['detail']})" if mine.get("detail") else ""
        )
        wanted = [st.data for st in plan.steps if st.from_client]
        if plan.proto == "tcp":
            received = bytes.fromhex(got["received"]) if got else b""
            stream = plan.client_stream()
            reached = got is not None and plan_reached(plan, received)
            if got is None:
                host = "the host accepted no connection"
            else:
                same = "the attack" if reached else "other bytes than the attack's"
                host = (
                    f"the host read {len(received)} bytes, {same} ({len(stream)}), "
                    f"connection ended: {got['ended']}"
                )
            out.append(
                HostOutcome(
                    plan.variant,
                    plan.cls,
                    sport,
                    received,
                    [],
                    reached,
                    f"{host}; {said}",
                    cport,
                    bytes.fromhex(mine.get("server_data", "")),
                )
            )
        else:
            grams = [bytes.fromhex(d) for d in got["datagrams"]] if got else []
            reached = all(w in grams for w in wanted)
            host = f"the host read {len(grams)} datagram(s), {sum(w in grams for w in wanted)} of the {len(wanted)} client message(s)"
            out.append(
                HostOutcome(
                    plan.variant,
                    plan.cls,
                    sport,
                    b"",
                    grams,
                    reached,
                    f"{host}; {said}",
                    cport,
                    server_datagrams=[bytes.fromhex(d) for d in mine.get("datagrams", [])],
                )
            )
    return out
