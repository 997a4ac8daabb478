"""Shared pytest fixtures."""

import contextlib
import os
import resource
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

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
    """Path of the native library (libntg.so) that analysis.capture loads: the installed one, else
    a CMake build of ntgcore/native, exported as $NTG_PCAPLIB."""
    from analysis import capture

    return _installed_or_built(tmp_path_factory, capture, "ntgcore/native", "ntgnative")


@pytest.fixture(scope="session")
def hashlib_path(tmp_path_factory):
    """Path of the native library (libntg.so) that analysis.hashing loads for the flow-key hashes:
    the installed one, else a CMake build of ntgcore/native, exported as $NTG_HASHLIB."""
    from analysis import hashing

    return _installed_or_built(tmp_path_factory, hashing, "ntgcore/native", "ntgnative")


@pytest.fixture(scope="session")
def wirelib(tmp_path_factory):
    """Path of the native library (libntg.so) that idsrules.evasion.native loads for the wire
    renderer: the installed one, else a CMake build of ntgcore/native, exported as $NTG_WIRELIB."""
    from idsrules.evasion import native

    return _installed_or_built(tmp_path_factory, native, "ntgcore/native", "ntgnative")


# --- lanes: what a test needs, and so where and when it runs (docs/testing.md) -------------------
#
# A test is in a lane because of the fixtures it uses (item.fixturenames: the whole closure, so a
# fixture that requests `root` puts its tests in the live lane) or a lane marker it carries itself
# (a parametrized case: `pytest.param(..., marks=pytest.mark.trex)`); a test in no lane is `unit`.
# One table, read by pytest_collection_modifyitems below.
LANES: dict[str, str] = {
    "unit": "needs nothing but the built project; runs with any number of xdist workers",
    "live": "needs root: network namespaces and veths, mounts, raw sockets",
    "trex": "needs the TRex build of $NTG_TREX_DIR (one TRex server at a time)",
    "vm": "boots qemu guests from the cached guest image (built on first use)",
    "ansible": "runs ansible-playbook (the playbooks/ roles)",
    "suricata": "runs the suricata binary",
}
LANE_OF_FIXTURE: dict[str, tuple[str, ...]] = {
    "root": ("live",),
    "root_in_ci": ("live",),
    "pair": ("live",),
    "topology": ("live",),
    "trex_dir": ("trex",),
    "trex_sim_dir": ("trex",),
    "guest_image": ("vm", "live"),
    "ansible": ("ansible",),
    "suricata": ("suricata",),
    "suricata_in_ci": ("suricata",),
}
LANE_OF_MARKER: dict[str, tuple[str, ...]] = {
    "ntg_live": ("live",),  # testbed/pytest_plugin.py's public marker
    # tests that compare every namespace (process, mount) of the machine before and after: never
    # beside other tests; ./bootstrap.sh test runs them after the parallel phase. Not a lane.
    "serial": (),
}
ROOT_REASON = "needs root (network namespaces, veths, mounts)"


def pytest_configure(config: pytest.Config) -> None:
    for lane, what in LANES.items():
        config.addinivalue_line("markers", f"{lane}: lane: {what}")
    config.addinivalue_line(
        "markers",
        "serial: must not run beside other tests (lists or cleans everything of a kind on the "
        "machine); ./bootstrap.sh test runs it in the serial phase",
    )
    if not config.pluginmanager.hasplugin("xdist"):  # set below, read only by xdist
        config.addinivalue_line("markers", "xdist_group(name): tests kept on one xdist worker")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    for item in items:
        lanes: set[str] = set()
        for name in item.fixturenames:
            lanes.update(LANE_OF_FIXTURE.get(name, ()))
        for mark in item.iter_markers():
            if mark.name in LANES:
                lanes.add(mark.name)
            lanes.update(LANE_OF_MARKER.get(mark.name, ()))
        for lane in sorted(lanes or {"unit"}):
            if lane not in {m.name for m in item.iter_markers()}:
                item.add_marker(lane)
        # a module- or class-scoped fixture is made once per xdist worker: the tests that share
        # one stay on one worker (`--dist loadgroup`), so it is not made again on the others
        info = getattr(item, "_fixtureinfo", None)
        scopes = {
            d.scope for defs in (info.name2fixturedefs.values() if info else ()) for d in defs
        }
        if scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session", autouse=True)
def not_an_xdist_worker_below():
    """On an xdist worker, the PYTEST_XDIST_* variables xdist sets are taken out of the
    environment: a pytest that a test starts (pytest-benchmark's JSON, the lanes' collections) is
    not a worker, and pytest-benchmark would otherwise write nothing there."""
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
        del os.environ[name]


@pytest.fixture(scope="session")
def root() -> None:
    """The test needs root (namespaces, veths, mounts): skipped without it, also in CI, as the
    `skipif(os.geteuid() != 0)` marks it replaces were. Puts the test in the live lane."""
    if os.geteuid() != 0:
        pytest.skip(ROOT_REASON)


@pytest.fixture(scope="session")
def root_in_ci() -> None:
    """Like `root`, but in CI (NTG_CI=1) its absence fails the test (skip_or_fail): for the tests
    whose own check failed in CI before."""
    if os.geteuid() != 0:
        skip_or_fail(ROOT_REASON)


def _trex_build(needs: str) -> Path:
    d = os.environ.get("NTG_TREX_DIR")
    if not d or not (Path(d) / needs).is_file():
        skip_or_fail(
            f"NTG_TREX_DIR does not point at a TRex build with {needs} "
            "(.ci/run sets it to ../shared/trex)"
        )
    return Path(d)


@pytest.fixture(scope="session")
def trex_dir() -> Path:
    """The TRex server build of $NTG_TREX_DIR (server/_t-rex-64-o); missing, the test is skipped
    (fails in CI). Puts the test in the trex lane."""
    return _trex_build("server/_t-rex-64-o")


@pytest.fixture(scope="session")
def trex_sim_dir() -> Path:
    """The TRex build of $NTG_TREX_DIR with its simulator (sim/bp-sim-64); missing, the test is
    skipped (fails in CI). Puts the test in the trex lane."""
    return _trex_build("sim/bp-sim-64")


@pytest.fixture(scope="session")
def suricata() -> str:
    """Path of the suricata binary; missing, the test is skipped (as the marks it replaces did).
    Puts the test in the suricata lane."""
    found = shutil.which("suricata")
    if found is None:
        pytest.skip("suricata not installed (./bootstrap.sh test)")
    return found


@pytest.fixture(scope="session")
def suricata_in_ci() -> str:
    """Like `suricata`, but in CI (NTG_CI=1) its absence fails the test (skip_or_fail): for the
    tests whose own check failed in CI before (coverage gates)."""
    found = shutil.which("suricata")
    if found is None:
        skip_or_fail("suricata not installed (./bootstrap.sh test)")
    return found


@pytest.fixture(scope="session")
def ansible() -> Path:
    """The venv's ansible-playbook; missing, the test is skipped (as tests/test_playbooks.py's own
    check did). Puts the test in the ansible lane."""
    binary = Path(sys.executable).parent / "ansible-playbook"
    if not binary.exists():
        pytest.skip("ansible-playbook is not installed (pip install '.[test]')")
    return binary


@pytest.fixture
def pair(root):
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


DEMO_RULES = Path(__file__).resolve().parents[1] / "scenarios" / "rules" / "attacks-demo.rules"
# a live testbed whose device under test is Suricata with the demo rules (attack_scenario's extra)
LIVE_SURICATA = """\
testbed:
  dut: {kind: suricata, rules: [demo.rules]}
  capture: null
  monitor: {hz: 2}
"""


def attack_scenario(
    folder: Path, attacks: str, *, name: str = "mix", extra: str = "", packets: int = 400
) -> Path:
    """A scenario in `folder` with a small UDP flow and the `attacks:` section `attacks` (YAML
    under `attacks:`, indented here), the demo rules beside it (tests of `attacks:` runs)."""
    shutil.copy(DEMO_RULES, folder / "demo.rules")
    path = folder / f"{name}.yaml"
    flows = (
        "flows:\n  - protocol: udp\n    src: 198.18.200.1\n    dst: 198.19.200.1\n"
        f"    dst_port: 9000\n    rate: 1000\n    packets: {packets}\n    payload: {{size: 100}}\n"
    )
    path.write_text(
        f"version: 1\nname: {name}\n{flows}attacks:\n"
        + textwrap.indent(textwrap.dedent(attacks).strip(), "  ")
        + "\n"
        + extra
    )
    return path


def golden_cases() -> tuple[list[Path], list[Path]]:
    """The golden cases (tests/rules_cases/*/ with a rules.rules), and those that also run over
    IPv6: all but a case whose expect.yaml says `ipv6: false` (and why, `ipv6_why`)."""
    cases = sorted(
        p
        for p in (Path(__file__).parent / "rules_cases").iterdir()
        if (p / "rules.rules").is_file()
    )
    v6 = [
        c for c in cases if yaml.safe_load((c / "expect.yaml").read_text()).get("ipv6") is not False
    ]
    return cases, v6
