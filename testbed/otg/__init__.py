"""The Open Traffic Generator (OTG) front end: `testbed otg serve` (docs/otg.md).

gRPC (snappi brings it, and `grpcserver` serves it) installs fork handlers that run in every
child the server forks; a child forked while gRPC's threads serve a call can then die of SIGSEGV
before it execs (grpc/grpc#17093). The server forks only to exec (engines, tcpdump, `ip`), so it
needs none of that: fork support is off before anything here imports grpc.
"""

import os

os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "0"
