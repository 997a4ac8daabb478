"""The command lines of `flowengine gen`, `match` and `multiply` (getopt_long tables): every
`--help` lists the choices that the parser takes, from the same tables; the errors keep their
words and exit status 2; values may be attached (`--seed=7`), long options shortened to an
unambiguous prefix, and `--` ends the options."""

from __future__ import annotations

import re

import pytest

from tests.test_engine_cli import run, write_session

MATCH_QUICK = ("--size", "1024", "--feed", "det", "--packets", "1000")


def listed(text: str, label: str) -> list[str]:
    """The comma-separated names after LABEL (`  --struct: a, b, c`) in a help text."""
    m = re.search(rf"^\s*{re.escape(label)}: (.+)$", text, re.M)
    assert m, f"{label} is not listed in:\n{text}"
    return [n.strip() for n in m[1].split("(")[0].split(",") if n.strip()]


def known(stderr: str) -> list[str]:
    """The names of an error's `(known: a, b, c)`."""
    m = re.search(r"\(known: ([^)]*)\)", stderr)
    assert m, stderr
    return [n.strip() for n in m[1].split(",")]


def choices(text: str, option: str) -> list[str]:
    """The choices of `[--option a|b]` in a usage text."""
    m = re.search(rf"\[{re.escape(option)} ([\w|-]+)\]", text)
    assert m, f"{option} has no choices in:\n{text}"
    return m[1].split("|")


def test_match_help_lists_the_structures_hashes_and_feeds_its_parser_takes(flowengine_bin):
    help_text = run(flowengine_bin, "match", "--help").stdout
    structs = listed(help_text, "--struct")
    bad = run(flowengine_bin, "match", "--struct", "nosuch", *MATCH_QUICK, check=False)
    assert bad.returncode == 2 and structs == known(bad.stderr)
    assert {"chain", "tree", "linear", "robin", "cuckoo", "linear16"} <= set(structs)
    for name in structs:
        run(flowengine_bin, "match", "--struct", name, *MATCH_QUICK)

    hashes = listed(help_text, "--hash")
    bad = run(
        flowengine_bin, "match", "--struct", "chain", "--hash", "md5", *MATCH_QUICK, check=False
    )
    assert bad.returncode == 2 and hashes == known(bad.stderr)
    assert "crc32c" in hashes

    feeds = listed(help_text, "--feed")
    bad = run(
        flowengine_bin, "match", "--struct", "chain", "--size", "8", "--feed", "x", check=False
    )
    assert bad.returncode == 2 and feeds == known(bad.stderr)
    assert {"det", "uniform:N", "zipf:N:ALPHA", "pcap", "file:PATH"} <= set(feeds)


def test_gen_help_lists_the_choices_its_parser_takes(flowengine_bin, tmp_path):
    s = write_session(tmp_path, [{}])
    help_text = run(flowengine_bin, "gen", "--help").stdout
    for option in ("--pace", "--tx", "--planner"):
        names = choices(help_text, option)
        assert len(names) == 2
        for name in names:
            run(flowengine_bin, "gen", s, "--null", option, name)
        bad = run(flowengine_bin, "gen", s, "--null", option, "bogus", check=False)
        assert bad.returncode == 2
        assert f"flowengine: {option}: expected {names[0]} or {names[1]}: bogus" in bad.stderr


@pytest.mark.parametrize("live", [False, True], ids=["offline", "live"])
def test_multiply_help_lists_the_choices_its_parser_takes(flowengine_bin, tmp_path, live):
    mode = ["--live"] if live else []
    help_text = run(flowengine_bin, "multiply", *mode, "--help").stdout
    options = ("--order", "--ports", "--tx", "--spfo-scope") if live else ("--order", "--ports")
    for option in options:
        names = choices(help_text, option)
        assert len(names) == 2
        bad = run(flowengine_bin, "multiply", *mode, option, "bogus", check=False)
        assert bad.returncode == 2
        assert f"{option}: expected {names[0]} or {names[1]} (got 'bogus')" in bad.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["gen", "S", "--null", "-o", "x.pcap", "-o", "y.pcap"], "option given twice: -o"),
        (["gen", "S", "--null", "--stats", "a", "--stats", "b"], "option given twice: --stats"),
        (["gen", "S", "--null", "--seed"], "flowengine: option needs a value: --seed"),
        (["gen", "S", "--null", "--bogus", "1"], "flowengine: unknown option: --bogus"),
        (["gen", "S", "T", "--null"], "flowengine: more than one SESSION: T"),
        (
            ["gen", "S", "--null", "--tx-batch", "0"],
            "flowengine: expected an integer 1..1000000: 0",
        ),
        (["match", "--size"], "flowengine match: --size: option needs a value"),
        (["match", "--bogus", "1"], "flowengine match: unknown option: --bogus"),
        (["match", "--seed", "x"], "flowengine match: --seed x: expected an integer 0..2^64-1"),
        (["match", "--timeout-idle", "-1"], "--timeout-idle -1: expected seconds >= 0"),
        (["multiply", "in.pcap", "--seed"], "flowengine multiply: --seed needs a value"),
        (["multiply", "in.pcap", "--bogus", "1"], "flowengine multiply: unknown option '--bogus'"),
        (["multiply", "a.pcap", "b.pcap"], "more than one input capture ('b.pcap')"),
        (["multiply", "in.pcap", "-T", "x"], "-T: expected a non-negative integer (got 'x')"),
        (["multiply", "--live", "a", "b", "c", "d"], "--live: more than three interfaces ('d')"),
        (["multiply", "--live", "a", "--max-flows", "x"], "--max-flows: expected a non-negative"),
    ],
)
def test_errors_keep_their_words_and_exit_2(flowengine_bin, tmp_path, args, message):
    s = write_session(tmp_path, [{}])
    args = [str(s) if a == "S" else a for a in args]
    r = run(flowengine_bin, *args, check=False)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_values_attach_with_an_equals_sign_and_long_options_shorten(flowengine_bin, tmp_path):
    s = write_session(tmp_path, [{"packets": 20}])
    spaced, attached = tmp_path / "spaced.pcap", tmp_path / "attached.pcap"
    run(flowengine_bin, "gen", s, "-o", spaced, "--seed", "7", "--max-packets", "5")
    run(flowengine_bin, "gen", s, f"-o{attached}", "--seed=7", "--max-pack=5")
    assert attached.read_bytes() == spaced.read_bytes()
    ambiguous = run(flowengine_bin, "gen", s, "--null", "--s", "1", check=False)
    assert ambiguous.returncode == 2 and "unknown option: --s" in ambiguous.stderr


def test_a_double_dash_ends_the_options(flowengine_bin, tmp_path):
    s = write_session(tmp_path, [{}])
    run(flowengine_bin, "gen", "--null", "--", s)
    r = run(flowengine_bin, "gen", "--null", "--", s, s, check=False)
    assert r.returncode == 2 and "more than one SESSION" in r.stderr
