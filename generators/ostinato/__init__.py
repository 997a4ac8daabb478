"""Adapter for Ostinato's drone (`generator: ostinato`); how flows map to streams: README.md here.

prepare() maps the scenario to streams (refusing what drone cannot send) and checks that drone
is installed; start() starts drone inside the endpoint's network namespace, configures the port
and starts transmission; a monitor thread polls getStats, stops a continuous run after its
duration, and collects the final counters (and drone's own capture, when asked for).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from google.protobuf import text_format
from pydantic import Field

from ntgcore.endpoint import Endpoint
from ntgcore.errors import GeneratorError
from ntgcore.files import replacing
from ntgcore.generator import Capabilities, Counters, Generator, GeneratorPlugin, Progress
from ntgcore.proc import Tool
from ntgcore.scenario import GeneratorSpec

from .drone import Drone, drone_path, drone_version
from .rpc import DroneError, msg
from .streams import Plan, build_plan

STATS_PERIOD_S = 1.0  # drone refreshes its port counters once a second
POLL_S = 0.1
MAX_OVERRUN_S = 30.0  # a run ends at most this long after its expected end (then: failed)


def _option(spec, name: str, default):
    if spec is None:
        return default
    value = spec.get(name) if isinstance(spec, dict) else getattr(spec, name, None)
    return default if value is None else value


class Ostinato(Generator):
    """`spec` (optional; a dict or an object) may give: `capture_port` (a veth in the endpoint's
    namespace on which drone captures, saved as `drone-capture.pcap`), `rate_accuracy`
    (High|Low), `rpc_timeout` (seconds per call). Unknown attributes are ignored."""

    name = "ostinato"

    def __init__(
        self,
        spec=None,
        *,
        capture_port: str | None = None,
        rate_accuracy: str = "High",
        rpc_timeout: float = 10.0,
    ) -> None:
        super().__init__(spec)
        self.capture_port = _option(spec, "capture_port", capture_port)
        self.rate_accuracy = _option(spec, "rate_accuracy", rate_accuracy)
        self.rpc_timeout = float(_option(spec, "rpc_timeout", rpc_timeout))
        self.plan: Plan | None = None
        self.endpoint: Endpoint | None = None
        self.run_dir: Path | None = None
        self.drone: Drone | None = None
        self.capture_path: Path | None = None
        self._status = "not started"
        self._error: str | None = None
        self._raised = False
        self._stats: dict[str, dict] = {}
        self._tx_port: int | None = None
        self._stop_request = threading.Event()
        self._interrupt = False
        self._monitor: threading.Thread | None = None
        self._binary: str | None = None
        self._t_start = 0.0
        self.transmit_seconds: float | None = None  # startTransmit to stop (or end seen)

    def version(self) -> str:
        return drone_version(self._binary)

    # ---- prepare --------------------------------------------------------------------------

    def prepare(self, scenario, run_dir: Path, seed: int, endpoint: Endpoint | None = None) -> None:
        if endpoint is None:
            raise GeneratorError(
                "generator ostinato sends live through drone and cannot write a pcap by itself: "
                "the scenario needs a `testbed:` section (a live veth endpoint), or use "
                "generator: flowengine for an offline capture"
            )
        self._binary = drone_path()
        self.endpoint, self.run_dir = endpoint, Path(run_dir)
        self.plan = build_plan(scenario, seed, endpoint.pace, endpoint.duration_s)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "ostinato-streams.txt", "w") as out:
            out.write(
                f"# transmit mode {self.plan.transmit_mode}; continuous {self.plan.continuous}; "
                f"duration_s {self.plan.duration_s}; start delay {self.plan.start_delay_s}s\n"
            )
            for sp in self.plan.streams:
                out.write(f"# {sp.label}: {sp.packets} packets at {sp.pps:g} pps\n")
                out.write(text_format.MessageToString(sp.stream) + "\n")
        notes = self.run_dir / "ostinato-approximations.txt"
        notes.write_text(
            "".join(f"- {a}\n" for a in self.plan.approximations)
            or "none: every flow is sent as the scenario says\n"
        )

    # ---- run ------------------------------------------------------------------------------

    def start(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        assert self.plan is not None and self.endpoint is not None and self.run_dir, (
            "prepare() first"
        )
        ports = [self.endpoint.iface] + ([self.capture_port] if self.capture_port else [])
        self._status = "running"
        try:
            self.drone = Drone(
                self.endpoint, ports, self.run_dir, self.rate_accuracy, self.rpc_timeout
            )
            self.drone.start()
            client = self.drone.client()
            names = client.ports()
            missing = [p for p in ports if p not in names]
            if missing:
                raise GeneratorError(
                    f"drone does not offer port {missing[0]!r} in "
                    f"{self.endpoint.where}; it offers: {', '.join(sorted(names)) or 'none'} "
                    f"(is the interface there and up before drone starts?)"
                )
            self._tx_port = tx = names[self.endpoint.iface]
            cap = names.get(self.capture_port) if self.capture_port else None
            self._configure(client, tx)
            client.ack("clearStats", client.port_list(*names.values()))
            if cap is not None:
                client.ack("startCapture", client.port_list(cap))
                time.sleep(0.5)  # drone's capture thread opens its pcap handle asynchronously
            if self.plan.start_delay_s:
                time.sleep(self.plan.start_delay_s)
            # drone builds every distinct frame before it sends (about 0.13 ms each here), so
            # a stream with 2^16 varying frames needs seconds: a longer bound for this call.
            client.ack("startTransmit", client.port_list(tx), timeout=max(self.rpc_timeout, 120))
            self._t_start = time.monotonic()
        except (DroneError, GeneratorError, OSError) as exc:
            self._fail(str(exc))
            raise GeneratorError(self._error) from None
        except BaseException as exc:  # a bug or Ctrl-C: never leave drone running
            self._fail(f"{type(exc).__name__}: {exc}")
            raise
        self._monitor = threading.Thread(
            target=self._watch,
            args=(client, names, cap, on_progress),
            name="ostinato-monitor",
            daemon=True,
        )
        self._monitor.start()

    def _configure(self, client, tx: int) -> None:
        assert self.plan is not None
        port = msg.Port()
        port.port_id.id = tx
        port.transmit_mode = (
            msg.kInterleavedTransmit
            if self.plan.transmit_mode == "interleaved"
            else msg.kSequentialTransmit
        )
        client.ack("modifyPort", msg.PortConfigList(port=[port]))
        old = client.call("getStreamIdList", msg.PortId(id=tx))
        if old.stream_id:
            client.ack("deleteStream", old)
        ids = [msg.StreamId(id=s.stream.stream_id.id) for s in self.plan.streams]
        client.ack("addStream", msg.StreamIdList(port_id=msg.PortId(id=tx), stream_id=ids))
        client.ack(
            "modifyStream",
            msg.StreamConfigList(
                port_id=msg.PortId(id=tx), stream=[s.stream for s in self.plan.streams]
            ),
        )

    def _watch(self, client, names: dict[str, int], cap: int | None, on_progress) -> None:
        assert self.plan is not None and self.drone is not None and self.run_dir
        tx = names[self.endpoint.iface]  # type: ignore[union-attr]
        plan = self.plan
        t0 = self._t_start
        expected = plan.expected_seconds
        deadline = t0 + expected + MAX_OVERRUN_S
        try:
            while True:
                time.sleep(POLL_S)
                now = time.monotonic()
                if not self.drone.alive():
                    raise DroneError(
                        f"drone exited during the run ({self.drone.proc.record.status})"
                    )
                st = client.call("getStats", client.port_list(tx)).port_stats[0]
                if on_progress:
                    on_progress(Progress(now - t0, expected, st.tx_pkts))
                if self._stop_request.is_set():
                    client.ack("stopTransmit", client.port_list(tx))
                    # A continuous stream ends only when stopped: the run's stop completes it.
                    if self._interrupt or not plan.continuous:
                        self._status = "interrupted"
                    break
                if plan.continuous and now - t0 >= (plan.duration_s or 0):
                    client.ack("stopTransmit", client.port_list(tx))
                    break
                if plan.packets is not None and st.tx_pkts >= plan.packets:
                    break
                # Counters refresh once a second, so "not transmitting" is only believed after
                # drone has had time to start and to publish a fresh state.
                if not st.state.is_transmit_on and now - t0 > 2 * STATS_PERIOD_S + 0.2:
                    break
                if now > deadline:
                    client.ack("stopTransmit", client.port_list(tx))
                    raise DroneError(
                        f"drone was still sending {MAX_OVERRUN_S:g}s after the "
                        f"expected end ({expected:.3g}s); stopped it"
                    )
            self.transmit_seconds = time.monotonic() - t0
            time.sleep(STATS_PERIOD_S + 0.2)  # one more refresh so the counters are final
            self._stats = self._read_stats(client, names)
            if cap is not None:
                client.ack("stopCapture", client.port_list(cap))
                self.capture_path = self.run_dir / "drone-capture.pcap"
                self.capture_path.write_bytes(
                    client.call(
                        "getCaptureBuffer", msg.PortId(id=cap), timeout=max(self.rpc_timeout, 60)
                    )
                )
            client.close()
            self.drone.stop()
            if self._status == "running":
                self._status = "completed"
        except (DroneError, OSError) as exc:
            reason = str(exc)
            if self.drone:
                self.drone.proc.wait(2)  # a dying drone resets the connection before it is reaped
            if self.drone and not self.drone.alive():
                reason = (
                    f"drone exited during the run ({self.drone.proc.record.status}); "
                    f"last output: {self.drone.log_tail() or '(none)'}; cause seen: {exc}"
                )
            self._fail(reason)
        except Exception as exc:  # a bug here must not leave drone running
            self._fail(f"{type(exc).__name__}: {exc}")
        finally:
            client.close()
            self._write_stats()

    def _write_stats(self) -> None:
        """ostinato-stats.json, whole or not at all; a full disk fails the generator (naming
        the file) instead of ending the monitor thread with a traceback."""
        assert self.run_dir is not None  # prepared
        path = self.run_dir / "ostinato-stats.json"
        try:
            with replacing(path) as tmp:
                tmp.write_text(json.dumps(self._stats, indent=2))
        except OSError as exc:
            if self._status != "failed":
                self._fail(f"cannot write {path}: {exc.strerror or exc}")

    def _read_stats(self, client, names: dict[str, int]) -> dict[str, dict]:
        reply = client.call("getStats", client.port_list(*names.values()))
        by_id = {v: k for k, v in names.items()}
        keys = ("tx_pkts", "tx_bytes", "rx_pkts", "rx_bytes", "rx_drops", "rx_errors")
        return {by_id[p.port_id.id]: {k: getattr(p, k) for k in keys} for p in reply.port_stats}

    def _fail(self, reason: str) -> None:
        self._status = "failed"
        self._error = f"ostinato: {reason}"
        if self.drone is not None:
            self.drone.stop()
            if not self.drone.proc.record.note:
                self.drone.proc.record.note = reason

    def wait(self, timeout: float | None = None) -> bool:
        """True once finished; raises GeneratorError (once) when drone failed."""
        if self._monitor is not None:
            self._monitor.join(timeout)
            if self._monitor.is_alive():
                return False
        if self._status == "failed" and not self._raised:
            self._raised = True
            raise GeneratorError(self._error or "ostinato failed")
        return True

    def stop(self, interrupt: bool = False) -> None:
        self._interrupt = interrupt
        self._stop_request.set()
        if self._monitor is not None:
            self._monitor.join(self.rpc_timeout + STATS_PERIOD_S + 70)
        if self.drone is not None and self.drone.alive():
            self.drone.stop()

    # ---- results --------------------------------------------------------------------------

    def port_stats(self) -> dict[str, dict]:
        """{port name: {tx_pkts, tx_bytes, rx_pkts, rx_bytes, rx_drops, rx_errors}} as drone
        reported them at the end (bytes without the 4-byte FCS, as on the veth)."""
        return dict(self._stats)

    def counters(self) -> Counters:
        if self.endpoint is None or self.endpoint.iface not in self._stats:
            return Counters()
        s = self._stats[self.endpoint.iface]
        return Counters(s["tx_pkts"], s["tx_pkts"], 0, s["tx_bytes"], s["tx_bytes"], 0)

    def status(self) -> str:
        return self._status

    def error(self) -> str | None:
        return self._error

    def commands(self):
        return [self.drone.proc.record] if self.drone else []


__all__ = ["Ostinato", "GeneratorError", "DroneError"]


class OstinatoSpec(GeneratorSpec):
    """Ostinato's drone in a live run."""

    name: Literal["ostinato"] = "ostinato"
    capture_port: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]{1,15}$",
        description="ostinato: also capture with drone on this interface of its namespace "
        "(startCapture/getCaptureBuffer), saved as drone-capture.pcap.",
    )
    rate_accuracy: Literal["High", "Low"] | None = Field(
        None, description="ostinato: drone's RateAccuracy setting (default High)."
    )


PLUGIN = GeneratorPlugin(
    name="ostinato",
    options=OstinatoSpec,
    adapter=Ostinato,
    tools=(Tool("drone", "ostinato"),),
    capabilities=Capabilities(
        offline=False,
        live=True,
        port_stats=True,
        counters=("packets_attempted", "packets_sent", "bytes_attempted", "bytes_sent"),
    ),
    summary="Ostinato's drone through our own RPC client (generators/ostinato/README.md)",
)
