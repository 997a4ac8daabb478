"""playbooks/: syntax and lint of both playbooks, and the topology role run for real (twice each way)."""

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.endpoints.netns.topology import load_topology

REPO = Path(__file__).resolve().parent.parent
PLAYBOOKS = REPO / "playbooks"
BIN = Path(sys.executable).parent
PYTHON_VAR = "ansible_python_interpreter={{ ansible_playbook_python }}"


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if not found:
            pytest.skip(f"{name} is not installed (pip install '.[test]')")
        return found
    return str(path)


def ansible(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PY_COLORS": "0"}
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def recap(out: str) -> dict[str, int]:
    m = re.search(r"localhost\s+:\s+(.*)", out)
    assert m, out
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_local_playbook_syntax():
    p = ansible(tool("ansible-playbook"), "--syntax-check", "-e", PYTHON_VAR, "playbooks/local.yml")
    assert p.returncode == 0, p.stdout + p.stderr


def test_site_playbook_syntax_with_the_example_inventory():
    p = ansible(tool("ansible-playbook"), "--syntax-check", "-i", "playbooks/inventory.example.ini",
                "playbooks/site.yml")  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr


def test_example_inventory_has_the_three_groups_and_documentation_addresses_only():
    p = ansible(tool("ansible-inventory"), "-i", "playbooks/inventory.example.ini", "--list")
    assert p.returncode == 0, p.stderr
    import json

    inv = json.loads(p.stdout)
    assert {"generators", "dut", "collectors"} <= set(inv)
    hosts = inv["_meta"]["hostvars"]
    assert hosts and all(v["ansible_host"].startswith("192.0.2.") for v in hosts.values())


def test_ansible_lint_passes_on_playbooks():
    p = ansible(tool("ansible-lint"), "--offline", cwd=PLAYBOOKS, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                    reason="the topology role creates network namespaces: needs root and iproute2")  # fmt: skip
def test_topology_role_is_idempotent_both_ways():
    name = f"ntgpb-{secrets.token_hex(3)}"
    spaces = {f"{name}-{r}" for r in ("gen", "dut", "tap")}

    def play(state: str, *extra: str) -> dict[str, int]:
        p = ansible(tool("ansible-playbook"), "playbooks/local.yml", "--tags", "topology", "-e", PYTHON_VAR,
                    "-e", f"topology_name={name}", "-e", f"topology_state={state}", *extra)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
        return recap(p.stdout)

    try:
        assert play("present", "--check")["changed"] == 1
        assert not spaces & netns_list()  # check mode changed nothing
        assert play("present")["changed"] == 1
        assert spaces <= netns_list()
        assert play("present")["changed"] == 0
        assert play("absent")["changed"] == 1
        assert not spaces & netns_list()
        assert play("absent")["changed"] == 0
    finally:
        load_topology("default").renamed(name).remove()
    assert not spaces & netns_list()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ethtool") is None,
                    reason="needs root (a namespace with a veth) and ethtool")  # fmt: skip
def test_nic_tuning_module_sets_offloads_once_and_names_what_it_cannot_do():
    import json

    topo = load_topology("pair").renamed(f"ntgpb-{secrets.token_hex(3)}")

    def nic(**args) -> subprocess.CompletedProcess:
        return ansible(tool("ansible"), "localhost", "-c", "local", "-M", "playbooks/library", "-m", "ntg_nic",
                       "-e", PYTHON_VAR, "-a", json.dumps({"iface": "veth0", "netns": topo.netns("gen"), **args}))  # fmt: skip

    with topo.up():
        first = nic(offloads={"gso": False, "tso": "no"})
        assert "localhost | CHANGED" in first.stdout, first.stdout + first.stderr
        assert "veth0: ethtool -K" in first.stdout
        out = subprocess.run(topo.exec_argv("gen", "ethtool", "-k", "veth0"), capture_output=True, text=True).stdout
        assert "generic-segmentation-offload: off" in out and "tcp-segmentation-offload: off" in out
        assert "localhost | SUCCESS" in nic(offloads={"gso": False, "tso": "no"}).stdout
        ring = nic(rx_ring=256)  # veths have no rings: the failure says which command and why
        assert ring.returncode != 0 and "ethtool -g veth0` failed" in ring.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the whole playbook installs packages and makes namespaces: needs root")
def test_the_whole_local_playbook_is_idempotent(tmp_path):
    """Packages, the project (into a scratch virtual environment) and a topology: the second run
    of the whole play reports no change."""
    name = f"ntgpw-{secrets.token_hex(3)}"
    spaces = {f"{name}-{r}" for r in ("gen", "dut", "tap")}
    venv = tmp_path / "venv"

    def play(*extra: str) -> dict[str, int]:
        p = ansible(tool("ansible-playbook"), "playbooks/local.yml", "-e", PYTHON_VAR,
                    "-e", f"topology_name={name}", "-e", f"project_venv={venv}", *extra,
                    timeout=900)  # fmt: skip
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return recap(p.stdout)

    try:
        first = play()
        assert first["changed"] >= 2  # the project installed, the topology made
        assert (venv / "bin" / "flowengine").is_file() and spaces <= netns_list()
        assert play()["changed"] == 0
        assert play("--tags", "topology", "-e", "topology_state=absent")["changed"] == 1
        assert not spaces & netns_list()
    finally:
        load_topology("default").renamed(name).remove()
