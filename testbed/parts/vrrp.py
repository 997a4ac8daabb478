"""A redundant device under test: two namespaces running keepalived (VRRP) that share a virtual
address on one bridged segment, each with a UDP and TCP echo (method `failover`, docs/failover.md).

`start` bridges the interfaces of the `lan` namespace (a bridge inside it: it goes with the
namespace), writes one keepalived configuration per DUT into `<step>/vrrp/`, starts keepalived
(VRRP only, in the foreground, logging to its pipe) and the echo (echo.py) in each DUT's namespace
through ntgcore.proc.Process, and returns once the master says MASTER and the backup BACKUP, or
fails the step. keepalived's state changes are read from its log, each stamped on arrival with
CLOCK_REALTIME and CLOCK_MONOTONIC in ns (the clocks of the capture and of the fault part).
`stop` ends both (SIGTERM, SIGKILL after 5 s), removes the virtual address where a killed
keepalived left it, and deletes the bridge. pid files and logs stay in `<step>/vrrp/`.

Process labels (`pids()`, for the monitor and for faults): `vrrp:master`, `vrrp:backup` (the
keepalived process groups), `vrrp:master:echo`, `vrrp:backup:echo`.

A DUT may be a VM (VM back end, docs/vm.md): keepalived (in the guest image) and the echo run in
the guest over ssh, its pid files in the guest's /run; the fault `power-off` switches it off. Its
processes are not this machine's, so they have no label in `pids()`, and `kill`/`stop` of a
master in a VM are refused when the pair is made.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from ntgcore.endpoint import Endpoint, Site
from ntgcore.errors import NtgError, ToolMissing
from ntgcore.parts import PAIR_ORDER, Part, PartContext, PartPlugin
from ntgcore.proc import CommandRecord, Process, Tool
from ntgcore.scenario import FailoverSpec

BRIDGE = "ntgbr0"
ECHO = Path(__file__).resolve().parent / "echo.py"
_STATE = re.compile(r"\((\S+)\) Entering (MASTER|BACKUP|FAULT|STOP) STATE")
ROLES = ("master", "backup")
COMMAND_TIMEOUT_S = 10.0  # one short command (ip, cat) at a DUT


class VrrpError(NtgError):
    """The VRRP pair could not be set up (keepalived missing, never MASTER, a command failed)."""


def keepalived_config(spec: FailoverSpec, role: str, iface: str, advert_ns: int) -> str:
    """keepalived.conf of one DUT for one step."""
    master = role == "master"
    return "\n".join(
        [
            f"# ntg-testbed: the {role} DUT of a fail-over step (docs/failover.md)",
            "global_defs {",
            f"    router_id ntg-{role}",
            "}",
            "vrrp_instance ntg {",
            f"    state {'MASTER' if master else 'BACKUP'}",
            f"    interface {iface}",
            f"    virtual_router_id {spec.vrid}",
            f"    priority {spec.master_priority if master else spec.backup_priority}",
            f"    version {spec.vrrp_version}",
            f"    advert_int {advert_ns / 1e9:g}",
            "    virtual_ipaddress {",
            f"        {spec.vip} dev {iface}",
            "    }",
            "}",
            "",
        ]
    )


class Keepalived:
    """One keepalived in the foreground at `endpoint`; its log is read for state changes."""

    def __init__(
        self, role: str, endpoint: Endpoint, folder: Path, config: str, pid_dir: Path | None = None
    ) -> None:
        self.role, self.endpoint = role, endpoint
        self.conf = folder / f"{role}.conf"
        self.conf.write_text(config)
        self.log_path = folder / f"{role}.log"
        pid_dir = pid_dir or folder
        argv = endpoint.argv(
            "keepalived",
            "--dont-fork",
            "--log-console",
            "--log-detail",
            "--no-syslog",
            "--vrrp",
            "--use-file",
            str(self.conf),
            "--pid",
            str(pid_dir / f"{role}.pid"),
            "--vrrp_pid",
            str(pid_dir / f"{role}-vrrp.pid"),
        )
        self.proc = Process(
            f"keepalived-{role}", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self.transitions: list[dict] = []
        self.state: str | None = None
        self._reader: threading.Thread | None = None
        self._log: IO[str] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "w")
        self.proc.start()
        self._reader = threading.Thread(
            target=self._read, name=f"keepalived-{self.role}", daemon=True
        )
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.popen.stdout:  # type: ignore[union-attr]
            real, mono = time.time_ns(), time.monotonic_ns()
            line = raw.decode(errors="replace").rstrip()
            m = _STATE.search(line)
            if m:
                self.state = m.group(2)
                self.transitions.append(
                    {"role": self.role, "state": self.state, "realtime_ns": real, "mono_ns": mono}
                )
            if self._log is not None and not self._log.closed:
                self._log.write(f"{real} {line}\n")
                self._log.flush()

    def stop(self) -> None:
        self.proc.stop(grace=5)
        if self._reader is not None:
            self._reader.join(5)
        if self._log is not None:
            self._log.close()

    def log_tail(self, lines: int = 4) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(ln.split(" ", 1)[-1] for ln in text[-lines:])


class VrrpPair(Part):
    key = "vrrp"
    measures_loss = True
    tools = (Tool("keepalived", "keepalived"), Tool("ip", "iproute2"))

    def __init__(self, spec: FailoverSpec, site: Site, step_dir: Path) -> None:
        self.spec, self.site = spec, site
        self.dir = step_dir / "vrrp"
        places = site.places()
        for key in ("master", "backup"):
            if getattr(spec, key) not in places:
                raise VrrpError(
                    f"testbed.failover.{key}: `{getattr(spec, key)}` is not an interface of "
                    f"topology {site.name} (it has: {', '.join(places)})"
                )
        self.lan_places = [p for p in places if p.split(":")[0] == spec.lan]
        if not self.lan_places:
            raise VrrpError(
                f"testbed.failover.lan: topology {site.name} has no namespace `{spec.lan}` "
                "with interfaces to bridge"
            )
        self.places = {"master": spec.master, "backup": spec.backup}
        # DUTs in VMs (VM back end): their processes run in the guest, reached through ssh
        self.in_vm = {r for r, p in self.places.items() if not site.endpoint(p).local_processes}
        signalled = sorted(set(spec.fault) & {"kill", "stop"})
        if "master" in self.in_vm and signalled:
            raise VrrpError(
                f"testbed.failover.fault: `{signalled[0]}` signals the master's keepalived as a "
                f"process of this machine, but the master ({spec.master}) is a VM: use power-off "
                "(the VM switched off) or link-down"
            )
        self.daemons: dict[str, Keepalived] = {}
        self.echoes: dict[str, Process] = {}
        self._records: list[CommandRecord] = []
        self.macs: dict[str, str] = {}
        self.ready_s: float | None = None
        self.bridged = False

    # -- commands ------------------------------------------------------------------------------

    def _run(self, endpoint: Endpoint, *argv: str, check: bool = True) -> str:
        proc = Process(
            f"vrrp {argv[0]}", endpoint.argv(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._records.append(proc.record)
        done = proc.start().communicate(COMMAND_TIMEOUT_S)
        if done is None:
            raise VrrpError(
                f"`{' '.join(argv)}` in {endpoint.where} did not end within {COMMAND_TIMEOUT_S:g} s"
            )
        out, err = done
        if proc.wait() != 0 and check:
            proc.record.note = err.decode(errors="replace").strip()
            raise VrrpError(f"`{' '.join(argv)}` in {endpoint.where} failed: {proc.record.note}")
        return out.decode(errors="replace")

    # -- the part ------------------------------------------------------------------------------

    def start(self, abort) -> None:
        if shutil.which("keepalived") is None:
            raise ToolMissing(
                "keepalived is not installed: apt-get install keepalived (or ./bootstrap.sh test)"
            )
        self.dir.mkdir(exist_ok=True)
        lan = self.site.endpoint(self.lan_places[0])
        self._run(
            lan,
            "ip",
            "link",
            "add",
            BRIDGE,
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        )
        self.bridged = True
        self._run(lan, "ip", "link", "set", BRIDGE, "type", "bridge", "mcast_snooping", "0")
        for place in self.lan_places:
            self._run(lan, "ip", "link", "set", place.split(":", 1)[1], "master", BRIDGE)
        self._run(lan, "ip", "link", "set", BRIDGE, "up")
        advert = self.spec.advert_int[0]
        port = self.spec.udp_port
        for i, role in enumerate(ROLES):
            ep = self.site.endpoint(self.places[role])
            self.macs[role] = self._run(ep, "cat", f"/sys/class/net/{ep.iface}/address").strip()
            echo = Process(
                f"echo-{role}",
                ep.argv(
                    sys.executable,
                    str(ECHO),
                    "--bind",
                    self.vip_ip,
                    "--port",
                    str(port),
                    "--reply-port",
                    str(port + 1 + i),
                    "--name",
                    role,
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            self.echoes[role] = echo
            echo.start()
            line = echo.popen.stdout.readline().decode(errors="replace").strip()  # type: ignore[union-attr]
            if line != "ready":
                raise VrrpError(
                    f"the echo of the {role} did not start: {line or echo.record.status}"
                )
        t0 = time.monotonic()
        for role in ROLES:
            ep = self.site.endpoint(self.places[role])
            d = Keepalived(
                role,
                ep,
                self.dir,
                keepalived_config(self.spec, role, ep.iface, advert),
                pid_dir=Path("/run") if role in self.in_vm else None,
            )
            self.daemons[role] = d
            d.start()
        want = {"master": "MASTER", "backup": "BACKUP"}
        deadline = t0 + self.spec.ready_timeout / 1e9
        while any(self.daemons[r].state != s for r, s in want.items()):
            for role, d in self.daemons.items():
                if d.proc.poll() is not None:
                    raise VrrpError(
                        f"keepalived of the {role} exited at start-up ({d.proc.record.status}); "
                        f"its log {d.log_path}: {d.log_tail()}"
                    )
            if abort():
                raise VrrpError("interrupted while keepalived was starting")
            if time.monotonic() > deadline:
                late = [
                    f"the {r} is {self.daemons[r].state or 'in no state yet'}, not {s}"
                    for r, s in want.items()
                    if self.daemons[r].state != s
                ]
                raise VrrpError(
                    f"keepalived never became ready within {self.spec.ready_timeout / 1e9:g} s: "
                    f"{'; '.join(late)}; logs in {self.dir}"
                )
            time.sleep(0.02)
        self.ready_s = time.monotonic() - t0

    @property
    def vip_ip(self) -> str:
        return self.spec.vip.split("/")[0]

    def stop(self) -> dict:
        for d in self.daemons.values():
            d.stop()
        for echo in self.echoes.values():
            echo.stop(grace=2)
        for role in self.daemons:  # a killed keepalived leaves the address behind
            ep = self.site.endpoint(self.places[role])
            if ep.exists():
                self._run(ep, "ip", "addr", "del", self.spec.vip, "dev", ep.iface, check=False)
        if self.bridged:
            lan = self.site.endpoint(self.lan_places[0])
            if lan.exists():
                self._run(lan, "ip", "link", "del", BRIDGE, check=False)
        return {
            "vip": self.spec.vip,
            "vrid": self.spec.vrid,
            "version": self.spec.vrrp_version,
            "advert_int_s": self.spec.advert_int[0] / 1e9,
            "udp_port": self.spec.udp_port,
            "reply_ports": {r: self.spec.udp_port + 1 + i for i, r in enumerate(ROLES)},
            "places": self.places,
            "macs": self.macs,
            "ready_s": self.ready_s,
            "transitions": sorted(
                (t for d in self.daemons.values() for t in d.transitions),
                key=lambda t: t["mono_ns"],
            ),
            "keepalived": {r: d.proc.record.status for r, d in self.daemons.items()},
        }

    def records(self) -> list[CommandRecord]:
        return (
            [d.proc.record for d in self.daemons.values()]
            + [e.record for e in self.echoes.values()]
            + self._records
        )

    def pids(self) -> dict[str, int]:
        """The daemons and echoes running on this machine (in a VM's guest they are not processes
        of this machine: what runs here is their ssh relay; the VM's qemu is the endpoint's)."""
        out = {
            f"vrrp:{r}": d.proc.pid
            for r, d in self.daemons.items()
            if d.proc.pid and d.proc.record.exit_code is None and r not in self.in_vm
        }
        out.update(
            {
                f"vrrp:{r}:echo": e.pid
                for r, e in self.echoes.items()
                if e.pid and e.record.exit_code is None and r not in self.in_vm
            }
        )
        return out


__all__ = ["BRIDGE", "Keepalived", "VrrpError", "VrrpPair", "keepalived_config"]


def _pair(ctx: PartContext) -> list[Part]:
    assert ctx.testbed.failover is not None
    return [VrrpPair(ctx.testbed.failover, ctx.site, ctx.step_dir)]


PLUGIN = PartPlugin(
    "vrrp",
    PAIR_ORDER,
    _pair,
    tools=lambda scenario: VrrpPair.tools,
    summary="method failover's VRRP pair (keepalived)",
)
