"""The start barrier of several generator hosts: a command that waits for one agreed moment.

`python -m ntgcore.startat NS -- COMMAND...` sleeps until CLOCK_REALTIME reaches NS (ns since
the epoch), the last 2 ms spinning, then replaces itself with COMMAND (same pid, so the process
helper's stop and exit status are COMMAND's). When NS has already passed it starts at once and
says by how much it was late on stderr. `AtTime` wraps any back end's `Endpoint` so that the
commands it runs go through this waiter: every host's generator, prepared with the same NS, starts
at the same moment on the hosts' clocks (one clock here; NTP/PTP-disciplined clocks for SSH hosts
and VMs). A generator that can wait itself after its set-up (flowengine `--start-at`) asks for
`argv_self_held` instead, which removes its start-up time from the skew. What it reaches is
measured from the captures (testbed/parts/hosts.py), not assumed.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

from .endpoint import Endpoint

SPIN_NS = 2_000_000  # the last 2 ms: spin on the clock instead of sleeping (a sleep overshoots)


def wait_until(at_ns: int) -> int:
    """Block until time.time_ns() >= AT_NS; returns how late the return was, in ns (>= 0)."""
    while True:
        left = at_ns - time.time_ns()
        if left <= SPIN_NS:
            break
        time.sleep((left - SPIN_NS) / 1e9)
    while time.time_ns() < at_ns:
        pass
    return time.time_ns() - at_ns


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        print(
            "usage: python -m ntgcore.startat NS_SINCE_EPOCH -- COMMAND [ARG...]", file=sys.stderr
        )
        return 2
    # Stopped while waiting: the exit status a command stopped by that signal gives (130, 143).
    # exec resets both handlers, so the command handles its signals its own way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        late = wait_until(int(args[0]))
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    if late > 10_000_000:
        print(
            f"startat: started {late / 1e6:.1f} ms after the agreed time",
            file=sys.stderr,
            flush=True,
        )
    try:
        os.execvp(args[2], args[2:])
    except OSError as exc:
        print(f"startat: cannot run {args[2]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process


class AtTime(Endpoint):
    """`inner`, with every command it runs held until `at_ns` (CLOCK_REALTIME, ns since the epoch)."""

    def __init__(self, inner: Endpoint, at_ns: int, python: str = sys.executable) -> None:
        self.inner, self.at_ns, self.python = inner, at_ns, python
        self.iface, self.pace, self.duration_s = inner.iface, inner.pace, inner.duration_s
        self.start_at_ns = at_ns
        self.local_processes = inner.local_processes

    @property
    def where(self) -> str:
        return self.inner.where

    def argv(self, *command: str) -> list[str]:
        return self.inner.argv(
            self.python, "-m", "ntgcore.startat", str(self.at_ns), "--", *command
        )

    def argv_self_held(self, *command: str) -> list[str]:
        return self.inner.argv(*command)

    def exists(self) -> bool:
        return self.inner.exists()

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        return self.inner.connect(host, port, timeout)

    def counters(self, iface: str | None = None) -> dict[str, int]:
        return self.inner.counters(iface)


if __name__ == "__main__":
    sys.exit(main())
