"""Run `testbed` commands in one process, each as a user would, and say how each ended.

    python tests/fuzz/commands.py CASES.json RESULTS.json

CASES.json is a list of {"id", "argv"}; an argument `{PIPE}` stands for a pipe that a thread of
this process fills with up to PIPE_BYTES bytes, more than the memory bound (a large pipe on
/dev/stdin): a command that reads it to the end fails with a MemoryError. Each command runs
through `testbed.cli.main` with its standard output and error (the file descriptors, so the
children's output too) in files; RESULTS.json gets, per case: the exit status, its stderr, and
`traceback` when an exception left `main` (a MemoryError included) or any thread printed one.

The process runs under a memory bound (RLIMIT_DATA, MEMORY_BOUND), as the commands' documented
limits promise: a command that reads a device or a pipe to the end fails here with a MemoryError.
tests/test_hostile_commands.py builds the table of cases and reads the results.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import threading
import traceback
from pathlib import Path

MEMORY_BOUND = 3 * 2**30
PIPE_BYTES = MEMORY_BOUND + 2**30  # more than the bound: a command that reads it all fails
CHUNK = b"a" * 2**16


def _feed(fd: int) -> None:
    sent = 0
    try:
        while sent < PIPE_BYTES:
            sent += os.write(fd, CHUNK)
    except OSError:  # the reader closed its end: it read what it wanted
        pass
    finally:
        os.close(fd)


def _run_one(main, argv: list[str], out_dir: Path, case: str) -> dict:
    feeder = None
    pipe_r = None
    if "{PIPE}" in argv:
        pipe_r, pipe_w = os.pipe()
        feeder = threading.Thread(target=_feed, args=(pipe_w,), daemon=True)
        feeder.start()
        argv = [f"/dev/fd/{pipe_r}" if a == "{PIPE}" else a for a in argv]
    out_path, err_path = out_dir / f"{case}.out", out_dir / f"{case}.err"
    saved = os.dup(1), os.dup(2)
    result: dict = {"argv": argv}
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            result["status"] = main(argv)
        except SystemExit as exc:  # argparse: exit 2 with its usage line
            result["status"] = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            result["status"] = None
            result["traceback"] = traceback.format_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    if pipe_r is not None:
        try:
            os.close(pipe_r)
        except OSError:
            pass
        feeder.join(timeout=30)
    result["stdout"] = out_path.read_text(errors="replace")[-4000:]
    result["stderr"] = err_path.read_text(errors="replace")[-4000:]
    if "Traceback (most recent call last)" in result["stderr"] and "traceback" not in result:
        result["traceback"] = result["stderr"]
    return result


def main() -> int:
    cases = json.loads(Path(sys.argv[1]).read_text())
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_BOUND, MEMORY_BOUND))
    from testbed.cli import main as testbed_main  # after the bound: the import is measured too

    results = {}
    with tempfile.TemporaryDirectory(prefix="ntg-hostile-") as tmp:
        for case in cases:
            results[case["id"]] = _run_one(testbed_main, case["argv"], Path(tmp), str(len(results)))
            results[case["id"]]["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
