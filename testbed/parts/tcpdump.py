"""tcpdump as the testbed's capture point, and as a device under test (seed 002's loss method).

`Tcpdump` starts tcpdump through `ntgcore.proc.Process` (usually inside a namespace: the
`argv_prefix` is `ip netns exec NS`; or an endpoint's `argv`, which wraps the whole command, as a
VM's does), returns from `start()` once tcpdump says it is listening,
and on `stop()` interrupts it and parses its closing statistics into `stats()`:

    captured              packets written to the file
    received_by_filter    packets that reached the socket and matched the filter
    dropped_by_kernel     packets the socket's buffer had no room for (`-B` too small, reader too slow)
    dropped_by_interface  packets the interface dropped, when libpcap can tell (else None)

tcpdump does not stop when its file system fills up: it goes on counting packets it can no
longer write. `filled()` tells (the file's file system is full: the step stops), and then
`captured` is the packets the file really holds, read back (tcpdump's own count is kept as
`captured_by_tcpdump`).
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from analysis.capture import CaptureError, iter_capture
from ntgcore.errors import NtgError
from ntgcore.proc import CommandRecord, Process
from ntgcore.runfolder import is_full

STAT_KEYS = ("captured", "received_by_filter", "dropped_by_kernel", "dropped_by_interface")
_STAT_LINES = {
    "packets captured": "captured",
    "packets received by filter": "received_by_filter",
    "packets dropped by kernel": "dropped_by_kernel",
    "packets dropped by interface": "dropped_by_interface",
}
_STAT_RE = re.compile(r"^\s*(\d+)\s+(packets? [a-z ]+?)\s*$")

# What to do about the usual ways tcpdump refuses to start.
_HINTS = (
    ("No such device", "check the interface name: `ip -n NAMESPACE link` lists the interfaces"),
    ("permission", "capturing needs root or CAP_NET_RAW and CAP_NET_ADMIN: run as root"),
    (
        "Operation not permitted",
        "capturing needs root or CAP_NET_RAW and CAP_NET_ADMIN: run as root",
    ),
    ("Cannot open network namespace", "the namespace does not exist: bring the topology up first"),
    ("is not up", "bring the interface up: `ip -n NAMESPACE link set IFACE up`"),
    ("syntax error", "fix the capture filter (BPF syntax, see `man pcap-filter`)"),
    ("Permission denied", "tcpdump cannot write the output file: check the folder's permissions"),
)


class TcpdumpError(NtgError):
    """tcpdump could not start or failed; the message quotes tcpdump and says what to do."""


def parse_stats(text: str) -> dict[str, int | None]:
    """The closing statistics tcpdump prints on stderr, as a dict keyed by STAT_KEYS."""
    out: dict[str, int | None] = dict.fromkeys(STAT_KEYS)
    for line in text.splitlines():
        m = _STAT_RE.match(line)
        if m:
            key = _STAT_LINES.get(m.group(2).replace("packet ", "packets "))
            if key:
                out[key] = int(m.group(1))
    return out


class Tcpdump:
    """tcpdump writing IFACE's packets to OUT (pcap, nanosecond time stamps)."""

    def __init__(
        self,
        argv_prefix: list[str] | Callable[..., list[str]],
        iface: str,
        out: Path,
        snaplen: int = 256,
        buffer_kib: int = 65536,
        bpf: str | None = None,
        name: str = "tcpdump",
        immediate: bool = False,
        inbound_only: bool = False,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", iface):
            raise TcpdumpError(
                f"{iface!r} is not a valid interface name (1-15 letters, digits, _.:@-)"
            )
        if snaplen < 1 or buffer_kib < 1:
            raise TcpdumpError(
                f"snaplen ({snaplen}) and buffer_kib ({buffer_kib}) must be positive"
            )
        self.iface = iface
        self.immediate = immediate
        self.out = Path(out)
        self.name = name
        # -Z root: tcpdump keeps its user, and with it the death signal a change of user clears
        argv = [
            "tcpdump",
            "-n",
            "-U",
            "-Z",
            "root",
            "-w",
            str(self.out),
            "-s",
            str(snaplen),
            "-B",
            str(buffer_kib),
            "-i",
            iface,
            "--time-stamp-precision=nano",
        ]
        if immediate:  # every packet handed over at once, instead of in blocks (TPACKET_V3)
            argv.append("--immediate-mode")
        if inbound_only:  # what arrives, not what this end sends (a port that does both)
            argv += ["-Q", "in"]
        if bpf:
            argv.append(bpf)  # one argument: tcpdump joins the rest of the line itself
        argv = argv_prefix(*argv) if callable(argv_prefix) else [*argv_prefix, *argv]
        self._proc = Process(name, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._lines: list[str] = []
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None
        self._stats: dict[str, int | None] = dict.fromkeys(STAT_KEYS)
        self._stopped = False
        self._filled: Path | None = None

    @property
    def record(self) -> CommandRecord:
        return self._proc.record

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def stderr_text(self) -> str:
        return "".join(self._lines)

    def start(self, timeout: float = 10) -> Tcpdump:
        try:
            self._proc.start()
        except OSError as exc:
            raise TcpdumpError(
                f"cannot run {self._proc.argv[0]}: {exc}; install tcpdump "
                "(`apt-get install tcpdump`) and iproute2"
            ) from exc
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-stderr", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.05):
            if self._proc.poll() is not None:
                self._reader.join(2)
                raise TcpdumpError(self._failure(f"{self.name} exited ({self.record.status})"))
            if time.monotonic() > deadline:
                self._proc.stop(signal.SIGKILL, grace=2)
                self._reader.join(2)
                raise TcpdumpError(
                    self._failure(f"{self.name} did not start listening within {timeout:g}s")
                )
        return self

    def _read(self) -> None:
        stream = self._proc.popen.stderr  # type: ignore[union-attr]
        for raw in stream:
            line = raw.decode(errors="replace")
            self._lines.append(line)
            if "listening on" in line:
                self._listening.set()
        stream.close()

    def _failure(self, what: str) -> str:
        said = [ln.strip() for ln in self._lines if ln.strip()]
        text = " / ".join(said) if said else "(nothing on stderr)"
        hint = next((h for key, h in _HINTS if key.lower() in text.lower()), None)
        msg = f"{what} on interface {self.iface}: {text}"
        self.record.note = text
        return msg + (f"; {hint}" if hint else "")

    def stop(self, grace: float = 10, settle: float | None = None) -> dict[str, int | None]:
        """Interrupt tcpdump (SIGINT) and return its statistics; harmless to call again.

        `settle`: first wait until the output file has not grown for this many seconds (at most
        10 s in all), so packets still in the kernel's ring reach the file. Without immediate
        mode libpcap hands packets over in blocks that the kernel retires after up to 1 s, and
        tcpdump does not read a pending block when interrupted: those packets would count as
        received but not captured. Default: 1.1 s, or 0.25 s in immediate mode; 0 to skip."""
        if self._stopped or self._proc.popen is None:
            return self.stats()
        self._stopped = True
        if settle is None:
            settle = 0.25 if self.immediate else 1.1
        if settle > 0 and self._proc.poll() is None:
            self._wait_quiet(settle)
        self._proc.stop(signal.SIGINT, grace=grace)
        if self._reader:
            self._reader.join(5)
        self._stats = parse_stats(self.stderr_text)
        if self._filled is not None:  # tcpdump counted packets it could not write
            self._stats["captured_by_tcpdump"] = self._stats["captured"]
            self._stats["captured"] = packets_in(self.out)
        return self.stats()

    def filled(self) -> Path | None:
        """The output file once its file system is full (latched): tcpdump cannot write any more
        of what it captures, and does not say so."""
        if (
            self._filled is None
            and self._proc.popen is not None
            and not self._stopped
            and self.out.is_file()
            and is_full(self.out)
        ):
            self._filled = self.out
        return self._filled

    def _wait_quiet(self, settle: float) -> None:
        size, since, deadline = -1, time.monotonic(), time.monotonic() + 10
        while time.monotonic() < deadline and self._proc.poll() is None:
            now = self.out.stat().st_size if self.out.exists() else 0
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= settle:
                return
            time.sleep(0.05)

    def stats(self) -> dict[str, int | None]:
        return dict(self._stats)

    def running(self) -> bool:
        return self._proc.popen is not None and self._proc.poll() is None


def packets_in(path: Path) -> int:
    """The complete packets a capture file holds (a record cut by a full disk is not one)."""
    try:
        return sum(len(chunk) for chunk in iter_capture(path, reuse=True))
    except CaptureError:  # not even the file header was written
        return 0
