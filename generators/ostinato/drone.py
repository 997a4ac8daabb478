"""drone's lifecycle: started inside the run's network namespace, reached there, stopped cleanly.

drone is never started in the root namespace (there it would offer the host's NIC and call out
to an update server; ../shared/guide/NETWORK-SAFETY.md). Its settings come from a generated
`drone.ini` under a per-run XDG_CONFIG_HOME: RPC on the namespace's loopback, `PortList Include`
= the run's veths, a rate-accuracy setting. Our RPC connection is opened from a short-lived
thread that has joined the namespace (setns), so it reaches drone's 127.0.0.1 there.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ntgcore.daemon import EndpointServer
from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError

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
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "ostinato"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        version = out.stdout.strip()
        return (
            f"ostinato {version} (Debian package)"
            if version
            else "unknown (not from a Debian package)"
        )
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
    out = subprocess.run(
        endpoint.argv("ip", "-o", "link", "show"), capture_output=True, text=True, timeout=10
    )
    names = [
        line.split(":")[1].strip().split("@")[0]
        for line in out.stdout.splitlines()
        if line.count(":") >= 2
    ]
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


class Drone(EndpointServer):
    """One drone process at `endpoint` (a network namespace made for the run), offering `ports`;
    `client()` connects to it."""

    def __init__(
        self,
        endpoint: Endpoint,
        ports: list[str],
        run_dir: Path,
        rate_accuracy: str = "High",
        rpc_timeout: float = 10.0,
    ) -> None:
        if endpoint is None:
            raise GeneratorError("drone must run inside a network namespace made for the run")
        if not endpoint.exists():
            raise GeneratorError(f"{endpoint.where} does not exist")
        self.ports, self.run_dir = ports, run_dir
        self.rpc_timeout = rpc_timeout
        self.binary = drone_path()
        self.config_home = run_dir / "drone-config"
        # Offer the namespace's own interfaces too (only veths live there), so that a wrong
        # port name can be answered with the list drone has.
        offered = list(dict.fromkeys(ports + endpoint_links(endpoint)))
        self.ini = write_ini(self.config_home, offered, rate_accuracy)
        port = free_port(endpoint)
        argv = endpoint.argv(
            "env",
            f"XDG_CONFIG_HOME={self.config_home}",
            f"HOME={self.config_home}",
            self.binary,
            "-p",
            str(port),
        )
        # drone cleans up and exits with 255 on SIGTERM
        super().__init__(
            "drone",
            "drone",
            self.binary,
            argv,
            endpoint,
            run_dir / "drone.log",
            port,
            clean_exit=255,
            hint=INSTALL_HINT,
        )

    def client(self, version: str | None = None) -> DroneClient:
        sock = self.endpoint.connect("127.0.0.1", self.port, self.rpc_timeout)
        try:
            if version:
                return DroneClient(sock=sock, timeout=self.rpc_timeout, version=version)
            return DroneClient(sock=sock, timeout=self.rpc_timeout)
        except DroneError as exc:
            if "refused client version" not in str(exc):
                raise
            raise DroneError(f"{exc} (the drone here is version {drone_version()})") from None


__all__ = ["Drone", "DroneError", "drone_path", "drone_version", "write_ini"]
