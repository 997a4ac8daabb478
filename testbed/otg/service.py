"""The OTG service: one configuration at a time on one site's ports, whatever the transport.

`OtgService` holds the state the OTG API acts on: the config (as the dict snappi's model gives),
its compiled plan (`testbed.otg.flows`), the engines sending it (one `flowengine gen` per tx port
and start), the receivers counting tagged frames on the rx ports, the captures, and the run folder
of the config. Every method takes and returns plain dicts (the OTG JSON shapes) or raises
`OtgRefusal`; `testbed.otg.server` puts HTTP (and gRPC) in front of it. One lock serializes the
calls: a second client sees the first's state (a config set while traffic runs is refused, 409).
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import signal
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import snappi

from analysis.capture import iter_frames
from analysis.otg import analyze_otg
from ntgcore.endpoint import Site
from ntgcore.files import replacing
from ntgcore.native_tools import executable
from ntgcore.packets import PcapWriter
from ntgcore.proc import Process
from ntgcore.runfolder import RunFolder, git_info, host_info, testbed_version, tool_versions

from ..cleanup import RunMark
from ..parts.tcpdump import Tcpdump
from . import trexsender
from .flows import CONTINUOUS, FlowPlan, Plan, PortInfo, compile_config, restore_frame, session_text
from .flows import signature as frame_signature
from .refusal import OtgRefusal

API_VERSION = snappi.Api().get_local_version().api_spec_version  # what the model release speaks
SPEEDS_BPS = {
    "speed_10_fd_mbps": 10e6,
    "speed_10_hd_mbps": 10e6,
    "speed_100_fd_mbps": 100e6,
    "speed_100_hd_mbps": 100e6,
    "speed_1_gbps": 1e9,
    "speed_10_gbps": 10e9,
    "speed_25_gbps": 25e9,
    "speed_40_gbps": 40e9,
    "speed_50_gbps": 50e9,
    "speed_100_gbps": 100e9,
    "speed_200_gbps": 200e9,
    "speed_400_gbps": 400e9,
    "speed_800_gbps": 800e9,
}
DEFAULT_SPEED = "speed_10_gbps"  # a veth has no speed: percentages of line rate refer to this
COUNTERS_MAGIC = b"NTGCNT01"
RX_SNAPLEN = 256  # the signature sits right after the L4 header: 256 bytes hold it under any stack
START_LEAD_NS = 200_000_000  # the engines start together this long after the request
VM_START_LEAD_NS = 2_500_000_000  # ... when one is in a VM (`start_lead_ns`)
VM_CLOCK_MAX_AGE_S = 0.0  # a guest's clock is set again before every start (it drifts under load)


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


@dataclass
class Port:
    """A configured OTG port: its name, the location the config gave and the site's place."""

    name: str
    location: str
    place: str
    iface: str
    speed_bps: float
    baseline: dict[str, int] = field(default_factory=dict)
    sender: str = "engine"  # or "trex": the location said `trex:` (testbed/otg/trexsender.py)


@dataclass
class Engine:
    """One `flowengine gen` sending some flows of one tx port."""

    port: str
    flows: list[FlowPlan]
    proc: Process
    counters: Path
    summary: Path
    start_ns: int
    paused: bool = False
    final: dict[str, tuple[int, int]] | None = None  # lines() once the engine has ended
    started: Path | None = None  # TRex's worker writes when it really started the traffic

    def lines(self) -> dict[str, tuple[int, int]]:
        """flow name -> (frames, bytes) sent so far, from the engine's counters file."""
        if self.started is not None:
            self.start_ns = trexsender.real_start(self.started, self.start_ns)
        if self.final is not None:
            return self.final
        try:
            with open(self.counters, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                if m[:8] != COUNTERS_MAGIC:
                    return {}
                (n,) = struct.unpack_from("=Q", m, 8)
                out: dict[str, tuple[int, int]] = {}
                for i, flow in enumerate(self.flows[:n]):
                    out[flow.name] = struct.unpack_from("=QQ", m, 24 + 16 * i)
        except (OSError, ValueError, struct.error):  # not created yet, or being created
            return {}
        if self.running():
            return out
        try:
            s = json.loads(self.summary.read_text())
            dropped = int(s["packets"]) - int(s["sent"]) - int(s.get("failed") or 0)
        except (OSError, ValueError, KeyError, TypeError):  # no summary (killed): as counted
            return out
        # The counters count a frame when it is handed to the sink, which holds it until its due
        # time; a stop drops what it held (the summary's `packets` - `sent`): the frames built
        # last, i.e. those due last, taken off their lines' counts.
        for _ in range(min(max(dropped, 0), 4096)):
            last = [x for x in self.flows if out.get(x.name, (0, 0))[0] > 0]
            if not last:
                break
            fl = max(last, key=lambda x: due_utc_ns(x, out[x.name][0] - 1, 0))
            n, b = out[fl.name]
            out[fl.name] = (n - 1, b - len(fl.frames[(n - 1) % len(fl.frames)]))
        self.final = out
        return out

    def running(self) -> bool:
        if self.started is not None and trexsender.finished(self.counters):
            return False  # TRex's worker is done sending; it only releases the port now
        return self.proc.poll() is None


@dataclass
class Receiver:
    """tcpdump on an rx port from the first start that needs it to the end of the config: the
    tagged frames it holds are the flows' received frames (the signature, `flows.signature`);
    a flow's count starts again at each start of it."""

    port: str
    tcpdump: Tcpdump
    path: Path
    seen: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    read_frames: int = 0

    def update(self) -> None:
        """Add the frames written since the last call (the file only grows while it runs)."""
        n = 0
        for ts_ns, wire_len, data in iter_frames(self.path):
            n += 1
            if n <= self.read_frames:
                continue
            sig = frame_signature(data)
            if sig is not None:
                self.seen.setdefault(sig[0], []).append((sig[1], ts_ns, wire_len))
        self.read_frames = max(self.read_frames, n)


@dataclass
class Capture:
    port: str
    tcpdump: Tcpdump | None
    path: Path


class OtgService:
    def __init__(self, site: Site, mark: RunMark, results: Path, topology: str) -> None:
        self.site = site
        self.mark = mark
        self.results = results
        self.topology = topology
        self.lock = threading.RLock()
        self.config: dict[str, Any] = {}
        self.plan: Plan | None = None
        self.ports: dict[str, Port] = {}
        self.engines: list[Engine] = []
        self.receivers: dict[str, Receiver] = {}
        self.captures: dict[str, Capture] = {}
        self.folder: RunFolder | None = None
        self.starts = 0
        self.rates: dict[tuple[str, str], tuple[float, int]] = {}
        self.trex = trexsender.TrexPorts()  # the servers of the config's `trex:` ports

    # -- places --------------------------------------------------------------------------------

    def locations(self) -> dict[str, str]:
        """Every location a config may name -> its place: `ROLE:IFACE`, and the role alone when
        it has one interface."""
        out: dict[str, str] = {}
        places = self.site.places()
        for place in places:
            out[place] = place
            role = place.split(":", 1)[0]
            if sum(1 for p in places if p.split(":", 1)[0] == role) == 1:
                out[role] = place
        return out

    # -- config --------------------------------------------------------------------------------

    def set_config(self, text: str) -> dict[str, Any]:
        with self.lock:
            if self._transmitting():
                raise OtgRefusal(
                    409,
                    "validation",
                    [
                        "traffic is running: stop it (control/state traffic.flow_transmit.state "
                        "stop) before setting a new config"
                    ],
                )
            config = parse_config(text)
            ports = self._bind_ports(config)
            plan = compile_config(
                config, {p.name: PortInfo(mtu=9000, speed_bps=int(p.speed_bps)) for p in ports}
            )
            trexsender.check(plan.flows, {p.name for p in ports if p.sender == "trex"})
            self._stop_all()
            self._finish_folder("completed")
            self.engines, self.receivers, self.captures = [], {}, {}
            self.config, self.plan = config, plan
            self.ports = {p.name: p for p in ports}
            for p in ports:
                p.baseline = self.site.counters(p.place)
            self.rates.clear()
            self.starts = 0  # a config's folder numbers its own starts: start-001 first
            if ports:
                self._open_folder()
                assert self.folder is not None
                trex = {p.name: self.site.endpoint(p.place) for p in ports if p.sender == "trex"}
                self.trex.start(plan.flows, trex, self.folder.path)
            return {"warnings": list(plan.warnings)}

    def get_config(self) -> dict[str, Any]:
        with self.lock:
            return self.config

    def _bind_ports(self, config: dict[str, Any]) -> list[Port]:
        known = self.locations()
        speeds: dict[str, str] = {}
        for ly in config.get("layer1", []) or []:
            for name in ly.get("port_names", []) or []:
                speeds[name] = ly.get("speed", DEFAULT_SPEED)
        out: list[Port] = []
        used: dict[str, str] = {}
        for i, p in enumerate(config.get("ports", []) or []):
            loc = p.get("location")
            if not loc:
                raise OtgRefusal(
                    400,
                    "validation",
                    [f"ports[{i}].location: missing; this server's locations: {', '.join(known)}"],
                )
            sender, base = trexsender.split_location(loc)
            if base not in known:
                raise OtgRefusal(
                    400,
                    "validation",
                    [
                        f"ports[{i}].location: unknown location {loc!r}; this server's "
                        f"locations: {', '.join(known)}"
                    ],
                )
            place = known[base]
            if place in used:
                raise OtgRefusal(
                    400,
                    "validation",
                    [f"ports[{i}].location: {loc!r} is already port {used[place]!r}'s"],
                )
            used[place] = p["name"]
            speed = speeds.get(p["name"], DEFAULT_SPEED)
            if speed not in SPEEDS_BPS:
                raise OtgRefusal(
                    501,
                    "unimplemented",
                    [f"layer1 speed {speed!r} of port {p['name']!r} is not supported"],
                )
            iface = place.split(":", 1)[1]
            out.append(Port(p["name"], loc, place, iface, SPEEDS_BPS[speed], sender=sender))
        return out

    # -- the run folder of a config --------------------------------------------------------------

    def _open_folder(self) -> None:
        self.folder = RunFolder(
            self.results,
            "otg",
            {
                "scenario": {
                    "name": "otg-config",
                    "source": "set_config",
                    "sha256": hashlib.sha256(
                        json.dumps(self.config, sort_keys=True).encode()
                    ).hexdigest(),
                },
                "mode": "otg",
                "method": "otg",
                "otg": {
                    "api_spec_version": API_VERSION,
                    "topology": self.topology,
                    "ports": {
                        p.name: {"location": p.location, "place": p.place}
                        for p in self.ports.values()
                    },
                    "address_map": dict(self.plan.wire_of) if self.plan else {},
                    "starts": [],
                },
                "host": host_info(),
                "git": git_info(),
                "tools": tool_versions(),
                "commands": [],
                "files": {},
            },
        )
        with replacing(self.folder.path / "config.json") as tmp:
            tmp.write_text(json.dumps(self.config, indent=1) + "\n")
        self.mark.doc["run_id"] = self.folder.path.name
        self.mark.doc["run_dir"] = str(self.folder.path.resolve())
        self.mark.write()
        self.folder.write()

    def _finish_folder(self, status: str) -> None:
        if self.folder is None:
            return
        folder, self.folder = self.folder, None
        try:
            metrics = {
                "flow_metrics": self._flow_metrics([]),
                "port_metrics": self._port_metrics([]),
            }
            with replacing(folder.path / "metrics.json") as tmp:
                tmp.write_text(json.dumps(metrics, indent=1) + "\n")
            write_report(folder.path, self.config, metrics)
            folder.manifest["status"] = status  # the tables' run row says how it ended
            analyze_otg(folder.path, folder.manifest)
        except Exception as exc:  # the folder keeps what it has; the error is on record
            folder.manifest["error"] = f"metrics: {type(exc).__name__}: {exc}"
        for e in self.engines:
            folder.manifest["commands"].append(e.proc.record.as_dict())
        folder.finish(status, recursive=True)

    def close(self, status: str = "completed") -> None:
        with self.lock:
            self._stop_all()
            self._finish_folder(status)

    # -- control ---------------------------------------------------------------------------------

    def set_control_state(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            choice = body.get("choice")
            if choice == "traffic":
                return self._traffic(body.get("traffic") or {})
            if choice == "port":
                return self._port_state(body.get("port") or {})
            if choice == "protocol":
                proto = body.get("protocol") or {}
                if proto.get("choice") == "all":
                    return {"warnings": ["no protocols are configured: nothing to start or stop"]}
                raise OtgRefusal(
                    501, "unimplemented", [f"protocol.{proto.get('choice')}: no protocol engine"]
                )
            raise OtgRefusal(400, "validation", [f"control state choice {choice!r} is not known"])

    def _traffic(self, traffic: dict[str, Any]) -> dict[str, Any]:
        if traffic.get("choice", "flow_transmit") != "flow_transmit":
            raise OtgRefusal(501, "unimplemented", [f"traffic.{traffic.get('choice')}"])
        ft = traffic.get("flow_transmit") or {}
        state = ft.get("state")
        names = list(ft.get("flow_names") or [])
        if self.plan is None or not self.config:
            raise OtgRefusal(400, "validation", ["no config is set: set one first"])
        known = {f.name: f for f in self.plan.flows}
        for n in names:
            if n not in known:
                raise OtgRefusal(
                    400,
                    "validation",
                    [f"traffic.flow_transmit.flow_names: no flow {n!r} in the config"],
                )
        flows = [known[n] for n in names] if names else list(self.plan.flows)
        if state == "start":
            return self._start(flows)
        if state == "stop":
            self._stop_engines({f.name for f in flows})
            return {"warnings": []}
        if state in ("pause", "resume"):
            sig = signal.SIGUSR1 if state == "pause" else signal.SIGUSR2
            for e in self.engines:
                if e.running() and {f.name for f in e.flows} & {f.name for f in flows}:
                    if len(e.flows) != len([f for f in e.flows if f in flows]):
                        raise OtgRefusal(
                            501,
                            "unimplemented",
                            [
                                f"{state} of some of the flows started together on port {e.port}: "
                                "pause or resume all of them"
                            ],
                        )
                    e.proc.send_signal(sig)
                    e.paused = state == "pause"
            return {"warnings": []}
        raise OtgRefusal(400, "validation", [f"traffic.flow_transmit.state {state!r} is not known"])

    def _transmitting(self, names: set[str] | None = None) -> bool:
        return any(
            e.running() and (names is None or {f.name for f in e.flows} & names)
            for e in self.engines
        )

    def _start(self, flows: list[FlowPlan]) -> dict[str, Any]:
        busy = [f.name for f in flows if self._transmitting({f.name})]
        if busy:
            raise OtgRefusal(
                409, "validation", [f"flow {busy[0]!r} is transmitting: stop it first"]
            )
        assert self.folder is not None
        self.starts += 1
        step = self.folder.path / f"start-{self.starts:03d}"
        step.mkdir()
        rx_ports = sorted({p for f in flows if f.metrics for p in f.rx_ports})
        for port in rx_ports:  # count from the first frame: the receivers listen first
            if port not in self.receivers or not self.receivers[port].tcpdump.running():
                self.receivers[port] = self._receiver(port, self.folder.path)
        for r in self.receivers.values():  # a started flow's received frames count from now
            r.update()
            for f in flows:
                r.seen.pop(f.index, None)
        places = {self.ports[f.tx_port].place for f in flows} | {
            self.ports[p].place for p in rx_ports
        }
        clocks = {}
        for place in sorted(places):  # a guest's stamps and start on this machine's clock
            done = self.site.endpoint(place).align_clock(VM_CLOCK_MAX_AGE_S)
            if done is not None:
                clocks[place] = done
        start_ns = _now_ns() + start_lead_ns(
            self.site, {self.ports[f.tx_port].place for f in flows}
        )
        by_port: dict[str, list[FlowPlan]] = {}
        for f in flows:
            by_port.setdefault(f.tx_port, []).append(f)
        started = []
        for port, fl in by_port.items():
            started.append(self._engine(port, fl, step, start_ns))
        self.engines = [e for e in self.engines if e.running()] + started
        self.folder.manifest["otg"]["starts"].append(
            {
                "folder": step.name,
                "flows": [f.name for f in flows],
                "start_utc_ns": start_ns,
                "clock_sync_ns": clocks,  # per VM place: the guest's clock set just before
            }
        )
        self.folder.write()
        for e in started:  # a refused session or interface shows at once
            time.sleep(0)
            code = e.proc.wait(0.05)
            if code not in (None, 0):
                err = (step / f"{e.port}.err").read_text(errors="replace").strip()
                raise OtgRefusal(500, "internal", [f"port {e.port}: the engine failed: {err}"])
        return {"warnings": []}

    def _engine(self, port: str, flows: list[FlowPlan], step: Path, start_ns: int) -> Engine:
        if self.ports[port].sender == "trex":
            assert self.folder is not None
            proc, counters, summary, started = trexsender.start(
                self.trex, port, flows, step, start_ns
            )
            return Engine(port, flows, proc, counters, summary, start_ns, started=started)
        frames_path = step / f"{port}.frames.pcap"
        text, frames = session_text(flows, str(frames_path), seed=1)
        with replacing(frames_path) as tmp, open(tmp, "wb") as f:
            w = PcapWriter(f, snaplen=65535)
            for fr in frames:
                w.write(0, fr)
        with replacing(step / f"{port}.session") as tmp:
            tmp.write_text(text)
        p = self.ports[port]
        counters, summary = step / f"{port}.counters", step / f"{port}.summary.json"
        argv = self.site.endpoint(p.place).argv(
            str(executable("flowengine")),
            "gen",
            str(step / f"{port}.session"),
            "--iface",
            p.iface,
            "--pace",
            "realtime",
            "--counters",
            str(counters),
            "--summary",
            str(summary),
            "--flows",
            str(step / f"{port}.flows.csv"),
            "--stats",
            str(step / f"{port}.stats.csv"),
            "--start-at",
            str(start_ns),
        )
        err = open(step / f"{port}.err", "wb")
        proc = Process(f"flowengine-{port}", argv, stdout=err, stderr=err)
        try:
            proc.start()
        finally:
            err.close()
        return Engine(port, flows, proc, counters, summary, start_ns)

    def _receiver(self, port: str, folder: Path) -> Receiver:
        p = self.ports[port]
        path = folder / f"rx-{port}.pcap"
        td = Tcpdump(
            self.site.endpoint(p.place).argv,
            p.iface,
            path,
            snaplen=RX_SNAPLEN,
            immediate=True,
            inbound_only=True,
            name=f"rx-{port}",
        ).start()
        return Receiver(port, td, path)

    def _stop_engines(self, names: set[str] | None = None) -> None:
        for e in self.engines:
            if e.running() and (names is None or {f.name for f in e.flows} & names):
                if e.paused:
                    e.proc.send_signal(signal.SIGUSR2)
                e.proc.stop(signal.SIGTERM, grace=5)

    def _stop_all(self) -> None:
        self._stop_engines()
        for record in self.trex.stop():
            if self.folder is not None:
                self.folder.manifest["commands"].append(record.as_dict())
        for r in self.receivers.values():
            r.tcpdump.stop()
        for c in self.captures.values():
            if c.tcpdump is not None:
                c.tcpdump.stop()
                c.tcpdump = None

    def _port_state(self, port: dict[str, Any]) -> dict[str, Any]:
        choice = port.get("choice")
        if choice != "capture":
            raise OtgRefusal(501, "unimplemented", [f"port.{choice}: only capture is supported"])
        cap = port.get("capture") or {}
        names = list(cap.get("port_names") or [])
        configured = [
            n for c in self.config.get("captures", []) or [] for n in c.get("port_names", []) or []
        ]
        for n in names:
            if n not in self.ports:
                raise OtgRefusal(400, "validation", [f"port.capture.port_names: no port {n!r}"])
            if n not in configured:
                raise OtgRefusal(
                    400,
                    "validation",
                    [
                        f"port.capture.port_names: port {n!r} has no capture in the config's captures"
                    ],
                )
        names = names or configured
        if cap.get("state") == "start":
            assert self.folder is not None
            for n in names:
                old = self.captures.get(n)
                if old is not None and old.tcpdump is not None:
                    old.tcpdump.stop()
                k = sum(1 for f in self.folder.path.glob(f"capture-{n}-*.pcap")) + 1
                path = self.folder.path / f"capture-{n}-{k:03d}.pcap"
                p = self.ports[n]
                td = Tcpdump(
                    self.site.endpoint(p.place).argv,
                    p.iface,
                    path,
                    snaplen=65535,
                    immediate=True,
                    inbound_only=True,
                    name=f"capture-{n}",
                ).start()
                self.captures[n] = Capture(n, td, path)
            return {"warnings": []}
        if cap.get("state") == "stop":
            for n in names:
                c = self.captures.get(n)
                if c is not None and c.tcpdump is not None:
                    c.tcpdump.stop()
                    c.tcpdump = None
            return {"warnings": []}
        raise OtgRefusal(400, "validation", [f"port.capture.state {cap.get('state')!r}"])

    # -- monitor ---------------------------------------------------------------------------------

    def get_metrics(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            choice = body.get("choice", "port")
            if choice == "flow":
                req = body.get("flow") or {}
                return {
                    "choice": "flow_metrics",
                    "flow_metrics": self._flow_metrics(req.get("flow_names") or []),
                }
            if choice == "port":
                req = body.get("port") or {}
                return {
                    "choice": "port_metrics",
                    "port_metrics": self._port_metrics(req.get("port_names") or []),
                }
            raise OtgRefusal(501, "unimplemented", [f"metrics of {choice!r}: no such protocol"])

    def _rate(self, key: tuple[str, str], count: int) -> float:
        now = time.monotonic()
        prev = self.rates.get(key)
        self.rates[key] = (now, count)
        if prev is None or now - prev[0] <= 0:
            return 0.0
        return max(0.0, (count - prev[1]) / (now - prev[0]))

    def _flow_metrics(self, names: list[str]) -> list[dict[str, Any]]:
        if self.plan is None:
            return []
        known = {f.name: f for f in self.plan.flows}
        for n in names:
            if n not in known:
                raise OtgRefusal(400, "validation", [f"flow.flow_names: no flow {n!r}"])
        for r in self.receivers.values():
            r.update()
        out = []
        for f in (known[n] for n in names) if names else self.plan.flows:
            frames_tx = bytes_tx = 0
            state = "stopped"
            for e in self.engines:
                if f.name in {x.name for x in e.flows}:
                    frames_tx, bytes_tx = e.lines().get(f.name, (0, 0))
                    if e.running() and (f.packets == CONTINUOUS or frames_tx < f.packets):
                        state = "paused" if e.paused else "started"
            rx: list[tuple[int, int, int]] = []
            for port in f.rx_ports:
                got = self.receivers.get(port)
                if got is not None:
                    rx.extend(got.seen.get(f.index, []))
            frames_rx = len(rx)
            m: dict[str, Any] = {
                "name": f.name,
                "port_tx": f.tx_port,
                "port_rx": f.rx_ports[0] if f.rx_ports else None,
                "transmit": state,
                "frames_tx": frames_tx,
                "frames_rx": frames_rx,
                "bytes_tx": bytes_tx,
                "bytes_rx": sum(w for _, _, w in rx),
                "frames_tx_rate": self._rate((f.name, "tx"), frames_tx),
                "frames_rx_rate": self._rate((f.name, "rx"), frames_rx),
                "loss": (100.0 * (frames_tx - frames_rx) / frames_tx) if frames_tx else 0.0,
            }
            if m["port_rx"] is None:
                del m["port_rx"]
            if f.timestamps and rx:
                m["timestamps"] = {
                    "first_timestamp_ns": min(t for _, t, _ in rx),
                    "last_timestamp_ns": max(t for _, t, _ in rx),
                }
            if f.latency and rx:
                lat = [t - due_utc_ns(f, seq, self._start_of(f)) for seq, t, _ in rx]
                m["latency"] = {
                    "minimum_ns": float(min(lat)),
                    "maximum_ns": float(max(lat)),
                    "average_ns": float(sum(lat) / len(lat)),
                }
            out.append(m)
        return out

    def _start_of(self, f: FlowPlan) -> int:
        for e in self.engines:
            if f.name in {x.name for x in e.flows}:
                return e.start_ns
        return 0

    def _port_metrics(self, names: list[str]) -> list[dict[str, Any]]:
        for n in names:
            if n not in self.ports:
                raise OtgRefusal(400, "validation", [f"port.port_names: no port {n!r}"])
        out = []
        for p in (self.ports[n] for n in names) if names else self.ports.values():
            now = self.site.counters(p.place)

            def delta(key: str, p: Port = p, now: dict[str, int] = now) -> int:
                return max(0, now.get(key, 0) - p.baseline.get(key, 0))

            tx = any(e.running() and e.port == p.name for e in self.engines)
            cap = self.captures.get(p.name)
            out.append(
                {
                    "name": p.name,
                    "location": p.location,
                    "link": "up",
                    "capture": "started" if cap and cap.tcpdump is not None else "stopped",
                    "transmit": "started" if tx else "stopped",
                    "frames_tx": delta("tx_packets"),
                    "frames_rx": delta("rx_packets"),
                    "bytes_tx": delta("tx_bytes"),
                    "bytes_rx": delta("rx_bytes"),
                    "frames_tx_rate": self._rate((p.name, "port-tx"), delta("tx_packets")),
                    "frames_rx_rate": self._rate((p.name, "port-rx"), delta("rx_packets")),
                }
            )
        return out

    def get_capture(self, body: dict[str, Any]) -> bytes:
        with self.lock:
            name = body.get("port_name")
            if name not in self.ports:
                raise OtgRefusal(400, "validation", [f"port_name: no port {name!r}"])
            c = self.captures.get(name)
            if c is None:
                raise OtgRefusal(400, "validation", [f"port {name!r}: no capture was started"])
            if c.tcpdump is not None:
                c.tcpdump.stop()  # a capture is read once it is stopped (as testers do)
                c.tcpdump = None
            assert self.plan is not None
            buf = io.BytesIO()
            w = PcapWriter(buf, snaplen=65535, nanosecond=False)  # what pypcapfile reads
            for ts_ns, wire_len, data in iter_frames(c.path):
                w.write(ts_ns, restore_frame(data, self.plan), wire_len)
            return buf.getvalue()


def start_lead_ns(site: Site, places: set[str]) -> int:
    """How far ahead of the request the engines' common start is set: longer when one sends from
    a VM's port (it starts through the relay and ssh in the guest: under TCG here 0.7 s from the
    request, so a 0.2 s lead started its frames 0.5 s after their due times; with CI's load beside
    it, 1.5 s was once 0.15 s short). An engine that starts late says so in its `.err` file."""
    if all(site.endpoint(place).local_processes for place in places):
        return START_LEAD_NS
    return VM_START_LEAD_NS


def due_utc_ns(f: FlowPlan, seq: int, start_ns: int) -> int:
    """When packet `seq` of flow `f` was due (CLOCK_REALTIME ns), its engine started at start_ns."""
    if f.burst:
        off = (seq // f.burst) * f.burst_period_ns + (seq % f.burst) * f.period_ns
    else:
        off = seq * f.period_ns
    return start_ns + f.start_ns + off


def parse_config(text: str) -> dict[str, Any]:
    """A config checked by the OTG model itself (snappi's classes): its dict, or a 400 naming
    what the model refused."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise OtgRefusal(400, "validation", [f"config: not JSON: {exc}"]) from None
    if not isinstance(raw, dict):
        raise OtgRefusal(400, "validation", ["config: a JSON object is expected"])
    try:
        cfg = snappi.Config()
        cfg.deserialize(raw)
        out: dict[str, Any] = cfg.serialize(encoding=cfg.DICT)
    except Exception as exc:
        raise OtgRefusal(400, "validation", [f"config: {exc}"]) from None
    dropped = unused_fields(raw, out, "")
    if dropped:
        raise OtgRefusal(
            400,
            "validation",
            [
                f"{path}: not a field of the OTG model {API_VERSION} here (unknown, or not the one "
                "its `choice` selects)"
                for path in dropped[:20]
            ],
        )
    return out


def unused_fields(given: Any, kept: Any, path: str) -> list[str]:
    """The paths of `given` that the model's own reading (`kept`) dropped: never silently."""
    out: list[str] = []
    if isinstance(given, dict) and isinstance(kept, dict):
        for k, v in given.items():
            p = f"{path}.{k}" if path else k
            if k not in kept:
                out.append(p)
            else:
                out += unused_fields(v, kept[k], p)
    elif isinstance(given, list) and isinstance(kept, list):
        for i, (g, k) in enumerate(zip(given, kept)):
            out += unused_fields(g, k, f"{path}[{i}]")
    return out


def write_report(folder: Path, config: dict[str, Any], metrics: dict[str, Any]) -> None:
    """report.md: the flows and ports as the last metrics saw them."""
    lines = [f"# OTG session {folder.name}", ""]
    lines += [
        "| flow | tx port | frames tx | frames rx | bytes tx | bytes rx | loss % |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for m in metrics["flow_metrics"]:
        lines.append(
            f"| {m['name']} | {m['port_tx']} | {m['frames_tx']} | {m['frames_rx']} | "
            f"{m['bytes_tx']} | {m['bytes_rx']} | {m['loss']:.3f} |"
        )
    lines += [
        "",
        "| port | location | frames tx | frames rx | bytes tx | bytes rx |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for m in metrics["port_metrics"]:
        lines.append(
            f"| {m['name']} | {m['location']} | {m['frames_tx']} | {m['frames_rx']} | "
            f"{m['bytes_tx']} | {m['bytes_rx']} |"
        )
    with replacing(folder / "report.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def version() -> dict[str, str]:
    return {
        "api_spec_version": API_VERSION,
        "sdk_version": API_VERSION,
        "app_version": testbed_version(),
    }
