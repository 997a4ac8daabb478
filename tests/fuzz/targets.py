"""Fuzz targets: the scenario loader, the rule parser and analysis, the capture reader.

Each target feeds one input to an entry point and accepts only what that entry point documents:

| target | entry point | documented outcome |
|---|---|---|
| scenario | `ntgcore.scenario.parse_scenario`, then what `testbed validate` computes | a Scenario, or `ScenarioError` whose problems start with `FILE:` |
| rules | `idsrules.syntax.read_rules`, `semantics.analyze` of each rule | rules and `Problem`s (analyze marks what it cannot use `unsupported`); `BadInput` `FILE:LINE: ... not UTF-8` only for bytes that are not UTF-8, whose text (U+FFFD for them) is then read too |
| pcap | `analysis.capture.read_capture` | a Capture (`problem` set where it is damaged), or `CaptureError` |

Anything else raised is a finding, and so is an example that runs longer than its time bound
(`Hang`) or a process over its memory bound (the caller sets RLIMIT_AS: a MemoryError).

Inputs are mutations of real seeds (the shipped scenarios, tests/rules_cases/*/rules.rules, small
pcap and pcapng files built here), inputs built from the formats' own vocabulary, and random bytes.
Hypothesis draws every choice, so a run is reproducible (`derandomize`) and a finding shrinks.

    python tests/fuzz/targets.py TARGET [--examples N] [--random] [--save DIR]

runs one target outside pytest (tests/test_fuzz.py runs them in CI; tests/fuzz/run_long.py
for longer sessions); exit status 1 and the falsifying input printed on a finding.
"""

from __future__ import annotations

import argparse
import hashlib
import signal
import struct
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.capture import CaptureError, read_capture
from generators.flowengine.memory import check_memory
from generators.flowengine.session import compile_session
from idsrules.semantics import analyze
from idsrules.syntax import read_rules
from ntgcore.errors import BadInput
from ntgcore.expected import expected, peak_concurrent_flows
from ntgcore.scenario import ScenarioError, parse_scenario

CASES = ROOT / "tests" / "fuzz_cases"
SUFFIX = {"scenario": ".yaml", "rules": ".rules", "pcap": ".pcap"}
EXAMPLE_SECONDS = 5.0  # one input may take this long; longer is a hang


class Hang(Exception):
    """An example ran past EXAMPLE_SECONDS."""


def _alarm(signum, frame):
    raise Hang(f"one input took more than {EXAMPLE_SECONDS:g} s")


def bounded(fn, data: bytes) -> None:
    """fn(data) under a wall-clock bound (SIGALRM: the main thread only, as under pytest)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, EXAMPLE_SECONDS)
    try:
        fn(data)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------------------------
# The entry points, each accepting only its documented errors


def run_scenario(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        scenario = parse_scenario(text, "fuzz.yaml")
    except ScenarioError as exc:
        assert exc.problems and all(p.startswith("fuzz.yaml:") for p in exc.problems), exc.problems
        return
    expected(scenario)  # what `testbed validate` prints
    peak_concurrent_flows(scenario)
    check_memory(scenario)
    if sum(f.repetitions for f in scenario.flows) < 10**6:
        compile_session(scenario)


def run_rules(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.rules"
        path.write_bytes(data)
        try:
            rules, problems = read_rules(path)
        except BadInput as exc:  # the one refusal of a whole file; its text is still parsed below
            assert str(exc).startswith(f"{path}:") and "not UTF-8" in str(exc), exc
            path.write_text(data.decode("utf-8", errors="replace"))
            rules, problems = read_rules(path)
        for problem in problems:
            assert str(problem).startswith(str(path)), problem
        for rule in rules:
            analyze(rule)


def run_pcap(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.pcap"
        path.write_bytes(data)
        try:
            capture = read_capture(path)
        except CaptureError:
            return
        n = len(capture.ts_ns)
        assert all(
            len(getattr(capture, c)) == n for c in ("wire_len", "cap_len", "proto", "src_lo")
        )
        capture.to_frame()


RUN = {"scenario": run_scenario, "rules": run_rules, "pcap": run_pcap}


# --------------------------------------------------------------------------------------------
# Seeds


def _frames() -> list[bytes]:
    eth4, eth6 = (
        b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00",
        b"\x02" * 12 + b"\x86\xdd",
    )
    udp = struct.pack("!HHHH", 40000, 53, 8 + 4, 0) + b"abcd"
    tcp = struct.pack("!HHIIBBHHH", 40000, 80, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
    ip4 = lambda proto, l4: (
        struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(l4),
            1,
            0x4000,
            64,
            proto,
            0,
            bytes([198, 18, 0, 1]),
            bytes([198, 19, 0, 1]),
        )
        + l4
    )
    ip6 = (
        struct.pack(
            "!IHBB16s16s",
            6 << 28,
            len(udp),
            17,
            64,
            b"\x20\x01\x0d\xb8" + b"\x00" * 11 + b"\x01",
            b"\x20\x01\x0d\xb8" + b"\x00" * 11 + b"\x02",
        )
        + udp
    )
    icmp = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"ping"
    return [eth4 + ip4(17, udp), eth4 + ip4(6, tcp), eth6 + ip6, eth4 + ip4(1, icmp)]


def pcap_seed(nanoseconds: bool = False, big_endian: bool = False) -> bytes:
    e = ">" if big_endian else "<"
    out = struct.pack(
        e + "IHHiIII", 0xA1B23C4D if nanoseconds else 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1
    )
    for i, frame in enumerate(_frames()):
        out += struct.pack(e + "IIII", 1 + i, 500 * i, len(frame), len(frame)) + frame
    return out


def pcapng_seed() -> bytes:
    def block(kind: int, body: bytes) -> bytes:
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    tsresol = struct.pack("<HH", 9, 1) + b"\x09" + b"\x00" * 3 + struct.pack("<HH", 0, 0)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 65535) + tsresol)
    for i, frame in enumerate(_frames()):
        ts = 1_000_000_000 + i * 1000
        out += block(
            6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(frame), len(frame)) + frame
        )
    out += block(3, struct.pack("<I", len(_frames()[0])) + _frames()[0])  # a simple packet block
    return out


def seeds(target: str) -> list[bytes]:
    if target == "scenario":
        return [p.read_bytes() for p in sorted((ROOT / "scenarios").glob("*.yaml"))]
    if target == "rules":
        found = sorted((ROOT / "tests" / "rules_cases").glob("*/rules.rules"))
        return [p.read_bytes() for p in found] + [
            p.read_bytes() for p in sorted((ROOT / "scenarios" / "rules").glob("*.rules"))
        ]
    return [pcap_seed(), pcap_seed(nanoseconds=True, big_endian=True), pcapng_seed()]


TOKENS = {
    "scenario": [
        b"&a ",
        b"*a",
        b"<<: *a\n",
        b"!!int ",
        b"!!str ",
        b"!!binary ",
        b"!!float ",
        b"!foo ",
        b"[",
        b"]",
        b"{",
        b"}",
        b"- ",
        b": ",
        b"\n  ",
        b"\n    ",
        b"? ",
        b"|\n",
        b">-\n",
        b"'",
        b'"',
        b"---\n",
        b"...\n",
        b"~",
        b"0x1F",
        b"0o7",
        b"1e999999s",
        b"1e-999999ms",
        b"-1",
        b".inf",
        b".nan",
        b"9" * 40,
        b"\t",
        b"\x00",
        b"\xef\xbb\xbf",
        b"%YAML 1.1\n",
        b"198.18.0.0/15",
        b"2001:db8::/32",
        b"repeat: {count: ",
        b"0.000000001",
        b"65536",
        b"1Mpps",
        b"999999999999kpps",
        "µs".encode(),
        b"random",
        b"increment",
        b"testbed: {}",
        b"attacks: {rules: [x]}",
        b"period: 1e400s",
        b"size: 65535",
    ],
    "rules": [
        b'content:"',
        b"|00 0",
        b";",
        b"(",
        b")",
        b"\\\n",
        b'pcre:"/',
        b'/i";',
        b"byte_test:",
        b"byte_jump:",
        b"sid:",
        b"rev:",
        b"$HOME_NET",
        b"any",
        b"[",
        b"]",
        b"!",
        b",",
        b"flowbits:set,",
        b"threshold:",
        b"dsize:>",
        b"depth:",
        b"offset:-",
        b"within:",
        b"distance:",
        b"http.uri;",
        b"alert ",
        b"->",
        b"<>",
        b"# ",
        b"\n",
        b"9" * 30,
        b"isdataat:",
        b"flow:to_server;",
        b"nocase;",
        b"fast_pattern;",
        b"metadata:",
        b"dce_iface:",
        b"dcerpc.opnum:",
        b"tls.sni;",
        b"dns.query;",
        b"(?",
        b"{9999}",
        b"\\x",
    ],
    "pcap": [
        b"\xd4\xc3\xb2\xa1",
        b"\xa1\xb2\xc3\xd4",
        b"\x4d\x3c\xb2\xa1",
        b"\n\r\r\n",
        b"\x4d\x3c\x2b\x1a",
        b"\xff\xff\xff\xff",
        b"\x00\x00\x00\x00",
        b"\xff\xff\xff\x7f",
        b"\x01\x00\x00\x00",
        b"\x06\x00\x00\x00",
        b"\x08\x00\x45",
        b"\x86\xdd\x60",
        b"\x81\x00",
        b"\x00\x00\x01\x00",
        b"\x09\x00\x01\x00",
    ],
}


@st.composite
def mutated(draw, target: str) -> bytes:
    """A seed with a few mutations: byte changes, cuts, copies, format tokens, splices."""
    pool = seeds(target)
    data = bytearray(draw(st.sampled_from(pool)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(
            st.sampled_from(["set", "insert", "delete", "copy", "token", "splice", "truncate"])
        )
        at = draw(st.integers(0, max(0, len(data))))
        if op == "set" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "copy" and data:
            start = draw(st.integers(0, len(data) - 1))
            chunk = data[start : start + draw(st.integers(1, 256))]
            data[at:at] = chunk * draw(st.integers(1, 4))
        elif op == "token":
            data[at:at] = draw(st.sampled_from(TOKENS[target]))
        elif op == "splice":
            other = draw(st.sampled_from(pool))
            data[at:] = other[draw(st.integers(0, len(other))) :]
        elif op == "truncate":
            del data[at:]
    return bytes(data[: 1 << 18])


SCALARS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
    st.sampled_from(
        [
            "1e999999s",
            "1e-9999ms",
            "1e400",
            "99999999999999999999h",
            "0.0000000001s",
            "1Mpps",
            "1e30kpps",
            "-0",
            "0",
            "198.18.0.0/0",
            "::/0",
            "2001:db8::/128",
            "65535",
            "0-65535",
            "random",
            "increment",
            "1-0",
            "64..9000",
            "de ad",
            "0x",
            "µs",
            "0.5ns",
            "1e9",
        ]
    ),
)
FLOW_KEYS = [
    "name",
    "protocol",
    "src",
    "dst",
    "src_port",
    "dst_port",
    "start",
    "rate",
    "period",
    "packets",
    "duration",
    "payload",
    "repeat",
]


@st.composite
def shaped_scenario(draw) -> bytes:
    """A scenario built from the format's own keys with odd values: reaches the validators."""
    value = st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(
                st.sampled_from(
                    [
                        "min",
                        "max",
                        "count",
                        "period",
                        "cidr",
                        "mode",
                        "range",
                        "size",
                        "text",
                        "hex",
                    ]
                ),
                inner,
                max_size=3,
            ),
        ),
        max_leaves=6,
    )
    protocol = st.sampled_from(["udp", "tcp", "icmp", "icmpv6", "sctp"])
    flows = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "protocol": protocol,
                    "src": st.sampled_from(["198.18.0.1", "2001:db8::1", "198.18.0.0/16"]),
                    "dst": st.sampled_from(["198.19.0.1", "2001:db8::2", "198.19.0.0/24"]),
                },
                optional={k: value for k in FLOW_KEYS if k not in ("protocol", "src", "dst")},
            ),
            min_size=1,
            max_size=3,
        )
    )
    doc = {"version": 1, "name": "fuzz", "flows": flows}
    if draw(st.booleans()):
        doc["flowengine"] = draw(
            st.dictionaries(st.sampled_from(["planner", "threads", "checksum_offload"]), value)
        )
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")


def inputs(target: str):
    if target == "selftest":
        return st.binary(max_size=64)
    parts = [mutated(target), st.binary(max_size=2048)]
    if target == "scenario":
        parts.append(shaped_scenario())
    return st.one_of(parts)


def fuzz(target: str, examples: int, derandomize: bool = True, save: Path | None = None) -> int:
    """Run `examples` inputs through the target; raise the finding (shrunk) if there is one,
    after storing the shortest input of each distinct failure in `save` (when given)."""
    failures: dict[str, bytes] = {}
    ran = [0]

    @settings(
        max_examples=examples,
        derandomize=derandomize,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(inputs(target))
    def one(data: bytes) -> None:
        ran[0] += 1
        try:
            bounded(RUN[target], data)
        except BaseException as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            sig = f"{type(exc).__name__} {Path(where.filename).name}:{where.lineno}"
            if sig not in failures or len(data) <= len(failures[sig]):  # the last is the shrunk one
                failures[sig] = data
            raise

    try:
        one()
    finally:
        if save is not None:
            for sig, data in failures.items():
                print(f"{target}: {sig}: stored {keep(target, data, save)}", file=sys.stderr)
    return ran[0]


def keep(target: str, data: bytes, folder: Path) -> Path:
    """Store a finding as FOLDER/TARGET/fuzz-<hash>.<suffix> (rename it after its cause)."""
    out = folder / target / f"fuzz-{hashlib.sha1(data).hexdigest()[:10]}{SUFFIX[target]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return out


def replay(target: str, paths: list[Path]) -> int:
    """Run every kept input (files, or folders of them) once; the number that fail."""
    files = [
        f for p in paths for f in (sorted(p.glob(f"*{SUFFIX[target]}")) if p.is_dir() else [p])
    ]
    failed = 0
    for f in files:
        try:
            bounded(RUN[target], f.read_bytes())
        except BaseException:
            failed += 1
            print(f"{f}: FAILED", file=sys.stderr)
            traceback.print_exc()
        else:
            print(f"{f}: ok")
    print(f"{target}: {len(files)} kept inputs replayed, {failed} failed")
    return failed


def run_selftest(data: bytes) -> None:
    """A target with a planted bug, to check the harness reports and keeps what it finds."""
    if data:
        raise ZeroDivisionError("planted")


RUN["selftest"] = run_selftest
SUFFIX["selftest"] = ".bin"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", choices=sorted(RUN))
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument(
        "--random", action="store_true", help="a new random run (default: the fixed one)"
    )
    ap.add_argument("--save", type=Path, help="folder to store findings in (e.g. tests/fuzz_cases)")
    ap.add_argument(
        "--replay", type=Path, nargs="+", metavar="PATH", help="run these kept inputs instead"
    )
    args = ap.parse_args()
    if args.replay:
        return 1 if replay(args.target, args.replay) else 0
    ran = fuzz(args.target, args.examples, derandomize=not args.random, save=args.save)
    print(f"{args.target}: {ran} inputs run, no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
