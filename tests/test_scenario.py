"""The scenario model: what it accepts, what it refuses, and how it says so."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ntgcore.compile import compile_session, expected
from ntgcore.scenario import ScenarioError, json_schema, load_scenario, parse_scenario
from ntgcore.units import format_ns, parse_duration_ns, parse_rate_pps, period_ns_from_rate

ROOT = Path(__file__).resolve().parents[1]


def scenario(flows: str, extra: str = "") -> str:
    return "version: 1\nname: t\n" + extra + "flows:\n" + textwrap.indent(textwrap.dedent(flows), "  ")


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
    [("1.5s", 1_500_000_000), ("250ms", 250_000_000), ("10us", 10_000), ("7ns", 7), (2, 2 * 10**9),
     (0.1, 100_000_000), ("1.1s", 1_100_000_000), ("2m", 120 * 10**9), ("0", 0)],
)  # fmt: skip
def test_durations_are_exact_nanoseconds(text, ns):
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("bad", ["1.5 parsecs", "fast", "1.5ns", True, None, "-1s"])
def test_bad_durations_are_refused(bad):
    with pytest.raises(ValueError):
        parse_duration_ns(bad)


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
    sc = parse_scenario(scenario(UDP.replace("198.18.0.1", "2001:db8::1").replace("198.19.0.1", "2001:db8::2")))
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
    text = scenario(UDP.replace("dst_port: 53", "dst_port: 70000").replace("rate: 10", "rate: fast"))
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
        (("packets: 5", "packets: 5\n  payload: {size: 2, text: hello}"), "shorter than the custom payload"),
        (("packets: 5", "packets: 5\n  payload: {size: 9-3}"), "min (9) is larger than max (3)"),
        (("packets: 5", "packets: 5\n  start: 1.5 parsecs"), "unknown time unit 'parsecs'"),
        (("rate: 10", "period: 100y"), "unknown time unit 'y'"),
        (("packets: 5", "packets: 5\n  repeat: {count: 5000000000, period: 1000s}"), "pcap time stamps end at 2^32 s"),
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
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=ROOT)


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
