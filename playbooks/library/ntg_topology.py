#!/usr/bin/python
"""Ansible module: bring a ntg-testbed topology (network namespaces, veth pairs) up or down.

It calls testbed.topology's apply/remove, the same code the runner uses; `changed` is true when
they returned steps, so a second run with the same description reports no change."""

from __future__ import annotations

import sys

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: ntg_topology
short_description: Create or remove a ntg-testbed topology of network namespaces and veth pairs
description:
  - Reads a topology description (docs/topology.md of ntg-testbed) and makes the namespaces,
    veth pairs, MTU, offloads, addresses and mirrors as described, changing only what differs.
  - With I(state=absent) it deletes the topology's namespaces and with them every veth end.
  - Supports check mode (reports the steps it would take).
options:
  src:
    description: A packaged topology name (C(default)) or the path of a topology YAML file (relative paths are taken from I(project_dir)).
    type: str
    required: true
  name:
    description: Namespace prefix instead of the description's C(name).
    type: str
  state:
    description: Whether the topology should exist.
    type: str
    choices: [present, absent]
    default: present
  project_dir:
    description: A ntg-testbed source tree to import C(testbed) from (else the installed one).
    type: path
author: ntg-testbed
"""

EXAMPLES = r"""
- name: The default three-namespace testbed exists
  ntg_topology:
    src: default
    state: present
"""

RETURN = r"""
steps:
  description: What was changed (or, in check mode, would be).
  returned: always
  type: list
  elements: str
namespaces:
  description: The full names of the topology's namespaces.
  returned: always
  type: list
  elements: str
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "str", "required": True},
            "name": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "project_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["project_dir"]:
        sys.path.insert(0, p["project_dir"])
    try:
        from testbed.endpoints.netns.topology import (
            TopologyCommandError,
            TopologyError,
            load_topology,
        )
    except ImportError as exc:
        module.fail_json(
            msg=f"cannot import testbed.endpoints.netns.topology ({exc}) with {sys.executable}; install "
            "the project (the `project` role) or set project_dir to its source tree"
        )
    try:
        topo = load_topology(p["src"], base_dir=p["project_dir"])
        if p["name"]:
            topo = topo.renamed(p["name"])
        if p["state"] == "present":
            steps = topo.apply(dry_run=module.check_mode)
        else:
            steps = topo.remove(dry_run=module.check_mode)
    except TopologyError as exc:
        module.fail_json(msg="invalid topology:\n" + "\n".join(exc.problems), problems=exc.problems)
    except TopologyCommandError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=bool(steps), steps=steps, namespaces=[topo.netns(r) for r in topo.namespaces]
    )


if __name__ == "__main__":
    main()
