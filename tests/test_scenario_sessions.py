"""`sessions:` in a scenario: the model, its file:line errors, what the engine's session file
gets (`dist` and `session` lines), expected counts, and generators that cannot send sessions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from generators.flowengine.session import compile_session
from ntgcore.expected import expected
from ntgcore.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[1]
SESSION_KEYS = [
    "af", "proto", "cmac", "smac", "client", "server", "client_mode", "server_mode", "cport",
    "sport", "cport_mode", "sport_mode", "start", "reps", "arrival", "rtt", "gap", "mss", "win",
    "rounds", "req", "resp", "close",
]  # fmt: skip

WEB = """\
- name: web
  protocol: tcp
  client: 198.18.0.0/16
  server: {network: 198.19.0.0/24, hosts: {empirical: {values: [5, 9], weights: [9, 1]}}}
  server_port: {choices: {443: 70, 80: 30}}
  count: 1000
  arrival: {exponential: {mean: 1ms}}
  rtt: 20ms
  request_bytes: {lognormal: {median: 400, sigma: 1.2}}
  response_bytes: {pareto: {scale: 1000, shape: 1.3, max: 1M}}
"""


def scenario(sessions: str, extra: str = "") -> str:
    return (
        "version: 1\nname: t\n"
        + extra
        + "sessions:\n"
        + textwrap.indent(textwrap.dedent(sessions), "  ")
    )


def problems(text: str, base: Path | None = None) -> list[str]:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "s.yaml", base=base)
    return exc.value.problems


def parsed_lines(text: str) -> tuple[dict[int, list[tuple[int, int, int]]], list[dict[str, str]]]:
    """The `dist` lines (by id) and the `session` lines (as key -> value) of a session file;
    every `D:ID` a session line uses is defined above it."""
    dists: dict[int, list[tuple[int, int, int]]] = {}
    sessions = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "dist":
            bins = [tuple(int(x) for x in re.split("[-:]", b)) for b in words[2:]]
            assert int(words[1]) not in dists
            dists[int(words[1])] = bins
        elif words and words[0] == "session":
            kv = dict(w.split("=", 1) for w in words[1:])
            assert list(kv)[: len(SESSION_KEYS)] == SESSION_KEYS
            assert set(list(kv)[len(SESSION_KEYS) :]) <= {"think", "linger", "deck"}  # optional
            for v in kv.values():
                if v.startswith(("D:", "P:")):
                    assert int(v[2:]) in dists, f"{v} used before its dist line"
            sessions.append(kv)
    return dists, sessions


def test_a_session_compiles_to_dist_and_session_lines():
    s = parse_scenario(scenario(WEB), "s.yaml")
    assert s.flows == [] and len(s.sessions) == 1
    dists, (line,) = parsed_lines(compile_session(s, seed=5))
    assert line["af"] == "4" and line["proto"] == "6" and line["reps"] == "1000"
    assert line["client"] == "198.18.0.0/16" and line["client_mode"] == "random"
    assert line["server"] == "198.19.0.0/24"
    assert dists[int(line["server_mode"][2:])] == [(5, 5, 9), (9, 9, 1)]
    assert dists[int(line["sport_mode"][2:])] == [(80, 80, 30), (443, 443, 70)]
    assert line["cport"] == "49152-65535" and line["cport_mode"] == "random"
    assert line["rtt"] == "20000000" and line["gap"] == "12000" and line["mss"] == "1460"
    assert line["win"] == "10" and line["rounds"] == "1" and line["close"] == "fin"
    arrival = dists[int(line["arrival"][2:])]
    assert len(arrival) == 4096 and {w for _, _, w in arrival} == {1}
    resp = dists[int(line["resp"][2:])]
    assert resp[0][0] == 1000 and resp[-1][1] == 2**20


def test_fixed_values_stay_numbers_and_equal_distributions_share_one_dist_line():
    text = scenario(
        """\
        - protocol: udp
          client: 2001:db8::1
          server: 2001:db8:1::/64
          client_port: 5353
          server_port: 1024-2047
          count: 3
          arrival: 250us
          request_bytes: 64
          response_bytes: 1k
          rounds: 2
          close: rst
        - protocol: udp
          client: 2001:db8::2
          server: 2001:db8::3
          server_port: 53
          count: 2
          arrival: {uniform: {min: 1ms, max: 3ms}}
          request_bytes: {uniform: {min: 1000000, max: 3000000}}
          response_bytes: {uniform: {min: 1000000, max: 3000000}}
        """
    )
    dists, (a, b) = parsed_lines(compile_session(parse_scenario(text, "s.yaml")))
    assert a["af"] == "6" and a["proto"] == "17"
    assert (a["client"], a["client_mode"]) == ("2001:db8::1/128", "fixed")
    assert (a["server"], a["server_mode"]) == ("2001:db8:1::/64", "random")
    assert (a["cport"], a["cport_mode"]) == ("5353-5353", "fixed")
    assert (a["sport"], a["sport_mode"]) == ("1024-2047", "random")
    assert (a["arrival"], a["req"], a["resp"], a["rounds"]) == ("250000", "64", "1024", "2")
    assert a["close"] == "rst"
    # a time in ns and a size in bytes: 1ms is 1000000 in both fields' base units here
    assert b["arrival"] == b["req"] == b["resp"]
    assert dists[int(b["arrival"][2:])] == [(1_000_000, 3_000_000, 1)]
    assert len(dists) == 1


def test_a_protocol_choice_splits_the_count_and_stretches_the_arrival():
    text = scenario(WEB.replace("protocol: tcp", "protocol: {choices: {tcp: 80, udp: 20}}"))
    s = parse_scenario(text, "s.yaml")
    parts = s.sessions[0].parts()
    assert [(p.protocol, p.count) for p in parts] == [("tcp", 800), ("udp", 200)]
    base = s.sessions[0].arrival.mean()
    assert parts[0].arrival.mean() == pytest.approx(base / 0.8)
    assert parts[1].arrival.mean() == pytest.approx(base / 0.2)
    _, lines = parsed_lines(compile_session(s))
    assert [x["proto"] for x in lines] == ["6", "17"]
    assert [x["reps"] for x in lines] == ["800", "200"]
    assert expected(s).flows == expected(s).sessions == 1000


def test_a_profile_makes_one_line_per_step():
    text = scenario(
        WEB.replace("  count: 1000\n", "").replace(
            "rtt: 20ms",
            "rtt: 20ms\n  profile: {steps: [{for: 1s, rate: 1}, {for: 2s, rate: 0}, "
            "{for: 1s, rate: 2.5}]}",
        )
    )
    s = parse_scenario(text, "s.yaml")
    # count from the profile: (1 s x 1 + 1 s x 2.5) / the mean arrival as drawn (the
    # exponential cut at its 0.9999 quantile: 0.09 % below 1 ms)
    mean = s.sessions[0].arrival.mean()
    assert mean == pytest.approx(1e6 * (1 - 9.2e-4), rel=1e-4)
    n = int(3.5e9 / mean)
    assert s.sessions[0].instances == n == 3503
    parts = s.sessions[0].parts()
    assert [(p.start, p.count) for p in parts] == [(0, 1001), (3_000_000_000, 2502)]
    assert parts[0].arrival.mean() == pytest.approx(1e9 / 1001)
    assert parts[1].arrival.mean() == pytest.approx(1e9 / 2502)
    _, lines = parsed_lines(compile_session(s))
    assert [(x["start"], x["reps"]) for x in lines] == [("0", "1001"), ("3000000000", "2502")]
    e = expected(s)
    assert (e.flows, e.sessions, e.packets, e.bytes, e.first_ns, e.last_ns) == (
        n, n, None, None, 0, None
    )  # fmt: skip


def test_an_even_split_keeps_a_small_choice_in_a_profile_of_small_steps():
    """Ten steps of one instance each and a close choice of 7 FIN to 3 none: `split: step`
    gives every step's one instance to FIN (the largest share); `split: even` keeps 7 and 3,
    the three none spread over the steps."""
    steps = ", ".join("{for: 1s, rate: 1}" for _ in range(10))
    base = WEB.replace("  rtt: 20ms", "  rtt: 20ms\n  close: {choices: {fin: 7, none: 3}}")
    base = base.replace("count: 1000", "count: 10")

    def closes(split: str) -> list[tuple[int, str]]:
        extra = "" if split == "step" else ", split: even"
        text = scenario(
            base.replace("  rtt: 20ms", f"  rtt: 20ms\n  profile: {{steps: [{steps}]{extra}}}")
        )
        return [(p.start // 10**9, p.close) for p in parse_scenario(text).sessions[0].parts()]

    assert [c for _, c in closes("step")] == ["fin"] * 10
    even = closes("even")
    assert sorted(c for _, c in even) == ["fin"] * 7 + ["none"] * 3
    assert [at for at, c in even if c == "none"] == [1, 5, 8]  # places 1.67, 5, 8.33 of 10


def test_a_diurnal_profile_and_a_count():
    text = scenario(
        WEB.replace(
            "rtt: 20ms",
            "rtt: 20ms\n  profile: {diurnal: {period: 24s, low: 0.2, peak: 13s, steps: 24}}",
        )
    )
    s = parse_scenario(text, "s.yaml").sessions[0]
    parts = s.parts()
    assert sum(p.count for p in parts) == 1000
    busiest = max(parts, key=lambda p: p.count)
    quietest = min(parts, key=lambda p: p.count)
    assert busiest.start in (12_000_000_000, 13_000_000_000)
    assert quietest.count / busiest.count == pytest.approx(0.2, abs=0.05)
    assert [p.start for p in parts] == sorted(p.start for p in parts)


def test_mixed_flows_and_sessions():
    flows = (
        "flows:\n  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, "
        "rate: 10, packets: 3}\n"
    )
    s = parse_scenario(scenario(WEB, flows), "s.yaml")
    text = compile_session(s)
    assert text.index("\nflow ") < text.index("\ndist ") < text.index("\nsession ")
    e = expected(s)
    assert (e.flows, e.sessions, e.packets) == (1001, 1000, None)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("change", "needle", "message"),
    [
        (("sigma: 1.2", "sigma: -1"), "request_bytes", "sessions[0].request_bytes"),
        (("sigma: 1.2", "sigma: .nan"), "request_bytes", "finite"),
        (("shape: 1.3, max: 1M", "shape: 0.01"), "response_bytes", "give `max`"),
        (("rtt: 20ms", "rtt: 20ms\n  colour: red"), "colour", "unknown key `colour`"),
        (("count: 1000", "count: 1000\n  duration: 1s"), "- name: web", "exactly one of count"),
        (("count: 1000", "count: 0"), "count", "greater than or equal to 1"),
        (("count: 1000", "count: 99999999999999999"), "count", "less than or equal"),
        (("rtt: 20ms", "rtt: 20ms\n  mss: 65500"), "- name: web", "mss 65500"),
        (("{443: 70, 80: 30}", "{443: 70, 70000: 30}"), "server_port", "server_port must lie"),
        (("values: [5, 9]", "values: [5, 900]"), "server", "host offsets must lie"),
        (("client: 198.18.0.0/16", "client: 2001:db8::/64"), "- name: web", "one family"),
        (("protocol: tcp", "protocol: sctp"), "protocol", "expected tcp, udp"),
        (("protocol: tcp", "protocol: {choices: {tcp: 0}}"), "protocol", "greater than 0"),
        (("{exponential: {mean: 1ms}}", "{exponential: {mean: 1ms}, pareto: {scale: 1, shape: 1}}"),
         "arrival", "exactly one"),
        (("{exponential: {mean: 1ms}}", "{exponential: {mean: 1 parsec}}"), "arrival",
         "unknown time unit"),
        (("{exponential: {mean: 1ms}}", "{exponential: {mean: 10000000s}}"), "- name: web",
         "2^32 s"),
        (("count: 1000", "duration: 1s"), "", None),  # fine: 1000 instances
        (("rtt: 20ms", "rtt: 20ms\n  profile: {steps: [{for: 1s, rate: 0}]}"), "profile",
         "every step has rate 0"),
        (("rtt: 20ms", "rtt: 20ms\n  rounds: {choices: {2000000: 1}}"), "rounds",
         "rounds must lie"),
    ],
)  # fmt: skip
def test_session_errors_name_file_line_and_field(change, needle, message):
    text = scenario(WEB.replace(*change))
    assert change[0] in WEB
    if message is None:
        parse_scenario(text, "s.yaml")
        return
    found = problems(text)
    assert any(message in p for p in found), found
    line = _line_of(text, needle)
    assert any(p.startswith(f"s.yaml:{line}: sessions[0]") for p in found), (line, found)


def test_a_scenario_needs_flows_or_sessions():
    (found,) = problems("version: 1\nname: t\n")
    assert "give `flows`, `sessions` or both" in found
    (found,) = problems("version: 1\nname: t\nflows: []\nsessions: []\n")
    assert "nothing to send" in found


def test_a_file_distribution_is_read_beside_the_scenario(tmp_path):
    (tmp_path / "sizes.csv").write_text("60,5\n1460,3\n9000,1\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        scenario(WEB.replace("{lognormal: {median: 400, sigma: 1.2}}", "{file: sizes.csv}"))
    )
    s = load_scenario(path).scenario
    assert s.sessions[0].request_bytes.to_bins() == [(60, 60, 5), (1460, 1460, 3), (9000, 9000, 1)]
    # a bad line of the file: the scenario's line and field, and the file's own line
    (tmp_path / "sizes.csv").write_text("60,5\n1460,3\n9k,x\n")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    (problem,) = exc.value.problems
    line = _line_of(path.read_text(), "request_bytes")
    assert problem.startswith(f"{path}:{line}: sessions[0].request_bytes: ")
    assert f"{tmp_path / 'sizes.csv'}:3: " in problem
    (tmp_path / "sizes.csv").unlink()
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(path)


@pytest.mark.parametrize("generator", ["trex"])
def test_an_offline_generator_without_sessions_refuses(generator):
    text = scenario(WEB, f"generator: {generator}\n")
    line = _line_of(text, "- name: web")  # the list's first line
    found = problems(text)
    assert any(
        p.startswith(f"s.yaml:{line}: sessions: generator `trex` cannot send two-way sessions")
        for p in found
    ), found


def test_live_generators_without_sessions_refuse_and_addresses_stay_in_range():
    live = "testbed:\n  generators:\n    - {name: scapy}\n    - {name: flowengine, label: e}\n"
    found = problems(scenario(WEB, live))
    assert any("generator `scapy` cannot send two-way sessions" in p for p in found), found
    ok = "testbed:\n  generators:\n    - {name: tcpreplay}\n"
    parse_scenario(scenario(WEB, ok), "s.yaml")
    found = problems(scenario(WEB.replace("198.18.0.0/16", "10.0.0.0/8"), ok))
    assert any("sessions[0].client: a live run sends only inside" in p for p in found), found


def test_the_example_scenario_and_validate():
    path = ROOT / "scenarios" / "learned-web.yaml"
    s = load_scenario(path).scenario
    assert expected(s).sessions == 500
    _, lines = parsed_lines(compile_session(s))
    assert len(lines) == 6
    out = subprocess.run(
        [sys.executable, "-m", "testbed", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "500 session instances" in out.stdout
    assert "sessions[0] web: 300 instances (tcp 100%; 1 engine line(s))" in out.stdout
    assert "sessions[2] mixed: 100 instances (tcp 70%, udp 30%; 4 engine line(s))" in out.stdout


def test_the_example_runs_offline_with_the_engine(tmp_path, flowengine_bin):
    """End to end with the project's engine: every check of the analysis agrees."""
    out = subprocess.run(
        [sys.executable, "-m", "testbed", "run", str(ROOT / "scenarios" / "learned-web.yaml"),
         "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NTG_FLOWENGINE": str(flowengine_bin)},
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]  # every check of the analysis agrees
    (run,) = (tmp_path / "run").iterdir()
    log = (run / "engine-flows.csv").read_text().splitlines()
    assert len(log) == 1 + 500  # one row per session instance
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["expected"]["sessions"] == manifest["expected"]["flows"] == 500


def test_cycle_ports_compile_to_a_deck_and_think_and_linger_only_when_set():
    text = scenario(
        WEB.replace(
            "client: 198.18.0.0/16",
            "client: 198.18.0.0/16\n  client_port: {empirical: {values: [5000, 5001, 5002], "
            "weights: [1, 2, 1]}, cycle: true}\n  think: 2s\n  linger: 250ms",
        )
    )
    dists, (line,) = parsed_lines(compile_session(parse_scenario(text, "s.yaml")))
    assert line["cport_mode"].startswith("P:") and line["cport"] == "5000-5002"
    assert dists[int(line["cport_mode"][2:])] == [(5000, 5000, 1), (5001, 5001, 2), (5002, 5002, 1)]
    assert line["think"] == "2000000000" and line["linger"] == "250000000"
    _, (plain,) = parsed_lines(compile_session(parse_scenario(scenario(WEB), "s.yaml")))
    assert "think" not in plain and "linger" not in plain  # as before the keys existed


def test_a_close_choice_splits_the_tcp_share_into_lines():
    text = scenario(
        WEB.replace("protocol: tcp", "protocol: {choices: {tcp: 3, udp: 1}}")
        + "  close: {choices: {fin: 2, none: 1}}\n"
    )
    s = parse_scenario(text, "s.yaml")
    parts = [(p.protocol, p.close, p.count) for p in s.sessions[0].parts()]
    assert parts == [("tcp", "fin", 500), ("tcp", "none", 250), ("udp", "fin", 250)]
    _, lines = parsed_lines(compile_session(s))
    assert [(x["proto"], x["close"], x["reps"]) for x in lines] == [
        ("6", "fin", "500"),
        ("6", "none", "250"),
        ("17", "fin", "250"),
    ]
    # each line's arrival stretched by 1 / its share: the rates add up to the entry's
    means = [p.arrival.mean() for p in s.sessions[0].parts()]
    assert sum(1 / m for m in means) == pytest.approx(1 / s.sessions[0].arrival.mean())
    assert problems(scenario(WEB + "  close: half\n"))[0].startswith("s.yaml:")


def test_drawn_pauses_compile_to_at_most_64_values():
    text = scenario(
        WEB
        + "  think: {exponential: {mean: 40ms}}\n"
        + "  linger: {empirical: {values: [5s, 6s], weights: [3, 1]}}\n"
    )
    s = parse_scenario(text, "s.yaml")
    dists, (line,) = parsed_lines(compile_session(s))
    think = dists[int(line["think"][2:])]
    assert 2 <= len(think) <= 64 and all(lo == hi >= 1 for lo, hi, _ in think)
    mean = sum(lo * w for lo, _, w in think) / sum(w for _, _, w in think)
    assert mean == pytest.approx(s.sessions[0].think.mean(), rel=0.01)
    assert dists[int(line["linger"][2:])] == [(5 * 10**9, 5 * 10**9, 3), (6 * 10**9, 6 * 10**9, 1)]
    # a plain number is seconds, as for every duration field
    plain = parse_scenario(scenario(WEB + "  think: 2\n"), "s.yaml")
    assert parsed_lines(compile_session(plain))[1][0]["think"] == "2000000000"
    assert problems(scenario(WEB + "  think: -1s\n"))[0].startswith("s.yaml:")


def test_the_engine_plays_drawn_pauses(tmp_path, flowengine_bin):
    text = scenario(
        WEB.replace("count: 1000", "count: 50")
        + "  rounds: 3\n  think: {lognormal: {median: 30ms, sigma: 1}}\n"
        + "  linger: {empirical: {values: [1s, 4s], weights: [1, 1]}}\n"
    )
    path = tmp_path / "s.ntg"
    path.write_text(compile_session(parse_scenario(text, "s.yaml")))
    done = subprocess.run(
        [str(flowengine_bin), "gen", str(path), "--null"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stderr.strip().splitlines()[-1])
    assert summary["flows_finished"] == 50
    assert summary["last_ns"] > 2 * 30_000_000 + 10**9  # two thinks and a linger at least


def test_the_lines_of_one_entry_deal_from_one_deck():
    text = scenario(
        WEB.replace("count: 1000", "count: 30")
        + "  client_port: {empirical: {values: ["
        + ", ".join(str(40000 + i) for i in range(30))
        + "]}, cycle: true}\n  close: {choices: {fin: 2, none: 1}}\n"
    )
    _, lines = parsed_lines(compile_session(parse_scenario(text, "s.yaml")))
    assert [(x["close"], x["reps"], x["deck"]) for x in lines] == [
        ("fin", "20", "0:0"),
        ("none", "10", "0:20"),
    ]
