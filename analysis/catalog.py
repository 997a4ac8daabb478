"""The results catalogue: the run tables of any number of run folders as one set of DuckDB views.

    from analysis.catalog import Catalog, plot_comparison
    cat = Catalog(["results"])                  # run folders, and trees searched for them
    cat.list()                                  # one row per run (a DataFrame)
    cmp = cat.compare(by="generator")           # seed 001's numbers per generator, over the runs
    plot_comparison(cmp, "plots/")              # rate with error bars, CPU, memory, variance
    cat.query("SELECT generator, avg(mean_pps) FROM steps GROUP BY ALL")

A run folder is a folder with manifest.json (`testbed run`), or with coverage.json (the output of
`testbed ids-coverage`); a tree is searched for them, not below one. Their run tables
(`tables/<name>.parquet`, analysis/tables.py, docs/run-tables.md) are read by DuckDB as views
named like the tables: run, steps, per_second, flows, timing, resources, alerts, coverage, each one
`read_parquet` over the files of the runs in question (a table no run has is an empty view with
the table's columns).

Nothing is mixed silently: a folder whose manifest or table files carry another major schema
version, a damaged Parquet file, or a finished run without tables (not analysed) ends the
operation with a `CatalogError` (exit status 2 on the command line) naming the folder or file and
what to do; `compare` leaves out runs that did not complete (unless asked) and refuses runs of
different scenarios (another scenario sha256) unless asked to group by scenario. Schema versions
are checked from the manifests and, for the files an operation reads, from the files' own
key-value metadata (`ntg.schema_version`), for all files in one DuckDB call.

Cost: one small JSON read per folder and one DuckDB scan per table over the files of all runs;
`benchmarks/bench_catalog.py` measures 1,000 folders (docs/benchmarks.md).
"""

from __future__ import annotations

import builtins  # `list` in the Catalog's annotations is its method
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ntgcore.errors import BadInput
from ntgcore.files import MAX_JSON_BYTES, read_bounded, read_json
from ntgcore.runfolder import MANIFEST, SCHEMA_VERSION

from .live import PALETTE
from .plots import figure, legend, save
from .tables import META_TABLE, META_VERSION, SCHEMAS, TABLES_DIR, SchemaError, check_version

TABLE_NAMES = tuple(SCHEMAS)
COVERAGE_REPORT = "coverage.json"
COMPLETED = "completed"
# steps at a set load or rate (a comparison's load steps, a loss sweep's rate and hosts steps):
# compared with `by="step"` only. Every other step (an offline or `run` step, a comparison's
# top-speed step) runs at the generator's own pace: `by="generator"` compares those.
SET_LOAD_KINDS = ("load", "rate", "hosts")
BY = ("generator", "step", "scenario")
# the numbers compared (steps table columns), with their printed names
METRICS = {
    "mean_pps": "mean pps",
    "steady_mean_pps": "steady pps",
    "variance_pct": "variance %",
    "steady_variance_pct": "steady variance %",
    "throughput_bps": "throughput bit/s",
    "loss_rate": "loss",
    "cpu_mean": "CPU % mean",
    "cpu_max": "CPU % max",
    "rss_max": "RSS max bytes",
}
STATS = ("mean", "std", "min", "max", "ci95")
# what one catalogue's DuckDB may hold in memory (a query over more fails with a CatalogError)
QUERY_MEMORY = max(
    256 * 2**20, min(8 * 2**30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
)
_STAMP = re.compile(r"(\d{8}T\d{6}Z)")
# two-sided 95 % quantiles of Student's t for 1 .. 30 degrees of freedom (then 1.96)
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


class CatalogError(BadInput):
    """Run folders the catalogue cannot read together; the message names them and what to do."""


@dataclass
class CatalogRun:
    """One run folder as its manifest (or coverage report) describes it, and its table files."""

    path: Path
    run_id: str
    status: str | None
    scenario: str | None = None
    scenario_sha256: str | None = None
    method: str | None = None
    created_utc: str | None = None
    tables: dict[str, str] = field(default_factory=dict)  # table name -> its file
    problem: str | None = None  # why its tables cannot be read at all
    _head: dict[str, Any] = field(default_factory=dict, repr=False)
    _partial: bool = field(default=False, repr=False)  # _head holds only the manifest's head

    @property
    def manifest(self) -> dict[str, Any]:
        """The whole manifest (read at the first use: listing needs only its head)."""
        if self._partial:
            self._head, self._partial = read_json(self.path / MANIFEST, "run manifest"), False
        return self._head

    @property
    def finished(self) -> bool:
        return self.status == COMPLETED

    @property
    def is_coverage(self) -> bool:
        """An ids-coverage report folder: rules scored, no traffic steps to compare."""
        return self.method == "ids-coverage" or (
            "coverage" in self.tables and "steps" not in self.tables
        )

    def not_analysed(self, table: str = "steps") -> str:
        return (
            f"{self.path}: not analysed (no {TABLES_DIR}/{table}.parquet): run `testbed analyze "
            f"{self.path}` to write its run tables"
        )


@dataclass
class Comparison:
    """`Catalog.compare`'s result: one row per group (`keys`), the statistics of every metric over
    the runs (`<metric>_<stat>`, STATS), and what was left out and why (`notes`)."""

    table: pd.DataFrame
    keys: list[str]
    by: str
    runs: list[CatalogRun]
    notes: list[str]

    def labels(self) -> list[str]:
        """One label a row: its keys joined, a scenario as name@sha256-prefix."""
        out = []
        for row in self.table.to_dict("records"):
            parts = [
                f"{row['scenario']}@{str(row['scenario_sha256'])[:8]}"
                if k == "scenario"
                else str(row[k])
                for k in self.keys
                if k != "scenario_sha256" and row[k] is not None
            ]
            out.append(" / ".join(parts))
        return out


# --------------------------------------------------------------------------------------------
# Finding and reading run folders


def _is_run_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MANIFEST)) or os.path.isfile(
        os.path.join(path, COVERAGE_REPORT)
    )


def find_run_folders(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The run folders among PATHS and below them (not below a run folder), each once, in order."""
    found: dict[str, Path] = {}
    for p in paths:
        p = os.fspath(p)
        if _is_run_folder(p):
            found.setdefault(os.path.realpath(p), Path(p))
            continue
        if not os.path.isdir(p):
            raise CatalogError(
                f"{p}: no such run folder or directory (give run folders, or folders "
                f"holding them, such as results/)"
            )
        stack = [p]
        while stack:
            d = stack.pop()
            try:
                entries = sorted(
                    (
                        e
                        for e in os.scandir(d)
                        if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                    ),
                    key=lambda e: e.name,
                )
            except OSError as exc:
                raise CatalogError(f"{d}: cannot be read ({exc.strerror})") from None
            below = []
            for e in entries:
                if _is_run_folder(e.path):
                    found.setdefault(os.path.realpath(e.path), Path(e.path))
                elif e.name != TABLES_DIR:
                    below.append(e.path)
            stack += reversed(below)
    return list(found.values())


def read_run_folder(path: str | os.PathLike) -> CatalogRun:
    """PATH's manifest summary and table files; `problem` says why its tables are unreadable."""
    text = os.fspath(path)
    tables = _table_files(text)
    path = Path(text)
    if not os.path.lexists(os.path.join(text, MANIFEST)):
        return _coverage_folder(path, tables)
    try:
        raw = read_bounded(os.path.join(text, MANIFEST), MAX_JSON_BYTES, "run manifest")
        manifest = _manifest_head(raw)
        partial = manifest is not None
        if manifest is None:  # not as ntgcore.runfolder writes it: read it whole
            manifest = json.loads(raw)
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
    except (BadInput, ValueError) as exc:
        return CatalogRun(
            path,
            path.name,
            None,
            tables=tables,
            problem=f"{path / MANIFEST}: not readable JSON ({exc}); the run folder is damaged",
        )
    sc = manifest.get("scenario") or {}
    run = CatalogRun(
        path,
        str(manifest.get("run_id") or path.name),
        manifest.get("status"),
        sc.get("name"),
        sc.get("sha256"),
        manifest.get("method") or ("offline" if manifest.get("mode") != "live" else None),
        manifest.get("created_utc"),
        tables=tables,
        _head=manifest,
        _partial=partial,
    )
    if tables:  # a folder without tables says so when one is needed (not_analysed)
        try:
            check_version(manifest.get("schema_version"), path / MANIFEST)
        except SchemaError as exc:
            run.problem = str(exc)
    return run


_HEAD = ("run_id", "status", "created_utc", "finished_utc", "schema_version", "mode", "method")


def _manifest_head(text: str) -> dict[str, Any] | None:
    """The top-level scalars the catalogue lists (_HEAD) and `scenario` of a manifest as
    ntgcore.runfolder writes it (json.dumps(indent=2): a top-level key starts a line with two
    spaces, and no JSON string holds a raw newline), without parsing the ~30 kB of a live run's
    steps and commands; None when the text is not in that form (then it is parsed whole)."""
    if not text.startswith('{\n  "'):
        return None
    out: dict[str, Any] = {}
    try:
        for key in _HEAD:
            mark = f'\n  "{key}": '
            i = text.find(mark)
            if i < 0:
                continue
            value = text[i + len(mark) : text.find("\n", i + 1)].rstrip(",")
            out[key] = json.loads(value)
        i = text.find('\n  "scenario": {')
        if i >= 0:
            out["scenario"] = json.loads(
                text[i + len('\n  "scenario": ') : text.find("\n  }", i) + 4]
            )
    except ValueError:  # a value that is no scalar on its line: not our layout
        return None
    return out if "run_id" in out and "status" in out else None


def _table_files(path: str) -> dict[str, str]:
    folder = os.path.join(path, TABLES_DIR)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    return {
        n[:-8]: os.path.join(folder, n)
        for n in sorted(names)
        if n.endswith(".parquet") and not n.startswith(".") and n[:-8] in SCHEMAS
    }


def _table_of(file: str) -> str:
    return os.path.basename(file)[:-8]


def _folder_of(file: str) -> str:
    return os.path.dirname(os.path.dirname(file))


def _coverage_folder(path: Path, tables: dict[str, str]) -> CatalogRun:
    """An ids-coverage output folder (coverage.json, no manifest): one report, completed."""
    stamp = _STAMP.search(path.name)
    when = (
        datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%SZ")
        if stamp
        else datetime.fromtimestamp((path / COVERAGE_REPORT).stat().st_mtime, UTC)
    )
    created = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return CatalogRun(
        path, path.name, COMPLETED, method="ids-coverage", created_utc=created, tables=tables
    )


# --------------------------------------------------------------------------------------------
# The catalogue


class Catalog:
    """The run folders found under PATHS (default results/) and DuckDB views over their tables."""

    def __init__(self, paths: Iterable[str | os.PathLike] = ("results",)):
        self.paths = [os.fspath(p) for p in paths]
        self.folders = [read_run_folder(p) for p in find_run_folders(self.paths)]
        self._allowed = {f for r in self.folders for f in r.tables.values()}  # what DuckDB may read
        self._con: duckdb.DuckDBPyConnection | None = None
        self._checked: dict[str, str] = {}  # file -> its schema version, once checked

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The catalogue's DuckDB connection: it reads the table files of its runs and nothing
        else (`confined_connection`), made at the first use."""
        if self._con is None:
            self._con = confined_connection(self._allowed, {"parquet_metadata_cache": True})
            for name, schema in SCHEMAS.items():
                self._con.register(f"_empty_{name}", schema.empty_table())
        return self._con

    def _allow(self, run: CatalogRun) -> CatalogRun:
        """RUN's table files readable too (a run folder named by path, outside the catalogue)."""
        new = set(run.tables.values()) - self._allowed
        if new:
            self._allowed |= new
            if (
                self._con is not None
            ):  # the configuration is locked: a new connection, views made anew
                self._con.close()
            self._con = None
        return run

    # ---- what is there

    def runs(self) -> pd.DataFrame:
        """One row per run folder: where, what, its status and tables (no table is read)."""
        return pd.DataFrame(
            [
                {
                    "run_id": r.run_id,
                    "scenario": r.scenario,
                    "scenario_sha256": r.scenario_sha256,
                    "method": r.method,
                    "status": r.status,
                    "created_utc": r.created_utc,
                    "folder": str(r.path),
                    "tables": sorted(r.tables),
                    "problem": r.problem,
                }
                for r in self.folders
            ],
            columns=[
                "run_id",
                "scenario",
                "scenario_sha256",
                "method",
                "status",
                "created_utc",
                "folder",
                "tables",
                "problem",
            ],
        )

    def step_params(self) -> pd.DataFrame:
        """The parameters the run method gave each step (manifest `steps[].params`: generator,
        offered_kBps of a comparison's load steps, a sweep's rate ...): run_id, step, then one
        column per parameter."""
        rows = [
            {"run_id": r.run_id, "step": e.get("name"), **(e.get("params") or {})}
            for r in self.folders
            for e in r.manifest.get("steps") or []
            if isinstance(e, dict)
        ]
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["run_id", "step"])

    def list(self) -> tuple[pd.DataFrame, list[str]]:
        """One row per run folder (`runs()`) with its steps' numbers: steps, generators, packets,
        and mean_pps and variance_pct of its fastest step (a one-step run: its own). A run whose
        tables cannot be read is listed with a `note`; the second value holds those problems (the
        command exits 2 for them)."""
        problems, notes = [], {}
        readable = []
        for r in self.folders:
            if r.problem:
                problems.append(r.problem)
                notes[r.path] = "unreadable tables (see the message)"
            elif "steps" in r.tables:
                readable.append(r)
            elif r.is_coverage:
                notes[r.path] = "ids-coverage report" + (
                    "" if "coverage" in r.tables else ", no run tables"
                )
            elif r.finished:
                notes[r.path] = f"not analysed: testbed analyze {r.path}"
            else:
                notes[r.path] = f"no run tables (the run is {r.status})"
        bad = self._check_files([r.tables["steps"] for r in readable])
        for r in readable:
            if r.tables["steps"] in bad:
                problems.append(bad[r.tables["steps"]])
                notes[r.path] = "unreadable steps table (see the message)"
        readable = [r for r in readable if r.tables["steps"] not in bad]
        agg = pd.DataFrame(
            columns=["_file", "steps", "generators", "packets", "mean_pps", "variance_pct"]
        )
        if readable:
            rel = self._relation("steps", [r.tables["steps"] for r in readable], filename=True)
            agg = self._sql(
                "SELECT filename AS _file, count(*) AS steps, list_sort(list(DISTINCT generator)) AS generators, "
                "sum(packets) AS packets, max(mean_pps) AS mean_pps, arg_max(variance_pct, mean_pps) AS variance_pct "
                f"FROM ({rel}) GROUP BY filename"
            )
        by_file = {row["_file"]: row for row in agg.to_dict("records")}
        rows = []
        for r in self.folders:
            a = by_file.get(r.tables.get("steps"), {})
            gens = a.get("generators")
            rows.append(
                {
                    "run_id": r.run_id,
                    "scenario": r.scenario,
                    "method": r.method,
                    "status": r.status,
                    "created_utc": r.created_utc,
                    "steps": a.get("steps"),
                    "generators": ",".join(g for g in gens if g) if gens is not None else None,
                    "packets": a.get("packets"),
                    "mean_pps": a.get("mean_pps"),
                    "variance_pct": a.get("variance_pct"),
                    "note": notes.get(r.path),
                    "folder": str(r.path),
                }
            )
        frame = pd.DataFrame(
            rows,
            columns=[
                "run_id",
                "scenario",
                "method",
                "status",
                "created_utc",
                "steps",
                "generators",
                "packets",
                "mean_pps",
                "variance_pct",
                "note",
                "folder",
            ],
        )
        return frame.sort_values(
            ["created_utc", "run_id"], na_position="first", kind="stable", ignore_index=True
        ), problems

    def find(self, run: str) -> CatalogRun:
        """The run folder RUN names: a path, or the run id of a folder in the catalogue."""
        if _is_run_folder(run):
            return self._allow(read_run_folder(run))
        hits = [r for r in self.folders if r.run_id == run or r.path.name == run]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise CatalogError(
                f"{run}: {len(hits)} run folders have this id: "
                + ", ".join(str(h.path) for h in hits)
                + "; give the folder's path"
            )
        raise CatalogError(
            f"{run}: no such run folder, and no run with this id under "
            f"{', '.join(self.paths)}; give the path of a run folder"
        )

    def show(self, run: str) -> tuple[dict[str, Any], pd.DataFrame]:
        """RUN's manifest summary and its steps table (CatalogError when it has none)."""
        r = self.find(run)
        m = r.manifest
        host, git, sc = m.get("host") or {}, m.get("git") or {}, m.get("scenario") or {}
        summary: dict[str, Any] = {
            "run_id": r.run_id,
            "folder": str(r.path),
            "status": r.status,
            "scenario": r.scenario,
            "scenario_sha256": r.scenario_sha256,
            "scenario_source": sc.get("source"),
            "method": r.method,
            "mode": m.get("mode"),
            "created_utc": r.created_utc,
            "finished_utc": m.get("finished_utc"),
            "seed": m.get("seed"),
            "host": host.get("hostname"),
            "kernel": host.get("kernel"),
            "cpus": host.get("cpus"),
            "git_revision": git.get("revision"),
            "git_dirty": git.get("dirty"),
            "testbed": (m.get("tools") or {}).get("testbed"),
            "schema_version": m.get("schema_version"),
            "error": m.get("error"),
            "tables": {},
        }
        if r.problem:
            raise CatalogError(r.problem)
        if "steps" not in r.tables:
            if r.is_coverage and "coverage" in r.tables:
                summary["tables"] = self._row_counts(r)
                return summary, pd.DataFrame(columns=SCHEMAS["steps"].names)
            raise CatalogError(r.not_analysed())
        self._check([r], list(r.tables))
        summary["tables"] = self._row_counts(r)
        steps = self._sql(f"SELECT * FROM read_parquet({_sql_list([r.tables['steps']])})")
        return summary, steps

    def _row_counts(self, r: CatalogRun) -> dict[str, int]:
        self._check([r], list(r.tables))
        files = {p: n for n, p in r.tables.items()}
        counts = self._sql(
            f"SELECT file_name, sum(num_rows) AS n FROM parquet_file_metadata({_sql_list(list(files))}) "
            "GROUP BY file_name"
        )
        got = {files[f]: int(n) for f, n in zip(counts["file_name"], counts["n"])}
        return {n: got.get(n, 0) for n in r.tables}

    # ---- the views

    def select(
        self, *, include_unfinished: bool = True, need: str | None = None, coverage: bool = True
    ) -> tuple[builtins.list[CatalogRun], builtins.list[str]]:
        """The runs an operation reads (those with table NEED, or with any table), and notes on
        those it leaves out: runs that did not complete unless INCLUDE_UNFINISHED, ids-coverage
        reports unless COVERAGE. CatalogError naming every run that should be read and cannot be:
        a damaged manifest, another schema, a completed run without tables (not analysed)."""
        chosen, notes, errors, unfinished = [], [], [], []
        for r in self.folders:
            if r.is_coverage and not coverage:
                continue
            if r.status is None and r.problem:  # a damaged manifest: no status to go by
                errors.append(r.problem)
                continue
            if not r.finished and not include_unfinished:
                unfinished.append(r)
                continue
            if r.problem:
                errors.append(r.problem)
                continue
            if not (need in r.tables if need else r.tables):
                if r.is_coverage:
                    notes.append(f"{r.path}: left out: an ids-coverage report without run tables")
                elif r.finished:
                    errors.append(r.not_analysed(need or "steps"))
                else:
                    notes.append(
                        f"{r.path}: left out: the run is {r.status!r} and has no run tables"
                    )
                continue
            chosen.append(r)
        if unfinished:
            notes.append(
                f"left out {len(unfinished)} run(s) that did not complete (--include-unfinished "
                "takes them): "
                + ", ".join(f"{r.path.name} ({r.status})" for r in unfinished[:10])
                + (", ..." if len(unfinished) > 10 else "")
            )
        if errors:
            raise CatalogError(_joined(errors))
        return chosen, notes

    def views(self, runs: builtins.list[CatalogRun], names: Iterable[str] = TABLE_NAMES) -> None:
        """Views NAMES over the tables of RUNS (their files' schema versions checked first)."""
        names = list(names)
        self._check(runs, names)
        for name in names:
            files = [r.tables[name] for r in runs if name in r.tables]
            self.con.execute(f"CREATE OR REPLACE VIEW {name} AS {self._relation(name, files)}")

    def _relation(self, name: str, files: builtins.list[str], filename: bool = False) -> str:
        if not files:
            return f"SELECT *{', NULL::VARCHAR AS filename' if filename else ''} FROM _empty_{name}"
        fn = ", filename = true" if filename else ""
        versions = {self._checked.get(f) for f in files}
        if versions == {SCHEMA_VERSION}:  # one schema: DuckDB need not unify the files' columns
            return f"SELECT * FROM read_parquet({_sql_list(files)}{fn})"
        # other minors: every column of this version (null where a file lacks it), and newer ones
        return (
            f"SELECT * FROM _empty_{name} UNION ALL BY NAME SELECT * FROM "
            f"read_parquet({_sql_list(files)}, union_by_name = true{fn})"
        )

    def query(
        self, sql: str, *, include_unfinished: bool = True
    ) -> tuple[pd.DataFrame, builtins.list[str]]:
        """One read-only SELECT over the views of the catalogue's runs (only the views SQL names
        are made); it can read the catalogue's table files and nothing else (`read_only_select`,
        `confined_connection`)."""
        read_only_select(sql)
        runs, notes = self.select(include_unfinished=include_unfinished)
        _no_duplicates(runs)
        used = [n for n in TABLE_NAMES if re.search(rf"\b{n}\b", sql, re.IGNORECASE)]
        self.views(runs, used)
        try:
            return _frame(self.con.sql(sql)), notes
        except duckdb.PermissionException as exc:
            raise CatalogError(
                f"the query failed: {_first_line(exc)} (a query reads the run tables of the "
                f"catalogue's runs, through the views {', '.join(TABLE_NAMES)}, and no other "
                "file)"
            ) from None
        except duckdb.Error as exc:
            raise CatalogError(f"the query failed: {_first_line(exc)}") from None

    # ---- seed 001's comparison

    def compare(
        self, by: str = "generator", *, allow_mixed: bool = False, include_unfinished: bool = False
    ) -> Comparison:
        """Seed 001's numbers (METRICS) side by side, per generator (its steps at its own pace),
        per step, or per scenario and generator, with their spread over the runs: n, mean, std,
        min, max and the 95 % confidence interval's half width (Student's t). A run counts once per
        group (its steps in the group averaged first)."""
        if by not in BY:
            raise CatalogError(f"compare by {by!r}: choose one of {', '.join(BY)}")
        runs, notes = self.select(
            include_unfinished=include_unfinished, need="steps", coverage=False
        )
        skipped = [r for r in self.folders if r.is_coverage]
        if skipped:
            notes.append(
                f"left out {len(skipped)} ids-coverage report(s): no traffic steps to compare"
            )
        if not runs:
            raise CatalogError(
                f"no analysed run to compare under {', '.join(self.paths)}"
                + (f" ({'; '.join(notes)})" if notes else "")
            )
        _no_duplicates(runs)
        scenarios: dict[tuple, builtins.list[CatalogRun]] = {}
        for r in runs:
            scenarios.setdefault((r.scenario, r.scenario_sha256), []).append(r)
        mixed = len(scenarios) > 1
        if mixed and not allow_mixed and by != "scenario":
            lines = [
                f"  {name} (sha256 {str(sha)[:12]}): {len(rs)} run(s), e.g. {rs[0].path}"
                for (name, sha), rs in scenarios.items()
            ]
            renamed = len({n for n, _ in scenarios}) < len(scenarios)
            raise CatalogError(
                f"these runs come from {len(scenarios)} different scenarios"
                + (
                    " (a scenario file changed between runs: same name, another sha256)"
                    if renamed
                    else ""
                )
                + ":\n"
                + "\n".join(lines)
                + "\ncompare the runs of one scenario, or pass --allow-mixed "
                "(or --by scenario) to compare them grouped by scenario"
            )
        keys = ["scenario", "scenario_sha256"] if mixed or by == "scenario" else []
        keys += {
            "generator": ["generator"],
            "scenario": ["generator"],
            "step": ["generator", "step", "kind"],
        }[by]
        self._check(runs, ["steps"])
        self.con.register(
            "_runs",
            pd.DataFrame(
                {
                    "_file": [r.tables["steps"] for r in runs],
                    "_run": [str(r.path) for r in runs],
                    "scenario": [r.scenario for r in runs],
                    "scenario_sha256": [r.scenario_sha256 for r in runs],
                }
            ),
        )
        rate = f"coalesce(s.kind NOT IN ({', '.join(repr(k) for k in SET_LOAD_KINDS)}), true)"
        k_inner = ", ".join(f"r.{k}" if k.startswith("scenario") else f"s.{k}" for k in keys)
        k = ", ".join(keys)
        per_run = ", ".join(f"avg({m}) AS {m}" for m in METRICS)
        stats = ", ".join(
            f"avg({m}) AS {m}_mean, stddev_samp({m}) AS {m}_std, min({m}) AS {m}_min, "
            f"max({m}) AS {m}_max, count({m}) AS {m}_n"
            for m in METRICS
        )
        # one scan of the files: the steps not compared (by generator: those at a set load) are counted
        sql = (
            f"WITH s AS ({self._relation('steps', [r.tables['steps'] for r in runs], filename=True)}), "
            f"p AS MATERIALIZED (SELECT {k_inner}, r._run, {rate} AS _rate, "
            f"{', '.join(f's.{m}' for m in METRICS)} FROM s JOIN _runs r ON s.filename = r._file), "
            f"q AS (SELECT {k}, _run, {per_run} FROM p {'' if by == 'step' else 'WHERE _rate'} GROUP BY {k}, _run) "
            f"SELECT {k}, count(*) AS n, {stats}, (SELECT count(*) FROM p WHERE NOT _rate) AS _other "
            f"FROM q GROUP BY {k} ORDER BY {k}"
        )
        table = self._sql(sql)
        for m in METRICS:
            table[f"{m}_ci95"] = [
                _t95(n) * sd / math.sqrt(n) if n > 1 and pd.notna(sd) else None
                for n, sd in zip(table[f"{m}_n"], table[f"{m}_std"])
            ]
        order = keys + ["n"] + [f"{m}_{s}" for m in METRICS for s in STATS]
        n_other = int(table["_other"].iloc[0]) if len(table) else 0
        if by != "step" and n_other:
            notes.append(
                f"{n_other} step(s) at a set load or rate (load, rate, hosts) are not in this "
                "table: --by step compares every step"
            )
        if table.empty:
            raise CatalogError(
                "these runs have only steps at a set load or rate (kinds "
                f"{', '.join(SET_LOAD_KINDS)}): compare them with --by step"
            )
        return Comparison(table[order], keys, by, runs, notes)

    # ---- ids-coverage over time

    def coverage(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The coverage table of every folder that has one, over time: (overall, per_sid).
        overall: one row per report: time, run, rules, counted (rules that can alert; those the
        IDS refused count as missed), alerted, coverage = alerted / counted. per_sid: time, run,
        sid, msg, state, alerted. Both empty when no folder has a coverage table."""
        runs = [r for r in self.folders if "coverage" in r.tables and not r.problem]
        errors = [r.problem for r in self.folders if r.problem and "coverage" in r.tables]
        if errors:
            raise CatalogError(_joined(errors))
        overall_cols = ["time", "run", "rules", "counted", "alerted", "coverage", "folder"]
        sid_cols = ["time", "run", "sid", "msg", "state", "alerted"]
        if not runs:
            return pd.DataFrame(columns=overall_cols), pd.DataFrame(columns=sid_cols)
        self._check(runs, ["coverage"])
        self.con.register(
            "_cov_runs",
            pd.DataFrame(
                {
                    "_file": [r.tables["coverage"] for r in runs],
                    "run": [r.run_id for r in runs],
                    "folder": [str(r.path) for r in runs],
                    "time": pd.to_datetime(
                        [r.created_utc for r in runs], utc=True, format="ISO8601"
                    ),
                }
            ),
        )
        rel = self._relation("coverage", [r.tables["coverage"] for r in runs], filename=True)
        per_sid = self._sql(
            f"SELECT r.time, r.run, c.sid, c.msg, c.state, c.alerted FROM ({rel}) c "
            "JOIN _cov_runs r ON c.filename = r._file ORDER BY r.time, r.run, c.sid"
        )
        overall = self._sql(
            f"SELECT r.time, r.run, count(*) AS rules, count(*) FILTER (c.state <> 'silent') AS counted, "
            f"count(*) FILTER (c.alerted AND c.state <> 'silent') AS alerted, "
            f"(count(*) FILTER (c.alerted AND c.state <> 'silent')) / nullif(count(*) FILTER (c.state <> 'silent'), 0) "
            f"AS coverage, r.folder FROM ({rel}) c "
            "JOIN _cov_runs r ON c.filename = r._file GROUP BY ALL ORDER BY r.time, r.run"
        )
        return overall[overall_cols], per_sid[sid_cols]

    # ---- reading

    def _sql(self, sql: str) -> pd.DataFrame:
        try:
            return _frame(self.con.sql(sql))
        except duckdb.Error as exc:
            raise CatalogError(f"reading the run tables failed: {_first_line(exc)}") from None

    def _check(self, runs: builtins.list[CatalogRun], names: Iterable[str]) -> None:
        """CatalogError naming every table file of RUNS (tables NAMES) that cannot be read:
        another major schema, another table, no version, a damaged file."""
        bad = self._check_files([r.tables[n] for r in runs for n in names if n in r.tables])
        if bad:
            raise CatalogError(_joined(bad.values()))

    def _check_files(self, files: builtins.list[str]) -> dict[str, str]:
        """The schema version of FILES from their key-value metadata (one DuckDB call over the
        files not checked yet, remembered in `_checked`); returns the unreadable ones, each with
        its message."""
        files = [f for f in files if f not in self._checked]
        if not files:
            return {}
        try:
            kv = self.con.execute(
                "SELECT file_name, decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata(?) "
                "WHERE decode(key) IN (?, ?)",
                [files, META_VERSION.decode(), META_TABLE.decode()],
            ).fetchall()
        except duckdb.Error as exc:
            bad = _unreadable(files)
            if not bad:
                raise CatalogError(
                    f"reading the run tables' metadata failed: {_first_line(exc)}"
                ) from None
            return {**bad, **self._check_files([f for f in files if f not in bad])}
        meta: dict[str, dict[str, str]] = {}
        for f, k, v in kv:
            meta.setdefault(f, {})[k] = v
        bad = {}
        for f in files:
            m = meta.get(f, {})
            try:
                check_version(m.get(META_VERSION.decode()), f)
                table = m.get(META_TABLE.decode(), _table_of(f))
                if table != _table_of(f):
                    raise SchemaError(
                        f"{f}: holds the run table {table!r}, not {_table_of(f)!r}; run "
                        f"`testbed analyze {_folder_of(f)}` to write it again"
                    )
            except SchemaError as exc:
                bad[f] = str(exc)
                continue
            self._checked[f] = m[META_VERSION.decode()]
        return bad


# --------------------------------------------------------------------------------------------
# Plots


def plot_comparison(cmp: Comparison, out_dir: str | os.PathLike) -> dict[str, Path]:
    """PNGs of a comparison: rate (whole run and steady, with the standard deviation over the
    runs as error bars), CPU (mean and max), memory (max RSS) and variance. A figure whose
    numbers no run has (CPU of offline runs) is not drawn."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t, labels = cmp.table, cmp.labels()
    lo, hi = int(t["n"].min()), int(t["n"].max())
    n = f" (n = {lo}{f'..{hi}' if hi != lo else ''} run{'s' if hi > 1 else ''}; error bars: std over the runs)"
    written: dict[str, Path] = {}
    # title, y label, series (column, label, scale), file name
    figures: dict[str, tuple[str, str, list[tuple[str, str, float]], str]] = {
        "rate": (
            "Packet rate per " + cmp.by + n,
            "packets per second",
            [("mean_pps", "whole step", 1), ("steady_mean_pps", "after warm-up", 1)],
            "compare-rate.png",
        ),
        "cpu": (
            "CPU of each generator" + n,
            "CPU % (100 = one core)",
            [("cpu_mean", "mean", 1), ("cpu_max", "max", 1)],
            "compare-cpu.png",
        ),
        "memory": (
            "Memory of each generator" + n,
            "max RSS (MB)",
            [("rss_max", "max RSS", 1e-6)],
            "compare-memory.png",
        ),
        "variance": (
            "Rate variance (std / mean of the per-second rate)" + n,
            "variance %",
            [("variance_pct", "whole step", 1), ("steady_variance_pct", "after warm-up", 1)],
            "compare-variance.png",
        ),
    }
    for key, (title, ylabel, series, name) in figures.items():
        if all(t[f"{m}_mean"].isna().all() for m, _, _ in series):
            continue
        fig, ax = figure(title, "", ylabel)
        width = 0.8 / len(series)
        x = range(len(labels))
        for i, (m, label, scale) in enumerate(series):
            ax.bar(
                [j + (i - (len(series) - 1) / 2) * width for j in x],
                t[f"{m}_mean"].fillna(0) * scale,
                width=width,
                yerr=t[f"{m}_std"].fillna(0) * scale,
                capsize=3,
                color=PALETTE[i % len(PALETTE)],
                label=label,
            )
        ax.set_xticks(
            list(x),
            labels,
            rotation=30 if len(labels) > 4 else 0,
            ha="right" if len(labels) > 4 else "center",
        )
        top = t[[f"{m}_mean" for m, _, _ in series]].max().max()
        low = t[[f"{m}_mean" for m, _, _ in series]].replace(0, float("nan")).min().min()
        if key == "rate" and low and top / low > 50:
            ax.set_yscale("log")
        legend(ax)
        save(fig, out / name)
        written[key] = out / name
    return written


# --------------------------------------------------------------------------------------------
# Helpers


def _frame(rel: Any) -> pd.DataFrame:
    """A DuckDB result as a DataFrame (through Arrow: the column types kept, timestamps in UTC);
    a statement without a result (CREATE ...) gives an empty frame."""
    if rel is None:
        return pd.DataFrame()
    table = rel.to_arrow_table()
    for i, f in enumerate(table.schema):  # sum() of integers is a HUGEINT, a decimal to Arrow
        if pa.types.is_decimal(f.type):
            col = table.column(i)
            try:
                col = col.cast(pa.int64()) if f.type.scale == 0 else col.cast(pa.float64())
            except pa.ArrowInvalid:  # beyond 64 bits
                col = col.cast(pa.float64(), safe=False)
            table = table.set_column(i, f.name, col)
    return table.to_pandas()


def confined_connection(
    files: Iterable[str], settings: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that may read FILES and no other file, directory or URL: external
    access off but for those paths, no extension installed or loaded, no spilling to a temporary
    folder, memory at most QUERY_MEMORY, then the configuration locked so that no statement can
    change any of it. SETTINGS are set before the lock. Every DuckDB connection of the project is
    made here: the testbed runs as root, and SQL a user types must not reach beyond the tables."""
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_community_extensions": False,
            "allow_unsigned_extensions": False,
        }
    )
    paths = sorted(
        {p for f in files for p in (os.fspath(f), os.path.abspath(f), os.path.realpath(f))}
    )
    con.execute("SET allowed_paths = ?", [paths])
    con.execute("SET temp_directory = ''")
    con.execute(f"SET memory_limit = '{QUERY_MEMORY}B'")
    for key, value in (settings or {}).items():
        con.execute(f"SET {key} = ?", [value])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def read_only_select(sql: str) -> None:
    """CatalogError unless SQL is one SELECT statement (WITH, VALUES, FROM-first, DESCRIBE and
    SUMMARIZE count as SELECT): no COPY, CREATE, ATTACH, INSTALL, SET, PRAGMA or EXPORT."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise CatalogError(f"the query cannot be parsed: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise CatalogError(f"give one SELECT statement, not {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise CatalogError(
            f"only a read-only SELECT is run over the run tables; this is a {kind.name} "
            "statement (a query writes, attaches, installs and configures nothing)"
        )


def _sql_list(items: list[str]) -> str:
    return "[" + ", ".join("'" + s.replace("'", "''") + "'" for s in items) + "]"


def _t95(n: int) -> float:
    return _T95[n - 2] if 2 <= n <= len(_T95) + 1 else 1.96


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _joined(messages: Iterable[str], limit: int = 20) -> str:
    messages = list(dict.fromkeys(messages))
    more = len(messages) - limit
    return "\n".join(messages[:limit]) + (f"\n... and {more} more" if more > 0 else "")


def _unreadable(files: list[str]) -> dict[str, str]:
    """The damaged ones among FILES (their footers cannot be read), with a message each."""
    bad = {}
    for f in files:
        try:
            pq.read_metadata(f)
        except (pa.ArrowException, OSError) as exc:
            bad[f] = (
                f"{f}: not a readable Parquet file ({_first_line(exc)}); run `testbed analyze "
                f"{_folder_of(f)}` to write it again"
            )
    return bad


def _no_duplicates(runs: list[CatalogRun]) -> None:
    seen: dict[str, list[CatalogRun]] = {}
    for r in runs:
        seen.setdefault(r.run_id, []).append(r)
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    if twice:
        raise CatalogError(
            "the same run in several folders would count twice: "
            + "; ".join(
                f"{k}: {', '.join(str(r.path) for r in v)}" for k, v in list(twice.items())[:10]
            )
            + "; give each run once"
        )


# --------------------------------------------------------------------------------------------
# Text


def text_table(header: list[str], rows: list[list[Any]], right: Iterable[int] = ()) -> list[str]:
    """Lines of a plain table: columns padded, the columns RIGHT right-aligned (numbers)."""
    right = set(right)
    cells = [[str(h) for h in header]] + [
        ["–" if c is None else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [
        "  ".join(
            (c.rjust(w) if i in right else c.ljust(w)) for i, (c, w) in enumerate(zip(r, widths))
        ).rstrip()
        for r in cells
    ]


def _num(x: Any, digits: int = 0) -> str | None:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return None
    return f"{x:,.{digits}f}"


def _spread(row: dict[str, Any], m: str, digits: int = 0, scale: float = 1) -> str | None:
    mean, std = row.get(f"{m}_mean"), row.get(f"{m}_std")
    text = _num(None if mean is None or mean != mean else mean * scale, digits)
    if text is None:
        return None
    s = _num(None if std is None or std != std else std * scale, digits)
    return text if s is None else f"{text} ± {s}"


def list_lines(frame: pd.DataFrame) -> list[str]:
    rows = [
        [
            r["run_id"],
            r["scenario"],
            r["method"],
            r["status"],
            _when(r["created_utc"]),
            _num(r["steps"]),
            r["generators"],
            _num(r["packets"]),
            _num(r["mean_pps"]),
            _num(r["variance_pct"], 2),
            r["note"] or "",
        ]
        for r in _records(frame)
    ]
    return text_table(
        [
            "run_id",
            "scenario",
            "method",
            "status",
            "created (UTC)",
            "steps",
            "generators",
            "packets",
            "mean pps",
            "variance %",
            "note",
        ],
        rows,
        right=(5, 7, 8, 9),
    )


def comparison_lines(cmp: Comparison) -> list[str]:
    runs = cmp.runs
    scen = {(r.scenario, r.scenario_sha256) for r in runs}
    what = (
        f"{len(runs)} run(s) of {next(iter(scen))[0]} (scenario sha256 {str(next(iter(scen))[1])[:12]})"
        if len(scen) == 1
        else f"{len(runs)} runs of {len(scen)} scenarios"
    )
    keys = [k for k in cmp.keys if k != "scenario_sha256"]
    rows = []
    for r, _label in zip(_records(cmp.table), cmp.labels()):
        lo, hi = _num(r["steady_mean_pps_min"]), _num(r["steady_mean_pps_max"])
        rows.append(
            [
                *(
                    str(r[k])
                    if k != "scenario"
                    else f"{r['scenario']}@{str(r['scenario_sha256'])[:8]}"
                    for k in keys
                ),
                _num(r["n"]),
                _spread(r, "mean_pps"),
                _spread(r, "steady_mean_pps"),
                f"{lo} .. {hi}" if lo is not None else None,
                _spread(r, "variance_pct", 2),
                _spread(r, "cpu_mean", 1),
                _spread(r, "cpu_max", 1),
                _spread(r, "rss_max", 1, 1e-6),
            ]
        )
    head = keys + [
        "runs",
        "mean pps",
        "steady pps",
        "steady min .. max",
        "variance %",
        "CPU % mean",
        "CPU % max",
        "RSS max MB",
    ]
    return (
        [f"comparing {what} by {cmp.by}"]
        + text_table(head, rows, right=range(len(keys), len(head)))
        + [
            "(± is the standard deviation over the runs; --json or --csv give n, mean, std, min, max "
            "and the 95 % confidence interval of every number)"
        ]
    )


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {
            k: (
                None
                if (not isinstance(v, (list, tuple)) and not hasattr(v, "__len__") and pd.isna(v))
                else v
            )
            for k, v in row.items()
        }
        for row in frame.to_dict("records")
    ]


def _when(text: Any) -> str | None:
    if not text:
        return None
    return str(text).replace("T", " ")[:19]


__all__ = [
    "BY",
    "COMPLETED",
    "Catalog",
    "CatalogError",
    "Comparison",
    "METRICS",
    "CatalogRun",
    "SET_LOAD_KINDS",
    "STATS",
    "TABLE_NAMES",
    "comparison_lines",
    "find_run_folders",
    "list_lines",
    "plot_comparison",
    "read_run_folder",
    "text_table",
]
