"""The scenario model: what it accepts, what it refuses, and how it says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from generators.flowengine.session import compile_session
from ntgcore import yamlread
from ntgcore.expected import expected
from ntgcore.scenario import MAX_ITEMS, ScenarioError, json_schema, load_scenario, parse_scenario
from ntgcore.units import format_ns, parse_duration_ns, parse_rate_pps, period_ns_from_rate

ROOT = Path(__file__).resolve().parents[1]


def scenario(flows: str, extra: str = "") -> str:
    return (
        "version: 1\nname: t\n" + extra + "flows:\n" + textwrap.indent(textwrap.dedent(flows), "  ")
    )


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "s.yaml")
    return exc.value.problems


UDP = """\
- protocol: udp
  src: 198.18.0.1
  dst: 198.19.0.1
  dst_port: 53
  rate: 10
  packets: 5
"""


@pytest.mark.parametrize(
    "text, ns",
    [
        ("1.5s", 1_500_000_000),
        ("250ms", 250_000_000),
        ("10us", 10_000),
        ("7ns", 7),
        (2, 2 * 10**9),
        (0.1, 100_000_000),
        ("1.1s", 1_100_000_000),
        ("2m", 120 * 10**9),
        ("0", 0),
    ],
)
def test_durations_are_exact_nanoseconds(text, ns):
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("bad", ["1.5 parsecs", "fast", "1.5ns", True, None, "-1s"])
def test_bad_durations_are_refused(bad):
    with pytest.raises(ValueError):
        parse_duration_ns(bad)


@pytest.mark.parametrize(
    "bad, message",
    [
        (float("inf"), "must be a finite number"),
        (float("nan"), "must be a finite number"),
        ("1e999999s", "must lie between 1e-30 and 1e30"),
        (10**40, "must lie between 1e-30 and 1e30"),
    ],
)
def test_durations_out_of_range_are_value_errors(bad, message):
    """Found by fuzzing: `.inf` raised OverflowError and `1e999999s` decimal.Overflow (tracebacks),
    and `1e799999s` built an integer of 800,000 digits for seconds."""
    with pytest.raises(ValueError, match=message):
        parse_duration_ns(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "1e999999", "1e-999999kpps"])
def test_rates_out_of_range_are_value_errors(bad):
    with pytest.raises(ValueError):
        parse_rate_pps(bad)


@pytest.mark.parametrize(
    "value, message",
    [
        ("start: .inf", "flows[0].start: must be a finite number (got inf)"),
        ("rate: .nan", "flows[0].rate: must be a finite number (got nan)"),
        ("start: 1e999999s", "flows[0].start: must lie between 1e-30 and 1e30 (got '1e999999s')"),
        ("start: !!int", "s.yaml:10: flows[0].start: '' is not a valid int"),
    ],
)
def test_odd_numbers_in_a_scenario_are_reported(value, message):
    text = UDP.replace("rate: 10", value) if value.startswith("rate") else UDP + f"  {value}\n"
    (p,) = problems(scenario(text))
    assert message in p


def test_rates_and_their_integer_period():
    assert parse_rate_pps("2.5kpps") == 2500
    assert parse_rate_pps("1Mpps") == 1_000_000
    assert period_ns_from_rate(parse_rate_pps(3)) == 333_333_333
    assert period_ns_from_rate(parse_rate_pps("0.5")) == 2_000_000_000


def test_format_ns_round_trips():
    for ns in (1, 999, 1000, 1_500_000_000, 250_000_000, 10_000, 123_456_789_123):
        assert parse_duration_ns(format_ns(ns)) == ns


def test_minimal_udp_flow_compiles_to_one_session_line():
    sc = parse_scenario(scenario(UDP))
    session = compile_session(sc, seed=7).splitlines()
    assert session[0] == "ntg-session 1" and "seed 7" in session
    (line,) = [s for s in session if s.startswith("flow ")]
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    assert fields["af"] == "4" and fields["proto"] == "17"
    assert fields["src"] == "198.18.0.1/32" and fields["src_mode"] == "fixed"
    assert fields["dport"] == "53-53" and fields["sport"] == "49152-65535"
    assert fields["sport_mode"] == "random"
    assert fields["period"] == "100000000" and fields["packets"] == "5" and fields["reps"] == "1"


def test_ip_version_follows_the_addresses():
    sc = parse_scenario(
        scenario(UDP.replace("198.18.0.1", "2001:db8::1").replace("198.19.0.1", "2001:db8::2"))
    )
    assert sc.flows[0].ip_version == 6
    assert sc.flows[0].header_bytes == 14 + 40 + 8


def test_duration_gives_packets_due_inside_it():
    sc = parse_scenario(scenario(UDP.replace("packets: 5", "duration: 1s")))
    assert sc.flows[0].packet_count == 10
    sc = parse_scenario(scenario(UDP.replace("packets: 5", "duration: 1001ms")))
    assert sc.flows[0].packet_count == 11


def test_expected_counts_of_a_meta_flow():
    text = scenario(UDP + "  payload: {size: 100}\n  repeat: {count: 1000, period: 1ms}\n")
    e = expected(parse_scenario(text))
    assert e.packets == 5000 and e.flows == 1000
    assert e.bytes == 5000 * (14 + 20 + 8 + 100)
    assert e.last_ns == 999 * 1_000_000 + 4 * 100_000_000


def test_random_payload_size_leaves_bytes_unknown():
    e = expected(parse_scenario(scenario(UDP + "  payload: {size: 10-20}\n")))
    assert e.bytes is None


def test_custom_payload_sets_the_default_size():
    sc = parse_scenario(scenario(UDP + "  payload: {hex: 'de ad be ef'}\n"))
    assert sc.flows[0].payload.sizes == (4, 4)
    assert "payload=deadbeef" in compile_session(sc)


def test_error_names_file_line_field_and_value():
    text = scenario(UDP.replace("rate: 10", "rate: -5"))
    (p,) = problems(text)
    assert p == "s.yaml:8: flows[0].rate: must be > 0 (got -5)"


def test_typo_gets_a_suggestion():
    text = scenario(UDP.replace("packets: 5", "packts: 5"))
    ps = problems(text)
    assert "s.yaml:9: flows[0].packts: unknown key `packts`; did you mean `packets`?" in ps


def test_all_problems_are_reported_in_line_order():
    text = scenario(
        UDP.replace("dst_port: 53", "dst_port: 70000").replace("rate: 10", "rate: fast")
    )
    ps = problems(text)
    assert [p.split(":")[1] for p in ps] == ["7", "8"]
    assert "flows[0].dst_port: ports go up to 65535 (got '70000')" in ps[0]
    assert "flows[0].rate: expected a packet rate" in ps[1]


@pytest.mark.parametrize(
    "change, message",
    [
        (("dst: 198.19.0.1", "dst: 2001:db8::1"), "src is IPv4 but dst is IPv6; use one family"),
        (("protocol: udp", "protocol: icmpv6"), "icmpv6 needs IPv6 addresses"),
        (("rate: 10", "rate: 10\n  period: 1s"), "give exactly one of rate"),
        (("packets: 5", "packets: 5\n  duration: 1s"), "give exactly one of packets or duration"),
        (("  dst_port: 53\n", ""), "udp needs dst_port"),
        (("packets: 5", "packets: 0"), "greater than or equal to 1"),
        (("src: 198.18.0.1", "src: 198.18.0.300"), "not an IPv4 or IPv6 address"),
        (("packets: 5", "packets: 5\n  payload: {size: 70000}"), "makes frames longer than 65535"),
        (
            ("packets: 5", "packets: 5\n  payload: {size: 2, text: hello}"),
            "shorter than the custom payload",
        ),
        (("packets: 5", "packets: 5\n  payload: {size: 9-3}"), "min (9) is larger than max (3)"),
        (("packets: 5", "packets: 5\n  start: 1.5 parsecs"), "unknown time unit 'parsecs'"),
        (("rate: 10", "period: 100y"), "unknown time unit 'y'"),
        (
            ("packets: 5", "packets: 5\n  repeat: {count: 5000000000, period: 1000s}"),
            "pcap time stamps end at 2^32 s",
        ),
    ],
)
def test_semantic_errors_say_what_to_do(change, message):
    ps = problems(scenario(UDP.replace(*change)))
    assert any(message in p for p in ps), ps
    assert all(p.startswith("s.yaml:") for p in ps)


def test_icmp_refuses_ports():
    text = scenario(UDP.replace("protocol: udp", "protocol: icmp"))
    assert any("icmp has no ports" in p for p in problems(text))


def test_yaml_syntax_error_has_a_line():
    (p,) = problems("version: 1\nname: t\nflows: [\n  - {a: 1\n")
    assert p.startswith("s.yaml:") and "YAML syntax" in p


def test_top_level_must_be_a_mapping():
    (p,) = problems("- 1\n- 2\n")
    assert p.startswith("s.yaml:1:")


def test_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "nope.yaml")


def test_json_schema_accepts_the_short_forms():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    import yaml

    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": 1, "name": "x", "flows": [{"protocol": "sctp"}]}, schema)


def test_every_example_scenario_validates():
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        load_scenario(path)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_validate_command_exit_status_and_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(scenario(UDP.replace("rate: 10", "rate: 0")))
    out = run_cli("validate", str(bad))
    assert out.returncode == 2
    assert out.stderr.strip() == f"{bad}:8: flows[0].rate: must be > 0 (got 0)"
    good = run_cli("validate", "scenarios/quickstart.yaml")
    assert good.returncode == 0 and "ok:" in good.stdout


def test_schema_command_prints_json():
    out = run_cli("schema")
    assert out.returncode == 0
    assert json.loads(out.stdout)["title"].startswith("ntg-testbed scenario")


def test_output_into_a_closed_pipe_ends_quietly_with_sigpipes_status():
    """`testbed schema | head -c 10`, the reader gone before the write: exit 141, no traceback."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "schema"],
        cwd=ROOT,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    os.close(read_end)  # before the child has imported anything: its write meets no reader
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 141 and err == ""


# --------------------------------------------------------------------------------------------
# What reading a scenario may cost: the limits of ntgcore.yamlread (docs/scenario.md, "Limits")


def alias_bomb(levels: int = 9) -> str:
    """ "Billion laughs": each level lists the one before nine times, 9**levels values in all."""
    rows = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "version: 1\nname: bomb\n" + "\n".join(rows) + f"\nflows: *l{levels}\n"


def run_cli_measured(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`testbed ARGS` in a child, and the child's peak resident memory in bytes."""
    code = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'testbed', *sys.argv[1:]], capture_output=True, text=True)\n"
        "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(p.returncode)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    *rest, peak_kib = out.stderr.rstrip("\n").split("\n")
    out.stderr = "\n".join(rest)
    return out, int(peak_kib) * 1024


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    out, peak = run_cli_measured("validate", str(bomb))
    assert out.returncode == 2, out.stderr
    assert (
        f"{bomb}:" in out.stderr
        and "each alias counted as all the values it stands for" in out.stderr
    )
    assert "Traceback" not in out.stderr
    assert peak < 400 * 2**20


def test_aliases_beyond_their_limit_are_refused():
    anchors = "base: &b 1\nmany: [" + ", ".join(["*b"] * (yamlread.MAX_ALIASES + 1)) + "]\n"
    (p,) = problems(scenario(UDP, anchors))
    assert p.startswith("s.yaml:4: many[") and f"more than {yamlread.MAX_ALIASES:,} aliases" in p


def test_a_recursive_alias_is_refused():
    (p,) = problems("version: 1\nname: t\nflows: &x [*x]\n")
    assert (
        p
        == "s.yaml:3: flows[0]: the alias *x is inside the node &x it refers to (a recursive structure)"
    )


def test_anchors_aliases_and_merge_keys_still_work():
    text = scenario("""\
        - &dns
          protocol: udp
          src: 198.18.0.1
          dst: 198.19.0.1
          dst_port: 53
          rate: 10
          packets: 5
        - <<: *dns
          dst_port: !!str 80
          payload: {size: 10}
        """)
    first, second = parse_scenario(text).flows
    assert first.dst_port.bounds == (53, 53) and second.dst_port.bounds == (80, 80)
    assert second.src == first.src and second.payload.sizes == (10, 10)


def test_deep_nesting_is_refused_with_a_message(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("version: 1\nname: deep\nflows: " + "[" * 5000 + "]" * 5000 + "\n")
    out = run_cli("validate", str(deep))
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"{deep}:3: flows[0][0][0]...[0][0]: nested more than "
        f"{yamlread.MAX_DEPTH} levels deep (lists and mappings inside each other); flatten it"
    )


def test_a_duplicate_key_names_both_lines():
    text = scenario(UDP + "  dst_port: 80\n")
    (p,) = problems(text)
    assert p == (
        "s.yaml:10: flows[0].dst_port: the key `dst_port` is given twice, at s.yaml:7 and "
        "s.yaml:10; keep one (YAML would keep the last)"
    )


def test_duplicate_keys_everywhere_are_all_reported():
    text = "version: 1\nname: t\nname: u\nflows:\n" + textwrap.indent(UDP + "  rate: 20\n", "  ")
    assert [p.split(": ", 2)[1] for p in problems(text)] == ["name", "flows[0].rate"]


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(yamlread.MAX_BYTES + 1)  # sparse: nothing to read, only its size
    with pytest.raises(ScenarioError) as exc:
        load_scenario(big)
    (p,) = exc.value.problems
    assert p.startswith(f"{big}: the file is 32.0 MiB; at most 32.0 MiB is read")
    out = run_cli("validate", str(big))
    assert out.returncode == 2 and "at most 32.0 MiB is read" in out.stderr


def test_a_device_or_a_pipe_is_read_only_up_to_the_size_limit(tmp_path):
    """/dev/zero and a pipe have no size to check first: the read itself stops past the limit
    (it used to read them whole: a MemoryError traceback at 2.8 GB for /dev/zero)."""
    out, peak = run_cli_measured("validate", "/dev/zero")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith(
        "/dev/zero: the file is longer than 32.0 MiB; at most 32.0 MiB is read"
    )
    assert peak < 300 * 2**20
    code = (
        "import resource, subprocess, sys\n"
        "w = subprocess.Popen(['head', '-c', '300000000', '/dev/zero'], stdout=subprocess.PIPE)\n"
        "p = subprocess.run([sys.executable, '-m', 'testbed', 'validate', '/dev/stdin'], stdin=w.stdout, "
        "capture_output=True, text=True)\n"
        "w.stdout.close(); w.wait()\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.write(p.stderr)\n"
    )
    piped = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    status, peak_kib = map(int, piped.stdout.split())
    assert status == 2 and "/dev/stdin: the file is longer than 32.0 MiB" in piped.stderr, (
        piped.stderr
    )
    assert peak_kib * 1024 < 300 * 2**20  # not the 300 MB the pipe holds (twice: bytes and text)


def test_a_directory_or_bytes_that_are_not_utf8_are_named_as_such(tmp_path):
    out = run_cli("validate", str(tmp_path))
    assert (
        out.returncode == 2
        and out.stderr.strip() == f"{tmp_path}: is a directory; give the file itself"
    )
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(scenario(UDP).encode() + b"# caf\xe9\n")
    out = run_cli("validate", str(latin))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        f"{latin}:{scenario(UDP).count(chr(10)) + 1}: the file is not UTF-8 text: byte 0xe9 at offset "
        f"{len(scenario(UDP)) + 5} (invalid continuation byte); save it as UTF-8"
    )
    wide = tmp_path / "utf16.yaml"
    wide.write_text(scenario(UDP), encoding="utf-16")
    out = run_cli("validate", str(wide))
    assert (
        out.returncode == 2
        and f"{wide}:1: the file is not UTF-8 text (it looks like UTF-16)" in out.stderr
    )


def test_a_number_of_100001_digits_is_too_large_not_invalid():
    """Python refuses to read an int of more than 4,300 digits ("not a valid int" it was)."""
    (p,) = problems(scenario(UDP.replace("rate: 10", "rate: " + "1" * 100_001)))
    assert p == (
        "s.yaml:8: flows[0].rate: too large: an integer of 100,001 digits (at most 4,300 digits "
        "are read; no value here needs as many)"
    )
    (p,) = problems(scenario(UDP.replace("rate: 10", "rate: " + "9" * 4_000)))
    assert p.startswith("s.yaml:8: flows[0].rate: must lie between 1e-30 and 1e30")


def many_flows(n: int) -> str:
    flow = (
        "  - {{name: f{i}, protocol: udp, src: 198.18.{a}.{b}, dst: {{cidr: 198.19.0.0/24, mode: increment}},"
        " dst_port: {p}, start: {i}ms, rate: 1000, packets: 2, payload: {{size: 40-120}}}}\n"
    )
    return "version: 1\nname: many\nflows:\n" + "".join(
        flow.format(i=i, a=i // 250 % 250, b=i % 250 + 1, p=1 + i % 60000) for i in range(n)
    )


def test_validating_many_flows_stays_within_memory(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(many_flows(10_000))
    out, peak = run_cli_measured("validate", str(path))
    assert out.returncode == 0 and "10000 flow definitions" in out.stdout, out.stderr
    assert peak < 300 * 2**20  # the composed node graph and the line map made it 520 MiB


def test_errors_in_a_large_file_still_name_their_line():
    text = many_flows(3000).replace("dst_port: 2000,", "dst_port: 99999,")
    (p,) = problems(text)
    assert p == "s.yaml:2003: flows[1999].dst_port: ports go up to 65535 (got '99999')"


def test_checking_stops_after_a_hundred_wrong_flows():
    ps = problems("version: 1\nname: t\nflows: [" + ", ".join(["1"] * 200_000) + "]\n")
    assert (
        len(ps) == 101
    )  # one message each once made 200,000 messages (and gigabytes for millions)
    assert (
        ps[-1]
        == "s.yaml:3: flows[100]: and more: the check stops after 100 wrong flows (of 200,000)"
    )


def test_other_lists_are_bounded():
    sids = ", ".join(["1"] * (MAX_ITEMS + 1))
    (p,) = problems(scenario(UDP, f"attacks: {{rules: [x.rules], select: {{sids: [{sids}]}}}}\n"))
    assert p.startswith(
        f"s.yaml:3: attacks.select.sids: List should have at most {MAX_ITEMS} items"
    )
