"""`testbed learn`: a scenario of two-way sessions learned from a capture or from flow records.

    from analysis.learn import LearnOptions, learn_capture
    result = learn_capture(["trace.pcap"], LearnOptions(rate_scale=2.0))
    result.scenario      # the scenario as a dict (`sessions:` entries, design section B)
    result.yaml_text     # the same as YAML, with a header saying what it was learned from
    result.report        # what was read and fitted, warnings
    result.baseline()    # the Harpoon-style baseline fitted from the same sessions

Inputs are recognised by their content: pcap/pcapng (read in chunks with the native reader,
bounded memory: `memory_limit` as `testbed analyze`), nfdump files (nfcapd/nfpcapd, read with
`nfdump`), Parquet flow tables (`testbed export --parquet` flows, or a run folder's
tables/flows.parquet; a folder holding them). Several inputs of one kind are one trace, in the
order given. Sessions: analysis.learn.sessions (packets), analysis.learn.records (records); the
fit: analysis.learn.fit.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ntgcore.errors import BadInput, NtgError
from ntgcore.runfolder import testbed_version
from ntgcore.scenario import ScenarioError, parse_scenario

from ..capture import BYTES_PER_PACKET, CaptureError, address_text, iter_capture
from .fit import TIERS, Extras, FitOptions, fit_sessions, map_addresses, offset_text
from .records import (
    NFDUMP_MAGIC,
    parquet_files,
    read_parquet,
    records_of_table,
    sessions_from_records,
)
from .sessions import PacketSessions, SessionTable

# What a packet of a chunk costs while learn works on it, beyond its columns: the sorted copies
# and masks of PacketSessions.add, measured with tracemalloc: 240 bytes a packet at the peak on
# 2^19-packet chunks of bench_learn's capture (its new sessions' columns included).
WORK_BYTES_PER_PACKET = 256
DEFAULT_MEMORY_LIMIT = 256 * 2**20
MIN_CHUNK, MAX_CHUNK = 1024, 1 << 19
PROGRESS_EVERY_S = 2.0
PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
}
MAX_CLASSES = 1000
MAX_TIERS = 64
MAX_SCALE = 1e6


class LearnError(BadInput):
    """Input learn cannot use; the message says which and what to do."""


@dataclass
class LearnOptions:
    duration_ns: int | None = None  # the learned traffic's length (default: the input's)
    rate_scale: float = 1.0  # sessions per second times this
    hosts_scale: float = 1.0  # hosts per class times this (< 1 keeps the busiest)
    classes: int = 12
    seed: int = 1
    name: str | None = None
    baseline: bool = False
    drop_jumps: bool = False  # replace clock jumps by the median gap (default: kept as pauses)
    tiers: int = TIERS  # a TCP class's sessions of one close in up to this many (by duration)
    memory_limit: int | None = None
    progress: Callable[[str], None] | None = None
    hash_inputs: bool = True
    validate: bool = True  # check the YAML with ntgcore.scenario.parse_scenario (a bug if not)
    # an nfdump file's records as a table of analysis.flowmeter.records.RECORD_SCHEMA's columns:
    # nfdump is a program and the analysis starts none, so the testbed gives it
    # (testbed.meters.collector.nfdump.read_file)
    read_nfdump: Callable[[Path], Any] | None = None

    def check(self) -> None:
        if not 1 <= self.tiers <= MAX_TIERS:
            raise LearnError(f"--tiers must be 1 to {MAX_TIERS} (got {self.tiers})")
        if self.classes < 1 or self.classes > MAX_CLASSES:
            raise LearnError(f"--classes must be 1 to {MAX_CLASSES} (got {self.classes})")
        for what, v in (("--rate-scale", self.rate_scale), ("--hosts-scale", self.hosts_scale)):
            if not (np.isfinite(v) and 0 < v <= MAX_SCALE):
                raise LearnError(f"{what} must be a number above 0 and at most {MAX_SCALE:g}")
        if self.duration_ns is not None and not 0 < self.duration_ns < 2**32 * 10**9:
            raise LearnError("--duration must be above 0 and below 2^32 s")
        if self.memory_limit is not None and self.memory_limit <= 0:
            raise LearnError("--memory-limit must be a positive number of bytes")


@dataclass
class LearnResult:
    scenario: dict[str, Any]
    yaml_text: str
    report: dict[str, Any]
    sessions: SessionTable
    extras: Extras
    options: LearnOptions
    inputs: list[dict[str, Any]] = field(default_factory=list)

    def address_map(self) -> dict[str, str]:
        """Each real address (text) -> its synthetic one, for comparing talkers (in memory only:
        it holds the real addresses, which the scenario never does)."""
        t = self.sessions
        m = map_addresses(t)
        out: dict[str, str] = {}
        for hi, lo, off in (
            (t.client_hi, t.client_lo, m.client_offset),
            (t.server_hi, t.server_lo, m.server_offset),
        ):
            real = address_text(t.ip_version, hi, lo)
            for r, v, o in zip(real, t.ip_version.tolist(), off.tolist()):
                out.setdefault(r, offset_text(v, o))
        return out

    def baseline(self) -> LearnResult:
        """The Harpoon-style baseline fitted from the same sessions (no second read)."""
        return _result(
            self.sessions,
            self.extras,
            replace(self.options, baseline=True),
            self.inputs,
            self.report.get("read", {}),
        )


def input_kind(path: Path) -> str:
    """`pcap`, `nfdump` or `parquet`, from the content; LearnError otherwise."""
    if path.is_dir():
        if parquet_files(path):
            return "parquet"
        raise LearnError(
            f"{path}: a folder without Parquet flow tables; give a capture, an nfdump file or a "
            "flow table (or a folder of them: an export, a run folder)"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise LearnError(f"{path}: no such file") from None
    except OSError as exc:
        raise LearnError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if head in PCAP_MAGICS:
        return "pcap"
    if head[:2] == NFDUMP_MAGIC:
        return "nfdump"
    if head == b"PAR1":
        return "parquet"
    shown = " ".join(f"{b:02x}" for b in head) or "none: the file is empty"
    raise LearnError(
        f"{path}: not a pcap/pcapng capture, an nfdump file or a Parquet flow table (first "
        f"bytes {shown})"
    )


def _sha256(path: Path, stop: threading.Event) -> str | None:
    """The SHA-256 of PATH (a folder: of its flow tables in order); None for what is not a
    regular file (a pipe, a device: the reading refuses those) or when STOP is set."""
    h = hashlib.sha256()
    files = [path] if not path.is_dir() else parquet_files(path)
    for p in files:
        if not p.is_file():
            return None
        with open(p, "rb") as f:
            while block := f.read(1 << 20):
                if stop.is_set():
                    return None
                h.update(block)
    return h.hexdigest()


def chunk_size(memory_limit: int | None) -> int:
    limit = DEFAULT_MEMORY_LIMIT if memory_limit is None else int(memory_limit)
    return max(MIN_CHUNK, min(MAX_CHUNK, limit // (BYTES_PER_PACKET + WORK_BYTES_PER_PACKET)))


def _read_packets(paths: list[Path], opts: LearnOptions) -> tuple[PacketSessions, dict[str, Any]]:
    acc = PacketSessions()
    size = chunk_size(opts.memory_limit)
    total = sum(p.stat().st_size for p in paths)
    done, shown = 0, time.monotonic()
    problems = []
    for path in paths:
        chunks = iter_capture(path, size, reuse=True)
        while (cap := next(chunks, None)) is not None:
            acc.add(cap)
            if cap.problem is not None:
                problems.append(
                    {
                        "file": path.name,
                        "offset": cap.problem.offset,
                        "message": cap.problem.message,
                        "packets_read": cap.problem.packets_read,
                    }
                )
            if opts.progress and time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                at = done + (cap.end_offset or 0)
                opts.progress(
                    f"read {at / 1e6:,.0f} of {total / 1e6:,.0f} MB ({at / max(total, 1):.0%}), "
                    f"{acc.packets:,} packets, {len(acc):,} sessions"
                )
            del cap
        done += path.stat().st_size
    read = {
        "packets": acc.packets,
        "packets_used": acc.used,
        "skipped": dict(acc.skipped),
        "chunk_packets": size,
        "damaged": problems,
    }
    return acc, read


def _read_records(
    paths: list[Path], kinds: list[str], options: LearnOptions
) -> tuple[SessionTable, dict[str, Any]]:
    frames = []
    for path, kind in zip(paths, kinds):
        if kind == "nfdump":
            if options.read_nfdump is None:
                raise LearnError(
                    f"{path}: an nfdump file; reading it needs nfdump (LearnOptions.read_nfdump: "
                    "`testbed learn` gives it)"
                )
            frames.append(records_of_table(options.read_nfdump(path)))
        else:
            for f in parquet_files(path):
                frames.append(read_parquet(f))
    frames = [f for f in frames if len(f)]
    records = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    table, skipped = sessions_from_records(records)
    return table, {"records": len(records), "records_skipped": skipped}


def _name(opts: LearnOptions, paths: Sequence[Path]) -> str:
    if opts.name:
        return opts.name
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", paths[0].name.split(".")[0]).strip("-.") or "trace"
    return ("learned-" + stem)[:64]


def _read(
    paths: list[Path], kinds: list[str], options: LearnOptions
) -> tuple[SessionTable, Extras, dict[str, Any]]:
    try:
        if kinds[0] == "pcap":
            acc, read = _read_packets(paths, options)
            return acc.table(), Extras(acc.wire_hist, acc.datagrams()), read
        table, read = _read_records(paths, kinds, options)
        return table, Extras(), read
    except CaptureError as exc:
        raise LearnError(str(exc)) from None


def learn_capture(inputs: Sequence[str | os.PathLike[str]], options: LearnOptions) -> LearnResult:
    """Learn a scenario from INPUTS (captures, or nfdump files / Parquet flow tables)."""
    options.check()
    paths = [Path(p) for p in inputs]
    if not paths:
        raise LearnError("give at least one capture or flow-record file")
    kinds = [input_kind(p) for p in paths]
    if "pcap" in kinds and set(kinds) != {"pcap"}:
        raise LearnError(
            "give either captures or flow records (nfdump, Parquet), not both: "
            + ", ".join(f"{p.name} is {k}" for p, k in zip(paths, kinds))
        )
    described: list[dict[str, Any]] = [
        {"file": p.name, "kind": k, "bytes": p.stat().st_size if p.is_file() else None}
        for p, k in zip(paths, kinds)
    ]
    # the inputs' hashes in a thread beside the reading (hashlib lets go of the GIL)
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        hashes = [pool.submit(_sha256, p, stop) for p in paths] if options.hash_inputs else []
        try:
            table, extras, read = _read(paths, kinds, options)
        except BaseException:  # an error or Ctrl-C: the hashing stops too
            stop.set()
            raise
        for d, h in zip(described, hashes):
            d["sha256"] = h.result()
    read["sessions"] = len(table)
    if len(table) == 0:
        what = (
            f"{read['packets']:,} packets (not IP: {read['skipped']['not IP']:,}, not TCP/UDP: "
            f"{read['skipped']['not TCP/UDP']:,}, later fragments: "
            f"{read['skipped']['later fragment']:,})"
            if "packets" in read
            else f"{read['records']:,} records ({read['records_skipped']:,} not TCP/UDP)"
        )
        names = ", ".join(p.name for p in paths)
        raise LearnError(
            f"{names}: no TCP or UDP session in {what}: nothing to learn from; give a capture "
            "(or flow records) of TCP/UDP traffic"
        )
    return _result(table, extras, options, described, read)


def _result(
    table: SessionTable,
    extras: Extras,
    options: LearnOptions,
    described: list[dict[str, Any]],
    read: dict[str, Any],
) -> LearnResult:
    fit = FitOptions(
        duration_ns=options.duration_ns,
        rate_scale=options.rate_scale,
        hosts_scale=options.hosts_scale,
        classes=options.classes,
        baseline=options.baseline,
        drop_jumps=options.drop_jumps,
        tiers=options.tiers,
    )
    entries, fitted = fit_sessions(table, extras, fit)
    names = [Path(d["file"]) for d in described] or [Path("trace")]
    name = _name(options, names)
    if options.baseline and not options.name:
        name = (name + "-baseline")[:64]
    scenario: dict[str, Any] = {
        "version": 1,
        "name": name,
        "description": (
            f"{'Harpoon-style baseline' if options.baseline else 'Learned'} from "
            f"{len(table):,} sessions of " + ", ".join(d["file"] for d in described)
        ),
        "seed": int(options.seed),
        "sessions": entries,
    }
    report = {
        "inputs": described,
        "read": read,
        "mode": "baseline" if options.baseline else "classes",
        **fitted,
    }
    for d in read.get("damaged", []):
        report["warnings"].append(
            f"{d['file']}: damaged at byte offset {d['offset']:,} ({d['message']}): learned from "
            f"the {d['packets_read']:,} packets before it"
        )
    text = scenario_yaml(scenario, described, report)
    if options.validate:
        try:
            parse_scenario(text, f"{name}.yaml")
        except ScenarioError as exc:  # a bug of ours: say so with what the check said
            raise NtgError(
                "the learned scenario does not validate (a bug of testbed learn; please report "
                "it with the input): " + "; ".join(exc.problems[:5])
            ) from None
    return LearnResult(
        scenario=scenario,
        yaml_text=text,
        report=report,
        sessions=table,
        extras=extras,
        options=options,
        inputs=described,
    )


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's safe dumper (ten times faster than the Python one), without anchors and
    aliases: each value is written where it is used."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def scenario_yaml(scenario: dict[str, Any], described: list[dict[str, Any]], report: dict) -> str:
    """SCENARIO as YAML, after a comment naming the inputs (names and hashes, no address)."""
    head = [
        f"# Learned by `testbed learn` (ntg-testbed {testbed_version()}) from:",
        *(
            f"#   {d['file']} ({d['kind']}"
            + (f", {d['bytes']:,} bytes" if d.get("bytes") is not None else "")
            + (f", sha256 {d['sha256']}" if d.get("sha256") else "")
            + ")"
            for d in described
        ),
        f"# {report['sessions']:,} sessions; mode: {report['mode']}. Addresses are mapped into "
        "198.18.0.0/15 and 2001:db8::/32:",
        "# no address of the input is in this file.",
    ]
    head += [f"# warning: {w}" for w in report.get("warnings", [])]
    body = yaml.dump(scenario, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(head) + "\n" + body


__all__ = [
    "LearnError",
    "LearnOptions",
    "LearnResult",
    "learn_capture",
    "input_kind",
    "scenario_yaml",
    "chunk_size",
    "MAX_CLASSES",
    "MAX_TIERS",
    "MAX_SCALE",
]
