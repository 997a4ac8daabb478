"""The host's table for the evasion run: every variant of the chosen classes applied to probe
sessions and sent live into a Linux stack (`testbed.ids.hostlabel`); whether the server
application got the client's bytes labels that variant for every rule, and Suricata's verdict on
the same live capture (a probe rule per protocol, in each reassembly configuration) is the live
row of the evasion matrix (docs/ids-coverage.md, "Evasion variants").

A variant does the same to any bytes (positions and lengths, never contents: the junk differs
from the real bytes at every position), so what the host does with it on a probe is what it does
with a rule's session; the probes are long enough for every trick (more than one MSS, so the
tricks that cut per MSS chunk run twice).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from idsrules.evasion import variants
from idsrules.evasion.model import WirePlan, plain_plan
from ntgcore import packets as P
from ntgcore.files import write_whole

from .evasion import CONFIGS
from .hostlabel import CLIENT, LiveResult, label_live
from .suricata import Dut, run_offline

TCP_END = b"end-of-ntg-evasion-probe"
UDP_END = b"end-of-ntg-udp-probe"
LINE_MARK = b"ntg-line-probe"  # in the argument of a command of the FTP and SMTP probes
PROBE_SID = {
    "tcp": 9_900_001,
    "udp": 9_900_002,
    "http-uri": 9_900_003,
    "http-body": 9_900_004,
    "ftp": 9_900_005,
    "smtp": 9_900_006,
}
PROBE_PORT = {"tcp": 8080, "udp": 5353, "ftp": 21, "smtp": 25}
PROBE_NAME = {8080: "http", 5353: "udp", 21: "ftp", 25: "smtp"}  # by server port
# application probes: the classes that vary only such dialogues, and the probes they take
APP_PROBES = {"line-variants": ("ftp", "smtp")}


def probe_messages(proto: str) -> list[tuple[bool, bytes]]:
    """A request over two MSS-sized chunks ending in the probe's marker, an answer, and a second
    client message; for UDP a datagram and its answer; `ftp` and `smtp`: a short dialogue whose
    commands carry LINE_MARK (the SMTP one with a message)."""
    if proto == "udp":
        return [(True, b"udp-probe " + b"0123456789" * 30 + UDP_END), (False, b"answer")]
    if proto == "ftp":
        return [
            (False, b"220 (NtgFTPd 1.0) ready\r\n"),
            (True, b"USER anonymous\r\n"),
            (False, b"331 Please specify the password.\r\n"),
            (True, b"PASS probe@example.com\r\n"),
            (False, b"230 Login successful.\r\n"),
            (True, b"MKD " + LINE_MARK + b"\r\n"),
            (False, b"257 created\r\n"),
            (True, b"QUIT\r\n"),
            (False, b"221 Goodbye.\r\n"),
        ]
    if proto == "smtp":
        return [
            (False, b"220 mail.example.com ESMTP ready\r\n"),
            (True, b"EHLO probe.example\r\n"),
            (False, b"250 mail.example.com\r\n"),
            (True, b"MAIL FROM:<probe@example.com>\r\n"),
            (False, b"250 OK\r\n"),
            (True, b"RCPT TO:<" + LINE_MARK + b"@example.com>\r\n"),
            (False, b"250 OK\r\n"),
            (True, b"DATA\r\n"),
            (False, b"354 go ahead\r\n"),
            (True, b"Subject: probe\r\n\r\nline one\r\n..a dot line\r\n.\r\n"),
            (False, b"250 OK queued\r\n"),
            (True, b"QUIT\r\n"),
            (False, b"221 bye\r\n"),
        ]
    head = b"POST /evasion-probe HTTP/1.1\r\nHost: probe.example\r\nContent-Length: 1700\r\n\r\n"
    body = (b"abcdefghijklmnopqrstuvwxyz" * 70)[: 1700 - len(TCP_END)] + TCP_END
    return [
        (True, head + body),
        (False, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        (True, b"GET /second HTTP/1.1\r\nHost: probe.example\r\n\r\n"),
    ]


def probe_rules() -> str:
    """The probe's rules: the marker at the end of the first client message (raw stream, and
    for the application-level variants the decoded request: its URI and its body), the UDP
    marker, and the FTP and SMTP commands' marker."""
    tcp, udp = PROBE_PORT["tcp"], PROBE_PORT["udp"]
    return (
        f'alert tcp any any -> any {tcp} (msg:"ntg evasion probe, tcp"; '
        f'flow:to_server; content:"{TCP_END.decode()}"; sid:{PROBE_SID["tcp"]}; rev:1;)\n'
        f'alert udp any any -> any {udp} (msg:"ntg evasion probe, udp"; '
        f'content:"{UDP_END.decode()}"; sid:{PROBE_SID["udp"]}; rev:1;)\n'
        f'alert http any any -> any {tcp} (msg:"ntg evasion probe, http uri"; '
        f'flow:to_server; http.uri; content:"/evasion-probe"; sid:{PROBE_SID["http-uri"]}; '
        "rev:1;)\n"
        f'alert http any any -> any {tcp} (msg:"ntg evasion probe, http body"; '
        f'flow:to_server; http.request_body; content:"{TCP_END.decode()}"; '
        f"sid:{PROBE_SID['http-body']}; rev:1;)\n"
        + "".join(
            f'alert tcp any any -> any {PROBE_PORT[app]} (msg:"ntg evasion probe, {app}"; '
            f'flow:to_server; content:"{LINE_MARK.decode()}"; sid:{PROBE_SID[app]}; rev:1;)\n'
            for app in ("ftp", "smtp")
        )
    )


def probe_items(classes: list[str], seed: int = 1) -> dict[int, list[tuple[WirePlan, int]]]:
    """(plan, server port) per IP version: the plain probe (the control) and every variant; the
    application probes (APP_PROBES) over IPv4, varied by their class only."""
    by_version: dict[int, list[tuple[WirePlan, int]]] = {4: [], 6: []}
    for proto in ("tcp", "udp"):
        base = plain_plan(proto, probe_messages(proto), seed)
        varied = variants(base, classes, seed)
        for v in (4, 6):
            if v == 4 or any(x.family == 6 for x in varied):
                by_version[v].append((base, PROBE_PORT[proto]))
        for x in varied:
            by_version[6 if x.family == 6 else 4].append((x, PROBE_PORT[proto]))
    for cls, apps in APP_PROBES.items():
        if cls not in classes:
            continue
        for app in apps:
            base = plain_plan("tcp", probe_messages(app), seed)
            by_version[4] += [(x, PROBE_PORT[app]) for x in [base, *variants(base, [cls], seed)]]
    return {v: items for v, items in by_version.items() if items}


class ProbeError(RuntimeError):
    pass


def live_table(
    classes: list[str],
    out: Path,
    dut: Dut,
    *,
    progress: Callable[[str], None] | None = None,
    on_places: Callable[[list[str]], None] | None = None,
) -> tuple[dict[tuple[str, str], bool | None], dict]:
    """The host's label per (variant, proto), and the live document (host.json): per probe
    variant what the host read and whether Suricata alerted on the live capture per
    configuration. ProbeError when a plain probe does not reach the host (the lab is broken and
    would label nothing). `on_places(namespaces)`: before each lab is made (`label_live`), for
    the caller's run mark."""
    say = progress or (lambda msg: None)
    out.mkdir(parents=True, exist_ok=True)
    rules = out / "probe.rules"
    write_whole(rules, probe_rules())
    labels: dict[tuple[str, str], bool | None] = {}
    rows = []
    by_version = probe_items(classes)

    def measure(version: int) -> tuple[LiveResult, dict[str, set[int]]]:
        """One lab per IP version (both at once: a session mostly waits for the host)."""
        items = by_version[version]
        say(f"sending {len(items)} probe variants live over IPv{version}")
        res = label_live(items, out / f"ipv{version}", ip_version=version, on_places=on_places)
        client = P.short_address(CLIENT[version])
        alerts: dict[str, set[int]] = {}
        for conf, host_os in CONFIGS.items():
            suri = run_offline(
                res.capture,
                [rules],
                out / f"ipv{version}" / conf,
                binary=dut.binary,
                config=dut.config,
                host_os=host_os,
                runmode="single",
            )
            alerts[conf] = {
                a.sport if P.short_address(a.src) == client else a.dport
                for a in suri.alerts
                if a.sid in PROBE_SID.values()
            }
        return res, alerts

    with ThreadPoolExecutor(max_workers=len(by_version)) as pool:
        measured = dict(zip(by_version, pool.map(measure, by_version)))
    for version, items in by_version.items():
        res, alerts = measured[version]
        for (plan, sport), o in zip(items, res.outcomes):
            if plan.cls == "plain" and not o.reached:
                raise ProbeError(
                    f"the plain {plan.proto} probe over IPv{version} did not reach the host "
                    f"({o.detail or 'nothing read'}); the lab in {out} labels nothing"
                )
            key = (plan.variant, plan.proto)
            if plan.cls != "plain":  # probes that disagree (FTP and SMTP lines) label nothing
                labels[key] = o.reached if labels.get(key, o.reached) == o.reached else None
            rows.append(
                {
                    "variant": plan.variant,
                    "probe": PROBE_NAME[sport],
                    "class": plan.cls,
                    "proto": plan.proto,
                    "ip_version": version,
                    "reached": o.reached,
                    "detail": o.detail,
                    "alerted": {conf: o.cport in got for conf, got in alerts.items()},
                }
            )
    doc = {"rows": rows, "capture_dirs": sorted(str(p) for p in out.glob("ipv*"))}
    write_whole(out / "host.json", json.dumps(doc, indent=1) + "\n")
    return labels, doc


def can_go_live() -> str | None:
    """Why the live labels cannot be measured here (None: they can)."""
    if os.geteuid() != 0:
        return "not root: the live lab needs network namespaces"
    return None
