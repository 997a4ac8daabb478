"""`testbed detect` and `translate-rules` on hostile or unusual input (issue 24): rule lines longer
than Suricata reads, every rule refused, merged captures' time range, the EVE fields of Suricata's
default configuration, `--midstream`, address groups Suricata would refuse, directories as rule
files, and `translate-rules` after `suricata -T` failed or on a file without rules; rule files that
are not UTF-8, full and read-only disks, and refused rules whose error line Suricata cut.

Everything runs the real Suricata on captures built here with scapy (tests/detect_cases/build.py).
"""

from __future__ import annotations

import datetime
import functools
import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import fill, skip_or_fail, tmpfs
from detect_cases.build import T0, tcp_session

from testbed.cli import main

pytestmark = pytest.mark.usefixtures("suricata")

GOOD = 'alert http any any -> any any (msg:"NTG passwd"; flow:established,to_server; http.uri; content:"/etc/passwd"; sid:1000030; rev:1;)'
TYPO = 'alert http any any -> any any (msg:"typo"; contnt:"x"; sid:1000040; rev:1;)'


def _http_pcap(path: Path, t: float = T0, path_in_uri: str = "/etc/passwd") -> Path:
    from scapy.layers.inet import IP
    from scapy.utils import wrpcap

    req = f"GET {path_in_uri} HTTP/1.1\r\nHost: t\r\nUser-Agent: tester\r\n\r\n".encode()
    rsp = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"
    wrpcap(str(path), tcp_session(IP, "198.18.0.10", "198.19.0.20", 42000, 80, req, rsp, t))
    return path


@pytest.fixture(scope="module")
def http_pcap(tmp_path_factory) -> Path:
    return _http_pcap(tmp_path_factory.mktemp("hardening") / "http.pcap")


def _detect(capsys, pcap, rules, out, *args) -> tuple[int, dict | None, str, str]:
    capsys.readouterr()
    try:
        code = main(
            [
                "detect",
                *map(str, pcap if isinstance(pcap, list) else [pcap]),
                "--rules",
                *map(str, rules),
                "--out",
                str(out),
                "-q",
                *args,
            ]
        )
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    printed = capsys.readouterr()
    doc = json.loads((out / "detect.json").read_text()) if (out / "detect.json").is_file() else None
    return code, doc, printed.out, printed.err


@pytest.mark.parametrize("size", [int(9.8 * 2**20), 10 * 2**20])
def test_rule_lines_longer_than_suricata_reads_are_refused_at_their_own_line(
    size, http_pcap, tmp_path, capsys
):
    """A 9.8 MB rule was '0 refused' and a 10 MB one 'line 1,281' with 2.6 MB echoed: Suricata reads
    8,191 bytes of a line at a time and parses each piece as a rule. Also a 4 KB bad rule, whose
    Suricata error line is cut before its "from file F at line N", is found at its own line."""
    rules = tmp_path / "hostile.rules"
    long_rule = (
        f'alert http any any -> any any (msg:"long"; content:"{"a" * size}"; sid:1000050; rev:1;)'
    )
    mid_bad = f'alert http any any -> any any (msg:"mid"; content:"{"b" * 4000}"; contnt:"x"; sid:1000060; rev:1;)'
    long_comment = "# " + "c" * 20000
    rules.write_text("\n".join(["# hostile", long_rule, GOOD, long_comment, mid_bad, TYPO]) + "\n")
    code, doc, out, err = _detect(capsys, http_pcap, [rules], tmp_path / "d")
    assert code == 0, err
    assert [(e["file"], e["line"], e["sid"]) for e in doc["load_errors"]] == [
        (str(rules), 2, 1000050),
        (str(rules), 5, 1000060),
        (str(rules), 6, 1000040),
    ]
    assert "8,191 bytes" in doc["load_errors"][0]["reason"]
    assert doc["rules_loaded"] == 1 and doc["rules_failed"] == 3
    assert "1 loaded, 3 refused" in out
    assert {r["sid"] for r in doc["sids"]} == {1000030}  # the good rule after it still ran
    assert len(err) < 3000 and "Traceback" not in err  # no megabytes echoed
    assert f"{rules}:2: suricata refused sid 1000050" in err
    assert len(json.dumps(doc)) < 20000  # nor in the report


def test_every_rule_refused_counts_zero_loaded(http_pcap, tmp_path, capsys):
    rules = tmp_path / "bad.rules"
    rules.write_text(TYPO + "\n")
    code, doc, out, err = _detect(capsys, http_pcap, [rules], tmp_path / "d")
    assert code == 0, err
    assert doc["rules_loaded"] == 0 and doc["rules_failed"] == 1 and len(doc["load_errors"]) == 1
    assert "0 loaded, 1 refused" in out and "?" not in out.split("\n")[1]


def test_merged_captures_report_the_first_and_last_packet_of_all(tmp_path, capsys):
    """Files given newest first: the range is the merged capture's, not first file's start to last's end."""
    new = _http_pcap(tmp_path / "2020.pcap", t=1_597_017_600.0)  # 2020-08-10
    old = _http_pcap(tmp_path / "2005.pcap", t=1_128_643_200.0)  # 2005-10-07
    rules = tmp_path / "r.rules"
    rules.write_text(GOOD + "\n")
    code, doc, out, err = _detect(capsys, [new, old], [rules], tmp_path / "d")
    assert code == 0, err
    assert doc["first_utc"].startswith("2005-10-07T00:00:00") and doc["last_utc"].startswith(
        "2020-08-10T00:00:00.009"
    )
    assert f"{doc['first_utc']} .. {doc['last_utc']}" in out.splitlines()[0]
    assert sum(r["alerts"] for r in doc["sids"]) == 2


def _tls_pcap(path: Path) -> Path:
    """A TLS 1.2 ClientHello with SNI and the server's hello, certificate and hello-done."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    from scapy.layers.inet import IP
    from scapy.layers.tls.all import (
        TLS,
        ServerName,
        TLS_Ext_ServerName,
        TLSCertificate,
        TLSClientHello,
        TLSServerHello,
        TLSServerHelloDone,
    )
    from scapy.layers.tls.cert import Cert
    from scapy.utils import wrpcap

    key = ec.derive_private_key(12345, ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "www.example.com")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime.datetime(2023, 1, 1))
        .not_valid_after(datetime.datetime(2024, 1, 1))
        .sign(key, hashes.SHA256())
    )
    der = cert.public_bytes(serialization.Encoding.DER)
    ch = bytes(
        TLS(
            msg=[
                TLSClientHello(
                    version=0x0303,
                    gmt_unix_time=0,
                    random_bytes=b"\x01" * 28,
                    ciphers=[0xC02B],
                    ext=[
                        TLS_Ext_ServerName(servernames=[ServerName(servername=b"www.example.com")])
                    ],
                )
            ]
        )
    )
    sh = bytes(
        TLS(
            msg=[
                TLSServerHello(
                    version=0x0303, gmt_unix_time=0, random_bytes=b"\x02" * 28, cipher=0xC02B
                ),
                TLSCertificate(certs=[Cert(der)]),
                TLSServerHelloDone(),
            ]
        )
    )
    wrpcap(str(path), tcp_session(IP, "192.0.2.10", "203.0.113.5", 40001, 443, ch, sh, T0))
    return path


def _plain_events(pcap: Path, rules: Path, out: Path, *more: str) -> list[dict]:
    """EVE events of Suricata with its own default configuration (one packet thread)."""
    out.mkdir(parents=True)
    subprocess.run(
        [
            "suricata",
            "-r",
            str(pcap),
            "-S",
            str(rules),
            "-l",
            str(out),
            "--runmode",
            "single",
            *more,
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return [json.loads(line) for line in (out / "eve.json").read_text().splitlines()]


def test_eve_has_the_fields_of_suricatas_default_configuration(http_pcap, tmp_path, capsys):
    """http (method, status) and tls (fingerprint, sni, version) as plain Suricata logs them."""
    if not Path("/etc/suricata/suricata.yaml").is_file():
        skip_or_fail("Suricata's default configuration /etc/suricata/suricata.yaml is missing")
    rules = tmp_path / "r.rules"
    rules.write_text(GOOD + "\n")
    tls = _tls_pcap(tmp_path / "tls.pcap")
    for pcap, etype, must in (
        (http_pcap, "http", {"http_method", "status"}),
        (tls, "tls", {"fingerprint", "sni", "version"}),
    ):
        code, _, _, err = _detect(capsys, pcap, [rules], tmp_path / f"d-{etype}")
        assert code == 0, err
        mine = [
            json.loads(x) for x in (tmp_path / f"d-{etype}" / "eve.json").read_text().splitlines()
        ]
        plain = _plain_events(pcap, rules, tmp_path / f"plain-{etype}")
        keys = {e["event_type"]: set(e.get(etype, {})) for e in mine if e["event_type"] == etype}
        theirs = {e["event_type"]: set(e.get(etype, {})) for e in plain if e["event_type"] == etype}
        assert keys == theirs and must <= keys[etype], (keys, theirs)
        # every event type but the counters (stats: not events of the capture, left out on purpose)
        assert Counter(e["event_type"] for e in mine) == Counter(
            e["event_type"] for e in plain if e["event_type"] != "stats"
        )


def test_midstream_flag_picks_up_sessions_without_their_handshake(http_pcap, tmp_path, capsys):
    from scapy.utils import rdpcap, wrpcap

    pcap = tmp_path / "midstream.pcap"
    wrpcap(str(pcap), rdpcap(str(http_pcap))[3:])  # no SYN, SYN-ACK, ACK
    rules = tmp_path / "r.rules"
    rules.write_text(
        'alert tcp any any -> any 80 (msg:"est"; flow:established,to_server; content:"passwd"; sid:1000070;)\n'
    )
    counts = {}
    for name, args in (("off", []), ("on", ["--midstream"])):
        code, doc, out, err = _detect(capsys, pcap, [rules], tmp_path / name, *args)
        assert code == 0, err
        counts[name] = {r["sid"]: r["alerts"] for r in doc["sids"]}
    assert doc["midstream"] is True and "midstream on" in out
    assert counts["off"] == {} and counts["on"] == {1000070: 1}
    plain = _plain_events(pcap, rules, tmp_path / "plain", "--set", "stream.midstream=true")
    assert (
        Counter(e["alert"]["signature_id"] for e in plain if e["event_type"] == "alert")
        == counts["on"]
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--home-net", "!any"], "--home-net: '!any' is no address at all"),
        (["--home-net", "192.0.2.0/24,!any"], "--home-net: '!any' is no address at all"),
        (["--home-net", "$HOME_NET"], "--home-net: '$HOME_NET' defines the group by itself"),
        (
            ["--home-net", "$EXTERNAL_NET"],
            "--home-net: '$EXTERNAL_NET' defines the group by itself",
        ),
        (["--external-net", "!any"], "--external-net: '!any' is no address at all"),
        (["--rules", "{dir}"], "a directory, not a rule file"),
    ],
)
def test_input_suricata_would_refuse_exits_2_before_it_runs(
    args, message, http_pcap, tmp_path, capsys
):
    rules = tmp_path / "r.rules"
    rules.write_text(GOOD + "\n")
    args = [a.format(dir=tmp_path) for a in args]
    code, _, _, err = _detect(capsys, http_pcap, [rules], tmp_path / "d", *args)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "d" / "suricata.yaml").exists()  # Suricata was not started


def test_translate_rules_fails_when_suricata_refuses_the_output_or_there_are_no_rules(
    tmp_path, capsys
):
    src = tmp_path / "snort3.rules"
    src.write_text(
        'alert tcp any any -> any 80 ( msg:"never"; content:"abcdef",within 2; sid:1000999; )\n'
        'alert tcp any any -> any 80 ( msg:"ok"; content:"abc"; sid:1000998; )\n'
    )
    out = tmp_path / "out.rules"
    assert main(["translate-rules", str(src), "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert "suricata refused sid 1000999" in err and "suricata -T failed" in err and out.is_file()
    empty = tmp_path / "empty.rules"
    empty.write_text("# nothing but a comment\n\n")
    assert main(["translate-rules", str(empty), "-o", str(tmp_path / "e.rules")]) == 2
    assert "no rules in it" in capsys.readouterr().err and not (tmp_path / "e.rules").exists()
    assert main(["translate-rules", str(tmp_path), "-o", str(tmp_path / "d.rules")]) == 2
    assert f"{tmp_path}: a directory, not a rule file" in capsys.readouterr().err


@pytest.mark.parametrize("size", [2100, 7900])
def test_translate_rules_lists_a_refused_rule_whose_error_line_suricata_cut(size, tmp_path, capsys):
    """Suricata cuts a log line at 2,047 characters: the error of a refused rule of 2,048-8,191
    bytes loses its "from file F at line N" and its sid, yet is listed under its sid."""
    src = tmp_path / "snort3.rules"
    src.write_text(
        'alert tcp any any -> any 80 ( msg:"ok"; content:"abc"; sid:1000998; )\n'
        f'alert tcp any any -> any 80 ( msg:"long"; content:"{"b" * size}",within 2; sid:1001000; )\n'
    )
    out, report = tmp_path / "out.rules", tmp_path / "r.json"
    assert main(["translate-rules", str(src), "-o", str(out), "--report", str(report)]) == 3
    err = capsys.readouterr().err
    assert "suricata refused sid 1001000: " in err and "1 translated rules refused" in err, err[
        -3000:
    ]
    assert list(json.loads(report.read_text())["suricata_check"]["load_failures"]) == ["1001000"]
    assert len(err) < 3000


NOT_UTF8 = (
    GOOD + '\nalert http any any -> any any (msg:"caf\u00e9"; content:"x"; sid:1000041;)\n'
).encode("latin-1")


@pytest.mark.parametrize("command", ["translate-rules", "ids-coverage", "detect"])
def test_a_rule_file_that_is_not_utf8_is_bad_input_at_its_line(
    command, http_pcap, tmp_path, capsys
):
    """Before, translate-rules and ids-coverage read it with U+FFFD in place of the byte and
    detect gave it to Suricata; now exit 2 before anything is written or run."""
    rules = tmp_path / "latin1.rules"
    rules.write_bytes(NOT_UTF8)
    out = tmp_path / "out"
    argv = {
        "translate-rules": ["translate-rules", str(rules), "-o", str(out / "t.rules")],
        "ids-coverage": ["ids-coverage", str(rules), "--out", str(out), "-q"],
        "detect": ["detect", str(http_pcap), "--rules", str(rules), "--out", str(out), "-q"],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"{rules}:2: the rule file is not UTF-8 text: byte 0xe9" in err and "Traceback" not in err
    ), err
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


def test_a_scenario_whose_attack_rules_are_not_utf8_is_refused_before_it_runs(tmp_path, capsys):
    """`testbed run` read them with U+FFFD in place of the byte; now exit 2 and no run folder."""
    (tmp_path / "latin1.rules").write_bytes(NOT_UTF8)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "version: 1\nname: latin1-attacks\nflows:\n"
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 53, rate: 100, packets: 5}\n"
        "attacks: {rules: [latin1.rules], count: 1, rate: 10}\n"
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "results"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'latin1.rules'}:2: the rule file is not UTF-8 text" in err, err
    assert not (tmp_path / "results").exists()


@pytest.fixture
def small_disk(tmp_path, root_in_ci):
    """A 64 KiB tmpfs; unmounted afterwards."""
    with tmpfs(tmp_path / "small", "size=64k") as where:
        yield where


@pytest.fixture
def full_disk(tmp_path, root_in_ci):
    """A 1 MiB tmpfs filled to its last block, and a read-only one; unmounted afterwards."""
    with tmpfs(tmp_path / "full", "size=1m") as full, tmpfs(tmp_path / "ro", "size=1m,ro") as ro:
        fill(full)
        yield full, ro


FULL_DISK_RUNS = {
    "translate-rules -o": (
        ["translate-rules", "{SRC}", "-o", "{D}/t.rules", "--no-check"],
        "t.rules",
    ),
    "translate-rules --report": (
        ["translate-rules", "{SRC}", "-o", "{T}/ok.rules", "--no-check", "--report", "{D}/r.json"],
        "r.json",
    ),
    "detect --out": (["detect", "{PCAP}", "--rules", "{RULES}", "--out", "{D}/d", "-q"], "d/"),
    "detect two captures": (
        ["detect", "{PCAP}", "{PCAP}", "--rules", "{RULES}", "--out", "{D}/d", "-q"],
        "d/merged.pcap",
    ),
}


@pytest.mark.parametrize("run", FULL_DISK_RUNS)
def test_an_output_on_a_full_or_read_only_disk(run, full_disk, http_pcap, tmp_path, capsys):
    """Exit 4 naming the file on a full file system, exit 2 on a read-only one; one line on stderr
    and no file (not even an empty one) left behind. Before, translate-rules said exit 2 for a
    full disk and detect ended in a traceback."""
    full, ro = full_disk
    src = tmp_path / "snort3.rules"
    src.write_text('alert tcp any any -> any 80 ( msg:"ok"; content:"abc"; sid:1000998; )\n')
    rules = tmp_path / "r.rules"
    rules.write_text(GOOD + "\n")
    argv, written = FULL_DISK_RUNS[run]
    for disk, status in ((full, 4), (ro, 2)):
        names = {"{SRC}": src, "{T}": tmp_path, "{PCAP}": http_pcap, "{RULES}": rules, "{D}": disk}
        capsys.readouterr()
        code = main(
            [
                functools.reduce(lambda a, kv: a.replace(kv[0], str(kv[1])), names.items(), arg)
                for arg in argv
            ]
        )
        err = capsys.readouterr().err
        assert code == status and "Traceback" not in err and len(err.strip().splitlines()) == 1, (
            disk,
            err,
        )
        if status == 4:
            assert (
                f"no space left on device: {disk}/{written}" in err
                and "no file is left half-written" in err
            ), err
        else:
            assert "cannot be written (Read-only file system)" in err, err
    assert sorted(str(p.relative_to(full)) for p in full.rglob("*") if p.is_file()) == ["filler"]


def test_detect_says_when_the_disk_filled_while_suricata_wrote_eve_json(
    small_disk, tmp_path, capsys
):
    """Suricata says nothing when eve.json finds the disk full: its events stop there. Before,
    detect counted the cut events (or failed later naming its own report); now exit 4 naming eve.json."""
    from scapy.layers.inet import IP
    from scapy.utils import wrpcap

    pkts = []
    for i in range(400):  # about 1.5 KB of EVE events each: far more than the disk holds
        req = f"GET /etc/passwd?{i} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        pkts += tcp_session(
            IP,
            "198.18.0.10",
            f"198.19.0.{i % 200 + 1}",
            20000 + i,
            80,
            req,
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
            T0 + i,
        )
    wrpcap(str(tmp_path / "many.pcap"), pkts)
    rules = tmp_path / "r.rules"
    rules.write_text(GOOD + "\n")
    code, doc, out, err = _detect(capsys, tmp_path / "many.pcap", [rules], small_disk / "d")
    assert code == 4 and doc is None and "Traceback" not in err, err
    assert (
        f"no space left on device: {small_disk / 'd' / 'eve.json'}: the file system filled while Suricata"
        in err
    )
