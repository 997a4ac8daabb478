#!/usr/bin/python
"""Ansible module: ring sizes, offloads and IRQ affinity of one network interface, idempotently.

Reads the current values (`ethtool -g`, `ethtool -k`, /proc/interrupts and
/proc/irq/N/smp_affinity_list) and changes only what differs, so a second run reports no change."""

from __future__ import annotations

import re

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: ntg_nic
short_description: Set ring sizes, offloads and IRQ affinity of a network interface
description:
  - Sets RX/TX ring sizes with C(ethtool -G), offload features with C(ethtool -K) and the CPU list
    of the interface's interrupts, each only when it differs from the current value.
  - Supports check mode.
options:
  iface:
    description: Interface name.
    type: str
    required: true
  netns:
    description: Network namespace the interface lives in (commands run through C(ip netns exec)).
    type: str
  rx_ring:
    description: RX ring size (C(ethtool -G IFACE rx N)); 0 leaves it.
    type: int
    default: 0
  tx_ring:
    description: TX ring size (C(ethtool -G IFACE tx N)); 0 leaves it.
    type: int
    default: 0
  offloads:
    description: Features by their C(ethtool -K) short names (tso, gso, gro, lro, rx, tx, sg, rxvlan, txvlan) and true/false.
    type: dict
    default: {}
  irq_cpus:
    description: CPU list (C(2-3), C(0,2)) for every IRQ whose /proc/interrupts line names the interface; empty leaves them.
    type: str
    default: ""
author: ntg-testbed
"""

EXAMPLES = r"""
- name: Tune the capture NIC
  ntg_nic:
    iface: enp3s0f0
    rx_ring: 4096
    offloads: {gro: false, lro: false}
    irq_cpus: "2-3"
"""

RETURN = r"""
steps:
  description: What was changed (or, in check mode, would be).
  returned: always
  type: list
  elements: str
"""

LONG = {
    "rx": "rx-checksumming",
    "tx": "tx-checksumming",
    "sg": "scatter-gather",
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "lro": "large-receive-offload",
    "rxvlan": "rx-vlan-offload",
    "txvlan": "tx-vlan-offload",
}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "iface": {"type": "str", "required": True},
            "netns": {"type": "str"},
            "rx_ring": {"type": "int", "default": 0},
            "tx_ring": {"type": "int", "default": 0},
            "offloads": {"type": "dict", "default": {}},
            "irq_cpus": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    iface = p["iface"]
    prefix = ["ip", "netns", "exec", p["netns"]] if p["netns"] else []
    steps: list[str] = []

    def run(*argv: str) -> str:
        rc, out, err = module.run_command(prefix + list(argv))
        if rc != 0:
            module.fail_json(
                msg=f"`{' '.join(prefix + list(argv))}` failed: {err.strip()}", steps=steps
            )
        return out

    def change(step: str, *argv: str) -> None:
        steps.append(step)
        if not module.check_mode:
            run(*argv)

    rings = {k: v for k, v in (("rx", p["rx_ring"]), ("tx", p["tx_ring"])) if v}
    if rings:
        current = run("ethtool", "-g", iface).split("Current hardware settings:")[-1]
        now = {
            k: int(m.group(1))
            for k in rings
            if (m := re.search(rf"^{k.upper()}:\s+(\d+)", current, re.M))
        }
        diff = [x for k, v in rings.items() if now.get(k) != v for x in (k, str(v))]
        if diff:
            change(f"{iface}: ethtool -G {' '.join(diff)}", "ethtool", "-G", iface, *diff)

    if p["offloads"]:
        unknown = [k for k in p["offloads"] if k not in LONG]
        if unknown:
            module.fail_json(msg=f"unknown offload {unknown[0]}; known: {', '.join(LONG)}")
        state = dict(re.findall(r"^([a-z0-9-]+): (on|off)", run("ethtool", "-k", iface), re.M))
        want = {k: "on" if module.boolean(v) else "off" for k, v in p["offloads"].items()}
        diff = [x for k, v in want.items() if state.get(LONG[k]) != v for x in (k, v)]
        if diff:
            change(f"{iface}: ethtool -K {' '.join(diff)}", "ethtool", "-K", iface, *diff)

    if p["irq_cpus"]:
        if p["netns"]:
            module.fail_json(
                msg="irq_cpus is for physical interfaces; a namespace's veths have no IRQs"
            )
        with open("/proc/interrupts", encoding="ascii") as f:
            irqs = [
                line.split(":")[0].strip()
                for line in f
                if re.search(rf"\b{re.escape(iface)}(\b|-)", line)
            ]
        for irq in irqs:
            path = f"/proc/irq/{irq}/smp_affinity_list"
            with open(path, encoding="ascii") as f:
                now = f.read().strip()
            if now != p["irq_cpus"]:
                steps.append(f"irq {irq} ({iface}): cpus {now} -> {p['irq_cpus']}")
                if not module.check_mode:
                    try:
                        with open(path, "w", encoding="ascii") as f:
                            f.write(p["irq_cpus"])
                    except OSError as exc:
                        module.fail_json(
                            msg=f"cannot write {path}: {exc} (is irqbalance moving it?)",
                            steps=steps,
                        )

    module.exit_json(changed=bool(steps), steps=steps)


if __name__ == "__main__":
    main()
