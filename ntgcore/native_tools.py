"""Finding the project's native programs (the `flowengine` executable): the one lookup every
module uses, whether it runs a generator or another subcommand of the program (`flowengine match`,
`flowengine multiply`). Found as, in order: $NTG_<NAME> when set; the one on PATH; the one `pip
install .` put beside this Python's scripts. The native libraries are ntgcore.nativelib's."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

from .errors import GeneratorError


def env_var(name: str) -> str:
    """The environment variable that points at program NAME: NTG_<NAME>, e.g. NTG_FLOWENGINE."""
    return "NTG_" + name.upper().replace("-", "_")


def executable(name: str) -> Path:
    """The native program NAME; GeneratorError saying how to build or point at it if none."""
    env = env_var(name)
    override = os.environ.get(env)
    if override:
        path = Path(override)
        if not path.is_file():
            raise GeneratorError(f"{env}={override} is not a file")
        return path
    found = shutil.which(name)
    if found:
        return Path(found)
    beside = Path(sysconfig.get_path("scripts")) / name
    if beside.is_file():
        return beside
    raise GeneratorError(
        f"the {name} executable was not found; build and install it with `pip install .` "
        f"from the repository (or run ./bootstrap.sh quickstart), or set {env}"
    )


__all__ = ["env_var", "executable"]
