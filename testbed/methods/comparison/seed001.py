"""Seed 001's published numbers, in one place, each with where the paper gives it.

Seed 001 compares Cisco TRex, Ostinato and GENESIDS for the Cyber-Trust testbed (its sections 4
and 5, figures 2-9). Its testbed (section 4): one VirtualBox VM per generator, 2 vCPUs at a 100 %
execution cap, 4 GB of RAM, each generator sending TCP for one minute, `top` sampled every second
for the generator's process, tcpdump for the packets (sizes from Wireshark's statistics).

Units as the paper uses them: packets per second; "variance" is the coefficient of variation
(standard deviation / mean × 100, section 5.4); KB/s are KiB/s (1,024 bytes: 98,810 pps × 104 B =
10,035 × 1,024 B/s, section 5.5), so are the 500 KB/s load steps; CPU % as top shows it (100 =
one core; above 100 when the second vCPU is used, section 5.1); RAM % of the VM's 4 GB.

These are the seed's results, drawn and tabled beside ours; they are never the expected values
of our runs (our machine, kernel and generator versions differ).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KIB = 1024
VM = {
    "vcpus": 2,
    "memory_bytes": 4 * 1024**3,
    "run_s": 60,
    "sample_s": 1,
    "label": "seed 001 (2-vCPU VM)",
    "where": "section 4 (VM: 2 CPUs, 4 GB RAM, one minute, top at 1 s)",
}
LOAD_STEP_BYTES_PER_S = 500 * KIB  # the seed's load steps: 500, 1,000, ... KB/s (figures 2-7)


@dataclass(frozen=True)
class SeedResult:
    """One generator of the seed. `None`: the paper does not give the number."""

    name: str  # as the paper writes it
    plugin: str | None  # our generator plugin that is the same tool, if any
    mean_pps: float
    std_pps: float
    variance_pct: float  # std / mean × 100, as printed
    average_packet_size: float  # bytes, Wireshark's average (section 5.5)
    throughput_Bps: float  # bytes per second (printed in KiB/s, or derived: see `where`)
    steady_variance_pct: float | None = None
    warmup_s: float | None = None  # the start cut by hand before `steady_variance_pct`
    cpu_pct: float | None = None  # the one CPU figure the paper prints (see cpu_note)
    cpu_note: str = ""
    mem_pct: float | None = None  # the highest RAM % of the 4 GB the paper prints
    mem_note: str = ""
    counterpart_note: str = ""  # when no generator of ours is the same tool
    figures: tuple[int, int] | None = None  # its CPU and RAM figures
    where: dict[str, str] = field(default_factory=dict)

    @property
    def mem_bytes(self) -> float | None:
        """The RAM % as bytes of the VM's 4 GB (derived, not printed)."""
        return None if self.mem_pct is None else self.mem_pct / 100 * VM["memory_bytes"]


TREX = SeedResult(
    name="TRex",
    plugin="trex",
    mean_pps=98_810,
    std_pps=37_526,
    variance_pct=37.98,
    steady_variance_pct=9.95,
    warmup_s=9,
    average_packet_size=104,
    throughput_Bps=10_035 * KIB,
    cpu_pct=87.2,
    cpu_note="lowest, at the 500 KB/s step; +1-2 % per further 500 KB/s; "
    "over 100 % when it spills onto the second vCPU",
    mem_pct=3.1,
    mem_note="3.0 %, one step to 3.1 % at 58 s; about +0.18 % per 500 KB/s",
    figures=(2, 3),
    where={
        "mean_pps": "5.1",
        "std_pps": "5.1",
        "variance_pct": "5.4",
        "steady_variance_pct": "5.4 (after the first 9 s)",
        "warmup_s": "5.1 and 5.4",
        "average_packet_size": "5.5",
        "throughput_Bps": "5.5 (10,035 KB/s), figure 9",
        "cpu_pct": "5.1, figure 2",
        "mem_pct": "5.1, figure 3",
    },
)

OSTINATO = SeedResult(
    name="Ostinato",
    plugin="ostinato",
    mean_pps=127_271,
    std_pps=23_887,
    variance_pct=18.77,
    average_packet_size=60,
    throughput_Bps=7_457 * KIB,
    cpu_note="no level printed: +2-4 % per 500 KB/s (figure 4); section 5.3 says it, like TRex, "
    "used 100 % of the first core",
    mem_pct=0.6,
    mem_note="highest, at the 7,500 KB/s step; steps up at 3,500, 5,000, 6,500 KB/s",
    figures=(4, 5),
    where={
        "mean_pps": "5.2",
        "std_pps": "5.2",
        "variance_pct": "5.4",
        "average_packet_size": "5.5",
        "throughput_Bps": "5.5 (7,457 KB/s), figure 9",
        "cpu_note": "5.2, 5.3, figure 4",
        "mem_pct": "5.2, figure 5",
    },
)

GENESIDS = SeedResult(
    name="GENESIDS",
    plugin=None,
    mean_pps=11_021,
    std_pps=844,
    variance_pct=7.65,
    average_packet_size=140,
    throughput_Bps=11_021 * 140,
    cpu_pct=29.1,
    cpu_note="peak; swings of up to 4.1 %",
    mem_pct=29.0,
    mem_note="highest; it grows the longer a step runs",
    counterpart_note="no counterpart here: it crafts packets from Snort rules; the nearest "
    "in this testbed is the rule-derived attack generation (`testbed "
    "ids-coverage`, a scenario's `attacks:`), not part of this comparison",
    figures=(6, 7),
    where={
        "mean_pps": "5.3",
        "std_pps": "5.3",
        "variance_pct": "5.4",
        "average_packet_size": "5.5",
        "throughput_Bps": "derived: 140 B × 11,021 pps (section 5.5's formula; the text prints "
        "no number, figure 9 draws it)",
        "cpu_pct": "5.3, figure 6",
        "mem_pct": "5.3, figure 7",
    },
)

RESULTS = (TREX, OSTINATO, GENESIDS)


def for_plugin(plugin: str | None) -> SeedResult | None:
    """The seed's result for our generator plugin PLUGIN, if the seed measured the same tool."""
    return next((r for r in RESULTS if plugin is not None and r.plugin == plugin), None)
