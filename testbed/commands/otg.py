"""`testbed otg serve`: the OTG API (HTTPS JSON) in front of the generators, on a site's ports."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ntgcore.errors import EXIT_BAD_INPUT, EXIT_OK
from ntgcore.proc import Interrupts, watch_spawns
from ntgcore.registry import ENDPOINTS

from ..cleanup import RunMark, cleanup
from ..endpoints.vm import is_vm_topology
from ..otg.grpcserver import grpc_server
from ..otg.server import MainLoop, OtgHttpServer
from ..otg.service import OtgService
from . import add_parser
from .output import err

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"HOST:PORT, e.g. 127.0.0.1:8443 (got {text!r})")
    return host.strip("[]") or "127.0.0.1", int(port)


def register(subparsers) -> None:
    o = add_parser(subparsers, "otg")
    o.set_defaults(func=run)  # `serve` is its one subcommand (required)
    sub = o.add_subparsers(dest="otg_command", required=True, metavar="serve")
    s = sub.add_parser("serve", help="serve the OTG API until stopped (Ctrl-C, SIGTERM)")
    s.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8443),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8443; port 0: any free one, printed)",
    )
    s.add_argument(
        "--any-address",
        action="store_true",
        help="allow a --listen address other than loopback (the API sends traffic: think first)",
    )
    s.add_argument(
        "--topology",
        default="otg-b2b",
        metavar="NAME|FILE",
        help="the site whose interfaces are the ports (default otg-b2b: locations p1 and p2); "
        "a VM topology (`vms:`, e.g. otg-vm) makes its VM roles' interfaces ports",
    )
    s.add_argument(
        "--results",
        type=Path,
        default=Path("results"),
        metavar="DIR",
        help="where every config's run folder goes (default results/)",
    )
    s.add_argument("--http", action="store_true", help="plain HTTP instead of HTTPS")
    s.add_argument(
        "--grpc",
        type=_listen,
        metavar="HOST:PORT",
        help="also serve the API over gRPC there (plain, as ixia-c does; e.g. 127.0.0.1:40051)",
    )
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    host, port = args.listen
    for h in [host] + ([args.grpc[0]] if args.grpc else []):
        if h not in LOOPBACK and not args.any_address:
            err(
                f"testbed otg serve: {h} is not a loopback address; the API starts traffic on "
                "this machine's ports, so it listens on loopback unless --any-address says so"
            )
            return EXIT_BAD_INPUT
    # the topology says the back end: one with `vms:` (docs/vm.md) is the vm back end's
    backend = "vm" if is_vm_topology(args.topology, Path.cwd()) else "netns"
    try:
        site = ENDPOINTS.get(backend).open(args.topology, base_dir=Path.cwd(), unique=True)
    except Exception as exc:
        err(f"testbed otg serve: --topology {args.topology}: {exc}")
        return EXIT_BAD_INPUT
    if backend == "vm" and not site.guest_sees(args.results):
        err(
            f"testbed otg serve: --results {args.results}: the engines and captures of the VM "
            "ports write their files there from inside the guest, which sees only /tmp, the "
            "working folder and NTG_VM_SHARE's folders: choose a folder below one of them "
            "(or add it to NTG_VM_SHARE)"
        )
        return EXIT_BAD_INPUT
    if os.geteuid() != 0:
        err(
            "testbed otg serve: the ports are network namespaces, which need root: run it with sudo"
        )
        return EXIT_BAD_INPUT
    try:  # the run folders go there: a place that cannot take them is said now, not later
        args.results.mkdir(parents=True, exist_ok=True)
        probe = args.results / f".otg-serve-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        err(f"testbed otg serve: --results {args.results}: cannot write there: {exc.strerror}")
        return EXIT_BAD_INPUT
    for line in cleanup():
        err(line)
    mark = RunMark(args.results / f"otg-serve-{os.getpid()}", backend, site.locations()).write()
    service = OtgService(site, mark, args.results, args.topology)
    status = "completed"
    try:
        with watch_spawns(mark.child), Interrupts() as interrupts:
            try:
                site.apply()
                loop = MainLoop()
                server = OtgHttpServer((host, port), service, loop, tls=not args.http)
            except BaseException:
                site.remove()
                raise
            rpc = None
            try:
                server.serve_in_thread()
                names = ", ".join(service.locations())
                where = server.url()
                if args.grpc:
                    rpc, gport = grpc_server(service, loop, args.grpc[0], args.grpc[1])
                    where += f" and grpc://{args.grpc[0]}:{gport}"
                print(f"OTG API at {where} (ports: {names}); Ctrl-C stops", flush=True)
                # until a signal, the server's normal end (its run folders complete, status 0)
                loop.run_until(lambda: interrupts.received is not None)
            finally:
                if rpc is not None:
                    rpc.stop(grace=1).wait()
                server.shutdown()
                server.server_close()
                service.close(status)
                site.remove()
    finally:
        mark.remove()
    print(f"stopped; run folders in {args.results}", file=sys.stderr)
    return EXIT_OK
