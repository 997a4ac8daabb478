"""The README's set-up commands give a user everything the shipped examples use.

`./bootstrap.sh quickstart` must install every Debian package the tools of every scenario in
`scenarios/` come from, and `pip install .` (no extras) every Python distribution the project's
own code imports; otherwise an example fails after the documented install (issue 15, C9: Scapy
was only a test extra, so `testbed run scenarios/seed001-comparison.yaml` failed).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from ntgcore.scenario import load_scenario
from testbed.runner import required_tools

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
RUNTIME_PACKAGES = ("ntgcore", "testbed", "analysis", "generators", "idsrules")
# pytest loads testbed/pytest_plugin.py itself, so pytest is there whenever that module is imported
LOADED_BY_ITS_HOST = {"pytest"}
# Packages that a distribution puts on sys.path when its own module is imported (so the index of
# installed files does not name them): lbr-trex-client's `import lbr_trex_client` adds TRex's
# `trex` package (generators/trex/worker.py imports it after lbr_trex_client).
PUT_ON_PATH_BY = {"trex": "lbr-trex-client"}


def bootstrap_array(name: str) -> set[str]:
    """The words of a bash array `NAME=(...)` in bootstrap.sh (it may span lines)."""
    text = (ROOT / "bootstrap.sh").read_text()
    m = re.search(rf"^{name}=\(([^)]*)\)", text, re.M)
    assert m, f"bootstrap.sh has no {name}=(...)"
    return set(m.group(1).split())


def quickstart_section() -> str:
    text = (ROOT / "bootstrap.sh").read_text()
    return text[text.index("  quickstart)") : text.index(";;", text.index("  quickstart)"))]


def quickstart_packages() -> set[str]:
    section = quickstart_section()
    names = re.findall(r'"\$\{(APT_\w+)\[@\]\}"', section)
    return set().union(*(bootstrap_array(n) for n in names))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_quickstart_installs_every_tool_of_the_examples(path: Path) -> None:
    scenario = load_scenario(path).scenario
    have = quickstart_packages()
    missing = sorted(
        {f"{t.command} ({t.package})" for t in required_tools(scenario) if t.package not in have}
    )
    assert not missing, (
        f"{path.name} needs {missing}, which `./bootstrap.sh quickstart` does not install"
    )


def third_party_imports() -> dict[str, str]:
    """Top-level names of third-party modules the runtime packages import, with one file each."""
    found: dict[str, str] = {}
    own = set(RUNTIME_PACKAGES)
    for pkg in RUNTIME_PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(f.read_text(), str(f))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for n in names:
                    top = n.split(".")[0]
                    if (
                        top not in own | LOADED_BY_ITS_HOST
                        and top not in sys.stdlib_module_names
                        and top != "__future__"
                    ):
                        found.setdefault(top, str(f.relative_to(ROOT)))
    return found


def core_requirements() -> set[str]:
    """Distribution names `pip install .` installs: pyproject.toml's dependencies (no extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower().replace("_", "-")
        for req in project["dependencies"]
    }


def test_plain_install_gives_every_module_the_code_imports() -> None:
    dists = metadata.packages_distributions()
    core = core_requirements()
    problems = []
    for module, where in sorted(third_party_imports().items()):
        owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        if not owners and module in PUT_ON_PATH_BY:
            try:
                owners = {
                    metadata.metadata(PUT_ON_PATH_BY[module])["Name"].lower().replace("_", "-")
                }
            except metadata.PackageNotFoundError:
                pass
        if not owners:
            problems.append(f"{module} (imported in {where}) is not installed at all")
        elif not owners & core:
            problems.append(
                f"{module} (imported in {where}) comes from {sorted(owners)}, "
                f"which is not a core dependency in pyproject.toml"
            )
    assert not problems, "\n".join(problems)
