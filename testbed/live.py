"""Live runs: one lifecycle for every run on a topology of network namespaces.

    topology up -> for every step: capture on -> DUT on -> monitor on -> generators start ->
    until they finish, the duration ends or something fails -> stop in reverse -> counters
    -> always: topology down

A run is one or more *steps* (a plain run is one step; the comparison method of seed 001 is one
step per generator, plus load steps; the loss method of seed 002 one step per packet rate and per
host count). Every step has its own folder with capture.pcap, samples.csv and the generators'
files, and an entry in the manifest, which is rewritten after every step so that whatever happens
the folder says how far the run got. Loss is always accounted the same way: sent by the
generators vs seen on the wire (the kernel counters of the receiving veth) vs received by the DUT.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from generators import GeneratorError, get_generator
from generators.base import Endpoint, Generator

from .proc import utc_now
from .runner import Run, RunSetupError, _Interrupts
from .scenario import Flow, GeneratorSpec, LoadedScenario, Scenario

NS = 1_000_000_000
STOP_DRAIN_S = 0.5  # frames still in flight when the generators stop reach the capture
REALTIME_GRACE_S = 10.0  # a realtime generator may run this much past the scenario's last packet


class LiveError(Exception):
    """The live testbed cannot run (missing tool or privilege); the message says how to fix it."""


# --------------------------------------------------------------------------------------------
# What a run does: its steps


@dataclass
class Step:
    name: str
    scenario: Scenario
    generators: list[GeneratorSpec]
    kind: str = "run"  # run | topspeed | load | rate | hosts
    params: dict[str, Any] = field(default_factory=dict)

    def deadline_s(self) -> float:
        """Wall seconds after which the step is over whatever the generators say."""
        tb = self.scenario.testbed
        assert tb is not None
        if any(g.pace == "topspeed" for g in self.generators):
            return (tb.duration or 0) / NS
        horizon = max(f.last_due_ns for f in self.scenario.flows) / NS
        horizon = max(horizon, self.params.get("attacks_last_s", 0.0))  # the attack replay, if any
        return horizon + REALTIME_GRACE_S


def _template(scenario: Scenario) -> Flow:
    return scenario.flows[0]


def _flow(template: Flow, **changes: Any) -> Flow:
    data = template.model_dump(mode="python", exclude_none=True)
    for key in ("rate", "period", "packets", "duration", "repeat"):
        data.pop(key, None)
    data.update(changes)
    if isinstance(data.get("rate"), Decimal):
        data["rate"] = f"{data['rate']:.6f}"
    for key in ("start", "duration", "period"):  # a bare number would be read as seconds
        if isinstance(data.get(key), int):
            data[key] = f"{data[key]}ns"
    if isinstance(data.get("repeat"), dict) and isinstance(data["repeat"].get("period"), int):
        data["repeat"] = {**data["repeat"], "period": f"{data['repeat']['period']}ns"}
    return Flow.model_validate(data)


def _sized(template: Flow, frame_size: int) -> dict:
    return {"size": max(0, frame_size - template.header_bytes)}


def _rate_step_flow(template: Flow, rate: Decimal, frame_size: int, step_ns: int) -> Flow:
    udp = _flow(template, protocol="udp", dst_port=_port(template), rate=1, packets=1)  # as UDP
    return _flow(template, protocol="udp", dst_port=_port(template), start=0, rate=rate,
                 duration=step_ns, payload=_sized(udp, frame_size))


def _port(template: Flow):
    return template.dst_port.model_dump() if template.dst_port else 9


def _host_step_flows(template: Flow, hosts: int, sessions: int, host_rate: Decimal,
                     frame_size: int, step_ns: int) -> list[Flow]:
    """Seed 002 II.B: every host runs `sessions` UDP sessions one after another."""
    base = template.src.interface.ip
    session_ns = max(1, step_ns // sessions)
    flows = []
    for h in range(hosts):
        src = str(ipaddress.ip_address(int(base) + h))
        flows.append(_flow(
            template, name=f"host{h + 1}", protocol="udp", src=src,
            src_port={"range": "10000-60000", "mode": "increment"},
            dst_port=_port(template),
            start=0, rate=host_rate, duration=session_ns,
            payload=_sized(template, frame_size), repeat={"count": sessions, "period": session_ns},
        ))  # fmt: skip
    return flows


def _with(scenario: Scenario, flows: list[Flow] | None = None, **testbed: Any) -> Scenario:
    tb = scenario.testbed.model_copy(update=testbed) if testbed else scenario.testbed
    return scenario.model_copy(update={"flows": flows or scenario.flows, "testbed": tb})


def plan_steps(scenario: Scenario) -> list[Step]:
    tb = scenario.testbed
    if tb is None:
        raise ValueError("not a live scenario")
    gens = scenario.live_generators()
    if tb.method == "run":
        return [Step("run", scenario, gens)]
    if tb.method == "comparison":
        steps = []
        for g in gens:
            fast = g.model_copy(update={"pace": "topspeed"})
            steps.append(Step(g.title, scenario, [fast], "topspeed", {"generator": g.title}))
        if tb.load_steps:
            ls = tb.load_steps
            template = _template(scenario)
            frame = template.header_bytes + template.payload.sizes[0]
            for g in gens:
                slow = g.model_copy(update={"pace": "realtime"})
                for k in range(1, ls.count + 1):
                    load = k * ls.step_kbps * 1000  # bytes per second
                    rate = Decimal(load) / Decimal(frame)
                    flow = _flow(template, start=0, rate=rate, duration=ls.duration)
                    steps.append(Step(f"{g.title}-load-{k * ls.step_kbps}kBps", _with(scenario, [flow]),
                                      [slow], "load", {"generator": g.title,
                                                       "offered_kBps": k * ls.step_kbps}))  # fmt: skip
        return steps
    sw = tb.sweep
    assert sw is not None
    template = _template(scenario)
    steps = []
    for rate in sw.packet_rates:
        if rate == "max":  # as fast as the generators go, for one step
            flow = _rate_step_flow(template, Decimal(100_000_000), sw.frame_size, sw.step)
            fast = [g.model_copy(update={"pace": "topspeed"}) for g in gens]
            steps.append(Step("rate-max", _with(scenario, [flow], duration=sw.step), fast, "rate",
                              {"packet_rate": None, "max": True, "step_s": sw.step / NS}))  # fmt: skip
            continue
        flow = _rate_step_flow(template, rate, sw.frame_size, sw.step)
        steps.append(Step(f"rate-{rate.normalize():f}pps", _with(scenario, [flow]), gens, "rate",
                          {"packet_rate": float(rate), "step_s": sw.step / NS}))  # fmt: skip
    for hosts in sw.hosts:
        flows = _host_step_flows(template, hosts, sw.sessions_per_host, sw.host_rate,
                                 sw.frame_size, sw.step)  # fmt: skip
        steps.append(Step(f"hosts-{hosts}", _with(scenario, flows), gens, "hosts",
                          {"hosts": hosts, "packet_rate": float(sw.host_rate * hosts),
                           "flows_per_second": hosts * sw.sessions_per_host / (sw.step / NS)}))
    return steps


# --------------------------------------------------------------------------------------------
# Preconditions: say what fixes them


def check_places(scenario: Scenario, topo) -> str | None:
    """Why a place (`ROLE:IFACE`) of the scenario is not an interface of the topology, or None."""
    tb = scenario.testbed
    places = [("generators", g.at) for g in scenario.live_generators()]
    places += [("dut.at", tb.dut.at)] if tb.dut.kind != "none" else []
    places += [("capture.at", tb.capture.at)] if tb.capture else []
    have = [f"{r}:{i}" for r in topo.namespaces for i in topo.iface(r)]
    for field_name, place in places:
        if place not in have:
            return (f"testbed.{field_name}: `{place}` is not an interface of topology {topo.name} "
                    f"(it has: {', '.join(have)})")
    return None


def check_live_prerequisites(scenario: Scenario) -> None:
    import os

    tb = scenario.testbed
    assert tb is not None
    if os.geteuid() != 0:
        raise LiveError("a live run creates network namespaces and needs root: run it with sudo "
                        "(or as root)")  # fmt: skip
    needed = {"ip": "iproute2", "ethtool": "ethtool", "tc": "iproute2"}
    if tb.capture is not None or tb.dut.kind == "tcpdump":
        needed["tcpdump"] = "tcpdump"
    if tb.dut.kind == "suricata":
        needed["suricata"] = "suricata"
    if scenario.attacks is not None:
        needed["tcpreplay"] = "tcpreplay"     # replays the attack sessions
    for g in scenario.live_generators():
        if g.name == "tcpreplay":
            needed["tcpreplay"] = "tcpreplay"
        if g.name == "ostinato":
            needed["drone"] = "ostinato"
    missing = [(cmd, pkg) for cmd, pkg in needed.items() if not shutil.which(cmd)]
    if missing:
        cmds = ", ".join(c for c, _ in missing)
        pkgs = [p for p in dict.fromkeys(p for _, p in missing) if p != "suricata"]
        how = [f"`apt-get install {' '.join(pkgs)}`"] if pkgs else []
        if any(p == "suricata" for _, p in missing):  # Suricata 7 is in bookworm-backports only
            how.append("`apt-get install -t bookworm-backports suricata` (with bookworm-backports "
                       "in the apt sources)")
        raise LiveError(f"missing {cmds}: install with {' and '.join(how)}, or run "
                        f"./bootstrap.sh test, which installs every tool the testbed uses")


# --------------------------------------------------------------------------------------------
# The device under test


class _Dut:
    """tcpdump or Suricata reading one veth of the topology."""

    def __init__(self, kind: str, spec, topo, step_dir: Path, scenario_dir: Path):
        self.kind = kind
        self.spec = spec
        self.topo = topo
        self.dir = step_dir
        self.scenario_dir = scenario_dir
        self.impl: Any = None
        self.died: str | None = None

    def start(self, abort=None) -> None:
        role, iface = self.spec.at.split(":", 1)
        if self.kind == "tcpdump":
            from .capture import Tcpdump

            out = self.dir / "dut.pcap" if self.spec.write else Path("/dev/null")
            self.impl = Tcpdump(self.topo.exec_argv(role), iface, out, snaplen=self.spec.snaplen,
                                buffer_kib=self.spec.buffer_kib, name="dut-tcpdump")  # fmt: skip
            self.impl.start()
        elif self.kind == "suricata":
            from .dut.suricata import LiveSuricata

            rules = [self.scenario_dir / r for r in self.spec.rules]
            self.impl = LiveSuricata(self.topo.exec_argv(role), iface, rules, self.dir / "dut")
            self.impl.start(abort)

    def alive(self) -> bool:
        if self.impl is None:
            return True
        if self.impl.running():
            return True
        if self.died is None:
            self.died = (f"the device under test ({self.kind}) ended during the step: "
                         f"{self.impl.record.status}")
        return False

    def stop(self) -> dict:
        if self.impl is None:
            return {}
        self.impl.stop()
        return self.impl.stats()

    def pids(self) -> dict[str, int]:
        pid = getattr(self.impl, "pid", None) if self.impl else None
        return {f"dut:{self.kind}": pid} if pid else {}

    def records(self) -> list:
        return [self.impl.record] if self.impl is not None else []

    @staticmethod
    def received(stats: dict) -> int | None:
        return stats.get("received") if "received" in stats else stats.get("captured")


# --------------------------------------------------------------------------------------------
# The run


class LiveRun(Run):
    def __init__(self, loaded: LoadedScenario, out_root: Path, seed: int | None = None,
                 duration_ns: int | None = None):  # fmt: skip
        scenario = loaded.scenario
        if duration_ns is not None:  # how long every step sends, for short runs (CI)
            tb = scenario.testbed
            changes: dict[str, Any] = {"duration": duration_ns}
            if tb.sweep is not None:
                changes["sweep"] = tb.sweep.model_copy(update={"step": duration_ns})
            if tb.load_steps is not None:
                changes["load_steps"] = tb.load_steps.model_copy(update={"duration": duration_ns})
            scenario = _with(scenario, **changes)
            loaded = LoadedScenario(scenario, loaded.path, loaded.text)
        super().__init__(loaded, out_root, seed)
        self.steps = plan_steps(scenario)
        if scenario.attacks is not None:
            self._add_attacks(scenario)
        self.manifest["mode"] = "live"
        self.manifest["method"] = scenario.testbed.method
        self.manifest["steps"] = []
        self.manifest["testbed"] = {}
        self._records: list = []

    def _add_attacks(self, scenario: Scenario) -> None:
        """`attacks:` live: the attack sessions are synthesized into attacks/attacks.pcap and
        replayed (realtime) by an extra tcpreplay generator on the first generator's interface,
        alongside the benign generators, in every step that runs the scenario's flows."""
        from generators.rules.attacks import AttackError, write_attacks

        from .scenario import attack_rule_paths

        rules = attack_rule_paths(scenario.attacks, self.loaded.path)
        try:
            attacks = write_attacks(scenario.attacks, rules, self.run_dir / "attacks")
        except AttackError as exc:
            self.manifest["error"] = str(exc)
            self._finish("failed")
            raise RunSetupError(str(exc)) from None
        info = attacks.summary()
        info["pcap"] = "attacks/attacks.pcap"
        info["manifest"] = "attacks/attacks.json"
        self.manifest["attacks"] = info
        first = scenario.live_generators()[0]
        replay = GeneratorSpec(name="tcpreplay", label="attacks", at=first.at, pace="realtime",
                               pcap=str(attacks.pcap.resolve()))
        span_s = ((info["last_ns"] or 0) - (info["first_ns"] or 0)) / NS
        for step in self.steps:
            if step.kind == "run":
                step.generators = [*step.generators, replay]
                step.params["attacks_last_s"] = span_s

    def execute(self, show_progress: bool = True) -> str:
        from .topology import load_topology

        tb = self.scenario.testbed
        assert tb is not None
        status = "completed"
        try:
            topo = load_topology(tb.topology, base_dir=self.loaded.path.parent,
                                 source=str(self.loaded.path))
            problem = check_places(self.scenario, topo)
            topo = topo.renamed(f"ntg{secrets.token_hex(3)}")
        except Exception as exc:  # a topology that does not load is bad input
            problem = f"testbed.topology: {exc}"
        if problem:
            self.manifest["error"] = problem
            self._finish("failed")
            raise RunSetupError(f"{self.loaded.path}: {problem}")
        self.manifest["testbed"] = {"topology": topo.name, "namespaces": None, "applied": [],
                                    "removed": None}  # fmt: skip
        self.write_manifest()
        with _Interrupts() as interrupts, ExitStack() as stack:  # teardown runs with signals held
            try:
                stack.callback(self._teardown, topo)
                self.manifest["testbed"]["applied"] = topo.apply()
                self.manifest["testbed"]["namespaces"] = sorted({topo.netns(r) for r in _roles(topo)})
                self.write_manifest()
                for i, step in enumerate(self.steps, 1):
                    if show_progress:
                        print(f"step {i}/{len(self.steps)}: {step.name}", file=sys.stderr, flush=True)
                    entry = self._run_step(step, topo, interrupts, show_progress)
                    self.manifest["steps"].append(entry)
                    self.write_manifest()
                    if entry["status"] == "interrupted":
                        status = "interrupted"
                        self.manifest["interrupted_by"] = signal.Signals(interrupts.received).name
                        break
                    if entry["status"] != "completed":
                        status = "failed"
                        self.manifest.setdefault("error", f"step {step.name}: {entry.get('error')}")
                        break
            except GeneratorError as exc:
                status = "failed"
                self.manifest["error"] = str(exc)
            except Exception as exc:  # a failure of the testbed itself: keep what we have
                status = "failed"
                self.manifest["error"] = f"{type(exc).__name__}: {exc}"
        self.manifest["commands"] = [r.as_dict() for r in self._records]
        return self._finish(status)

    def _teardown(self, topo) -> None:
        try:
            self.manifest["testbed"]["removed"] = topo.remove()
        except Exception as exc:  # teardown problems are reported, never hidden
            self.manifest["testbed"]["removed"] = f"failed: {exc}"
            self.manifest.setdefault("error", f"topology teardown failed: {exc}")

    def _finish(self, status: str) -> str:
        from .runner import _sha256

        self.manifest["status"] = status
        self.manifest["finished_utc"] = utc_now()
        for path in sorted(self.run_dir.rglob("*")):
            rel = str(path.relative_to(self.run_dir))
            if path.is_file() and not path.name.startswith(".") and rel != "manifest.json":
                self.manifest["files"][rel] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        self.write_manifest()
        return status

    def _run_step(self, step: Step, topo, interrupts, show_progress: bool) -> dict:
        from .capture import Tcpdump
        from .monitor import Sampler

        tb = step.scenario.testbed
        step_dir = self.run_dir if len(self.steps) == 1 else self.run_dir / step.name
        step_dir.mkdir(exist_ok=True)
        entry: dict[str, Any] = {"name": step.name, "kind": step.kind, "params": step.params,
                                 "dir": str(step_dir.relative_to(self.run_dir)) or ".",
                                 "started_utc": utc_now(), "status": "running"}  # fmt: skip
        gens: list[tuple[GeneratorSpec, Generator]] = []
        capture = dut = sampler = None
        records: list = []
        wire_points = _wire_points(step, tb)
        before = {p: _counters(topo, p) for p in wire_points}
        status, error = "completed", None
        stopped_at_deadline: set[str] = set()
        try:
            if tb.capture is not None:
                role, iface = tb.capture.at.split(":", 1)
                capture = Tcpdump(topo.exec_argv(role), iface, step_dir / "capture.pcap",
                                  snaplen=tb.capture.snaplen, buffer_kib=tb.capture.buffer_kib,
                                  name="capture")  # fmt: skip
                records.append(capture.record)  # listed even if it fails to start
                capture.start()
            if tb.dut.kind != "none":
                dut = _Dut(tb.dut.kind, tb.dut, topo, step_dir, self.loaded.path.parent)
                try:
                    dut.start(abort=lambda: interrupts.received is not None)
                finally:
                    records += dut.records()

            def pids() -> dict[str, int]:
                out = {(f"dut:{r.name}" if dut is not None and r in dut.records() else r.name): r.pid
                       for r in records if r.pid and r.exit_code is None}  # fmt: skip
                for spec, g in gens:
                    for r in g.commands():
                        if r.pid and r.exit_code is None:
                            out[f"gen:{spec.title}:{r.name}"] = r.pid
                return out

            sampler = Sampler(step_dir / "samples.csv", hz=tb.monitor.hz, pids=pids)
            sampler.start()
            for spec in step.generators:
                if spec.pcap and not Path(spec.pcap).is_absolute():
                    spec = spec.model_copy(update={"pcap": str(self.loaded.path.parent / spec.pcap)})
                gen = get_generator(spec.name, spec)
                gdir = step_dir / f"gen-{spec.title}"
                gdir.mkdir(exist_ok=True)
                endpoint = Endpoint(topo.netns(spec.role), spec.iface, spec.pace,
                                    (tb.duration / NS) if spec.pace == "topspeed" else None)
                gen.prepare(step.scenario, gdir, self.seed, endpoint)
                self.manifest["tools"].setdefault(gen.name, gen.version())
                gens.append((spec, gen))
            deadline = time.monotonic() + step.deadline_s()
            bar = _StepBar(show_progress, step.deadline_s(), step.name)
            for spec, gen in gens:
                gen.start()
            live = records + [r for _, g in gens for r in g.commands()]
            self.manifest["commands"] = [r.as_dict() for r in self._records + live]
            self.write_manifest()  # what runs now, with pids, for whoever watches the run
            while True:
                running = [(s, g) for s, g in gens if not g.wait(0.05)]
                bar.update(time.monotonic() - (deadline - step.deadline_s()))
                if not running:
                    break
                if interrupts.received is not None:
                    status = "interrupted"
                    for _, g in running:
                        g.stop(interrupt=True)
                    break
                if dut is not None and not dut.alive():
                    status, error = "failed", dut.died
                    for _, g in running:
                        g.stop()
                    break
                if capture is not None and not capture.running():
                    status = "failed"
                    error = f"the capture ended during the step: {capture.record.status}"
                    for _, g in running:
                        g.stop()
                    break
                crashed = [s_ for s_, g in gens if (s_, g) not in running and g.status() == "failed"]
                if crashed:  # one generator failed: the step is lost, stop the others now
                    for _, g in running:
                        g.stop()
                    break
                if time.monotonic() >= deadline:
                    for s, g in running:
                        stopped_at_deadline.add(s.title)
                        g.stop()
                    break
            bar.close()
            for spec, gen in gens:
                gs = gen.status()
                if spec.title in stopped_at_deadline and (step.kind != "run" or spec.pace == "topspeed"):
                    gs = "completed"  # stopped by the run's duration, as planned
                elif spec.title in stopped_at_deadline:
                    gs = "failed"
                    error = error or (f"{spec.title} was still sending {step.deadline_s():.0f} s "
                                      f"after the step began; stopped")
                if gs == "failed" and status == "completed":
                    status = "failed"
                    notes = [r.note for r in gen.commands() if r.note]
                    error = error or f"generator {spec.title} failed" + (f": {notes[0]}" if notes else "")
                if gs == "interrupted" and status == "completed":
                    status = "interrupted"
        except (GeneratorError, LiveError, RunSetupError) as exc:
            status, error = "failed", str(exc)
        except Exception as exc:  # any failure of a part: keep the data so far, tear down
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            # stop in reverse order of start; every part is stopped even if one stop fails
            for _, g in reversed(gens):
                _quietly(lambda g=g: g.stop() if g.status() == "running" else None)
            time.sleep(STOP_DRAIN_S if gens else 0)
            if sampler is not None:
                entry["monitor"] = _quietly(sampler.stop) or {}
            if dut is not None:
                entry["dut"] = {"kind": dut.kind, **(_quietly(dut.stop) or {})}
                if dut.died:
                    entry["dut"]["died"] = dut.died
            if capture is not None:
                _quietly(capture.stop)
                entry["capture"] = capture.stats()
            for spec, g in gens:
                records += g.commands()
            self._records += records
            self.manifest["commands"] = [r.as_dict() for r in self._records]
        after = {p: _counters(topo, p) for p in wire_points}
        entry["wire"] = {p: _delta(before[p], after[p]) for p in wire_points}
        entry["generators"] = {s.title: {"name": s.name, "at": s.at, "pace": s.pace,
                                         "status": g.status(), **g.counters().as_dict()}
                               for s, g in gens}  # fmt: skip
        for s, g in gens:  # the generator's own view of its ports (Ostinato's getStats)
            stats = _quietly(g.port_stats) if hasattr(g, "port_stats") else None
            if stats:
                entry["generators"][s.title]["port_stats"] = stats
        entry["loss"] = loss_accounting(entry, tb)
        if status == "failed" and interrupts.received is not None:
            status = "interrupted"  # the failure came from stopping on the user's request
        entry["status"] = status
        if error:
            entry["error"] = error
        entry["finished_utc"] = utc_now()
        return entry


def _roles(topo) -> list[str]:
    return list(getattr(topo, "namespaces", []) or [])


def _wire_points(step: Step, tb) -> list[str]:
    points = [g.at for g in step.generators]
    if tb.dut.kind != "none":
        points.append(tb.dut.at)
    if tb.capture is not None:
        points.append(tb.capture.at)
    return list(dict.fromkeys(points))


def _counters(topo, place: str) -> dict:
    role, iface = place.split(":", 1)
    try:
        return topo.counters(role, iface)
    except Exception:  # a namespace already gone: no numbers rather than a crash
        return {}


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in b if k in a}


def loss_accounting(entry: dict, tb) -> dict:
    """Sent by the generators vs seen on the wire vs received by the DUT, in packets.

    `wire` is the receive counter of the DUT's interface (or the capture's, without a DUT);
    `dut` is what the DUT says it received, minus what its kernel buffer dropped."""
    sent = sum(g.get("packets_sent", 0) for g in entry.get("generators", {}).values())
    at = tb.dut.at if tb.dut.kind != "none" else (tb.capture.at if tb.capture else None)
    wire = entry.get("wire", {}).get(at, {}).get("rx_packets") if at else None
    out: dict[str, Any] = {"sent": sent, "wire": wire, "dut": None, "dut_dropped": None}
    dut = entry.get("dut") or {}
    if dut:
        out["dut"] = dut.get("received", dut.get("captured"))
        out["dut_dropped"] = dut.get("dropped", dut.get("dropped_by_kernel"))
    if wire is not None:
        out["lost_on_wire"] = sent - wire
    if out["dut"] is not None and wire is not None:
        out["lost_at_dut"] = wire - out["dut"]
    last = out["dut"] if out["dut"] is not None else wire
    out["loss_rate"] = (1 - last / sent) if sent and last is not None else None
    capture = entry.get("capture") or {}
    if capture:
        out["captured"] = capture.get("captured")
        out["capture_dropped"] = capture.get("dropped_by_kernel")
    return out


def _quietly(fn):
    try:
        return fn()
    except Exception as exc:  # keep stopping the other parts
        print(f"warning: while stopping: {exc}", file=sys.stderr)
        return None


class _StepBar:
    def __init__(self, enabled: bool, total_s: float, name: str):
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=round(total_s, 1), desc=name, delay=2.0, leave=False,
                            file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s")

    def update(self, elapsed: float) -> None:
        if self.bar is not None:
            self.bar.n = min(round(elapsed, 1), self.bar.total)
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
