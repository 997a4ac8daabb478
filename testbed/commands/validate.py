"""`testbed validate FILE...`: check scenario files and say what they will produce."""

from __future__ import annotations

import argparse

import numpy as np

from idsrules.attacks import load_selection, tcp_dialogues
from ntgcore.errors import EXIT_BAD_INPUT, EXIT_OK, NtgError
from ntgcore.expected import expected, peak_concurrent_flows
from ntgcore.generator import fit_problem, state_bytes
from ntgcore.scenario import ScenarioError, Session, attack_rule_paths, load_scenario

from ..runner import attack_player, check_places, open_site, plan_steps, played_attacks_problem
from . import add_parser
from .output import err


def register(subparsers) -> None:
    v = add_parser(subparsers, "validate")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for file in args.files:
        try:
            loaded = load_scenario(file)
        except ScenarioError as exc:  # said, and the next file is checked
            for problem in exc.problems:
                err(problem)
            status = EXIT_BAD_INPUT
            continue
        live_line = None
        if (
            loaded.scenario.testbed is not None
        ):  # checked first: no "ok" for a run that cannot start
            code, live_line = _validate_live(loaded)
            if code != EXIT_OK:
                status = code
                continue
            played = played_attacks_problem(loaded.scenario)  # the run would refuse to start
            if played:
                err(f"{file}: {played}")
                status = EXIT_BAD_INPUT
                continue
        else:  # what the offline generator writes, when it is not the flows as counted below
            try:
                live_line = (
                    loaded.scenario.offline_generator().offline_expected(loaded.scenario) or {}
                ).get("what")
            except NtgError as exc:
                err(f"{file}: {exc}")
                status = EXIT_BAD_INPUT
                continue
        e = expected(loaded.scenario)
        peak = peak_concurrent_flows(loaded.scenario)
        state = state_bytes(loaded.scenario)
        size = f"{e.bytes:,} bytes" if e.bytes is not None else "random sizes"
        scen = loaded.scenario
        span = max(
            [f.last_due_ns for f in scen.flows] + [x.horizon_ns for x in scen.sessions]
        ) - min([f.start for f in scen.flows] + [x.start for x in scen.sessions])
        packets = f"{e.packets:,} packets" if e.packets is not None else "packets as drawn"
        about = "about " if scen.sessions else ""
        print(
            f"{file}: ok: {len(scen.flows)} flow definitions, {e.flows:,} flows"
            + (f" ({e.sessions:,} session instances)" if scen.sessions else "")
            + f", {packets}, {size}, {about}{span / 1e9:g} s; at most {peak:,} flows at once"
            + (f" (about {_size(state)} of engine state)" if state is not None else "")
        )
        for i, session in enumerate(scen.sessions):
            print(f"  {_session_line(i, session)}")
        too_big = fit_problem(loaded.scenario)  # each generator's own check (the engine's memory)
        if too_big:
            err(f"{file}: warning: {too_big}")
        if live_line:
            print(live_line)
        if loaded.scenario.attacks is not None:
            _validate_attacks(file, loaded)
    return status


def _validate_attacks(file: str, loaded) -> None:
    """How many rules `attacks:` selects (parsing rule files is cheap: thousands per second)."""
    spec = loaded.scenario.attacks
    selected, models, problems = load_selection(attack_rule_paths(spec, loaded.path), spec.select)
    print(
        f"{file}: attacks: {len(selected):,} of {len(models):,} rules selected "
        f"({len(problems)} malformed, skipped); {spec.count:,} attack sessions at {float(spec.rate):g}/s"
        + ("" if selected else " -- the selection is empty: widen attacks.select")
    )
    player = attack_player(loaded.scenario.live_generators())
    if player is not None and selected:
        sessions, skipped = tcp_dialogues(spec, attack_rule_paths(spec, loaded.path))
        print(
            f"{file}: attacks: played by {player.title} over its own TCP stack: {len(sessions):,} TCP "
            f"rule(s); not played: {', '.join(skipped[:10]) or 'none'}{', ...' if len(skipped) > 10 else ''}"
        )


def _validate_live(loaded) -> tuple[int, str | None]:
    """What a live scenario will do: the topology (checked) and the steps."""
    tb = loaded.scenario.testbed
    try:
        site = open_site(loaded, unique=False)
    except ScenarioError as exc:
        for line in exc.problems:
            err(line)
        return EXIT_BAD_INPUT, None
    problem = check_places(loaded.scenario, site)
    if problem:
        err(f"{loaded.path}: {problem}")
        return EXIT_BAD_INPUT, None
    steps = plan_steps(loaded.scenario)
    total = sum(s.deadline_s() for s in steps)
    names = ", ".join(s.name for s in steps[:6]) + (", ..." if len(steps) > 6 else "")
    return EXIT_OK, (
        f"  live: method {tb.method}, topology {site.name}, {len(steps)} step(s) "
        f"({names}); at most {total:,.0f} s of sending"
    )


def _session_line(i: int, session: Session) -> str:
    """One session entry for `testbed validate`: its instances (exact), mean bytes per
    direction and an estimate of its packets (from 4,096 draws of each distribution with a
    fixed seed: the exact count is the engine's)."""
    parts = session.parts()
    rounds = session.rounds.mean()
    req, resp = session.request_bytes.mean(), session.response_bytes.mean()
    per = _packets_per_instance(session)
    mix = ", ".join(f"{p} {w:.0%}" for p, w in session.protocol.shares())
    return (
        f"sessions[{i}]{' ' + session.name if session.name else ''}: {session.instances:,} "
        f"instances ({mix}; {len(parts)} engine line(s)), {rounds:g} round(s) of "
        f"{req:,.0f} bytes up / {resp:,.0f} bytes down on average, about "
        f"{per * session.instances:,.0f} packets (about {per:,.1f} per instance)"
    )


def _packets_per_instance(session: Session) -> float:
    """About how many packets one instance sends: TCP its handshake (unless `open: none`),
    segments, an ACK per two segments and its close; UDP its datagrams (an estimate for `validate`, not a check)."""
    rng = np.random.default_rng(0)
    n = 4096
    rounds = np.maximum(1, np.rint(session.rounds.sample(rng, n)))
    segs = [
        np.ceil(np.rint(d.sample(rng, n)) / session.mss)
        for d in (session.request_bytes, session.response_bytes)
    ]
    total = 0.0
    for proto, share in session.protocol.shares():
        if proto == "tcp":
            data = (segs[0] + segs[1]) + np.ceil(segs[0] / 2) + np.ceil(segs[1] / 2)
            ends = {"fin": 3, "rst": 1, "none": 0}
            opening = 0 if session.open == "none" else 3  # open none: no handshake
            fixed = opening + sum(cs * ends[c] for c, cs in session.close.shares())
        else:
            data, fixed = segs[0] + segs[1], 0
        total += share * float(np.mean(rounds * data + fixed))
    return total


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"  # pragma: no cover - the loop returns
