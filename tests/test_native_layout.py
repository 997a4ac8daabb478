"""The C layout as a build rule (docs/architecture.md "The native engine"): ntgcore/native is the
one native library, compiled once; the engine's commands (generators/flowengine/src/gen, match,
multiply) stand on src/common and the library, never on each other; every C file is formatted by
the repository's .clang-format. Each checker is also run on a small tree that breaks its rule, so
that none of them can pass by seeing nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
NATIVE = Path("ntgcore/native")
ENGINE_SRC = Path("generators/flowengine/src")
COMMON = ENGINE_SRC / "common"
SKIP_DIRS = {"build", "results", "node_modules", "__pycache__"}

_COMMAND = re.compile(r"(\w+)\s*\(([^)]*)\)", re.S)
_VAR = re.compile(r"\$\{(\w+)\}")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_TARGET_KEYWORDS = {"STATIC", "SHARED", "OBJECT", "MODULE", "PRIVATE", "PUBLIC", "INTERFACE"}


def _walk(root: Path, pattern: str) -> list[Path]:
    """Files matching PATTERN under ROOT, outside build trees, virtual envs and dot-folders."""
    found = []
    for path in root.rglob(pattern):
        parts = path.relative_to(root).parts[:-1]
        if any(p in SKIP_DIRS or p.startswith(".") for p in parts):
            continue
        found.append(path)
    return sorted(found)


def c_sources_by_target(root: Path) -> dict[Path, list[str]]:
    """Every .c file that a CMakeLists.txt under ROOT lists in add_executable, add_library or
    target_sources -> the `CMakeLists:target` entries listing it (${VAR}s of set() and
    ${CMAKE_CURRENT_SOURCE_DIR} expanded, paths resolved against the CMakeLists' folder)."""
    listed: dict[Path, list[str]] = {}
    for cmake in _walk(root, "CMakeLists.txt"):
        text = re.sub(r"#[^\n]*", "", cmake.read_text())
        variables = {"CMAKE_CURRENT_SOURCE_DIR": str(cmake.parent)}
        for name, args in _COMMAND.findall(text):
            words = [_VAR.sub(lambda m, v=variables: v.get(m[1], m[0]), w) for w in args.split()]
            command = name.lower()
            if command == "set" and words:
                variables[words[0]] = " ".join(words[1:])
                continue
            if command not in ("add_executable", "add_library", "target_sources") or not words:
                continue
            target = words[0]
            for word in " ".join(words[1:]).split():
                if word in _TARGET_KEYWORDS or not word.endswith(".c"):
                    continue
                source = (cmake.parent / word).resolve()
                listed.setdefault(source, []).append(f"{cmake.relative_to(root)}:{target}")
    return listed


def twice_listed(root: Path) -> dict[str, list[str]]:
    """The .c files that more than one target (or CMakeLists) lists."""
    return {
        str(src.relative_to(root.resolve())): where
        for src, where in c_sources_by_target(root).items()
        if len(where) > 1
    }


def includes(path: Path) -> list[str]:
    return _INCLUDE.findall(path.read_text())


def resolve_include(path: Path, name: str, search: list[Path]) -> Path | None:
    """Where `#include "NAME"` of PATH is found: its own folder first, then SEARCH in order."""
    for folder in [path.parent, *search]:
        candidate = folder / name
        if candidate.is_file():
            return candidate.resolve()
    return None


def library_include_problems(root: Path) -> list[str]:
    """Includes of the native library's files that are not the library's own headers (it is the
    bottom: nothing of generators/ or analysis/, nothing of the engine)."""
    lib = (root / NATIVE).resolve()
    problems = []
    for path in _walk(root / NATIVE, "*.[ch]"):
        for name in includes(path):
            found = resolve_include(path, name, [])
            if found is None or lib not in found.parents:
                problems.append(f'{path.relative_to(root)}: #include "{name}"')
    return problems


def command_include_problems(root: Path) -> list[str]:
    """Includes of the engine's folders that reach another command's folder (or nowhere): a
    command sees its own folder, src/common and the native library, as the CMake build does;
    src/common sees itself and the library."""
    src = (root / ENGINE_SRC).resolve()
    search = [(root / COMMON).resolve(), (root / NATIVE).resolve()]
    problems = []
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        for path in _walk(folder, "*.[ch]"):
            for name in includes(path):
                found = resolve_include(path, name, search)
                if found is None:
                    problems.append(f'{path.relative_to(root.resolve())}: "{name}" not found')
                    continue
                home = found.parent
                if home not in (folder, *search):
                    problems.append(
                        f'{path.relative_to(root.resolve())}: #include "{name}" is '
                        f"{found.relative_to(root.resolve())}, another command's header"
                    )
    return problems


def clang_format_problems(root: Path, files: list[Path]) -> list[str]:
    """Files that `clang-format --dry-run -Werror` (the .clang-format found above each file)
    would change, with its first complaint."""
    tool = shutil.which("clang-format")
    if not tool:
        skip_or_fail("clang-format is not installed (apt-get install clang-format)")
    problems = []
    for chunk in (files[i : i + 50] for i in range(0, len(files), 50)):
        r = subprocess.run(
            [tool, "--dry-run", "-Werror", *map(str, chunk)],
            capture_output=True,
            text=True,
            cwd=root,
        )
        if r.returncode:
            bad = sorted({line.split(":", 1)[0] for line in r.stderr.splitlines() if ":" in line})
            problems += [b for b in bad if b.endswith((".c", ".h"))] or [r.stderr.strip()]
    return problems


# --- the rules, on this tree ---------------------------------------------------------------


def test_no_c_file_is_compiled_by_two_targets():
    assert twice_listed(REPO) == {}


def test_every_c_file_of_the_engine_and_the_library_is_built_by_one_target():
    listed = c_sources_by_target(REPO)
    sources = _walk(REPO / NATIVE, "*.c") + _walk(REPO / ENGINE_SRC, "*.c")
    assert [str(s.relative_to(REPO)) for s in sources if s.resolve() not in listed] == []


def test_the_native_library_includes_only_its_own_headers():
    assert {"pcapread.c", "flowtab.c", "hash.c", "csum.c"} <= {
        p.name for p in (REPO / NATIVE).iterdir()
    }
    assert library_include_problems(REPO) == []


def test_no_command_folder_includes_another_commands_header():
    folders = {p.name for p in (REPO / ENGINE_SRC).iterdir() if p.is_dir()}
    assert {"common", "gen", "match", "multiply"} <= folders
    assert [p.name for p in (REPO / ENGINE_SRC).glob("*.c")] == ["main.c"]
    assert command_include_problems(REPO) == []


def test_every_c_file_is_clang_format_clean():
    files = [p.relative_to(REPO) for p in _walk(REPO, "*.[ch]")]
    assert files, "no C files found"
    assert clang_format_problems(REPO, files) == []


# --- each checker sees a tree that breaks its rule -----------------------------------------


def test_a_c_file_listed_by_two_cmakelists_is_found(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "exe").mkdir()
    (tmp_path / "lib" / "CMakeLists.txt").write_text("add_library(one SHARED shared.c)\n")
    (tmp_path / "exe" / "CMakeLists.txt").write_text(
        "set(MORE ${CMAKE_CURRENT_SOURCE_DIR}/../lib/shared.c)\n"
        "add_executable(two main.c)\n"
        "target_sources(two PRIVATE ${MORE})  # the same file again\n"
    )
    assert twice_listed(tmp_path) == {
        "lib/shared.c": ["exe/CMakeLists.txt:two", "lib/CMakeLists.txt:one"]
    }


def test_a_library_file_including_an_engine_header_is_found(tmp_path):
    lib = tmp_path / NATIVE
    engine = tmp_path / ENGINE_SRC / "gen"
    lib.mkdir(parents=True)
    engine.mkdir(parents=True)
    (engine / "session.h").write_text("")
    (lib / "csum.h").write_text("")
    (lib / "csum.c").write_text(
        '#include "csum.h"\n#include "../../generators/flowengine/src/gen/session.h"\n'
    )
    assert library_include_problems(tmp_path) == [
        'ntgcore/native/csum.c: #include "../../generators/flowengine/src/gen/session.h"'
    ]


def test_a_command_including_another_commands_header_is_found(tmp_path):
    src = tmp_path / ENGINE_SRC
    for folder in ("common", "gen", "multiply"):
        (src / folder).mkdir(parents=True)
    (tmp_path / NATIVE).mkdir(parents=True)
    (tmp_path / NATIVE / "pcapread.h").write_text("")
    (src / "common" / "halt.h").write_text("")
    (src / "gen" / "session.h").write_text("")
    (src / "multiply" / "mult.c").write_text(
        '#include "halt.h"\n#include "pcapread.h"\n#include "../gen/session.h"\n'
    )
    assert command_include_problems(tmp_path) == [
        f'{ENGINE_SRC}/multiply/mult.c: #include "../gen/session.h" is '
        f"{ENGINE_SRC}/gen/session.h, another command's header"
    ]


def test_a_c_file_off_the_style_is_found(tmp_path):
    shutil.copy(REPO / ".clang-format", tmp_path / ".clang-format")
    (tmp_path / "good.c").write_text("int good(int x)\n{\n    return x + 1;\n}\n")
    (tmp_path / "bad.c").write_text("int bad(int x) {  return x+1; }\n")
    assert clang_format_problems(tmp_path, [Path("good.c"), Path("bad.c")]) == ["bad.c"]
