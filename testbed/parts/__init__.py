"""The parts of a step: captures, device under test, monitor and generators (and in their own
modules the VRRP pair, the inline multiplier, the fault injector), all behind one start / alive /
stop / statistics protocol (`Part`, ntgcore.parts), so that the step executor
(testbed/executor.py) runs every one of them the same way under one exit stack. Each is a
`PartPlugin` registered by name (group `ntg_testbed.parts`); the DUT kinds tcpdump and suricata
are `DutKind`s (group `ntg_testbed.dut_kinds`), started by the part `dut`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field

from analysis.capture import CaptureError, read_capture
from ntgcore.endpoint import Endpoint, PowerSwitch
from ntgcore.files import no_space_at
from ntgcore.generator import Generator
from ntgcore.parts import (
    CAPTURE_ORDER,
    DUT_ORDER,
    MONITOR_ORDER,
    DutKind,
    Part,
    PartContext,
    PartPlugin,
)
from ntgcore.proc import CommandRecord, Tool
from ntgcore.registry import DUT_KINDS
from ntgcore.scenario import (
    CaptureSpec,
    CommonDutSpec,
    DutSpec,
    GeneratorSpec,
    Scenario,
    TestbedSpec,
)

from ..ids.suricata import LiveSuricata
from .monitor import Sampler
from .tcpdump import Tcpdump, TcpdumpError


def _live(records: list[CommandRecord], label: Callable[[CommandRecord], str]) -> dict[str, int]:
    return {label(r): r.pid for r in records if r.pid and r.exit_code is None}


def capture_file(place: str | None = None) -> str:
    """The file of the capture at `place`: capture.pcap for `capture.at` (None), else
    capture-ROLE-IFACE.pcap (`capture.also_at`)."""
    return "capture.pcap" if place is None else f"capture-{place.replace(':', '-')}.pcap"


class CapturePart(Part):
    """tcpdump on one interface: what was seen on the wire (capture.pcap; `also_at`: the same
    on another interface, into capture-ROLE-IFACE.pcap)."""

    key = "capture"
    tools = (Tool("tcpdump", "tcpdump"),)

    def __init__(
        self, spec: CaptureSpec, endpoint: Endpoint, step_dir: Path, also_at: str | None = None
    ) -> None:
        self.file = capture_file(also_at)
        self.place, self.counted = also_at or spec.at, also_at is None
        self.tcpdump = Tcpdump(
            endpoint.argv,
            endpoint.iface,
            step_dir / self.file,
            snaplen=spec.snaplen,
            buffer_kib=spec.buffer_kib,
            name=self.file.removesuffix(".pcap"),
        )

    def listed(self, entry: dict) -> None:
        """The entry's `captures` lists every capture (file, place, statistics, and whether it is
        `counted`: only capture.pcap is, in the rates and checks); `capture` is capture.pcap's."""
        self.row = {"file": self.file, "at": self.place, "counted": self.counted}
        entry.setdefault("captures", []).append(self.row)

    def record(self, entry: dict, stats: dict) -> None:
        self.row.update(stats)
        if self.counted:
            entry["capture"] = stats

    def start(self, abort) -> None:
        self.tcpdump.start()

    def problem(self) -> str | None:
        if self.no_space() is not None:
            return no_space_at(self.no_space())
        if self.tcpdump.running():
            return None
        return f"the capture ended during the step: {self.tcpdump.record.status}"

    def no_space(self) -> Path | None:
        return self.tcpdump.filled()

    def stop(self) -> dict:
        self.tcpdump.stop()
        return self.tcpdump.stats()

    def records(self) -> list[CommandRecord]:
        return [self.tcpdump.record]

    def pids(self) -> dict[str, int]:
        return _live(self.records(), lambda r: r.name)


class Dut(Part):
    """The device under test, reading one interface; a kind per subclass (DUT_KINDS).

    At a place with a power switch (a VM), a DUT whose process ends because the machine was
    switched off (the fault `power-off`) has not failed: it is `powered_off`, and what it counted
    until then is what it received."""

    key = "dut"
    kind = "dut"
    watched_first = True
    POWER_GRACE_S = 3.0  # a DUT's end seen before its VM's power is: this long to tell them apart

    def __init__(
        self, spec: DutSpec, endpoint: Endpoint, step_dir: Path, scenario_dir: Path
    ) -> None:
        self.spec, self.endpoint, self.dir, self.scenario_dir = (
            spec,
            endpoint,
            step_dir,
            scenario_dir,
        )
        self.impl: Tcpdump | LiveSuricata | None = None
        self.died: str | None = None
        self.powered_off = False
        self._ended_at: float | None = None

    def problem(self) -> str | None:
        if self.no_space() is not None:
            return no_space_at(self.no_space())
        if self.impl is None or self.impl.running() or self.powered_off:
            return None
        if self.died is None and isinstance(self.endpoint, PowerSwitch):
            if not self.endpoint.exists():  # its machine was switched off under it
                self.powered_off = True
                return None
            if self._ended_at is None:
                self._ended_at = time.monotonic()
            if time.monotonic() - self._ended_at < self.POWER_GRACE_S:
                return None
        if self.died is None:
            self.died = (
                f"the device under test ({self.kind}) ended during the step: "
                f"{self.impl.record.status}"
            )
        return self.died

    def no_space(self) -> Path | None:
        return self.impl.filled() if isinstance(self.impl, Tcpdump) else None

    def stop(self) -> dict:
        if self.impl is None:
            return {"kind": self.kind}
        self.impl.stop()
        out = {"kind": self.kind, **self.impl.stats()}
        if self.powered_off:
            out.update(powered_off=True, **self.counted_until_off())
        if self.died:
            out["died"] = self.died
        return out

    def counted_until_off(self) -> dict:
        """What the DUT had received when its machine was switched off (its closing statistics
        went with it); by kind."""
        return {}

    def records(self) -> list[CommandRecord]:
        return [self.impl.record] if self.impl is not None else []

    def pids(self) -> dict[str, int]:
        return _live(self.records(), lambda r: f"dut:{r.name}")


class TcpdumpDut(Dut):
    """tcpdump at the DUT's place. In a VM (a place with a power switch) it always writes
    dut.pcap, into the run folder the guest shares with the host: when the VM is switched off,
    the packets in that file are what it received (on the guest's clock)."""

    kind = "tcpdump"
    tools = (Tool("tcpdump", "tcpdump"),)

    def start(self, abort) -> None:
        keep = self.spec.write or isinstance(self.endpoint, PowerSwitch)
        out = self.dir / "dut.pcap" if keep else Path("/dev/null")
        self.impl = Tcpdump(
            self.endpoint.argv,
            self.endpoint.iface,
            out,
            snaplen=self.spec.snaplen,
            buffer_kib=self.spec.buffer_kib,
            name="dut-tcpdump",
        )
        self.impl.start()
        if keep and not out.exists():
            self.impl.stop(settle=0)
            raise TcpdumpError(
                f"the DUT in {self.endpoint.where} writes {out}, which the host does not "
                "see: put the run folder in a folder the VM shares (/tmp, the working "
                "folder, or one in NTG_VM_SHARE, docs/vm.md)"
            )

    def counted_until_off(self) -> dict:
        out = self.dir / "dut.pcap"
        try:
            cap = read_capture(out)
        except CaptureError as exc:
            return {"received": None, "note": str(exc)}
        last = int(cap.ts_ns.max()) if len(cap) else None
        return {
            "received": len(cap),
            "captured": len(cap),
            "last_packet_guest_ns": last,
            **({"note": f"{out.name}: {cap.problem.message}"} if cap.problem else {}),
        }


class SuricataDut(Dut):
    kind = "suricata"
    tools = (
        Tool(
            "suricata",
            "suricata",
            "apt-get install -t bookworm-backports suricata (with bookworm-backports in the apt sources)",
        ),
    )

    def start(self, abort) -> None:
        rules = [self.scenario_dir / r for r in self.spec.rules]
        self.impl = LiveSuricata(self.endpoint.argv(), self.endpoint.iface, rules, self.dir / "dut")
        self.impl.start(abort)


class TcpdumpDutSpec(CommonDutSpec):
    kind: Literal["tcpdump"] = Field(
        "tcpdump", description="tcpdump: what the DUT's interface received."
    )


class SuricataDutSpec(CommonDutSpec):
    kind: Literal["suricata"] = Field(
        "suricata", description="suricata: Suricata 7 with `rules`, live."
    )


TCPDUMP = DutKind("tcpdump", TcpdumpDutSpec, TcpdumpDut, TcpdumpDut.tools, "tcpdump")
SURICATA = DutKind("suricata", SuricataDutSpec, SuricataDut, SuricataDut.tools, "Suricata, live")


def _captures(ctx: PartContext) -> list[Part]:
    """capture.pcap at `capture.at`, and one more per `capture.also_at`."""
    spec = ctx.testbed.capture
    assert spec is not None
    return [
        CapturePart(spec, ctx.site.endpoint(place or spec.at), ctx.step_dir, also_at=place)
        for place in [None, *spec.also_at]
    ]


def _capture_places(tb: TestbedSpec) -> list[tuple[str, str]]:
    c = tb.capture
    return [("capture.at", c.at), *(("capture.also_at", p) for p in c.also_at)] if c else []


CAPTURE = PartPlugin(
    "capture",
    CAPTURE_ORDER,
    _captures,
    wanted=lambda tb: tb.capture is not None,
    tools=lambda scenario: CapturePart.tools,
    places=_capture_places,
    summary="tcpdump on `capture.at` (and `capture.also_at`)",
)


def _dut(ctx: PartContext) -> list[Part]:
    spec: DutSpec = ctx.testbed.dut
    kind: DutKind = DUT_KINDS.get(spec.kind)
    if kind.part is None:
        return []
    return [kind.part(spec, ctx.site.endpoint(spec.at), ctx.step_dir, ctx.scenario_dir)]


def _dut_tools(scenario: Scenario) -> tuple[Tool, ...]:
    assert scenario.testbed is not None
    return DUT_KINDS.get(scenario.testbed.dut.kind).tools


DUT = PartPlugin(
    "dut",
    DUT_ORDER,
    _dut,
    wanted=lambda tb: tb.dut.kind != "none",
    tools=_dut_tools,
    places=lambda tb: [("dut.at", tb.dut.at)],
    summary="the device under test, of the kind `dut.kind` (DUT_KINDS)",
)


class MonitorPart(Part):
    """The psutil sampler (samples.csv) over the processes the other parts report."""

    key = "monitor"

    def __init__(self, path: Path, hz: float, pids: Callable[[], dict[str, int]]) -> None:
        self.sampler = Sampler(path, hz=hz, pids=pids)

    def start(self, abort) -> None:
        self.sampler.start()

    def problem(self) -> str | None:
        return no_space_at(self.sampler.full_at) if self.sampler.full_at is not None else None

    def no_space(self) -> Path | None:
        return self.sampler.full_at

    def stop(self) -> dict:
        return self.sampler.stop()


MONITOR = PartPlugin(
    "monitor",
    MONITOR_ORDER,
    lambda ctx: [MonitorPart(ctx.step_dir / "samples.csv", ctx.testbed.monitor.hz, ctx.pids)],
    wanted=lambda tb: True,
    summary="the resource sampler (samples.csv)",
)


class GeneratorPart(Part):
    """One generator adapter placed at an endpoint (None: offline, it writes the capture)."""

    def __init__(
        self, spec: GeneratorSpec, gen: Generator, endpoint: Endpoint | None, folder: Path
    ) -> None:
        self.spec, self.gen, self.endpoint, self.dir = spec, gen, endpoint, folder
        self.key = f"gen:{spec.title}"

    def start(self, abort) -> None:
        self.gen.start()

    def stop(self) -> dict:
        if self.gen.status() == "running":
            self.gen.stop()
        return self.gen.counters().as_dict()

    def records(self) -> list[CommandRecord]:
        return self.gen.commands()

    def pids(self) -> dict[str, int]:
        out = _live(self.records(), lambda r: f"gen:{self.spec.title}:{r.name}")
        if (
            self.endpoint is not None and out
        ):  # the place's own processes (a VM's qemu) while it sends
            out.update(
                {f"gen:{self.spec.title}:{k}": pid for k, pid in self.endpoint.pids().items()}
            )
        return out
