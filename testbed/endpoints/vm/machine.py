"""One qemu VM of the VM back end: booted from the cached guest image (image.py) inside a network
namespace the run made, its NICs on taps in that namespace, reached over ssh on a management tap.

- Boot: `-kernel`/`-initrd` made with the image (`boot="pvh"`: the kernel's ELF image at its
  PVH entry and our initramfs, bootfiles.py; `boot="debian"`: Debian's bzImage and initrd with the
  command line they had, the slower path kept for comparison), `console=ttyS0`, the root file system on virtio-blk through a
  qcow2 overlay per boot (the cached image is its read-only backing file).
- Accelerator: TCG (`-accel tcg`) unless `NTG_VM_ACCEL=kvm`: /dev/kvm on these machines is a nested
  paravirtual KVM that stock kernels do not boot on (docs/vm.md).
- Ready: the guest's init prints `ntg-init: ready` once sshd runs; then the ssh master connection
  (which later commands share) logs in, and ready is the first command over it that succeeds,
  timed from the start of qemu (`boot_s`). A guest that is not ready in time is an
  error that shows the last console lines.
- Commands: `ssh_argv(*command)` (run inside the namespace, to the guest's management address).
- Power off: the qemu monitor's `quit`, SIGKILL if qemu is still there a second later.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ntgcore.errors import NtgError
from ntgcore.files import replacing
from ntgcore.proc import Leftover, Process, Tool
from ntgcore.sourcetree import source_tree

from ..netns.topology import netns_argv
from .image import Image

QEMU = Tool("qemu-system-x86_64", "qemu-system-x86")
TOOLS = (
    QEMU,
    Tool("qemu-img", "qemu-utils"),
    Tool("ssh", "openssh-client"),
    Tool("scp", "openssh-client"),
)
# The management link inside the VM's namespace: the host end (a tap) and the guest's address.
MGMT_TAP = "vm-mgmt"
MGMT_HOST = "198.19.255.1/30"
MGMT_GUEST = "198.19.255.2"
READY_LINE = "ntg-init: ready"
# The guest's clock set to the host's at each boot (`Machine.sync_clock`): the host answers the
# guest's probes on this UDP port of its management address with its CLOCK_REALTIME; the guest
# takes the probe of shortest round trip, sets its clock by it, then measures what is left.
CLOCK_PORT = 4319
HOST_CLOCK = r"""
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = s.recvfrom(64)
    s.sendto(data[:8] + struct.pack("=Q", time.clock_gettime_ns(time.CLOCK_REALTIME)), peer)
"""
GUEST_CLOCK = r"""
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.5)
host = (sys.argv[1], int(sys.argv[2]))
def probe(n):
    best = None
    for _ in range(4 * n):
        t1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        s.sendto(struct.pack("=Q", t1), host)
        try:
            echoed, host_ns = struct.unpack("=QQ", s.recv(64))
        except socket.timeout:
            continue
        t2 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        if echoed == t1 and (best is None or t2 - t1 < best[0]):
            best = (t2 - t1, host_ns - (t1 + t2) // 2)
        n -= echoed == t1
        if n == 0:
            break
    if best is None:
        sys.exit(f"no answer from the host's clock at {host}")
    return best
rtt, off = probe(12)
time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME) + off)
rtt2, left = probe(12)
print(off, rtt, left, rtt2)
"""
BOOTS = ("pvh", "debian")
# The guest kernel's command line (the NICs are added per VM).
KERNEL_ARGS = (
    "console=ttyS0",
    "root=/dev/vda",
    "rw",
    "init=/usr/local/sbin/ntg-init",
    "quiet",
    "loglevel=3",
    "ipv6.disable=1",
)
# Added on the fast path (docs/vm.md): no self-tests of the crypto algorithms at boot (about 1 s
# under TCG), no mitigations of speculative-execution flaws, which an emulated CPU does not have
# (TCG does not speculate; it saves about 1 s of CPU, most of it in the guest's user space).
FAST_ARGS = ("cryptomgr.notests", "mitigations=off")
WORK_ROOT = Path(os.environ.get("NTG_VM_RUNDIR", "/var/tmp/ntg-testbed/vm"))
MARK_FILE = "made-by-ntg-testbed"


class VmError(NtgError):
    """A VM that cannot be started, does not boot in time or does not answer."""


@dataclass(frozen=True)
class Preset:
    cpus: int
    memory_mb: int


# seed 001 ran its generators in a VM of 2 vCPUs and 4 GB; `ci` is the small one CI boots.
PRESETS = {"seed001": Preset(2, 4096), "ci": Preset(1, 768)}


@dataclass(frozen=True)
class Nic:
    """A guest NIC: virtio-net on tap `tap` of the VM's namespace, named `name` in the guest."""

    tap: str
    name: str
    mac: str
    mtu: int = 1500
    addresses: tuple[str, ...] = ()

    def cmdline(self) -> str:
        return "ntg.nic=" + ",".join([self.mac, self.name, str(self.mtu), *self.addresses])


def mac_for(name: str, index: int) -> str:
    """A locally administered MAC, stable for a VM name and NIC index."""
    h = hashlib.sha256(f"{name}/{index}".encode()).digest()
    return f"52:54:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}:{index & 0xFF:02x}"


def accelerator() -> str:
    accel = os.environ.get("NTG_VM_ACCEL", "tcg")
    if accel not in ("tcg", "kvm"):
        raise VmError(f"NTG_VM_ACCEL={accel!r}: use tcg or kvm")
    return accel


@dataclass
class Machine:
    """A VM `name` whose qemu runs in network namespace `netns`."""

    name: str
    netns: str
    image: Image
    preset: Preset
    nics: list[Nic]
    boot_timeout_s: float = 90.0
    shares: list[Path] = field(default_factory=list)  # host folders mounted at the same path
    base: Path | None = None  # the overlay's backing file: the image's disk, or a saved layer of it
    accel: str = field(default_factory=accelerator)
    proc: Process | None = field(default=None, init=False)
    master: Process | None = field(default=None, init=False)  # the ssh connection commands share
    boot_s: float | None = field(default=None, init=False)
    console_ready_s: float | None = field(
        default=None, init=False
    )  # when the init printed READY_LINE
    boot: str = "pvh"  # or "debian" (see the module's docstring)
    cpu_model: str = field(default="", init=False)
    boots: int = field(default=0, init=False)
    provision_s: float | None = field(default=None, init=False)
    booting: float | None = field(default=None, init=False)  # when a boot not waited for yet began
    clock: dict[str, int] = field(default_factory=dict, init=False)  # the last sync_clock's
    clock_set: float | None = field(default=None, init=False)  # its time.monotonic()

    @property
    def workdir(self) -> Path:
        return WORK_ROOT / self.name

    @property
    def console(self) -> Path:
        return self.workdir / "console.log"

    def boot_files(self) -> tuple[Path, Path]:
        """The kernel and initrd qemu loads for this VM's `boot`."""
        if self.boot not in BOOTS:
            raise VmError(f"VM {self.name}: boot {self.boot!r}: use {' or '.join(BOOTS)}")
        if self.boot == "debian":
            return self.image.debian_kernel, self.image.debian_initrd
        return self.image.kernel, self.image.initrd

    def qemu_argv(self) -> list[str]:
        fast = FAST_ARGS if self.boot == "pvh" else ()
        append = " ".join([*KERNEL_ARGS, *fast, *(n.cmdline() for n in self.nics)])
        accel = "tcg,thread=multi" if self.accel == "tcg" else "kvm"
        kernel, initrd = self.boot_files()
        argv = [
            QEMU.command,
            "-name",
            self.name,
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-machine",
            "pc",
            "-accel",
            accel,
            "-cpu",
            "max",
            "-smp",
            str(self.preset.cpus),
            "-m",
            str(self.preset.memory_mb),
            "-kernel",
            str(kernel),
            "-initrd",
            str(initrd),
            "-append",
            append,
            "-drive",
            f"file={self.workdir / 'overlay.qcow2'},if=virtio,format=qcow2",
            "-serial",
            f"file:{self.console}",
            "-monitor",
            f"unix:{self.workdir / 'monitor.sock'},server=on,wait=off",
        ]
        for i, path in enumerate(self.shares):
            argv += [
                "-virtfs",
                f"local,path={path},mount_tag=share{i},security_model=passthrough,id=share{i}",
            ]
        for i, nic in enumerate(self.nics):
            argv += [
                "-netdev",
                f"tap,id=n{i},ifname={nic.tap},script=no,downscript=no",
                "-device",
                f"virtio-net-pci,netdev=n{i},mac={nic.mac}",
            ]
        return argv

    def start(self, wait: bool = True) -> None:
        """Start qemu on a fresh overlay and wait until the guest answers over ssh (`wait=False`:
        return at once; `wait_ready()` waits, and the endpoint calls it before it uses the
        guest, so a VM switched on only to be switched off again costs no boot)."""
        missing = [t for t in TOOLS if not t.found()]
        if missing:
            raise VmError(
                f"a VM needs {', '.join(t.command for t in missing)}: apt-get install "
                f"{' '.join(dict.fromkeys(t.package for t in missing))}"
            )
        for path in (*self.boot_files(), self.image.disk):
            if not path.is_file():
                raise VmError(
                    f"the guest image in {self.image.dir} has no {path.name}: delete that "
                    "folder and run again to rebuild it"
                )
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / MARK_FILE).write_text(f"VM {self.name} (testbed/endpoints/vm)\n")
        overlay = self.workdir / "overlay.qcow2"
        overlay.unlink(missing_ok=True)
        (self.workdir / "ssh.sock").unlink(missing_ok=True)  # a master of an earlier boot killed
        made = subprocess.run(
            [
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                "-F",
                "qcow2",
                "-b",
                str(self.base or self.image.disk),
                str(overlay),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if made.returncode != 0:
            raise VmError(f"qemu-img could not make the overlay {overlay}: {made.stderr.strip()}")
        self.console.write_text("")
        log = open(self.workdir / "qemu.log", "w")
        started = time.monotonic()
        self.proc = Process(
            f"qemu {self.name}",
            netns_argv(self.netns, *self.qemu_argv()),
            stdout=log,
            stderr=subprocess.STDOUT,
            leftovers=[Leftover(str(self.workdir))],
        )
        try:
            self.proc.start()
        finally:
            log.close()
        self.boots += 1
        self.boot_s = self.console_ready_s = None
        self.booting = started
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait for the guest of the boot `start` began (at once when it is ready already)."""
        if self.booting is not None:
            started, self.booting = self.booting, None
            self._wait_ready(started)

    def _wait_ready(self, started: float) -> None:
        deadline = started + self.boot_timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                qemu_log = (self.workdir / "qemu.log").read_text(errors="replace").strip()
                raise VmError(
                    f"qemu for VM {self.name} ended ({self.proc.record.status}) before the "
                    f"guest was ready: {qemu_log[-800:]}\n{self.console_tail()}"
                )
            if READY_LINE in self.console.read_text(errors="replace"):
                if self.console_ready_s is None:
                    self.console_ready_s = round(time.monotonic() - started, 2)
                if self.master is None or self.master.poll() is not None:
                    self._start_master()  # again if the last one gave up
                if (self.workdir / "ssh.sock").exists():  # the master has logged in
                    probe = self.run("cat", "/proc/cpuinfo", timeout=10, check=False)
                    if probe.returncode == 0:
                        self.boot_s = round(time.monotonic() - started, 2)
                        models = [
                            line.split(":", 1)[1].strip()
                            for line in probe.stdout.splitlines()
                            if line.startswith("model name")
                        ]
                        self.cpu_model = models[0] if models else ""
                        self._mount_shares()
                        self.sync_clock()
                        return
            if time.monotonic() > deadline:
                raise VmError(
                    f"VM {self.name} was not ready within {self.boot_timeout_s:g} s "
                    f"(accelerator {self.accel}); the last console lines:\n{self.console_tail()}"
                )
            time.sleep(0.1)

    def console_tail(self, lines: int = 15) -> str:
        try:
            text = self.console.read_text(errors="replace")
        except OSError:
            return "(no console output)"
        tail = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
        return "\n".join(f"  | {line}" for line in tail) or "  (no console output)"

    # -- commands in the guest ---------------------------------------------------------------------

    def sync_clock(self) -> None:
        """Set the guest's CLOCK_REALTIME to this machine's, so that what the guest stamps (a
        capture's frames, an engine's `--start-at`) compares with the host's times: an exchange
        of UDP probes over the management tap (the one of shortest round trip, as NTP does).
        Its numbers: `clock` (ns): `offset` applied, `rtt`, and `residual`/`residual_rtt` of a
        second round after it."""
        host = MGMT_HOST.split("/")[0]
        answer = Process(
            f"vm {self.name}: host clock",
            netns_argv(self.netns, sys.executable, "-c", HOST_CLOCK, host, str(CLOCK_PORT)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ).start()
        try:
            out = self.run("python3", "-c", GUEST_CLOCK, host, str(CLOCK_PORT), timeout=60)
        finally:
            answer.stop(grace=1)
        offset, rtt, residual, residual_rtt = map(int, out.stdout.split())
        self.clock_set = time.monotonic()
        self.clock = {
            "offset": offset,
            "rtt": rtt,
            "residual": residual,
            "residual_rtt": residual_rtt,
        }

    def clock_age_s(self) -> float:
        """Seconds since the guest's clock was last set (infinite: never)."""
        return float("inf") if self.clock_set is None else time.monotonic() - self.clock_set

    def _mount_shares(self) -> None:
        """The host folders `shares` mounted in the guest at the same paths (9p over virtio): a
        run folder below them is the same folder inside and outside the VM."""
        if not self.shares:
            return
        script = ["modprobe -a 9pnet_virtio 9p"]
        for i, path in enumerate(self.shares):
            q = shlex.quote(str(path))
            script.append(
                f"mkdir -p {q} && mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 share{i} {q}"
            )
        self.run("sh", "-c", " && ".join(script), timeout=60)

    def _start_master(self) -> None:
        """One ssh connection that later commands multiplex over (a key exchange costs seconds in
        a TCG guest; the readiness probe is the first command over it); commands connect on their
        own if it is gone. Its control socket appears once it has logged in."""
        argv = netns_argv(self.netns, "ssh", *self.ssh_options(), "-M", "-N", f"root@{MGMT_GUEST}")
        self.master = Process(
            f"ssh master {self.name}", argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).start()

    def ssh_options(self) -> list[str]:
        return [
            "-i",
            str(self.image.key),
            "-o",
            f"ControlPath={self.workdir / 'ssh.sock'}",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=5",
        ]

    def ssh_argv(self, *command: str) -> list[str]:
        """`command` run in the guest as root (argument list; quoted for the guest's shell)."""
        return self.ssh_argv_raw(shlex.join(command))

    def ssh_argv_raw(self, script: str) -> list[str]:
        """The shell text `script` run in the guest as root (its last argument)."""
        return netns_argv(
            self.netns, "ssh", *self.ssh_options(), f"root@{MGMT_GUEST}", "--", script
        )

    def run(
        self, *command: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run `command` in the guest and wait for it (through the project's process helper)."""
        proc = Process(
            f"vm {self.name}: {command[0]}",
            self.ssh_argv(*command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ).start()
        done = proc.communicate(timeout)
        if done is None:
            raise VmError(
                f"`{shlex.join(command)}` in VM {self.name} did not finish within {timeout:g} s"
            )
        out, err = done
        code = proc.wait()
        assert code is not None  # communicate() returned: the command has ended
        result = subprocess.CompletedProcess(
            command, code, out.decode(errors="replace"), err.decode(errors="replace")
        )
        if check and code != 0:
            raise VmError(
                f"`{shlex.join(command)}` failed in VM {self.name} ({proc.record.status}): "
                f"{result.stderr.strip()[-500:]}"
            )
        return result

    def shared(self, path: Path) -> bool:
        """Whether host path `path` is the same file in the guest (below a shared folder)."""
        resolved = path.resolve()
        return any(resolved == s or s in resolved.parents for s in self.shares)

    def put(self, path: Path, timeout: float = 120) -> None:
        """Copy the host file `path` into the guest at the same path."""
        self.run("mkdir", "-p", str(path.parent), timeout=timeout)
        argv = netns_argv(
            self.netns,
            "scp",
            "-O",
            "-q",
            *self.ssh_options(),
            str(path),
            f"root@{MGMT_GUEST}:{path}",
        )
        proc = Process(
            f"vm {self.name}: scp", argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        ).start()
        done = proc.communicate(timeout)
        if done is None:
            raise VmError(f"copying {path} into VM {self.name} took over {timeout:g} s")
        err = done[1]
        if proc.wait() != 0:
            raise VmError(
                f"copying {path} into VM {self.name} failed: {err.decode(errors='replace').strip()}"
            )

    def provision(self, timeout: float = 900) -> dict[str, int]:
        """Run playbooks/vm_guest.yml against this guest (the engine built inside it); returns
        Ansible's recap counts (ok, changed, failed, ...)."""
        playbook = source_tree() / "playbooks" / "vm_guest.yml"
        binary = Path(sys.executable).parent / "ansible-playbook"
        program = str(binary) if binary.exists() else shutil.which("ansible-playbook")
        if not program or not playbook.is_file():
            raise VmError(
                "building the engine in the guest needs ansible-playbook (pip install "
                f"'.[test]') and {playbook}"
            )
        ssh_args = " ".join(shlex.quote(o) for o in self.ssh_options()[2:])
        env = {
            "TMPDIR": str(self.workdir),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_SSH_ARGS": ssh_args,
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            "ANSIBLE_LOCAL_TEMP": str(self.workdir / "ansible-local"),
        }
        argv = netns_argv(
            self.netns,
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            program,
            "-i",
            f"{MGMT_GUEST},",
            "-u",
            "root",
            "--private-key",
            str(self.image.key),
            "-e",
            f"vm_guest_jobs={self.preset.cpus}",
            str(playbook),
        )
        with open(self.workdir / "provision.log", "w") as log:
            proc = Process(
                f"ansible vm_guest {self.name}", argv, stdout=log, stderr=subprocess.STDOUT
            ).start()
            try:
                code = proc.wait(timeout)
            except BaseException:
                proc.stop(grace=2)
                raise
        out = (self.workdir / "provision.log").read_text(errors="replace")
        if code is None:
            proc.stop(grace=2)
            raise VmError(
                f"building the engine in VM {self.name} took over {timeout:g} s; see the "
                f"end of its log:\n{out[-1500:]}"
            )
        if code != 0:
            raise VmError(
                f"building the engine in VM {self.name} failed ({proc.record.status}):\n{out[-2000:]}"
            )
        m = re.search(rf"{re.escape(MGMT_GUEST)}\s+:\s+(.*)", out)
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))} if m else {}

    def _monitor(self, *commands: str, timeout: float = 30.0) -> None:
        """Send HMP commands to qemu's monitor, each answered before the next, the first after
        the monitor's prompt (a `quit` written on connecting, the socket then closed, was not
        carried out here: qemu ran on until the SIGKILL). Returns when the monitor closes."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.workdir / "monitor.sock"))
            seen = b""
            for command in ("", *commands):
                if command:
                    s.sendall(command.encode() + b"\n")
                    seen = b""
                while b"(qemu)" not in seen:
                    chunk = s.recv(4096)
                    if not chunk:
                        return
                    seen += chunk

    def save_layer(self, dest: Path) -> None:
        """Keep what the guest's disk holds now as `dest`, a qcow2 layer over the image (the guest
        paused while it is copied, its writes synced first); later boots start from it."""
        self.run("sync", timeout=120)
        self._monitor("stop")
        try:
            with replacing(dest) as tmp:
                shutil.copyfile(self.workdir / "overlay.qcow2", tmp)
                tmp.chmod(0o444)
        finally:
            self._monitor("cont")

    # -- power -------------------------------------------------------------------------------------

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def power_off(self) -> None:
        """Pull the plug: the monitor's `quit` (no guest shutdown), SIGKILL if qemu lingers."""
        if self.master is not None:
            self.master.stop(grace=1)
            self.master = None
        if not self.running():
            return
        assert self.proc is not None
        try:
            self._monitor("quit", timeout=1.0)  # qemu ends within tens of ms
        except OSError:
            pass
        if self.proc.wait(1.0) is None:
            self.proc.stop(signal.SIGKILL, grace=2)

    def stop(self) -> None:
        """Power off and delete the overlay and the work folder."""
        self.power_off()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def facts(self) -> dict:
        return {
            "accelerator": self.accel,
            "cpu": "max" + (" (TCG)" if self.accel == "tcg" else ""),
            "guest_cpu_model": self.cpu_model,
            "vcpus": self.preset.cpus,
            "memory_mb": self.preset.memory_mb,
            "boot_s": self.boot_s,
            "clock_sync_ns": dict(self.clock),
            "provision_s": self.provision_s,
            "image": self.image.sha,
            "layer": self.base.name if self.base else None,
            "kernel": self.image.info().get("kernel"),
            "nics": [n.name for n in self.nics],
        }


def discard_workdirs(paths: list[str], dry_run: bool = False) -> list[str]:
    """Delete VM work folders a dead run left (only ours: under WORK_ROOT and marked)."""
    steps = []
    for p in map(Path, paths):
        if p.parent != WORK_ROOT or not (p / MARK_FILE).is_file():
            continue
        steps.append(f"{'would delete' if dry_run else 'deleted'} VM folder {p}")
        if not dry_run:
            shutil.rmtree(p, ignore_errors=True)
    return steps


def default_shares() -> list[Path]:
    """The host folders a guest sees at the same path: /tmp, the working folder (where `results/`
    usually is) and the folders in NTG_VM_SHARE (colon-separated); nested ones once."""
    wanted = [
        Path("/tmp"),
        Path.cwd(),
        *(Path(p) for p in os.environ.get("NTG_VM_SHARE", "").split(":") if p),
    ]
    out: list[Path] = []
    found = {w.resolve() for w in wanted if w.is_dir() and w.resolve() != Path("/")}
    for p in sorted(found, key=lambda x: len(x.parts)):
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out
