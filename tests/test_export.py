"""`testbed export CAPTURE... --parquet DIR` (analysis/export.py): per-packet and per-flow tables
in Hive partitions that DuckDB reads, counts equal to capinfos / the reader and to the analysis's
flow table, bounded memory, and the refusals."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

import analysis.export as export
from analysis.capture import read_capture
from analysis.export import ADDRESS_SQL, EXPORT_MANIFEST, ExportError, export_captures
from analysis.metrics import flow_table
from analysis.stream import read_stream
from analysis.tables import META_TABLE, META_VERSION, SCHEMA_VERSION
from benchmarks.pcapgen import write_pcap
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.usefixtures("pcaplib")

ROOT = Path(__file__).resolve().parent.parent

E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
HOUR = 3600


def hours_capture(path: Path) -> Path:
    """Packets over three UTC hours (and a non-IP one), out of time order at the end."""
    t0 = Decimal(1_700_000_000)  # 2023-11-14 22:13:20 UTC
    pkts = []
    for k in range(60):
        p = (
            E / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=5004, dport=9) / Raw(b"x" * 50)
            if k % 3
            else E
            / IPv6(src="2001:db8:1::1", dst="2001:db8:2::10")
            / TCP(sport=40000, dport=80, flags="PA")
        )
        p.time = t0 + k * 120  # every 2 minutes: two hours
        pkts.append(p)
    arp = E / ARP()
    arp.time = t0 + 5
    late = E / IP(src="198.18.0.2", dst="198.19.0.2") / UDP(sport=1, dport=2)
    late.time = t0 - 2 * HOUR  # earlier than everything: a third hour, written last
    wrpcap(str(path), pkts + [arp, late], nano=True)
    return path


def capinfos_count(path: Path) -> int | None:
    if not shutil.which("capinfos"):
        return None
    out = (
        subprocess.run(
            ["capinfos", "-M", "-c", "-T", str(path)], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return int(out.split("\t")[-1])


def duck() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(ADDRESS_SQL)
    return con


def packets_in(con, out: Path, where: str = "") -> int:
    return con.sql(
        f"SELECT count(*) FROM read_parquet('{out}/packets/**/*.parquet', "
        f"hive_partitioning = true) {where}"
    ).fetchall()[0][0]


def _halves(version: int, text: str) -> tuple[int, int]:
    """An address as the export's (hi, lo) columns: IPv6 as it is, IPv4 as ::ffff:a.b.c.d."""
    a = ipaddress.ip_address(text)
    raw = (b"\0" * 10 + b"\xff\xff" + a.packed) if version == 4 else a.packed
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


def check_export(out: Path, captures: list[Path]) -> None:
    """DuckDB over the hive layout: packets as capinfos and the reader count them, flows as the
    analysis's flow table, frame numbers 1..n, partitions as the time stamps say."""
    con = duck()
    doc = json.loads((out / EXPORT_MANIFEST).read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    for path, info in zip(captures, doc["captures"]):
        cap = read_capture(path)
        name = info["capture"]
        assert info["packets"] == len(cap)
        n = packets_in(con, out, f"WHERE capture = '{name}'")
        assert n == len(cap)
        want = capinfos_count(path)
        if want is not None:
            assert n == want
        frames, ts = (
            zip(
                *con.sql(
                    f"SELECT frame, ts_ns FROM read_parquet('{out}/packets/**/*.parquet', hive_partitioning = true) "
                    f"WHERE capture = '{name}' ORDER BY frame"
                ).fetchall()
            )
            if len(cap)
            else ((), ())
        )
        assert list(frames) == list(range(1, len(cap) + 1)) and list(ts) == cap.ts_ns.tolist()
        bad = con.sql(f"""SELECT count(*) FROM read_parquet('{out}/packets/**/*.parquet', hive_partitioning = true)
                          WHERE capture = '{name}' AND (date <> CAST(make_timestamp_ns(ts_ns) AS DATE)
                          OR hour <> hour(make_timestamp_ns(ts_ns)))""").fetchall()[0][0]
        assert bad == 0
        want_flows = flow_table(cap)
        got = con.sql(f"""SELECT ip_version, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport, packets,
                          bytes, first_ns, last_ns
                          FROM read_parquet('{out}/flows/**/*.parquet', hive_partitioning = true)
                          WHERE capture = '{name}'""").fetchall()
        assert info["flows"] == len(want_flows) == len(got)
        assert sorted(got) == sorted(
            (
                r.ip_version,
                r.proto,
                *_halves(r.ip_version, r.src),
                *_halves(r.ip_version, r.dst),
                r.sport,
                r.dport,
                r.packets,
                r.bytes,
                r.first_ns,
                r.last_ns,
            )
            for r in want_flows.itertuples()
        )
        text = con.sql(f"""SELECT ip_version, ntg_ip(src_hi, src_lo), ntg_ip(dst_hi, dst_lo)
                           FROM read_parquet('{out}/flows/**/*.parquet', hive_partitioning = true)
                           WHERE capture = '{name}'""").fetchall()
        assert sorted(text) == sorted(
            (
                r.ip_version,
                ipaddress.ip_address(r.src).exploded if r.ip_version == 6 else r.src,
                ipaddress.ip_address(r.dst).exploded if r.ip_version == 6 else r.dst,
            )
            for r in want_flows.itertuples()
        )
    for f in out.rglob("*.parquet"):
        meta = pq.read_schema(f).metadata
        assert meta[META_VERSION] == SCHEMA_VERSION.encode()
        assert meta[META_TABLE] == f.relative_to(out).parts[0].encode()


def test_a_generated_capture_exports_in_bounded_chunks(tmp_path, monkeypatch):
    pcap = tmp_path / "gen.pcap"
    write_pcap(pcap, 60_000)
    seen = []
    real = export.packet_table
    monkeypatch.setattr(
        export, "packet_table", lambda cap, *a, **k: seen.append(len(cap)) or real(cap, *a, **k)
    )
    out = tmp_path / "exp"
    doc = export_captures([pcap], out, chunk_packets=7_000, row_group=5_000)
    assert max(seen) <= 7_000 and sum(seen) == 60_000 and len(seen) == 9
    assert doc["captures"][0]["packets"] == 60_000
    check_export(out, [pcap])
    assert (
        len(list((out / "packets").rglob("*.parquet"))) == export.WRITERS
    )  # a file per writer thread
    meta = pq.ParquetFile(next((out / "packets").rglob("*.parquet"))).metadata
    assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) <= 5_000


def test_packets_over_several_hours_land_in_their_hive_partitions(tmp_path):
    pcap = hours_capture(tmp_path / "hours.pcap")
    out = tmp_path / "exp"
    export_captures([pcap], out, chunk_packets=16)
    parts = sorted(str(p.relative_to(out / "packets")) for p in (out / "packets").glob("*/*"))
    assert parts == [
        "date=2023-11-14/hour=20",
        "date=2023-11-14/hour=22",
        "date=2023-11-14/hour=23",
        "date=2023-11-15/hour=0",
    ]
    check_export(out, [pcap])
    con = duck()
    assert con.sql(
        f"SELECT typeof(date), typeof(hour) FROM read_parquet('{out}/packets/**/*.parquet', "
        "hive_partitioning = true) LIMIT 1"
    ).fetchall() == [("DATE", "BIGINT")]
    packets = f"read_parquet('{out}/packets/**/*.parquet', hive_partitioning = true)"
    nonip = con.sql(
        f"SELECT ip_version, src_hi, src_lo, dst_hi, dst_lo FROM {packets} WHERE frame = 61"
    )
    assert nonip.fetchall() == [(0, None, None, None, None)]
    types = con.sql(f"SELECT DISTINCT typeof(src_hi), typeof(dst_lo) FROM {packets}").fetchall()
    assert types == [("UBIGINT", "UBIGINT")]
    ipv4 = con.sql(f"""SELECT count(*), min(ntg_ip(src_hi, src_lo)), min(ntg_ip(dst_hi, dst_lo)) FROM {packets}
                       WHERE src_hi = 0 AND src_lo = ntg_ipv4('198.18.0.1')""").fetchall()
    assert ipv4 == [(40, "198.18.0.1", "198.19.0.1")]
    v6 = _halves(6, "2001:db8:2::10")
    ipv6 = con.sql(f"""SELECT count(*), min(ntg_ip(dst_hi, dst_lo)) FROM {packets}
                       WHERE dst_hi = {v6[0]} AND dst_lo = {v6[1]}""").fetchall()
    assert ipv6 == [(20, "2001:0db8:0002:0000:0000:0000:0000:0010")]


def test_flows_aggregated_per_chunk_equal_the_flow_table(tmp_path):
    pcap = tmp_path / "gen.pcap"
    write_pcap(pcap, 30_000)
    whole = flow_table(read_capture(pcap))
    for chunk in (1_000, 4_096, 1 << 20):
        assert read_stream([pcap], chunk=chunk).totals.flows.table().equals(whole)


def test_real_captures_export_with_the_counts_of_capinfos(tmp_path):
    root = os.environ.get("NTG_SHARED_DATA")
    if not root:
        skip_or_fail("NTG_SHARED_DATA not set: real captures live outside the repo")
    pcaps = sorted(Path(root, "pcaps").glob("*.pcap"))
    assert pcaps, f"no pcaps/*.pcap under NTG_SHARED_DATA={root}"
    out = tmp_path / "real"
    p = subprocess.run(
        [sys.executable, "-m", "testbed", "export", *map(str, pcaps), "--parquet", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    check_export(out, pcaps)
    assert packets_in(duck(), out) == sum(len(read_capture(x)) for x in pcaps)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", "export", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_command_refuses_what_is_not_a_capture_and_a_folder_in_the_way(tmp_path):
    pcap = hours_capture(tmp_path / "a.pcap")
    out = tmp_path / "exp"
    missing = cli(str(pcap), str(tmp_path / "nope.pcap"), "--parquet", str(out))
    assert missing.returncode == 2 and f"{tmp_path / 'nope.pcap'}: No such file" in missing.stderr
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a capture\n")
    wrong = cli(str(text), "--parquet", str(out))
    assert wrong.returncode == 2 and f"{text}: not a pcap or pcapng file" in wrong.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pcap", "notes.txt"]  # nothing written

    ok = cli(str(pcap), "--parquet", str(out), "-q")
    assert ok.returncode == 0, ok.stderr
    assert "a.pcap: 62 packets, 3 flows" in ok.stdout
    again = cli(str(pcap), "--parquet", str(out))
    assert again.returncode == 2 and "not empty" in again.stderr and "--replace" in again.stderr
    shutil.copy(pcap, tmp_path / "b.pcap")
    replaced = cli(
        str(pcap),
        str(tmp_path / "b.pcap"),
        "--parquet",
        str(out),
        "--replace",
        "--compression",
        "zstd",
        "--no-flows",
    )
    assert replaced.returncode == 0, replaced.stderr
    doc = json.loads((out / EXPORT_MANIFEST).read_text())
    assert [c["capture"] for c in doc["captures"]] == ["a.pcap", "b.pcap"]
    assert packets_in(duck(), out) == 2 * 62  # the earlier export replaced, not mixed in
    assert not (out / "flows").exists() and doc["compression"] == "zstd"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial or old folder

    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("a user's file")
    refused = cli(str(tmp_path / "b.pcap"), "--parquet", str(other), "--replace")
    assert refused.returncode == 2 and "not an export" in refused.stderr
    assert (other / "keep.txt").read_text() == "a user's file"


def test_a_failed_export_leaves_nothing(tmp_path, monkeypatch):
    pcap = tmp_path / "gen.pcap"
    write_pcap(pcap, 5_000)

    def boom(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(export, "flow_arrow", boom)
    with pytest.raises(OSError, match="disk on fire"):
        export_captures([pcap], tmp_path / "exp", chunk_packets=1_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen.pcap"]
    with pytest.raises(ExportError, match="no capture given"):
        export_captures([], tmp_path / "exp")


def test_a_damaged_capture_is_exported_up_to_the_damage_with_a_warning(tmp_path):
    pcap = tmp_path / "gen.pcap"
    write_pcap(pcap, 2_000)
    data = pcap.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) - 700])
    read = read_capture(cut)
    assert read.problem is not None
    p = cli(str(cut), "--parquet", str(tmp_path / "exp"))
    assert p.returncode == 0 and "damaged capture" in p.stderr and str(cut) in p.stderr
    assert packets_in(duck(), tmp_path / "exp") == len(read)
    assert json.loads((tmp_path / "exp" / EXPORT_MANIFEST).read_text())["captures"][0]["problem"]


def test_addresses_are_ipv4_mapped_and_plain_ipv6():
    from analysis.export import addresses

    hi = np.array([0, 0x20010DB800010000, 0], np.uint64)
    lo = np.array([0xC6120001, 1, 0], np.uint64)
    got_hi, got_lo = addresses(np.array([4, 6, 0], np.uint8), hi, lo)
    assert list(zip(got_hi.to_pylist(), got_lo.to_pylist())) == [
        _halves(4, "198.18.0.1"),
        _halves(6, "2001:db8:1::1"),
        (None, None),
    ]
    assert [a.null_count for a in addresses(np.array([4, 6], np.uint8), hi[:2], lo[:2])] == [0, 0]
