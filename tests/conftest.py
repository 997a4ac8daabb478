"""Shared pytest fixtures."""

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def flowengine_bin(tmp_path_factory):
    """Path of the flowengine executable.

    $NTG_FLOWENGINE, else `flowengine` on PATH, else the one in this Python's
    scripts directory, else a CMake build of generators/flowengine made once
    per test session.
    """
    candidates = [
        os.environ.get("NTG_FLOWENGINE"),
        shutil.which("flowengine"),
        str(Path(sysconfig.get_path("scripts")) / "flowengine"),
    ]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    if not shutil.which("cmake") or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("flowengine is not installed and cmake or a C compiler is missing to build it")
    build = tmp_path_factory.mktemp("flowengine-build")
    subprocess.run(
        ["cmake", "-S", str(REPO / "generators" / "flowengine"), "-B", str(build),
         "-DCMAKE_BUILD_TYPE=Release"],
        check=True, capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, capture_output=True)
    return build / "flowengine"


@pytest.fixture(scope="session")
def pcaplib(tmp_path_factory):
    """Path of the native capture reader (libntgpcap.so) that analysis.capture loads.

    $NTG_PCAPLIB, else the installed one, else a CMake build of analysis/native made once per
    test session (exported as $NTG_PCAPLIB so that analysis finds it).
    """
    from analysis.capture import LIB_ENV, LIB_NAME, library_paths

    for c in library_paths():
        if c.is_file():
            return c
    if not shutil.which("cmake") or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("libntgpcap is not installed and cmake or a C compiler is missing to build it")
    build = tmp_path_factory.mktemp("ntgpcap-build")
    subprocess.run(
        ["cmake", "-S", str(REPO / "analysis" / "native"), "-B", str(build),
         "-DCMAKE_BUILD_TYPE=Release"],
        check=True, capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    os.environ[LIB_ENV] = str(build / LIB_NAME)
    return build / LIB_NAME
