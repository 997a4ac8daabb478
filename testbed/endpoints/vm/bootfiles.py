"""The two files a guest boots from, made once when the image is built (image.py) so that a TCG
boot skips what costs most before the guest's own init runs (docs/vm.md, "Boot time"):

- `vmlinux`: the kernel's ELF image taken out of Debian's bzImage (`vmlinuz`). qemu starts an
  ELF kernel that has a PVH entry note directly at that entry, so neither the firmware's real-mode
  loader nor the kernel's own decompressor (seconds under TCG) runs.
- `initramfs.cpio`: our own uncompressed initramfs instead of Debian's initramfs-tools one: klibc's
  shell and tools from the guest's root file system, the modules that reach the root file system
  (with their dependencies from modules.dep, loaded in order) and `initramfs-init.sh` as /init. No
  udev: the kernel's devtmpfs makes /dev/vda appear.
"""

from __future__ import annotations

import lzma
import struct
import zlib
from pathlib import Path

from ntgcore.errors import NtgError

HERE = Path(__file__).resolve().parent
INITRAMFS_INIT = HERE / "initramfs-init.sh"
XEN_ELFNOTE_PHYS32_ENTRY = 18  # the note that gives a kernel's PVH (32-bit protected mode) entry
# klibc's programs the initramfs' /init uses (klibc-utils: a dependency of initramfs-tools)
KLIBC_TOOLS = ("sh", "insmod", "mount", "umount", "run-init", "sleep", "cat")


class BootFileError(NtgError):
    """The kernel or the root file system is not what the fast boot files are made from."""


def vmlinux_from_bzimage(bzimage: bytes) -> bytes:
    """The ELF kernel inside a bzImage: its setup header says where the compressed payload is
    (boot protocol 2.08 or later), the payload's first bytes say how it is compressed."""
    if len(bzimage) < 0x250 or bzimage[0x202:0x206] != b"HdrS":
        raise BootFileError("not a bzImage (no 'HdrS' setup header at 0x202)")
    (version,) = struct.unpack_from("<H", bzimage, 0x206)
    if version < 0x208:
        raise BootFileError(
            f"bzImage boot protocol {version >> 8}.{version & 0xFF:02d} has no payload fields"
        )
    setup_sects = bzimage[0x1F1] or 4
    offset, length = struct.unpack_from("<II", bzimage, 0x248)
    start = (setup_sects + 1) * 512 + offset
    payload = bzimage[start : start + length]
    if payload.startswith(b"\xfd7zXZ\x00"):
        unpack = lzma.LZMADecompressor(lzma.FORMAT_XZ)
    elif payload.startswith(b"\x5d\x00\x00"):
        unpack = lzma.LZMADecompressor(lzma.FORMAT_ALONE)
    elif payload.startswith(b"\x1f\x8b"):
        unpack = zlib.decompressobj(wbits=31)  # type: ignore[assignment]
    else:
        raise BootFileError(
            f"the bzImage's payload starts with {payload[:6].hex()}: not xz, lzma or gzip "
            "(the compressions this reads); boot the guest with Machine(boot='debian')"
        )
    elf = unpack.decompress(
        payload
    )  # the payload ends with the 4-byte size: left over as unused data
    if not elf.startswith(b"\x7fELF\x02\x01"):
        raise BootFileError("the bzImage's payload is not a 64-bit little-endian ELF kernel")
    return elf


def pvh_entry(elf: bytes) -> int | None:
    """The PVH entry address in an ELF64 kernel's notes (Xen note 18), None without one."""
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", elf, phoff + i * phentsize
        )
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, kind = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12 : pos + 12 + namesz]
            desc_at = pos + 12 + (namesz + 3) // 4 * 4
            if name == b"Xen\x00" and kind == XEN_ELFNOTE_PHYS32_ENTRY:
                size = "<I" if descsz == 4 else "<Q"
                return struct.unpack_from(size, elf, desc_at)[0]
            pos = desc_at + (descsz + 3) // 4 * 4
    return None


def module_order(modules_dep: str, wanted: tuple[str, ...]) -> list[str]:
    """The module files (paths relative to /lib/modules/<version>) that load `wanted`, each after
    the modules it needs (modules.dep lists a module's dependencies, those it needs first last)."""
    deps: dict[str, tuple[str, list[str]]] = {}
    for line in modules_dep.splitlines():
        if ":" in line:
            path, needs = line.split(":", 1)
            deps[Path(path).name.split(".ko")[0].replace("-", "_")] = (path, needs.split())
    by_path = {path: name for name, (path, _) in deps.items()}
    order: list[str] = []

    def add(name: str) -> None:
        path, needs = deps[name]
        for need in reversed(needs):
            add(by_path[need])
        if path not in order:
            order.append(path)

    for name in wanted:
        key = name.replace("-", "_")
        if key not in deps:
            raise BootFileError(
                f"module {name} is not in the guest kernel's modules.dep (a typo in "
                "Recipe.initrd_modules, or built into the kernel: then leave it out)"
            )
        add(key)
    return order


def _entry(
    name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0), ino: int = 0
) -> bytes:
    """One member of a cpio archive in the kernel's `newc` format (times and owners zero: the same
    archive from the same files)."""
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0)
    head = b"070701" + b"".join(b"%08x" % f for f in fields) + name.encode() + b"\0"
    pad = b"\0" * (-len(head) % 4)
    return head + pad + data + b"\0" * (-len(data) % 4)


def initramfs(rootfs: Path, kernel_version: str, modules: tuple[str, ...]) -> bytes:
    """Our initramfs (uncompressed cpio) from the guest's root file system `rootfs`."""
    klibc_bin = rootfs / "usr/lib/klibc/bin"
    libs = sorted((rootfs / "usr/lib").glob("klibc-*.so"))
    if not libs or not all((klibc_bin / t).is_file() for t in KLIBC_TOOLS):
        raise BootFileError(
            f"no klibc in {rootfs} (usr/lib/klibc-*.so and usr/lib/klibc/bin/: "
            "package klibc-utils, which initramfs-tools brings)"
        )
    moddir = rootfs / "lib/modules" / kernel_version
    order = module_order((moddir / "modules.dep").read_text(), modules)
    members: list[tuple[str, int, bytes, tuple[int, int]]] = [
        ("dev", 0o40755, b"", (0, 0)),
        ("dev/console", 0o20600, b"", (5, 1)),
        ("proc", 0o40755, b"", (0, 0)),
        ("root", 0o40755, b"", (0, 0)),
        ("lib", 0o40755, b"", (0, 0)),
        ("bin", 0o40755, b"", (0, 0)),
        ("modules", 0o40755, b"", (0, 0)),
        (
            f"lib/{libs[-1].name}",
            0o100755,
            libs[-1].read_bytes(),
            (0, 0),
        ),  # the programs' interpreter
        *[(f"bin/{t}", 0o100755, (klibc_bin / t).read_bytes(), (0, 0)) for t in KLIBC_TOOLS],
        *[
            (f"modules/{i:02d}-{Path(p).name}", 0o100644, (moddir / p).read_bytes(), (0, 0))
            for i, p in enumerate(order)
        ],
        ("init", 0o100755, INITRAMFS_INIT.read_bytes(), (0, 0)),
    ]
    out = b"".join(
        _entry(n, mode, data, rdev, ino) for ino, (n, mode, data, rdev) in enumerate(members, 1)
    )
    return out + _entry("TRAILER!!!", 0)
