"""`testbed match-sweep`: seed 000's grid (structures x hashes x sizes x feeds x repeats) run with
`flowengine match`, one process a cell; the rows go to Parquet as they come (an interrupted sweep
keeps what it measured, and `--resume` runs only the cells it lacks) and analysis/matchsweep.py
draws Figs. 2-5 and Table 1 from them.

Before anything runs every (structure, size, feed) is checked by the engine itself with
`--memory 1` (it then refuses and prints what the table and the feed need), and every structure
reads one pass of every pcap feed on a tiny table (a pcap with IPv6 packets for `linear16`, or a
damaged one, is refused there); the flows a structure
adds later (chain past a line's first, tree) are added from its `bytes_per_added_flow`. A cell
that would need more than 80 % of the available memory refuses the whole sweep (exit 2).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

from analysis.matchsweep import FIGURES, ROWS_NAME, load_rows, rows_table
from ntgcore.errors import BadInput, NtgError
from ntgcore.files import replacing
from ntgcore.native_tools import executable
from ntgcore.proc import Interrupted, Process

DEFAULT_STRUCTS = ["chain", "tree"]
DEFAULT_HASHES = ["coralreef", "lookup3", "murmur3_32"]
DEFAULT_FEEDS = ["det", "uniform:1000000"]
CELL_TIMEOUT_S = 120.0
MAX_CELLS = 100_000  # cells of one sweep (each a process; rows.parquet is rewritten after each)
MAX_PACKETS = 2**63 - 1  # the engine counts in 64 bits
MAX_SIZE_LOG2 = 63  # --sizes up to 2^63 (the engine's own memory check refuses what does not fit)
REQUEST_NAME = "request.json"  # what the sweep in a folder was asked for: `--resume` must match it
_SAME = ("structs", "hashes", "sizes", "feeds", "packets", "repeats")
_NEED = re.compile(r"([0-9.]+) GiB in all")


@dataclass
class SweepRequest:
    structs: list[str] = field(default_factory=lambda: list(DEFAULT_STRUCTS))
    hashes: list[str] = field(default_factory=lambda: list(DEFAULT_HASHES))
    sizes: list[int] = field(default_factory=lambda: [2**k for k in range(14, 25, 2)])
    feeds: list[str] = field(default_factory=lambda: list(DEFAULT_FEEDS))
    packets: int = 1_000_000
    repeats: int = 1
    cell_timeout_s: float = CELL_TIMEOUT_S


def parse_sizes(text: str) -> list[int]:
    """ "2^14..2^20,1000003" -> every power of two from 2^14 to 2^20, and 1000003."""
    out: list[int] = []
    for t in (s.strip() for s in text.split(",") if s.strip()):
        if ".." in t:
            a, b = (_size(x) for x in t.split("..", 1))
            if a & (a - 1) or b & (b - 1) or a > b:
                raise BadInput(f"--sizes {t}: a range goes from a power of two to a larger one")
            out += [2**k for k in range(a.bit_length() - 1, b.bit_length())]
        else:
            out.append(_size(t))
    return sorted(set(out))


def _size(t: str) -> int:
    power = t.startswith("2^")
    digits = t[2:] if power else t
    if (
        digits.isascii()
        and digits.isdigit()
        and (len(digits) > 19 or power and int(digits) > MAX_SIZE_LOG2)
    ):
        # before 2 ** K or int() of it: 2^1000000000000 would not end, 100,001 digits not parse
        raise BadInput(
            f"--sizes {t[:40]}{'...' if len(t) > 40 else ''}: too large: at most 2^{MAX_SIZE_LOG2}"
        )
    try:
        n = 2 ** int(digits) if power else int(float(t)) if "e" in t else int(t)
    except (ValueError, OverflowError):
        raise BadInput(f"--sizes {t[:40]!r}: give N or 2^K") from None
    if n < 1:
        raise BadInput(f"--sizes {t}: a size is at least 1")
    if n > 2**MAX_SIZE_LOG2:
        raise BadInput(f"--sizes {t}: too large: at most 2^{MAX_SIZE_LOG2}")
    return n


def feed_argv(feed: str) -> list[str]:
    """`pcap:FILE` -> --feed pcap --pcap FILE; anything else is passed as --feed."""
    if feed.startswith("pcap:"):
        return ["--feed", "pcap", "--pcap", feed[5:]]
    return ["--feed", feed]


def cell_argv(
    binary: Path, struct: str, hash_: str, size: int, feed: str, packets: int
) -> list[str]:
    return [
        str(binary),
        "match",
        "--struct",
        struct,
        "--hash",
        hash_,
        "--size",
        str(size),
        *feed_argv(feed),
        "--packets",
        str(packets),
    ]


def _feed_flows(feed: str, packets: int) -> int:
    parts = feed.split(":")
    if parts[0] == "det":
        return 1
    if len(parts) > 1 and parts[1].isdigit():
        return min(int(parts[1]), packets)
    return packets


def _run(argv: list[str], timeout: float | None = None) -> tuple[int, str]:
    proc = Process(
        f"flowengine {argv[1]}", argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ).start()
    done = proc.communicate(timeout)
    if done is None:
        return -1, "timeout"
    return proc.wait(), done[1].decode(errors="replace").strip()


def check_request(
    req: SweepRequest, binary: Path, available: int | None = None
) -> dict[str, float]:
    """BadInput naming what is wrong (the engine's own words for names and feeds; the GiB a size
    needs) before anything runs; else the bytes a flow adds, per structure."""
    for what, values in (
        ("--structs", req.structs),
        ("--hashes", req.hashes),
        ("--sizes", req.sizes),
        ("--feeds", req.feeds),
    ):
        if not values:
            raise BadInput(f"{what}: nothing to sweep")
    if req.packets < 1 or req.repeats < 1:
        raise BadInput("--packets and --repeats must be >= 1")
    if req.packets > MAX_PACKETS:
        raise BadInput(f"--packets {req.packets:,}: too large: at most {MAX_PACKETS:,}")
    cells = req.repeats * len(req.feeds) * len(req.sizes) * len(req.structs) * len(req.hashes)
    if cells > MAX_CELLS:  # before the list of cells is made
        raise BadInput(
            f"the sweep has {cells:,} cells (repeats x feeds x sizes x structs x hashes); at most "
            f"{MAX_CELLS:,}: lower --repeats or sweep fewer sizes"
        )
    if not 0 < req.cell_timeout_s < float("inf"):
        raise BadInput(f"--cell-timeout {req.cell_timeout_s}: must be a number of seconds > 0")
    available = psutil.virtual_memory().available if available is None else available
    per_flow: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for struct in req.structs:  # names checked by the engine itself, on a tiny table
            for h in req.hashes:
                doc_path = Path(tmp) / "probe.json"
                code, err = _run(
                    cell_argv(binary, struct, h, 1024, "det", 1) + ["--json", str(doc_path)]
                )
                if code != 0:
                    raise BadInput(err.removeprefix("flowengine match: "))
            per_flow[struct] = float(json.loads(doc_path.read_text())["bytes_per_added_flow"])
            for feed in (f for f in req.feeds if f.startswith("pcap:")):
                # one pass of the pcap on a tiny table: the engine refuses what a cell would (IPv6
                # packets for a 16-byte-key structure, a damaged pcap) before the sweep starts
                code, err = _run(
                    [
                        str(binary),
                        "match",
                        "--struct",
                        struct,
                        "--hash",
                        req.hashes[0],
                        "--size",
                        "1024",
                        *feed_argv(feed),
                    ]
                )
                if code != 0:
                    raise BadInput(
                        f"--feeds {feed} with --structs {struct}: "
                        + err.removeprefix("flowengine match: ").splitlines()[0]
                    )
    for struct in req.structs:
        for size in req.sizes:
            for feed in req.feeds:
                code, err = _run(
                    cell_argv(binary, struct, req.hashes[0], size, feed, req.packets)
                    + ["--memory", "1"]
                )
                m = _NEED.search(err)
                if m is None:
                    raise BadInput(
                        err.removeprefix("flowengine match: ") or f"--feeds {feed}: refused"
                    )
                need = float(m.group(1)) * 2**30 + per_flow[struct] * _feed_flows(feed, req.packets)
                if need > 0.8 * available:
                    raise BadInput(
                        f"--sizes {size}: the {struct} table with feed {feed} needs about "
                        f"{need / 2**30:.2f} GiB and {available / 2**30:.2f} GiB are available "
                        f"(at most 80 % is used); lower --sizes or --packets"
                    )
    return per_flow


def _cell(row: dict[str, Any]) -> tuple:
    return int(row["repeat"]), row["feed"], int(row["size"]), row["struct"], row["hash"]


def resumed_rows(req: SweepRequest, out: Path) -> list[dict[str, Any]]:
    """The rows an earlier sweep of the same request left in OUT (BadInput when there are none,
    or when it was asked for something else)."""
    if not (out / ROWS_NAME).is_file() or not (out / REQUEST_NAME).is_file():
        raise BadInput(
            f"--resume: {out} has no {ROWS_NAME} and {REQUEST_NAME} of an earlier sweep to go on "
            "from; run without --resume"
        )
    try:
        asked = json.loads((out / REQUEST_NAME).read_text())
        rows = load_rows(out).to_dict("records")
    except (OSError, ValueError) as exc:
        raise BadInput(f"--resume: {out} cannot be read ({exc}); run without --resume") from None
    for key in _SAME:
        if asked.get(key) != getattr(req, key):
            raise BadInput(
                f"--resume: {out} was swept with --{key} {asked.get(key)}, "
                f"not {getattr(req, key)}: give the same request, or another --out"
            )
    return rows


def run_sweep(
    req: SweepRequest,
    out: Path,
    progress: Callable[[str], None] | None = None,
    resume: bool = False,
    replace: bool = False,
) -> pd.DataFrame:
    """Every cell of REQ (checked first), rows.parquet rewritten after each (atomically). A cell
    that runs past the timeout is kept as a row with `timed_out` and no rate. RESUME: keep the
    rows an interrupted sweep of the same request left in OUT and run only the other cells.
    REPLACE: drop the sweep in OUT first. OUT holding a sweep without either is refused."""
    if (
        not resume
        and not replace
        and ((out / ROWS_NAME).is_file() or (out / REQUEST_NAME).is_file())
    ):
        raise BadInput(
            f"{out} holds a sweep already ({ROWS_NAME}, {REQUEST_NAME}): use --resume to go on "
            "or --replace to start over (or choose another --out)"
        )
    binary = executable("flowengine")
    check_request(req, binary)
    rows: list[dict[str, Any]] = resumed_rows(req, out) if resume else []
    out.mkdir(parents=True, exist_ok=True)
    if replace:  # nothing of the old sweep stays to be taken for the new one's
        for name in (ROWS_NAME, "metrics.json", "report.md", *FIGURES.values()):
            (out / name).unlink(missing_ok=True)
    with replacing(out / REQUEST_NAME) as tmp:
        tmp.write_text(json.dumps({k: getattr(req, k) for k in _SAME}, indent=1) + "\n")
    done = {_cell(r) for r in rows}
    cells = [
        (r, f, s, st, h)
        for r in range(req.repeats)
        for f in req.feeds
        for s in req.sizes
        for st in req.structs
        for h in req.hashes
    ]
    if progress and rows:
        progress(f"resuming: {len(done)} of {len(cells)} cells kept from {out / ROWS_NAME}")
    t0 = time.monotonic()
    doc_path = out / ".cell.json"
    try:
        for i, (rep, feed, size, struct, h) in enumerate(cells):
            if (rep, feed, size, struct, h) in done:
                continue
            code, err = _run(
                cell_argv(binary, struct, h, size, feed, req.packets) + ["--json", str(doc_path)],
                timeout=req.cell_timeout_s,
            )
            base = {"struct": struct, "hash": h, "size": size, "feed": feed, "repeat": rep}
            if code == -1:
                rows.append({**base, "timed_out": True})
            elif code != 0:
                raise NtgError(
                    f"flowengine match {struct} {h} {size} {feed} failed (exit {code}): {err}"
                )
            else:
                doc = json.loads(doc_path.read_text())
                doc_path.unlink()
                rows.append(
                    {
                        **base,
                        "timed_out": False,
                        **{
                            k: doc[k]
                            for k in (
                                "mpps",
                                "p_l1",
                                "probe_mean",
                                "probe_max",
                                "occupancy",
                                "used_lines",
                                "flows_end",
                                "bytes_per_flow",
                                "memory_bytes",
                                "inserts_per_s",
                                "expiries_per_s",
                                "packets",
                                "seconds",
                                "probe_hist",
                            )
                        },
                        "pcap": (doc.get("pcap") or {}).get("path"),
                    }
                )
            write_rows(rows, out)
            if progress:
                r = rows[-1]
                rate = (
                    "timed out"
                    if r["timed_out"]
                    else f"{r['mpps']:.2f} Mpps, P(L=1) {r['p_l1']:.3f}"
                )
                progress(
                    f"[{i + 1}/{len(cells)}, {time.monotonic() - t0:.0f} s] {struct} {h} "
                    f"size {size} {feed} repeat {rep + 1}: {rate}"
                )
    except Interrupted:  # the rows measured stay; the cell cut short leaves nothing
        doc_path.unlink(missing_ok=True)
        if progress:
            progress(
                f"interrupted after {len(rows)} of {len(cells)} cells: their rows are in "
                f"{out / ROWS_NAME}, with no report (the same command with --resume goes on)"
            )
        raise
    return rows_table(rows)


def write_rows(rows: list[dict[str, Any]], out: Path) -> None:
    with replacing(out / ROWS_NAME) as tmp:
        rows_table(rows).to_parquet(tmp, index=False)
