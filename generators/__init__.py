"""Generator plugins: one folder per generator, each exposing a `PLUGIN` (ntgcore.generator).

A folder holds the adapter, its options model and its documentation; it imports only the bottom
layer (`ntgcore`). The orchestration finds the plugins through `ntgcore.registry.GENERATORS`,
filled from the `ntg_testbed.generators` entry points in pyproject.toml.
"""
