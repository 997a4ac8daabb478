"""The guest image of the VM back end: a Debian bookworm root file system built by mmdebstrap
from Debian's packages, cached by the hash of its recipe and rebuilt only when the recipe changes.

The recipe is this module's `RECIPE` (suite, packages, size) and the guest's init
(`guest-init.sh` beside this file): their SHA-256 names the cache folder
`<cache>/<sha>/` (`NTG_VM_CACHE`, default /var/cache/ntg-testbed/vm). A build happens in a
temporary folder beside it and is renamed into place only when complete, so a failed or
interrupted build leaves no half-written image; a lock lets one process build while others wait.

What a built image holds: `disk.qcow2` (the root file system, ext4, never written: each boot
gets a copy-on-write overlay, see machine.py), the files qemu boots directly: `vmlinux` (the
kernel's ELF image, started at its PVH entry) and `initramfs.cpio` (our own, without udev), both
made by bootfiles.py, Debian's own `vmlinuz` and `initrd.img` beside them (the slower boot they
replace, kept for comparison: `Machine(boot="debian")`), and `id_ed25519` (the key root logs in
with over the management NIC).

The Debian mirror is the one this machine's apt already uses (`./bootstrap.sh debian-uri`), or
`NTG_VM_MIRROR`; no host name is written here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ntgcore.errors import NtgError
from ntgcore.proc import Process, Tool
from ntgcore.sourcetree import source_tree

from .bootfiles import INITRAMFS_INIT, BootFileError, initramfs, pvh_entry, vmlinux_from_bzimage

HERE = Path(__file__).resolve().parent
INIT = HERE / "guest-init.sh"
FORMAT = 2  # what a build makes from the recipe (2: vmlinux and our initramfs added)
TOOLS = (
    Tool("mmdebstrap", "mmdebstrap"),
    Tool("mkfs.ext4", "e2fsprogs"),
    Tool("qemu-img", "qemu-utils"),
)


class ImageError(NtgError):
    """The guest image cannot be built; the message says which step failed and what to do."""


@dataclass(frozen=True)
class Recipe:
    """What the guest image is made of; its hash names the cached image."""

    suite: str = "bookworm"
    # kernel, sshd (Ansible and argv reach the guest over ssh), python3 (Ansible's modules), what
    # builds the native engine (gcc, libc6-dev, make, cmake), iproute2 (the init names the NICs)
    # tcpdump (a receiver or DUT inside a VM) and keepalived (a VRRP DUT of method failover).
    # Kept small: CI builds it.
    packages: tuple[str, ...] = (
        "linux-image-amd64",
        "openssh-server",
        "python3",
        "gcc",
        "libc6-dev",
        "make",
        "cmake",
        "iproute2",
        "kmod",
        "mount",
        "tcpdump",
        "keepalived",
    )
    # the initrds hold only what finds the root file system (Debian's: 5 MB instead of 35; ours
    # also crc32c, which ext4's metadata checksums ask the crypto API for, without modprobe there)
    initrd_modules: tuple[str, ...] = (
        "virtio_pci",
        "virtio_blk",
        "virtio_net",
        "crc32c_generic",
        "ext4",
    )
    pruned_modules: tuple[str, ...] = (
        "drivers/gpu",
        "drivers/media",
        "drivers/net/wireless",
        "drivers/infiniband",
        "drivers/staging",
        "drivers/scsi",
        "drivers/usb",
        "drivers/iio",
        "drivers/bluetooth",
        "drivers/isdn",
        "sound",
        "net/bluetooth",
        "net/wireless",
        "net/mac80211",
    )
    size_mb: int = 2048  # the ext4 file system (sparse; the qcow2 holds only what is used)

    def sha(self) -> str:
        doc = {
            **asdict(self),
            "init": INIT.read_text(),
            "initramfs_init": INITRAMFS_INIT.read_text(),
            "bootfiles": (HERE / "bootfiles.py").read_text(),
            "format": FORMAT,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


RECIPE = Recipe()


@dataclass(frozen=True)
class Image:
    """A built guest image in its cache folder."""

    dir: Path
    sha: str

    @property
    def disk(self) -> Path:
        return self.dir / "disk.qcow2"

    @property
    def kernel(self) -> Path:
        """The kernel qemu boots: an ELF image with a PVH entry (bootfiles.py)."""
        return self.dir / "vmlinux"

    @property
    def initrd(self) -> Path:
        """Our initramfs (bootfiles.py): no udev, uncompressed."""
        return self.dir / "initramfs.cpio"

    @property
    def debian_kernel(self) -> Path:
        """Debian's bzImage, the source of `kernel` (booted through the firmware's loader)."""
        return self.dir / "vmlinuz"

    @property
    def debian_initrd(self) -> Path:
        """Debian's initramfs-tools initrd (udev; gzip)."""
        return self.dir / "initrd.img"

    def engine_layer(self) -> Path:
        """The layer over `disk` with the engine of the current sources built (may not exist yet)."""
        return self.dir / f"engine-{engine_sha()}.qcow2"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    def info(self) -> dict:
        return json.loads((self.dir / "image.json").read_text())


ENGINE_SOURCES = (
    "generators/flowengine",
    "ntgcore/native",
    "playbooks/roles/vm_guest",
    "playbooks/vm_guest.yml",
)


def engine_sha() -> str:
    """Hash of what the guest's engine build is made from (its sources and the role that builds
    it): names the cached layer with the engine built (`engine-<sha>.qcow2` beside the disk)."""
    h = hashlib.sha256()
    repo = source_tree()
    for top in ENGINE_SOURCES:
        root = repo / top
        files = sorted(
            p
            for p in ([root] if root.is_file() else root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        )
        for f in files:
            h.update(str(f.relative_to(repo)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("NTG_VM_CACHE", "/var/cache/ntg-testbed/vm"))


def debian_mirror() -> str:
    """The Debian mirror URI for the guest: NTG_VM_MIRROR, else the one this machine's apt uses
    (bootstrap.sh's `debian_uri`, the one place that reads the apt sources)."""
    if os.environ.get("NTG_VM_MIRROR"):
        return os.environ["NTG_VM_MIRROR"]
    script = source_tree() / "bootstrap.sh"
    out = subprocess.run(
        ["bash", str(script), "debian-uri"], capture_output=True, text=True, timeout=30
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise ImageError(
            "no Debian bookworm entry in this machine's apt sources to build the guest "
            "image from: set NTG_VM_MIRROR to a Debian mirror URI"
        )
    return out.stdout.strip().splitlines()[0]


def cached(recipe: Recipe = RECIPE) -> Image | None:
    """The image of `recipe` if it is built, else None."""
    sha = recipe.sha()
    folder = cache_root() / sha
    return Image(folder, sha) if (folder / "image.json").is_file() else None


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_image(recipe: Recipe = RECIPE, log: Path | None = None) -> Image:
    """The cached image of `recipe`, built first when it is not there yet (minutes; once)."""
    found = cached(recipe)
    if found:
        return found
    missing = [t for t in TOOLS if not t.found()]
    if missing:
        raise ImageError(
            f"building the guest image needs {', '.join(t.command for t in missing)}: "
            f"apt-get install {' '.join(dict.fromkeys(t.package for t in missing))}"
        )
    root = cache_root()
    with _lock(root / f".{recipe.sha()}.lock"):
        found = cached(recipe)  # another process built it while we waited
        if found:
            return found
        return _build(recipe, root, log)


def _run(name: str, argv: list[str], log, timeout: float) -> None:
    proc = Process(f"vm image {name}", argv, stdout=log, stderr=subprocess.STDOUT).start()
    try:
        code = proc.wait(timeout)
    except BaseException:  # Ctrl-C: mmdebstrap forks; its whole process group goes
        proc.stop(grace=5)
        raise
    if code is None:
        proc.stop(grace=5)
        raise ImageError(
            f"guest image: {name} did not finish within {timeout:g} s (see {log.name})"
        )
    if code != 0:
        raise ImageError(
            f"guest image: {name} failed ({proc.record.status}); its output is in {log.name}"
        )


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (mmdebstrap mounts /proc, /sys and /dev into the root it
    builds; an interrupted build may leave them)."""
    base = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == base or point.startswith(base + "/"):
                found.append(point)
    return found


def remove_tree(path: Path) -> None:
    """Delete a build folder, never through a mount: lazily unmount what is mounted below it first,
    and leave it alone (an error) if something is still mounted there."""
    for point in sorted(mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)
    left = mounts_under(path)
    if left:
        raise ImageError(
            f"{path}: still mounted below it: {', '.join(left)}; unmount them, then delete it"
        )
    shutil.rmtree(path, ignore_errors=True)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    return True


def _build(recipe: Recipe, root: Path, log_path: Path | None) -> Image:
    sha = recipe.sha()
    final = root / sha
    work = root / f".{sha}.build-{os.getpid()}"
    for stale in root.glob(".*.build-*"):  # builds killed before they could clean up
        if stale.name.startswith(f".{sha}.") or not _alive(stale.name.rsplit("-", 1)[1]):
            remove_tree(stale)
    work.mkdir(parents=True)
    log_path = log_path or (root / f"{sha}.build.log")
    started = time.monotonic()
    try:
        mirror = debian_mirror()
        with open(log_path, "w") as log:
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"ntg-vm-{sha}",
                    "-f",
                    str(work / "id_ed25519"),
                ],
                check=True,
                timeout=30,
            )
            rootfs = work / "rootfs"
            essential = [  # before the kernel's package makes the initrd
                'mkdir -p "$1/etc/initramfs-tools/conf.d"',
                'printf "MODULES=list\\n" > "$1/etc/initramfs-tools/conf.d/ntg.conf"',
                'printf "%s\\n" '
                + " ".join(recipe.initrd_modules)
                + ' >> "$1/etc/initramfs-tools/modules"',
            ]
            hooks = [
                f'install -m 0755 {INIT} "$1/usr/local/sbin/ntg-init"',
                'echo ntg-vm > "$1/etc/hostname"',
                'printf "/dev/vda / ext4 rw 0 1\\n" > "$1/etc/fstab"',
                f'install -d -m 0700 "$1/root/.ssh" && install -m 0600 {work}/id_ed25519.pub '
                '"$1/root/.ssh/authorized_keys"',
                # no PAM: its session modules (motd scripts and all) cost about 0.4 s of every login under TCG
                'printf "UseDNS no\\nPermitRootLogin prohibit-password\\nUsePAM no\\n" > "$1/etc/ssh/sshd_config.d/ntg.conf"',
                'rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*',
                # drivers for hardware a qemu guest does not have (half of the kernel's modules)
                *[f'rm -rf "$1"/lib/modules/*/kernel/{d}' for d in recipe.pruned_modules],
            ]
            # no documentation, manual pages or translations in the guest (a smaller, faster build)
            excludes = [
                f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale", "info")
            ]
            argv = [
                "mmdebstrap",
                "--mode=root",
                "--variant=apt",
                "--include=" + ",".join(recipe.packages),
                *excludes,
                *[f"--essential-hook={h}" for h in essential],
                *[f"--customize-hook={h}" for h in hooks],
                recipe.suite,
                str(rootfs),
                mirror,
            ]
            _run("mmdebstrap", argv, log, 1800)
            kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
            initrds = sorted((rootfs / "boot").glob("initrd.img-*"))
            if not kernels or not initrds:
                raise ImageError(
                    f"guest image: no kernel or initrd in {rootfs}/boot (linux-image-amd64 "
                    f"not installed?); see {log_path}"
                )
            shutil.copy2(kernels[-1], work / "vmlinuz")
            shutil.copy2(initrds[-1], work / "initrd.img")
            version = kernels[-1].name.removeprefix("vmlinuz-")
            try:
                vmlinux = vmlinux_from_bzimage(kernels[-1].read_bytes())
                if pvh_entry(vmlinux) is None:
                    raise BootFileError("the kernel has no PVH entry note (CONFIG_PVH)")
                (work / "vmlinux").write_bytes(vmlinux)
                (work / "initramfs.cpio").write_bytes(
                    initramfs(rootfs, version, recipe.initrd_modules)
                )
            except BootFileError as exc:
                raise ImageError(
                    f"guest image: the boot files from {kernels[-1].name}: {exc}"
                ) from None
            _run(
                "mkfs.ext4",
                [
                    "mkfs.ext4",
                    "-q",
                    "-F",
                    "-L",
                    "ntgroot",
                    "-d",
                    str(rootfs),
                    str(work / "disk.raw"),
                    f"{recipe.size_mb}M",
                ],
                log,
                600,
            )
            _run(
                "qemu-img convert",
                [
                    "qemu-img",
                    "convert",
                    "-O",
                    "qcow2",
                    str(work / "disk.raw"),
                    str(work / "disk.qcow2"),
                ],
                log,
                600,
            )
            (work / "disk.raw").unlink()
            remove_tree(rootfs)
            (work / "disk.qcow2").chmod(0o444)  # the cached image is never written
            info = {
                "sha": sha,
                "recipe": asdict(recipe),
                "kernel": kernels[-1].name,
                "mirror": mirror,
                "build_s": round(time.monotonic() - started, 1),
            }
            (work / "image.json").write_text(json.dumps(info, indent=1) + "\n")
        os.rename(work, final)
    except BaseException:
        remove_tree(work)
        raise
    return Image(final, sha)


def main() -> int:
    """python -m testbed.endpoints.vm.image: build (or find) the guest image and print its folder."""
    try:
        image = ensure_image()
    except NtgError as exc:
        print(f"vm image: {exc}", file=sys.stderr)
        return exc.exit_status
    print(image.dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
