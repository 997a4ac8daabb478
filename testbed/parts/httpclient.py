"""The client of the inline multiplier's real sessions, run as a script inside its namespace
(stdlib only):

    python httpclient.py --url http://198.18.3.2:8080/ --page page-0.bin:512 ... --rounds 5 --parallel 1 \
        [--pad 0 --pad 800 ...]

Fetches every page `rounds` times (each fetch one TCP session: a new connection), `parallel`
clients at once; fetch k's URL carries a query of `pad[k mod n]` bytes (the server ignores it),
so the requests come in several frame sizes; and prints one JSON line per fetch: page, HTTP status, bytes received, bytes
expected, seconds. Exit status 0 when every fetch gave 200 and the whole page, 1 otherwise;
ends early on SIGTERM or SIGINT (status 1: not everything was fetched).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request


def fetch(url: str) -> tuple[int, int]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, len(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, 0
    except OSError:
        return 0, 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--page", action="append", required=True, help="NAME:BYTES")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--pad", type=int, action="append", default=[])
    args = ap.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    pages = [(n, int(b)) for n, _, b in (p.rpartition(":") for p in args.page)]
    work = [p for _ in range(args.rounds) for p in pages]
    lock = threading.Lock()
    ok = [True]

    def worker(k: int) -> None:
        for i in range(k, len(work), args.parallel):
            if stop.is_set():
                ok[0] = False
                return
            name, size = work[i]
            t0 = time.monotonic()
            pad = args.pad[i % len(args.pad)] if args.pad else 0
            status, got = fetch(args.url + name + ("?" + "p" * pad if pad else ""))
            row = {
                "page": name,
                "status": status,
                "bytes": got,
                "expected": size,
                "seconds": round(time.monotonic() - t0, 6),
            }
            with lock:
                print(json.dumps(row), flush=True)
                ok[0] = ok[0] and status == 200 and got == size

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if ok[0] else 1


if __name__ == "__main__":
    sys.exit(main())
