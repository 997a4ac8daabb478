"""`generator: trex` offline (a scenario without a `testbed:` section): no server, no simulator;
our own expansion of the profile (expand.py) writes `capture.pcap` into the run folder, the packets
TRex would send for it with the checksums it sends on a wire, stamped from 0 like the native
engine's offline captures. The profile itself is still built and dumped by the worker
(trex-profile.py / .json / .yaml), so the run folder holds what `trex-console` would load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ntgcore.errors import GeneratorError
from ntgcore.generator import Counters, Progress

from .expand import PCAP_HEADER, ExpandError, expand, pcap_records


class OfflineExpansion:
    def __init__(self, profile, run_dir: Path) -> None:
        self.profile = profile
        self.path = Path(run_dir) / "capture.pcap"
        self.packets = 0
        self.bytes = 0

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> str:
        """Write the capture; "completed", or a GeneratorError naming the stream."""
        total = self.profile.expected_seconds
        try:
            with open(self.path, "wb") as out:
                out.write(PCAP_HEADER)
                # the latency probes are left out (their bytes carry TRex's send times)
                for c in expand(replace(self.profile, streams=self.profile.traffic), headroom=16):
                    out.write(pcap_records(c).data)
                    self.packets += len(c.lengths)
                    self.bytes += int(c.lengths.sum())
                    if on_progress is not None:
                        on_progress(Progress(float(c.times_ns[-1]) / 1e9, total, self.packets))
        except ExpandError as exc:
            raise GeneratorError(f"trex: offline expansion: {exc}") from None
        return "completed"

    def counters(self) -> Counters:
        return Counters(self.packets, self.packets, 0, self.bytes, self.bytes, 0)


__all__ = ["OfflineExpansion"]
