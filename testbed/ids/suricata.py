"""Suricata as the device under test: our own configuration, offline runs, alerts from eve.json.

- `write_config(out_dir, *, rule_files, home_net=..., external_net=..., checksum="all",
  live_iface=None, ...) -> Path` writes ``suricata.yaml`` (address and port variables matching the
  generated addresses, checksum validation as `checksum` says, EVE JSON alerts, the
  application-layer parsers on, our own classification.config unless the rules folder has one).
  With ``live_iface`` it adds an ``af-packet`` section for that interface (the live mode runs the
  same config through ``ip netns exec NS``).
- `suricata_argv(config, out_dir, *, pcap=None, live_iface=None, argv_prefix=None, binary=None)
  -> list[str]`.
- `run_offline(pcap, rule_files, out_dir, *, home_net, external_net, checksum, config, eve_types,
  binary) -> SuricataResult`: ``suricata -r``; the result has the alerts, the rule-load errors (Suricata's
  own lines, with the sid and file:line they name, and its reason), and the number of rules
  loaded and failed. The defaults are the testbed's own addresses and ``-k all`` (synthesized
  traffic has correct checksums); `testbed detect` passes the user's.
- `read_eve(path)` yields every EVE event as a dict; `parse_eve(path) -> list[Alert]` the alerts,
  addresses in the short text form (`ipaddress`), as our synthesis writes them (Suricata spells
  IPv6 addresses out in full).
- `check_load(rules_path, work_dir) -> LoadCheck`: ``suricata -T`` on one rule file with the same
  configuration; ``failures`` maps sid -> Suricata's own error lines (`parse_test_output`).
- `translate_file(in_path, out_path, *, check=True, work_dir=None, app_header=False)`: the text
  translation of `idsrules.translate`, then (with ``check``) `check_load` on its output.
- `LiveSuricata`: Suricata on a veth of a live run, inside a namespace.
- `Dut(name, binary, config)`: one Suricata under test (`binary` None: the one on PATH; `config`
  None: ours); `describe()` is what coverage.json records (``suricata -V``, the configuration's
  sha256). `make_duts(binaries, configs)` pairs ``--suricata`` and ``--suricata-config`` values
  (``[NAME=]PATH``) into DUTs and names them.

The address and port variables of the configuration are the rule side's
(`idsrules.variables`).

Checksum validation (`CHECKSUM_MODES`): ``all`` checks every packet (``-k all`` and
``pcap-file.checksum-checks: yes``: ``-k all`` alone leaves Suricata's pcap-file auto mode on),
``none`` checks none (``-k none``), ``auto`` is Suricata's own pcap-file auto mode (no ``-k``): it
checks, and after the first 1,000 packets stops checking when more than 10% of them had a bad
checksum (a capture taken before the NIC's checksum offload filled them in).

Suricata missing raises `SuricataMissing` whose message is the command that installs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from idsrules.translate import LoadCheck, TranslationReport, translate_rules_file
from idsrules.variables import EXTERNAL_NET, HOME_NET, PORT_GROUPS, SERVER_VARS
from ntgcore.errors import BadInput, NtgError, ToolMissing
from ntgcore.files import read_bounded, replacing
from ntgcore.packets import short_address
from ntgcore.proc import Process

CHECKSUM_MODES = ("auto", "all", "none")
INSTALL_HINT = (
    "Suricata is not installed: run `./bootstrap.sh test` (installs suricata from "
    "bookworm-backports), or `apt-get install -t bookworm-backports suricata`"
)
# A small classification table of our own, used when the rules folder has none.
CLASSTYPES = [
    ("not-suspicious", "Not Suspicious Traffic", 3),
    ("unknown", "Unknown Traffic", 3),
    ("bad-unknown", "Potentially Bad Traffic", 2),
    ("attempted-recon", "Attempted Information Leak", 2),
    ("successful-recon-limited", "Information Leak", 2),
    ("successful-recon-largescale", "Large Scale Information Leak", 2),
    ("attempted-dos", "Attempted Denial of Service", 2),
    ("successful-dos", "Denial of Service", 2),
    ("attempted-user", "Attempted User Privilege Gain", 1),
    ("unsuccessful-user", "Unsuccessful User Privilege Gain", 1),
    ("successful-user", "Successful User Privilege Gain", 1),
    ("attempted-admin", "Attempted Administrator Privilege Gain", 1),
    ("successful-admin", "Successful Administrator Privilege Gain", 1),
    ("rpc-portmap-decode", "Decode of an RPC Query", 2),
    ("shellcode-detect", "Executable code was detected", 1),
    ("string-detect", "A suspicious string was detected", 3),
    ("suspicious-filename-detect", "A suspicious filename was detected", 2),
    ("suspicious-login", "An attempted login using a suspicious username was detected", 2),
    ("system-call-detect", "A system call was detected", 2),
    ("tcp-connection", "A TCP connection was detected", 4),
    ("trojan-activity", "A Network Trojan was detected", 1),
    ("unusual-client-port-connection", "A client was using an unusual port", 2),
    ("network-scan", "Detection of a Network Scan", 3),
    ("denial-of-service", "Detection of a Denial of Service Attack", 2),
    ("non-standard-protocol", "Detection of a non-standard protocol or event", 2),
    ("protocol-command-decode", "Generic Protocol Command Decode", 3),
    ("web-application-activity", "access to a potentially vulnerable web application", 2),
    ("web-application-attack", "Web Application Attack", 1),
    ("misc-activity", "Misc activity", 3),
    ("misc-attack", "Misc Attack", 2),
    ("icmp-event", "Generic ICMP event", 3),
    ("inappropriate-content", "Inappropriate Content was Detected", 1),
    ("policy-violation", "Potential Corporate Privacy Violation", 1),
    ("default-login-attempt", "Attempt to login by a default username and password", 2),
    ("targeted-activity", "Targeted Malicious Activity was Detected", 1),
    ("exploit-kit", "Exploit Kit Activity Detected", 1),
    ("external-ip-check", "Device Retrieving External IP Address Detected", 2),
    ("domain-c2", "Domain Observed Used for C2 Detected", 1),
    ("pup-activity", "Possibly Unwanted Program Detected", 2),
    ("credential-theft", "Successful Credential Theft Detected", 1),
    ("social-engineering", "Possible Social Engineering Attempted", 2),
    ("coin-mining", "Crypto Currency Mining Activity Detected", 2),
    ("command-and-control", "Malware Command and Control Activity Detected", 1),
    ("sdf", "Sensitive Data", 2),
    ("file-format", "Known malicious file or file based exploit", 1),
    ("malware-cnc", "Known malware command and control traffic", 1),
    ("client-side-exploit", "Known client side exploit attempt", 1),
    ("successful-recon", "Information Leak", 2),
]


class SuricataMissing(ToolMissing):
    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


class SuricataError(NtgError):
    """Suricata could not run (bad configuration, no usable rules); `lines` are its own errors."""

    def __init__(self, message: str, lines: list[str]) -> None:
        self.lines = lines
        super().__init__(message + ("\n" + "\n".join(lines) if lines else ""))


@dataclass(frozen=True)
class Alert:
    sid: int
    gid: int
    src: str
    sport: int
    dst: str
    dport: int
    proto: str
    timestamp: str
    msg: str = ""


@dataclass(frozen=True)
class RuleLoadError:
    line_text: str  # Suricata's own error line
    sid: int | None = None
    file: str | None = None
    line: int | None = None
    reason: str = ""  # the error lines Suricata printed just before (what is wrong)
    rule: str = ""  # the rule text Suricata echoed, as far as its log line goes

    def __str__(self) -> str:
        return self.line_text


@dataclass
class SuricataResult:
    out_dir: Path
    exit_code: int | None
    alerts: list[Alert] = field(default_factory=list)
    load_errors: list[RuleLoadError] = field(default_factory=list)
    rules_loaded: int | None = None
    rules_failed: int | None = None
    errors: list[str] = field(default_factory=list)  # all E: lines
    version: str = ""
    command: list[str] = field(default_factory=list)
    record: dict = field(default_factory=dict)
    eve: Path | None = None
    config: Path | None = None  # the suricata.yaml it read (ours as written, or the user's)

    @property
    def failed_sids(self) -> set[int]:
        return {e.sid for e in self.load_errors if e.sid is not None}


def suricata_binary(path: str | Path | None = None) -> str:
    """`path` (a Suricata binary the user named, or a wrapper script that runs one) or the
    `suricata` on PATH; SuricataMissing when there is none, BadInput when `path` cannot be run."""
    if path is not None:
        p = Path(path)
        if not p.is_file() or not os.access(p, os.X_OK):
            raise BadInput(
                f"{path}: no such executable; give the path of a Suricata binary "
                "(or of a script that runs one)"
            )
        return str(p.resolve())
    exe = shutil.which("suricata")
    if not exe:
        raise SuricataMissing()
    return exe


def suricata_version_line(binary: str | Path | None = None) -> str:
    """The first line of ``suricata -V``, e.g. "This is Suricata version 7.0.10 RELEASE"."""
    out = subprocess.run(
        [suricata_binary(binary), "-V"], capture_output=True, text=True, timeout=30
    )
    text = out.stdout + out.stderr
    m = re.search(r"^.*version\s+\S+.*$", text, re.M)
    return m.group(0).strip() if m else (text.strip().splitlines() or ["unknown"])[0]


def suricata_version(binary: str | Path | None = None) -> str:
    return _version_of(suricata_version_line(binary))


def _version_of(line: str) -> str:
    m = re.search(r"version\s+(\S+)", line)
    return m.group(1) if m else "unknown"


@dataclass(frozen=True)
class Dut:
    """One Suricata under test: a binary (None: `suricata` on PATH) and a configuration (None:
    ours, `write_config`). `name` is its output subfolder when several are compared."""

    name: str = "suricata"
    binary: str | None = None
    config: str | None = None

    def describe(self, config_used: str | Path | None = None) -> dict:
        """What coverage.json records of it: the binary, ``suricata -V``, the configuration and the
        sha256 of the configuration file Suricata read (`config_used`: ours as written for the run
        when `config` is None; hashed with its output folder's path taken out, so the same rules
        give the same hash)."""
        cfg = (
            Path(self.config)
            if self.config is not None
            else (Path(config_used) if config_used else None)
        )
        digest = None
        if cfg is not None and cfg.is_file():
            data = cfg.read_bytes()
            if (
                self.config is None
            ):  # ours names its own folder: hashed without it, equal across folders
                data = data.replace(str(cfg.parent.resolve()).encode(), b"<out>")
            digest = hashlib.sha256(data).hexdigest()
        line = suricata_version_line(self.binary)
        return {
            "name": self.name,
            "binary": suricata_binary(self.binary),
            "version": _version_of(line),
            "version_line": line,
            "config": str(self.config) if self.config is not None else None,
            "config_sha256": digest,
        }


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
RESERVED = ("tables", "benign")  # names a DUT's subfolder cannot have (nor mix-*)


def _named(value: str) -> tuple[str | None, str]:
    """`NAME=PATH` -> (NAME, PATH); a value whose part before `=` is no name (has a `/`) is a path."""
    name, sep, rest = value.partition("=")
    if sep and rest and _NAME.match(name):
        return name, rest
    return None, value


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "dut"
    return s[:64]


MAX_CONFIG_BYTES = 16 * 2**20  # a suricata.yaml is tens of kB


def check_config(path: str | os.PathLike) -> None:
    """BadInput unless PATH is a file Suricata can take as its configuration: a regular file (it
    reads the file itself, so a device or a pipe would be read again, or forever), at most
    MAX_CONFIG_BYTES of UTF-8 text that starts as Suricata requires (`%YAML 1.1`)."""
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p}: no such Suricata configuration file")
    if not p.is_file() and not p.is_dir():
        raise BadInput(
            f"{p}: not a regular file (a device or a pipe); Suricata reads its configuration "
            "itself: give a suricata.yaml file"
        )
    text = read_bounded(p, MAX_CONFIG_BYTES, "Suricata configuration")
    if not text.lstrip("\ufeff").startswith("%YAML"):
        raise BadInput(
            f"{p}:1: not a Suricata configuration: Suricata needs its first two lines to be "
            "`%YAML 1.1` and `---`"
        )


def make_duts(binaries: list[str] | None, configs: list[str] | None) -> list[Dut]:
    """The DUTs of `--suricata PATH ...` and `--suricata-config FILE ...` (each `[NAME=]PATH`).

    Equal counts pair up in order; a single value goes with every one of the other list. The name
    is NAME when given, else the file name of what differs between the DUTs (the configuration's
    stem, or the binary's name, with its folder when two binaries have the same name), made unique
    with -2, -3. BadInput for counts that do not pair, a missing file, or a DUT given twice."""
    bins = [_named(b) for b in binaries or []]
    cfgs = [_named(c) for c in configs or []]
    n = max(len(bins), len(cfgs), 1)
    if any(len(vals) not in (0, 1, n) for vals in (bins, cfgs)):
        raise BadInput(
            f"{len(bins)} --suricata and {len(cfgs)} --suricata-config do not pair up: give "
            "as many of each, or one of one kind for all of the other"
        )
    for _, c in cfgs:
        check_config(c)
    for _, b in bins:
        suricata_binary(b)
    bins = bins * n if len(bins) == 1 else bins or [(None, None)] * n
    cfgs = cfgs * n if len(cfgs) == 1 else cfgs or [(None, None)] * n
    pairs = [(b, c) for (_, b), (_, c) in zip(bins, cfgs)]
    seen = {}
    for i, (b, c) in enumerate(pairs):
        key = (str(Path(b).resolve()) if b else None, str(Path(c).resolve()) if c else None)
        if key in seen:
            raise BadInput(
                f"DUT {i + 1} is DUT {seen[key] + 1} again (the same binary and configuration): "
                "give DUTs that differ"
            )
        seen[key] = i
    names = [(nb or nc) for (nb, _), (nc, _) in zip(bins, cfgs)]
    auto = _auto_names(pairs)
    out: list[Dut] = []
    used: set[str] = set()
    for i, (b, c) in enumerate(pairs):
        name = names[i] or auto[i]
        if name in RESERVED or name.startswith("mix-"):  # the output folder's own entries
            name = f"dut-{name}"
        base, k = name, 2
        while name in used:
            name, k = f"{base}-{k}", k + 1
        used.add(name)
        out.append(Dut(name, b, c))
    return out


def _auto_names(pairs: list[tuple[str | None, str | None]]) -> list[str]:
    def binary_name(b: str | None, with_folder: bool) -> str:
        if b is None:
            return "suricata"
        p = Path(b)
        folder = p.parent.parent.name if p.parent.name in ("bin", "sbin") else p.parent.name
        return f"{folder}-{p.name}" if with_folder and folder else p.name

    cfg_differ = len({c for _, c in pairs}) > 1
    bin_differ = len({b for b, _ in pairs}) > 1
    clash = len({binary_name(b, False) for b, _ in pairs}) < len({b for b, _ in pairs})
    names = []
    for b, c in pairs:
        parts = []
        if bin_differ or not cfg_differ:
            parts.append(binary_name(b, clash))
        if cfg_differ:
            parts.append(Path(c).stem if c else "testbed-config")
        names.append(_slug("-".join(parts)))
    return names


# The EVE event types of Suricata 7's default suricata.yaml, with its options (`testbed detect` logs
# these, so that expect checks see what they see under plain Suricata: http and tls extended).
DEFAULT_EVE_TYPES: tuple[str | tuple[str, dict[str, str]], ...] = (
    ("alert", {"tagged-packets": "yes"}),
    ("anomaly", {"enabled": "yes"}),
    ("http", {"extended": "yes"}),
    "dns",
    ("tls", {"extended": "yes"}),
    ("files", {"force-magic": "no"}),
    "smtp",
    "ftp",
    "rdp",
    "nfs",
    "smb",
    "tftp",
    "ike",
    "dcerpc",
    "krb5",
    "bittorrent-dht",
    "snmp",
    "rfb",
    "sip",
    "quic",
    ("dhcp", {"enabled": "yes", "extended": "no"}),
    "ssh",
    "mqtt",
    "http2",
    "flow",
)


def _eve_type_lines(eve_types) -> list[str]:
    lines = []
    for t in eve_types:
        name, opts = (t, {}) if isinstance(t, str) else t
        lines.append(f"        - {name}" + (":" if opts else ""))
        lines += [f"            {k}: {v}" for k, v in opts.items()]
    return lines


def _classification_file(rule_files: list[Path], out_dir: Path) -> Path:
    for rf in rule_files:
        cand = Path(rf).parent / "classification.config"
        if cand.is_file():
            return cand.resolve()
    own = out_dir / "classification.config"
    with replacing(own) as tmp:
        tmp.write_text("".join(f"config classification: {n},{d},{p}\n" for n, d, p in CLASSTYPES))
    return own


def cidrs(group: str) -> list[str]:
    """The addresses of an address group `[a,b]` (no variables, no negation)."""
    return [c.strip() for c in group.strip().strip("[]").split(",") if c.strip()]


def write_config(
    out_dir: str | Path,
    *,
    rule_files: list[str | Path],
    home_net: str = HOME_NET,
    external_net: str = EXTERNAL_NET,
    port_groups: dict[str, str] | None = None,
    live_iface: str | None = None,
    checksum: str = "all",
    eve_types: tuple = ("alert",),
    stats_interval: int | None = None,
    stream: dict[str, str] | None = None,
    classify_from: list[str | Path] | None = None,
    host_os: str | None = None,
) -> Path:
    """Write suricata.yaml into `out_dir` and return its path. `eve_types`: names, or (name,
    {option: value}) as in `DEFAULT_EVE_TYPES`; `stream`: more `stream:` settings (midstream);
    `classify_from`: the rule files whose folder's classification.config to use (default `rule_files`)."""
    if checksum not in CHECKSUM_MODES:
        raise ValueError(f"checksum must be one of {', '.join(CHECKSUM_MODES)} (got {checksum!r})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rules = [str(Path(r).resolve()) for r in rule_files]
    addr = {
        "HOME_NET": home_net,
        "EXTERNAL_NET": external_net,
        **{v: "$HOME_NET" for v in SERVER_VARS},
    }
    ports = dict(PORT_GROUPS, **(port_groups or {}))
    q = json.dumps  # YAML accepts JSON strings
    lines = ["%YAML 1.1", "---", "# written by testbed.ids.suricata", "vars:", "  address-groups:"]
    lines += [f"    {k}: {q(v)}" for k, v in addr.items()]
    lines += ["  port-groups:"] + [f"    {k}: {q(v)}" for k, v in ports.items()]
    lines += [
        f"default-log-dir: {q(str(out.resolve()))}",
        f"default-rule-path: {q(str(Path(rules[0]).parent) if rules else str(out))}",
        "rule-files:",
        *[f"  - {q(r)}" for r in rules],
        f"classification-file: {q(str(_classification_file([Path(r) for r in (classify_from or rules)], out)))}",
        "outputs:",
        "  - eve-log:",
        "      enabled: yes",
        "      filetype: regular",
        "      filename: eve.json",
        "      types:",
        *_eve_type_lines(eve_types),
        "logging:",
        "  default-log-level: notice",
        "  outputs:",
        "    - console:",
        "        enabled: yes",
        "    - file:",
        "        enabled: yes",
        "        level: info",
        "        filename: suricata.log",
        "pcap-file:",
        f"  checksum-checks: {dict(all='yes', none='no', auto='auto')[checksum]}",
        # room for the hundreds of thousands of sessions of an evasion run (a full flow table
        # or defrag table drops sessions at random: Suricata's defaults hold about 60,000)
        "flow:",
        "  memcap: 1gb",
        "  hash-size: 262144",
        "defrag:",
        "  memcap: 512mb",
        "  trackers: 262144",
        "  max-frags: 1048576",
        "stream:",
        "  memcap: 256mb",
        f"  checksum-validation: {'no' if checksum == 'none' else 'yes'}",
        *[f"  {k}: {v}" for k, v in (stream or {}).items()],
        "  reassembly:",
        "    memcap: 512mb",
        "    depth: 1mb",
        *(
            ["host-os-policy:", f"  {host_os}: [{', '.join(map(q, cidrs(home_net)))}]"]
            if host_os
            else []
        ),
        "app-layer:",
        "  protocols:",
    ]
    for proto in (
        "tls",
        "ssh",
        "smtp",
        "ftp",
        "imap",
        "pop3",
        "smb",
        "dcerpc",
        "nfs",
        "tftp",
        "krb5",
        "snmp",
        "sip",
        "rdp",
        "dhcp",
        "ntp",
        "modbus",
        "dnp3",
        "enip",
        "ike",
        "http2",
        "mqtt",
        "rfb",
        "telnet",
        "pgsql",
        "quic",
        "bittorrent-dht",
    ):
        lines += [f"    {proto}:", "      enabled: yes"]
        if proto == "tls":
            lines += ["      detection-ports:", "        dp: 443"]
        if proto in ("modbus", "dnp3", "enip"):
            lines[-1] = "      enabled: detection-only"
    lines += [
        "    dns:",
        "      tcp:",
        "        enabled: yes",
        "        detection-ports:",
        "          dp: 53",
        "      udp:",
        "        enabled: yes",
        "        detection-ports:",
        "          dp: 53",
        "    http:",
        "      enabled: yes",
        "      libhtp:",
        "        default-config:",
        "          personality: IDS",
        "          request-body-limit: 1mb",
        "          response-body-limit: 1mb",
        "          double-decode-path: no",
        "          double-decode-query: no",
        "detect:",
        "  profile: medium",
        "  sgh-mpm-context: auto",
        "host-mode: auto",
        "threading:",
        "  set-cpu-affinity: no",
        "unix-command:",
        "  enabled: no",
    ]
    if stats_interval is not None:  # counters (capture.kernel_packets, kernel_drops) in eve.json
        lines += ["stats:", "  enabled: yes", f"  interval: {stats_interval}"]
    if live_iface is not None:
        lines += [
            "af-packet:",
            f"  - interface: {q(live_iface)}",
            "    cluster-id: 99",
            "    cluster-type: cluster_flow",
            "    defrag: yes",
            "    checksum-checks: yes",
        ]
    path = out / "suricata.yaml"
    with replacing(path) as tmp:  # a full disk leaves no half configuration
        tmp.write_text("\n".join(lines) + "\n")
    return path


def suricata_argv(
    config: str | Path,
    out_dir: str | Path,
    *,
    pcap: str | Path | None = None,
    live_iface: str | None = None,
    argv_prefix: list[str] | None = None,
    runmode: str | None = None,
    checksum: str = "all",
    binary: str | Path | None = None,
) -> list[str]:
    """The command line: offline (`pcap`) or live on `live_iface` (at an endpoint: `argv_prefix`);
    `checksum` "all" or "none" is ``-k``, "auto" leaves the choice to the configuration; `binary`
    another Suricata than the one on PATH."""
    argv = [suricata_binary(binary), "-c", str(config), "-l", str(out_dir)]
    if pcap is not None:
        argv += ["-r", str(pcap)]
    elif live_iface is not None:
        argv += [f"--af-packet={live_iface}"]
    else:
        raise ValueError("suricata_argv needs a pcap or a live interface")
    if runmode:
        argv += ["--runmode", runmode]
    if checksum != "auto":
        argv += ["-k", checksum]
    return [*(argv_prefix or []), *argv]


_LOAD_ERR = re.compile(
    r'error parsing signature "(?P<rule>.*)" from file (?P<file>\S+) at line (?P<line>\d+)'
)
# Suricata cuts a log line at 2,047 bytes: the error of a long rule loses its "from file F at line N"
_LOAD_ERR_CUT = re.compile(r'error parsing signature "(?P<rule>.*)$')
_NO_RULES = re.compile(r"rule files? specified, but no rules were loaded")
# Suricata reads a rule file with fgets into an 8,192-byte buffer (DETECT_MAX_RULE_SIZE): a longer
# line is read in pieces, each parsed (and refused) as a rule of its own, and every later line is
# numbered one more per piece. We give Suricata such a line as a comment and refuse it ourselves.
MAX_RULE_LINE = 8191  # bytes of a line, its newline included, that Suricata reads at once
ECHO = 300  # characters of a rule or an error line we repeat in messages
_SID = re.compile(r"\bsid\s*:\s*(\d+)")
_COUNTS = re.compile(r"(\d+) rules successfully loaded, (\d+) rules failed")
_ELINE = re.compile(r"(?:^|\s)(?:E|Error):?\s|<Error>")


def parse_log(text: str) -> tuple[list[str], list[RuleLoadError], int | None, int | None]:
    errors: list[str] = []
    load: list[RuleLoadError] = []
    loaded = failed = None
    pending: list[str] = []
    for line in text.splitlines():
        m = _COUNTS.search(line)
        if m:
            loaded, failed = int(m.group(1)), int(m.group(2))
        if " E: " in line or line.startswith("E: ") or "<Error>" in line:
            errors.append(line.strip())
            m = _LOAD_ERR.search(line) or _LOAD_ERR_CUT.search(line)
            if m:
                sid = _SID.search(m.group("rule"))
                reason = "; ".join(re.sub(r"^.*?\bE:\s*", "", p) for p in pending)
                where = (
                    (m.group("file"), int(m.group("line")))
                    if "file" in m.re.groupindex
                    else (None, None)
                )
                load.append(
                    RuleLoadError(
                        line.strip(),
                        int(sid.group(1)) if sid else None,
                        *where,
                        reason,
                        m.group("rule"),
                    )
                )
                pending = []
            else:
                pending.append(line.strip())
    return errors, load, loaded, failed


def read_eve(path: str | Path) -> Iterator[dict]:
    """Every event of an eve.json file, in file order (none when the file is missing)."""
    p = Path(path)
    if not p.exists():
        return
    with p.open() as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


_ALERT_SCHEMA = pa.schema(
    [
        ("event_type", pa.string()),
        ("src_ip", pa.string()),
        ("src_port", pa.int64()),
        ("dest_ip", pa.string()),
        ("dest_port", pa.int64()),
        ("proto", pa.string()),
        ("timestamp", pa.string()),
        (
            "alert",
            pa.struct(
                [("signature_id", pa.int64()), ("gid", pa.int64()), ("signature", pa.string())]
            ),
        ),
    ]
)
_EVE_BLOCK = 16 << 20  # pyarrow's unit of parsing: a longer line takes the line-by-line path


def _number(value, default: int) -> int:
    """An eve field that should be a number: `default` when it is missing or is none."""
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _alert(sid, gid, src, sport, dst, dport, proto, ts, msg) -> Alert:
    return Alert(
        _number(sid, 0),
        _number(gid, 1),
        short_address(_text(src)),
        _number(sport, 0),
        short_address(_text(dst)),
        _number(dport, 0),
        _text(proto),
        _text(ts),
        _text(msg),
    )


def _alert_table(path: Path) -> pa.Table:
    """The alert events of an eve.json read by pyarrow's JSON reader: the fields an Alert holds
    only, parsed in C++ (ten times faster than a json.loads a line on 300,000 alerts)."""
    table = pj.read_json(
        path,
        read_options=pj.ReadOptions(block_size=_EVE_BLOCK),
        parse_options=pj.ParseOptions(
            explicit_schema=_ALERT_SCHEMA, unexpected_field_behavior="ignore"
        ),
    )
    return table.filter(pc.equal(table["event_type"], "alert"))


def _parse_eve_columns(path: Path) -> list[Alert]:
    table = _alert_table(path)
    alert = table["alert"].combine_chunks()
    cols = [
        alert.field("signature_id"),
        alert.field("gid"),
        table["src_ip"],
        table["src_port"],
        table["dest_ip"],
        table["dest_port"],
        table["proto"],
        table["timestamp"],
        alert.field("signature"),
    ]
    # typed by the schema: numbers or None, text or None
    return [
        Alert(
            sid or 0,
            1 if gid is None else gid,
            short_address(src),
            sport or 0,
            short_address(dst),
            dport or 0,
            proto or "",
            ts or "",
            msg or "",
        )
        for sid, gid, src, sport, dst, dport, proto, ts, msg in zip(*(c.to_pylist() for c in cols))
    ]


def parse_eve(path: str | Path) -> list[Alert]:
    """The alert events of an eve.json, in file order (none when the file is missing). A file
    pyarrow cannot read as a whole (a cut last line, a line longer than its block, a field of an
    unexpected type) is read a line at a time, skipping the lines that are no JSON."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return []
    try:
        return _parse_eve_columns(p)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    alerts: list[Alert] = []
    for ev in read_eve(p):
        if ev.get("event_type") != "alert":
            continue
        a = ev.get("alert", {})
        alerts.append(
            _alert(
                a.get("signature_id"),
                a.get("gid"),
                ev.get("src_ip"),
                ev.get("src_port"),
                ev.get("dest_ip"),
                ev.get("dest_port"),
                ev.get("proto"),
                ev.get("timestamp"),
                a.get("signature"),
            )
        )
    return alerts


def alert_pairs(path: str | Path) -> list[tuple[int, str, str]]:
    """(sid, source, destination) of every alert of an eve.json in file order, the addresses in
    our short form (`short_address`): what telling sessions apart by their address pair needs,
    without an Alert each (half of `parse_eve`'s time on 300,000 alerts). Read as `parse_eve`
    reads: whole by pyarrow, else a line at a time."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return []
    try:
        table = _alert_table(p)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return [(a.sid, a.src, a.dst) for a in parse_eve(p)]
    sids = table["alert"].combine_chunks().field("signature_id").to_pylist()
    return [
        (sid or 0, short_address(src), short_address(dst))
        for sid, src, dst in zip(sids, table["src_ip"].to_pylist(), table["dest_ip"].to_pylist())
    ]


def _run_into(
    output: Path, name: str, argv: list[str], timeout: float
) -> tuple[int | None, Process]:
    """Run `argv` to its end, its stdout and stderr into `output`; stopped after `timeout` s."""
    with open(output, "w") as so:
        proc = Process(name, argv, stdout=so, stderr=subprocess.STDOUT)
        proc.start()
        code = proc.wait(timeout)
        if code is None:
            code = proc.stop()
            proc.record.note = f"stopped after {timeout:g} s"
    return code, proc


def run_offline(
    pcap: str | Path,
    rule_files: list[str | Path],
    out_dir: str | Path,
    *,
    timeout: float = 600.0,
    runmode: str | None = None,
    home_net: str | None = HOME_NET,
    external_net: str | None = EXTERNAL_NET,
    checksum: str = "all",
    config: str | Path | None = None,
    eve_types: tuple = ("alert",),
    binary: str | Path | None = None,
    stream: dict[str, str] | None = None,
    host_os: str | None = None,
    alerts: bool = True,
) -> SuricataResult:
    """Run `suricata -r pcap`; alerts and rule-load errors in the result (`alerts=False`: no
    alerts read; the caller reads `result.eve` its own way, `alert_pairs`).

    Without `config`, our configuration (`write_config`) with `home_net`, `external_net`,
    `checksum` and `eve_types`. With `config` (a suricata.yaml of the user's), that file as it is,
    the rules given with ``-S`` (one file: several are joined into ``rules.joined.rules``, and load
    errors are mapped back to their own file and line), ``HOME_NET``/``EXTERNAL_NET`` set with
    ``--set`` when not None, and the checksum mode on the command line; its eve-log output must
    write eve.json. `binary`: another Suricata than the one on PATH (`suricata_binary`); the
    configuration actually read is `result.config`. `stream`: more ``stream.`` settings
    (``{"midstream": "true"}``), in our configuration or with ``--set``. `host_os`: the
    reassembly policy of the home hosts (`host-os-policy`: linux, windows, bsd...; None: Suricata's
    default, bsd), in our configuration or, with the user's, an ``--include`` of its own.

    A rule line longer than Suricata reads at once (`MAX_RULE_LINE`) is given to it as a comment
    (`loadable_rule_files`) and reported refused at its own file and line."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in ("eve.json", "suricata.log"):
        (out / old).unlink(missing_ok=True)
    given = [Path(r) for r in rule_files]
    rule_files, too_long, copies = loadable_rule_files(given, out / "rules.loadable")
    origin: list[tuple[int, str]] = []
    if config is None:
        config = write_config(
            out,
            rule_files=rule_files,
            checksum=checksum,
            eve_types=eve_types,
            home_net=home_net or HOME_NET,
            external_net=external_net or EXTERNAL_NET,
            stream=stream,
            classify_from=given,
            host_os=host_os,
        )
        argv = suricata_argv(
            config, out, pcap=pcap, runmode=runmode, checksum=checksum, binary=binary
        )
    else:
        joined, origin = _joined_rules(rule_files, out)
        argv = suricata_argv(
            config, out, pcap=pcap, runmode=runmode, checksum=checksum, binary=binary
        )
        argv += ["-S", str(joined)]
        for name, value in (("HOME_NET", home_net), ("EXTERNAL_NET", external_net)):
            if value is not None:
                argv += ["--set", f"vars.address-groups.{name}={value}"]
        if checksum != "auto":  # -k all alone leaves the pcap-file auto mode on
            argv += ["--set", f"pcap-file.checksum-checks={'yes' if checksum == 'all' else 'no'}"]
        for key, value in (stream or {}).items():
            argv += ["--set", f"stream.{key}={value}"]
        if host_os:  # a list: --set writes scalars only, and Suricata then ignores the policy
            include = out / "host-os-policy.yaml"
            nets = ", ".join(json.dumps(c) for c in cidrs(home_net or HOME_NET))
            include.write_text(f"%YAML 1.1\n---\nhost-os-policy:\n  {host_os}: [{nets}]\n")
            argv += ["--include", str(include)]
    code, proc = _run_into(out / "suricata.stdout", "suricata", argv, timeout)
    text = (out / "suricata.stdout").read_text(errors="replace")
    log = out / "suricata.log"
    if log.exists():
        text += "\n" + log.read_text(errors="replace")
    errors, load, loaded, failed = parse_log(text)
    # the same error appears in the console and in the log file
    errors = list(dict.fromkeys(_cut(e) for e in errors))
    seen = set()
    uniq = []
    for e in load:
        key = (e.sid, e.file, e.line, e.rule if e.file is None else "")
        if key not in seen:
            seen.add(key)
            e = _original_place(e, origin) if origin else e
            if e.file is None:  # its log line was cut before "from file": found by its text
                e = _place_by_text(e, rule_files)
            if e.file in copies:
                e = replace(e, file=copies[e.file])
            uniq.append(replace(e, line_text=_cut(e.line_text), reason=_cut(e.reason), rule=""))
    if loaded is None and _NO_RULES.search(text):  # no counts line when every rule was refused
        loaded, failed = 0, len(uniq)
    order = {str(r): i for i, r in enumerate(given)}
    uniq = sorted(too_long + uniq, key=lambda e: (order.get(e.file, len(order)), e.line or 0))
    if failed is not None:
        failed += len(too_long)
    res = SuricataResult(
        out,
        code,
        parse_eve(out / "eve.json") if alerts else [],
        uniq,
        loaded,
        failed,
        errors,
        command=argv,
        record=proc.record.as_dict(),
        eve=out / "eve.json",
        config=Path(config),
    )
    if code != 0:
        raise SuricataError(
            f"suricata failed ({proc.record.status}); its errors:",
            errors or text.splitlines()[-20:],
        )
    return res


def _cut(text: str, limit: int = ECHO) -> str:
    """`text`, or its first `limit` characters and how long it was: a 10 MB rule is not echoed."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def loadable_rule_files(
    rule_files: list[Path], work: Path
) -> tuple[list[Path], list[RuleLoadError], dict[str, str]]:
    """The rule files as Suricata can read them, the rules refused for it, and copy -> original.

    A file with a line of more than `MAX_RULE_LINE` bytes (its newline included) is copied into
    `work` with that line replaced by a comment, so every other line keeps its number; a rule on
    such a line is a RuleLoadError at its own file and line (a long comment is only left out).
    Files without one are given as they are."""
    out: list[Path] = []
    refused: list[RuleLoadError] = []
    copies: dict[str, str] = {}
    for i, rf in enumerate(rule_files):
        long_lines: list[tuple[int, int, bytes, list[str]]] = []
        try:
            with open(rf, "rb") as f:
                for n, raw in enumerate(f, 1):
                    if (
                        len(raw) > MAX_RULE_LINE
                    ):  # (line, size, head, its sid: at the end of the rule)
                        long_lines.append(
                            (
                                n,
                                len(raw.rstrip(b"\r\n")),
                                raw[:ECHO].lstrip(),
                                _SID.findall(raw[-ECHO:].decode(errors="replace")),
                            )
                        )
        except OSError:
            out.append(rf)  # Suricata says what is wrong with it
            continue
        if not long_lines:
            out.append(rf)
            continue
        work.mkdir(parents=True, exist_ok=True)
        copy = work / f"{i}-{rf.name}"
        numbers = {n for n, _, _, _ in long_lines}
        with open(rf, "rb") as f, replacing(copy) as tmp, open(tmp, "wb") as w:
            for n, raw in enumerate(f, 1):
                if n in numbers:
                    w.write(b"# testbed: a line too long for Suricata, reported refused\n")
                else:
                    w.write(raw)
        copies[str(copy.resolve())] = copies[str(copy)] = str(rf)
        out.append(copy)
        for n, size, head, sid in long_lines:
            if head[:1] in (b"", b"#"):
                continue  # a comment (Suricata skips a line starting with # or a blank)
            text = head.decode(errors="replace")
            refused.append(
                RuleLoadError(
                    _cut(text),
                    int(sid[-1]) if sid else None,
                    str(rf),
                    n,
                    f"a rule line of {size:,} bytes: Suricata reads at most {MAX_RULE_LINE:,} bytes of a line "
                    "(its newline included) and would parse the pieces as rules of their own; shorten the rule",
                )
            )
    return out, refused, copies


def _place_by_text(e: RuleLoadError, rule_files: list[Path]) -> RuleLoadError:
    """The file and line of a refused rule whose error line Suricata cut before its place: the
    first line that starts with the rule text it echoed."""
    head = e.rule.rstrip("\ufffd").encode()  # a cut may split a character
    if not head:
        return e
    for rf in rule_files:
        try:
            with open(rf, "rb") as f:
                for n, raw in enumerate(f, 1):
                    if raw.lstrip().startswith(head):
                        sid = _SID.findall(raw.decode(errors="replace"))
                        return replace(e, file=str(rf), line=n, sid=int(sid[-1]) if sid else e.sid)
        except OSError:
            continue
    return e


def _joined_rules(rule_files: list[str | Path], out: Path) -> tuple[Path, list[tuple[int, str]]]:
    """``-S`` takes one file: the rule files joined, with (first line, file) of each part."""
    if len(rule_files) == 1:
        return Path(rule_files[0]).resolve(), []
    joined = out / "rules.joined.rules"
    origin = []
    line = 1
    with replacing(joined) as tmp, tmp.open("w") as f:
        for rf in rule_files:
            text = Path(rf).read_text(errors="replace")
            if text and not text.endswith("\n"):
                text += "\n"
            origin.append((line, str(rf)))
            f.write(text)
            line += text.count("\n")
    return joined, origin


def _original_place(e: RuleLoadError, origin: list[tuple[int, str]]) -> RuleLoadError:
    if e.line is None:
        return e
    first, name = max((o for o in origin if o[0] <= e.line), default=origin[0])
    return RuleLoadError(e.line_text, e.sid, name, e.line - first + 1, e.reason)


# ---------------------------------------------------------------------------------------------
# test mode: does Suricata load a rule file?


def parse_test_output(
    text: str, rule_files: list[Path] | tuple[Path, ...] = ()
) -> tuple[dict[int, list[str]], list[str], int | None, int | None]:
    """Pair each "error parsing signature" line with the error lines just before it, under the
    refused rule's sid (minus its line number when it has none). A line Suricata cut before its
    "from file F at line N" (a rule of more than about 2,000 bytes, whose sid is often cut off too)
    is placed by its rule text in `rule_files` (`_place_by_text`, as `run_offline` does)."""
    failures: dict[int, list[str]] = {}
    errors: list[str] = []
    pending: list[str] = []
    loaded = failed = None
    for raw in text.splitlines():
        line = raw.strip()
        m = _COUNTS.search(line)
        if m:
            loaded, failed = int(m.group(1)), int(m.group(2))
        if not (_ELINE.search(line) or line.startswith("E:")):
            continue
        errors.append(line)
        m = _LOAD_ERR.search(line)
        cut = None if m else _LOAD_ERR_CUT.search(line)
        if m:
            sm = _SID.search(m.group("rule"))
            sid = int(sm.group(1)) if sm else -int(m.group("line"))
        elif cut:
            sm = _SID.findall(cut.group("rule"))
            e = _place_by_text(
                RuleLoadError(line, int(sm[-1]) if sm else None, rule=cut.group("rule")), rule_files
            )
            sid = e.sid if e.sid is not None else -(e.line or 0)
        if m or cut:
            reason = [re.sub(r"^.*?\bE:\s*", "", p) for p in pending] or [line]
            failures.setdefault(sid, [])
            for r in reason:
                if r not in failures[sid]:
                    failures[sid].append(r)
            pending = []
        else:
            pending.append(line)
    return failures, errors, loaded, failed


def check_load(
    rules_path: str | Path, work_dir: str | Path, *, timeout: float = 300.0
) -> LoadCheck:
    """``suricata -T`` on one rule file with our configuration (`write_config`); test mode needs no pcap."""
    out = Path(work_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "suricata.log").unlink(missing_ok=True)
    files, too_long, _ = loadable_rule_files([Path(rules_path)], out / "rules.loadable")
    config = write_config(out, rule_files=files, classify_from=[Path(rules_path)])
    argv = [suricata_binary(), "-T", "-c", str(config), "-l", str(out)]
    t0 = time.monotonic()
    code, _ = _run_into(out / "suricata-T.out", "suricata -T", argv, timeout)
    seconds = time.monotonic() - t0
    text = (out / "suricata-T.out").read_text(errors="replace")
    failures, errors, loaded, failed = parse_test_output(text, files)
    log = out / "suricata.log"
    if loaded is None and log.exists():  # the counts are an Info line: only in the log file
        m = None
        for m in _COUNTS.finditer(log.read_text(errors="replace")):  # noqa: B007
            pass  # the last one counts
        if m:
            loaded, failed = int(m.group(1)), int(m.group(2))
    if loaded is None and _NO_RULES.search(
        text + (log.read_text(errors="replace") if log.exists() else "")
    ):
        loaded, failed = 0, len(failures)  # no counts line when every rule was refused
    for e in too_long:  # given to Suricata as comments: refused here
        failures.setdefault(e.sid if e.sid is not None else -(e.line or 0), []).append(e.reason)
    if failed is not None:
        failed += len(too_long)
    errors = [_cut(e) for e in errors]
    failures = {sid: [_cut(r) for r in reasons] for sid, reasons in failures.items()}
    return LoadCheck(loaded, failed, failures, list(dict.fromkeys(errors)), code, argv, seconds)


def translate_file(
    in_path: str | Path,
    out_path: str | Path,
    *,
    check: bool = True,
    work_dir: str | Path | None = None,
    app_header: bool = False,
) -> TranslationReport:
    """Translate a Snort 3 rule file (`translate_rules_file`); with `check`, `check_load` the
    output in `work_dir` (default: beside the output, ``.suricata-check``) into ``report.load``."""
    report = translate_rules_file(in_path, out_path, app_header=app_header)
    if check:
        wd = Path(work_dir) if work_dir else Path(out_path).with_suffix(".suricata-check")
        report.load = check_load(out_path, wd)
    return report


# ---------------------------------------------------------------------------------------------
# live


class LiveSuricata:
    """Suricata reading a veth with af-packet, inside a namespace: a live run's device under test.

    `argv_prefix` runs it in the namespace (`ip netns exec NS`); `start()` returns once its capture
    threads run; `stop()` ends it with SIGTERM, after which `stats()` holds the last counters
    it wrote: `kernel_packets` (what its socket saw), `dropped` (kernel drops), `received`
    (kernel_packets - dropped), `decoded` and `alerts`."""

    def __init__(
        self,
        argv_prefix: list[str],
        iface: str,
        rule_files: list[str | Path],
        out_dir: str | Path,
        ready_timeout: float = 90.0,
    ) -> None:
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        rules = [Path(r) for r in rule_files]
        for r in rules:
            if not r.is_file():
                raise SuricataError(f"rule file {r} does not exist", [])
        if not rules:
            empty = self.out / "no-rules.rules"
            empty.write_text("")
            rules = [empty]
        config = write_config(
            self.out,
            rule_files=rules,
            live_iface=iface,
            eve_types=("alert", "stats"),
            stats_interval=1,
        )
        argv = [*argv_prefix, *suricata_argv(config, self.out, live_iface=iface)]
        self._stdout = open(self.out / "suricata.stdout", "w")
        self.proc = Process("suricata", argv, stdout=self._stdout, stderr=subprocess.STDOUT)
        self.ready_timeout = ready_timeout
        self._stats: dict = {}

    @property
    def record(self):
        return self.proc.record

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def _log(self) -> str:
        text = ""
        for name in ("suricata.stdout", "suricata.log"):
            p = self.out / name
            if p.exists():
                text += p.read_text(errors="replace")
        return text

    def start(self, abort=None) -> LiveSuricata:
        """Start and wait until the capture threads run; `abort()` returning True (Ctrl-C)
        stops the wait and Suricata."""
        suricata_binary()  # SuricataMissing with the install command
        self.proc.start()
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if abort is not None and abort():
                self.proc.stop()
                raise SuricataError("interrupted while Suricata was starting", [])
            if self.proc.poll() is not None:
                errors, _, _, _ = parse_log(self._log())
                raise SuricataError(
                    f"suricata ended while starting ({self.proc.record.status}); its errors:",
                    errors or self._log().splitlines()[-15:],
                )
            if "threads are running" in self._log() or "Engine started" in self._log():
                return self
            time.sleep(0.1)
        self.proc.stop()
        raise SuricataError(
            f"suricata did not start within {self.ready_timeout:g} s; its log:",
            self._log().splitlines()[-15:],
        )

    def running(self) -> bool:
        return self.proc.popen is not None and self.proc.poll() is None

    def stop(self) -> dict:
        if self.proc.popen is not None and self.proc.record.exit_code is None:
            self.proc.stop(signal.SIGTERM, grace=30)
        self._stdout.close()
        self._stats = self._read_stats()
        return self.stats()

    def _read_stats(self) -> dict:
        last = None
        eve = self.out / "eve.json"
        alerts = 0
        if eve.exists():
            with eve.open() as f:
                for line in f:
                    if '"event_type":"stats"' in line:
                        last = line
                    elif '"event_type":"alert"' in line:
                        alerts += 1
        out: dict = {"alerts": alerts}
        if last:
            stats = json.loads(last).get("stats", {})
            cap = stats.get("capture", {})
            kp, kd = cap.get("kernel_packets"), cap.get("kernel_drops")
            out.update(kernel_packets=kp, dropped=kd, decoded=stats.get("decoder", {}).get("pkts"))
            if kp is not None and kd is not None:
                out["received"] = kp - kd
        return out

    def stats(self) -> dict:
        return dict(self._stats)
