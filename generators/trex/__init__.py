"""Adapter for Cisco TRex (`generator: trex`), stateless (STL) and, with `mode: astf`, advanced
stateful (TCP sessions on TRex's own stack, astf_profile.py); the mappings: README.md here.
Offline (no endpoint) no server runs: STL profiles are expanded by offline.py/expand.py, ASTF
profiles' connections written by astf_offline.py, into capture.pcap.

The TRex client (`lbr-trex-client`) bundles its own old Scapy, which must be the first Scapy of
its process, so this process never imports it. `prepare` maps the scenario to a profile as plain
data (stl_profile.py, refusing what cannot be sent), has the worker (worker.py, its own process)
build the real STLProfile and dump it into the run folder (`trex-profile.py` for trex-console,
`.json`, `.yaml`), then brings TRex up: the server inside the run's namespace when `server:
start` (server.py), and the worker, which connects, checks the API version, acquires the port,
resets it, adds the streams and reports `ready`. `start` only says go (SIGUSR1), so TRex's
start-up (~2.5 s here) is not counted as sending time; the worker starts the traffic, reports
progress and the final statistics as JSON lines, and releases the port. A monitor thread
watches both processes; on every path (the end, a stop, a Ctrl-C, a dead server, an error) the
worker is stopped and the server this run started is stopped and its DPDK files removed.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.generator import Capabilities, Counters, Generator, GeneratorPlugin, Progress
from ntgcore.proc import CommandRecord, Process
from ntgcore.scenario import GeneratorSpec

from .astf_offline import AstfOfflineExpansion, expected_capture
from .astf_profile import AstfProfile, build_astf_profile, python_code
from .offline import OfflineExpansion
from .otgport import OtgPort
from .server import ASYNC_PORT, SYNC_PORT, TrexServer, server_binary
from .stl_profile import (
    MAX_LATENCY_PPS,
    RATE_UNITS,
    Profile,
    build_profile,
    check_latency_pps,
    latency_by_label,
)

WORKER = Path(__file__).resolve().parent / "worker.py"
INSTALL_HINT = f"install it with `{sys.executable} -m pip install lbr-trex-client==3.4.0`"
FCS = 4
MAX_OVERRUN_S = 30.0  # traffic ends at most this long after its expected end (then: failed)
BUILD_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
STARTUP_TIMEOUT_S = 30.0  # worker start-up (TRex's client imports in ~1 s) to streams added
READY_WAIT_S = 3600.0  # a prepared worker waits this long for `start` at most, then gives up  # the worker stops the traffic, reads the counters and releases the port
MODES = ("stl", "astf")


def _option(spec, name: str, default):
    if spec is None:
        return default
    value = spec.get(name) if isinstance(spec, dict) else getattr(spec, name, None)
    return default if value is None else value


def client_version() -> str:
    """The installed lbr-trex-client's version (read from its metadata: never imported here)."""
    try:
        from importlib import metadata

        return f"lbr-trex-client {metadata.version('lbr-trex-client')} (TRex STL API 5.1)"
    except Exception:
        return "unavailable (lbr-trex-client is not installed)"


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Trex(Generator):
    """`spec` (optional; a dict or a TrexSpec) may give: `server` ("start" or {host, sync_port,
    async_port}), `trex_dir`, `port`, `rate_unit`, `topspeed_pps`, `rpc_timeout`, `stream_stats`,
    `latency_pps` (with `server_iface`: TRex's receiving port);
    ASTF: `mode: astf`, `server_iface`, `response_bytes` (and the keyword `attack_sessions`: the
    `attacks:` section's TCP dialogues from idsrules.attacks.tcp_dialogues)."""

    name = "trex"

    def __init__(self, spec=None, **options) -> None:
        super().__init__(spec)
        opt = lambda k, d: options.get(k, _option(spec, k, d))
        server = opt("server", "start")
        if isinstance(server, BaseModel):
            server = server.model_dump()
        self.server_spec: str | dict = server
        self.trex_dir: str | None = opt("trex_dir", None)
        self.port = int(opt("port", 0))
        self.rate_unit = opt("rate_unit", "pps")
        self.topspeed_pps = float(opt("topspeed_pps", 300_000))
        self.rpc_timeout = float(opt("rpc_timeout", 10.0))
        self.stream_stats = bool(opt("stream_stats", False))
        self.mode = opt("mode", "stl")
        if self.mode not in MODES:
            raise GeneratorError(f"trex: mode {self.mode!r}: one of {', '.join(MODES)}")
        self.server_iface: str | None = opt("server_iface", None)
        self.response_bytes = int(opt("response_bytes", 0))
        self.latency_pps: float | None = opt("latency_pps", None)
        if self.latency_pps is not None:
            check_latency_pps(self.latency_pps, 0)
            if self.mode == "astf":
                raise GeneratorError(
                    "trex: latency_pps: latency probes are stateless streams; "
                    "mode astf has none (its sessions are TRex's TCP stack's)"
                )
        self.attack_sessions: tuple[list[dict], list[str]] | None = options.get("attack_sessions")
        self.astf: AstfProfile | None = None
        self.api_override: dict | None = options.get("api_override")  # tests only
        self.profile: Profile | None = None
        self.endpoint: Endpoint | None = None
        self.run_dir: Path | None = None
        self.server: TrexServer | None = None
        self.worker: Process | None = None
        self._binary: Path | None = None
        self._status = "not started"
        self._error: str | None = None
        self._raised = False
        self._events: list[dict] = []
        self._stats: dict = {}
        self._stop_request = threading.Event()
        # the worker is ready (connected, streams added) / the traffic runs; also set when it ended
        self._signals = {"ready": threading.Event(), "started": threading.Event()}
        self._interrupt = False
        self._monitor: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self._records: list[CommandRecord] = []
        self._on_progress: Callable[[Progress], None] | None = None
        self._log: IO[bytes] | None = None
        self._offline: OfflineExpansion | AstfOfflineExpansion | None = None

    def version(self) -> str:
        return client_version()

    def give_attack_sessions(self, sessions: list[dict], skipped: list[str]) -> None:
        """ASTF: the `attacks:` TCP sessions become templates of the profile (astf_profile.py)."""
        if self.mode != "astf":
            raise GeneratorError("trex: attack sessions are played in mode astf only")
        self.attack_sessions = (sessions, skipped)

    @property
    def starts_server(self) -> bool:
        return self.server_spec == "start"

    # ---- prepare --------------------------------------------------------------------------

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        if importlib.util.find_spec("lbr_trex_client") is None:
            raise GeneratorError(f"trex: the TRex client is not installed; {INSTALL_HINT}")
        if endpoint is None:  # offline: our own expansion of the profile writes capture.pcap
            if self.mode == "astf":  # its TCP connections as TRex would play them (astf_offline.py)
                astf = self.write_astf_profile(scenario, run_dir)
                self._offline = AstfOfflineExpansion(astf, Path(run_dir), seed, self._mac)
                return
            self.write_profile(scenario, run_dir, seed)
            self._offline = OfflineExpansion(self.profile, Path(run_dir))
            return
        if self.starts_server:
            self._binary = server_binary(self.trex_dir)
            if self.latency_pps is not None and not self.server_iface:
                raise GeneratorError(
                    f"trex: latency_pps with `server: start` needs `server_iface`: TRex times the "
                    f"probes it receives on its own port 1, the other end of {endpoint.iface}'s "
                    f"veth in the same namespace (the packaged topology `astf`: gen0 and gen1)"
                )
            if self.mode == "astf" and not self.server_iface:
                raise GeneratorError(
                    f"trex: mode astf with `server: start` needs `server_iface`: TRex's server "
                    f"side (port 1), the other end of {endpoint.iface}'s veth in the same "
                    f"namespace (TRex answers its own connections there)"
                )
        self.endpoint = endpoint
        if self.mode == "astf":
            self.write_astf_profile(scenario, run_dir)
        else:
            self.write_profile(scenario, run_dir, seed, endpoint.pace, endpoint.duration_s)
        self._bring_up()

    def write_profile(
        self,
        scenario,
        run_dir: Path,
        seed: int,
        pace: str = "realtime",
        duration_s: float | None = None,
    ) -> Profile:
        """The profile mapped (refusals here) and built by the worker with TRex's client, written
        into `run_dir` (trex-profile.py/.json/.yaml, the spec, the approximations); no server."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.profile = build_profile(
            scenario,
            seed,
            pace=pace,
            duration_s=duration_s,
            rate_unit=self.rate_unit,
            topspeed_pps=self.topspeed_pps,
            stream_stats=self.stream_stats,
            latency_pps=self.latency_pps,
        )
        self._mac = (scenario.ethernet.src, scenario.ethernet.dst)
        spec_path = self.run_dir / "trex-profile-spec.json"
        spec_path.write_text(json.dumps(self.profile.as_dict(), indent=1) + "\n")
        (self.run_dir / "trex-approximations.txt").write_text(
            "".join(f"- {a}\n" for a in self.profile.approximations)
            or "none: every flow is sent as the scenario says\n"
        )
        self._build(spec_path)
        return self.profile

    def write_astf_profile(self, scenario, run_dir: Path) -> AstfProfile:
        """ASTF mode: the scenario's TCP flows (and `attacks:` TCP sessions) as an ASTF profile
        (refusals here), written as `trex-astf-profile.py` (runnable in trex-console) and
        loaded by the worker with TRex's client (`trex-astf-profile.json`); no server."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.astf = build_astf_profile(
            scenario, response_bytes=self.response_bytes, attack_sessions=self.attack_sessions
        )
        self._mac = (scenario.ethernet.src, scenario.ethernet.dst)
        (self.run_dir / "trex-profile-spec.json").write_text(
            json.dumps(self.astf.as_dict(), indent=1) + "\n"
        )
        (self.run_dir / "trex-approximations.txt").write_text(
            "".join(f"- {a}\n" for a in self.astf.approximations)
            or "none: every TCP flow is one ASTF template as the scenario says\n"
        )
        py = self.run_dir / "trex-astf-profile.py"
        py.write_text(python_code(self.astf))
        self._build(py, "astf-build")
        return self.astf

    @property
    def profile_file(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / ("trex-astf-profile.py" if self.mode == "astf" else "trex-profile.py")

    def _build(self, spec_path: Path, how: str = "build") -> None:
        """The worker builds the STLProfile and dumps it (.py, .json, .yaml) into the run folder
        (ASTF: loads the profile file with ASTFProfile.load_py and writes its JSON)."""
        assert self.run_dir is not None
        log = open(self.run_dir / "trex-build.log", "wb")
        proc = Process(
            "trex-build",
            self._python(str(WORKER), how, str(spec_path), str(self.run_dir)),
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            done = proc.start().communicate(BUILD_TIMEOUT_S)
            if done is None:
                raise GeneratorError(
                    f"trex: building the profile took more than {BUILD_TIMEOUT_S:g}s"
                )
            out = done[0]
        except OSError as exc:
            raise GeneratorError(f"trex: cannot run the worker: {exc}") from exc
        finally:
            log.close()
            self._records.append(proc.record)
        events = _parse(out.decode(errors="replace"))
        errors = [e for e in events if e.get("event") == "error"]
        if errors or not any(e.get("event") == "built" for e in events):
            e = errors[0] if errors else {}
            where = f"{e['stream']}: " if e.get("stream") else ""
            detail = (
                e.get("message") or _tail(self.run_dir / "trex-build.log") or proc.record.status
            )
            proc.record.note = detail
            raise GeneratorError(f"trex: {where}the TRex client refused the profile: {detail}")

    def _python(self, *args: str) -> list[str]:
        # The worker is run by path and imports nothing of the project (see worker.py).
        return [sys.executable, "-W", "ignore", *args]

    # ---- bring-up (end of prepare) and start ---------------------------------------------

    def _bring_up(self) -> None:
        """The server (when this run starts one) and the worker, connected, the port acquired
        and reset, the streams added: all before the run's clock starts, so that `start` only
        says go (TRex's own start-up, ~2.5 s here, is not counted as sending time)."""
        assert (
            (self.profile or self.astf) is not None and self.endpoint is not None and self.run_dir
        )
        self._status = "running"  # processes run from here on: a stop must reach them
        try:
            if self.starts_server:
                assert self._binary is not None
                two_ports = self.mode == "astf" or self.latency_pps is not None
                self.server = TrexServer(
                    self._binary,
                    self.endpoint,
                    self.run_dir,
                    *self._mac,
                    server_iface=self.server_iface if two_ports else None,
                    astf=self.mode == "astf",
                )
                self.server.start()
                host, sync, asyn = "127.0.0.1", SYNC_PORT, ASYNC_PORT
                at_endpoint = True
            else:
                spec = self.server_spec
                assert isinstance(spec, dict)
                host = spec.get("host", "127.0.0.1")
                sync = int(spec.get("sync_port") or SYNC_PORT)
                asyn = int(spec.get("async_port") or ASYNC_PORT)
                # A server on loopback is the one in the endpoint's namespace; any other host is
                # reached from here (a namespace of the run has no route out).
                at_endpoint = _loopback(host)
            job = {
                "host": host,
                "sync_port": sync,
                "async_port": asyn,
                "port": self.port,
                "mode": self.mode,
                "profile": str(self.profile_file),
                "duration_s": self._duration_s(),
                "expected_s": self.expected_seconds,
                "connections": self.astf.connections if self.astf is not None else None,
                "max_overrun_s": MAX_OVERRUN_S,
                "ready_timeout_s": READY_WAIT_S,
                "rpc_timeout": self.rpc_timeout,
                "stream_stats": self.stream_stats,
                "latency_pg_ids": [
                    s.pg_id for s in (self.profile.streams if self.profile else ()) if s.latency
                ],
                "server_port": bool(self.server_iface and self.latency_pps is not None),
                "api_override": self.api_override,
            }
            job_path = self.run_dir / "trex-job.json"
            job_path.write_text(json.dumps(job, indent=1) + "\n")
            argv = self._python(str(WORKER), "run", str(job_path))
            if at_endpoint:
                argv = self.endpoint.argv(*argv)
            self._log = open(self.run_dir / "trex-worker.log", "wb")
            self.worker = Process("trex-worker", argv, stdout=subprocess.PIPE, stderr=self._log)
            self.worker.start()
        except GeneratorError as exc:
            self._fail(str(exc).removeprefix("trex: "))
            self._teardown()
            raise GeneratorError(self._error) from None
        except OSError as exc:
            self._fail(f"cannot start the worker: {exc}")
            self._teardown()
            raise GeneratorError(self._error) from None
        except BaseException as exc:  # a bug or Ctrl-C: never leave the server running
            self._fail(f"{type(exc).__name__}: {exc}")
            self._teardown()
            raise
        self._reader = threading.Thread(target=self._read, name="trex-reader", daemon=True)
        self._reader.start()
        self._monitor = threading.Thread(target=self._watch, name="trex-monitor", daemon=True)
        self._monitor.start()
        self._await("ready", STARTUP_TIMEOUT_S + 4 * self.rpc_timeout)

    @property
    def expected_seconds(self) -> float:
        if self.astf is not None:
            return self.astf.open_seconds  # at most (the worker ends when all have closed)
        assert self.profile is not None
        return self.profile.expected_seconds

    def _duration_s(self) -> float | None:
        if (
            self.astf is not None
        ):  # TRex opens new connections this long (each template to its limit)
            return self.astf.open_seconds
        assert self.profile is not None
        return self.profile.duration_s if self.profile.continuous else None

    def _await(self, event: str, timeout: float) -> None:
        """Until the worker says `event`; its failure (or none in time) is raised here."""
        got = self._signals[event]
        if not got.wait(timeout):
            self._fail(f"the worker did not report `{event}` within {timeout:g}s")
            self.stop()
        if not any(e.get("event") == event for e in self._events):
            assert self._monitor is not None
            self._monitor.join(STOP_GRACE_S + self.rpc_timeout + 15)  # it ended: its verdict
        if self._status == "failed":
            self._raised = True
            raise GeneratorError(self._error)

    def start(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        if self._offline is not None:
            try:
                self._status = self._offline.run(on_progress)
            except GeneratorError as exc:
                self._status, self._error, self._raised = "failed", str(exc), True
                raise
            return
        assert self.worker is not None, "prepare() first"
        self._on_progress = on_progress
        self.worker.send_signal(signal.SIGUSR1)  # go
        self._await("started", 10.0 + 2 * self.rpc_timeout)

    def _read(self) -> None:
        assert self.worker is not None and self.worker.popen is not None and self.run_dir
        with open(self.run_dir / "trex-worker.jsonl", "w") as keep:
            for line in self.worker.popen.stdout:  # type: ignore[union-attr]
                text = line.decode(errors="replace").strip()
                if not text:
                    continue
                try:
                    event = json.loads(text)
                except ValueError:
                    event = {"event": "output", "text": text}
                if event.get("event") == "progress":
                    if self._on_progress:
                        total = self.expected_seconds
                        self._on_progress(
                            Progress(event.get("t", 0.0), total, event.get("opackets", 0))
                        )
                    continue
                keep.write(json.dumps(event) + "\n")
                keep.flush()
                self._events.append(event)
                name = event.get("event")
                if name in self._signals:
                    self._signals[name].set()
                if name in ("error", "done"):  # nothing more to wait for
                    for flag in self._signals.values():
                        flag.set()
                if event.get("event") == "stats":
                    self._stats = event

    def _watch(self) -> None:
        assert self.worker is not None and (self.profile or self.astf) is not None
        assert self.run_dir is not None  # prepared
        asked = False
        deadline = None
        reason = None
        try:
            while self.worker.poll() is None:
                time.sleep(0.05)
                if self.server is not None and not self.server.alive():
                    self.server.proc.wait(1)
                    reason = (
                        f"the TRex server exited during the run ({self.server.proc.record.status}); "
                        f"last output: {self.server.log_tail() or '(none)'}"
                    )
                    self.worker.stop(signal.SIGTERM, grace=3)
                    break
                if self._stop_request.is_set() and not asked:
                    asked = True
                    self.worker.send_signal(signal.SIGTERM)
                    stop_by = time.monotonic() + STOP_GRACE_S + self.rpc_timeout
                if asked and time.monotonic() > stop_by:
                    self.worker.stop(signal.SIGKILL, grace=1)
                    reason = "the worker did not stop within its grace time; killed"
                if self._signals["started"].is_set() and deadline is None:
                    deadline = time.monotonic() + 30.0 + self.expected_seconds + MAX_OVERRUN_S
                if deadline is not None and time.monotonic() > deadline:
                    self.worker.stop(signal.SIGTERM, grace=STOP_GRACE_S)
                    reason = f"the run was still going {MAX_OVERRUN_S:g}s after its expected end; stopped"
            self.worker.wait()
            if self._reader is not None:
                self._reader.join(5)
            done = next((e for e in reversed(self._events) if e.get("event") == "done"), None)
            error = next((e for e in self._events if e.get("event") == "error"), None)
            if reason is None and error is not None:
                reason = f"{error.get('stage')}: {error.get('message')}"
                if self.server is not None and not self.server.alive():
                    reason = (
                        f"the TRex server exited during the run ({self.server.proc.record.status}); "
                        f"the client said: {reason}"
                    )
            if reason is None and done is None:
                reason = (
                    f"the worker ended without a result ({self.worker.record.status}): "
                    f"{_tail(self.run_dir / 'trex-worker.log') or '(no output)'}"
                )
            if reason is None and done is not None and done.get("status") == "overrun":
                reason = (
                    f"TRex was still sending {MAX_OVERRUN_S:g}s after the expected end "
                    f"({self.expected_seconds:.3g}s); stopped it"
                )
            if reason is not None:
                self._fail(reason)
            elif (
                done is not None
                and done.get("status") == "stopped"
                and (
                    self._interrupt
                    or self.astf is not None
                    or (self.profile is not None and not self.profile.continuous)
                )
            ):
                self._status = "interrupted"
            else:
                self._status = "completed"
        except Exception as exc:  # a bug here must not leave anything running
            self._fail(f"{type(exc).__name__}: {exc}")
        finally:
            self._teardown()
            for flag in self._signals.values():
                flag.set()
            if self.run_dir is not None:
                with open(self.run_dir / "trex-stats.json", "w") as out:
                    json.dump(self.port_stats(), out, indent=2)

    def _teardown(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.stop(signal.SIGTERM, grace=STOP_GRACE_S)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.server is not None:
            self.server.stop()

    def _fail(self, reason: str) -> None:
        if self._status != "failed":
            self._status = "failed"
            self._error = f"trex: {reason}"
        # The reason goes with the process it is about: the server when it died, else the worker.
        server_died = (
            self.server is not None
            and self.server.proc.record.exit_code is not None
            and "server exited" in reason
        )
        proc = self.server.proc if server_died else self.worker  # type: ignore[union-attr]
        if proc is not None and not proc.record.note:
            proc.record.note = reason

    def wait(self, timeout: float | None = None) -> bool:
        """True once finished; raises GeneratorError (once) when the run failed."""
        if self._monitor is not None:
            self._monitor.join(timeout)
            if self._monitor.is_alive():
                return False
        if self._status == "failed" and not self._raised:
            self._raised = True
            raise GeneratorError(self._error or "trex failed")
        return True

    def stop(self, interrupt: bool = False) -> None:
        self._interrupt = interrupt
        self._stop_request.set()
        if self._monitor is not None:
            self._monitor.join(STOP_GRACE_S + self.rpc_timeout + 15)
        self._teardown()

    # ---- results --------------------------------------------------------------------------

    def port_stats(self) -> dict:
        """{iface: TRex's counters of the port that sent (opackets, obytes (with the 4-byte FCS),
        oerrors, ipackets, ibytes, ierrors), `seconds`}, plus `trex`: the server's version and,
        when this run started it, its start-up time."""
        if not self._stats or self.endpoint is None:
            return {}
        out = {
            self.endpoint.iface: dict(
                self._stats["port_stats"],
                seconds=self._stats["seconds"],
                trex_port=self._stats["port"],
            )
        }
        if self.astf is not None:
            if self.server_iface and self._stats.get("server_port_stats"):
                out[self.server_iface] = dict(
                    self._stats["server_port_stats"], seconds=self._stats["seconds"], trex_port=1
                )
            out["astf"] = astf_summary(self._stats.get("astf", {}), self.astf.connections)
            out["astf"]["templates"] = self._stats.get("groups", {})
        if self.astf is None and self.server_iface and self._stats.get("server_port_stats"):
            out[self.server_iface] = dict(
                self._stats["server_port_stats"], seconds=self._stats["seconds"], trex_port=1
            )  # STL: the latency probes' receiving port
        if self._stats.get("latency") and self.profile is not None:
            out["latency"] = latency_by_label(self.profile, self._stats["latency"])
        if self._stats.get("streams") and self.profile is not None:
            by_pg = {str(st.pg_id): st for st in self.profile.streams if st.pg_id}
            out["streams"] = {
                by_pg[pg].label: dict(v, name=by_pg[pg].name, pg_id=int(pg))
                for pg, v in self._stats["streams"].items()
                if pg in by_pg
            }
        info = next((e for e in self._events if e.get("event") == "connected"), {})
        out["trex"] = {
            "server_version": info.get("server_version"),
            "client_api": info.get("client_api"),
            "server_started_s": round(self.server.started_s, 3)
            if self.server and self.server.started_s
            else None,
        }
        return out

    def counters(self) -> Counters:
        if self._offline is not None:
            return self._offline.counters()
        if not self._stats:
            return Counters()
        s = self._stats["port_stats"]
        sent, failed = s["opackets"], s["oerrors"]
        # ASTF: the client side's segments, sent on the generator's interface (`at`), as STL; the
        # server side's (sent on `server_iface`) are in port_stats
        nbytes = s["obytes"] - FCS * sent  # as on the veth, like the other generators
        return Counters(sent + failed, sent, failed, nbytes, nbytes, 0)

    def status(self) -> str:
        return self._status

    def error(self) -> str | None:
        return self._error

    def commands(self):
        out = list(self._records)
        if self.server is not None:
            out.append(self.server.proc.record)
        if self.worker is not None:
            out.append(self.worker.record)
        return out


# TRex's TCP counters (client side / server side) under the names the report uses
ASTF_SUMMARY = {
    "connections_attempted": ("client", "tcps_connattempt"),
    "connections_established": ("client", "tcps_connects"),
    "connections_closed": ("client", "tcps_closed"),
    "drops": ("client", "tcps_drops"),
    "connection_drops": ("client", "tcps_conndrops"),
    "server_accepted": ("server", "tcps_accepts"),
    "server_established": ("server", "tcps_connects"),
    "server_closed": ("server", "tcps_closed"),
    "server_drops": ("server", "tcps_drops"),
    "retransmit_timeouts": ("client", "tcps_rexmttimeo"),
    "server_retransmit_timeouts": ("server", "tcps_rexmttimeo"),
}


def astf_summary(counters: dict, expected: int) -> dict:
    """TRex's TCP counters of both sides, the report's names first; `errors`: TRex's err_*."""
    out: dict = {"connections_expected": expected}
    for name, (side, key) in ASTF_SUMMARY.items():
        out[name] = int(counters.get(side, {}).get(key, 0))
    out["errors"] = {
        f"{side}.{k}": v
        for side in ("client", "server")
        for k, v in counters.get(side, {}).items()
        if k.startswith("err_")
    }
    out["client"] = counters.get("client", {})
    out["server"] = counters.get("server", {})
    return out


def _parse(text: str) -> list[dict]:
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = [
            ln
            for ln in path.read_text(errors="replace").splitlines()
            if ln.strip() and "Warning" not in ln
        ]
    except OSError:
        return ""
    return " | ".join(text[-lines:])


class TrexServerAddress(BaseModel):
    """A TRex server that is already running (a user's own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = Field(
        "127.0.0.1",
        description="Its address; on loopback it is the one inside the "
        "generator's namespace (the client runs there), else reached from the host.",
    )
    sync_port: int = Field(SYNC_PORT, ge=1, le=65535, description="Its RPC port (TRex: 4501).")
    async_port: int = Field(ASYNC_PORT, ge=1, le=65535, description="Its event port (TRex: 4500).")


class TrexSpec(GeneratorSpec):
    """Cisco TRex, stateless (STL) or advanced stateful (ASTF), through its client library in a
    worker process."""

    name: Literal["trex"] = "trex"
    server: Literal["start"] | TrexServerAddress = Field(
        "start",
        description="trex: `start` runs a server inside the generator's namespace for "
        "the run (needs `trex_dir` or $NTG_TREX_DIR); or {host, sync_port, async_port} of a "
        "running one.",
    )
    trex_dir: str | None = Field(
        None,
        description="trex: a TRex build (the folder holding "
        "server/_t-rex-64-o); default $NTG_TREX_DIR.",
    )
    port: int = Field(
        0,
        ge=0,
        le=63,
        description="trex: the TRex port that sends (a started "
        "server has port 0 on the generator's interface).",
    )
    rate_unit: Literal[RATE_UNITS] | None = Field(  # type: ignore[valid-type]
        None,
        description="trex: how stream rates are given to TRex: pps (default), bps_L2 or "
        "percent (of the nominal line rate; refused for streams sent for a duration).",
    )
    topspeed_pps: float | None = Field(
        None,
        gt=0,
        le=100_000_000,
        description="trex: the explicit packet rate of pace topspeed (default 300000).",
    )
    rpc_timeout: float | None = Field(None, gt=0, le=300, description="trex: seconds per RPC call.")
    stream_stats: bool | None = Field(
        None,
        description="trex: TRex's per-stream counters "
        "(STLFlowStats) into port_stats.streams; TRex marks the "
        "packets for them (IPv4 ID, TOS bit).",
    )
    mode: Literal[MODES] | None = Field(  # type: ignore[valid-type]
        None,
        description="trex: `stl` (default): flows as stateless streams; `astf`: TCP flows, "
        "TCP `sessions:` and `attacks:` TCP sessions as TRex's own TCP connections "
        "(generators/trex/README.md).",
    )
    server_iface: str | None = Field(
        None,
        description="trex, with server: start: TRex's port 1, "
        "the other end of the generator's veth in its namespace: "
        "the server side (mode astf) or the latency probes' receiver "
        "(latency_pps).",
    )
    response_bytes: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="trex, mode astf: bytes the server answers every TCP flow's request with.",
    )
    latency_pps: float | None = Field(
        None,
        gt=0,
        le=MAX_LATENCY_PPS,
        description="trex, stl: one "
        "latency probe per flow at this rate (STLFlowLatencyStats): "
        "min/avg/max latency, jitter, histogram, sequence errors into "
        "port_stats.latency; TRex receives them on port 1 "
        "(`server_iface`).",
    )

    def plays_attacks(self) -> bool:
        return self.mode == "astf"  # the `attacks:` TCP sessions on TRex's own TCP stack

    def sends_sessions(self) -> bool:
        """Mode astf maps the TCP `sessions:` onto ASTF templates (astf_profile.py); stl
        refuses them."""
        return self.mode == "astf"

    def offline_expected(self, scenario) -> dict | None:
        """Mode astf offline writes the profile's TCP connections (refusals: GeneratorError)."""
        if self.mode != "astf":
            return None
        return expected_capture(
            build_astf_profile(scenario, response_bytes=self.response_bytes or 0)
        )


PLUGIN = GeneratorPlugin(
    name="trex",
    options=TrexSpec,
    adapter=Trex,
    capabilities=Capabilities(
        offline=True,
        live=True,
        port_stats=True,
        counters=(
            "packets_attempted",
            "packets_sent",
            "packets_failed",
            "bytes_attempted",
            "bytes_sent",
        ),
    ),
    summary="Cisco TRex stateless or ASTF, through lbr-trex-client in a worker process (generators/trex/README.md)",
    otg_port=OtgPort,
)

__all__ = ["PLUGIN", "Trex", "TrexSpec", "TrexServerAddress", "client_version"]
