"""What a meter put on the wire: the flow records in its captured export packets.

The collector part captures the UDP packets on the meter's loopback (export.pcap); here they
are read back with the one pcap reader (analysis.capture.iter_frames) and their NetFlow v5, v9
and IPFIX headers and sets are walked, so that records lost between the meter and the collector
(exported, not collected) are told apart from records the meter never made:

- v5 (RFC-less, Cisco): the header's `count` is the number of records;
- v9 (RFC 3954): data records per data flowset = its length / its template's record length;
  options data (the meter's own statistics) are not flow records and are not counted;
- IPFIX (RFC 7011): the same with template sets (2), options template sets (3) and variable
  length fields (length 65535: one byte, or 255 and two more).

A data set whose template never came is counted in `unknown_sets` (its records cannot be told).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from analysis.capture import iter_frames

_ETH = 14
_V9_HDR, _IPFIX_HDR, _V5_HDR = 20, 16, 24
_VARLEN = 0xFFFF


@dataclass
class ExportCount:
    """The export packets of one capture and the flow records in them."""

    packets: int = 0  # UDP packets carrying NetFlow/IPFIX to `port` (all ports when None)
    records: int = 0  # flow data records in them
    options_records: int = 0  # options data records (the meter's own statistics)
    unknown_sets: int = 0  # data sets sent before their template (records not countable)
    versions: Counter = field(default_factory=Counter)  # packets by export version
    other_ports: Counter = field(default_factory=Counter)  # UDP packets to any other port
    first_ns: int | None = None
    last_ns: int | None = None

    def as_dict(self) -> dict:
        return {
            "packets": self.packets,
            "records": self.records,
            "options_records": self.options_records,
            "unknown_sets": self.unknown_sets,
            "versions": {str(k): v for k, v in sorted(self.versions.items(), key=str)},
            "other_ports": {str(k): v for k, v in sorted(self.other_ports.items())},
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
        }


def _udp_payload(frame: bytes) -> tuple[int, bytes] | None:
    """(destination port, payload) of an Ethernet/IPv4-or-IPv6/UDP frame, else None."""
    if len(frame) < _ETH + 28:
        return None
    etype = struct.unpack_from("!H", frame, 12)[0]
    if etype == 0x0800:
        ihl = (frame[_ETH] & 0x0F) * 4
        if frame[_ETH + 9] != 17:
            return None
        udp = _ETH + ihl
    elif etype == 0x86DD:
        if frame[_ETH + 6] != 17:
            return None
        udp = _ETH + 40
    else:
        return None
    if len(frame) < udp + 8:
        return None
    dport, length = struct.unpack_from("!HH", frame, udp + 2)
    return dport, frame[udp + 8 : udp + max(length, 8)]


class _Templates:
    """Templates by (version, domain, template id): (fields as lengths, options or not)."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, int, int], tuple[list[int], bool]] = {}

    def learn(self, key: tuple[int, int, int], lengths: list[int], options: bool) -> None:
        self.known[key] = (lengths, options)


def _v9_templates(body: bytes, domain: int, tpl: _Templates, options: bool) -> None:
    pos = 0
    while pos + 4 <= len(body):
        if options:  # template id, scope length, option length (bytes of field specs)
            if pos + 6 > len(body):
                return
            tid, scope_len, opt_len = struct.unpack_from("!HHH", body, pos)
            n, pos = (scope_len + opt_len) // 4, pos + 6
        else:
            tid, n = struct.unpack_from("!HH", body, pos)
            pos += 4
        if tid < 256 or pos + 4 * n > len(body):
            return
        lengths = [struct.unpack_from("!HH", body, pos + 4 * i)[1] for i in range(n)]
        pos += 4 * n
        tpl.learn((9, domain, tid), lengths, options)
        if options:  # an options template flowset is padded to 4 bytes: one template each
            return


def _ipfix_templates(body: bytes, domain: int, tpl: _Templates, options: bool) -> None:
    pos = 0
    while pos + 4 <= len(body):
        tid, n = struct.unpack_from("!HH", body, pos)
        pos += 6 if options else 4
        if tid < 256:  # padding
            return
        lengths = []
        for _ in range(n):
            if pos + 4 > len(body):
                return
            ftype, flen = struct.unpack_from("!HH", body, pos)
            pos += 8 if ftype & 0x8000 else 4
            lengths.append(flen)
        if n:  # field count 0: a template withdrawal
            tpl.learn((10, domain, tid), lengths, options)


def _data_records(body: bytes, lengths: list[int]) -> int:
    """Records in a data set body (its padding, shorter than a record, is not one)."""
    if _VARLEN not in lengths:
        size = sum(lengths)
        return len(body) // size if size else 0
    count, pos = 0, 0
    while pos < len(body):
        start = pos
        for flen in lengths:
            if flen != _VARLEN:
                pos += flen
                continue
            if pos >= len(body):
                return count
            n = body[pos]
            if n == 255:
                if pos + 3 > len(body):
                    return count
                n = struct.unpack_from("!H", body, pos + 1)[0]
                pos += 3 + n
            else:
                pos += 1 + n
        if pos > len(body) or pos == start:
            break
        count += 1
    return count


def _sets(
    msg: bytes, version: int, domain: int, start: int, tpl: _Templates, out: ExportCount
) -> None:
    pos = start
    while pos + 4 <= len(msg):
        sid, slen = struct.unpack_from("!HH", msg, pos)
        if slen < 4 or pos + slen > len(msg):
            return
        body = msg[pos + 4 : pos + slen]
        pos += slen
        template_id, options_id = (0, 1) if version == 9 else (2, 3)
        if sid in (template_id, options_id):
            parse = _v9_templates if version == 9 else _ipfix_templates
            parse(body, domain, tpl, sid == options_id)
        elif sid >= 256:
            known = tpl.known.get((version, domain, sid))
            if known is None:
                out.unknown_sets += 1
                continue
            lengths, options = known
            n = _data_records(body, lengths)
            if options:
                out.options_records += n
            else:
                out.records += n


def count_message(msg: bytes, tpl: _Templates, out: ExportCount) -> bool:
    """Add one export message's records to OUT; False when it is no NetFlow v5/v9/IPFIX."""
    if len(msg) < 4:
        return False
    version = struct.unpack_from("!H", msg, 0)[0]
    if version == 5 and len(msg) >= _V5_HDR:
        out.records += struct.unpack_from("!H", msg, 2)[0]
    elif version == 9 and len(msg) >= _V9_HDR:
        _sets(msg, 9, struct.unpack_from("!I", msg, 16)[0], _V9_HDR, tpl, out)
    elif version == 10 and len(msg) >= _IPFIX_HDR:
        length = struct.unpack_from("!H", msg, 2)[0]
        _sets(msg[:length], 10, struct.unpack_from("!I", msg, 12)[0], _IPFIX_HDR, tpl, out)
    else:
        return False
    out.versions["ipfix" if version == 10 else version] += 1
    return True


def count_export(pcap: Path, port: int | None = None) -> ExportCount:
    """The NetFlow/IPFIX packets in PCAP sent to PORT (None: any UDP port) and their records;
    UDP packets to other ports are counted by port in `other_ports`."""
    out, tpl = ExportCount(), _Templates()
    if not Path(pcap).exists() or Path(pcap).stat().st_size == 0:
        return out
    for ts_ns, _wire, frame in iter_frames(pcap):
        got = _udp_payload(frame)
        if got is None:
            continue
        dport, payload = got
        if port is not None and dport != port:
            out.other_ports[dport] += 1
            continue
        if count_message(payload, tpl, out):
            out.packets += 1
            out.first_ns = ts_ns if out.first_ns is None else out.first_ns
            out.last_ns = ts_ns
    return out


def exported_records(pcap: Path, port: int | None = None) -> int:
    """The flow records the meter put on the wire (to PORT; None: any port)."""
    return count_export(pcap, port).records


__all__ = ["ExportCount", "count_export", "count_message", "exported_records"]
