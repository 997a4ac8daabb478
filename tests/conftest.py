"""Shared pytest fixtures."""

import contextlib
import os
import resource
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Our pytest plugin comes through its entry point once the project is installed; from a bare
# checkout it is loaded here instead.
from importlib.metadata import entry_points

if not any(ep.name == "ntg_testbed" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["testbed.pytest_plugin"]


def _cmake_build(tmp_path_factory, source: str, what: str) -> Path:
    """Build one native part from its own CMakeLists, once per test session."""
    if not shutil.which("cmake") or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip(f"{what} is not installed and cmake or a C compiler is missing to build it")
    build = tmp_path_factory.mktemp(f"{what}-build")
    subprocess.run(
        ["cmake", "-S", str(REPO / source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, capture_output=True)
    return build


@pytest.fixture(scope="session")
def flowengine_bin(tmp_path_factory):
    """Path of the flowengine executable: the installed one (see generators.flowengine.engine_path),
    else a CMake build of generators/flowengine, exported as $NTG_FLOWENGINE for subprocesses."""
    from generators.flowengine import ENGINE_ENV, engine_path
    from ntgcore.errors import GeneratorError

    try:
        return engine_path()
    except GeneratorError:
        pass
    binary = _cmake_build(tmp_path_factory, "generators/flowengine", "flowengine") / "flowengine"
    os.environ[ENGINE_ENV] = str(binary)
    return binary


def _installed_or_built(tmp_path_factory, loader, source: str, what: str) -> Path:
    """A native library that LOADER (a module with library_paths, LIB_NAME, LIB_ENV) loads: the
    installed one, else a CMake build of SOURCE, exported as $LIB_ENV."""
    for c in loader.library_paths():
        if c.is_file():
            return c
    lib = _cmake_build(tmp_path_factory, source, what) / loader.LIB_NAME
    os.environ[loader.LIB_ENV] = str(lib)
    return lib


@pytest.fixture(scope="session")
def pcaplib(tmp_path_factory):
    """Path of the native capture reader (libntgpcap.so) that analysis.capture loads: the installed
    one, else a CMake build of analysis/native, exported as $NTG_PCAPLIB."""
    from analysis import capture

    return _installed_or_built(tmp_path_factory, capture, "analysis/native", "ntgpcap")


@pytest.fixture(scope="session")
def hashlib_path(tmp_path_factory):
    """Path of the flow-key hash library (libntghash.so) that analysis.hashing loads: the installed
    one, else a CMake build of generators/flowengine, exported as $NTG_HASHLIB."""
    from analysis import hashing

    return _installed_or_built(tmp_path_factory, hashing, "generators/flowengine", "ntghash")


@pytest.fixture
def pair():
    """A veth pair in two namespaces made for the test (testbed.topology.VethPair: veth0 in
    `pair.gen`, veth1 in `pair.peer`), always torn down."""
    from testbed.endpoints.netns.topology import VethPair

    p = VethPair(prefix="ntgtest")
    try:
        yield p.setup()
    finally:
        p.teardown()


@pytest.fixture(autouse=True)
def dev_null_stays_a_device():
    """A tripwire: the test that turns /dev/null into a regular file (an atomic replace renamed
    over it, as root) fails by name; /dev/null is made again so that the tests after it (and the
    VM image build, whose apt needs it) are not hit too."""
    yield
    st = os.lstat(os.devnull)
    if stat.S_ISCHR(st.st_mode):
        return
    if os.geteuid() == 0:
        os.unlink(os.devnull)
        os.mknod(os.devnull, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(os.devnull, 0o666)
    pytest.fail(
        f"this test replaced {os.devnull} (now mode {stat.filemode(st.st_mode)}); it was made again"
    )


def limit_memory(limit: int = 2 * 2**30):
    """A preexec_fn for subprocess: the child's address space at most LIMIT bytes, so that an
    input read without a bound ends in a MemoryError there, not in this machine's OOM killer."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@contextlib.contextmanager
def tmpfs(where: Path, options: str):
    """A tmpfs mounted at WHERE (made) with mount OPTIONS (`size=1m`, `ro`); unmounted at the end,
    also when the test fails. Skips without root."""
    if os.geteuid() != 0:
        skip_or_fail("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "ntg-test", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Write WHERE/filler until its file system is full (to the last block); returns the filler."""
    filler = where / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def skip_or_fail(reason: str) -> None:
    """Skip a test whose data or tool is missing; in CI (NTG_CI=1, set by .ci/run) fail instead,
    so that a gate such as a coverage floor can never pass by not running."""
    if os.environ.get("NTG_CI"):
        pytest.fail(f"{reason}; in CI this test must run", pytrace=False)
    pytest.skip(reason)
