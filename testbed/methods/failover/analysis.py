"""The fail-over outage, read from the client's capture (never from the sender's own view).

Every probe request is numbered by its place in the capture (the capture on the client's
interface sees each one leave); a reply names its request by a code the one pcap reader reads:
ICMP: the echo identifier (= the number mod 2^16); UDP: the reply's destination port (= the
request's source port, the number mod `ports`). A reply belongs to the latest request with its
code sent before it, which is unambiguous while the code's window (65,536 or `ports` probes)
outlasts the round trip. Which DUT answered a UDP probe is the reply's source port (the UDP echo
of the master and of the backup reply from their own ports); ICMP echo replies carry no marker
in the fields the reader reads, so for ICMP the UDP stream tells.

Per trial and protocol: requests, replies, lost (requests without a reply), the longest gap
between two replies and when it began and ended relative to the fault, the loss-derived outage
(lost x probe interval, RFC 6412/6413's "loss-derived" method), the time from the fault to the
end of the gap (the first reply through the backup), for UDP the first reply from the backup's
port; and keepalived's own view (when the backup logged MASTER). Per advertisement interval:
the mean and spread (sample standard deviation, min, max) over the trials, beside seed 002's
numbers (CARP, power off, a ping every 5 ms: about 3 s, 512 replies lost on average, mean
longest inter-arrival time 2.88 s over 5 trials).
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import numpy as np

from analysis.capture import read_capture
from analysis.live import PALETTE, fmt_count, save_figure
from analysis.plots import figure

from . import handover

MASTER_METER = "vrrp:master:meter"  # the label of the meter pair's master side (its kill)

CAPTIONS = {
    "failover_seq": "Reply sequence around the fault (seed 002, figure 23 redrawn)",
    "failover_gap": "Outage per trial",
    "failover_meters": "Records lost across the handover: each trial's packets by meter and loss",
}
SEED = {
    "protocol": "icmp",
    "interval_ms": 5.0,
    "trials": 5,
    "lost_mean": 512,
    "max_gap_mean_s": 2.88,
    "handover_s": 3.0,
    "what": "seed 002: CARP (advbase 1 s, advskew 100), master powered off",
}


def _plan(step_dir: Path) -> list[dict]:
    for path in sorted(step_dir.glob("gen-*/probe-plan.json")):
        return json.loads(path.read_text())["flows"]
    return []


def tcp_outcome(cap, flow: dict, fault_ns: int | None) -> dict[str, Any]:
    """Whether the TCP session in flight survived the fault, from the capture: a reset from the
    virtual address after the fault (the backup knows no such session) ends it; data echoed from
    the address after the fault with no reset means it survived."""
    client = int(ipaddress.ip_address(flow["src"]))
    vip = int(ipaddress.ip_address(flow["dst"]))
    tcp = cap.proto == 6
    to_vip = tcp & (cap.src_lo == client) & (cap.dst_lo == vip) & (cap.dport == flow["dport"])
    back = tcp & (cap.src_lo == vip) & (cap.dst_lo == client) & (cap.sport == flow["dport"])
    rst = back & ((cap.tcp_flags & 0x04) != 0)
    data = (
        back & ~rst & (cap.wire_len >= 14 + 20 + 20 + flow["size"])
    )  # a segment with an echo in it
    out: dict[str, Any] = {
        "protocol": "tcp",
        "interval_ms": flow["period_ns"] / 1e6,
        "requests": int(to_vip.sum()),
        "replies": int(back.sum()),
    }
    if fault_ns is None or not to_vip.any():
        return out
    after = cap.ts_ns > fault_ns
    resets = cap.ts_ns[rst & after]
    out["tcp_reset_after_s"] = float(resets[0] - fault_ns) / 1e9 if len(resets) else None
    echoed = cap.ts_ns[data & after]
    out["tcp_echo_after_fault_s"] = float(echoed[-1] - fault_ns) / 1e9 if len(echoed) else None
    out["tcp_survived"] = (
        not len(resets)
        and bool(len(echoed))
        and bool((data & after & (cap.ts_ns >= cap.ts_ns[to_vip].max() - 200_000_000)).any())
    )
    return out


def flow_outage(cap, flow: dict, vrrp: dict, fault_ns: int | None) -> dict[str, Any]:
    """The numbers of one probe flow of one trial (see the module's text)."""
    if flow["protocol"] == "tcp":
        return tcp_outcome(cap, flow, fault_ns)
    client = int(ipaddress.ip_address(flow["src"]))
    vip = int(ipaddress.ip_address(flow["dst"]))
    if flow["protocol"] == "icmp":  # echo request and reply have the probe's length; errors do not
        p, frame = 1, 14 + 20 + 8 + flow["size"]
        req = (
            (cap.proto == p)
            & (cap.src_lo == client)
            & (cap.dst_lo == vip)
            & (cap.wire_len == frame)
        )
        rep = (
            (cap.proto == p)
            & (cap.src_lo == vip)
            & (cap.dst_lo == client)
            & (cap.wire_len == frame)
        )
        req_code, rep_code = cap.sport[req], cap.sport[rep]
    else:
        p = 17
        ports = list((vrrp.get("reply_ports") or {}).values())
        req = (
            (cap.proto == p)
            & (cap.src_lo == client)
            & (cap.dst_lo == vip)
            & (cap.dport == flow["dport"])
        )
        rep = (
            (cap.proto == p)
            & (cap.src_lo == vip)
            & (cap.dst_lo == client)
            & np.isin(cap.sport, ports)
        )
        req_code, rep_code = cap.sport[req], cap.dport[rep]
    req_ts, rep_ts = cap.ts_ns[req].astype(np.int64), cap.ts_ns[rep].astype(np.int64)
    out: dict[str, Any] = {
        "protocol": flow["protocol"],
        "interval_ms": flow["period_ns"] / 1e6,
        "requests": int(req.sum()),
        "replies": int(rep.sum()),
    }
    if not len(req_ts):
        return out
    t0 = int(req_ts.min())
    key = req_code.astype(np.int64) << 40 | (req_ts - t0)
    order = np.argsort(key, kind="stable")
    skey, seq_sorted = key[order], np.arange(len(req_ts))[order]
    rkey = rep_code.astype(np.int64) << 40 | np.maximum(rep_ts - t0, 0)
    idx = np.searchsorted(skey, rkey, side="right") - 1
    ok = (idx >= 0) & (req_code[order][np.maximum(idx, 0)] == rep_code)
    rep_seq = np.where(ok, seq_sorted[np.maximum(idx, 0)], -1)
    answered = np.unique(rep_seq[rep_seq >= 0])
    out["lost"] = int(len(req_ts) - len(answered))
    # the capture rows of the requests no DUT answered (the meter pair's outage)
    out["_unanswered"] = np.flatnonzero(req)[np.setdiff1d(np.arange(len(req_ts)), answered)]
    out["unmatched_replies"] = int((~ok).sum())
    out["loss_outage_s"] = out["lost"] * flow["period_ns"] / 1e9
    out["_req_ts"], out["_rep_seq"] = req_ts, rep_seq
    out["max_request_gap_s"] = (
        float(np.diff(req_ts).max()) / 1e9 if len(req_ts) > 1 else None
    )  # sender stalls
    if len(rep_ts) > 1:
        gaps = np.diff(rep_ts)
        i = int(np.argmax(gaps))
        out["max_gap_s"] = float(gaps[i]) / 1e9
        if fault_ns is not None:
            out["gap_start_s"] = float(rep_ts[i] - fault_ns) / 1e9
            out["gap_end_s"] = float(rep_ts[i + 1] - fault_ns) / 1e9
            # an outage the fault caused: probes were lost and the longest gap ends after the fault
            out["fault_to_recovery_s"] = (
                out["gap_end_s"] if out["lost"] and out["gap_end_s"] > 0 else None
            )
    if flow["protocol"] == "udp" and fault_ns is not None:
        backup_port = (vrrp.get("reply_ports") or {}).get("backup")
        who = cap.sport[rep]
        after = (who == backup_port) & (rep_ts > fault_ns)
        out["backup_answered"] = bool(after.any())
        out["master_answered_before"] = bool(((who != backup_port) & (rep_ts < fault_ns)).any())
        out["fault_to_first_backup_reply_s"] = (
            float(rep_ts[after][0] - fault_ns) / 1e9 if after.any() else None
        )
    return out


def trial_rows(run: Path, manifest: dict[str, Any]) -> tuple[list[dict[str, Any]], dict]:
    rows, series = [], {}
    for entry in manifest.get("steps", []):
        if entry.get("kind") != "failover":
            continue
        step_dir = run / entry.get("dir", ".")
        params, vrrp = entry.get("params") or {}, entry.get("vrrp") or {}
        events = [
            e
            for e in (entry.get("faults") or {}).get("events", [])
            if e.get("in_effect_realtime_ns") and e.get("target") != MASTER_METER
        ]
        fault_ns = (
            events[-1]["in_effect_realtime_ns"] if events else None
        )  # the fault's time: in effect
        promoted = [
            t
            for t in vrrp.get("transitions", [])
            if t["role"] == "backup"
            and t["state"] == "MASTER"
            and fault_ns is not None
            and t["realtime_ns"] >= fault_ns
        ]
        base = {
            "step": entry["name"],
            "status": entry.get("status"),
            "advert_int_s": params.get("advert_int_s"),
            "vrrp_version": params.get("vrrp_version"),
            "trial": params.get("trial"),
            "fault": params.get("fault"),
            "fault_applied": fault_ns is not None,
            "backup_master_after_s": (promoted[0]["realtime_ns"] - fault_ns) / 1e9
            if promoted
            else None,
        }
        pcap = step_dir / "capture.pcap"
        if not pcap.is_file():
            rows.append({**base, "problem": "no capture.pcap"})
            continue
        cap = read_capture(pcap)
        for flow in _plan(step_dir):
            o = flow_outage(cap, flow, vrrp, fault_ns)
            series[(entry["name"], o["protocol"])] = (
                o.pop("_req_ts", None),
                o.pop("_rep_seq", None),
                fault_ns,
            )
            o.pop("_unanswered", None)
            rows.append({**base, **o})
    return rows, series


def meter_pair_rows(run: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Per step with a meter pair (`failover.meter`): the records lost across the handover
    (handover.step_handover). The outage's packets are the probe requests no DUT answered, and
    the TCP session's segments to the address between the fault and the end of the probes'
    longest gap; the master's meter died when its planned kill was in effect."""
    out = []
    for entry in manifest.get("steps", []):
        if entry.get("kind") != "failover" or not entry.get("meter_pair"):
            continue
        step_dir = run / entry.get("dir", ".")
        vrrp = entry.get("vrrp") or {}
        events = [
            e
            for e in (entry.get("faults") or {}).get("events", [])
            if e.get("in_effect_realtime_ns")
        ]
        fault = [e["in_effect_realtime_ns"] for e in events if e.get("target") != MASTER_METER]
        died = [e["in_effect_realtime_ns"] for e in events if e.get("target") == MASTER_METER]
        fault_ns = fault[-1] if fault else None
        pcap = step_dir / "capture.pcap"
        if not pcap.is_file():
            out.append({"step": entry["name"], "problems": ["no capture.pcap"]})
            continue
        cap = read_capture(pcap)
        unanswered = np.zeros(len(cap), bool)
        recovered = []
        flows = _plan(step_dir)
        for flow in flows:
            if flow["protocol"] == "tcp":
                continue
            o = flow_outage(cap, flow, vrrp, fault_ns)
            unanswered[o.get("_unanswered", [])] = True
            if o.get("fault_to_recovery_s") is not None:
                recovered.append(o["fault_to_recovery_s"])
        if fault_ns is not None and recovered:
            end = fault_ns + int(max(recovered) * 1e9)
            for flow in (f for f in flows if f["protocol"] == "tcp"):
                unanswered |= (
                    (cap.proto == 6)
                    & (cap.src_lo == int(ipaddress.ip_address(flow["src"])))
                    & (cap.dst_lo == int(ipaddress.ip_address(flow["dst"])))
                    & (cap.dport == flow["dport"])
                    & (cap.ts_ns >= fault_ns)
                    & (cap.ts_ns < end)
                )
        out.append(
            handover.step_handover(
                step_dir, entry, cap, unanswered, fault_ns, died[0] if died else None
            )
        )
    return out


def _spread(values: list) -> dict[str, Any]:
    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {
        "n": int(len(v)),
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
        "min": float(v.min()),
        "max": float(v.max()),
    }


def summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = {(r["advert_int_s"], r["fault"], r.get("protocol")) for r in rows if r.get("protocol")}
    for key in sorted(keys, key=lambda k: (-k[0], k[1], k[2])):
        group = [r for r in rows if (r["advert_int_s"], r["fault"], r.get("protocol")) == key]
        out.append(
            {
                "advert_int_s": key[0],
                "fault": key[1],
                "protocol": key[2],
                "trials": len(group),
                "interval_ms": group[0].get("interval_ms"),
                **{
                    m: _spread([g.get(m) for g in group])
                    for m in (
                        "lost",
                        "max_gap_s",
                        "loss_outage_s",
                        "fault_to_recovery_s",
                        "fault_to_first_backup_reply_s",
                        "backup_master_after_s",
                    )
                },
                "backup_answered": all(g.get("backup_answered") for g in group)
                if key[2] == "udp"
                else None,
                "tcp_survived": sum(bool(g.get("tcp_survived")) for g in group)
                if key[2] == "tcp"
                else None,
            }
        )
    return out


def analyze(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {}  # the tables need the run folder's captures: plots() adds them to the document


def plots(run: Path, doc: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Path]:
    """Adds `failover` (per trial) and `failover_summary` to the document, and draws the figures."""
    rows, series = trial_rows(run, manifest)
    doc["failover"] = rows
    doc["failover_summary"] = summary_rows(rows)
    doc["failover_seed"] = SEED
    out: dict[str, Path] = {}
    pair = meter_pair_rows(run, manifest)
    if pair:
        doc["failover_meters"] = pair
        out["failover_meters"] = handover.figure_handover(run, pair)
    drawn = [
        (k, v)
        for k, v in series.items()
        if k[1] == "icmp" and v[0] is not None and v[2] is not None
    ]
    if not drawn:
        drawn = [(k, v) for k, v in series.items() if v[0] is not None and v[2] is not None]
    if drawn:
        out["failover_seq"] = sequence_figure(run, drawn, rows, doc["failover_summary"])
    trials = [r for r in rows if r.get("max_gap_s") is not None]
    first = trials[0]["protocol"] if trials else None  # one probe per trial: they agree closely
    trials = [r for r in trials if r["protocol"] == first]
    if trials:
        fig, ax = figure("Longest reply gap and loss-derived outage per trial", "", "seconds")
        x = np.arange(len(trials))
        ax.bar(
            x - 0.2,
            [r["max_gap_s"] for r in trials],
            0.4,
            label="longest reply gap",
            color=PALETTE[0],
        )
        ax.bar(
            x + 0.2,
            [r.get("loss_outage_s") or 0 for r in trials],
            0.4,
            label="lost x interval",
            color=PALETTE[1],
        )
        ax.set_xticks(
            x, [f"{r['step']} ({r['protocol']})" for r in trials], rotation=45, ha="right"
        )
        ax.legend(fontsize=8, frameon=False)
        out["failover_gap"] = save_figure(fig, run / "failover-outage.png")
    return out


def sequence_figure(
    run: Path, drawn: list, rows: list[dict[str, Any]], summary: list[dict[str, Any]]
) -> Path:
    """Seed 002's figure 23 redrawn: one row per trial, a mark for every answered probe at the
    time it was sent (from the fault); the probes lost in the fail-over leave the gap."""
    ends = [r["gap_end_s"] for r in rows if r.get("fault_to_recovery_s") is not None]
    hi = max(ends + [0.5]) + 0.5
    fig, ax = figure(
        "Answered probes around the fault, one row per trial (seed 002, figure 23 redrawn)",
        "time the probe was sent, from the fault (s)",
        "",
    )
    labels = []
    for j, ((step, proto), (req_ts, seq, fault_ns)) in enumerate(drawn):
        t = (req_ts[seq[seq >= 0]] - fault_ns) / 1e9
        t = t[(t >= -0.5) & (t <= hi)]
        ax.plot(t, np.full(len(t), j), "|", ms=6, mew=0.6, color=PALETTE[j % len(PALETTE)])
        labels.append(f"{step} ({proto})")
    ax.axvline(0, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    text = [
        f"seed 002 (CARP advbase 1 s, power off, a ping every 5 ms, 5 trials): ~3 s, "
        f"{SEED['lost_mean']} replies lost, longest gap {SEED['max_gap_mean_s']} s on average"
    ]
    for s in summary:
        if s["protocol"] == "icmp" and (s["lost"].get("mean") or 0) > 0:
            text.append(
                f"ours (keepalived advert_int {s['advert_int_s']:g} s, {s['fault']}, a ping every "
                f"{s['interval_ms']:g} ms, {s['trials']} trials): {_mean(s['lost'], 0)} lost, "
                f"longest gap {_mean(s['max_gap_s'], 3)} s"
            )
    ax.text(0.01, 0.99, "\n".join(text), transform=ax.transAxes, va="top", fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.6 - 0.75 * len(text))
    fig.set_size_inches(9, 2.2 + 0.22 * len(labels))
    return save_figure(fig, run / "failover-sequence.png")


def _mean(s: dict, digits: int) -> str:
    if s.get("mean") is None:
        return "–"
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def report(doc: dict[str, Any]) -> list:
    if not doc.get("failover"):
        return []
    return _report(doc) + handover.report(doc.get("failover_meters") or [])


def _report(doc: dict[str, Any]) -> list:
    probes = [r for r in doc["failover"] if r.get("protocol") != "tcp"]
    rows = [
        [
            r["step"],
            r.get("protocol", "–"),
            fmt_count(r.get("requests")),
            fmt_count(r.get("replies")),
            fmt_count(r.get("lost")),
            fmt_count(r.get("max_gap_s"), 3),
            fmt_count(r.get("max_request_gap_s"), 3),
            fmt_count(r.get("loss_outage_s"), 3),
            fmt_count(r.get("fault_to_recovery_s"), 3),
            fmt_count(r.get("fault_to_first_backup_reply_s"), 3),
            fmt_count(r.get("backup_master_after_s"), 3),
        ]
        for r in probes
    ]
    summary = [
        [
            f"{s['advert_int_s']:g}",
            s["fault"],
            s["protocol"],
            str(s["trials"]),
            f"{s['interval_ms']:g}",
            _mean(s["lost"], 1),
            _mean(s["max_gap_s"], 3),
            _mean(s["loss_outage_s"], 3),
            _mean(s["fault_to_recovery_s"], 3),
            _mean(s["backup_master_after_s"], 3),
        ]
        for s in doc["failover_summary"]
        if s["protocol"] != "tcp"
    ]
    summary.append(
        [
            "1 (CARP advbase)",
            "power off",
            "icmp",
            "5",
            "5",
            f"{SEED['lost_mean']}",
            f"{SEED['max_gap_mean_s']}",
            f"{SEED['lost_mean'] * 0.005:.2f}",
            "~3",
            "–",
        ]
    )
    blocks = [
        ("h2", "Fail-over (seed 002's redundancy test, with VRRP)"),
        (
            "p",
            "Per trial, from the client's capture: a reply names its request by the ICMP identifier "
            "or the UDP port; the outage is the longest gap between replies, and lost x probe "
            "interval (loss-derived, RFC 6412/6413); a long gap between requests is the sender stalling, "
            "not an outage. Times are from the fault (CLOCK_REALTIME, the capture's clock); "
            '"fault → recovery" is the end of the longest gap when probes were lost; "backup '
            "MASTER\" is when the backup's keepalived logged it.",
        ),
        (
            "table",
            [
                "step",
                "probe",
                "requests",
                "replies",
                "lost",
                "longest gap s",
                "longest request gap s",
                "lost x interval s",
                "fault → recovery s",
                "fault → backup reply s",
                "backup MASTER after s",
            ],
            rows,
        ),
        ("h2", "Fail-over: mean ± standard deviation over the trials, beside seed 002"),
        (
            "table",
            [
                "advert interval s",
                "fault",
                "probe",
                "trials",
                "probe interval ms",
                "lost",
                "longest gap s",
                "lost x interval s",
                "fault → recovery s",
                "backup MASTER after s",
            ],
            summary,
        ),
    ]
    tcp = [r for r in doc["failover"] if r.get("protocol") == "tcp"]
    if tcp:
        blocks += [
            ("h2", "Fail-over: the TCP session in flight"),
            (
                "p",
                "One TCP connection to the virtual address per trial, one message per probe interval, "
                "echoed by the DUT. The backup knows no such session: a reset from the address after "
                "the fault ends it (keepalived moves the address, not connection state). Data from the "
                "address after a reset are the old master's retransmissions, when it still holds the "
                "address (kill, stop).",
            ),
            (
                "table",
                [
                    "step",
                    "segments sent",
                    "segments back",
                    "survived",
                    "reset after s",
                    "last data from the address after s",
                ],
                [
                    [
                        r["step"],
                        fmt_count(r.get("requests")),
                        fmt_count(r.get("replies")),
                        {True: "yes", False: "no"}.get(r.get("tcp_survived"), "–"),
                        fmt_count(r.get("tcp_reset_after_s"), 3),
                        fmt_count(r.get("tcp_echo_after_fault_s"), 3),
                    ]
                    for r in tcp
                ],
            ),
        ]
    return blocks
