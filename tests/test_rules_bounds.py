"""One rule costs bounded work: a rule longer than MAX_RULE_BYTES is refused at reading, a pcre
that backtracks is given up after the per-rule time limit, sizes beyond one session make a rule
unsupported; each is reported with its reason and the rules beside it are still synthesized."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from idsrules.semantics import MAX_SESSION_BYTES, analyze
from idsrules.syntax import MAX_RULE_BYTES, parse_rule_text
from idsrules.synth import SynthError, plan

ROOT = Path(__file__).resolve().parents[1]
PEAK_RSS_LIMIT_MB = 400  # measured 1,414 MB for these rules before the bounds, about 40 after

# run in a child so that its peak memory is the synthesis's own, not the test session's; read
# VmHWM (the peak of this process image), not ru_maxrss, which Linux carries over from the forking
# parent across exec (a child of a large pytest process would report the parent's size)
CHILD = textwrap.dedent("""
    import json, re, sys
    from idsrules.semantics import load_rules
    from idsrules.synth import synthesize
    models, problems = load_rules([sys.argv[1]])
    res = synthesize(models, sys.argv[2])
    print(json.dumps({"problems": [str(p) for p in problems], "models": [m.sid for m in models],
                      "synthesized": sorted(res.synthesized), "failed": res.failed,
                      "peak_rss_mb": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1]) / 1024}))
""")


def _rule(sid: int, port: int, options: str) -> str:
    return (
        f'alert tcp $EXTERNAL_NET any -> $HOME_NET {port} (msg:"r{sid}"; '
        f"flow:to_server,established; {options} sid:{sid}; rev:1;)"
    )


def test_huge_rule_and_backtracking_pcre_are_refused_beside_a_normal_rule(tmp_path: Path) -> None:
    rules = tmp_path / "c8.rules"
    huge = _rule(1000980, 7000, 'content:"%s";' % ("A" * (10 * 1024 * 1024)))  # a 10 MiB line
    rules.write_text(
        "\n".join(
            [
                huge,
                # the negated pcre backtracks exponentially over the 34 a's the content puts there
                _rule(1000981, 7001, 'content:"%s"; pcre:!"/(a+)+c/";' % ("a" * 34)),
                _rule(1000982, 7002, 'content:"hello";'),
            ]
        )
        + "\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(rules), str(tmp_path / "a.pcap")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["synthesized"] == [1000982]
    assert out["problems"] == [
        f"{rules}:1: rule of {len(huge):,} bytes is longer than "
        f"the {MAX_RULE_BYTES:,} a rule may have; refused (sid 1000980)"
    ]
    assert out["failed"] == {"1000981": "synthesis took longer than 1 s (pcre backtracking)"}
    assert out["peak_rss_mb"] < PEAK_RSS_LIMIT_MB, out["peak_rss_mb"]


@pytest.mark.parametrize(
    "options, reason",
    [
        (
            'content:"x"; isdataat:50000000,relative;',
            "isdataat:50000000 asks for more than the 1,048,576 bytes",
        ),
        ('content:"x"; offset:90000000;', "offset:90000000 asks for more than"),
        ("dsize:>5000000;", "dsize:5000001 asks for more than"),
        ('content:"x"; byte_test:4,>,1,80000000;', "byte_test offset:80000000 asks for more than"),
        (
            'content:"x"; threshold:type threshold, track by_src, count 1000000, seconds 60;',
            "threshold count 1000000 needs 1,000,000 sessions, more than the 10,000 one rule may have",
        ),
    ],
)
def test_sizes_beyond_one_session_make_the_rule_unsupported(options: str, reason: str) -> None:
    m = analyze(parse_rule_text(_rule(1000983, 7003, options)))
    assert not m.supported
    assert any(reason in r for r in m.reasons), m.reasons


def test_a_session_over_the_byte_bound_is_not_planned() -> None:
    # each buffer fits, the request carrying both does not
    half = MAX_SESSION_BYTES // 2 + 1000
    m = analyze(
        parse_rule_text(
            'alert http $EXTERNAL_NET any -> $HOME_NET any (msg:"big"; flow:to_server,established; '
            f'http.uri; content:"/a"; bsize:{half}; http.request_body; content:"b"; bsize:{half}; sid:1000984; rev:1;)'
        )
    )
    assert m.supported, m.reasons
    with pytest.raises(SynthError, match="more than the 1,048,576 one rule may have"):
        plan(m, {}, 1)


def test_all_sessions_of_a_threshold_rule_are_bounded_together() -> None:
    # 5,000 sessions are allowed, and 20 KiB are, but not 5,000 sessions of 20 KiB (about 100 MB)
    m = analyze(
        parse_rule_text(
            _rule(
                1000985,
                7005,
                'content:"x"; isdataat:20000,relative; '
                "threshold:type threshold, track by_src, count 5000, seconds 60;",
            )
        )
    )
    assert m.supported, m.reasons
    with pytest.raises(
        SynthError, match="5,000 sessions of 20,001 bytes would carry more than the 67,108,864"
    ):
        plan(m, {}, 1)
