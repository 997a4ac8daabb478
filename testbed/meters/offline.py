"""A meter on a capture file, in its own pcap-reading mode: `run_on_pcap(meter, spec, pcap,
folder) -> MeterRun`.

Each run gets a fresh network namespace of its own (testbed.endpoints.netns.topology, loopback
only, marked), in which the collector (nfcapd on 127.0.0.1 and the export capture) and the meter
run; the run is marked like any run (testbed.cleanup.RunMark, back end `netns`), so a `kill -9`
leaves nothing `testbed cleanup` does not remove. The runner waits until the meter exits at the
end of the file (each meter's flags make it flush its flows there), stops the collector, reads
the records back and writes the folder's files (testbed.meters.base). Then, in this order:

- the meter ended with an error or a signal: MeterError, with what was collected kept;
- export packets went to a port where no collector listens: MeterError naming both ports;
- the capture had IP packets and the meter exported (or wrote) no record: MeterError.
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import time
from pathlib import Path

from analysis.capture import CaptureError, read_capture
from ntgcore.errors import BadInput
from ntgcore.proc import Process, watch_spawns

from ..cleanup import RunMark
from ..endpoints.netns.topology import parse_topology
from .base import EXPORT_FILE, Meter, MeterError, MeterRun, MeterSpec, tail, write_outputs
from .collector import Collector

RUN_TIMEOUT_S = 600.0


def _ip_packets(pcap: Path) -> int:
    try:
        cap = read_capture(pcap)
    except CaptureError:
        return 0
    return int((cap.ip_version > 0).sum())


def namespace_prefix(folder: Path) -> str:
    """The start of the names of the namespaces of runs into FOLDER (`ntgm` and a digest of
    its path, then 4 random hex digits each run): what a check for leftovers looks for."""
    return "ntgm" + hashlib.sha1(str(Path(folder).resolve()).encode()).hexdigest()[:8]


def run_on_pcap(
    meter: Meter,
    spec: MeterSpec,
    pcap: Path,
    folder: Path,
    *,
    export_port: int | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> MeterRun:
    """Run METER with SPEC on PCAP; its files go into FOLDER (made if missing). `export_port`:
    make the meter export to another port than the collector's (the fault `wrong port`)."""
    if not isinstance(spec, meter.spec):
        raise BadInput(
            f"{meter.name} takes {meter.spec.__name__} options, not {type(spec).__name__}"
        )
    pcap = Path(pcap).resolve()
    if not pcap.is_file():
        raise BadInput(f"{pcap}: no such capture file; give a pcap or pcapng file")
    meter.check_installed()
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    topo = parse_topology(
        {
            "name": f"{namespace_prefix(folder)}{secrets.token_hex(2)}",
            "namespaces": ["m"],
            "mtu": None,
        },
        "the offline meter's namespace",
    )
    mark = RunMark(folder, "netns", [topo.netns("m")]).write()
    try:
        with watch_spawns(mark.child):
            topo.apply()
            try:
                return _run(meter, spec, pcap, folder, topo, export_port, timeout_s)
            except BaseException:
                tidy(folder)
                raise
            finally:
                topo.remove()
    finally:
        mark.remove()


def tidy(folder: Path) -> None:
    """After a run that failed (a full disk, a meter that died): the empty files its tools left
    (a capture with no packet, nfcapd's current file) go; what holds something is kept."""
    for path in sorted(folder.rglob("*"), reverse=True):
        try:
            if path.is_file() and (path.stat().st_size == 0 or path.name.startswith(".")):
                path.unlink()
        except OSError:
            continue


def _run(
    meter: Meter,
    spec: MeterSpec,
    pcap: Path,
    folder: Path,
    topo,
    export_port: int | None,
    timeout_s: float,
) -> MeterRun:
    def inside(*argv: str) -> list[str]:
        return topo.exec_argv("m", *argv)

    started = time.monotonic()
    meter.clear(folder)
    collector = Collector(inside, spec.collector_port, folder).start() if meter.exports else None
    log_path = folder / f"{meter.name}.log"
    target = ("127.0.0.1", export_port or spec.collector_port)
    with open(log_path, "wb") as log:
        proc = Process(
            meter.name,
            inside(*meter.pcap_argv(spec, pcap, target, folder)),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
        try:
            proc.start()
            code = proc.wait(timeout_s)
            if code is None:
                meter.finish(proc, folder, inside, grace=5)
                proc.record.note = f"did not finish {pcap.name} within {timeout_s:g}s; stopped"
        finally:
            proc.stop(grace=2)  # nothing outlives the run, whatever raised
            collector_stats = collector.stop() if collector is not None else {}
    output = log_path.read_text(errors="replace")
    records = collector.records() if collector is not None else meter.own_records(folder)
    export = collector.export if collector is not None else None
    counters = {
        "meter": meter.name,
        "status": proc.record.status,
        "own": meter.counters(folder, output),
        **({"collector": collector_stats} if collector is not None else {}),
        "collected": records.num_rows,
    }
    write_outputs(folder, records, counters)
    run = MeterRun(
        meter=meter.name,
        folder=folder,
        records=records,
        counters=counters,
        stderr=output,
        status=proc.record.status,
        exported=export.records if export is not None else None,
        export_pcap=folder / EXPORT_FILE if collector is not None else None,
        collector=collector_stats,
        seconds=time.monotonic() - started,
    )
    _judge(meter, run, pcap, proc, export, spec, export_port)
    return run


def _judge(meter, run: MeterRun, pcap: Path, proc: Process, export, spec, export_port) -> None:
    kept = f"what it exported until then is kept: {run.folder / 'records.parquet'} ({run.collected} records)"
    if proc.record.note:
        raise MeterError(f"{meter.name}: {proc.record.note}; {kept}")
    if proc.record.exit_code != 0:
        raise MeterError(
            f"{meter.name} ended with {proc.record.status} while reading {pcap}: "
            f"{tail(run.stderr)}; {kept}; its output: {run.folder / (meter.name + '.log')}"
        )
    if export is not None and export.other_ports and not export.packets:
        ports = ", ".join(str(p) for p in sorted(export.other_ports))
        raise MeterError(
            f"{meter.name} sent {sum(export.other_ports.values())} export packet(s) to port "
            f"{ports}, where no collector listens (the collector is on {spec.collector_port}): "
            "export to the collector's port (`collector_port`)"
        )
    if run.collected == 0 and (export is None or export.packets == 0):
        n = _ip_packets(pcap)
        if n:
            raise MeterError(
                f"{meter.name} exported nothing from {pcap} ({n} IP packets); "
                f"its output: {tail(run.stderr)}"
            )


__all__ = ["namespace_prefix", "run_on_pcap"]
