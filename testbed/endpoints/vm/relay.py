"""python -m testbed.endpoints.vm.relay PIDFILE -- SSH-ARGV...: a command in a guest that stops
when it is told to, as a local process would.

An ssh client that is killed does not stop the command it started in the guest (without a
terminal nothing signals it), so a VM endpoint's `argv` runs this relay instead: it starts the
ssh command (whose remote side writes its pid to PIDFILE in the guest, then execs the command) in
a process group of its own, and turns a SIGTERM, SIGINT, SIGUSR1 or SIGUSR2 it receives into the
same signal for the command in the guest, through a second ssh command (so a signal arrives one
ssh round trip late); it waits for the first to end and exits with its status. stdout and stderr are the ssh command's own.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys

from ntgcore.proc import Process


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(
            "usage: python -m testbed.endpoints.vm.relay PIDFILE -- SSH-ARGV... (its last argument "
            "the remote command)",
            file=sys.stderr,
        )
        return 2
    pidfile, ssh = argv[0], argv[2:]
    prefix = ssh[:-1]  # everything up to the remote command: the same namespace, key and guest
    proc = Process("ssh", ssh).start()  # its own process group: a stop of ours is not its stop
    assert proc.popen is not None

    def relay(signum, frame) -> None:
        kill = f"kill -{signal.Signals(signum).name[3:]} $(cat {shlex.quote(pidfile)}) 2>/dev/null"
        stop = Process(
            "ssh kill", [*prefix, kill], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            if stop.start().wait(15) is None:
                stop.stop(grace=0)
        except OSError:
            proc.stop(grace=0)

    # SIGUSR1/SIGUSR2 too (the engine's pause and resume): their default action would end this
    # relay alone, leaving the command in the guest running with no one to stop it
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, relay)
    while True:
        code = proc.wait(1.0)
        if code is not None:
            return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
