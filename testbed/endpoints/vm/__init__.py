"""The VM back end: some roles of a namespace topology are qemu VMs (docs/vm.md).

A VM topology is a netns topology (`topology:`, any form `testbed.topology` takes) plus `vms:`,
the roles that are VMs and their preset. The namespaces and veths are made as usual, except that
a VM role's veth ends carry no address: inside that role's namespace each of its veth ends is
bridged to a tap, and the guest's virtio NIC on that tap takes the end's name and addresses. qemu
runs inside the namespace, so the VM reaches exactly the links the topology gives it, and a
management tap (198.19.255.0/30, also only inside that namespace) carries ssh.

Places are the topology's own `ROLE:IFACE`; at a VM role, an endpoint's `argv` runs the command
in the guest over ssh (a program given by a host path runs as the guest's program of the same
name: the `vm_guest` Ansible role installs the engine there; the host's /tmp and working folder
are mounted in the guest at the same paths, other input files are copied in) and it is a
`PowerSwitch` (power off: qemu's monitor `quit`).
"""

from __future__ import annotations

import secrets
import shlex
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ntgcore.endpoint import Backend, Endpoint, Site
from ntgcore.errors import BadInput
from ntgcore.files import read_bounded
from ntgcore.scenario import format_error
from ntgcore.yamlread import MAX_BYTES, YamlProblem, read_yaml, yaml_lines

from ..netns import NetnsBackend, NetnsSite
from ..netns.topology import (
    COUNTERS,
    Topology,
    TopologyCommandError,
    TopologyError,
    discard_namespaces,
    load_topology,
    netns_argv,
    parse_topology,
    run_command,
)
from . import image as vm_image
from .machine import (
    MGMT_GUEST,
    MGMT_HOST,
    MGMT_TAP,
    PRESETS,
    TOOLS,
    WORK_ROOT,
    Machine,
    Nic,
    Preset,
    VmError,
    default_shares,
    discard_workdirs,
    mac_for,
)

PACKAGED = Path(__file__).resolve().parent / "topologies"


class VmSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Literal["seed001", "ci"] = Field(
        "ci", description="seed001: 2 vCPUs, 4 GB; ci: 1 vCPU, 768 MB."
    )
    cpus: int | None = Field(None, ge=1, le=64, description="vCPUs (default: the preset's).")
    memory_mb: int | None = Field(
        None, ge=256, le=262144, description="Memory in MB (default: the preset's)."
    )
    boot_timeout: float = Field(
        90.0, gt=0, le=900, description="Seconds the guest may take to answer over ssh."
    )
    engine: bool = Field(
        True,
        description="Build the native engine in the guest (playbooks/vm_guest.yml) after boot.",
    )
    provision_timeout: float = Field(
        3600.0,
        gt=0,
        le=14400,
        description="Seconds the guest's engine build may "
        "take (under TCG it is tens of minutes; once, then kept as a layer).",
    )

    def resolved(self) -> Preset:
        base = PRESETS[self.preset]
        return Preset(self.cpus or base.cpus, self.memory_mb or base.memory_mb)


class VmTopology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    topology: str | dict = Field(
        description="The namespaces and veths (a netns topology: name, file or mapping)."
    )
    vms: dict[str, VmSpec] = Field(min_length=1, description="Roles of `topology` that are VMs.")


def load_vm_topology(
    ref: str | dict, base_dir: Path | None = None, source: str | None = None
) -> tuple[Topology, dict[str, VmSpec]]:
    """A VM topology from a packaged name, a YAML path (relative to `base_dir`) or a mapping."""
    file, lines = source or "<inline VM topology>", {}
    if isinstance(ref, str):
        path = (
            PACKAGED / f"{ref}.yaml" if "/" not in ref and not ref.endswith(".yaml") else Path(ref)
        )
        if not path.is_absolute() and base_dir is not None and path.parent != PACKAGED:
            path = Path(base_dir) / path
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in PACKAGED.glob("*.yaml")))
            raise TopologyError([f"{path}: no such file (packaged VM topologies: {known})"])
        try:  # the one bounded reader: a device, a pipe, a directory, bytes not UTF-8 are said so
            text = read_bounded(path, MAX_BYTES, "VM topology file", "write a smaller topology")
            data = read_yaml(text, str(path))
        except YamlProblem as exc:
            raise TopologyError(exc.problems) from None
        except BadInput as exc:
            raise TopologyError([str(exc)]) from None
        file, lines, base_dir = str(path), yaml_lines(text), path.parent
    else:
        data = ref
    if not isinstance(data, dict):
        raise TopologyError(
            [f"{file}:1: (top level): expected a mapping with `topology` and `vms`"]
        )
    try:
        described = VmTopology.model_validate(data)
    except ValidationError as exc:
        raise TopologyError(
            [format_error(e, file, lines, VmTopology) for e in exc.errors(include_url=False)]
        ) from None
    topo = load_topology(described.topology, base_dir=base_dir, source=f"{file}: topology")
    unknown = [r for r in described.vms if r not in topo.namespaces]
    if unknown:
        line = lines.get(("vms", unknown[0]), 1)
        raise TopologyError(
            [
                f"{file}:{line}: vms.{unknown[0]}: not a role of topology {topo.name} "
                f"(roles: {', '.join(topo.namespaces)})"
            ]
        )
    return topo, dict(described.vms)


def is_vm_topology(ref: str, base_dir: Path | None = None) -> bool:
    """Whether `ref` (a topology's packaged name or YAML file, as `load_vm_topology` takes it)
    is a VM topology: a packaged VM topology's name, or a file whose top level has `vms`. A file
    that cannot be read or parsed is not one (the netns back end then says what is wrong)."""
    if "/" not in ref and not ref.endswith(".yaml"):
        return (PACKAGED / f"{ref}.yaml").is_file()
    path = Path(ref)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    try:
        data = read_yaml(read_bounded(path, MAX_BYTES, "topology file"), str(path))
    except (BadInput, YamlProblem):
        return False
    return isinstance(data, dict) and "vms" in data


def _without_addresses(topo: Topology, roles: set[str]) -> Topology:
    """The topology with no address on the veth ends of `roles` (their guests carry them)."""
    doc = topo.describe()
    for link in doc["links"]:
        for side in ("a", "b"):
            if link[side]["ns"] in roles:
                link[side]["address"] = []
    return parse_topology(doc, f"topology {topo.name}")


@dataclass(frozen=True)
class VmEndpoint(Endpoint):
    """Interface `iface` inside the guest of `machine`."""

    machine: Machine
    iface: str
    pace: str = "realtime"
    duration_s: float | None = None
    local_processes = False  # they run in the guest

    @property
    def where(self) -> str:
        return f"VM {self.machine.name!r} (qemu in network namespace {self.machine.netns!r})"

    def argv(self, *command: str) -> list[str]:
        if not command:  # a bare prefix cannot carry a command into the guest
            raise VmError(
                f"{self.where}: a command in a VM is given whole (argv(program, args...)); "
                "this part builds its command line after the place's prefix and cannot run "
                "in a VM: put it in a namespace of the topology"
            )
        self.machine.wait_ready()
        program, *args = command
        if program == sys.executable:
            program = "python3"  # this machine's interpreter (a venv's): the guest's Debian python3
        elif "/" in program:
            program = Path(program).name  # the guest's own build of it, from the guest's PATH
        for arg in args:  # an input file outside the shared folders is copied in first
            path = Path(arg)
            if path.is_absolute() and path.is_file() and not self.machine.shared(path):
                self.machine.put(path)
        # through the relay, so that stopping this process stops the command in the guest
        pidfile = f"/run/ntg-cmd-{secrets.token_hex(4)}.pid"
        remote = f"echo $$ > {pidfile} && exec {shlex.join([program, *args])}"
        return [
            sys.executable,
            "-m",
            "testbed.endpoints.vm.relay",
            pidfile,
            "--",
            *self.machine.ssh_argv_raw(remote),
        ]

    def exists(self) -> bool:
        return self.machine.running()

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        raise VmError(
            f"{self.where}: connecting to a server inside a VM is not supported yet "
            "(a generator with a server of its own, as Ostinato or TRex, runs in a namespace)"
        )

    def counters(self, iface: str | None = None) -> dict[str, int]:
        self.machine.wait_ready()
        name = iface or self.iface
        paths = [f"/sys/class/net/{name}/statistics/{c}" for c in COUNTERS]
        out = self.machine.run("cat", *paths, timeout=30).stdout.split()
        return dict(zip(COUNTERS, map(int, out)))

    def align_clock(self, max_age_s: float) -> dict[str, int] | None:
        """A guest's clock drifts from this machine's (under TCG, 12 ppm when the host is idle,
        0.14 s within two minutes when CI loads both cores: its timer ticks come late): set again
        when the last setting is older than `max_age_s`."""
        self.machine.wait_ready()
        if self.machine.clock_age_s() <= max_age_s:
            return None
        self.machine.sync_clock()
        return dict(self.machine.clock)

    def pids(self) -> dict[str, int]:
        proc = self.machine.proc
        return (
            {"qemu": proc.pid} if proc is not None and proc.pid and self.machine.running() else {}
        )

    def power_off(self) -> None:
        self.machine.power_off()

    def power_on(self) -> None:
        """Switch the VM on; its boot is waited for when the guest is next used (a VM switched on
        by the undo of the run's last step is switched off by the teardown without a boot)."""
        self.machine.start(wait=False)


class VmSite(Site):
    def __init__(self, topology: Topology, vms: dict[str, VmSpec]) -> None:
        self.topology = topology
        self.vms = vms
        self.name = topology.name
        self.net = NetnsSite(_without_addresses(topology, set(vms)))
        self.machines: dict[str, Machine] = {}

    def places(self) -> list[str]:
        return self.net.places()

    def guest_sees(self, path: Path) -> bool:
        """Whether host path `path` is the same path in the guests (below a shared folder: /tmp,
        the working folder, NTG_VM_SHARE's), so what a guest writes there the host reads."""
        resolved = path.resolve()
        return any(resolved == s or s in resolved.parents for s in default_shares())

    def _machine(self, role: str, image: vm_image.Image) -> Machine:
        spec = self.vms[role]
        name = self.topology.netns(role)
        nics = [Nic(MGMT_TAP, "mgmt", mac_for(name, 0), 1500, (f"{MGMT_GUEST}/30",))]
        # an interface a mirror sends its copies out of stays on the host (a capture's feed)
        mirror_outs = {m.to for m in self.topology.mirrors if m.ns == role}
        for link in self.topology.links:
            for end in (link.a, link.b):
                if end.ns == role and end.iface not in mirror_outs:
                    nics.append(
                        Nic(
                            f"vt{len(nics)}",
                            end.iface,
                            mac_for(name, len(nics)),
                            link.mtu or self.topology.mtu or 1500,
                            tuple(end.address),
                        )
                    )
        return Machine(
            name,
            name,
            image,
            spec.resolved(),
            nics,
            boot_timeout_s=spec.boot_timeout,
            shares=default_shares(),
        )

    def apply(self) -> list[str]:
        steps = self.net.apply()
        image = vm_image.ensure_image()
        for role in self.vms:
            machine = self._machine(role, image)
            self.machines[role] = machine  # before it boots: teardown finds it on every path
            ns = machine.netns
            cmds = [
                ("ip", "tuntap", "add", "dev", MGMT_TAP, "mode", "tap"),
                ("ip", "addr", "add", MGMT_HOST, "dev", MGMT_TAP),
                ("ip", "link", "set", MGMT_TAP, "up"),
                # the bridges below are a wire: with br_netfilter loaded (the default in a new
                # namespace then is on) IPv4 frames crossing a bridge are trimmed to the IP
                # length (an OTG frame's FCS bytes go) and dropped with a bad header checksum
                (
                    "sysctl",
                    "-q",
                    "-e",  # no br_netfilter: no such keys, nothing to turn off
                    "-w",
                    "net.bridge.bridge-nf-call-iptables=0",
                    "net.bridge.bridge-nf-call-ip6tables=0",
                    "net.bridge.bridge-nf-call-arptables=0",
                ),
            ]
            for i, nic in enumerate(machine.nics[1:], 1):
                bridge = f"vb{i}"
                cmds += [
                    ("ip", "tuntap", "add", "dev", nic.tap, "mode", "tap"),
                    ("ip", "link", "set", nic.tap, "mtu", str(nic.mtu)),
                    ("ip", "link", "add", bridge, "type", "bridge"),
                    ("ip", "link", "set", nic.name, "master", bridge),
                    ("ip", "link", "set", nic.tap, "master", bridge),
                    *[("ip", "link", "set", dev, "up") for dev in (nic.tap, bridge)],
                ]
                steps.append(
                    f"{ns}: bridge {bridge} joins veth {nic.name} and tap {nic.tap} (guest NIC {nic.name})"
                )
            for cmd in cmds:
                _ip(self.topology, ns, *cmd)
            layer = image.engine_layer() if self.vms[role].engine else None
            machine.base = layer if layer is not None and layer.is_file() else None
        boot_all(list(self.machines.values()))
        for role, machine in self.machines.items():
            ns, layer = machine.netns, image.engine_layer() if self.vms[role].engine else None
            steps.append(
                f"{ns}: booted VM ({machine.accel}, {machine.preset.cpus} vCPU, "
                f"{machine.preset.memory_mb} MB) ready in {machine.boot_s} s"
            )
            if machine.base is not None:
                steps.append(f"{ns}: the engine as built in the guest before ({layer})")
            elif layer is not None:
                started = time.monotonic()
                recap = machine.provision(timeout=self.vms[role].provision_timeout)
                machine.save_layer(layer)
                machine.base = (
                    layer  # a later boot (a power-on) starts from it: the engine is there
                )
                machine.provision_s = round(time.monotonic() - started, 1)
                steps.append(
                    f"{ns}: the native engine built in the guest by playbooks/vm_guest.yml in "
                    f"{machine.provision_s} s (changed={recap.get('changed')}), kept as {layer}"
                )
        return steps

    def remove(self) -> list[str]:
        steps = []
        for machine in self.machines.values():
            machine.stop()
            steps.append(f"powered off VM {machine.name}, deleted {machine.workdir}")
        return steps + self.net.remove()

    def locations(self) -> list[str]:
        return self.net.locations() + [str(WORK_ROOT / self.topology.netns(r)) for r in self.vms]

    def endpoint(
        self, place: str, pace: str = "realtime", duration_s: float | None = None
    ) -> Endpoint:
        role, iface = place.split(":", 1)
        if role in self.vms:
            if role not in self.machines:
                raise VmError(
                    f"place {place}: the VM of role {role} is not running (apply the site first)"
                )
            return VmEndpoint(self.machines[role], iface, pace, duration_s)
        return self.net.endpoint(place, pace, duration_s)

    def counters(self, place: str) -> dict[str, int]:
        """At a VM's place: the counters of the veth end its NIC is bridged to, on the host side
        (what the link gave the VM and took from it), which survive the VM's power-off."""
        role = place.split(":", 1)[0]
        if role in self.vms:
            return self.net.counters(place)
        return self.endpoint(place).counters()

    def facts(self) -> dict[str, Any]:
        return {role: m.facts() for role, m in self.machines.items()}


def boot_all(machines: list[Machine]) -> None:
    """Boot `machines` at the same time (each boot mostly waits on its own qemu); the first
    failure is raised once all have ended, so none is left half-started."""
    if len(machines) == 1:
        machines[0].start()
        return
    with ThreadPoolExecutor(len(machines), thread_name_prefix="vm-boot") as pool:
        futures = [pool.submit(m.start) for m in machines]
    for future in futures:
        future.result()


def _ip(topo: Topology, ns: str, *argv: str) -> None:
    """One command inside namespace `ns` (as the netns back end runs them: recorded, checked)."""
    try:
        run_command(topo, *netns_argv(ns, *argv))
    except TopologyCommandError as exc:
        raise VmError(f"setting up the VM's network in {ns}: {exc}") from None


class VmBackend(Backend):
    name = "vm"
    tools = (*NetnsBackend.tools, *TOOLS, *vm_image.TOOLS)

    def open(self, ref, base_dir=None, source=None, unique: bool = True) -> VmSite:
        topo, vms = load_vm_topology(ref, base_dir=base_dir, source=source)
        if unique:
            topo = topo.renamed(f"ntg{secrets.token_hex(3)}")
        return VmSite(topo, vms)

    def discard(self, locations: list[str], dry_run: bool = False) -> list[str]:
        paths = [x for x in locations if x.startswith("/")]
        spaces = [x for x in locations if not x.startswith("/")]
        # deleting the namespace kills qemu inside it; then its work folder (overlay) goes
        return discard_namespaces(spaces, dry_run) + discard_workdirs(paths, dry_run)


BACKEND = VmBackend()

__all__ = [
    "BACKEND",
    "VmBackend",
    "VmEndpoint",
    "VmSite",
    "VmSpec",
    "is_vm_topology",
    "load_vm_topology",
]
