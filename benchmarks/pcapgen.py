"""Synthetic captures straight from numpy, for the benchmarks and the tests that need many packets:
nanosecond pcap, Ethernet frames of 64..1,500 bytes (simple IMIX), UDP and TCP over IPv4 and IPv6,
about 130 MB/s to write.

    from benchmarks.pcapgen import write_pcap
    write_pcap(Path("big.pcap"), 1_000_000)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

T0 = 1_700_000_000_000_000_000
CHUNK = 250_000
# (ip version, L4 protocol, header bytes up to the payload)
KINDS = [(4, 17, 42), (4, 6, 54), (6, 17, 62), (6, 6, 74)]
KIND_WEIGHTS = [0.45, 0.25, 0.2, 0.1]


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian bytes of VALUES as a (n, width) uint8 matrix."""
    a = np.ascontiguousarray(values.astype(dtype))
    return a.view(np.uint8).reshape(len(a), -1)


def _headers(
    kind: int, n: int, length: np.ndarray, flow: np.ndarray, idx: np.ndarray
) -> np.ndarray:
    ver, proto, hl = KINDS[kind]
    h = np.zeros((n, hl), np.uint8)
    h[:, 0:12] = np.frombuffer(bytes.fromhex("020000000002020000000001"), np.uint8)
    if ver == 4:
        h[:, 12:14] = (0x08, 0x00)
        h[:, 14] = 0x45
        h[:, 16:18] = _be(length - 14, ">u2")
        h[:, 18:20] = _be(idx & 0xFFFF, ">u2")
        h[:, 20] = 0x40
        h[:, 22] = 64
        h[:, 23] = proto
        h[:, 26:30] = _be(0xC6120000 + (flow & 0xFFFF), ">u4")  # 198.18.x.y
        h[:, 30:34] = _be(0xC6130000 + (flow >> 4 & 0xFFFF), ">u4")
        l4 = 34
    else:
        h[:, 12:14] = (0x86, 0xDD)
        h[:, 14] = 0x60
        h[:, 18:20] = _be(length - 54, ">u2")
        h[:, 20] = proto
        h[:, 21] = 64
        h[:, 22:26] = (0x20, 0x01, 0x0D, 0xB8)  # 2001:db8::/32
        h[:, 30:38] = _be(flow, ">u8")
        h[:, 38:42] = (0x20, 0x01, 0x0D, 0xB8)
        h[:, 42] = 1
        h[:, 46:54] = _be(flow * 7, ">u8")
        l4 = 54
    h[:, l4 : l4 + 2] = _be(1024 + flow % 60000, ">u2")
    h[:, l4 + 2 : l4 + 4] = _be(np.full(n, 9), ">u2")  # discard
    if proto == 17:
        h[:, l4 + 4 : l4 + 6] = _be(length - l4, ">u2")
    else:
        h[:, l4 + 4 : l4 + 8] = _be(idx * 1460, ">u4")
        h[:, l4 + 12] = 0x50
        h[:, l4 + 13] = 0x18
        h[:, l4 + 14 : l4 + 16] = (0xFF, 0xFF)
    return h


def write_pcap(
    path: Path,
    packets: int,
    prefix_path: Path | None = None,
    prefix: int = 0,
    seed: int = 1,
    gap_ns: int = 1000,
    jitter_ns: int = 500,
    flows: int = 20_000,
    t0_ns: int = T0,
) -> int:
    """Write PACKETS frames to PATH (and the first PREFIX of them to PREFIX_PATH); returns bytes.

    Packet i is stamped T0_NS + i × GAP_NS + a random 0..JITTER_NS-1 (a jitter larger than the
    gap makes the capture unsorted); FLOWS distinct source addresses and ports per kind."""
    rng = np.random.default_rng(seed)
    header = (
        np.array([0xA1B23C4D], "<u4").tobytes()
        + np.array([2, 4], "<u2").tobytes()
        + np.array([0, 0, 65535, 1], "<u4").tobytes()
    )
    written = len(header)
    pre = open(prefix_path, "wb") if prefix_path else None
    with open(path, "wb") as out:
        out.write(header)
        if pre:
            pre.write(header)
        for start in range(0, packets, CHUNK):
            n = min(CHUNK, packets - start)
            idx = np.arange(start, start + n, dtype=np.int64)
            kind = rng.choice(4, n, p=KIND_WEIGHTS)
            imix = rng.choice(3, n, p=[7 / 12, 4 / 12, 1 / 12])
            length = np.choose(
                imix,
                [rng.integers(64, 128, n), rng.integers(128, 1024, n), rng.integers(1024, 1501, n)],
            )
            length = np.maximum(length, np.array([k[2] for k in KINDS])[kind])
            flow = rng.integers(0, flows, n)
            rec = np.zeros((n, 4), "<u4")
            ts = t0_ns + idx * gap_ns + rng.integers(0, jitter_ns, n)
            rec[:, 0] = ts // 1_000_000_000
            rec[:, 1] = ts % 1_000_000_000
            rec[:, 2] = length
            rec[:, 3] = length
            size = 16 + length
            ends = np.cumsum(size)
            offs = ends - size
            buf = np.zeros(int(ends[-1]), np.uint8)
            cols = offs[:, None] + np.arange(16)
            buf[cols] = rec.view(np.uint8).reshape(n, 16)
            for k in range(4):
                sel = np.flatnonzero(kind == k)
                h = _headers(k, len(sel), length[sel], flow[sel], idx[sel])
                buf[(offs[sel] + 16)[:, None] + np.arange(h.shape[1])] = h
            out.write(buf.data)
            written += len(buf)
            if pre and start < prefix:
                m = min(prefix - start, n)
                pre.write(buf[: int(ends[m - 1])].data)
    if pre:
        pre.close()
    return written
