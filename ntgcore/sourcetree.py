"""The project's source tree: the checkout with bootstrap.sh, playbooks/ and the C sources.

An installed package (`pip install .`, what bootstrap.sh does) carries the Python packages but not
those files, and a few parts need them: the VM back end (bootstrap.sh's `debian-uri`, the
`vm_guest` playbook, the engine sources whose hash names the guest's engine layer). Found as,
in order: NTG_SOURCE_TREE; the folder above this package when it is run from the checkout; the
folder pip installed the package from (its PEP 610 record, `direct_url.json`).
"""

from __future__ import annotations

import json
import os
from functools import cache
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from .errors import RunSetupError

MARK = "bootstrap.sh"
DISTRIBUTION = "ntg-testbed"


class SourceTreeMissing(RunSetupError):
    """No checkout of the project is found; the message says how to point at one."""


def _installed_from() -> Path | None:
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        url = json.loads(text or "{}").get("url", "")
    except ValueError:
        return None
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def find_source_tree(candidates: list[Path]) -> Path:
    """The first of `candidates` that has bootstrap.sh; SourceTreeMissing if none has."""
    for path in candidates:
        if (path / MARK).is_file():
            return path.resolve()
    raise SourceTreeMissing(
        f"the project's source tree (the folder with {MARK} and playbooks/) was not "
        f"found (looked in: {', '.join(map(str, candidates))}): run from the checkout "
        "or set NTG_SOURCE_TREE to it"
    )


@cache
def source_tree() -> Path:
    """The checkout's root folder (it has bootstrap.sh); SourceTreeMissing if there is none."""
    candidates = [Path(p) for p in [os.environ.get("NTG_SOURCE_TREE")] if p]
    candidates += [Path(__file__).resolve().parents[1]]
    found = _installed_from()
    if found is not None:
        candidates.append(found)
    return find_source_tree(candidates)


__all__ = ["SourceTreeMissing", "find_source_tree", "source_tree"]
