"""`testbed multiply IN`: copy every packet of a capture T times with shadow addresses."""

from __future__ import annotations

import argparse
from pathlib import Path

from ntgcore.errors import EXIT_BAD_INPUT, EXIT_CHECKS_FAILED, EXIT_OK

from ..multiply import (
    MultiplyParams,
    analyze_multiplied,
    multiply_capture,
    multiply_run_folder,
    scenario_params,
)
from . import add_parser
from .output import err, print_multiply_report


def register(subparsers) -> None:
    m = add_parser(subparsers, "multiply")
    m.add_argument(
        "input",
        metavar="IN",
        help="a pcap/pcapng, or a run folder (its capture.pcap; parameters "
        "from its scenario's multiply: section unless given)",
    )
    m.add_argument(
        "-o", "--output", metavar="OUT", help="the multiplied capture (for a capture IN)"
    )
    m.add_argument(
        "-T", "--copies", type=int, metavar="N", help="shadow copies of every packet (1..1024)"
    )
    m.add_argument("--ranges", metavar="CIDR,...", help="shadow address ranges, IPv4 and/or IPv6")
    m.add_argument("--original", metavar="CIDR,...", help="the originals' own ranges (checked)")
    m.add_argument(
        "--home",
        metavar="CIDR,...",
        help="home side: originals in these CIDRs take their shadows "
        "from --home-ranges, the others from --ranges",
    )
    m.add_argument(
        "--home-ranges", metavar="CIDR,...", help="the home side's shadow ranges (with --home)"
    )
    m.add_argument("--seed", type=int, default=1, help="seed of the plan (default 1)")
    m.add_argument("--order", choices=("spfo", "interleaved"), default="spfo")
    m.add_argument("--ports", choices=("keep", "shift"), default="keep")
    m.add_argument(
        "--urls", metavar="FILE", help="request targets, one a line, substituted per copy"
    )
    m.add_argument(
        "--mtu", type=int, default=1500, help="largest IP packet a substituted request may become"
    )
    m.add_argument(
        "--plan", metavar="FILE", help="the shadow plan, .csv or .json (default OUT.plan.csv)"
    )
    m.add_argument(
        "--scenario",
        metavar="FILE",
        help="take the parameters from this scenario's multiply: section",
    )
    m.add_argument("--max-flows", type=int, help="flow-table bound (default: half the free memory)")
    m.add_argument("--max-seconds", type=int, help="refuse a run estimated longer (default 3600)")
    m.add_argument(
        "--upto-damage", action="store_true", help="multiply a damaged capture up to the damage"
    )
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    src = Path(args.input)
    given = args.copies is not None or args.ranges is not None
    if given and (args.copies is None or args.ranges is None):
        err(
            "testbed multiply: give both -T and --ranges (or neither, to take them from a scenario's multiply: section)"
        )
        return EXIT_BAD_INPUT
    if bool(args.home) != bool(args.home_ranges):
        err(
            "testbed multiply: give --home (the home side's original CIDRs) together with --home-ranges "
            "(its shadow ranges), or neither"
        )
        return EXIT_BAD_INPUT
    params = None
    if given:
        params = MultiplyParams(
            copies=args.copies,
            ranges=tuple(args.ranges.split(",")),
            seed=args.seed,
            order=args.order,
            ports=args.ports,
            urls=Path(args.urls) if args.urls else None,
            mtu=args.mtu,
            original=tuple(args.original.split(",")) if args.original else (),
            max_flows=args.max_flows,
            max_seconds=args.max_seconds,
            upto_damage=args.upto_damage,
            home=tuple(args.home.split(",")) if args.home else (),
            home_ranges=tuple(args.home_ranges.split(",")) if args.home_ranges else (),
        )
    elif args.scenario:
        params = scenario_params(Path(args.scenario))
    if src.is_dir():
        doc = multiply_run_folder(src, params)
        where = f"{src} (multiplied.pcap, shadow_plan.csv, multiply.json)"
    else:
        if not args.output or params is None:
            err(
                "testbed multiply: a capture needs -o OUT.pcap and the parameters (-T and --ranges, or --scenario)"
            )
            return EXIT_BAD_INPUT
        out = Path(args.output)
        plan = Path(args.plan) if args.plan else out.with_suffix(".plan.csv")
        doc = multiply_capture(src, out, plan, out.with_suffix(".multiply.json"), params)
        where = f"{out} (plan {plan})"
        if out.is_file():  # not /dev/null: the analysis of the output beside it
            doc["report"] = analyze_multiplied(
                src, out, plan, params.copies, out.parent, out.stem + ".report", params.urls is None
            )
    for line in doc.get("warning", "").splitlines():
        err(line)
    passed = sum(doc["passthrough"].values())
    print(
        f"{doc['packets_in']:,} packets in, {doc['packets_out']:,} out ({doc['rewritten']:,} x "
        f"{doc['copies'] + 1}, {passed:,} passed through alone), {doc['flows']:,} flows: {where}"
    )
    report = doc.get("report")
    if report is not None:
        print_multiply_report(report)
        return EXIT_OK if report["ok"] else EXIT_CHECKS_FAILED
    return EXIT_OK
