"""Flow records read back from nfcapd files with `nfdump`, as the shared record table.

nfcapd (the collector) and nfpcapd (a meter that writes the same files itself) store records in
nfcapd.* files; `read_flows(folder)` prints them with `nfdump -R FOLDER -o fmt:...` and turns the
text into analysis.flowmeter.records' COLLECTED_SCHEMA, normalised to its conventions:

- the times come from %ts / %te / %tr, printed under TZ=UTC with millisecond resolution (nfdump
  1.7.1 keeps milliseconds; its %ter prints a wrong fraction, so the epoch forms are not used);
- ICMP and ICMPv6 records print the destination port as `TYPE.CODE`: dport = TYPE * 256 + CODE;
- addresses are printed in full (-6) and compressed here (RFC 5952);
- the TCP flags string (`...AP.SF`, CWR ECE URG ACK PSH RST SYN FIN) becomes its bits.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa

from analysis.flowmeter.records import COLLECTED_SCHEMA, empty_table, records_table
from ntgcore.errors import NtgError
from ntgcore.proc import Process

FIELDS = ("%ts", "%te", "%tr", "%sa", "%da", "%sp", "%dp", "%pr", "%flg", "%ipkt", "%ibyt")
FIELDS_VLAN = (*FIELDS, "%svln")
_FLAG_BITS = (0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01)  # nfdump's order: CEUAPRSF
READ_TIMEOUT_S = 600.0


class ReadBackError(NtgError):
    """nfdump could not read the collected files; the message quotes it."""


def flow_files(folder: Path) -> list[Path]:
    """The nfcapd.* files of FOLDER (finished ones and a `current` one a killed writer left)."""
    return sorted(p for p in Path(folder).glob("nfcapd.*") if p.is_file())


def _flags(text: str) -> int:
    return sum(bit for bit, ch in zip(_FLAG_BITS, text) if ch not in ". ")


def _address(text: str) -> str:
    try:
        return ipaddress.ip_address(text).compressed
    except ValueError:
        return text


def _port(text: str) -> int:
    if "." in text:  # ICMP: TYPE.CODE
        itype, _, code = text.partition(".")
        return int(itype) * 256 + int(code)
    return int(text)


def _ms_times(texts: list[str]) -> pa.Array:
    """`YYYY-MM-DD hh:mm:ss.mmm` (UTC) -> ns since the epoch."""
    iso = np.array([t.replace(" ", "T", 1) for t in texts], dtype="datetime64[ms]")
    return pa.array(iso.astype(np.int64) * 1_000_000)


def _mapped(values: list[str], fn) -> list:
    """FN over VALUES, computed once per distinct value (ports, addresses, flags repeat)."""
    cache: dict[str, object] = {}
    out = []
    for v in values:
        r = cache.get(v)
        if r is None:
            r = cache[v] = fn(v)
        out.append(r)
    return out


def parse_flows(text: str, with_vlan: bool = True) -> pa.Table:
    """nfdump's `fmt:` lines (FIELDS(_VLAN) joined by `|`) as a COLLECTED_SCHEMA table; lines
    that are not records (`No matching flows`, a summary) are skipped."""
    width = len(FIELDS_VLAN if with_vlan else FIELDS)
    rows = [
        [f.strip() for f in line.split("|")]
        for line in text.splitlines()
        if line.count("|") == width - 1
    ]
    if not rows:
        return empty_table(COLLECTED_SCHEMA)
    cols = list(zip(*rows))
    first = _ms_times(list(cols[0]))
    return records_table(
        {
            "src": _mapped(list(cols[3]), _address),
            "dst": _mapped(list(cols[4]), _address),
            "sport": _mapped(list(cols[5]), _port),
            "dport": _mapped(list(cols[6]), _port),
            "proto": [int(p) for p in cols[7]],
            "vlan": [int(v) for v in cols[11]] if with_vlan else [0] * len(rows),
            "packets": [int(p) for p in cols[9]],
            "bytes": [int(b) for b in cols[10]],
            "first_ns": first,
            "last_ns": _ms_times(list(cols[1])),
            "tcp_flags": _mapped(list(cols[8]), _flags),
            "received_ns": _ms_times(list(cols[2])),
        },
        COLLECTED_SCHEMA,
    )


def read_flows(folder: Path, log: Path | None = None) -> pa.Table:
    """The records of every nfcapd.* file in FOLDER (none: an empty table). `log`: where
    nfdump's own messages go (kept beside the records)."""
    if not flow_files(folder):
        return empty_table(COLLECTED_SCHEMA)
    return _read(["-R", str(folder)], folder, log)


def read_file(path: Path) -> pa.Table:
    """The records of one nfcapd file (what `testbed learn` reads from an nfdump input)."""
    return _read(["-r", str(path)], path, None)


def _read(source: list[str], where: Path, log: Path | None) -> pa.Table:
    fmt = "fmt:" + "|".join(FIELDS_VLAN)
    proc = Process(
        "nfdump",
        ["env", "TZ=UTC", "nfdump", "-q", "-N", "-6", *source, "-o", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        proc.start()
    except OSError as exc:
        raise ReadBackError(
            f"cannot run nfdump: {exc}; install it with `apt-get install nfdump`"
        ) from None
    out = proc.communicate(timeout=READ_TIMEOUT_S)
    if out is None:
        raise ReadBackError(f"nfdump did not read {where} within {READ_TIMEOUT_S:g}s")
    stdout, stderr = out
    if log is not None:
        log.write_bytes(stderr)
    if proc.record.exit_code != 0:
        said = stderr.decode(errors="replace").strip().replace("\n", " / ")
        raise ReadBackError(
            f"nfdump could not read the records in {where} ({proc.record.status}): "
            f"{said or '(nothing on stderr)'}"
        )
    return parse_flows(stdout.decode(errors="replace"))


__all__ = ["ReadBackError", "flow_files", "parse_flows", "read_file", "read_flows"]
