"""Test-bed "NICs" on one machine: network namespaces joined by veth pairs, described in YAML.

The one implementation of these steps: the runner brings a topology up per run, the Ansible role
(`playbooks/library/ntg_topology.py`) calls the same `apply` / `remove`, and the live tests use it
(`VethPair` is the two-namespace case). Reference: docs/topology.md.

Network safety: every namespace is `<name>-<role>` and made here; inside it only the declared veth
ends and loopback (up), no default route, no forwarding, addresses only from 198.18.0.0/15 and
2001:db8::/32, and IPv6 off unless an IPv6 address is given, so that the kernel sends nothing of
its own (router solicitations, MLD) into the counters.

`apply` reads the current state and changes only what differs from the description, so a second
`apply` returns no steps; `remove` deletes the namespaces (and with them every veth end).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from ntgcore.errors import BadInput, NtgError
from ntgcore.files import read_bounded
from ntgcore.packets import BENCHMARK_NETWORKS
from ntgcore.proc import CommandRecord, Process
from ntgcore.scenario import ScenarioError, format_error
from ntgcore.yamlread import MAX_BYTES, YamlProblem, read_yaml, yaml_lines

PACKAGED = Path(__file__).resolve().parent / "topologies"
ALLOWED_NETWORKS = BENCHMARK_NETWORKS
# Namespaces made here get a mark (a file named after them) so that a topology never adopts or
# deletes a namespace someone else made under the same name; /run is emptied at boot, as
# network namespaces are.
MARKS = Path(os.environ.get("NTG_NETNS_MARKS", "/run/ntg-testbed/netns"))
COUNTERS = ("rx_packets", "rx_bytes", "rx_dropped", "tx_packets", "tx_bytes", "tx_dropped")
# ethtool -K short names and the lines `ethtool -k` prints for them
OFFLOADS = {
    "rx": "rx-checksumming",
    "tx": "tx-checksumming",
    "sg": "scatter-gather",
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "lro": "large-receive-offload",
    "rxvlan": "rx-vlan-offload",
    "txvlan": "tx-vlan-offload",
}
_IFACE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


class TopologyError(ScenarioError):
    """A topology description that cannot be used; `problems` holds one `FILE:LINE: field: message` each."""


class TopologyCommandError(NtgError):
    """A command that changes or reads the topology failed; the message says which and what to do."""


# --------------------------------------------------------------------------------------------
# The description


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _in_benchmark_ranges(text: str) -> str:
    try:
        iface = ipaddress.ip_interface(text.strip())
    except ValueError:
        raise ValueError("not an address with prefix length, like 198.18.0.1/24") from None
    if "/" not in text:
        raise ValueError("give the prefix length too, like 198.18.0.1/24")
    if not any(iface.network.subnet_of(n) for n in ALLOWED_NETWORKS if n.version == iface.version):  # type: ignore[arg-type]  # same version
        raise ValueError(
            "addresses must lie in 198.18.0.0/15 or 2001:db8::/32 (the benchmarking "
            "and documentation ranges); pick one there"
        )
    return str(iface)


class End(_Model):
    """One end of a veth pair: the namespace role, the interface name, its addresses (optional)."""

    ns: str = Field(description="Role of the namespace (one of `namespaces`).")
    iface: str = Field(description="Interface name: up to 15 of A-Z a-z 0-9 _ . -")
    address: list[str] = Field(
        [], description="Address(es) with prefix length, in 198.18.0.0/15 or 2001:db8::/32."
    )

    @field_validator("iface")
    @classmethod
    def _iface_name(cls, v: str) -> str:
        if not _IFACE.match(v) or v in (".", "..", "lo"):
            raise ValueError("interface names are 1-15 characters of A-Z a-z 0-9 _ . - (not `lo`)")
        return v

    @field_validator("address", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("address")
    @classmethod
    def _addresses(cls, v: list[str]) -> list[str]:
        return [_in_benchmark_ranges(a) for a in v]


class Link(_Model):
    """A veth pair from `a` to `b`."""

    a: End
    b: End
    mtu: int | None = Field(
        None, ge=68, le=65535, description="This link's MTU (default: the topology's)."
    )


class Mirror(_Model):
    """A copy of every frame crossing `from` (arriving: ingress; leaving: egress) is sent out of `to`.
    `to` may be `from` itself for ingress: what arrives is sent back (a reflector)."""

    from_: str = Field(alias="from", description="Interface whose frames are copied.")
    to: str = Field(description="Interface the copies leave on.")
    ns: str = Field(description="Role of the namespace holding both interfaces.")
    direction: str = Field("ingress", pattern="^(ingress|egress|both)$")


def _on_off(v: Any) -> bool:
    if isinstance(v, bool):  # YAML 1.1 reads a bare `off` as false
        return v
    if isinstance(v, str) and v.strip().lower() in ("on", "off"):
        return v.strip().lower() == "on"
    raise ValueError("expected on or off")


class Topology(_Model):
    name: str = Field(description="Prefix of every namespace name: <name>-<role>.")
    mtu: int | None = Field(
        1500, ge=68, le=65535, description="MTU of every veth (null: leave it)."
    )
    offloads: dict[str, bool] = Field(
        {}, description="ethtool -K features set on every veth: " + ", ".join(OFFLOADS)
    )
    namespaces: list[str] = Field(min_length=1, description="Namespace roles, e.g. gen, dut, tap.")
    links: list[Link] = []
    mirrors: list[Mirror] = []
    _records: list[CommandRecord] = PrivateAttr(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(
                "1-32 characters of a-z 0-9 and -, starting and ending with a letter or digit"
            )
        return v

    @field_validator("namespaces")
    @classmethod
    def _roles(cls, v: list[str]) -> list[str]:
        for role in v:
            if not _NAME.match(role) or len(role) > 16:
                raise ValueError(f"role `{role}`: 1-16 characters of a-z 0-9 and -")
        if len(set(v)) != len(v):
            raise ValueError("a role is listed twice")
        return v

    @field_validator("offloads", mode="before")
    @classmethod
    def _offloads(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        unknown = [k for k in v if k not in OFFLOADS]
        if unknown:
            raise ValueError(f"unknown offload `{unknown[0]}`; known: {', '.join(OFFLOADS)}")
        return {k: _on_off(x) for k, x in v.items()}

    @model_validator(mode="after")
    def _references(self) -> Topology:
        problems = _cross_check(self)
        if problems:
            raise _CrossCheckError(problems)
        return self

    # -- names --------------------------------------------------------------------------------

    def netns(self, role: str) -> str:
        """The full namespace name of `role`."""
        if role not in self.namespaces:
            raise KeyError(
                f"no namespace role `{role}` in topology {self.name} (roles: {', '.join(self.namespaces)})"
            )
        return f"{self.name}-{role}"

    def iface(self, role: str) -> list[str]:
        """The veth interfaces inside the namespace of `role`."""
        self.netns(role)
        return [e.iface for e in self._ends() if e.ns == role]

    def renamed(self, name: str) -> Topology:
        """The same topology under another namespace prefix (checked like `name`)."""
        return parse_topology(
            {**self.model_dump(by_alias=True), "name": name}, f"topology {self.name} renamed"
        )

    def exec_argv(self, role: str, *argv: str) -> list[str]:
        """`ip netns exec <ns> argv...` as an argument list."""
        return netns_argv(self.netns(role), *map(str, argv))

    def describe(self) -> dict:
        return self.model_dump(by_alias=True)

    @property
    def records(self) -> list[CommandRecord]:
        """Every command apply/remove/counters ran, for a run's manifest."""
        return self._records

    def _ends(self) -> Iterator[End]:
        for link in self.links:
            yield link.a
            yield link.b

    def _wants_ipv6(self, role: str) -> bool:
        return any(
            ipaddress.ip_interface(a).version == 6
            for e in self._ends()
            if e.ns == role
            for a in e.address
        )

    # -- state --------------------------------------------------------------------------------

    def apply(self, dry_run: bool = False) -> list[str]:
        """Make the namespaces, links, addresses, offloads and mirrors as described.

        Returns the steps taken (with `dry_run`: the steps it would take); [] when nothing differed."""
        return _Applier(self, dry_run).apply()

    def remove(self, dry_run: bool = False) -> list[str]:
        """Delete this topology's namespaces (their veths go with them); [] when none existed."""
        steps, failed = [], []
        present = _netns_list(self)
        for role in self.namespaces:
            ns = self.netns(role)
            if ns in present:
                if not (MARKS / ns).exists():
                    failed.append(
                        f"namespace {ns} was not made by ntg-testbed (no mark in {MARKS}): "
                        "left alone"
                    )
                    continue
                steps.append(f"delete namespace {ns}")
                if not dry_run:
                    try:  # try every namespace, then report
                        _cmd(self, "ip", "netns", "del", ns)
                        (MARKS / ns).unlink(missing_ok=True)
                    except TopologyCommandError as exc:
                        failed.append(str(exc))
        if failed:
            raise TopologyCommandError("; ".join(failed))
        return steps

    @contextlib.contextmanager
    def up(self) -> Iterator[Topology]:
        """Apply on entry; always remove on exit (errors, KeyboardInterrupt included)."""
        try:
            self.apply()
            yield self
        finally:
            self.remove()

    def counters(self, role: str, iface: str) -> dict[str, int]:
        """Kernel counters of `iface` in the namespace of `role` (/sys/class/net/IFACE/statistics)."""
        if iface not in self.iface(role):
            raise KeyError(
                f"no interface `{iface}` in role `{role}` (it has: {', '.join(self.iface(role))})"
            )
        paths = [f"/sys/class/net/{iface}/statistics/{c}" for c in COUNTERS]
        out = _cmd(self, *self.exec_argv(role, "cat", *paths)).split()
        return dict(zip(COUNTERS, map(int, out)))

    def state(self) -> dict:
        """What exists now: per role, whether the namespace exists and its interfaces with counters."""
        present = _netns_list(self)
        roles = {}
        for role in self.namespaces:
            ns = self.netns(role)
            info: dict[str, Any] = {"netns": ns, "exists": ns in present, "interfaces": {}}
            if info["exists"]:
                for name, link in _links(self, ns).items():
                    if name == "lo":
                        continue
                    info["interfaces"][name] = {
                        "up": "UP" in link.get("flags", []),
                        "mtu": link.get("mtu"),
                        "address": [
                            f"{a['local']}/{a['prefixlen']}"
                            for a in link.get("addr_info", [])
                            if a.get("scope") != "link"
                        ],
                        **(self.counters(role, name) if name in self.iface(role) else {}),
                    }
            roles[role] = info
        return {"name": self.name, "namespaces": roles}


class _CrossCheckError(ValueError):
    def __init__(self, problems: list[tuple[tuple, str]]):
        super().__init__("; ".join(m for _, m in problems))
        self.problems = problems


def _cross_check(t: Topology) -> list[tuple[tuple, str]]:
    """References between parts: (location, message) for each problem."""
    problems: list[tuple[tuple, str]] = []
    seen: dict[tuple[str, str], tuple] = {}
    addresses: dict[str, tuple] = {}
    for i, link in enumerate(t.links):
        for side in ("a", "b"):
            end: End = getattr(link, side)
            loc: tuple[str | int, ...] = ("links", i, side)
            if end.ns not in t.namespaces:
                problems.append(
                    (
                        loc + ("ns",),
                        f"namespace `{end.ns}` is not declared; declared: "
                        f"{', '.join(t.namespaces)} (add it to `namespaces`)",
                    )
                )
            key = (end.ns, end.iface)
            if key in seen:
                problems.append(
                    (
                        loc + ("iface",),
                        f"interface `{end.iface}` in `{end.ns}` is "
                        f"already used at {_where(seen[key])}",
                    )
                )
            seen.setdefault(key, loc)
            for j, a in enumerate(end.address):
                ip = a.split("/")[0]
                if ip in addresses:
                    problems.append(
                        (
                            loc + ("address", j),
                            f"address {ip} is already used at {_where(addresses[ip])}",
                        )
                    )
                addresses.setdefault(ip, loc)
            mtu = link.mtu or t.mtu
            if mtu and mtu < 1280 and any(":" in a for a in end.address):
                problems.append((("links", i, "mtu"), "IPv6 needs an MTU of at least 1280"))
    for i, m in enumerate(t.mirrors):
        loc = ("mirrors", i)
        if m.ns not in t.namespaces:
            problems.append(
                (
                    loc + ("ns",),
                    f"namespace `{m.ns}` is not declared; declared: {', '.join(t.namespaces)}",
                )
            )
            continue
        for side_key, name in (("from", m.from_), ("to", m.to)):
            if (m.ns, name) not in seen:
                problems.append((loc + (side_key,), f"no link end `{name}` in namespace `{m.ns}`"))
        if m.from_ == m.to and m.direction != "ingress":  # ingress to itself: a reflector
            problems.append(
                (loc + ("to",), "`to` must differ from `from` unless `direction` is ingress")
            )
    return problems


def _where(loc: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


# --------------------------------------------------------------------------------------------
# Loading


def parse_topology(
    data: Any, file: str = "<topology>", lines: dict[tuple, int] | None = None
) -> Topology:
    """Validate a mapping; errors as `FILE:LINE: field: message` (line 1 without `lines`)."""
    if lines is None:
        lines = {}
        _every_path(data, (), lines)
    if not isinstance(data, dict):
        raise TopologyError(
            [f"{file}:1: (top level): expected a mapping with name, namespaces and links"]
        )
    try:
        return Topology.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            ctx = err.get("ctx", {}).get("error")
            if isinstance(ctx, _CrossCheckError):
                for loc, msg in ctx.problems:
                    probe = loc
                    while probe and probe not in lines:
                        probe = probe[:-1]
                    line = lines.get(probe + ("__value__",)) or lines.get(probe, 1)
                    problems.append(f"{file}:{line}: {_where(loc)}: {msg}")
            else:
                problems.append(format_error(err, file, lines, Topology))
        problems.sort(key=lambda p: int(p[len(file) + 1 :].split(":", 1)[0]))
        raise TopologyError(problems) from None


def _every_path(data: Any, path: tuple, out: dict[tuple, int]) -> None:
    """Line 1 for every key of a mapping that has no YAML text, so errors still name the field."""
    out[path] = 1
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        _every_path(value, path + (key,), out)


def load_topology(
    ref: str | Path | dict, base_dir: Path | None = None, source: str | None = None
) -> Topology:
    """A topology from a packaged name (`default`), a YAML path (relative to `base_dir`), or a
    mapping (`source` names it in errors, e.g. `scenario.yaml: testbed.topology`)."""
    if isinstance(ref, dict):
        return parse_topology(ref, source or "<inline topology>")
    text_ref = str(ref)
    path = Path(text_ref)
    if not path.suffix and "/" not in text_ref and (PACKAGED / f"{text_ref}.yaml").is_file():
        path = PACKAGED / f"{text_ref}.yaml"
    elif not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PACKAGED.glob("*.yaml")))
        raise TopologyError([f"{path}: no such file (packaged topologies: {known})"])
    try:  # the one bounded reader: a device, a pipe, a directory or bytes that are not UTF-8 said so
        text = read_bounded(path, MAX_BYTES, "topology file", "write a smaller topology")
    except BadInput as exc:
        raise TopologyError([str(exc)]) from None
    try:
        data = read_yaml(text, str(path))
    except YamlProblem as exc:
        raise TopologyError(exc.problems) from None
    return parse_topology(data, str(path), yaml_lines(text))  # a topology is small


# --------------------------------------------------------------------------------------------
# Commands


_FIXES = {
    "Operation not permitted": "run as root (namespaces and veths need CAP_NET_ADMIN)",
    "Permission denied": "run as root (namespaces and veths need CAP_NET_ADMIN)",
}


def _cmd(t: Topology | None, *argv: str, check: bool = True, timeout: float = 30) -> str:
    """Run a short command through ntgcore.proc.Process; its stdout, or TopologyCommandError."""
    proc = Process(
        f"topology {argv[0]}", list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        proc.start()
    except FileNotFoundError:
        package = {"ip": "iproute2", "tc": "iproute2", "ethtool": "ethtool"}.get(argv[0], argv[0])
        raise TopologyCommandError(
            f"`{argv[0]}` is not installed; install it: apt-get install {package}"
        ) from None
    done = proc.communicate(timeout)
    if done is None:
        raise TopologyCommandError(f"`{' '.join(argv)}` did not finish within {timeout:g} s")
    out, err = done
    code = proc.wait()
    if t is not None:
        t.records.append(proc.record)
    if check and code != 0:
        text = err.decode(errors="replace").strip()
        fix = next((f for k, f in _FIXES.items() if k in text), "")
        raise TopologyCommandError(
            f"`{' '.join(argv)}` failed ({proc.record.status}): {text}"
            + (f"; {fix}" if fix else "")
        )
    return out.decode(errors="replace")


def run_command(t: Topology | None, *argv: str, check: bool = True, timeout: float = 30) -> str:
    """A short command run as the topology's own are (recorded in `t.records`, checked): for a
    back end that adds devices to a topology's namespaces (the VM back end's taps)."""
    return _cmd(t, *argv, check=check, timeout=timeout)


def netns_argv(ns: str, *argv: str) -> list[str]:
    """`argv` run inside network namespace `ns` (the one spelling of `ip netns exec`)."""
    return ["ip", "netns", "exec", ns, *argv]


def _in(ns: str, *argv: str) -> tuple[str, ...]:
    return tuple(netns_argv(ns, *argv))


def _netns_list(t: Topology | None) -> set[str]:
    return {line.split()[0] for line in _cmd(t, "ip", "netns", "list").splitlines() if line.strip()}


def _links(t: Topology, ns: str) -> dict[str, dict]:
    return {
        d["ifname"]: d
        for d in json.loads(_cmd(t, "ip", "-n", ns, "-j", "-d", "addr", "show") or "[]")
    }


def _sysctls(t: Topology, role: str) -> dict[str, str]:
    ipv6 = t._wants_ipv6(role)
    want = {"net.ipv4.ip_forward": "0"}
    for scope in ("all", "default"):
        want[f"net.ipv6.conf.{scope}.disable_ipv6"] = "0" if ipv6 else "1"
    if ipv6:
        for scope in ("all", "default"):
            want[f"net.ipv6.conf.{scope}.forwarding"] = "0"
            want[f"net.ipv6.conf.{scope}.accept_ra"] = "0"
            want[f"net.ipv6.conf.{scope}.router_solicitations"] = "0"
            want[f"net.ipv6.conf.{scope}.accept_dad"] = "0"
    return want


def _offload_state(t: Topology, ns: str, iface: str) -> dict[str, tuple[bool, bool]]:
    """short name -> (on, fixed) from `ethtool -k`."""
    out = _cmd(t, *_in(ns, "ethtool", "-k", iface))
    by_long = {}
    for line in out.splitlines():
        m = re.match(r"^([a-z0-9-]+): (on|off)( \[fixed\])?", line)
        if m:
            by_long[m.group(1)] = (m.group(2) == "on", bool(m.group(3)))
    return {k: by_long[v] for k, v in OFFLOADS.items() if v in by_long}


def _mirrors_now(t: Topology, ns: str, iface: str) -> set[tuple[str, str]]:
    """(direction, to) of the mirred mirror filters on `iface`."""
    found = set()
    for direction in ("ingress", "egress"):
        out = _cmd(t, *_in(ns, "tc", "-j", "filter", "show", "dev", iface, direction), check=False)
        for f in json.loads(out or "[]") if out.strip().startswith("[") else []:
            for act in (f.get("options") or {}).get("actions", []):
                if act.get("kind") == "mirred" and act.get("mirred_action") == "mirror":
                    found.add((direction, act.get("to_dev")))
    return found


@dataclass
class _Applier:
    t: Topology
    dry_run: bool
    steps: list[str] = field(default_factory=list)
    fresh: set[str] = field(
        default_factory=set
    )  # namespaces made now: nothing to read in a dry run

    def do(self, step: str, *argv: str) -> None:
        self.steps.append(step)
        if not self.dry_run:
            _cmd(self.t, *argv)

    def apply(self) -> list[str]:
        t = self.t
        present = _netns_list(t)
        fresh = self.fresh
        for role in t.namespaces:
            ns = t.netns(role)
            if ns in present and not (MARKS / ns).exists():
                raise TopologyCommandError(
                    f"namespace {ns} exists but was not made by ntg-testbed (no mark in {MARKS}); "
                    f"it is left alone: give the topology another name"
                )
        for role in t.namespaces:
            ns = t.netns(role)
            if ns not in present:
                # The mark first: a kill -9 between the two then leaves a namespace that cleanup
                # knows as ours, or a mark of a namespace never made (cleanup removes it too).
                if not self.dry_run:
                    MARKS.mkdir(parents=True, exist_ok=True)
                    (MARKS / ns).write_text("made by ntg-testbed (testbed/topology.py)\n")
                try:
                    self.do(f"create namespace {ns}", "ip", "netns", "add", ns)
                except TopologyCommandError as exc:  # not made here (or someone else's now): unmark
                    if "File exists" in str(exc) or ns not in _netns_list(t):
                        (MARKS / ns).unlink(missing_ok=True)
                    raise
                fresh.add(ns)
            want = _sysctls(t, role)
            if ns in fresh and self.dry_run:
                now: dict[str, str] = {}
            else:
                out = _cmd(t, *_in(ns, "sysctl", "-n", *want)).split()
                now = dict(zip(want, out))
            diff = [f"{k}={v}" for k, v in want.items() if now.get(k) != v]
            if diff:
                self.do(f"{ns}: sysctl {' '.join(diff)}", *_in(ns, "sysctl", "-qw", *diff))
        state = {
            t.netns(r): ({} if self.dry_run and t.netns(r) in fresh else _links(t, t.netns(r)))
            for r in t.namespaces
        }
        for ns, links in state.items():
            lo = links.get("lo")
            if lo is None or "UP" not in lo.get("flags", []):
                self.do(f"{ns}: set lo up", "ip", "-n", ns, "link", "set", "lo", "up")
        self._links(state)
        self._mirrors()
        return self.steps

    def _links(self, state: dict[str, dict[str, dict]]) -> None:
        t = self.t
        declared = {(t.netns(e.ns), e.iface) for e in t._ends()}
        for ns, links in state.items():
            for name in list(links):
                if name != "lo" and (ns, name) not in declared:
                    self.do(
                        f"{ns}: delete undeclared interface {name}",
                        "ip",
                        "-n",
                        ns,
                        "link",
                        "del",
                        name,
                    )
                    links.pop(name)
        made = set()
        for link in t.links:
            na, nb = t.netns(link.a.ns), t.netns(link.b.ns)
            a, b = state[na].get(link.a.iface), state[nb].get(link.b.iface)
            if a is not None and b is not None and _peers(a, b, na == nb):
                continue
            for ns, iface, cur in ((na, link.a.iface, a), (nb, link.b.iface, b)):
                if cur is not None and state[ns].pop(iface, None) is not None:
                    self.do(
                        f"{ns}: delete {iface} (not the veth pair described)",
                        "ip",
                        "-n",
                        ns,
                        "link",
                        "del",
                        iface,
                    )
            self.do(
                f"create veth {na}/{link.a.iface} <-> {nb}/{link.b.iface}",
                "ip",
                "-n",
                na,
                "link",
                "add",
                link.a.iface,
                "type",
                "veth",
                "peer",
                "name",
                link.b.iface,
                "netns",
                nb,
            )
            made.update({(na, link.a.iface), (nb, link.b.iface)})
        if made and not self.dry_run:
            for ns in {ns for ns, _ in made}:
                state[ns] = _links(t, ns)
        for link in t.links:
            for end in (link.a, link.b):
                ns = t.netns(end.ns)
                cur = (
                    state[ns].get(end.iface, {})
                    if (ns, end.iface) not in made or not self.dry_run
                    else {}
                )
                self._end(ns, end, cur, link.mtu or t.mtu, (ns, end.iface) in made)

    def _end(self, ns: str, end: End, cur: dict, mtu: int | None, new: bool) -> None:
        t, name = self.t, end.iface
        if mtu is not None and cur.get("mtu") != mtu:
            self.do(f"{ns}/{name}: mtu {mtu}", "ip", "-n", ns, "link", "set", name, "mtu", str(mtu))
        have = {
            str(ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}"))
            for a in cur.get("addr_info", [])
            if a.get("scope") != "link"
        }
        for extra in sorted(have - set(end.address)):
            self.do(
                f"{ns}/{name}: delete address {extra}",
                "ip",
                "-n",
                ns,
                "addr",
                "del",
                extra,
                "dev",
                name,
            )
        for want in end.address:
            if want not in have:
                nodad = ["nodad"] if ":" in want else []
                self.do(
                    f"{ns}/{name}: add address {want}",
                    "ip",
                    "-n",
                    ns,
                    "addr",
                    "add",
                    want,
                    "dev",
                    name,
                    *nodad,
                )
        if t.offloads:
            now = {} if (new and self.dry_run) else _offload_state(t, ns, name)
            diff = {k: v for k, v in t.offloads.items() if now.get(k, (None,))[0] != v}
            if diff:
                args = [x for k, v in diff.items() for x in (k, "on" if v else "off")]
                self.do(
                    f"{ns}/{name}: ethtool -K {' '.join(args)}",
                    *_in(ns, "ethtool", "-K", name, *args),
                )
                if not self.dry_run:
                    after = _offload_state(t, ns, name)
                    stuck = [k for k, v in diff.items() if after.get(k, (None,))[0] != v]
                    if stuck:
                        raise TopologyCommandError(
                            f"{ns}/{name}: ethtool could not set {', '.join(stuck)} "
                            f"(the driver fixes them, or another setting forces them: `tx off` turns "
                            f"tso off); change `offloads` in the topology"
                        )
        if "UP" not in cur.get("flags", []):
            self.do(f"{ns}/{name}: up", "ip", "-n", ns, "link", "set", name, "up")

    def _mirrors(self) -> None:
        t = self.t
        wanted: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for m in t.mirrors:
            dirs = ("ingress", "egress") if m.direction == "both" else (m.direction,)
            wanted.setdefault((t.netns(m.ns), m.from_), set()).update((d, m.to) for d in dirs)
        for e in t._ends():
            key = (t.netns(e.ns), e.iface)
            ns, name = key
            want = wanted.get(key, set())
            if self.dry_run and ns in self.fresh:
                now: set[tuple[str, str]] = set()
            else:
                now = _mirrors_now(t, ns, name)
            if now == want:
                continue
            if now:
                self.do(
                    f"{ns}/{name}: remove mirrors",
                    *_in(ns, "tc", "qdisc", "del", "dev", name, "clsact"),
                )
            if want:
                self.do(
                    f"{ns}/{name}: add clsact qdisc",
                    *_in(ns, "tc", "qdisc", "replace", "dev", name, "clsact"),
                )
            for direction, to in sorted(want):
                # u32 with an empty match: matchall is not built into every kernel
                self.do(
                    f"{ns}/{name}: mirror {direction} to {to}",
                    *_in(
                        ns,
                        "tc",
                        "filter",
                        "add",
                        "dev",
                        name,
                        direction,
                        "protocol",
                        "all",
                        "u32",
                        "match",
                        "u32",
                        "0",
                        "0",
                        "action",
                        "mirred",
                        "egress",
                        "mirror",
                        "dev",
                        to,
                    ),
                )


def _peers(a: dict, b: dict, same_ns: bool) -> bool:
    if any((d.get("linkinfo") or {}).get("info_kind") != "veth" for d in (a, b)):
        return False
    if same_ns:
        return a.get("link") == b["ifname"] and b.get("link") == a["ifname"]
    return a.get("link_index") == b["ifindex"] and b.get("link_index") == a["ifindex"]


def discard_namespaces(names: list[str], dry_run: bool = False) -> list[str]:
    """Delete the namespaces `names` that exist and carry our mark (a dead run's, for `testbed
    cleanup`); one a namespace without the mark is reported and left alone."""
    steps = []
    present = _netns_list(None)
    for ns in names:
        if ns not in present:
            if (MARKS / ns).exists():  # marked, then killed before `ip netns add`
                steps.append(
                    f"{'would remove' if dry_run else 'removed'} the mark of namespace {ns}, "
                    f"which was never made"
                )
                if not dry_run:
                    (MARKS / ns).unlink(missing_ok=True)
            continue
        if not (MARKS / ns).exists():
            steps.append(
                f"namespace {ns} was not made by ntg-testbed (no mark in {MARKS}): left alone"
            )
            continue
        # processes still inside it (a daemon's child that lost the parent-death signal, such as
        # keepalived's VRRP process): ours, since the namespace is; they would outlive its name
        pids = [
            int(p)
            for p in _cmd(None, "ip", "netns", "pids", ns, check=False).split()
            if p.isdigit()
        ]
        if pids:
            names = sorted({_comm(p) for p in pids} - {""})
            steps.append(
                f"{'would kill' if dry_run else 'killed'} {len(pids)} process(es) left in "
                f"namespace {ns}" + (f" ({', '.join(names)})" if names else "")
            )
            if not dry_run:
                for p in pids:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        steps.append(f"{'would delete' if dry_run else 'deleted'} namespace {ns}")
        if not dry_run:
            _cmd(None, "ip", "netns", "del", ns)
            (MARKS / ns).unlink(missing_ok=True)
    return steps


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --------------------------------------------------------------------------------------------
# The two-namespace case the live tests and the live benchmark use


class VethPair:
    """veth0 in namespace `gen`, veth1 in namespace `peer` (the same one when `split` is False).

    Use as a context manager, or call `setup()` and, always, `teardown()`. No addresses; offloads
    and MTU as the kernel makes them."""

    def __init__(self, prefix: str = "ntg", split: bool = True) -> None:
        tag = f"{prefix}-{secrets.token_hex(4)}"
        roles = ["gen", "peer"] if split else ["ns"]
        self.topology = parse_topology(
            {
                "name": tag,
                "mtu": None,
                "namespaces": roles,
                "links": [
                    {
                        "a": {"ns": roles[0], "iface": "veth0"},
                        "b": {"ns": roles[-1], "iface": "veth1"},
                    }
                ],
            }
        )
        self.gen = self.topology.netns(roles[0])
        self.peer = self.topology.netns(roles[-1])
        self._peer_role = roles[-1]

    def setup(self) -> VethPair:
        try:
            self.topology.apply()
        except BaseException:
            self.teardown()
            raise
        return self

    def teardown(self) -> None:
        self.topology.remove()

    def __enter__(self) -> VethPair:
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.teardown()

    def run_in(self, ns: str, *args: str, timeout: float = 120, check: bool = True):
        return subprocess.run(
            netns_argv(ns, *args), capture_output=True, text=True, timeout=timeout, check=check
        )

    def rx(self) -> int:
        """Packets received so far on veth1, the peer end."""
        return self.topology.counters(self._peer_role, "veth1")["rx_packets"]


# --------------------------------------------------------------------------------------------
# python -m testbed.topology up|down|show FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testbed.topology",
        description="Bring a testbed topology (namespaces, veths) up or down, or show it.",
    )
    ap.add_argument("action", choices=["up", "down", "show"])
    ap.add_argument(
        "file",
        help="a topology YAML file, or a packaged name ("
        + ", ".join(sorted(p.stem for p in PACKAGED.glob("*.yaml")))
        + ")",
    )
    ap.add_argument("--name", help="namespace prefix instead of the file's `name`")
    ap.add_argument("--check", action="store_true", help="only say what would change")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    try:
        topo = load_topology(args.file)
        if args.name:
            topo = topo.renamed(args.name)
        if args.action == "show":
            result: Any = {"topology": topo.describe(), "state": topo.state()}
        elif args.action == "up":
            result = topo.apply(dry_run=args.check)
        else:
            result = topo.remove(dry_run=args.check)
    except TopologyError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 2
    except TopologyCommandError as exc:
        print(f"topology: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.action == "show":
        for role, info in result["state"]["namespaces"].items():
            print(f"{info['netns']} ({role}): {'present' if info['exists'] else 'absent'}")
            for name, i in info["interfaces"].items():
                print(
                    f"  {name}: {'up' if i['up'] else 'down'} mtu {i['mtu']} {' '.join(i['address'])} "
                    f"rx {i.get('rx_packets', '-')} tx {i.get('tx_packets', '-')} packets"
                )
    else:
        print("\n".join(result) if result else "nothing to change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
