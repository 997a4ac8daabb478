"""Endpoint back ends: where the parts of a live run execute (ntgcore.endpoint's contract).

One folder per back end, registered by an entry point (group `ntg_testbed.endpoints`): `netns`
(network namespaces joined by veths on this machine) and `vm` (qemu guests whose NICs join
those namespaces, docs/vm.md); SSH hosts later.
"""
