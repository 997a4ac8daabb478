"""The VM back end (testbed/endpoints/vm, docs/vm.md) for real: the cached Debian guest image built
by mmdebstrap, a qemu guest (TCG) booted on a copy-on-write overlay inside a test namespace, the
native engine built in it by playbooks/vm_guest.yml (kept as a layer over the image; run again,
the role changes nothing), a
short send from the guest's virtio NIC through its tap to a receiver namespace, power off, and a
teardown that leaves no qemu, tap, namespace or overlay. Without qemu this skips outside CI and
fails under NTG_CI=1."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import skip_or_fail

from analysis.capture import read_capture
from ntgcore.registry import ENDPOINTS
from ntgcore.scenario import load_scenario
from testbed.endpoints.netns.topology import TopologyError
from testbed.endpoints.vm import BACKEND, VmEndpoint, load_vm_topology
from testbed.endpoints.vm import image as vm_image
from testbed.endpoints.vm.bootfiles import (
    INITRAMFS_INIT,
    BootFileError,
    initramfs,
    module_order,
    pvh_entry,
    vmlinux_from_bzimage,
)
from testbed.endpoints.vm.machine import PRESETS, WORK_ROOT, Machine, VmError
from testbed.parts.fault import PowerSwitch
from testbed.runner import analyze_live_run, run_scenario

PAIR = {
    "topology": {
        "name": "ntgvmt",
        "mtu": 1500,
        "namespaces": ["gen", "rx"],
        "links": [
            {
                "a": {"ns": "gen", "iface": "gen0", "address": "198.18.0.1/24"},
                "b": {"ns": "rx", "iface": "rx0", "address": "198.18.0.2/24"},
            }
        ],
    },
    # 2 vCPUs: when the engine layer is not kept yet, the guest builds it with -j2 (about 2x faster
    # under TCG than one vCPU)
    "vms": {"gen": {"preset": "ci", "cpus": 2}},
}


def test_the_back_end_is_registered_under_vm():
    if "vm" not in ENDPOINTS:  # an installation older than the entry point (pyproject.toml)
        ENDPOINTS.register("vm", BACKEND)
    assert ENDPOINTS.get("vm") is BACKEND


def test_a_vm_role_that_is_not_in_the_topology_is_named_with_its_line(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("topology: pair\nvms:\n  gen: {preset: ci}\n  dut: {preset: ci}\n")
    with pytest.raises(TopologyError) as err:
        load_vm_topology(str(f))
    assert err.value.problems == [
        f"{f}:4: vms.dut: not a role of topology ntg-pair (roles: gen, peer)"
    ]


def test_an_unknown_preset_is_refused_with_the_known_ones(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("topology: pair\nvms:\n  gen: {preset: huge}\n")
    with pytest.raises(TopologyError) as err:
        load_vm_topology(str(f))
    assert "t.yaml:3" in err.value.problems[0] and "'seed001' or 'ci'" in err.value.problems[0]


@pytest.mark.parametrize("kind", ["dev-zero", "not-utf8", "directory"])
def test_a_vm_topology_file_is_read_bounded_and_named(tmp_path, kind):
    """/dev/zero was read to the end; a directory and bytes that are not UTF-8 raised tracebacks."""
    path = {"dev-zero": "/dev/zero", "not-utf8": tmp_path / "t.yaml", "directory": tmp_path}[kind]
    if kind == "not-utf8":
        path.write_bytes(b"topology: pair\n# caf\xe9\nvms:\n  gen: {preset: ci}\n")
    with pytest.raises(TopologyError) as err:
        load_vm_topology(str(path))
    (problem,) = err.value.problems
    assert (
        problem.startswith(f"{path}")
        and {
            "dev-zero": "longer than 32.0 MiB",
            "not-utf8": ":2: the VM topology file is not UTF-8",
            "directory": "is a directory",
        }[kind]
        in problem
    )


def test_the_recipe_hash_changes_with_the_package_list():
    other = vm_image.Recipe(packages=(*vm_image.RECIPE.packages, "ethtool"))
    assert other.sha() != vm_image.RECIPE.sha() and vm_image.Recipe().sha() == vm_image.RECIPE.sha()


def cpio_members(archive: bytes) -> dict[str, tuple[int, bytes, tuple[int, int]]]:
    """name -> (mode, data, (rdev major, minor)) of a newc cpio archive, read field by field."""
    out, pos = {}, 0
    while True:
        assert archive[pos : pos + 6] == b"070701", pos
        f = [int(archive[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        name = archive[pos + 110 : pos + 110 + f[11] - 1].decode()
        pos = (pos + 110 + f[11] + 3) // 4 * 4
        if name == "TRAILER!!!":
            return out
        out[name] = (f[1], archive[pos : pos + f[6]], (f[9], f[10]))
        pos = (pos + f[6] + 3) // 4 * 4


def fake_bzimage(payload: bytes, setup_sects: int = 2) -> bytes:
    """A bzImage's setup header (protocol 2.15) with `payload` where its fields say it is."""
    head = bytearray((setup_sects + 1) * 512)
    head[0x1F1] = setup_sects
    head[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", head, 0x206, 0x20F)
    struct.pack_into("<II", head, 0x248, 16, len(payload))
    return bytes(head) + b"\0" * 16 + payload + b"tail"


def fake_elf(note_type: int) -> bytes:
    """An ELF64 header with one PT_NOTE segment holding one Xen note of `note_type`."""
    note = struct.pack("<III", 4, 8, note_type) + b"Xen\0" + struct.pack("<Q", 0x1000850)
    elf = bytearray(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    struct.pack_into("<Q", elf, 0x20, 64)
    struct.pack_into("<HH", elf, 0x36, 56, 1)
    return bytes(elf) + struct.pack("<IIQQQQQQ", 4, 4, 120, 0, 0, len(note), len(note), 4) + note


def test_the_kernel_is_taken_out_of_a_bzimage_whatever_of_xz_or_gzip_it_is_packed_with():
    elf = fake_elf(18)
    for packed in (
        lzma.compress(elf, lzma.FORMAT_XZ) + struct.pack("<I", len(elf)),
        gzip.compress(elf),
    ):
        assert vmlinux_from_bzimage(fake_bzimage(packed)) == elf
    assert pvh_entry(elf) == 0x1000850 and pvh_entry(fake_elf(17)) is None
    with pytest.raises(BootFileError, match="payload starts with 28b52ffd.*not xz, lzma or gzip"):
        vmlinux_from_bzimage(fake_bzimage(b"\x28\xb5\x2f\xfd" + b"x" * 32))  # zstd
    with pytest.raises(BootFileError, match="not a bzImage"):
        vmlinux_from_bzimage(elf)


def test_modules_load_after_the_modules_they_need_each_once():
    dep = (
        "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n"
        "kernel/fs/jbd2/jbd2.ko:\nkernel/fs/mbcache.ko:\nkernel/lib/crc16.ko:\n"
        "kernel/drivers/virtio/virtio_ring.ko: kernel/drivers/virtio/virtio.ko\n"
        "kernel/drivers/virtio/virtio.ko:\nkernel/arch/x86/crypto/crc32c-intel.ko:\n"
        "kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n"
    )
    order = [Path(p).stem for p in module_order(dep, ("virtio_blk", "crc32c_intel", "ext4"))]
    assert order == [
        "virtio",
        "virtio_ring",
        "virtio_blk",
        "crc32c-intel",
        "jbd2",
        "mbcache",
        "crc16",
        "ext4",
    ]
    with pytest.raises(
        BootFileError, match="module virtio_scsi is not in the guest kernel's modules.dep"
    ):
        module_order(dep, ("virtio_scsi",))


def test_the_initramfs_holds_klibc_our_init_the_console_and_the_modules_in_order(tmp_path):
    root, version = tmp_path / "rootfs", "6.1.0-test"
    (root / "usr/lib/klibc/bin").mkdir(parents=True)
    (root / "usr/lib/klibc-ABC.so").write_bytes(b"klibc")
    for tool in ("sh", "insmod", "mount", "umount", "run-init", "sleep", "cat"):
        (root / "usr/lib/klibc/bin" / tool).write_bytes(tool.encode())
    mods = root / "lib/modules" / version
    for m in ("kernel/a/virtio.ko", "kernel/b/virtio_blk.ko"):
        (mods / m).parent.mkdir(parents=True, exist_ok=True)
        (mods / m).write_bytes(m.encode())
    (mods / "modules.dep").write_text(
        "kernel/b/virtio_blk.ko: kernel/a/virtio.ko\nkernel/a/virtio.ko:\n"
    )
    members = cpio_members(initramfs(root, version, ("virtio_blk",)))
    assert members["init"][1] == INITRAMFS_INIT.read_bytes() and members["init"][0] == 0o100755
    assert members["dev/console"][0] == 0o20600 and members["dev/console"][2] == (5, 1)
    assert members["lib/klibc-ABC.so"][1] == b"klibc" and members["bin/run-init"][1] == b"run-init"
    assert sorted(n for n in members if n.startswith("modules/")) == [
        "modules/00-virtio.ko",
        "modules/01-virtio_blk.ko",
    ]
    (root / "usr/lib/klibc/bin/run-init").unlink()
    with pytest.raises(BootFileError, match="no klibc in"):
        initramfs(root, version, ("virtio_blk",))


def test_the_image_boots_the_kernel_it_took_out_of_debians_and_its_own_initramfs(guest_image):
    """The fast boot path is the one a Machine uses: qemu's -kernel is the ELF image with a PVH
    entry that the image's build took out of Debian's bzImage, -initrd our udev-less initramfs
    with the recipe's modules; boot="debian" is the path it replaced."""
    assert guest_image.kernel.read_bytes() == vmlinux_from_bzimage(
        guest_image.debian_kernel.read_bytes()
    )
    assert pvh_entry(guest_image.kernel.read_bytes()) is not None
    members = cpio_members(guest_image.initrd.read_bytes())
    assert members["init"][1] == INITRAMFS_INIT.read_bytes()
    loaded = {Path(n).stem.split("-", 1)[1] for n in members if n.startswith("modules/")}
    assert set(vm_image.RECIPE.initrd_modules) <= loaded and not any("udev" in n for n in members)
    machine = Machine("ntgx-gen", "ntgx-gen", guest_image, PRESETS["ci"], [])
    argv = machine.qemu_argv()
    assert argv[argv.index("-kernel") + 1] == str(guest_image.kernel)
    assert argv[argv.index("-initrd") + 1] == str(guest_image.initrd)
    assert "mitigations=off" in argv[argv.index("-append") + 1].split()
    machine.boot = "debian"
    argv = machine.qemu_argv()
    assert argv[argv.index("-kernel") + 1] == str(guest_image.debian_kernel)
    assert "mitigations=off" not in argv[argv.index("-append") + 1].split()
    machine.boot = "bios"
    with pytest.raises(VmError, match="boot 'bios': use pvh or debian"):
        machine.qemu_argv()


def test_a_part_that_wants_a_bare_prefix_is_refused_in_a_vm_with_what_to_do():
    machine = Machine("ntgx-dut", "ntgx-dut", None, PRESETS["ci"], [])  # type: ignore[arg-type]  # not booted
    with pytest.raises(VmError, match="a command in a VM is given whole .* put it in a namespace"):
        VmEndpoint(machine, "dut0").argv()


def _qemu_of(name: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"qemu-system-x86_64") and name.encode() in cmd:
                pids.append(int(p.name))
    return pids


@pytest.fixture(scope="module")
def guest_image():
    missing = [t.command for t in (*vm_image.TOOLS, *BACKEND.tools) if not t.found()]
    if missing or os.geteuid() != 0:
        skip_or_fail(
            f"a VM needs root and {', '.join(missing) or 'nothing more'} (./bootstrap.sh test installs them)"
        )
    return vm_image.ensure_image()


def test_a_vm_boots_builds_the_engine_sends_powers_off_and_leaves_nothing(guest_image, tmp_path):
    assert guest_image.disk.is_file() and vm_image.cached() == guest_image
    before = guest_image.disk.stat()
    site = BACKEND.open(PAIR)
    vm_ns, rx_ns = site.locations()[:2]
    try:
        steps = site.apply()
        assert any("booted VM (tcg, 2 vCPU, 768 MB)" in s for s in steps), steps
        facts = site.facts()["gen"]
        assert facts["accelerator"] == "tcg" and facts["memory_mb"] == 768 and facts["vcpus"] == 2
        assert facts["guest_cpu_model"] and facts["boot_s"] > 0
        # the guest's clock was set to this machine's at boot (docs/vm.md): within 5 ms after
        assert abs(facts["clock_sync_ns"]["residual"]) < 5_000_000, facts["clock_sync_ns"]

        machine = site.machines["gen"]
        # the engine was built in this guest by the role, or before and kept as the layer it
        # booted from: either way the role now finds nothing to change
        assert any(
            "the native engine built in the guest" in s
            or "the engine as built in the guest before" in s
            for s in steps
        ), steps
        assert (
            guest_image.engine_layer().is_file()
            and facts["layer"] == guest_image.engine_layer().name
            or machine.base is None
        )
        again = machine.provision()
        assert again["changed"] == 0 and again["failed"] == 0 and again["ok"] >= 5, again

        gen = site.endpoint("gen:gen0")
        assert isinstance(gen, VmEndpoint) and isinstance(gen, PowerSwitch) and gen.exists()
        assert machine.run("ip", "-o", "addr", "show", "gen0").stdout.count("198.18.0.1/24") == 1
        # booted on the fast path (the command line only it gives), with sshd's PATH without PAM
        assert "cryptomgr.notests" in machine.run("cat", "/proc/cmdline").stdout.split()
        assert machine.run(
            "sh", "-c", "for p in python3 flowengine; do command -v $p; done"
        ).stdout.split() == ["/usr/bin/python3", "/usr/local/bin/flowengine"]
        version = subprocess.run(
            gen.argv("/usr/local/bin/flowengine", "version"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert version.returncode == 0 and version.stdout.strip(), version.stderr
        # five datagrams from the guest's NIC through its tap and the bridge to the receiver
        rx_before = site.counters("rx:rx0")["rx_packets"]
        sent = subprocess.run(
            gen.argv("bash", "-c", "for i in 1 2 3 4 5; do echo $i >/dev/udp/198.18.0.2/9; done"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        assert site.counters("rx:rx0")["rx_packets"] - rx_before >= 5
        assert gen.counters()["tx_packets"] >= 3

        gen.power_off()
        assert not gen.exists() and not _qemu_of(machine.name)
        assert machine.proc.record.status == "exit status 0", (
            machine.proc.record
        )  # the monitor's quit, no SIGKILL
    finally:
        removed = site.remove()
    assert any("powered off VM" in s for s in removed)
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert vm_ns not in out and rx_ns not in out
    assert not _qemu_of(vm_ns) and not (WORK_ROOT / vm_ns).exists()
    assert guest_image.disk.stat().st_mtime == before.st_mtime  # the cached image is never written


def test_a_guest_that_is_not_ready_in_time_shows_its_console(guest_image):
    site = BACKEND.open(
        {**PAIR, "vms": {"gen": {"preset": "ci", "engine": False, "boot_timeout": 1}}}
    )
    try:
        with pytest.raises(VmError) as err:
            site.apply()
    finally:
        site.remove()
    assert "was not ready within 1 s (accelerator tcg); the last console lines:" in str(err.value)
    assert not _qemu_of(site.locations()[0]) and shutil.which("qemu-system-x86_64")


@pytest.mark.ansible  # its own check fails in CI without ansible-playbook, unlike the fixture's
def test_the_guest_playbook_passes_the_syntax_check():
    binary = Path(sys.executable).parent / "ansible-playbook"
    if not binary.exists():
        skip_or_fail("ansible-playbook is not installed (pip install '.[test]')")
    p = subprocess.run(
        [str(binary), "--syntax-check", "-i", "198.19.255.2,", "playbooks/vm_guest.yml"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def assert_analysed(run_dir: Path) -> None:
    """What tests/test_end_to_end.py checks of every other live example (these two run here only,
    so that each costs one boot in CI): the analysis passes its checks and writes the report."""
    metrics = analyze_live_run(run_dir)
    assert metrics["steps"] and all(c["ok"] for c in metrics["checks"]), metrics["checks"]
    assert (run_dir / "report.html").is_file()


def test_the_vm_quickstart_runs_the_same_step_in_a_vm_and_in_a_namespace(guest_image, tmp_path):
    """scenarios/vm-quickstart.yaml through the runner with 1 s steps: the engine sends from inside
    the VM (and then from a namespace), the capture holds both, the manifest says where it ran."""
    if "vm" not in ENDPOINTS:
        ENDPOINTS.register("vm", BACKEND)
    loaded = load_scenario(
        Path(__file__).resolve().parent.parent / "scenarios" / "vm-quickstart.yaml"
    )
    result = run_scenario(loaded, tmp_path, duration_ns=1_000_000_000, show_progress=False)
    m = json.loads((result.run_dir / "manifest.json").read_text())
    assert result.status == "completed", m.get("error")
    assert m["testbed"]["backend"] == "vm"
    vm = m["testbed"]["machines"]["vm"]
    assert (
        vm["accelerator"] == "tcg"
        and vm["vcpus"] == 2
        and vm["memory_mb"] == 4096
        and vm["boot_s"] > 0
    )
    steps = {s["name"]: s for s in m["steps"]}
    assert len(steps) == 2, list(steps)
    for entry in steps.values():  # each step's engine reported what it sent, all of it captured
        counters = next(iter(entry["generators"].values()))
        assert entry["status"] == "completed" and counters["packets_sent"] > 0, entry
        assert entry["capture"]["captured"] == counters["packets_sent"], entry
    assert_analysed(result.run_dir)
    namespace = [
        line
        for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True
        ).stdout.splitlines()
        if m["testbed"]["topology"] in line
    ]
    assert not namespace and not _qemu_of(m["testbed"]["topology"] + "-vm")


def test_cleanup_deletes_only_marked_vm_folders(tmp_path, monkeypatch):
    """`testbed cleanup` after a dead run: the back end's discard removes the VM work folders it
    marked (overlay, console, sockets) and leaves any other folder alone."""
    root = tmp_path / "vm"
    monkeypatch.setattr("testbed.endpoints.vm.machine.WORK_ROOT", root)
    ours, other = root / "ntgdead-gen", root / "someone-else"
    for d in (ours, other):
        d.mkdir(parents=True)
        (d / "overlay.qcow2").write_bytes(b"x")
    (ours / "made-by-ntg-testbed").write_text("VM ntgdead-gen\n")
    assert BACKEND.discard([str(ours), str(other)], dry_run=True) == [
        f"would delete VM folder {ours}"
    ]
    assert ours.exists()
    assert BACKEND.discard([str(ours), str(other)]) == [f"deleted VM folder {ours}"]
    assert not ours.exists() and other.exists()


def test_a_dut_in_a_vm_counts_until_the_vm_is_powered_off_mid_step(guest_image, tmp_path):
    """scenarios/vm-dut-poweroff.yaml: tcpdump is the DUT inside a VM (its dut.pcap written into
    the shared run folder), the native engine sends to it from another VM (both boot together,
    the generator's from the engine layer), and the fault
    `power-off` pulls the VM's plug 3 s into the 6 s step. One boot covers both (the undo at the
    step's end boots it again). The DUT's count ends at the power-off on the capture's clock: it
    holds no more packets than the capture saw before the power-off was in effect, while the
    wire and the capture go on to the end; the step completes and teardown leaves nothing."""
    if "vm" not in ENDPOINTS:
        ENDPOINTS.register("vm", BACKEND)
    loaded = load_scenario(
        Path(__file__).resolve().parent.parent / "scenarios" / "vm-dut-poweroff.yaml"
    )
    result = run_scenario(loaded, tmp_path, show_progress=False)
    m = json.loads((result.run_dir / "manifest.json").read_text())
    assert result.status == "completed", m.get("error")
    (step,) = m["steps"]
    assert step["status"] == "completed", step
    machine, gen = m["testbed"]["machines"]["dut"], m["testbed"]["machines"]["gen"]
    assert machine["layer"] is None  # tcpdump is in the image: no engine layer
    assert gen["layer"] == guest_image.engine_layer().name and gen["nics"] == ["mgmt", "gen0"], gen
    engine = [
        c
        for c in m["commands"]  # the engine ran in the generator's guest, through the relay
        if "testbed.endpoints.vm.relay" in c["argv"] and "exec flowengine" in c["argv"][-1]
    ]
    assert engine and all(f"{m['testbed']['topology']}-gen" in c["argv"] for c in engine), m[
        "commands"
    ]
    assert machine["nics"] == ["mgmt", "dut0"]  # mir0, where the mirror sends, stayed on the host
    (ev,) = step["faults"]["events"]
    assert ev["kind"] == "power-off" and ev["undone"] is True and step["faults"]["all_undone"], ev
    dut, loss = step["dut"], step["loss"]
    assert dut["kind"] == "tcpdump" and dut["powered_off"] is True and "died" not in dut, dut
    assert loss["sent"] == loss["wire"] == loss["captured"] == 1200, loss
    assert step["wire"]["dut:dut0"]["rx_packets"] == 1200  # the host side of the VM's link
    assert len(read_capture(result.run_dir / "dut.pcap")) == dut["received"] == loss["dut"]
    ts = read_capture(result.run_dir / "capture.pcap").ts_ns
    before_off = int((ts < ev["in_effect_realtime_ns"]).sum())
    assert 0 < dut["received"] <= before_off < len(ts), (dut["received"], before_off, len(ts))
    assert loss["lost_at_dut"] == 1200 - dut["received"] >= len(ts) - before_off
    assert_analysed(result.run_dir)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert m["testbed"]["topology"] not in namespaces and not _qemu_of(
        m["testbed"]["topology"] + "-dut"
    )
    assert not (WORK_ROOT / (m["testbed"]["topology"] + "-dut")).exists()


def test_a_vrrp_pair_in_vms_fails_over_when_the_masters_vm_is_powered_off(guest_image, tmp_path):
    """scenarios/seed002-failover-vm.yaml, one trial of keepalived's default interval (1 s): both
    DUTs are VMs (booted together) running keepalived and the echo from the guest image; the
    master's VM is switched off 2 s in. The backup takes the address over: UDP replies from the
    backup's port after the fault, the outage from the client's capture about 3 advertisement
    intervals plus the backup's skew less the time since the last advertisement, the TCP session
    in flight reset by the backup. Then the master boots again (the fault's undo) and teardown
    leaves no qemu or namespace."""
    if "vm" not in ENDPOINTS:
        ENDPOINTS.register("vm", BACKEND)
    text = (
        Path(__file__).resolve().parent.parent / "scenarios" / "seed002-failover-vm.yaml"
    ).read_text()
    assert "advert_int: [1s, 100ms]" in text
    path = tmp_path / "fo.yaml"
    path.write_text(text.replace("advert_int: [1s, 100ms]", "advert_int: [1s]"))
    result = run_scenario(load_scenario(path), tmp_path / "out", trials=1, show_progress=False)
    m = json.loads((result.run_dir / "manifest.json").read_text())
    assert result.status == "completed", m.get("error")
    machines = m["testbed"]["machines"]
    assert set(machines) == {"master", "backup"} and all(
        v["accelerator"] == "tcg" for v in machines.values()
    )
    (step,) = m["steps"]
    (ev,) = step["faults"]["events"]
    assert ev["kind"] == "power-off" and ev["target"] == "master:m0" and ev["undone"] is True, ev
    vrrp = step["vrrp"]
    took_over = [t for t in vrrp["transitions"] if t["role"] == "backup" and t["state"] == "MASTER"]
    assert took_over and took_over[0]["realtime_ns"] > ev["in_effect_realtime_ns"], vrrp[
        "transitions"
    ]
    rows = {
        r["protocol"]: r
        for r in json.loads((result.run_dir / "metrics.json").read_text())["failover"]
    }
    udp, icmp, tcp = rows["udp"], rows["icmp"], rows["tcp"]
    assert udp["master_answered_before"] and udp["backup_answered"], udp
    # VRRPv3 master-down interval: 3 x 1 s + (256 - 100) / 256 x 1 s = 3.61 s after the master's
    # last advertisement, which left up to 1 s before the power-off
    for row in (udp, icmp):
        assert row["lost"] > 0 and 2.0 < row["fault_to_recovery_s"] < 6.0, row
    assert 2.0 < udp["fault_to_first_backup_reply_s"] < 6.0, udp
    assert tcp["tcp_survived"] is False, tcp
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert m["testbed"]["topology"] not in namespaces
    for role in ("master", "backup"):
        assert not _qemu_of(f"{m['testbed']['topology']}-{role}")
        assert not (WORK_ROOT / f"{m['testbed']['topology']}-{role}").exists()
