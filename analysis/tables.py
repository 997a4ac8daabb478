"""The run tables: what an analysed run folder holds as Parquet, with a versioned schema.

Every table is one file `tables/<name>.parquet` in the run folder (docs/run-tables.md describes
each column). Every row carries `run_id` (and `step`, "run" for an offline run), so the same
table of any number of runs is one relation for DuckDB, Spark or Polars:

    SELECT run_id, avg(packets) FROM read_parquet('results/*/tables/per_second.parquet')
    GROUP BY run_id

`SCHEMA_VERSION` is "MAJOR.MINOR": a new minor only adds columns or tables (a reader of an
older minor reads what it knows), a new major changes or removes some. It is written in the manifest
(`schema_version`, by ntgcore.runfolder) and in each file's key-value metadata
(`ntg.schema_version`, `ntg.table`); `read_table` refuses a file whose major it does not know,
and a file that is not Parquet, naming it and saying what to do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ntgcore.errors import BadInput
from ntgcore.files import replacing
from ntgcore.runfolder import SCHEMA_VERSION

TABLES_DIR = "tables"
META_VERSION = b"ntg.schema_version"
META_TABLE = b"ntg.table"

_ID = [("run_id", pa.string()), ("step", pa.string())]
_TS = pa.timestamp("us", tz="UTC")

# name -> schema. Columns are added at the end only, tables added (a minor version); see
# docs/run-tables.md. 1.1: the table coverage_multiplied; 1.2: coverage_evasion.
SCHEMAS: dict[str, pa.Schema] = {
    # One row per run: where it came from. The numbers are in `steps`.
    "run": pa.schema(
        [
            ("run_id", pa.string()),
            ("scenario", pa.string()),
            ("scenario_sha256", pa.string()),
            ("method", pa.string()),
            ("status", pa.string()),
            ("created_utc", _TS),
            ("finished_utc", _TS),
            ("analysed_utc", _TS),
            ("seed", pa.int64()),
            ("git_revision", pa.string()),
            ("git_dirty", pa.bool_()),
            ("hostname", pa.string()),
            ("kernel", pa.string()),
            ("cpus", pa.int32()),
            ("testbed_version", pa.string()),
            ("schema_version", pa.string()),
            # how the run was made: offline | live | capture (a capture analysed without a run folder)
            ("mode", pa.string()),
        ]
    ),
    # One row per measured step (an offline run: one row, step "run"): seed 001's numbers.
    "steps": pa.schema(
        [
            *_ID,
            ("kind", pa.string()),
            ("generator", pa.string()),
            ("status", pa.string()),
            ("packets", pa.int64()),
            ("bytes", pa.int64()),
            ("duration_s", pa.float64()),
            ("mean_pps", pa.float64()),
            ("std_pps", pa.float64()),
            ("variance_pct", pa.float64()),
            ("warmup_s", pa.int64()),
            ("steady_mean_pps", pa.float64()),
            ("steady_variance_pct", pa.float64()),
            ("average_packet_size", pa.float64()),
            ("throughput_bps", pa.float64()),
            ("flows", pa.int64()),
            ("sent", pa.int64()),
            ("wire", pa.int64()),
            ("dut", pa.int64()),
            ("loss_rate", pa.float64()),
            ("cpu_mean", pa.float64()),
            ("cpu_max", pa.float64()),
            ("rss_mean", pa.float64()),
            ("rss_max", pa.float64()),
            ("dut_cpu_mean", pa.float64()),
            ("dut_cpu_max", pa.float64()),
            ("dut_rss_mean", pa.float64()),
            ("dut_rss_max", pa.float64()),
            ("dut_dropped", pa.int64()),
            ("capture_dropped", pa.int64()),
            ("alerts", pa.int64()),
            ("params", pa.string()),
            ("error", pa.string()),
        ]
    ),
    "per_second": pa.schema(
        [
            *_ID,
            ("second", pa.int64()),
            ("packets", pa.int64()),
            ("bytes", pa.int64()),
            ("flows_started", pa.int64()),
            ("partial", pa.bool_()),
        ]
    ),
    "flows": pa.schema(
        [
            *_ID,
            ("ip_version", pa.uint8()),
            ("proto", pa.uint8()),
            ("src", pa.string()),
            ("dst", pa.string()),
            ("sport", pa.uint16()),
            ("dport", pa.uint16()),
            ("packets", pa.int64()),
            ("bytes", pa.int64()),
            ("first_ns", pa.int64()),
            ("last_ns", pa.int64()),
            ("duration_ns", pa.int64()),
        ]
    ),
    "timing": pa.schema(
        [
            *_ID,
            ("flow", pa.int64()),
            ("rep", pa.int64()),
            ("packets", pa.int64()),
            ("intended_start_ns", pa.int64()),
            ("start_ns", pa.int64()),
            ("start_error_ns", pa.int64()),
            ("intended_duration_ns", pa.int64()),
            ("duration_ns", pa.int64()),
            ("duration_error_ns", pa.int64()),
        ]
    ),
    # The monitor's samples (testbed.parts.monitor), one row per process or thread and time.
    "resources": pa.schema(
        [
            *_ID,
            ("t", pa.float64()),
            ("kind", pa.string()),
            ("label", pa.string()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
            ("name", pa.string()),
            ("cpu_percent", pa.float64()),
            ("rss_bytes", pa.int64()),
            ("mem_percent", pa.float64()),
            ("num_threads", pa.int64()),
        ]
    ),
    # The IDS's alerts (eve.json), one row per alert.
    "alerts": pa.schema(
        [
            *_ID,
            ("ts_ns", pa.int64()),
            ("gid", pa.int64()),
            ("sid", pa.int64()),
            ("rev", pa.int64()),
            ("msg", pa.string()),
            ("category", pa.string()),
            ("severity", pa.int32()),
            ("proto", pa.string()),
            ("src", pa.string()),
            ("sport", pa.int32()),
            ("dst", pa.string()),
            ("dport", pa.int32()),
            ("action", pa.string()),
            ("source", pa.string()),
        ]
    ),
    # Coverage per sid (testbed ids-coverage): run_id is the coverage report's id (its folder's
    # name), step the DUT's name ("run" for one DUT); `mix` the attack packet fraction of a --mix
    # (null: the attack capture alone); the DUT's `ids_version` and `config_sha256`.
    "coverage": pa.schema(
        [
            *_ID,
            ("sid", pa.int64()),
            ("where", pa.string()),
            ("msg", pa.string()),
            ("classtype", pa.string()),
            ("state", pa.string()),
            ("loaded", pa.bool_()),
            ("synthesized", pa.bool_()),
            ("alerted", pa.bool_()),
            ("reason", pa.string()),
            ("extra_sids", pa.list_(pa.int64())),
            ("extra_kind", pa.string()),
            ("mix", pa.float64()),
            ("ids_version", pa.string()),
            ("config_sha256", pa.string()),
        ]
    ),
    # The attack sessions multiplied T times (testbed ids-coverage --multiply, schema 1.1): a row
    # per DUT, T and sid; alerts unmultiplied, multiplied, expected (T+1)x, per copy (0 = the
    # original), whether the sid scales and why not.
    "coverage_multiplied": pa.schema(
        [
            *_ID,
            ("sid", pa.int64()),
            ("msg", pa.string()),
            ("copies", pa.int64()),
            ("alerts", pa.int64()),
            ("alerts_multiplied", pa.int64()),
            ("expected", pa.int64()),
            ("per_copy", pa.list_(pa.int64())),
            ("scales", pa.bool_()),
            ("reason", pa.string()),
            ("ids_version", pa.string()),
            ("config_sha256", pa.string()),
        ]
    ),
    # The evasion variants of every alerting rule's session (testbed ids-coverage --evasions,
    # schema 1.2): a row per DUT, sid, variant and Suricata reassembly configuration; whether the
    # IDS alerted, whether the variant reached the host (null: not measured) and the outcome.
    "coverage_evasion": pa.schema(
        [
            *_ID,
            ("sid", pa.int64()),
            ("variant", pa.string()),
            ("class", pa.string()),
            ("proto", pa.string()),
            ("config", pa.string()),
            ("alerted", pa.bool_()),
            ("host_reached", pa.bool_()),
            ("outcome", pa.string()),
            ("ids_version", pa.string()),
            ("config_sha256", pa.string()),
        ]
    ),
}


class SchemaError(BadInput):
    """A run table this version cannot read: another major schema, not Parquet, not ours."""


def major(version: str) -> int:
    try:
        return int(str(version).split(".", 1)[0])
    except ValueError:
        return -1


def check_version(found: Any, where: str | os.PathLike) -> None:
    """SchemaError unless FOUND (a "MAJOR.MINOR" string) has the major this version reads."""
    if found is None:
        raise SchemaError(
            f"{where}: no schema version (written by another program, or before run "
            f"tables existed); run `testbed analyze` on its run folder to write them"
        )
    if major(found) != major(SCHEMA_VERSION):
        newer = major(found) > major(SCHEMA_VERSION)
        raise SchemaError(
            f"{where}: run tables of schema {found}, this testbed reads {SCHEMA_VERSION.split('.')[0]}.x; "
            + (
                "use a newer testbed to read it"
                if newer
                else "run `testbed analyze` on its run folder to rewrite them in this schema"
            )
        )


def table_path(run_dir: str | os.PathLike, name: str) -> Path:
    if name not in SCHEMAS:
        raise KeyError(f"no run table {name!r} (there are {', '.join(SCHEMAS)})")
    return Path(run_dir) / TABLES_DIR / f"{name}.parquet"


def to_arrow(
    name: str, data: pd.DataFrame | pa.Table | dict[str, Any] | list[dict[str, Any]]
) -> pa.Table:
    """DATA (a frame, a table, columns or rows) as the table NAME with its exact schema: every
    column of the schema (a missing one is null), no other, each cast to its type."""
    schema = SCHEMAS[name]
    if isinstance(data, list):
        data = pd.DataFrame.from_records(data, columns=schema.names) if data else {}
    if isinstance(data, dict):
        n = max((len(v) for v in data.values()), default=0)
        data = (
            pd.DataFrame({k: v for k, v in data.items()})
            if n
            else pd.DataFrame(columns=schema.names)
        )
    if isinstance(data, pd.DataFrame):
        extra = set(data.columns) - set(schema.names)
        if extra:
            raise ValueError(f"run table {name}: columns {sorted(extra)} are not in its schema")
        data = pa.Table.from_pandas(_typed(data, schema), preserve_index=False)
    columns = []
    for f in schema:
        if f.name in data.column_names and data.column(f.name).null_count < data.num_rows:
            columns.append(data.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _typed(frame: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """FRAME with its time columns (ISO text, as manifests hold them) as UTC timestamps."""
    out = frame
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.name in frame and frame[f.name].dtype == object:
            out = out.assign(**{f.name: pd.to_datetime(frame[f.name], utc=True, format="ISO8601")})
    return out


def write_table(run_dir: str | os.PathLike, name: str, data: Any) -> Path:
    """Write run table NAME of RUN_DIR (atomically: a reader never sees half a file)."""
    path = table_path(run_dir, name)
    table = to_arrow(name, data)
    meta = {META_VERSION: SCHEMA_VERSION.encode(), META_TABLE: name.encode()}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        pq.write_table(table, tmp)
    return path


def read_table(run_dir: str | os.PathLike, name: str) -> pa.Table:
    """Run table NAME of RUN_DIR; SchemaError when it is missing, damaged or of another major."""
    path = table_path(run_dir, name)
    if not path.is_file():
        raise SchemaError(
            f"{path}: no such run table; run `testbed analyze {Path(run_dir)}` to write "
            f"the run tables"
        )
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(
            f"{path}: not a readable Parquet file ({exc}); run `testbed analyze "
            f"{Path(run_dir)}` to write it again"
        ) from None
    found = meta.get(META_VERSION)
    check_version(found.decode() if found is not None else None, path)
    if meta.get(META_TABLE, name.encode()) != name.encode():
        raise SchemaError(
            f"{path}: holds the run table {meta[META_TABLE].decode()!r}, not {name!r}"
        )
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise SchemaError(
            f"{path}: damaged Parquet file ({exc}); run `testbed analyze "
            f"{Path(run_dir)}` to write it again"
        ) from None


__all__ = [
    "SCHEMAS",
    "SCHEMA_VERSION",
    "TABLES_DIR",
    "SchemaError",
    "check_version",
    "major",
    "read_table",
    "table_path",
    "to_arrow",
    "write_table",
]
