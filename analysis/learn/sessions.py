"""Two-way sessions from packets, chunk by chunk, with numpy only (no loop over packets).

A session is the packets of one 5-tuple in either direction (IP version, protocol, the two
address:port endpoints A and B), split in time: a packet starts a new session of
its 5-tuple when the tuple was not seen before, when it comes more than the idle timeout
(IDLE_NS: TCP 120 s, UDP 30 s) after the tuple's previous packet, or when it is a TCP SYN without
ACK whose predecessor in the tuple was not one (a port reused for a new connection; a
retransmitted SYN stays in its session). Only TCP and UDP packets with ports count (later
fragments and other protocols are counted as skipped).

Per chunk the packets are grouped by a 64-bit hash of the tuple (pd.factorize; symmetric: the sum
of its two endpoints' hashes, the larger of which names endpoint B), sorted
by group (stable: file order inside a group; each column gathered once in that order), cut into
the runs that belong to one session, and every per-session sum (a difference of one cumulative
sum), minimum and maximum (one `ufunc.reduceat`; over the few packets concerned where only some
count: SYNs, data packets in a row) is scattered into the session arrays (each session has at
most one run per chunk, so no `ufunc.at`). What is
kept between chunks: per tuple (its hash, sorted, and its current session, last time stamp and
whether its last packet was a SYN) and per session the columns below (about 190 bytes a
session). The result does not depend on the chunk size (tests/test_learn.py checks it). Two tuples whose 64-bit hashes collide are one session (probability about
n^2 / 2^65 for n tuples: 3e-6 for ten million).

Direction 0 is A -> B, 1 is B -> A. The client is decided when the table is made: the side that
sent the first SYN without ACK (TCP), else for TCP the side with the higher port, for UDP the
side that sent the first packet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..capture import Capture

NS = 1_000_000_000
IDLE_NS = {6: 120 * NS, 17: 30 * NS}
NONE = np.iinfo(np.int64).max  # "no time yet" in the min-columns
TIME_LIMIT_NS = 2**62 - 1  # time stamps beyond +-146 years from 1970 are clipped to it
SYN, RST, FIN, ACK = 0x02, 0x04, 0x01, 0x10
_MUL = np.uint64(0x9E3779B97F4A7C15)
_SEED = np.uint64(0x243F6A8885A308D3)


def _mix(h: np.ndarray, col: np.ndarray) -> np.ndarray:
    """H (uint64, changed in place) mixed with COL; returned."""
    with np.errstate(over="ignore"):
        np.bitwise_xor(h, col, out=h)
        np.multiply(h, _MUL, out=h)
        h ^= h >> np.uint64(29)
    return h


def _endpoint_hash(hi: np.ndarray, lo: np.ndarray, port: np.ndarray) -> np.ndarray:
    """The mix of _SEED with HI, LO and PORT."""
    h = np.bitwise_xor(hi, _SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.multiply(h, _MUL, out=h)
    h ^= h >> np.uint64(29)
    return _mix(_mix(h, lo), port)


def _pick(cond: np.ndarray, x: np.ndarray, other: int) -> np.ndarray:
    """np.where(COND, X, OTHER) for int64 X with masks instead of a branch per element (several
    times faster when COND is irregular)."""
    m = cond.astype(np.int64)
    np.negative(m, out=m)  # all ones where COND
    r = x & m
    np.invert(m, out=m)
    m &= other
    r |= m
    return r


def _firsts(runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of RUNS (sorted) and where each first occurs."""
    at = np.flatnonzero(np.r_[True, runs[1:] != runs[:-1]])
    return runs[at], at


def _port_of(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """np.where(COND, X, Y) for ports (uint16) without a branch per element."""
    return y ^ ((x ^ y) * cond)


def _run_sums(x: np.ndarray, ends: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """The sums of X over consecutive runs that cover it, ENDS their last places (one cumulative
    sum: much faster than `np.add.reduceat` over many short runs)."""
    c = np.cumsum(x if x.dtype == bool else x.astype(dtype), dtype=dtype)[ends]  # (faster)
    c[1:] -= c[:-1].copy()
    return c


# The per-session columns (SessionTable before orientation): name -> (dtype, initial value)
_SESSION_COLS: dict[str, tuple[type, int]] = {
    "ip_version": (np.uint8, 0),
    "proto": (np.uint8, 0),
    "a_hi": (np.uint64, 0),
    "a_lo": (np.uint64, 0),
    "a_port": (np.uint16, 0),
    "b_hi": (np.uint64, 0),
    "b_lo": (np.uint64, 0),
    "b_port": (np.uint16, 0),
    "start_ns": (np.int64, NONE),
    "end_ns": (np.int64, np.iinfo(np.int64).min),
    "pkts0": (np.int64, 0),
    "pkts1": (np.int64, 0),
    "wire0": (np.int64, 0),
    "wire1": (np.int64, 0),
    "pay0": (np.int64, 0),
    "pay1": (np.int64, 0),
    "runs0": (np.int32, 0),
    "runs1": (np.int32, 0),
    "last_paydir": (np.int8, -1),
    "first_dir": (np.int8, 0),
    "syn_dir": (np.int8, -1),
    "t_syn": (np.int64, NONE),
    "t_synack": (np.int64, NONE),
    "t_ack": (np.int64, NONE),
    "t_other": (np.int64, NONE),  # first packet against first_dir
    "max_payload": (np.int64, 0),
    "max_flight": (np.int32, 0),
    "last_dir": (np.int8, -1),  # direction of the session's last packet so far
    "open_run": (np.int32, 0),  # data segments of its run still open at a chunk's end
    "last_t": (np.int64, NONE),  # time of its last packet so far
    "last_data": (np.int8, 0),  # whether that one carried payload
    "min_gap": (np.int64, NONE),  # smallest spacing of two data packets in a row of one side
    "flags": (np.uint8, 0),  # OR of the TCP flags seen
    "first_packet": (np.int64, 0),  # the index in the trace of its first packet (ties of time)
    "first_paydir": (np.int8, -1),  # direction of its first payload packet (the opener)
    "think_sum": (np.int64, 0),  # pauses before later rounds' first packets: their sum
    "think_n": (np.int32, 0),  # ... and how many
    "linger": (np.int64, -1),  # pause before its first FIN/RST (-1: none seen)
}


@dataclass
class SessionTable:
    """One row per session, oriented client -> server, in order of start. Times in ns; byte
    columns are L4 payload bytes (`*_payload`) and frame bytes on the wire (`*_bytes`, for
    records: what the record counted); `rounds` the request/response exchanges (payload
    direction runs), `rtt_ns` -1 where unknown, `max_payload` the largest payload of a packet
    (-1 unknown), `max_flight` the longest run of data segments of one side uninterrupted by
    the other (0 unknown), `min_gap_ns` the smallest spacing of two data packets of one side in
    a row (-1 unknown), `close` 0 none seen, 1 FIN, 2 RST. `think_ns` is the sum of the pauses
    before later rounds' first packets and `think_count` their number (0: none), `linger_ns`
    the pause before the first FIN or RST (0 when it carried data, -1 unknown or none);
    `midstream` a TCP session whose SYN was not seen (packets only).
    UDP: `rounds` is the datagrams of the busier side (one datagram a side per round)."""

    ip_version: np.ndarray
    proto: np.ndarray
    client_hi: np.ndarray
    client_lo: np.ndarray
    server_hi: np.ndarray
    server_lo: np.ndarray
    client_port: np.ndarray
    server_port: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    client_packets: np.ndarray
    server_packets: np.ndarray
    client_bytes: np.ndarray
    server_bytes: np.ndarray
    client_payload: np.ndarray
    server_payload: np.ndarray
    rounds: np.ndarray
    rtt_ns: np.ndarray
    max_payload: np.ndarray
    max_flight: np.ndarray
    min_gap_ns: np.ndarray
    close: np.ndarray
    think_ns: np.ndarray
    think_count: np.ndarray
    linger_ns: np.ndarray
    midstream: np.ndarray  # TCP from packets: no SYN seen (begun before the capture, or cut)

    def __len__(self) -> int:
        return len(self.start_ns)

    def take(self, rows: np.ndarray) -> SessionTable:
        return SessionTable(**{k: v[rows] for k, v in vars(self).items()})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(vars(self), copy=False)


def empty_table() -> SessionTable:
    acc = PacketSessions()
    return acc.table()


class PacketSessions:
    """Sessions of the packets fed in file order (`add(chunk)`), and what else learn needs:
    packet size and same-direction spacing histograms, skipped packet counts."""

    def __init__(self) -> None:
        self._hashes = np.zeros(0, np.uint64)  # sorted tuple hashes
        self._slots = np.zeros(0, np.int64)  # the tuple slot of each
        self._k_sess = np.zeros(0, np.int64)  # per tuple slot: its current session
        self._k_last = np.zeros(0, np.int64)  # ... time of its last packet
        self._k_syn = np.zeros(0, bool)  # ... whether that packet was a SYN without ACK
        self._nk = 0
        self._n = 0  # sessions
        self._s: dict[str, np.ndarray] = {k: np.zeros(0, t) for k, (t, _) in _SESSION_COLS.items()}
        self.packets = 0  # every packet seen
        self.used = 0  # TCP/UDP packets with ports, counted in sessions
        self.skipped: dict[str, int] = {"not IP": 0, "not TCP/UDP": 0, "later fragment": 0}
        self.wire_hist = np.zeros(65536, np.int64)  # frame sizes of the packets used
        self._dg_keys = np.zeros(0, np.int64)  # UDP datagrams by (version, port, side, payload)
        self._dg_counts = np.zeros(0, np.int64)
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def __len__(self) -> int:
        return self._n

    # -- growth ----------------------------------------------------------------------------

    def _grow_sessions(self, extra: int) -> None:
        """Room for EXTRA more sessions (new rows get their initial values when created)."""
        need = self._n + extra
        have = len(self._s["start_ns"])
        if need <= have:
            return
        size = max(need, 2 * have, 4096)
        for name, a in self._s.items():
            grown = np.empty(size, a.dtype)
            grown[: self._n] = a[: self._n]
            self._s[name] = grown

    def _grow_tuples(self, extra: int) -> None:
        need = self._nk + extra
        have = len(self._k_sess)
        if need <= have:
            return
        size = max(need, 2 * have, 4096)
        for name in ("_k_sess", "_k_last", "_k_syn"):
            a = getattr(self, name)
            grown = np.empty(size, a.dtype)
            grown[: self._nk] = a[: self._nk]
            setattr(self, name, grown)

    # -- one chunk -------------------------------------------------------------------------

    def add(self, cap: Capture) -> None:
        n_all = len(cap)
        base = self.packets
        self.packets += n_all
        if n_all == 0:
            return
        ip = cap.ip_version != 0
        l4 = ip & ((cap.proto == 6) | (cap.proto == 17))
        later = l4 & (cap.frag == 2)
        use = l4 & ~later
        n_ip, n_l4, n_use = (int(np.count_nonzero(x)) for x in (ip, l4, use))
        self.skipped["not IP"] += n_all - n_ip
        self.skipped["not TCP/UDP"] += n_ip - n_l4
        self.skipped["later fragment"] += n_l4 - n_use
        if n_use == 0:
            return
        rows = None if n_use == n_all else np.flatnonzero(use)

        def col(name: str) -> np.ndarray:
            a = getattr(cap, name)
            return a if rows is None else a[rows]

        self.used += n_use
        ts = col("ts_ns")
        lo, hi = int(ts.min()), int(ts.max())
        if lo < -TIME_LIMIT_NS or hi > TIME_LIMIT_NS:  # a broken clock: kept in a range whose
            ts = np.clip(ts, -TIME_LIMIT_NS, TIME_LIMIT_NS)  # differences cannot overflow
            lo, hi = max(lo, -TIME_LIMIT_NS), min(hi, TIME_LIMIT_NS)
        self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
        self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)
        wire = col("wire_len")
        self.wire_hist += np.bincount(np.minimum(wire, 65535), minlength=65536)
        proto = col("proto")
        ver = col("ip_version")
        src = (col("src_hi"), col("src_lo"), col("sport"))
        dst = (col("dst_hi"), col("dst_lo"), col("dport"))
        # one hash per endpoint; the tuple's hash is symmetric (their sum), and direction 1
        # means the source is the endpoint with the larger hash (B)
        e_src = _endpoint_hash(*src)
        e_dst = _endpoint_hash(*dst)
        d_all = e_src > e_dst
        with np.errstate(over="ignore"):
            e_src += e_dst
            h = _mix(ver.astype(np.uint64) << np.uint64(8) | proto, e_src)
        del e_src, e_dst
        # (a smaller hash table than the default one of N: often several times faster)
        codes, uniq = pd.factorize(h, size_hint=n_use // 2)
        del h
        slot = self._tuple_slots(uniq)
        if len(uniq) < 2**31:
            codes = codes.astype(np.int32)
        order = np.argsort(codes, kind="stable")
        kc = codes[order]
        del codes
        # the chunk sorted by tuple (file order inside a tuple): each column gathered once
        t = ts[order]
        db = d_all[order]
        dd = db.view(np.int8)
        is_tcp = (proto == 6)[order]
        fl = col("tcp_flags")[order] * is_tcp  # (0 for UDP)
        pay = col("l4_payload")[order]  # uint32
        has = pay > 0
        pure_syn = (fl & (SYN | ACK)) == SYN
        n = len(t)
        first = np.empty(n, bool)
        first[0] = True
        np.not_equal(kc[1:], kc[:-1], out=first[1:])
        fi = np.flatnonzero(first)
        gslot = slot[kc[fi]]  # the tuple slot of each group
        # the spacing of each packet from its tuple's previous one (the first of a group: from
        # the tuple's last packet of a previous chunk)
        gap = np.empty(n, np.int64)
        gap[0] = 0
        np.subtract(t[1:], t[:-1], out=gap[1:])
        gap[fi] = t[fi] - self._k_last[gslot]
        start = np.empty(n, bool)
        start[0] = False
        np.greater(pure_syn[1:], pure_syn[:-1], out=start[1:])  # a SYN after a non-SYN
        start[fi] = (pure_syn[fi] & ~self._k_syn[gslot]) | (self._k_sess[gslot] < 0)
        late = gap > IDLE_NS[17]
        if late.any():
            lt = np.flatnonzero(late & is_tcp)
            late[lt] = gap[lt] > IDLE_NS[6]
            start |= late
        del late
        # runs of one session inside the sorted chunk, and the session of each
        cut = first | start
        seg = np.flatnonzero(cut)
        seglen = np.diff(np.r_[seg, n])
        ends = seg + seglen - 1
        seg_of = np.cumsum(cut, dtype=np.int32 if n < 2**31 else np.int64) - 1
        st_seg = start[seg]
        starts = seg[st_seg]
        ssid = np.cumsum(st_seg, dtype=np.int64) + (self._n - 1)
        cont_runs = np.flatnonzero(~st_seg)  # a group's first run that goes on a session
        ssid[cont_runs] = self._k_sess[slot[kc[seg[cont_runs]]]]
        del kc
        sid = np.repeat(ssid, seglen)
        self._grow_sessions(len(starts))
        s = self._s
        a, b = self._n, self._n + len(starts)
        for name, (_, init) in _SESSION_COLS.items():
            s[name][a:b] = init
        at = order[starts]  # the start packets in the chunk's own order
        d_at = d_all[at]
        s["ip_version"][a:b] = ver[at]
        s["proto"][a:b] = proto[at]
        for k, (x, y) in zip(("hi", "lo", "port"), zip(src, dst)):
            xa = x[at]
            xy = xa ^ y[at]
            xa ^= xy * d_at  # the destination where d_at, else the source
            s[f"a_{k}"][a:b] = xa
            s[f"b_{k}"][a:b] = xa ^ xy
        s["first_dir"][a:b] = dd[starts]
        s["first_packet"][a:b] = base + (at if rows is None else rows[at])
        self._n = b
        red = np.minimum.reduceat
        s["start_ns"][ssid] = np.minimum(s["start_ns"][ssid], red(t, seg))
        s["end_ns"][ssid] = np.maximum(s["end_ns"][ssid], np.maximum.reduceat(t, seg))
        p1 = _run_sums(db, ends, np.int32)
        s["pkts1"][ssid] += p1
        s["pkts0"][ssid] += seglen - p1
        for k, v in (("wire", wire[order]), ("pay", pay)):
            v1 = _run_sums(v * db, ends)
            s[f"{k}1"][ssid] += v1
            s[f"{k}0"][ssid] += _run_sums(v, ends) - v1
        s["max_payload"][ssid] = np.maximum(s["max_payload"][ssid], np.maximum.reduceat(pay, seg))
        s["flags"][ssid] |= np.bitwise_or.reduceat(fl, seg)
        # handshake times (the first SYN, SYN|ACK, and the client's ACK after the SYN|ACK): from
        # the few packets that have those flags
        if is_tcp.any():
            q = np.flatnonzero(pure_syn)
            if len(q):
                runs_q, hq = _firsts(seg_of[q])
                sq = ssid[runs_q]
                fresh = s["t_syn"][sq] == NONE
                if fresh.any():
                    syn_t = np.minimum.reduceat(t[q], hq)
                    s["syn_dir"][sq[fresh]] = dd[q[hq[fresh]]]
                    s["t_syn"][sq[fresh]] = syn_t[fresh]
            q = np.flatnonzero((fl & (SYN | ACK)) == (SYN | ACK))
            if len(q):
                runs_q, hq = _firsts(seg_of[q])
                sq = ssid[runs_q]
                s["t_synack"][sq] = np.minimum(s["t_synack"][sq], np.minimum.reduceat(t[q], hq))
            t_sa = s["t_synack"][ssid]
            if (t_sa != NONE).any():
                t_sa = np.repeat(t_sa, seglen)
                ack3 = ((fl & (SYN | ACK)) == ACK) & (t_sa != NONE) & (t > t_sa)
                del t_sa
                if ack3.any():
                    ack3 &= dd == np.repeat(s["syn_dir"][ssid], seglen)
                    s["t_ack"][ssid] = np.minimum(s["t_ack"][ssid], red(_pick(ack3, t, NONE), seg))
        other = dd != np.repeat(s["first_dir"][ssid], seglen)
        s["t_other"][ssid] = np.minimum(s["t_other"][ssid], red(_pick(other, t, NONE), seg))
        del other

        def before(at: np.ndarray, what: str) -> np.ndarray:
            """Time (`t`) or direction (`dir`) of the predecessor in its session of each packet
            AT (the first of a session run: the session's last packet of a previous chunk;
            none: NONE, -1)."""
            kept, here = (s["last_t"], t) if what == "t" else (s["last_dir"], dd)
            out = here[np.maximum(at - 1, 0)]
            heads = np.flatnonzero(cut[at])
            out[heads] = kept[sid[at[heads]]]
            return out

        think = [np.zeros(0, np.int64)]  # the first packets of later rounds (below)
        # payload runs: a payload packet whose direction differs from the session's previous
        # payload packet starts a run
        p = np.flatnonzero(has)
        if len(p):
            sp_ = seg_of[p]
            dp_ = dd[p]
            prevdir = np.empty(len(p), np.int8)
            prevdir[1:] = dp_[:-1]
            head = np.empty(len(p), bool)
            head[0] = True
            np.not_equal(sp_[1:], sp_[:-1], out=head[1:])
            hp = np.flatnonzero(head)  # per session run with payload: its first, its last
            tp = np.r_[hp[1:], len(p)] - 1
            hs = ssid[sp_[hp]]
            prevdir[hp] = s["last_paydir"][hs]
            newrun = dp_ != prevdir
            # the opener: the side of the session's first payload packet; a TCP round starts
            # where the opener sends again after the other side did
            known = s["first_paydir"][hs]
            opener_run = np.where(known >= 0, known, dp_[hp])
            s["first_paydir"][hs] = opener_run
            opener = np.repeat(opener_run, tp - hp + 1)
            think.append(p[newrun & (dp_ == opener) & (prevdir >= 0) & is_tcp[p]])
            r1 = _run_sums(newrun & (dp_ == 1), tp, np.int32)
            s["runs1"][hs] += r1
            s["runs0"][hs] += _run_sums(newrun, tp, np.int32) - r1
            s["last_paydir"][hs] = dp_[tp]
        # UDP: one datagram a side per round, so every datagram but the session's first starts a
        # round, except an answer (the other side's datagram right after the first side's)
        u = np.flatnonzero(~is_tcp)
        if len(u):
            fdir = s["first_dir"][sid[u]]
            from_first = dd[u] == fdir
            bd = before(u, "dir")
            think.append(u[(bd >= 0) & ~(~from_first & (bd == fdir))])
            self._count_datagrams(order[u], from_first, ver, src, dst, col("l4_payload"))
        # the pauses before those packets (file order is not always time order: at least 0),
        # summed per session run (each pause is below the idle timeout: exact in float64)
        at = np.concatenate(think)
        if len(at):
            pause = np.maximum(t[at] - before(at, "t"), 0)
            runs = seg_of[at]
            summed = np.bincount(runs, weights=pause, minlength=len(seg))
            s["think_sum"][ssid] += np.rint(summed).astype(np.int64)
            s["think_n"][ssid] += np.bincount(runs, minlength=len(seg)).astype(np.int32)
        # linger: the pause before a session's first FIN or RST (0 when that one carries data)
        c = np.flatnonzero(fl & (FIN | RST))  # (fl is 0 for UDP)
        if len(c):
            c = c[np.r_[True, seg_of[c[1:]] != seg_of[c[:-1]]]]  # the first of each run
            c = c[s["linger"][sid[c]] < 0]
            idle = (pay[c] == 0) & (before(c, "dir") >= 0)
            s["linger"][sid[c]] = np.maximum(t[c] - np.where(idle, before(c, "t"), t[c]), 0)
        # flights: runs of packets of one direction (any packet of the other side ends one);
        # their data segments, the longest per session (a run open at the previous chunk's end
        # goes on into this one)
        brk = cut.copy()
        brk[1:] |= dd[1:] != dd[:-1]
        rb = np.flatnonzero(brk)
        data_in_run = _run_sums(has, np.r_[rb[1:], n] - 1, np.int32)
        heads = np.flatnonzero(cut[rb])  # one per session run
        old_dir = s["last_dir"][ssid]
        goes_on = dd[rb[heads]] == old_dir
        data_in_run[heads] += np.where(goes_on, s["open_run"][ssid], 0)
        best = np.maximum.reduceat(data_in_run, heads)
        s["max_flight"][ssid] = np.maximum(s["max_flight"][ssid], best)
        tails = np.r_[heads[1:], len(rb)] - 1
        s["last_dir"][ssid] = dd[rb[tails]]
        s["open_run"][ssid] = data_in_run[tails]
        # the smallest spacing of two data packets in a row of one side (inside a flight), the
        # first of a session run against its last packet of the previous chunk
        # (the same time stamp: coalesced, not a spacing); from the packets that have one
        same = ~brk
        same[1:] &= has[1:] & has[:-1] & (gap[1:] > 0)
        del brk
        cont = seg[(dd[seg] == old_dir) & has[seg] & (s["last_data"][ssid] == 1)]
        gap[cont] = t[cont] - s["last_t"][sid[cont]]
        same[cont] = gap[cont] > 0
        q = np.flatnonzero(same)
        del same
        if len(q):
            runs_q, hq = _firsts(seg_of[q])
            sq = ssid[runs_q]
            s["min_gap"][sq] = np.minimum(s["min_gap"][sq], np.minimum.reduceat(gap[q], hq))
        s["last_t"][ssid] = t[ends]
        s["last_data"][ssid] = has[ends]
        # the tuples' state after this chunk
        glast = np.r_[fi[1:], n] - 1
        self._k_sess[gslot] = sid[glast]
        self._k_last[gslot] = t[glast]
        self._k_syn[gslot] = pure_syn[glast]

    def _count_datagrams(
        self,
        at: np.ndarray,
        fc: np.ndarray,
        ver: np.ndarray,
        src: tuple[np.ndarray, ...],
        dst: tuple[np.ndarray, ...],
        pay: np.ndarray,
    ) -> None:
        """Count the UDP datagrams AT (places in the chunk's own order, where VER, SRC, DST and
        PAY are; FC: whether each is from its session's client) by (IP version, the session's
        server port, side, payload): what the per-round bytes of UDP are fitted from."""
        side = np.zeros(len(ver), np.int8)  # in the chunk's order: 1 client, 2 server
        side[at] = 2 - fc
        at = np.flatnonzero(side)  # ascending: the columns are read in order
        fc = side[at] == 1
        key = (
            (ver[at] == 6).astype(np.int64) << 34
            | _port_of(fc, dst[2][at], src[2][at]).astype(np.int64) << 17
            | (~fc).astype(np.int64) << 16
            | np.minimum(pay[at], 0xFFFF)
        )
        codes, uniq = pd.factorize(key, size_hint=1024)  # hashing: no sort of the datagrams
        counts = np.bincount(codes, minlength=len(uniq))
        k, c = np.unique(np.r_[self._dg_keys, uniq], return_inverse=True)
        self._dg_counts = np.bincount(
            c, weights=np.r_[self._dg_counts, counts], minlength=len(k)
        ).astype(np.int64)
        self._dg_keys = k

    def datagrams(self) -> pd.DataFrame:
        """The UDP datagrams counted by (ip_version, server_port, server: 0 the client's, 1 the
        server's, payload): column `count`."""
        k = self._dg_keys
        return pd.DataFrame(
            {
                "ip_version": np.where(k >> 34 & 1, 6, 4).astype(np.uint8),
                "server_port": (k >> 17 & 0xFFFF).astype(np.int64),
                "server": (k >> 16 & 1).astype(np.int8),
                "payload": (k & 0xFFFF).astype(np.int64),
                "count": self._dg_counts,
            }
        )

    def _tuple_slots(self, uniq: np.ndarray) -> np.ndarray:
        """The slot of each hash of UNIQ, new slots for the unseen ones. The hashes are looked
        up sorted (neighbouring look-ups touch neighbouring memory: several times faster)."""
        o = np.argsort(uniq)
        su = uniq[o]
        pos = np.searchsorted(self._hashes, su)
        if len(self._hashes):
            found = self._hashes[np.minimum(pos, len(self._hashes) - 1)] == su
        else:
            found = np.zeros(len(su), bool)
        sorted_slots = np.empty(len(su), np.int64)
        sorted_slots[found] = self._slots[pos[found]]
        new = np.flatnonzero(~found)
        if len(new):
            m = len(new)
            self._grow_tuples(m)
            fresh = self._nk + np.arange(m)
            sorted_slots[new] = fresh
            self._k_sess[self._nk : self._nk + m] = -1
            self._k_syn[self._nk : self._nk + m] = False
            self._k_last[self._nk : self._nk + m] = 0
            self._nk += m
            self._hashes = np.insert(self._hashes, pos[new], su[new])
            self._slots = np.insert(self._slots, pos[new], fresh)
        slots = np.empty(len(uniq), np.int64)
        slots[o] = sorted_slots
        return slots

    # -- the result ------------------------------------------------------------------------

    def table(self) -> SessionTable:
        """The sessions so far, oriented client -> server, in order of start."""
        s = {k: v[: self._n] for k, v in self._s.items()}
        tcp = s["proto"] == 6
        # client direction: 0 when A is the client
        no_syn_dir = (s["a_port"] < s["b_port"]).astype(np.int8)  # the lower port serves
        cdir = np.where(
            tcp, np.where(s["syn_dir"] >= 0, s["syn_dir"], no_syn_dir), s["first_dir"]
        ).astype(np.int8)
        c1 = cdir == 1

        c0 = ~c1

        def pick(x0: np.ndarray, x1: np.ndarray, client: bool) -> np.ndarray:
            """X1 where the client's (CLIENT) or the server's (else) side is B, else X0 (no
            branch per element)."""
            return x0 ^ ((x0 ^ x1) * (c1 if client else c0))

        runs_c = pick(s["runs0"], s["runs1"], True)
        runs_s = pick(s["runs0"], s["runs1"], False)
        pk_c = pick(s["pkts0"], s["pkts1"], True)
        pk_s = pick(s["pkts0"], s["pkts1"], False)
        rounds = np.where(
            tcp, np.maximum(np.maximum(runs_c, runs_s), 1), np.maximum(pk_c, pk_s)
        ).astype(np.int64)
        hs = (s["t_syn"] != NONE) & (s["t_ack"] != NONE) & (s["t_ack"] >= s["t_syn"])
        rtt_tcp = np.where(hs, s["t_ack"] - s["t_syn"], -1)
        udp_ok = (s["t_other"] != NONE) & (s["t_other"] >= s["start_ns"])
        reply = np.minimum(np.where(udp_ok, s["t_other"] - s["start_ns"], 0), TIME_LIMIT_NS // 2)
        rtt_udp = np.where(udp_ok, 2 * reply, -1)
        close = np.where(
            tcp & (s["flags"] & RST != 0), 2, np.where(tcp & (s["flags"] & FIN != 0), 1, 0)
        ).astype(np.int8)
        t = SessionTable(
            ip_version=s["ip_version"],
            proto=s["proto"],
            client_hi=pick(s["a_hi"], s["b_hi"], True),
            client_lo=pick(s["a_lo"], s["b_lo"], True),
            server_hi=pick(s["a_hi"], s["b_hi"], False),
            server_lo=pick(s["a_lo"], s["b_lo"], False),
            client_port=pick(s["a_port"], s["b_port"], True),
            server_port=pick(s["a_port"], s["b_port"], False),
            start_ns=s["start_ns"],
            end_ns=s["end_ns"],
            client_packets=pk_c,
            server_packets=pk_s,
            client_bytes=pick(s["wire0"], s["wire1"], True),
            server_bytes=pick(s["wire0"], s["wire1"], False),
            client_payload=pick(s["pay0"], s["pay1"], True),
            server_payload=pick(s["pay0"], s["pay1"], False),
            rounds=rounds,
            rtt_ns=np.where(tcp, rtt_tcp, rtt_udp),
            max_payload=s["max_payload"],
            max_flight=s["max_flight"].astype(np.int64),
            min_gap_ns=np.where(s["min_gap"] == NONE, -1, s["min_gap"]),
            close=close,
            think_ns=s["think_sum"],
            think_count=s["think_n"].astype(np.int64),
            linger_ns=s["linger"],
            midstream=tcp & (s["syn_dir"] < 0),
        )
        order = np.lexsort((s["first_packet"], t.start_ns))
        if (order == np.arange(len(order))).all():  # mostly so: no gather of every column,
            # only a copy of those that are views of the state (free to add more chunks)
            return SessionTable(
                **{k: v if v.base is None else v.copy() for k, v in vars(t).items()}
            )
        return t.take(order)


__all__ = ["PacketSessions", "SessionTable", "empty_table", "IDLE_NS"]
