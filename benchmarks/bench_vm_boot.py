#!/usr/bin/env python3
"""Boot to ready of a VM of the `vm` back end (issue 14), the fast path against the one it
replaced, in one run on one VM:

- pvh: qemu starts `vmlinux` (the kernel's ELF image taken out of Debian's bzImage) at its PVH
  entry with our own udev-less initramfs (testbed/endpoints/vm/bootfiles.py), and the kernel
  command line of machine.py's KERNEL_ARGS;
- debian: Debian's bzImage through SeaBIOS's loader with Debian's initramfs-tools initrd
  (Machine(boot="debian"), the same command line).

One site of the `vm-pair` shape (a VM role `gen`, `ci` preset with 2 vCPUs, no engine build) is
brought up under a random name (namespaces ntgbv<hex>-gen, -rx; NETWORK-SAFETY.md) and removed at
the end, also on failure. The VM is then powered off and booted again --repeat times per path, the
paths alternating. Per boot: `boot_s` (qemu started -> the first ssh command over the master
connection answered), `console_s` (-> the guest's init printed its ready line) and the CPU time
qemu used until ready (user + system; less sensitive to what else the machine runs than wall
time), with the 1-minute load average at the end of the boot.

Results: benchmarks/out/vm_boot.json and a Markdown table on stdout. Needs root, qemu and the
guest image (built on first use: minutes).

    python benchmarks/bench_vm_boot.py [--repeat R] [--cpus N]
"""

import argparse
import json
import os
import secrets
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from testbed.endpoints.vm import BACKEND
from testbed.endpoints.vm.machine import BOOTS

OUT = REPO / "benchmarks" / "out"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="boots per path (default 3)")
    ap.add_argument(
        "--cpus", type=int, default=2, help="vCPUs of the VM (default 2, as tests/test_vm.py)"
    )
    args = ap.parse_args()
    name = f"ntgbv{secrets.token_hex(3)}"
    ref = {
        "topology": {
            "name": name,
            "mtu": 1500,
            "namespaces": ["gen", "rx"],
            "links": [
                {
                    "a": {"ns": "gen", "iface": "gen0", "address": "198.18.0.1/24"},
                    "b": {"ns": "rx", "iface": "rx0", "address": "198.18.0.2/24"},
                }
            ],
        },
        "vms": {"gen": {"preset": "ci", "cpus": args.cpus, "engine": False}},
    }
    site = BACKEND.open(ref)
    boots: list[dict] = []
    try:
        site.apply()  # the first boot (pvh) brings the site up; not counted
        machine = site.machines["gen"]
        for _ in range(args.repeat):
            for path in reversed(BOOTS):  # debian, then pvh
                machine.power_off()
                machine.boot = path
                machine.start()
                assert machine.proc is not None and machine.proc.pid
                boots.append(
                    {
                        "path": path,
                        "boot_s": machine.boot_s,
                        "console_s": machine.console_ready_s,
                        "qemu_cpu_s": round(cpu_seconds(machine.proc.pid), 2),
                        "load1": float(Path("/proc/loadavg").read_text().split()[0]),
                    }
                )
                print(json.dumps(boots[-1]), file=sys.stderr, flush=True)
    finally:
        site.remove()
    rows = {}
    for path in BOOTS:
        mine = [b for b in boots if b["path"] == path]
        rows[path] = {
            k: statistics.median(b[k] for b in mine) for k in ("boot_s", "console_s", "qemu_cpu_s")
        }
        rows[path]["n"] = len(mine)
    ratio = round(rows["pvh"]["boot_s"] / rows["debian"]["boot_s"], 3)
    loads = [b["load1"] for b in boots]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "vm_boot.json").write_text(
        json.dumps(
            {
                "cpus": args.cpus,
                "boots": boots,
                "median": rows,
                "pvh_vs_debian_boot_s": ratio,
                "load1_range": [min(loads), max(loads)],
            },
            indent=1,
        )
        + "\n"
    )
    print(
        "| path | boots | boot_s median | console ready median | qemu CPU s median |\n|---|---:|---:|---:|---:|"
    )
    for path, r in rows.items():
        print(
            f"| {path} | {r['n']} | {r['boot_s']:.2f} | {r['console_s']:.2f} | {r['qemu_cpu_s']:.2f} |"
        )
    print(f"\npvh / debian boot_s: {ratio}; load average (1 min) {min(loads)}-{max(loads)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
