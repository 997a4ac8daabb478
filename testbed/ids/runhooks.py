"""The IDS side of a run, as run hooks (ntgcore.runhooks): a scenario's `attacks:` section.

Offline, the attack sessions are synthesized from the rules and merged by time with the
generator's capture; with `ids: suricata` Suricata scores them (coverage.json/md/html). Live,
the sessions are replayed by an extra tcpreplay generator in the `run` steps, or handed to a
generator that plays them over its own TCP stack (TRex ASTF), and then scored from the captures
of both directions. The runner calls these hooks without knowing what they do."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from idsrules.attacks import MERGECAP, AttackError, merge_pcaps, tcp_dialogues, write_attacks
from idsrules.syntax import read_rule_text
from ntgcore.errors import RunSetupError
from ntgcore.packets import in_benchmark_networks
from ntgcore.proc import Tool
from ntgcore.registry import DUT_KINDS, GENERATORS
from ntgcore.runhooks import RunHooks
from ntgcore.scenario import (
    GeneratorSpec,
    LoadedScenario,
    Scenario,
    attack_rule_paths,
    generator_spec,
)
from ntgcore.yamlread import yaml_lines

from .attack_evasions import (
    Labels,
    VariedAttacks,
    host_labels,
    record_variants,
    score_variants,
    write_varied_attacks,
)
from .attack_evasions import message as evasion_message
from .coverage import attack_coverage, gate_lines, played_coverage, sid_change_lines
from .coverage import blocking as coverage_blocking
from .regression import Baseline
from .suricata import Dut, SuricataError, SuricataMissing, parse_eve

FULL_FRAME = 1514  # bytes of an Ethernet frame at MTU 1500: a snaplen that keeps every payload
NS = 1_000_000_000


def attack_player(generators: list[GeneratorSpec]) -> GeneratorSpec | None:
    """The first generator that plays the `attacks:` TCP sessions itself (GeneratorSpec.plays_attacks)."""
    return next((g for g in generators if g.plays_attacks()), None)


def played_attacks_problem(scenario: Scenario) -> str | None:
    """Why a live scenario whose generator plays the attack sessions cannot score them with
    `attacks.ids: suricata` (None when it can): Suricata reads the captures of both directions;
    or that cannot send `attacks.evasions` (played_evasions_problem)."""
    tb = scenario.testbed
    evasions = played_evasions_problem(scenario)
    if evasions:
        return evasions
    if (
        tb is None
        or scenario.attacks is None
        or scenario.attacks.ids != "suricata"
        or attack_player(scenario.live_generators()) is None
    ):
        return None
    if tb.capture is None or not tb.capture.also_at:
        return (
            "attacks.ids: suricata with a generator that plays the attack sessions reads the "
            "capture of both directions: give `testbed.capture.also_at` (TRex ASTF on the astf "
            "topology: `capture: {at: 'gen:gen1', also_at: ['gen:gen0'], snaplen: 2048}`)"
        )
    if tb.capture.snaplen < FULL_FRAME:
        return (
            f"attacks.ids: suricata reads the payloads: testbed.capture.snaplen "
            f"{tb.capture.snaplen} cuts them; give at least {FULL_FRAME}"
        )
    return None


def played_evasions_problem(scenario: Scenario) -> str | None:
    """Why a live scenario cannot send `attacks.evasions` (None when it can): a generator that
    plays the attack sessions over its own TCP stack sends the plain dialogues only."""
    if scenario.testbed is None or scenario.attacks is None or not scenario.attacks.evasions:
        return None
    player = attack_player(scenario.live_generators())
    if player is None:
        return None
    return (
        f"attacks.evasions: {player.title} plays the attack sessions over its own TCP stack, "
        "which sends each dialogue plainly and cannot send evasion variants (odd segments, "
        "fragments, bad checksums); replay them from the attack pcap (a generator without "
        "`mode: astf`) or drop attacks.evasions"
    )


def evasion_labels(
    spec, run_dir, say: Callable[[str], None], mark: Any = None
) -> Future[tuple[Labels | None, str | None]]:
    """The live lab's labels of `spec.evasions` (`host_labels`), measured beside the run's own
    work (a thread); `mark(run_dir)`: a run mark for the lab (its namespaces and helpers, for
    `testbed cleanup` after a kill -9), the run options' `lab_mark` when the runner gives one."""
    pool = ThreadPoolExecutor(max_workers=1)
    job = pool.submit(
        host_labels,
        list(spec.evasions),
        run_dir / "evasions" / "host",
        Dut(),
        say=say,
        mark=functools.partial(mark, run_dir) if mark is not None else None,
    )
    pool.shutdown(wait=False)
    return job


def coverage_baseline_problem(scenario: Scenario) -> str | None:
    """Why a coverage baseline cannot apply to `scenario` (None when it can)."""
    if scenario.attacks is None or scenario.attacks.ids != "suricata":
        return (
            "--coverage-baseline needs coverage: a scenario with an `attacks:` section with "
            "`ids: suricata`"
        )
    if scenario.testbed is not None and attack_player(scenario.live_generators()) is None:
        return (
            "--coverage-baseline: a live run measures no per-sid coverage when the attack pcap "
            "is replayed (an offline run with `attacks: {ids: suricata}` does, and a live one "
            "whose generator plays the attack sessions: TRex ASTF)"
        )
    return None


def _add_attacks(run: Any, scenario: Scenario) -> None:
    """`attacks:` live: the attack sessions are synthesized into attacks/attacks.pcap. In a
    `run` step with a generator that plays them itself (GeneratorSpec.plays_attacks: TRex
    ASTF), that generator is given their TCP dialogues (tcp_dialogues) and plays them over
    its own TCP stack; the pcap is then not replayed (the manifest says so, and which rules
    are not played). Otherwise it is replayed (realtime) by an extra tcpreplay generator on
    the first generator's interface, alongside the benign generators, started
    `attacks.start` after them (tcpreplay sends the pcap's first packet at once, whatever
    its time stamp)."""
    spec = scenario.attacks
    assert spec is not None
    rules = attack_rule_paths(spec, run.loaded.path)
    problem = played_attacks_problem(scenario)
    dialogues: tuple[list[dict], list[str]] = ([], [])
    try:
        if problem:
            raise AttackError(problem)
        # live: a rule's session on its own addresses outside the test ranges is not sent
        attacks = (
            write_varied_attacks(spec, rules, run.run_dir / "attacks", seed=run.seed, live=True)
            if spec.evasions
            else write_attacks(spec, rules, run.run_dir / "attacks", live=True)
        )
        outside = sorted(
            {
                a
                for x in attacks.synth.sessions
                for a in (x.client, x.server)
                if not in_benchmark_networks(a)
            }
        )
        if outside:  # never reached (write_attacks left them out): the last check before a wire
            raise AttackError(f"attacks: addresses outside the test ranges to send: {outside[:5]}")
        player = attack_player(scenario.live_generators())
        if player is not None:
            dialogues = run.state["attacks"] = tcp_dialogues(spec, rules)
            if not dialogues[0]:
                raise AttackError(
                    f"attacks: {player.title} plays the attack TCP sessions, and no "
                    f"selected rule is one: {'; '.join(dialogues[1][:5])}"
                )
    except AttackError as exc:
        run.manifest["error"] = str(exc)
        run.finish("failed")
        raise RunSetupError(str(exc)) from None
    info = attacks.summary()
    if attacks.not_live:
        run.messages.append(
            f"attacks: {len(attacks.not_live)} rule(s) not sent live, their sessions being offline"
            f" only (the rule's own addresses lie outside the test ranges): sids "
            + ", ".join(str(k) for k in sorted(attacks.not_live)[:10])
        )
    info["pcap"] = "attacks/attacks.pcap"
    info["manifest"] = "attacks/attacks.json"
    run.manifest["attacks"] = info
    first = scenario.live_generators()[0]
    replay = generator_spec(
        {
            "name": "tcpreplay",
            "label": "attacks",
            "at": first.at,
            "pace": "realtime",
            "pcap": str(attacks.pcap.resolve()),
            "start": f"{spec.start}ns",
        }
    )
    span_s = ((info["last_ns"] or 0) - (info["first_ns"] or 0)) / NS
    for step in run.steps:
        if step.kind != "run":
            continue
        player = attack_player(step.generators)
        if player is None:
            step.generators = [*step.generators, replay]
            step.params.attacks_last_s = span_s
            info["replayed_by"] = "tcpreplay (generator `attacks`)"
            continue
        sessions, skipped = dialogues
        step.attack_sessions[player.title] = (sessions, skipped)
        step.params.attacks_last_s = spec.count / float(spec.rate)
        info["played_by"] = player.title
        info["played"] = {
            "rules": len(sessions),
            "sessions": sum(d["count"] for d in sessions),
            "servers": {str(d["sid"]): f"{d['server']}:{d['server_port']}" for d in sessions},
            "clients": {str(d["sid"]): "-".join(d["client"]) for d in sessions},
        }
        info["not_played"] = skipped
        info["pcap_note"] = (
            f"written for reference only (the same dialogues, the synthesis's "
            f"addresses): not replayed; {player.title} plays the TCP sessions "
            f"over its own TCP stack (real handshakes), on the rule's sides "
            f"(`played`); the rules in `not_played` are not sent"
        )


def _mix_attacks(
    run: Any,
    loaded: LoadedScenario,
    say: Callable[[str], None],
    baseline: Baseline | None = None,
    options: dict[str, Any] | None = None,
) -> str:
    """Offline `attacks:`: the engine's capture becomes benign.pcap, the attack sessions
    attacks.pcap (+ attacks.json), both merged by time into capture.pcap; with `ids: suricata`,
    Suricata reads the mixed capture and coverage.json/md/html score the attack sessions (also
    tables/coverage.parquet), compared per sid with `baseline` when given (manifest
    `attacks.baseline`; its `blocking` makes the exit status 3). With `attacks.evasions` the
    variant sessions are scored too (attack_evasions: evasion.json/md, the coverage_evasion table,
    the manifest's `attacks.evasions`), labelled by the live lab under `options["lab_mark"]`."""
    spec = loaded.scenario.attacks
    options = options or {}
    assert spec is not None
    rules = attack_rule_paths(spec, loaded.path)
    capture, benign = run.run_dir / "capture.pcap", run.run_dir / "benign.pcap"
    labels = None
    if spec.evasions and spec.ids == "suricata":  # the live lab runs beside the writing
        labels = evasion_labels(spec, run.run_dir, say, options.get("lab_mark"))
    try:
        say("synthesizing the attack sessions")
        attacks = (
            write_varied_attacks(spec, rules, run.run_dir, seed=run.seed)
            if spec.evasions
            else write_attacks(spec, rules, run.run_dir)
        )
        os.replace(capture, benign)
        say("merging benign and attack packets by time")
        merge_pcaps([benign, attacks.pcap], capture)
        info = {**attacks.summary(), "benign_pcap": benign.name, "capture": capture.name}
        if spec.ids == "suricata":
            say("suricata on the mixed capture")
            doc = attack_coverage(capture, attacks, rules, run.run_dir, baseline=baseline)
            _record_coverage(run, info, doc, baseline)
            if isinstance(attacks, VariedAttacks) and labels is not None:
                say("scoring the evasion variants")
                got, why = labels.result()
                alerts = parse_eve(run.run_dir / "suricata" / "eve.json")
                ev = score_variants(attacks, alerts, got, why)
                info["evasions"] = record_variants(ev, run.run_dir, doc["dut"])
                run.messages.append(f"attacks: {evasion_message(info['evasions'])}")
        run.manifest["attacks"] = info
        status = "completed"
    except (AttackError, OSError, SuricataMissing, SuricataError) as exc:  # the run failed: say why
        run.manifest["error"] = f"attacks: {exc}"
        status = "failed"
    return run.folder.finish(status)


def _record_coverage(run: Any, info: dict, doc: dict, baseline: Baseline | None) -> None:
    """The coverage document's counts, alerted sids and baseline gate into the manifest's
    `attacks` (`info`) and the run's messages."""
    info["coverage"] = {
        k: doc[k]
        for k in (
            "loaded",
            "alerted",
            "missed",
            "coverage",
            "extra_alert_sessions",
            "extra_unrelated_sessions",
        )
    }
    info["alerted_sids"] = sorted(r["sid"] for r in doc["rows"] if r["alerted"])
    run.messages += [f"attacks: {line}" for line in doc["summary"][:3]]
    if baseline is not None:
        cmp = doc["baseline"]
        info["baseline"] = {
            "path": cmp["path"],
            "allow_path": cmp["allow_path"],
            "counts": cmp["counts"],
            "blocking": [{"what": w, "sids": s} for w, s in coverage_blocking([doc])],
        }
        run.messages += [f"attacks: {line}" for line in sid_change_lines(doc)]
        run.messages += [
            f"attacks: coverage gate: {line}; fix them, or list them in a "
            "--coverage-allow file with the reason"
            for line in gate_lines({"blocking": coverage_blocking([doc])})
        ]


def _score_played_attacks(
    run: Any, loaded: LoadedScenario, say: Callable[[str], None], baseline: Baseline | None = None
) -> str:
    """Live `attacks:` played by a generator, with `ids: suricata`: the captures of the (first)
    step in which it played them (capture.pcap and every `also_at` one: each direction once) are merged
    by time into attacks/both-sides.pcap, Suricata reads it, and the played sessions (found by
    their rule's server address and port) are scored as offline: coverage.json/md/html,
    tables/coverage.parquet, the manifest's `attacks.coverage` and `alerted_sids`."""
    spec = loaded.scenario.attacks
    assert spec is not None
    rules = attack_rule_paths(spec, loaded.path)
    info = run.manifest["attacks"]
    step = next(e for e in run.manifest["steps"] if info["played_by"] in e.get("generators", {}))
    step_dir = run.run_dir / step["dir"]
    files = [step_dir / c["file"] for c in step.get("captures", [])]
    merged = run.run_dir / "attacks" / "both-sides.pcap"
    try:
        say("merging the captures of both directions")
        merge_pcaps(files, merged)
        info["ids_capture"] = {
            "file": str(merged.relative_to(run.run_dir)),
            "from": [
                {"file": str(f.relative_to(run.run_dir)), "at": c["at"]}
                for f, c in zip(files, step["captures"])
            ],
        }
        say("suricata on the captures")
        doc = played_coverage(
            merged, spec, rules, run.state["attacks"][0], run.run_dir, baseline=baseline
        )
        info["played"]["sessions_seen"] = doc["played_sessions"]
        _record_coverage(run, info, doc, baseline)
        status = "completed"
    except (AttackError, OSError, SuricataMissing, SuricataError) as exc:
        run.manifest["error"] = f"attacks: {exc}"
        status = "failed"
    return run.folder.finish(status, recursive=True)


class AttackHooks(RunHooks):
    """`attacks:`: its tools, its checks, the live steps' attack replay (or hand-over), the
    mixing and the scoring after the run, and the coverage gate."""

    name = "attacks"

    def tools(self, scenario: Scenario, sends: bool) -> list[Tool]:
        if scenario.attacks is None:
            return []
        tools = [MERGECAP]  # attack sessions are merged by time with mergecap
        if scenario.testbed is None or not sends:
            return tools
        if not attack_player(scenario.live_generators()):
            tools += GENERATORS.get("tcpreplay").tools  # the sessions are replayed by tcpreplay
        elif scenario.attacks.ids == "suricata":
            tools += DUT_KINDS.get("suricata").tools  # Suricata scores the sessions it played
        return tools

    def check(self, loaded: LoadedScenario, options: dict[str, Any]) -> None:
        if options.get("coverage_baseline") is not None:
            problem = coverage_baseline_problem(loaded.scenario)
            if problem:
                raise RunSetupError(f"{loaded.path}: {problem}")
        problem = played_evasions_problem(loaded.scenario)
        if problem:
            line = yaml_lines(loaded.text).get(("attacks", "evasions"), 1)
            raise RunSetupError(f"{loaded.path}:{line}: {problem}")
        if loaded.scenario.attacks is not None:
            # BadInput before anything runs: not UTF-8 (FILE:LINE), too long
            for rules in attack_rule_paths(loaded.scenario.attacks, loaded.path):
                read_rule_text(rules)

    def plan(self, run: Any) -> None:
        if run.scenario.attacks is not None:
            _add_attacks(run, run.scenario)

    def after_run(
        self, run: Any, status: str, say: Callable[[str], None], options: dict[str, Any]
    ) -> str:
        attacks, baseline = run.loaded.scenario.attacks, options.get("coverage_baseline")
        if status == "completed" and not run.live and attacks is not None:
            return _mix_attacks(run, run.loaded, say, baseline, options)
        played = run.state.get("attacks", ([], []))[0]
        if status == "completed" and played and attacks is not None and attacks.ids == "suricata":
            return _score_played_attacks(run, run.loaded, say, baseline)
        return status

    def blocks(self, run: Any) -> bool:
        # the coverage gate, as `testbed ids-coverage --baseline`
        return bool(run.manifest.get("attacks", {}).get("baseline", {}).get("blocking", []))


HOOKS = AttackHooks()
