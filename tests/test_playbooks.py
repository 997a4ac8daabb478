"""playbooks/: syntax and lint of both playbooks, the topology role run for real (twice each way), and
the trex role installing, starting and stopping the real TRex build ($NTG_TREX_DIR) in a test namespace."""

import hashlib
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
# every test here runs Ansible: the ansible lane (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("ansible")


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if not found:
            pytest.skip(f"{name} is not installed (pip install '.[test]')")
        return found
    return str(path)


def ansible(
    *args: str, cwd: Path = REPO, timeout: float = 120, **env_extra: str
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PY_COLORS": "0",
        **env_extra,
    }
    return subprocess.run(
        list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


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
    p = ansible(
        tool("ansible-playbook"),
        "--syntax-check",
        "-i",
        "playbooks/inventory.example.ini",
        "playbooks/site.yml",
    )
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


@pytest.mark.usefixtures("root")
@pytest.mark.skipif(
    shutil.which("ip") is None,
    reason="the topology role creates network namespaces: needs root and iproute2",
)
def test_topology_role_is_idempotent_both_ways():
    name = f"ntgpb-{secrets.token_hex(3)}"
    spaces = {f"{name}-{r}" for r in ("gen", "dut", "tap")}

    def play(state: str, *extra: str) -> dict[str, int]:
        p = ansible(
            tool("ansible-playbook"),
            "playbooks/local.yml",
            "--tags",
            "topology",
            "-e",
            PYTHON_VAR,
            "-e",
            f"topology_name={name}",
            "-e",
            f"topology_state={state}",
            *extra,
        )
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


@pytest.mark.usefixtures("root")
@pytest.mark.skipif(
    shutil.which("ethtool") is None,
    reason="needs root (a namespace with a veth) and ethtool",
)
def test_nic_tuning_module_sets_offloads_once_and_names_what_it_cannot_do():
    import json

    topo = load_topology("pair").renamed(f"ntgpb-{secrets.token_hex(3)}")

    def nic(**args) -> subprocess.CompletedProcess:
        return ansible(
            tool("ansible"),
            "localhost",
            "-c",
            "local",
            "-M",
            "playbooks/library",
            "-m",
            "ntg_nic",
            "-e",
            PYTHON_VAR,
            "-a",
            json.dumps({"iface": "veth0", "netns": topo.netns("gen"), **args}),
        )

    with topo.up():
        first = nic(offloads={"gso": False, "tso": "no"})
        assert "localhost | CHANGED" in first.stdout, first.stdout + first.stderr
        assert "veth0: ethtool -K" in first.stdout
        out = subprocess.run(
            topo.exec_argv("gen", "ethtool", "-k", "veth0"), capture_output=True, text=True
        ).stdout
        assert "generic-segmentation-offload: off" in out and "tcp-segmentation-offload: off" in out
        assert "localhost | SUCCESS" in nic(offloads={"gso": False, "tso": "no"}).stdout
        ring = nic(rx_ring=256)  # veths have no rings: the failure says which command and why
        assert ring.returncode != 0 and "ethtool -g veth0` failed" in ring.stdout


@pytest.mark.usefixtures("root")
def test_the_whole_local_playbook_is_idempotent(tmp_path):
    """Packages, the project (into a scratch virtual environment) and a topology: the second run
    of the whole play reports no change."""
    name = f"ntgpw-{secrets.token_hex(3)}"
    spaces = {f"{name}-{r}" for r in ("gen", "dut", "tap")}
    venv = tmp_path / "venv"

    def play(*extra: str) -> dict[str, int]:
        p = ansible(
            tool("ansible-playbook"),
            "playbooks/local.yml",
            "-e",
            PYTHON_VAR,
            "-e",
            f"topology_name={name}",
            "-e",
            f"project_venv={venv}",
            *extra,
            timeout=900,
        )
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


# --- the trex role (site.yml, generators) against the real TRex build of $NTG_TREX_DIR ------------

# Run inside the server's namespace with the project's Python: TRex's own client connects (API
# version check included) and reports the server's version and mode.
TREX_PROBE = """
import json, sys
import lbr_trex_client  # first: TRex's own Scapy
mode = sys.argv[1]
if mode == "astf":
    from trex.astf.api import ASTFClient as Client
else:
    from trex.stl.api import STLClient as Client
c = Client(server="127.0.0.1", verbose_level="error")
c.connect()
try:
    print(json.dumps(c.get_server_version()))
finally:
    c.disconnect()
"""


def fake_release_tarball(build: Path, dest: Path) -> Path:
    """The shared build's server/ folder packed as a TRex release tarball is: one top-level
    folder (v3.08/) with _t-rex-64-o, so/x86_64/ and astf_schema.json in it. It stands in for a
    user's own v3.08.tar.gz (none can be downloaded here)."""
    import tarfile

    with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
        tar.add(build / "server", arcname="v3.08")
    return dest


def local_generator(tmp_path: Path) -> Path:
    """An inventory with this machine as the one generator (no become: we are root already;
    pipelining: a module run costs one process instead of a copy, a chmod and a clean-up)."""
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[generators]\nlocalhost ansible_connection=local ansible_become=false "
        f"ansible_pipelining=true ansible_python_interpreter={sys.executable}\n"
    )
    return inventory


def proc_alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.usefixtures("root")
@pytest.mark.skipif(
    shutil.which("ip") is None,
    reason="the role starts TRex in a namespace made by the test: needs root and iproute2",
)
def test_trex_role_installs_from_a_tarball_configures_starts_and_stops_in_a_namespace(
    tmp_path, trex_dir
):
    """site.yml --tags trex against localhost: install from a tarball, config, start (STL) in a
    namespace made here, again (no change), ASTF from trex_dir (restarted), stopped (nothing left)."""
    import json

    import yaml

    from generators.trex.server import DPDK_RUN, TrexServer, server_binary
    from testbed.endpoints.netns import NetnsEndpoint
    from testbed.endpoints.netns.topology import VethPair

    build = trex_dir
    tarball = fake_release_tarball(build, tmp_path / "v3.08.tar.gz")
    prefix = f"ntgpb{secrets.token_hex(3)}"
    macs = {"src_mac": "02:00:00:00:00:01", "dest_mac": "02:00:00:00:00:02"}
    state, cfg, root = tmp_path / "state", tmp_path / "trex_cfg.yaml", tmp_path / "opt"
    inventory = local_generator(tmp_path)
    dpdk_existed = DPDK_RUN.exists()
    pair = VethPair(prefix="ntgpb")
    pid = None

    def play(**overrides) -> tuple[dict[str, int], str]:
        extra = {
            "trex_tarball": str(tarball),
            "trex_install_root": str(root),
            "trex_cfg_path": str(cfg),
            "trex_state_dir": str(state),
            "trex_netns": pair.gen,
            "trex_interfaces": ["veth0"],
            "trex_port_info": [macs],
            "trex_prefix": prefix,
            **overrides,
        }
        p = ansible(
            tool("ansible-playbook"),
            "-i",
            str(inventory),
            "playbooks/site.yml",
            "--tags",
            "trex",
            "-e",
            json.dumps(extra),
            timeout=120,
            ANSIBLE_GATHERING="explicit",
        )
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        return recap(p.stdout), p.stdout

    def probe(mode: str) -> dict:
        p = subprocess.run(
            ["ip", "netns", "exec", pair.gen, sys.executable, "-c", TREX_PROBE, mode],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    def server_pid() -> int:
        pid = int((state / "trex.pid").read_text())
        assert proc_alive(pid)
        assert (
            str(pid)
            in subprocess.run(
                ["ip", "netns", "pids", pair.gen], capture_output=True, text=True
            ).stdout.split()
        )
        return pid

    try:
        pair.setup()
        # 1. install from the tarball, write the config, start (stateless)
        rc, out = play()
        assert rc["failed"] == 0 and rc["changed"] >= 4, out[-3000:]
        home = root / "v3.08"
        assert (home / "_t-rex-64-o").is_file() and (home / "so" / "x86_64").is_dir()
        assert (home / ".ntg-tarball.sha1").read_text().strip() == hashlib.sha1(
            tarball.read_bytes()
        ).hexdigest()
        # config and flags are the adapter's own (generators/trex/server.py: a TrexServer made,
        # not started, for the same interface and MACs), the config parsed, key for key
        (tmp_path / "adapter").mkdir()
        adapter = TrexServer(
            server_binary(str(build)),
            NetnsEndpoint(pair.gen, "veth0"),
            tmp_path / "adapter",
            macs["src_mac"],
            macs["dest_mac"],
        )
        ref = yaml.safe_load(adapter.config.read_text())
        ref[0]["prefix"] = prefix  # the adapter's is random per run
        assert yaml.safe_load(cfg.read_text()) == ref
        flags = adapter.proc.record.argv
        flags = [
            str(cfg) if a == str(adapter.config) else a
            for a in flags[flags.index(str(adapter.binary)) + 1 :]
        ]
        pid = server_pid()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert argv == ["./_t-rex-64-o", *flags]
        assert flags == [
            "-i",
            "--software",
            "--no-scapy-server",
            "--no-termio",
            "--iom",
            "0",
            "--cfg",
            str(cfg),
        ]
        assert os.readlink(f"/proc/{pid}/cwd") == str(home.resolve())
        version = probe("stl")
        assert version["version"] == "v3.08" and version.get("mode", "STL") == "STL", version
        # 2. the same again: nothing changes, the same server keeps running
        rc, out = play()
        assert rc["changed"] == 0, out[-3000:]
        assert server_pid() == pid
        # 3. ASTF, from the build itself (trex_dir: its server/ folder): the control script
        # changes, so the server is restarted in that mode, from there
        rc, out = play(trex_mode="astf", trex_tarball="", trex_dir=str(build))
        assert rc["changed"] == 2, out[-3000:]  # the script, the restart
        new = server_pid()
        assert new != pid and not proc_alive(pid)
        pid = new
        assert "--astf" in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        assert os.readlink(f"/proc/{pid}/cwd") == str((build / "server").resolve())
        version = probe("astf")
        assert version["version"] == "v3.08" and version.get("mode", "ASTF") == "ASTF", version
        # 4. stopped: no server, no pid file, no DPDK files left; stopping again changes nothing
        rc, out = play(trex_mode="astf", trex_state="stopped")
        assert rc["changed"] == 1, out[-3000:]
        assert not proc_alive(pid) and not (state / "trex.pid").exists()
        assert not (DPDK_RUN / prefix).exists()
        if not dpdk_existed:  # removed again, unless another DPDK program (a run) uses it now
            assert not DPDK_RUN.exists() or any(DPDK_RUN.iterdir())
        assert play(trex_state="stopped")[0]["changed"] == 0
        pid = None
    finally:
        if (state / "trex-ctl").exists():
            subprocess.run([str(state / "trex-ctl"), "stop"], capture_output=True, timeout=30)
        if pid and proc_alive(pid):
            os.kill(pid, 9)
        pair.teardown()
    assert not {pair.gen, pair.peer} & netns_list()


def test_trex_role_refuses_missing_or_both_sources(tmp_path):
    """Both trex_tarball and trex_dir, or a tarball that does not exist: the role fails, naming
    them, before it writes anything."""
    import json

    inventory = local_generator(tmp_path)
    extra = {
        "trex_tarball": str(tmp_path / "a.tar.gz"),
        "trex_dir": str(tmp_path),
        "trex_interfaces": ["veth0"],
        "trex_state_dir": str(tmp_path / "state"),
        "trex_cfg_path": str(tmp_path / "cfg.yaml"),
    }
    p = ansible(
        tool("ansible-playbook"),
        "-i",
        str(inventory),
        "playbooks/site.yml",
        "--tags",
        "trex",
        "-e",
        json.dumps(extra),
        ANSIBLE_GATHERING="explicit",
    )
    assert p.returncode != 0 and "set trex_tarball" in p.stdout and "not both" in p.stdout, p.stdout
    extra.pop("trex_dir")  # now a tarball that does not exist
    p = ansible(
        tool("ansible-playbook"),
        "-i",
        str(inventory),
        "playbooks/site.yml",
        "--tags",
        "trex",
        "-e",
        json.dumps(extra),
        ANSIBLE_GATHERING="explicit",
    )
    assert p.returncode != 0 and f"no file {tmp_path / 'a.tar.gz'} on the controller" in p.stdout, (
        p.stdout
    )
    assert not (tmp_path / "cfg.yaml").exists() and not (tmp_path / "state").exists()


def test_trex_role_check_mode_on_a_fresh_host_changes_nothing(tmp_path):
    """--check with a tarball never unpacked: says what it would do, writes nothing, starts nothing."""
    import json
    import tarfile

    (tmp_path / "v9.99").mkdir()
    (tmp_path / "v9.99" / "_t-rex-64-o").write_text("#!/bin/sh\nexit 1\n")
    with tarfile.open(tmp_path / "v9.99.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "v9.99", arcname="v9.99")
    out = tmp_path / "host"
    extra = {
        "trex_tarball": str(tmp_path / "v9.99.tar.gz"),
        "trex_install_root": str(out / "opt"),
        "trex_interfaces": ["veth0"],
        "trex_state_dir": str(out / "state"),
        "trex_cfg_path": str(out / "cfg.yaml"),
    }
    p = ansible(
        tool("ansible-playbook"),
        "--check",
        "-i",
        str(local_generator(tmp_path)),
        "playbooks/site.yml",
        "--tags",
        "trex",
        "-e",
        json.dumps(extra),
        ANSIBLE_GATHERING="explicit",
    )
    assert p.returncode == 0, p.stdout[-3000:]
    assert recap(p.stdout)["changed"] >= 4  # the folders, the checksum, the config, the script
    assert not out.exists()


@pytest.mark.usefixtures("root")
@pytest.mark.skipif(
    shutil.which("ip") is None,
    reason="the role starts TRex in a namespace made by the test: needs root and iproute2",
)
def test_trex_role_fails_with_the_servers_words_when_it_cannot_start(tmp_path, pair, trex_dir):
    """An interface the namespace does not have: TRex exits at start-up, the task fails with the
    end of its log, and no process, pid file or DPDK files are left."""
    import json

    from generators.trex.server import DPDK_RUN

    build = trex_dir
    state, prefix = tmp_path / "state", f"ntgpb{secrets.token_hex(3)}"
    extra = {
        "trex_dir": str(build),
        "trex_interfaces": ["nosuch0"],
        "trex_netns": pair.gen,
        "trex_prefix": prefix,
        "trex_state_dir": str(state),
        "trex_cfg_path": str(tmp_path / "trex_cfg.yaml"),
    }
    p = ansible(
        tool("ansible-playbook"),
        "-i",
        str(local_generator(tmp_path)),
        "playbooks/site.yml",
        "--tags",
        "trex",
        "-e",
        json.dumps(extra),
        ANSIBLE_GATHERING="explicit",
    )
    assert p.returncode != 0 and "the TRex server exited at start-up" in p.stdout, p.stdout[-3000:]
    assert "Could not find all interfaces" in p.stdout, p.stdout[-3000:]
    assert not (state / "trex.pid").exists() and not (DPDK_RUN / prefix).exists()
    assert (
        subprocess.run(
            ["ip", "netns", "pids", pair.gen], capture_output=True, text=True
        ).stdout.strip()
        == ""
    )
