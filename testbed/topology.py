"""Test-bed "NICs" on one machine: a veth pair inside network namespaces this process creates.

The one implementation of these steps (the live-testbed work and its Ansible role build on it).
It follows the network-safety rules: namespaces named `<prefix>-<random>` made here and deleted
again, only the veth ends and loopback inside, no addresses, no routes, IPv6 off so that the
kernel sends nothing of its own (router solicitations, MLD) into the counters.
"""

from __future__ import annotations

import secrets
import subprocess


def _run(*args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=check)


class VethPair:
    """veth0 in namespace `gen`, veth1 in namespace `peer` (the same one when `split` is False).

    Use as a context manager, or call `setup()` and, always, `teardown()`."""

    def __init__(self, prefix: str = "ntg", split: bool = True) -> None:
        tag = f"{prefix}-{secrets.token_hex(4)}"
        self.gen = f"{tag}-gen" if split else tag
        self.peer = f"{tag}-peer" if split else tag
        self._made: list[str] = []

    def setup(self) -> "VethPair":
        try:
            for ns in dict.fromkeys((self.gen, self.peer)):
                _run("ip", "netns", "add", ns)
                self._made.append(ns)
                for key in ("all", "default"):
                    self.run_in(ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
            _run("ip", "-n", self.gen, "link", "add", "veth0", "type", "veth", "peer", "name",
                 "veth1", "netns", self.peer)  # fmt: skip
            _run("ip", "-n", self.gen, "link", "set", "veth0", "up")
            _run("ip", "-n", self.peer, "link", "set", "veth1", "up")
        except BaseException:
            self.teardown()
            raise
        return self

    def teardown(self) -> None:
        while self._made:
            subprocess.run(["ip", "netns", "del", self._made.pop()], capture_output=True, timeout=30)

    def __enter__(self) -> "VethPair":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.teardown()

    def run_in(self, ns: str, *args: str, timeout: float = 120, check: bool = True):
        return _run("ip", "netns", "exec", ns, *args, timeout=timeout, check=check)

    def rx(self) -> int:
        """Packets received so far on veth1, the peer end."""
        return int(self.run_in(self.peer, "cat", "/sys/class/net/veth1/statistics/rx_packets").stdout)
