"""The inline multiplier of method `multiply` (seed 003, Fig. 6; docs/multiplier.md): a real HTTP
server in the server's namespace, `flowengine multiply --live` in the multiplier's namespace and
a client fetching pages in the client's namespace, all through ntgcore.proc.Process.

`start` writes the pages (seeded random bytes) into `<step>/www/`, starts the server
(`python3 -m http.server`, an EndpointServer: ready when it accepts on its port), the multiplier
(ready when it prints `ready`), then the client (httpclient.py). The part is `busy` until the
client has fetched everything; `problem` reports a client that got a wrong answer or a
multiplier or server that ended. `stop` ends the client, the multiplier (SIGTERM: it writes
`<step>/multiplier.json`, its own counters, kept for reference: the analysis counts from the
captures) and the server, and returns the client's results. Files: `<step>/client.jsonl`,
`multiplier.log`, `http-server.log`.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from ntgcore.daemon import EndpointServer
from ntgcore.endpoint import Site
from ntgcore.errors import NtgError
from ntgcore.native_tools import executable
from ntgcore.parts import INLINE_ORDER, Part, PartContext, PartPlugin
from ntgcore.proc import CommandRecord, Process, Tool
from ntgcore.scenario import InlineMultiplySpec

CLIENT = Path(__file__).resolve().parent / "httpclient.py"
READY_TIMEOUT_S = 10.0
SUMMARY = "multiplier.json"
CLIENT_LOG = "client.jsonl"


class MultiplierError(NtgError):
    """The inline multiplier could not start (refused its parameters, an interface missing)."""


def page_name(i: int, size: int) -> str:
    return f"page-{i}-{size}.bin"


def engine_argv(
    binary: str,
    spec: InlineMultiplySpec,
    copies: int,
    seed: int,
    ifaces: tuple[str, str, str],
    summary: Path,
) -> list[str]:
    argv = [
        binary,
        "multiply",
        "--live",
        *ifaces,
        "-T",
        str(copies),
        "--ranges",
        ",".join(spec.ranges),
        "--seed",
        str(seed),
        "--order",
        spec.order,
        "--ports",
        spec.ports,
        "--max-flows",
        str(spec.max_flows),
        "--max-addrs",
        str(spec.max_addrs),
        "--summary",
        str(summary),
    ]
    if spec.original:
        argv += ["--original", ",".join(spec.original)]
    if spec.both:
        argv.append("--both")
    return argv


class InlineMultiplier(Part):
    key = "multiplier"
    measures_loss = True
    tools = (Tool("python3", "python3"),)

    def __init__(
        self, spec: InlineMultiplySpec, copies: int, seed: int, site: Site, step_dir: Path
    ) -> None:
        self.spec, self.copies, self.seed, self.site, self.dir = spec, copies, seed, site, step_dir
        self.server: EndpointServer | None = None
        self.mult: Process | None = None
        self.client: Process | None = None
        self._logs: list[IO] = []
        self.failed: str | None = None

    def _pages(self) -> list[tuple[str, int]]:
        www = self.dir / "www"
        www.mkdir(exist_ok=True)
        rng = random.Random(self.seed)
        pages = []
        for i, size in enumerate(self.spec.pages):
            name = page_name(i, size)
            (www / name).write_bytes(rng.randbytes(size))
            pages.append((name, size))
        return pages

    def start(self, abort) -> None:
        spec = self.spec
        pages = self._pages()
        srv = self.site.endpoint(spec.server)
        self.server = EndpointServer(
            "the HTTP server",
            "http-server",
            "python3",
            [
                *srv.argv(),
                sys.executable,
                "-m",
                "http.server",
                str(spec.port),
                "--directory",
                str(self.dir / "www"),
            ],
            srv,
            self.dir / "http-server.log",
            spec.port,
        )
        self.server.start()
        at, out, dut = (self.site.endpoint(p) for p in (spec.at, spec.out, spec.dut))
        if len({e.where for e in (at, out, dut)}) != 1:
            raise MultiplierError(
                f"inline: {spec.at}, {spec.out} and {spec.dut} must be interfaces of one "
                f"namespace (the multiplier's)"
            )
        binary = str(executable("flowengine"))
        log = open(self.dir / "multiplier.log", "wb")
        self._logs.append(log)
        self.mult = Process(
            "multiplier",
            [
                *at.argv(),
                *engine_argv(
                    binary,
                    spec,
                    self.copies,
                    self.seed,
                    (at.iface, out.iface, dut.iface),
                    self.dir / SUMMARY,
                ),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        ).start()
        t0 = time.monotonic()
        while b"ready" not in (self.dir / "multiplier.log").read_bytes():
            if self.mult.poll() is not None:
                text = (self.dir / "multiplier.log").read_text(errors="replace").strip()
                raise MultiplierError(
                    f"the inline multiplier ended at start-up ({self.mult.record.status}): "
                    f"{text.removeprefix('flowengine multiply: ')}"
                )
            if abort() or time.monotonic() - t0 > READY_TIMEOUT_S:
                raise MultiplierError(
                    f"the inline multiplier was not ready within {READY_TIMEOUT_S:g}s; "
                    f"see {self.dir / 'multiplier.log'}"
                )
            time.sleep(0.02)
        cl = self.site.endpoint(spec.client)
        clog = open(self.dir / CLIENT_LOG, "wb")
        self._logs.append(clog)
        argv = [
            *cl.argv(),
            sys.executable,
            str(CLIENT),
            "--url",
            f"http://{spec.server_address}:{spec.port}/",
            "--rounds",
            str(spec.rounds),
            "--parallel",
            str(spec.parallel),
        ]
        for name, size in pages:
            argv += ["--page", f"{name}:{size}"]
        for pad in spec.request_pad:
            argv += ["--pad", str(pad)]
        self.client = Process("http-client", argv, stdout=clog, stderr=subprocess.DEVNULL).start()

    def busy(self) -> bool:
        return self.client is not None and self.client.poll() is None

    def problem(self) -> str | None:
        if self.mult is not None and self.mult.poll() is not None:
            return f"the inline multiplier ended during the step: {self.mult.record.status}"
        if self.server is not None and not self.server.alive():
            return f"the HTTP server ended during the step: {self.server.proc.record.status}"
        if self.client is not None and self.client.poll() not in (None, 0):
            bad = [r for r in self.results() if r["status"] != 200 or r["bytes"] != r["expected"]]
            first = f"; first: {bad[0]}" if bad else ""
            return f"the HTTP client's sessions did not all complete ({len(bad)} failed fetches{first})"
        return None

    def results(self) -> list[dict]:
        try:
            text = (self.dir / CLIENT_LOG).read_text()
        except OSError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def stop(self) -> dict:
        client_code = self.client.stop(signal.SIGTERM, grace=5) if self.client is not None else None
        time.sleep(0.3)  # the last frames through the multiplier before it stops
        if self.mult is not None:
            self.mult.stop(signal.SIGTERM, grace=5)
        if self.server is not None:
            self.server.stop()
        for f in self._logs:
            f.close()
        rows = self.results()
        out: dict = {
            "copies": self.copies,
            "client_exit": client_code,
            "fetches": len(rows),
            "fetches_ok": sum(r["status"] == 200 and r["bytes"] == r["expected"] for r in rows),
            "bytes": sum(r["bytes"] for r in rows),
        }
        try:
            out["engine"] = json.loads((self.dir / SUMMARY).read_text())
        except (OSError, ValueError):
            out["engine"] = None
        return out

    def records(self) -> list[CommandRecord]:
        procs = [self.server.proc if self.server else None, self.mult, self.client]
        return [p.record for p in procs if p is not None]

    def pids(self) -> dict[str, int]:
        return {
            f"multiplier:{r.name}": r.pid for r in self.records() if r.pid and r.exit_code is None
        }


def _multiplier(ctx: PartContext) -> list[Part]:
    spec = ctx.testbed.inline
    assert spec is not None
    return [InlineMultiplier(spec, ctx.step.params["copies"], ctx.seed, ctx.site, ctx.step_dir)]


PLUGIN = PartPlugin(
    "multiplier",
    INLINE_ORDER,
    _multiplier,
    tools=lambda scenario: InlineMultiplier.tools,
    places=lambda tb: [
        (f"inline.{k}", getattr(tb.inline, k)) for k in ("at", "out", "dut", "client", "server")
    ],
    summary="method multiply's server, inline multiplier and client",
)
