"""`testbed spread SCENARIO --out DIR` (or `--collect`): one engine session per generator host."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ntgcore.errors import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK, EXIT_RUN_FAILED
from ntgcore.files import write_error, write_whole
from ntgcore.generator import session_text
from ntgcore.scenario import load_scenario

from ..methods import spread_shares
from ..parts.hosts import collect_hosts
from . import add_parser, argtypes
from .output import err


def register(subparsers) -> None:
    sp = add_parser(subparsers, "spread")
    sp.add_argument("scenario", nargs="?", help="the scenario (not with --collect)")
    sp.add_argument(
        "--out",
        required=True,
        help="folder of the sessions and spread.json (with --collect: "
        "the folder the play fetched the hosts' results into)",
    )
    sp.add_argument("--seed", type=argtypes.seed, help="default: the scenario's (0 .. 2^64-1)")
    sp.add_argument(
        "--collect",
        action="store_true",
        help="sum the fetched hosts' counters, merge their captures",
    )
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The split of a `testbed.spread` scenario for hosts started by Ansible (site.yml, tag
    multihost): one engine session per host and spread.json; or, with --collect, the hosts'
    fetched results summed and their captures merged (spread-collected.json)."""
    out = Path(args.out)
    if args.collect:
        doc = collect_hosts(out)
        missing = [h["name"] for h in doc["hosts"] if h.get("packets_sent") is None]
        for h in doc["hosts"]:
            print(
                f"{h['name']}: "
                + (
                    "no engine-summary.json fetched (the host failed or was not reached)"
                    if h["name"] in missing
                    else f"{h['packets_sent']:,} packets sent"
                )
                + (f", {h['captured']:,} captured" if h.get("captured") is not None else "")
            )
        skew = doc.get("start_skew_ms")
        print(
            f"sum: {doc['packets_sent'] if doc['packets_sent'] is not None else 'incomplete'}; start skew "
            f"{'n/a (needs every host captured)' if skew is None else format(skew, '.3f') + ' ms'}; "
            f"{out / 'spread-collected.json'}"
        )
        if missing:
            return EXIT_RUN_FAILED
        return EXIT_OK if all(c["ok"] for c in doc.get("checks", [])) else EXIT_CHECKS_FAILED
    loaded = load_scenario(args.scenario)
    tb = loaded.scenario.testbed
    if tb is None or tb.spread is None:
        err(f"{args.scenario}: no `testbed.spread` section: nothing to split (docs/multihost.md)")
        return EXIT_BAD_INPUT
    seed = loaded.scenario.seed if args.seed is None else args.seed
    shares, info = spread_shares(loaded.scenario)
    info["seed"] = seed
    template = loaded.scenario.live_generators()[0]  # every host runs it
    texts = {title: session_text(template, share, seed) for title, share in shares.items()}
    sessions = {title: text for title, text in texts.items() if text is not None}
    if len(sessions) < len(texts):
        err(
            f"{args.scenario}: testbed.generators: `{template.name}` has no session file for the "
            "hosts to run; `testbed spread` writes the engine's (generators: [{name: flowengine}])"
        )
        return EXIT_BAD_INPUT
    try:  # each file whole or not at all
        out.mkdir(parents=True, exist_ok=True)
        for title, text in sessions.items():
            write_whole(out / f"{title}.ntg", text)
        write_whole(out / "spread.json", json.dumps(info, indent=2) + "\n")
    except OSError as exc:
        raise write_error(exc, out, "free some space, or choose another --out") from None
    for h in info["hosts"]:
        print(
            f"{h['name']}: {h['flow_count']} flows, {h['packets_planned']:,} packets -> {out / (h['name'] + '.ntg')}"
        )
    return EXIT_OK
