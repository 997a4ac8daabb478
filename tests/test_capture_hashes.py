"""Every example scenario writes the same bytes as before the architecture change (issue 10).

The hashes were recorded with the code before the restructuring: `testbed run SCENARIO
--no-analyze` for the offline examples (their capture.pcap), and the compiled session (the
engine's input) for every example. A change of these bytes is a change of behaviour: if it is
intended, record the new hashes in the same commit and say why in the CHANGELOG."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from generators.flowengine.session import compile_session
from ntgcore.scenario import load_scenario
from testbed.runner import run_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

CAPTURES = {
    "attacks-mixed": "0e7178b0695f15712fe76f4c8c8b5bc8ff8e3a11a683f3e4f742967926c083f9",
    "flor-insertion-x10": "d77c1987a3c8a4240d8af2a0129cdfbdb285a106dfee56a583c13205e8f431b8",
    "flor-insertion": "cd002d8249d0f3a5db4dbaa201031a3f782dbcf2c2c25a0baca04d31d8f23a1a",
    "flor-interference": "022467436204df72022f024ae1baf4bb9ccd78c348085e3107f37d178f1b7ab5",
    "learned-web": "474838689ceb61284e0a72aea85cafe281d64fc96879d463af2889607a162ea7",  # new: issue 28, two-way sessions
    "quickstart": "55269f1c91bfa6bb19479588536ac50511d9ebbeae1a1fb81d76242cad3faaef",
}
SESSIONS = {
    "seed001-comparison": "6ca99ce136c7902dc33782345aac56de38a50d1e5974c5418d0fe6a7b644a69a",
    "seed001-comparison-trex": "542a8578b50cf95202b810d73552e283efc92d08b3adc547f62409e681bdbf86",
    "seed001-ostinato": "a8f7a4c1a4c94d23d9d36e44e6954fb2aae27ea0c8248a46cec5cf3473bea69d",
    "seed002-loss-sweep": "de344a7831ccd2a9b2a0e68465b9ac4546cea6ccb73067ff3ba76e74a0a90b4f",
    "seed002-failover": "6f861ac6ef253c5c5b6adb2fdb0e7b734b6295eeaaff226395eb216938978c35",  # added later
    "two-hosts": "4c560eba96da1fb598f7a1e59deabdb04e16038ce0f697070c9141a1a61b4750",  # added later
    "attacks-mixed": "4054816674f145f4e4480d93e7fbfec12e9c9d5834fa6215d0a5e0207297019c",
    "flor-insertion-x10": "804d486018d520d6fec6b32b6671afef131543fa21083d17fb4fcaacaa643565",
    "flor-insertion": "b3e824709ee864341cb0e2a541c3923a777de4c8cf3955ca1bda55a3d3ad108f",
    "flor-interference": "88e92555cbaef34600957eb507a213a1154f57725822e8a9cc6485e9289fabe4",
    "quickstart": "bc6b34365457910f8e12900a0f1b418087a8f54b22f189a97073afb0ac010a22",
    "vm-dut-poweroff": "edf7d5445e6254e66f568a03ccd0a067ab3360bbfe06e4d4b92a869fd0006b96",
    "seed003-inline": "34203c3f449c816f2079ba34fd5acca2ef0cf12ebbce44bec3f9ccfb60b83458",
    "vm-quickstart": "70823c49d6f5150c74322a6288af5cf743ae20a87b413b7fc24783e9d79be4a8",
    "seed002-failover-vm": "a28a81e95008d77fa7c37b564d05059b88a6fc9ce4fccfd964ae8d2ff0650dd8",  # new: the pair in VMs
    "seed002-flowmeter": "3ba55457b225224fccd1aad7ba53cb0f795bb312729853de31ba0447d573cf49",  # new: issue 26
    "seed002-failover-meters": "961ceb0bf8eec875d30aec197d303f74540a884e8590f15ab4fbc52e50dd7661",  # new
    "learned-web": "989e0f7d5507e51c1ee9d66c2ba3af5ea8d2829a3694238b0cb9bbde268d05de",  # new: issue 28
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def test_every_example_scenario_is_covered():
    assert {p.stem for p in SCENARIOS.glob("*.yaml")} == set(SESSIONS)


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_the_compiled_session_is_unchanged(name):
    loaded = load_scenario(SCENARIOS / f"{name}.yaml")
    text = compile_session(loaded.scenario, loaded.scenario.seed)
    assert hashlib.sha256(text.encode()).hexdigest() == SESSIONS[name]


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_the_offline_capture_is_byte_identical(name, tmp_path, flowengine_bin):
    loaded = load_scenario(SCENARIOS / f"{name}.yaml")
    result = run_scenario(loaded, tmp_path, analyze=False, show_progress=False)
    assert result.status == "completed", result.manifest.get("error")
    capture = result.run_dir / "capture.pcap"
    assert sha256(capture) == CAPTURES[name]
    assert (
        result.manifest["files"]["capture.pcap"]["sha256"] == CAPTURES[name]
    )  # hashed once, right
    capture.unlink()  # flor-insertion-x10 is 760 MB
