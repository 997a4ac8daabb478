"""drone's lifecycle: started inside the run's network namespace, reached there, stopped cleanly.

drone is never started in the root namespace (there it would offer the host's NIC and call out
to an update server; ../shared/guide/NETWORK-SAFETY.md). Its settings come from a generated
`drone.ini` under a per-run XDG_CONFIG_HOME: RPC on the namespace's loopback, `PortList Include`
= the run's veths, a rate-accuracy setting. Our RPC connection is opened from a short-lived
thread that has joined the namespace (setns), so it reaches drone's 127.0.0.1 there.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.proc import Process

from .rpc import DroneClient, DroneError

INSTALL_HINT = "install it with `apt-get install ostinato` (Debian), or run ./bootstrap.sh test"
DEFAULT_PORT = 7878


def drone_path() -> str:
    found = shutil.which("drone")
    if not found:
        raise GeneratorError(f"Ostinato's drone was not found on PATH; {INSTALL_HINT}")
    return found


def drone_version(path: str | None = None) -> str:
    """The installed package's version. drone itself is not run for this: outside a test
    namespace it would see the host's interfaces and try to reach its update server."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "ostinato"],
                             capture_output=True, text=True, timeout=10)
        version = out.stdout.strip()
        return f"ostinato {version} (Debian package)" if version else "unknown (not from a Debian package)"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"


def listening_ports(endpoint: Endpoint) -> set[int]:
    out = subprocess.run(endpoint.argv("ss", "-Htln"), capture_output=True, text=True, timeout=10)
    ports = set()
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 4 and ":" in fields[3]:
            ports.add(int(fields[3].rsplit(":", 1)[1]))
    return ports


def endpoint_links(endpoint: Endpoint) -> list[str]:
    """Interfaces at the endpoint other than loopback (veth names without their @peer suffix)."""
    out = subprocess.run(endpoint.argv("ip", "-o", "link", "show"), capture_output=True, text=True,
                         timeout=10)  # fmt: skip
    names = [line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()
             if line.count(":") >= 2]
    return [n for n in names if n and n != "lo"]


def free_port(endpoint: Endpoint) -> int:
    """A TCP port nothing listens on at the endpoint (a fresh namespace: drone's default 7878)."""
    busy = listening_ports(endpoint)
    port = DEFAULT_PORT
    while port in busy:
        port += 1
    return port


def write_ini(config_home: Path, ports: list[str], rate_accuracy: str = "High") -> Path:
    ini = config_home / "Ostinato" / "drone.ini"
    ini.parent.mkdir(parents=True, exist_ok=True)
    ini.write_text(
        "; written by ntg-testbed for one run\n"
        f"[General]\nRateAccuracy={rate_accuracy}\n"
        "[RpcServer]\nAddress=127.0.0.1\n"
        f"[PortList]\nInclude={', '.join(ports)}\n"
    )
    return ini


class Drone:
    """One drone process at `endpoint` (a network namespace made for the run), offering `ports`;
    `client()` connects to it."""

    def __init__(self, endpoint: Endpoint, ports: list[str], run_dir: Path,
                 rate_accuracy: str = "High", rpc_timeout: float = 10.0) -> None:
        if endpoint is None:
            raise GeneratorError("drone must run inside a network namespace made for the run")
        if not endpoint.exists():
            raise GeneratorError(f"{endpoint.where} does not exist")
        self.endpoint, self.ports, self.run_dir = endpoint, ports, run_dir
        self.rpc_timeout = rpc_timeout
        self.binary = drone_path()
        self.config_home = run_dir / "drone-config"
        # Offer the namespace's own interfaces too (only veths live there), so that a wrong
        # port name can be answered with the list drone has.
        offered = list(dict.fromkeys(ports + endpoint_links(endpoint)))
        self.ini = write_ini(self.config_home, offered, rate_accuracy)
        self.port = free_port(endpoint)
        self.log_path = run_dir / "drone.log"
        self._log = None
        argv = endpoint.argv("env", f"XDG_CONFIG_HOME={self.config_home}",
                             f"HOME={self.config_home}", self.binary, "-p", str(self.port))
        self.proc = Process("drone", argv)

    def start(self, timeout: float = 15.0) -> "Drone":
        # The namespace's loopback carries the RPC; VethPair leaves it down.
        subprocess.run(self.endpoint.argv("ip", "link", "set", "lo", "up"), capture_output=True,
                       timeout=10, check=True)
        self._log = open(self.log_path, "wb")
        self.proc.stdout = self._log
        self.proc.stderr = subprocess.STDOUT
        try:
            self.proc.start()
        except OSError as exc:
            raise GeneratorError(f"cannot start drone: {exc}; {INSTALL_HINT}") from exc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise GeneratorError(
                    f"drone exited at start-up ({self.proc.record.status}); its output is in "
                    f"{self.log_path}: {self.log_tail()}")
            try:
                self.endpoint.connect("127.0.0.1", self.port, 1.0).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise GeneratorError(f"drone did not listen on 127.0.0.1:{self.port} in {self.endpoint.where} "
                             f"within {timeout:g}s; see {self.log_path}")

    def client(self, version: str | None = None) -> DroneClient:
        sock = self.endpoint.connect("127.0.0.1", self.port, self.rpc_timeout)
        kwargs = {"version": version} if version else {}
        try:
            return DroneClient(sock=sock, timeout=self.rpc_timeout, **kwargs)
        except DroneError as exc:
            if "refused client version" not in str(exc):
                raise
            raise DroneError(f"{exc} (the drone here is version {drone_version()})") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        ours = self.proc.popen is not None and self.proc.popen.poll() is None
        code = self.proc.stop(signal.SIGTERM, grace=5)
        if ours and code == 255 and not self.proc.record.note:
            self.proc.record.note = "stopped with SIGTERM; drone cleans up and exits with 255"
        if self._log:
            self._log.close()
            self._log = None
        return code

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def __enter__(self) -> "Drone":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["Drone", "DroneError", "drone_path", "drone_version", "write_ini"]
