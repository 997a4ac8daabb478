"""Argus (Debian packages argus-server and argus-client, 3.0.8) as a flow meter. It has no
NetFlow export: `argus` writes its own bidirectional records to a file (version `argus`), read
back with `ra` and turned into two unidirectional rows (the reply direction only when it had
packets). `-X` drops /etc/argus.conf (Debian's sets a 5 s status interval).

What it cannot give: per-direction first/last times (both rows carry the record's), a TCP flag
union (0), the ICMP code (dport = type * 256), its idle timeouts (fixed inside argus), a table
size and a VLAN key. The active timeout is its status interval (`-S`, whole seconds). Its bytes
are frame bytes (L2), as it counts them. ICMP errors are attached to the flow they quote, not
reported as flows."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field

from analysis.flowmeter.records import COLLECTED_SCHEMA, empty_table, records_table
from ntgcore.parts import DutKind
from ntgcore.proc import Process, Tool

from ..base import Meter, MeterError, MeterSpec, Version, tail
from ..live import meter_kind

OUTPUT = "argus.out"
RA_FIELDS = ("stime", "ltime", "saddr", "sport", "daddr", "dport", "proto")
RA_COUNTS = ("spkts", "dpkts", "sbytes", "dbytes", "svid")
ICMP = (1, 58)


class ArgusSpec(MeterSpec):
    meter: ClassVar[str] = "argus"
    versions: ClassVar[tuple[Version, ...]] = ("argus",)
    exports: ClassVar[bool] = False
    cannot: ClassVar[dict[str, str]] = {
        "idle_timeout": "argus's idle timeouts are fixed inside it (no option sets them)",
        "max_flows": "argus has no option for its flow table's size",
        "key_vlan": "argus keys flows on addresses, protocol and ports only",
    }
    kind: Literal["argus"] = Field("argus", description="argus: its own bidirectional records.")
    version: Version = Field("argus", description="argus: its own record format.")


def _port(text: str, proto: int) -> int:
    if not text:
        return 0
    value = int(text, 16) if text.startswith("0x") else int(text)
    return value


def parse_ra(text: str) -> pa.Table:
    """`ra -c , -s RA_FIELDS RA_COUNTS` lines -> COLLECTED_SCHEMA, two rows per record."""
    fwd: dict[str, list] = {k: [] for k in COLLECTED_SCHEMA.names}
    rows = [line.split(",") for line in text.splitlines()[1:] if line.count(",") == 11]
    for r in rows:
        stime, ltime, sa, sp, da, dp, proto_t = r[:7]
        if not proto_t.isdigit():
            continue  # man (management) records
        proto = int(proto_t)
        if proto > 255:  # not IP: argus keys other frames by their ethertype (0x9000: loopback)
            continue
        spkts, dpkts, sbytes, dbytes = (int(x or 0) for x in r[7:11])
        vlan = int(r[11]) if r[11].strip().isdigit() else 0
        first = int(round(float(stime) * 1e6)) * 1000
        last = int(round(float(ltime) * 1e6)) * 1000
        if proto in ICMP:  # sport: the type; dport: the echo id (no code)
            sport, dport = 0, (_port(sp, proto) & 0xFF) * 256
            back = (0, dport)
        else:
            sport, dport = _port(sp, proto), _port(dp, proto)
            back = (dport, sport)
        for src, dst, ports, pkts, octets in (
            (sa, da, (sport, dport), spkts, sbytes),
            (da, sa, back, dpkts, dbytes),
        ):
            if pkts == 0:
                continue
            for k, v in zip(
                COLLECTED_SCHEMA.names,
                (src, dst, *ports, proto, vlan, pkts, octets, first, last, 0, None),
            ):
                fwd[k].append(v)
    if not fwd["src"]:
        return empty_table(COLLECTED_SCHEMA)
    return records_table(fwd, COLLECTED_SCHEMA)


class Argus(Meter):
    name = "argus"
    package = "argus-server"
    tools = (Tool("argus", "argus-server"), Tool("ra", "argus-client"))
    spec = ArgusSpec
    summary = "argus (ra): its own bidirectional records"

    def live_argv(self, spec, iface, collector, workdir) -> list[str]:
        out = str(workdir / OUTPUT)
        return ["argus", "-X", "-i", iface, "-w", out, "-S", str(spec.active_s)]

    def pcap_argv(self, spec, pcap, collector, workdir) -> list[str]:
        out = str(workdir / OUTPUT)
        return ["argus", "-X", "-r", str(pcap), "-w", out, "-S", str(spec.active_s)]

    def clear(self, workdir: Path) -> None:
        (workdir / OUTPUT).unlink(missing_ok=True)

    def own_records(self, workdir: Path) -> pa.Table:
        path = workdir / OUTPUT
        if not path.exists() or path.stat().st_size == 0:
            return empty_table(COLLECTED_SCHEMA)
        fields = ",".join((*RA_FIELDS, *RA_COUNTS))
        proc = Process(
            "ra",
            ["ra", "-r", str(path), "-nn", "-u", "-p", "6", "-c", ",", "-s", *fields.split(",")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out = proc.start().communicate(timeout=600)
        except OSError as exc:
            raise MeterError(f"cannot run ra: {exc}; `apt-get install argus-client`") from None
        if out is None or proc.record.exit_code != 0:
            said = tail(out[1].decode(errors="replace")) if out else "(timed out)"
            raise MeterError(f"ra could not read {path}: {said}")
        return parse_ra(out[0].decode(errors="replace"))

    def counters(self, workdir: Path, output: str) -> dict[str, Any]:
        return {}


METER = Argus()
KIND: DutKind = meter_kind(METER)
