"""A TRex server started for one run: inside the run's network namespace, on the run's veth.

Only the server binary is run (`_t-rex-64-o` of a TRex build, e.g. ../shared/trex/server), never
the upstream `t-rex-64` wrapper (it binds NICs, cleans up system state and kills other processes
by name). The flags are the ones measured in ../shared/trex/README.md: software mode on Linux
interfaces, `low_end` (the only mode that starts on 2 cores), no Scapy server, no terminal:

    ip netns exec NS ./_t-rex-64-o -i --software --no-scapy-server --no-termio --iom 0 --cfg CFG

from the build's `server/` folder (it loads its libraries relative to it). The generated CFG
(`trex_cfg.yaml` in the run folder) has the run's interface and a `dummy` second port (or, with
`server_iface`, the other end of its veth: ASTF's server side, STL's latency receiver), the
scenario's MAC addresses (with `server_iface`: the two interfaces' own; layer-2 mode, no ARP)
and a DPDK file prefix of its own, so that two runs never share `/var/run/dpdk/<prefix>`; that
folder (and `/var/run/dpdk` itself when this run made it and it is empty) is removed when the
server stops, and by `testbed cleanup` after a `kill -9` of the run (the server's recorded
leftovers). The RPC listens on port 4501 (events: 4500) inside the namespace after about 1.5 s.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from ntgcore.daemon import EndpointServer
from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.proc import Leftover

BINARY = "_t-rex-64-o"
DPDK_RUN = Path("/var/run/dpdk")
SYNC_PORT, ASYNC_PORT = 4501, 4500
START_TIMEOUT_S = 20.0
DIR_HINT = (
    "set `trex_dir:` of the trex generator, or the environment variable NTG_TREX_DIR, to a "
    "TRex build (the folder with server/_t-rex-64-o, or that server folder itself)"
)


def server_binary(trex_dir: str | None) -> Path:
    """The server binary of a TRex build folder (`DIR/server/_t-rex-64-o` or `DIR/_t-rex-64-o`)."""
    given = trex_dir or os.environ.get("NTG_TREX_DIR")
    if not given:
        raise GeneratorError(f"trex: `server: start` needs a TRex server build; {DIR_HINT}")
    base = Path(os.path.expandvars(given)).expanduser()
    for cand in (base / "server" / BINARY, base / BINARY):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand.resolve()
    raise GeneratorError(f"trex: no executable {BINARY} in {base} or {base / 'server'}; {DIR_HINT}")


def write_config(
    path: Path, iface: str, src_mac: str, dst_mac: str, prefix: str, server_iface: str | None = None
) -> Path:
    """trex_cfg.yaml for one Linux interface in layer-2 mode (port 0) plus a dummy port 1; with
    `server_iface` both ends of one veth pair (ASTF: port 0 the client side, port 1 the server
    side; STL: port 0 sends, port 1 receives the latency probes), each port sending to the other
    end's MAC address."""
    second = server_iface or "dummy"
    path.write_text(
        "# written by ntg-testbed for one run (generators/trex/server.py)\n"
        "- port_limit: 2\n"
        "  version: 2\n"
        f"  prefix: {prefix}\n"
        f"  interfaces: ['{iface}', '{second}']\n"
        "  low_end: true\n"
        "  low_end_core: 0\n"
        "  port_info:\n"
        f"    - {{src_mac: '{src_mac}', dest_mac: '{dst_mac}'}}\n"
        f"    - {{src_mac: '{dst_mac}', dest_mac: '{src_mac}'}}\n"
    )
    return path


def interface_mac(endpoint: Endpoint, iface: str) -> str:
    """The MAC address of `iface` in the endpoint's namespace (refused when it is not there)."""
    import json

    proc = subprocess.run(
        endpoint.argv("ip", "-j", "link", "show", "dev", iface),
        capture_output=True,
        text=True,
        timeout=10,
    )
    try:
        return json.loads(proc.stdout)[0]["address"]
    except (ValueError, IndexError, KeyError):
        raise GeneratorError(
            f"trex: server_iface: no interface {iface} in {endpoint.where} (TRex's "
            f"port 1 must be the other end of {endpoint.iface}'s veth, in the "
            f"same namespace): {proc.stderr.strip()}"
        ) from None


class TrexServer(EndpointServer):
    """One server process at `endpoint` (a network namespace made for the run)."""

    def __init__(
        self,
        binary: Path,
        endpoint: Endpoint,
        run_dir: Path,
        src_mac: str,
        dst_mac: str,
        server_iface: str | None = None,
        astf: bool | None = None,
    ) -> None:
        """`server_iface`: TRex's port 1 on this interface of the same namespace, the other end
        of the endpoint's veth (the ports' MAC addresses are then the two interfaces' own): the
        server side in ASTF mode, the receiving port of the latency probes in STL mode. `astf`
        (`--astf`; default: when `server_iface` is given)."""
        if not endpoint.exists():
            raise GeneratorError(f"trex: {endpoint.where} does not exist")
        self.binary, self.run_dir = binary, run_dir
        self.prefix = f"ntg{secrets.token_hex(4)}"
        self.astf = server_iface is not None if astf is None else astf
        if server_iface is not None:
            src_mac, dst_mac = (
                interface_mac(endpoint, endpoint.iface),
                interface_mac(endpoint, server_iface),
            )
        self.config = write_config(
            run_dir / "trex_cfg.yaml", endpoint.iface, src_mac, dst_mac, self.prefix, server_iface
        )
        self._made_dpdk_run = not DPDK_RUN.exists()
        leftovers = [Leftover(str(DPDK_RUN / self.prefix))]  # for `testbed cleanup` after a kill -9
        if self._made_dpdk_run:
            leftovers.append(Leftover(str(DPDK_RUN), only_if_empty=True))
        argv = endpoint.argv(
            str(binary),
            "-i",
            "--software",
            "--no-scapy-server",
            "--no-termio",
            "--iom",
            "0",
            "--cfg",
            str(self.config),
            *(["--astf"] if self.astf else []),
        )
        # the TRex server exits with 255 on SIGTERM
        super().__init__(
            "trex: the server",
            "trex-server",
            str(binary),
            argv,
            endpoint,
            run_dir / "trex-server.log",
            SYNC_PORT,
            cwd=binary.parent,
            clean_exit=255,
        )
        self.proc.leftovers = leftovers

    def start(self, timeout: float = START_TIMEOUT_S) -> TrexServer:
        super().start(timeout)
        return self

    def stop(self) -> int | None:
        code = super().stop()
        self.remove_dpdk_files()
        return code

    def remove_dpdk_files(self) -> None:
        """What DPDK made for this server: its prefix folder; /var/run/dpdk if we made it."""
        if self.proc.popen is not None and self.proc.popen.poll() is None:
            return  # still running: never pull its files away
        shutil.rmtree(DPDK_RUN / self.prefix, ignore_errors=True)
        if self._made_dpdk_run:
            try:
                DPDK_RUN.rmdir()  # only when empty: another server may use it now
            except OSError:
                pass


__all__ = [
    "TrexServer",
    "server_binary",
    "write_config",
    "interface_mac",
    "SYNC_PORT",
    "ASYNC_PORT",
]
