"""The network-namespace back end: places are `ROLE:IFACE` of a topology of namespaces and veths
(topology.py here, docs/topology.md). The only code that spells `ip netns exec`."""

from __future__ import annotations

import ctypes
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from ntgcore.endpoint import Backend, Endpoint, Site
from ntgcore.proc import Tool

from .topology import Topology, discard_namespaces, load_topology, netns_argv

CLONE_NEWNET = 0x40000000


def connect_in_netns(netns: str, host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to host:port as seen from inside network namespace `netns`."""
    result: dict = {}

    def inside() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open(f"/run/netns/{netns}") as target:
                if libc.setns(target.fileno(), CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
            # This thread now lives in `netns`; a socket made here stays there. The thread ends
            # right after, so nothing else runs in the namespace by accident.
            result["sock"] = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            result["error"] = exc

    t = threading.Thread(target=inside, name=f"netns-{netns}", daemon=True)
    t.start()
    t.join(timeout + 5)
    if "sock" in result:
        return result["sock"]
    raise result.get("error") or OSError(f"connect in {netns} timed out")


@dataclass(frozen=True)
class NetnsEndpoint(Endpoint):
    """Interface `iface` inside network namespace `netns`."""

    netns: str
    iface: str
    pace: str = "realtime"
    duration_s: float | None = None
    topology: Topology | None = None  # for the counters; None: read them directly

    @property
    def where(self) -> str:
        return f"network namespace {self.netns!r}"

    def argv(self, *command: str) -> list[str]:
        return netns_argv(self.netns, *command)

    def exists(self) -> bool:
        return bool(self.netns) and Path(f"/run/netns/{self.netns}").exists()

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        return connect_in_netns(self.netns, host, port, timeout)

    def counters(self, iface: str | None = None) -> dict[str, int]:
        if self.topology is None:
            raise ValueError("counters need the endpoint's topology")
        role = self.netns[len(self.topology.name) + 1 :]
        return self.topology.counters(role, iface or self.iface)


class NetnsSite(Site):
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.name = topology.name

    def places(self) -> list[str]:
        return [f"{r}:{i}" for r in self.topology.namespaces for i in self.topology.iface(r)]

    def apply(self) -> list[str]:
        return self.topology.apply()

    def remove(self) -> list[str]:
        return self.topology.remove()

    def locations(self) -> list[str]:
        return sorted({self.topology.netns(r) for r in self.topology.namespaces})

    def endpoint(
        self, place: str, pace: str = "realtime", duration_s: float | None = None
    ) -> NetnsEndpoint:
        role, iface = place.split(":", 1)
        return NetnsEndpoint(self.topology.netns(role), iface, pace, duration_s, self.topology)

    def counters(self, place: str) -> dict[str, int]:
        role, iface = place.split(":", 1)
        return self.topology.counters(role, iface)


class NetnsBackend(Backend):
    name = "netns"
    tools = (Tool("ip", "iproute2"), Tool("ethtool", "ethtool"), Tool("tc", "iproute2"))

    def open(self, ref, base_dir=None, source=None, unique: bool = True) -> NetnsSite:
        topo = load_topology(ref, base_dir=base_dir, source=source)
        if unique:
            topo = topo.renamed(f"ntg{secrets.token_hex(3)}")
        return NetnsSite(topo)

    def discard(self, locations: list[str], dry_run: bool = False) -> list[str]:
        return discard_namespaces(locations, dry_run)


BACKEND = NetnsBackend()

__all__ = ["BACKEND", "NetnsBackend", "NetnsEndpoint", "NetnsSite", "connect_in_netns"]
