"""Sessions from flow records: nfdump's files (what nfcapd writes from NetFlow/IPFIX, or nfpcapd
from a capture) and our Parquet flow tables (`testbed export --parquet` flows, a run folder's
tables/flows.parquet).

A record is one direction of a 5-tuple over a time span. The records of a tuple in either
direction, sorted by their first packet, are one session while each starts within the idle
timeout (sessions.IDLE_NS) of the latest end before it; the client is the side of the session's
earliest record (a tie: the higher port). What records cannot tell is set so: payload = bytes less
the headers of every packet (IPv4 20 / IPv6 40, TCP 20 / UDP 8, and 14 of Ethernet for our flow
tables, which count frames; nfdump counts IP bytes), rounds 1 for TCP and the datagrams of the
busier side for UDP, rtt, think and linger unknown, largest payload unknown for TCP and the larger
side's mean datagram for UDP, flight unknown; the close from the TCP flags when the record has
them (nfdump), else unknown.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ntgcore.errors import BadInput

from .sessions import FIN, IDLE_NS, RST, SessionTable

NFDUMP_MAGIC = b"\x0c\xa5"  # nffile.h MAGIC 0xA50C, little-endian, then the layout version
IPV4_MAPPED = 0xFFFF_0000_0000
MAX_RECORD_PACKETS = 2**40  # a record's numbers beyond these are damage, not traffic
MAX_RECORD_BYTES = 2**50
MAX_TIME_NS = 2**61


class RecordError(BadInput):
    """Flow records that cannot be read."""


def _records_frame(cols: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame(cols, copy=False)


def _address_parts(texts: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IP version, hi and lo halves of address texts (computed once per distinct address)."""
    codes, uniq = pd.factorize(texts)
    ver = np.zeros(len(uniq), np.uint8)
    hi = np.zeros(len(uniq), np.uint64)
    lo = np.zeros(len(uniq), np.uint64)
    for i, text in enumerate(uniq):
        try:
            a = ipaddress.ip_address(str(text).strip())
        except ValueError:
            continue
        if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
            a = a.ipv4_mapped
        v = int(a)
        ver[i] = a.version
        hi[i] = v >> 64
        lo[i] = v & (2**64 - 1)
    return ver[codes], hi[codes], lo[codes]


def records_of_table(t: pa.Table) -> pd.DataFrame:
    """The records of a flow-record table with text addresses (analysis.flowmeter.records'
    RECORD_SCHEMA: what the testbed's nfdump reader, testbed/meters/collector/nfdump.py, makes
    of an nfcapd file; bytes are IP bytes)."""
    f = t.select(["src", "dst", "sport", "dport", "proto", "packets", "bytes", "first_ns",
                  "last_ns", "tcp_flags"]).to_pandas()  # fmt: skip
    ver, shi, slo = _address_parts(f["src"])
    _, dhi, dlo = _address_parts(f["dst"])
    return _records_frame(
        {
            "ip_version": ver,
            "proto": f["proto"].to_numpy().astype(np.uint8),
            "src_hi": shi,
            "src_lo": slo,
            "dst_hi": dhi,
            "dst_lo": dlo,
            "sport": f["sport"].to_numpy().clip(0, 65535).astype(np.uint16),
            "dport": f["dport"].to_numpy().clip(0, 65535).astype(np.uint16),
            "packets": f["packets"].to_numpy(np.int64),
            "bytes": f["bytes"].to_numpy(np.int64),
            "first_ns": f["first_ns"].to_numpy(np.int64),
            "last_ns": f["last_ns"].to_numpy(np.int64),
            "tcp_flags": f["tcp_flags"].to_numpy().astype(np.uint8),
            "frame_bytes": np.zeros(len(f), bool),
        }
    )


PARQUET_NEEDS = ("proto", "sport", "dport", "packets", "bytes", "first_ns", "last_ns")


def parquet_files(path: Path) -> list[Path]:
    """PATH itself, or the flow-table Parquet files under a folder (an export's flows/, a run
    folder's tables/flows.parquet)."""
    if path.is_file():
        return [path]
    for sub in ("flows", "tables/flows.parquet"):
        p = path / sub
        if p.is_file():
            return [p]
        if p.is_dir():
            return sorted(p.rglob("*.parquet"))
    return sorted(path.rglob("*.parquet"))


def read_parquet(path: Path) -> pd.DataFrame:
    """The records of one flow-table Parquet file (either layout: *_hi/*_lo or src/dst text)."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise RecordError(f"{path}: not a readable Parquet file ({exc})") from None
    names = set(schema.names)
    missing = [c for c in PARQUET_NEEDS if c not in names]
    split = {"src_hi", "src_lo", "dst_hi", "dst_lo"} <= names
    if missing or not (split or {"src", "dst"} <= names):
        raise RecordError(
            f"{path}: not a flow table: it lacks "
            + ", ".join(missing or ["src/dst (or src_hi, src_lo, dst_hi, dst_lo)"])
            + " (expected `testbed export --parquet` flows or a run folder's tables/flows.parquet)"
        )
    cols = [
        *PARQUET_NEEDS,
        *(("src_hi", "src_lo", "dst_hi", "dst_lo") if split else ("src", "dst")),
    ]
    try:
        t = pq.read_table(path, columns=cols).to_pandas()
    except (OSError, pa.ArrowException) as exc:
        raise RecordError(f"{path}: cannot read the flow table ({exc})") from None
    t = t.dropna()
    out: dict[str, np.ndarray] = {}
    if split:
        shi, slo = t["src_hi"].to_numpy(np.uint64), t["src_lo"].to_numpy(np.uint64)
        dhi, dlo = t["dst_hi"].to_numpy(np.uint64), t["dst_lo"].to_numpy(np.uint64)
        v4 = (shi == 0) & ((slo >> np.uint64(32)) == np.uint64(0xFFFF))
        out["ip_version"] = np.where(v4, 4, 6).astype(np.uint8)
        mask = np.uint64(0xFFFFFFFF)
        out.update(
            src_hi=np.where(v4, 0, shi).astype(np.uint64),
            src_lo=np.where(v4, slo & mask, slo).astype(np.uint64),
            dst_hi=np.where(v4, 0, dhi).astype(np.uint64),
            dst_lo=np.where(v4, dlo & mask, dlo).astype(np.uint64),
        )
    else:
        ver, shi, slo = _address_parts(t["src"])
        _, dhi, dlo = _address_parts(t["dst"])
        out.update(ip_version=ver, src_hi=shi, src_lo=slo, dst_hi=dhi, dst_lo=dlo)
    for c in PARQUET_NEEDS:
        out[c] = t[c].to_numpy()
    out["tcp_flags"] = np.zeros(len(t), np.uint8)
    out["frame_bytes"] = np.ones(len(t), bool)
    return _records_frame(out)


def sessions_from_records(r: pd.DataFrame) -> tuple[SessionTable, int]:
    """Pair the records of R into sessions; also returns how many records were skipped (not
    TCP/UDP, not IP, or with impossible numbers: packets outside 1..2^40, bytes outside
    0..2^50, times beyond 2^61 ns or ending before they start)."""
    if len(r) == 0:
        return _empty(), 0
    keep = (r["ip_version"].to_numpy() > 0) & r["proto"].isin([6, 17]).to_numpy()
    # numbers no meter writes (a damaged or hand-made table): left out, counted as skipped
    pk, by = r["packets"].to_numpy(np.float64), r["bytes"].to_numpy(np.float64)
    first, last = r["first_ns"].to_numpy(np.float64), r["last_ns"].to_numpy(np.float64)
    keep &= (pk >= 1) & (pk <= MAX_RECORD_PACKETS) & (by >= 0) & (by <= MAX_RECORD_BYTES)
    keep &= (np.abs(first) <= MAX_TIME_NS) & (np.abs(last) <= MAX_TIME_NS) & (last >= first)
    skipped = int(len(r) - keep.sum())
    r = r[keep]
    if len(r) == 0:
        return _empty(), skipped
    shi, slo, sp = (r[c].to_numpy() for c in ("src_hi", "src_lo", "sport"))
    dhi, dlo, dp = (r[c].to_numpy() for c in ("dst_hi", "dst_lo", "dport"))
    d = (shi > dhi) | ((shi == dhi) & ((slo > dlo) | ((slo == dlo) & (sp > dp))))
    key = pd.DataFrame(
        {
            "v": r["ip_version"].to_numpy(),
            "p": r["proto"].to_numpy(),
            "ah": np.where(d, dhi, shi),
            "al": np.where(d, dlo, slo),
            "ap": np.where(d, dp, sp),
            "bh": np.where(d, shi, dhi),
            "bl": np.where(d, slo, dlo),
            "bp": np.where(d, sp, dp),
        }
    )
    code = key.groupby(list(key.columns), sort=False, observed=True).ngroup().to_numpy()
    first = r["first_ns"].to_numpy(np.int64)
    last = r["last_ns"].to_numpy(np.int64)
    order = np.lexsort((first, code))
    code, first, last, d = code[order], first[order], last[order], d[order]
    rr = r.iloc[order]
    proto = rr["proto"].to_numpy()
    idle = np.where(proto == 6, IDLE_NS[6], IDLE_NS[17])
    newkey = np.r_[True, code[1:] != code[:-1]]
    # the latest end before each record in its tuple (a running maximum restarted per tuple)
    run_last = pd.Series(last).groupby(code).cummax().to_numpy()
    prev_end = np.r_[0, run_last[:-1]]
    start = newkey | (first - prev_end > idle)
    seg = np.flatnonzero(start)
    n = len(seg)
    ver = rr["ip_version"].to_numpy()[seg]
    head_d = d[seg]
    sp_ = rr["sport"].to_numpy()
    dp_ = rr["dport"].to_numpy()
    # the client: the side of the earliest record (a tie at the same time: the higher port)
    client_is_src = np.ones(n, bool)
    nxt = np.minimum(seg + 1, len(first) - 1)
    tie = (seg + 1 < len(first)) & ~start[nxt] & (first[nxt] == first[seg])
    client_is_src[tie] = sp_[seg][tie] >= dp_[seg][tie]
    cdir = np.where(client_is_src, head_d, ~head_d)  # True: B is the client
    sid = np.cumsum(start) - 1
    from_client = d == cdir[sid]
    hdr = np.where(ver == 4, 20, 40)[sid] + np.where(proto == 6, 20, 8)
    hdr = hdr + np.where(rr["frame_bytes"].to_numpy(), 14, 0)
    pk = rr["packets"].to_numpy(np.int64)
    by = rr["bytes"].to_numpy(np.int64)
    pay = np.maximum(by - pk * hdr, 0)
    flags = rr["tcp_flags"].to_numpy(np.uint8)

    def both(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.add.reduceat(np.where(from_client, v, 0), seg),
            np.add.reduceat(np.where(from_client, 0, v), seg),
        )

    cp, spk = both(pk)
    cb, sb = both(by)
    cpay, spay = both(pay)
    fl = np.bitwise_or.reduceat(flags, seg)
    # UDP: a datagram a side per round, each of its side's mean payload (records have no more)
    udp = proto[seg] == 17
    datagram = np.maximum(-(-cpay // np.maximum(cp, 1)), -(-spay // np.maximum(spk, 1)))
    k = key.iloc[order].iloc[seg]
    a = (k["ah"].to_numpy(), k["al"].to_numpy(), k["ap"].to_numpy())
    b = (k["bh"].to_numpy(), k["bl"].to_numpy(), k["bp"].to_numpy())
    cb_ = cdir  # True: B is the client
    t = SessionTable(
        ip_version=ver.astype(np.uint8),
        proto=proto[seg].astype(np.uint8),
        client_hi=np.where(cb_, b[0], a[0]).astype(np.uint64),
        client_lo=np.where(cb_, b[1], a[1]).astype(np.uint64),
        server_hi=np.where(cb_, a[0], b[0]).astype(np.uint64),
        server_lo=np.where(cb_, a[1], b[1]).astype(np.uint64),
        client_port=np.where(cb_, b[2], a[2]).astype(np.uint16),
        server_port=np.where(cb_, a[2], b[2]).astype(np.uint16),
        start_ns=np.minimum.reduceat(first, seg),
        end_ns=np.maximum.reduceat(last, seg),
        client_packets=cp,
        server_packets=spk,
        client_bytes=cb,
        server_bytes=sb,
        client_payload=cpay,
        server_payload=spay,
        rounds=np.where(udp, np.maximum(cp, spk), 1).astype(np.int64),
        rtt_ns=np.full(n, -1, np.int64),
        max_payload=np.where(udp, datagram, -1).astype(np.int64),
        max_flight=np.zeros(n, np.int64),
        min_gap_ns=np.full(n, -1, np.int64),
        close=np.where(fl & RST, 2, np.where(fl & FIN, 1, 0)).astype(np.int8),
        think_ns=np.zeros(n, np.int64),
        think_count=np.zeros(n, np.int64),
        linger_ns=np.full(n, -1, np.int64),
        midstream=np.zeros(n, bool),  # records cannot tell a handshake
    )
    return t.take(np.argsort(t.start_ns, kind="stable")), skipped


def _empty() -> SessionTable:
    z = np.zeros(0, np.int64)
    return SessionTable(**{name: z for name in SessionTable.__dataclass_fields__})


__all__ = [
    "RecordError",
    "NFDUMP_MAGIC",
    "records_of_table",
    "read_parquet",
    "parquet_files",
    "sessions_from_records",
]
