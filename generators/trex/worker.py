"""The TRex worker: the only process that imports the TRex client (`lbr-trex-client`).

The client bundles its own Scapy 2.4.3, which must be the first Scapy its process imports, so
this file is run by path (`python .../generators/trex/worker.py MODE FILE`) and imports nothing
of the project: only the standard library and, first of all, `lbr_trex_client`. It talks to the
adapter (generators/trex/__init__.py) in JSON lines on stdout, one event per line:

  build PROFILE.json OUTDIR   the adapter's profile (plain data, stl_profile.py) -> STLProfile;
                              writes OUTDIR/trex-profile.py (dump_to_code, loadable by
                              trex-console's `start -f`), .json and .yaml, loads the .py back and
                              checks it equals what was built. Events: built | error.
  run JOB.json                connect (API-version check), acquire, reset, add the streams of the
                              dumped .py, then (SIGUSR1 from the adapter's start) start, poll,
                              stop, stats, release, disconnect. Events: connected | ready |
                              started | progress | stats | done | error. With the job's
                              `latency_pg_ids` (latency probes), `stats` has their latency,
                              histogram, sequence errors and rx/tx counts (`latency_stats`).
  sim PROFILE.py OUT.pcap DIR the stateless simulator (DIR holds bp-sim-64) expands the profile.
  astf-build PROFILE.py OUTDIR  an ASTF profile file (astf_profile.python_code) loaded with
                              ASTFProfile.load_py; writes OUTDIR/trex-astf-profile.json.
                              Events: built | error.
  run JOB.json with "mode": "astf"  the same life cycle with ASTFClient on a server started with
                              --astf: load_profile, start (new connections for `duration_s`, then
                              until every flow is closed), TRex's TCP counters of the client and
                              the server side (and per template group) in `stats`.

  otg-wait DIR/go-NNN         one start of an OTG port's flow (generators/trex/otgport.py):
                              imports the client, on DIR/job-NNN.json acquires port 0 and adds
                              the streams, on DIR/go-NNN sends them from its start time, keeping
                              a counters file in the engine's `--counters` layout; SIGUSR1
                              pauses, SIGUSR2 resumes, SIGTERM stops.

SIGTERM or SIGINT during `run` stops the traffic, collects the statistics and releases the port
before exiting (status `stopped`).
"""

import sys

# Run by path, this file's folder is sys.path[0]: its modules (stl_profile.py, ...) must not
# shadow the standard library's or TRex's.
if sys.path and sys.path[0] == __file__.rsplit("/", 1)[0]:
    del sys.path[0]

import json
import os
import signal
import time
import traceback
from typing import Any

import lbr_trex_client  # noqa: F401  (first: it puts its bundled Scapy and `trex` on sys.path)

_stop: list[int] = []
_go: list[int] = []


def emit(event: str, **data) -> None:
    data["event"] = event
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def _on_signal(signum, _frame) -> None:
    _stop.append(signum)


def _on_go(signum, _frame) -> None:
    _go.append(signum)


# ---- build ----------------------------------------------------------------------------------


def build_packet(p: dict):
    from trex.stl.api import ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest, IPv6, Raw

    eth = Ether(src=p["eth"]["src"], dst=p["eth"]["dst"])
    ip = p["ip"]
    if ip["version"] == 4:
        l3 = IP(src=ip["src"], dst=ip["dst"], ttl=64, id=0, flags="DF")
    else:
        l3 = IPv6(src=ip["src"], dst=ip["dst"], hlim=64)
    l4 = p["l4"]
    if l4["proto"] == "udp":
        l4p = UDP(sport=l4["sport"], dport=l4["dport"], chksum=l4.get("chksum"))  # None: computed
    elif l4["proto"] == "tcp":
        l4p = TCP(
            sport=l4["sport"],
            dport=l4["dport"],
            flags=l4["flags"],
            seq=l4["seq"],
            ack=l4["ack"],
            window=l4["window"],
        )
    elif l4["proto"] == "icmp":
        l4p = ICMP(type=l4["type"], code=l4["code"], id=l4["id"], seq=l4["seq"])
    else:
        l4p = ICMPv6EchoRequest(id=l4["id"], seq=l4["seq"])
    content = bytes.fromhex(p["payload_hex"])
    payload = (content + bytes(max(0, p["payload_len"] - len(content))))[
        : max(p["payload_len"], len(content))
    ]
    return eth / l3 / l4p / Raw(payload)


def build_stream(s: dict):
    from trex.stl.api import (
        STLVM,
        CTRexVmInsFixHwCs,
        STLFlowLatencyStats,
        STLFlowStats,
        STLPktBuilder,
        STLStream,
        STLTXCont,
        STLTXMultiBurst,
        STLTXSingleBurst,
    )

    pkt = build_packet(s["packet"])
    vm = STLVM()
    for ins in s["vm"]:
        op = ins["op"]
        if op == "var":
            vm.var(
                name=ins["name"],
                min_value=ins["min"],
                max_value=ins["max"],
                init_value=ins["init"],
                size=ins["size"],
                op=ins["kind"],
                step=ins["step"],
                next_var=ins["next_var"],
            )
        elif op == "write":
            vm.write(
                fv_name=ins["var"],
                pkt_offset=ins["field"],
                offset_fixup=ins.get("offset_fixup", 0),
                add_val=ins.get("add", 0),
            )
        elif op == "trim":
            vm.trim(fv_name=ins["var"])
        elif op == "fix_checksums":
            l3, l4 = ins["l3"], ins["l4"]
            if l4 in ("tcp", "udp"):
                kind = (
                    CTRexVmInsFixHwCs.L4_TYPE_UDP if l4 == "udp" else CTRexVmInsFixHwCs.L4_TYPE_TCP
                )
                vm.fix_chksum_hw(l3_offset=l3, l4_offset=l4.upper(), l4_type=kind)
            elif l4 == "icmp":
                vm.fix_chksum()
            else:
                vm.fix_chksum_icmpv6(l3_offset=l3, l4_offset=14 + 40)
        else:
            raise ValueError(f"{s['label']}: unknown field-engine instruction {op!r}")
    m, rate = s["mode"], s["rate"]
    if m["type"] == "continuous":
        mode = STLTXCont(**rate)
    elif m["type"] == "single_burst":
        mode = STLTXSingleBurst(total_pkts=m["total_pkts"], **rate)
    else:
        mode = STLTXMultiBurst(
            pkts_per_burst=m["pkts_per_burst"], ibg=m["ibg_us"], count=m["count"], **rate
        )
    counted = None
    if s.get("pg_id"):  # a latency probe: TRex's latency, jitter and sequence checks too
        counted = (STLFlowLatencyStats if s.get("latency") else STLFlowStats)(pg_id=s["pg_id"])
    return STLStream(
        name=s["name"],
        packet=STLPktBuilder(pkt=pkt, vm=vm),
        mode=mode,
        isg=s["isg_us"],
        random_seed=s["random_seed"],
        flow_stats=counted,
        mac_src_override_by_pkt=True,
        mac_dst_override_mode=1,
    )


def build(spec_path: str, outdir: str) -> int:
    from pathlib import Path

    import yaml  # TRex's own (external_libs), the one its load_yaml reads with
    from trex.stl.api import STLProfile

    spec = json.loads(Path(spec_path).read_text())
    out = Path(outdir)
    streams = []
    for s in spec["streams"]:
        try:
            streams.append(build_stream(s))
        except Exception as exc:
            emit("error", stage="build", stream=s["label"], message=f"{type(exc).__name__}: {exc}")
            return 2
    profile = STLProfile(streams)
    py = out / "trex-profile.py"
    py.write_text(fix_dump(profile.dump_to_code()))
    data = profile.to_json()
    (out / "trex-profile.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "trex-profile.yaml").write_text(yaml.safe_dump(data, default_flow_style=False))
    again = STLProfile.load_py(str(py)).to_json()
    if _without_ids(again) != _without_ids(data):
        emit(
            "error", stage="build", message=f"{py} does not load back as the profile that was built"
        )
        return 2
    emit(
        "built",
        streams=len(streams),
        files=[str(py), str(out / "trex-profile.json"), str(out / "trex-profile.yaml")],
    )
    return 0


# dump_to_code names ICMPv6 echo fields by a layer name that TRex's own loader cannot find
# ("no layer ICMPv6EchoRequest-0"): the dump gets their byte offsets instead (IPv6 without
# extension headers: the ICMPv6 header at 54, its identifier at 58, its sequence at 60).
_DUMP_FIXES = (
    ("pkt_offset='ICMPv6EchoRequest.id'", "pkt_offset=58"),
    ("pkt_offset='ICMPv6EchoRequest.seq'", "pkt_offset=60"),
    ("l4_offset='ICMPv6EchoRequest'", "l4_offset=54"),
)


def fix_dump(code: str) -> str:
    for old, new in _DUMP_FIXES:
        code = code.replace(old, new)
    return code


def _without_ids(data: list) -> list:
    return [{k: v for k, v in s.items() if k not in ("id",)} for s in data]


# ---- run ------------------------------------------------------------------------------------


def _port_stats(stats: dict, port: int) -> dict:
    keys = ("opackets", "obytes", "oerrors", "ipackets", "ibytes", "ierrors")
    return {k: int(stats[port].get(k, 0)) for k in keys}


SEQ_ERRORS = ("dropped", "out_of_order", "dup", "seq_too_high", "seq_too_low")


def latency_stats(pgid: dict, probes: set, port: int) -> dict:
    """The latency probes' numbers from get_pgid_stats, by pg_id: tx (on PORT) and rx (on every
    port) packets and bytes, TRex's min / average / max latency and jitter (microseconds), its
    histogram ({lower bound in µs: packets}) and its sequence errors; `global`: TRex's latency
    packets it could not place (old_flow, bad_hdr)."""
    out: dict = {}
    flow, lat = pgid.get("flow_stats", {}), pgid.get("latency", {})
    for pg in sorted(probes, key=int):
        f = flow.get(int(pg), flow.get(pg, {}))
        l_ = lat.get(int(pg), lat.get(pg, {}))
        inner, err = l_.get("latency", {}), l_.get("err_cntrs", {})
        out[pg] = {
            "tx_pkts": _number((f.get("tx_pkts") or {}).get(port)),
            "tx_bytes": _number((f.get("tx_bytes") or {}).get(port)),
            "rx_pkts": _number((f.get("rx_pkts") or {}).get("total")),  # all ports
            "rx_bytes": _number((f.get("rx_bytes") or {}).get("total")),
            "min_us": _number(inner.get("total_min")),
            "avg_us": _number(inner.get("average")),
            "max_us": _number(inner.get("total_max")),
            "jitter_us": _number(inner.get("jitter")),
            "histogram": {
                str(k): int(v)
                for k, v in sorted(
                    (inner.get("histogram") or {}).items(), key=lambda kv: float(kv[0])
                )
            },
            # the highest range that holds a probe: TRex's total_max can miss a probe's
            # last sampling period (README, "Latency probes"), its histogram does not
            "histogram_max_from_us": _number(
                max(
                    (float(k) for k, v in (inner.get("histogram") or {}).items() if v), default=None
                )
            ),
            "seq_errors": {k: int(err.get(k, 0)) for k in SEQ_ERRORS},
        }
    if probes:
        out["global"] = {
            k: int(v) for k, v in (lat.get("global") or {}).items() if isinstance(v, (int, float))
        }
    return out


def _number(value):
    """TRex's number, or None where it says "not available" (StatNotAvailable, no packet yet)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if float(value).is_integer() else float(value)


def _client(client_cls, job: dict):
    """A TRex client (STL or ASTF) for JOB's server, and the API it speaks as text."""
    client = client_cls(
        server=job["host"],
        sync_port=job["sync_port"],
        async_port=job["async_port"],
        username=job.get("username") or "ntg-testbed",
        verbose_level="error",
        sync_timeout=job.get("rpc_timeout"),
        async_timeout=job.get("rpc_timeout"),
    )
    ours = client.ctx.api_ver
    api = "{name} {major}.{minor}".format(**ours)
    if job.get("api_override"):  # tests: pretend to be another client version
        client.ctx.api_ver = dict(ours, **job["api_override"])
        api += " (claiming {name} {major}.{minor})".format(**client.ctx.api_ver)
    return client, api


def _error_text(exc: BaseException, api: str) -> str:
    """TRex's error as one line (its text is what the user needs), with what to do for a client
    of the wrong version or a server in the wrong mode."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if "RPC version mismatch" in text:
        text += (
            f" (this client is lbr-trex-client {_client_version()}, API {api}; install the "
            f"lbr-trex-client release that matches the server's TRex version: 3.4.0 "
            f"for TRex v3.0x)"
        )
    return text + _mode_hint(text)


def _connect(client, api: str, mode: str, error, need: str) -> None:
    """Connect (the API-version check happens here), say so, and refuse a server in another
    mode than MODE with ERROR, NEED saying what to start instead."""
    client.connect()
    version = client.get_server_version()
    emit(
        "connected",
        server_version=version.get("version"),
        mode=version.get("mode"),
        client_api=api,
        ports=client.get_port_count(),
    )
    if version.get("mode") not in (None, mode):
        raise error(f"the server runs in {version.get('mode')} mode; {need}")


def run(job_path: str) -> int:
    from pathlib import Path

    from trex.stl.api import STLClient, STLError, STLProfile

    job = json.loads(Path(job_path).read_text())
    if job.get("mode") == "astf":
        return run_astf(job)
    port = job["port"]
    client, api = _client(STLClient, job)
    stage = "connect"
    acquired = False
    status = "failed"
    try:
        _connect(
            client, api, "STL", STLError, "stateless profiles need a server started without --astf"
        )
        if port >= client.get_port_count():
            raise STLError(
                f"the server has {client.get_port_count()} port(s); port {port} is not one of them"
            )
        stage = "acquire"
        client.acquire(ports=[port], force=False)
        acquired = True
        stage = "reset"
        client.reset(ports=[port])
        stage = "add_streams"
        profile = STLProfile.load_py(job["profile"])
        client.add_streams(profile.get_streams(), ports=[port])
        client.clear_stats()
        stage = "ready"
        emit("ready", streams=len(profile.get_streams()))
        waited = time.monotonic() + job.get("ready_timeout_s", 3600)
        while not _go and not _stop:  # the adapter's start() sends SIGUSR1
            if time.monotonic() > waited:
                raise STLError("start was not asked for within ready_timeout_s; gave up")
            time.sleep(0.005)
        stage = "start"
        if _stop:
            raise KeyboardInterrupt
        client.start(ports=[port], force=False)
        t0 = time.monotonic()
        emit("started")
        stage = "traffic"
        deadline = t0 + job["expected_s"] + job["max_overrun_s"]
        stop_at = t0 + job["duration_s"] if job.get("duration_s") else None
        status = "completed"
        while True:
            time.sleep(job.get("poll_s", 0.2))
            now = time.monotonic()
            stats = client.get_stats(ports=[port])
            emit("progress", t=round(now - t0, 3), opackets=int(stats[port]["opackets"]))
            if _stop:
                status = "stopped"
                break
            if stop_at is not None and now >= stop_at:
                break
            if not client.is_traffic_active(ports=[port]):
                break
            if now > deadline:
                status = "overrun"
                break
        stage = "stop"
        client.stop(ports=[port])
        seconds = time.monotonic() - t0
        time.sleep(0.3)  # the last counters reach the server's stats
        stats = client.get_stats(ports=[port])
        streams, latency = {}, {}
        probes = {str(pg) for pg in job.get("latency_pg_ids") or ()}
        if job.get("stream_stats") or probes:
            pgid = client.get_pgid_stats()
            receiver = (
                1 if job.get("server_port") else None
            )  # TRex's port 1 receives what port 0 sent
            for pg, st in pgid.get(
                "flow_stats", {}
            ).items():  # TRex's per-stream counters, by pg_id
                if pg != "global" and str(pg) not in probes:
                    streams[str(pg)] = {
                        k: int(st.get(k, {}).get(port, 0)) for k in ("tx_pkts", "tx_bytes")
                    }
                    if receiver is not None:
                        streams[str(pg)].update(
                            {
                                k: int(st.get(k, {}).get(receiver, 0))
                                for k in ("rx_pkts", "rx_bytes")
                            }
                        )
            latency = latency_stats(pgid, probes, port)
        server_port = stats.get(1) if job.get("server_port") else None
        emit(
            "stats",
            port=port,
            seconds=round(seconds, 6),
            port_stats=_port_stats(stats, port),
            server_port_stats=_port_stats(stats, 1) if server_port else {},
            total=_port_stats({0: stats["total"]}, 0),
            global_=stats.get("global", {}),
            streams=streams,
            latency=latency,
        )
        stage = "release"
        client.release(ports=[port])
        acquired = False
        client.disconnect()
        emit("done", status=status)
        return 0
    except (STLError, Exception) as exc:  # the TRex error text is what the user needs
        emit("error", stage=stage, message=_error_text(exc, api))
        return 2
    except KeyboardInterrupt:
        emit("done", status="stopped")
        return 0
    finally:
        try:
            if acquired and client.is_connected():
                client.stop(ports=[port])
                client.release(ports=[port])
            if client.is_connected():
                client.disconnect(stop_traffic=False, release_ports=False)
        except Exception as exc:
            emit("cleanup", message=f"{type(exc).__name__}: {exc}")


def _mode_hint(text: str) -> str:
    if "RPC configuration mismatch" not in text:
        return ""
    return (
        " (the generator's `mode: astf` needs a TRex server started with --astf, `mode: stl` "
        "one started without it)"
    )


def _client_version() -> str:
    try:
        from importlib import metadata

        return metadata.version("lbr-trex-client")
    except Exception:
        return "unknown"


# ---- ASTF -----------------------------------------------------------------------------------


def astf_build(profile_py: str, outdir: str) -> int:
    from pathlib import Path

    from trex.astf.api import ASTFProfile

    try:
        profile = ASTFProfile.load_py(profile_py)
        data = profile.to_json()
    except Exception as exc:
        emit("error", stage="build", message=f"{type(exc).__name__}: {exc}")
        return 2
    out = Path(outdir) / "trex-astf-profile.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    emit("built", templates=len(data.get("templates", [])), files=[profile_py, str(out)])
    return 0


# TRex's TCP counters (tcps_*) and its flow-table errors (err_*) kept in `stats`; the rest of
# get_traffic_stats (udps_*, per-mbuf counters, ...) stays in TRex.
def _tcp_counters(side: dict) -> dict:
    return {
        k: int(v)
        for k, v in side.items()
        if isinstance(v, (int, float)) and (k.startswith("tcps_") or k.startswith("err_")) and v
    }


def run_astf(job: dict) -> int:
    from trex.astf.api import ASTFClient, ASTFProfile, TRexError
    from trex.common.trex_exceptions import TRexTimeoutError

    client, api = _client(ASTFClient, job)
    stage = "connect"
    acquired = False
    status = "failed"
    try:
        _connect(client, api, "ASTF", TRexError, "ASTF profiles need a server started with --astf")
        stage = "acquire"
        client.acquire(force=False)
        acquired = True
        stage = "reset"
        client.reset()
        stage = "load_profile"
        profile = ASTFProfile.load_py(job["profile"])
        client.load_profile(profile)
        client.clear_stats()
        stage = "ready"
        emit("ready", templates=len(profile.to_json().get("templates", [])))
        waited = time.monotonic() + job.get("ready_timeout_s", 3600)
        while not _go and not _stop:
            if time.monotonic() > waited:
                raise TRexError("start was not asked for within ready_timeout_s; gave up")
            time.sleep(0.005)
        stage = "start"
        if _stop:
            raise KeyboardInterrupt
        # new connections for duration_s (each template stops at its `limit`), then TRex waits
        # for every open flow to close before the profile is back in its loaded state
        client.start(mult=1, duration=job["duration_s"], nc=False, block=True)
        t0 = time.monotonic()
        emit("started")
        stage = "traffic"
        deadline = t0 + job["expected_s"] + job["max_overrun_s"]
        status = "completed"
        while True:
            try:
                client.wait_on_traffic(timeout=job.get("poll_s", 0.2))
                break
            except TRexTimeoutError:
                pass
            now = time.monotonic()
            traffic = client.get_traffic_stats(skip_zero=False)
            emit(
                "progress",
                t=round(now - t0, 3),
                opackets=int(traffic.get("client", {}).get("tcps_sndtotal", 0)),
                connections=int(traffic.get("client", {}).get("tcps_connattempt", 0)),
            )
            if _stop:
                status = "stopped"
                break
            if now > deadline:
                status = "overrun"
                break
            if job.get("connections") and all(
                int(traffic.get(side, {}).get("tcps_closed", 0)) >= job["connections"]
                for side in ("client", "server")
            ):
                break  # every connection opened and closed on both sides: no need to wait for `duration`
        seconds = time.monotonic() - t0
        stage = "stop"
        client.stop()
        time.sleep(0.3)  # the last counters reach the server's stats
        stats = client.get_stats(skip_zero=False)
        traffic = stats.get("traffic", {})
        groups: dict[str, Any] = {}
        try:
            names = client.get_tg_names()
            if names:
                for name, st in client.get_traffic_tg_stats(names, skip_zero=False).items():
                    groups[name] = {
                        side: _tcp_counters(st.get(side, {})) for side in ("client", "server")
                    }
        except Exception as exc:  # per-template counters are extra: never fail the run on them
            groups = {"error": f"{type(exc).__name__}: {exc}"}
        emit(
            "stats",
            port=0,
            seconds=round(seconds, 6),
            port_stats=_port_stats(stats, 0),
            server_port_stats=_port_stats(stats, 1) if 1 in stats else {},
            total=_port_stats({0: stats["total"]}, 0),
            astf={side: _tcp_counters(traffic.get(side, {})) for side in ("client", "server")},
            groups=groups,
        )
        stage = "release"
        client.release()
        acquired = False
        client.disconnect()
        emit("done", status=status)
        return 0
    except KeyboardInterrupt:
        emit("done", status="stopped")
        return 0
    except Exception as exc:
        emit("error", stage=stage, message=_error_text(exc, api))
        return 2
    finally:
        try:
            if acquired and client.is_connected():
                client.stop()
                client.release()
            if client.is_connected():
                client.disconnect(stop_traffic=False, release_ports=False)
        except Exception as exc:
            emit("cleanup", message=f"{type(exc).__name__}: {exc}")


# ---- sim ------------------------------------------------------------------------------------


def sim(profile: str, out: str, sim_dir: str) -> int:
    from trex.stl import trex_stl_sim

    # The simulator first checks that every stream survives to_json -> from_json -> to_json, and
    # the client's from_json (3.4.0) drops a flow variable's init_value: a variable that starts
    # inside its range (an increment from the given address, the ICMP checksum) fails that check
    # although the server gets the init_value (add_streams sends to_json). The check is skipped.
    trex_stl_sim.STLSim.verify_json = lambda self, streams: None
    rc = trex_stl_sim.main(["-p", sim_dir, "-r", "-f", profile, "-o", out])
    emit(
        "simulated" if rc == 0 else "error",
        rc=rc,
        pcap=out,
        stage="sim",
        message="" if rc == 0 else f"bp-sim-64 exited with {rc}",
    )
    return 0 if rc == 0 else 2


# ---- otg: the flows of an OTG config on one TRex port (testbed/otg/trexsender.py) ------------

_pause: list[int] = []


def _on_pause(signum, _frame) -> None:
    _pause.append(signum)


def otg_stream(s: dict):
    """One stream of an OTG flow (trexsender.streams): its frame as bytes, unchanged (the FCS
    bytes it carries are data, so TRex's removal of a trailing Padding layer is off), the
    signature's sequence number written by the field engine and the one checksum over it fixed."""
    from trex.stl.api import (
        STLVM,
        CTRexVmInsFixHwCs,
        STLPktBuilder,
        STLStream,
        STLTXCont,
        STLTXMultiBurst,
        STLTXSingleBurst,
    )

    vm = STLVM()
    seq = s.get("seq")
    if seq is not None:
        name = "seq"
        vm.var(
            name=name,
            min_value=0,
            max_value=2**32 - 1,
            size=4,
            op="inc",
            step=seq["step"],
            init_value=seq["init"],
        )
        vm.write(fv_name=name, pkt_offset=seq["off"])
    fix = s.get("fix")
    if fix is not None:
        if fix["kind"] == "icmpv6":
            vm.fix_chksum_icmpv6(l3_offset=fix["l3"], l4_offset=fix["l4"])
        else:
            kind = {"udp": CTRexVmInsFixHwCs.L4_TYPE_UDP, "tcp": CTRexVmInsFixHwCs.L4_TYPE_TCP}
            vm.fix_chksum_hw(l3_offset=fix["l3"], l4_offset=fix["l4"], l4_type=kind[fix["kind"]])
    m = s["mode"]
    if m["type"] == "continuous":
        mode = STLTXCont(pps=s["pps"])
    elif m["type"] == "single_burst":
        mode = STLTXSingleBurst(total_pkts=m["total_pkts"], pps=s["pps"])
    else:
        mode = STLTXMultiBurst(
            pkts_per_burst=m["pkts_per_burst"], ibg=m["ibg_us"], count=m["count"], pps=s["pps"]
        )
    builder = STLPktBuilder(
        pkt_buffer=bytes.fromhex(s["frame_hex"]), vm=vm if seq or fix else None, remove_fcs=False
    )
    return STLStream(
        name=s["name"],
        packet=builder,
        mode=mode,
        isg=s["isg_us"],
        mac_src_override_by_pkt=True,
        mac_dst_override_mode=1,
    )


def _wait_file(path):
    """PATH's JSON once it appears, or None after a SIGTERM."""
    from pathlib import Path

    p = Path(path)
    while not p.exists():
        if _stop:
            return None
        time.sleep(0.001)
    return json.loads(p.read_text())


def otg_wait(go_path: str) -> int:
    """One start of an OTG port (generators/trex/otgport.py): import the client (about a second
    here), then on DIR/job-NNN.json acquire port 0, add the streams, clear the counters and say
    `ready`; on DIR/go-NNN start at its `start_at_ns` (CLOCK_REALTIME; at once when later) and
    keep its counters file (the engine's `--counters` layout: NTGCNT01, lines, state; the line's
    packets and bytes without TRex's 4 FCS bytes) from TRex's port counters until the traffic
    ends or SIGTERM; SIGUSR1 pauses, SIGUSR2 resumes."""
    import mmap
    import struct
    from pathlib import Path

    from trex.stl.api import STLClient

    job_path = go_path.replace("/go-", "/job-") + ".json"
    job = _wait_file(job_path)
    if job is None:
        return 0
    port = 0
    client, api = _client(STLClient, job)
    acquired = False
    paused = False
    signal.signal(signal.SIGUSR1, _on_pause)
    signal.signal(signal.SIGUSR2, _on_pause)
    try:
        _connect(client, api, "STL", RuntimeError, "start the server without --astf")
        deadline = time.monotonic() + 5
        while True:  # the previous start's worker may be releasing the port still
            try:
                client.acquire(ports=[port], force=False)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        acquired = True
        client.reset(ports=[port])
        streams = [otg_stream(s) for s in job["streams"]]
        client.add_streams(streams, ports=[port])
        client.clear_stats()
        Path(job["ready"]).write_text("ready\n")
        emit("ready", streams=len(streams))
        go = _wait_file(go_path)
        if go is None:
            return 0
        sys.stdout.flush()  # from here on the output goes with the start
        fd = os.open(go["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        counters = Path(go["counters"])
        counters.write_bytes(b"NTGCNT01" + struct.pack("=QQ", 1, 0) + bytes(16))
        with open(counters, "r+b") as cf, mmap.mmap(cf.fileno(), 40) as cnt:
            total = go.get("packets")  # None: until stopped

            def put(state: int, stats: dict) -> tuple[int, int]:
                pk = int(stats[port].get("opackets", 0))
                by = max(0, int(stats[port].get("obytes", 0)) - 4 * pk)  # TRex adds an FCS
                if total is not None and pk >= total:
                    state = 2  # all sent: finished with the last count, never after it
                if state == 2:
                    struct.pack_into("=Q", cnt, 16, state)
                struct.pack_into("=QQ", cnt, 24, pk, by)
                struct.pack_into("=Q", cnt, 16, state)
                return pk, by

            while time.clock_gettime_ns(time.CLOCK_REALTIME) < go["start_at_ns"] and not _stop:
                time.sleep(0.0005)
            started = time.clock_gettime_ns(time.CLOCK_REALTIME)
            Path(go["started"]).write_text(str(started))
            if not _stop:
                client.start(ports=[port], force=False)
            emit("started", started_utc_ns=started, late_ns=started - go["start_at_ns"])
            while not _stop:
                time.sleep(0.05)
                while _pause:
                    sig = _pause.pop(0)
                    if sig == signal.SIGUSR1 and not paused:
                        client.pause(ports=[port])
                        paused = True
                    elif sig == signal.SIGUSR2 and paused:
                        client.resume(ports=[port])
                        paused = False
                stats = client.get_stats(ports=[port])
                if not paused and not client.is_traffic_active(ports=[port]):
                    put(2, stats)  # done sending (a start may come: the port is free soon)
                    break
                put(1 if paused else 0, stats)
            if client.is_traffic_active(ports=[port]):
                client.stop(ports=[port])
            time.sleep(0.3)  # the last counters reach the server's stats
            stats = client.get_stats(ports=[port])
            pk, by = put(2 if not _stop else 0, stats)
            summary = {
                "packets": pk,
                "sent": pk,
                "failed": 0,
                "bytes": by,
                "trex": _port_stats(stats, port),
                "started_utc_ns": started,
                "late_ns": started - go["start_at_ns"],
                "stopped": bool(_stop),
            }
            Path(go["summary"]).write_text(json.dumps(summary) + "\n")
            put(2, stats)  # finished: the summary is there (the port is released next)
        emit("done", **summary)
        return 0
    finally:
        if acquired:
            try:
                client.release(ports=[port])
            except Exception:
                pass
        try:
            client.disconnect()
        except Exception:
            pass


def main(argv: list) -> int:
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGUSR1, _on_go)
    try:
        if len(argv) == 3 and argv[0] == "build":
            return build(argv[1], argv[2])
        if len(argv) == 2 and argv[0] == "run":
            return run(argv[1])
        if len(argv) == 4 and argv[0] == "sim":
            return sim(argv[1], argv[2], argv[3])
        if len(argv) == 3 and argv[0] == "astf-build":
            return astf_build(argv[1], argv[2])
        if len(argv) == 2 and argv[0] == "otg-wait":
            return otg_wait(argv[1])
    except Exception as exc:
        emit(
            "error",
            stage=argv[0] if argv else "?",
            message=f"{type(exc).__name__}: {exc}",
            trace=traceback.format_exc(limit=5),
        )
        return 2
    print(
        "usage: worker.py build PROFILE.json OUTDIR | run JOB.json | sim PROFILE.py OUT.pcap SIMDIR"
        " | astf-build PROFILE.py OUTDIR | otg-wait GO",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
