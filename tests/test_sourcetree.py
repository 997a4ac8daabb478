"""ntgcore.sourcetree: the checkout is found from the installed package too (what
`.venv/bin/testbed` imports: the VM back end reads bootstrap.sh, the guest playbook and the engine
sources from it, none of which an installed package carries)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ntgcore.sourcetree import MARK, SourceTreeMissing, find_source_tree, source_tree

ROOT = Path(__file__).resolve().parent.parent


def test_the_checkout_is_the_folder_with_bootstrap_sh():
    assert source_tree() == ROOT and (ROOT / MARK).is_file()


def test_the_installed_package_finds_the_checkout_it_was_installed_from():
    """From / with no PYTHONPATH, python imports the installed ntgcore (bootstrap.sh installs the
    package non-editable), whose folder has no bootstrap.sh: the PEP 610 record names the
    checkout. (Run from a checkout that is not the installed one, the record names that one.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NTG_SOURCE_TREE")}
    code = "import ntgcore.sourcetree as s; print(s.__file__); print(s.source_tree())"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    module, found = out.stdout.split()
    assert (Path(found) / MARK).is_file() and (Path(found) / "playbooks" / "vm_guest.yml").is_file()
    if not Path(module).is_relative_to(
        ROOT
    ):  # the installed copy: its own folder has no bootstrap.sh
        assert not (Path(module).parents[1] / MARK).is_file()


def test_a_folder_without_bootstrap_sh_is_passed_over_and_none_found_says_what_to_do(tmp_path):
    assert find_source_tree([tmp_path, ROOT]) == ROOT
    with pytest.raises(SourceTreeMissing) as err:
        find_source_tree([tmp_path])
    assert (
        err.value.exit_status == 2
        and str(tmp_path) in str(err.value)
        and "set NTG_SOURCE_TREE" in str(err.value)
    )
