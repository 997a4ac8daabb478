"""The dissection worker: the only process that imports pyshark (`dissect.py` starts it).

pyshark runs tshark under asyncio and learns tshark's exit status from a child watcher of its own
(a SIGCHLD handler). In a process where anything else reaps children (a library's SIGCHLD
handler, a thread waiting for any child, a stale `subprocess` object), tshark's exit can be
reaped first, and pyshark then reports a healthy tshark as crashed ("Unknown child process pid
N, will report returncode 255"). Here nothing else runs, so the only children are pyshark's, and
the SIGCHLD handler and wakeup fd pyshark installs end with this process.

Run by path (`python .../dissect_worker.py PCAP`), it imports nothing of the project: only the
standard library and pyshark. It writes JSON lines on stdout, one event per line:

  packet   one per IPv4/IPv6 packet: `src`, `dst` (as tshark prints them), `sport`, `dport`
           (0 unless the outer transport is TCP or UDP), `layers` (Wireshark's layer names, lower
           case, in order) and `problems`: [position, text] per malformed marker or expert item
           of severity error, position being the layer it is the fault of
  done     after the last packet: `packets` (how many were read)
  error    `kind`: `tshark-missing` | `tshark-failed` | `failed`, and `message`; then exit 1
"""

import sys

# Run by path, this file's folder is sys.path[0]: its modules (syntax.py, ...) must not shadow
# the standard library's or pyshark's.
if sys.path and sys.path[0] == __file__.rsplit("/", 1)[0]:
    del sys.path[0]

import json

import pyshark

SEVERITY_ERROR = 0x00800000  # Wireshark's PI_ERROR
MALFORMED = "_ws.malformed"
_OUT = sys.stdout


def emit(event: str, **data) -> None:
    data["event"] = event
    _OUT.write(json.dumps(data) + "\n")


def _field_values(layer, name: str) -> list[str]:
    f = layer.get_field(name)
    if f is None:
        return []
    return [x.show for x in f.all_fields]


def packet_problems(pkt, names: list[str]) -> list[list]:
    """[position, text] of every malformed marker and expert error of one packet, position being
    the layer it is the fault of."""
    out: list[list] = []
    for pos, layer in enumerate(pkt.layers):
        # a malformed packet is the fault of the dissector that ran last before the marker
        where = pos - 1 if layer.layer_name == MALFORMED else pos
        severities = _field_values(layer, "_ws_expert_severity")
        messages = _field_values(layer, "_ws_expert_message")
        for k, sev in enumerate(severities):
            try:
                level = int(sev)
            except ValueError:
                continue
            if level >= SEVERITY_ERROR:
                msg = messages[k] if k < len(messages) else "expert error"
                what = (
                    f"malformed {names[where]}"
                    if layer.layer_name == MALFORMED
                    else f"expert error in {layer.layer_name}"
                )
                out.append([where, f"frame {pkt.number}: {what}: {msg}"])
        if layer.layer_name == MALFORMED and not severities:
            out.append([where, f"frame {pkt.number}: malformed {names[where]}"])
    return out


def packet_event(pkt) -> dict | None:
    """The packet's addresses, ports, layers and problems; None without an IP header."""
    if hasattr(pkt, "ip"):
        net, proto = pkt.ip, pkt.ip.proto
    elif hasattr(pkt, "ipv6"):
        net, proto = pkt.ipv6, pkt.ipv6.nxt
    else:
        return None
    sport = dport = 0
    # the outer header's transport (an ICMP error quotes an inner UDP or TCP header)
    transport = {"6": "tcp", "17": "udp"}.get(proto)
    if transport and hasattr(pkt, transport):
        t = getattr(pkt, transport)
        sport, dport = int(t.srcport), int(t.dstport)
    names = [layer.layer_name.lower() for layer in pkt.layers]
    return {
        "src": str(net.src),
        "dst": str(net.dst),
        "sport": sport,
        "dport": dport,
        "layers": names,
        "problems": packet_problems(pkt, names),
    }


def main(pcap: str) -> int:
    count = 0
    try:
        cap = pyshark.FileCapture(pcap, keep_packets=False)
        try:
            for pkt in cap:
                count += 1
                event = packet_event(pkt)
                if event is not None:
                    emit("packet", **event)
        finally:
            cap.close()
    except pyshark.tshark.tshark.TSharkNotFoundException as exc:
        emit("error", kind="tshark-missing", message=str(exc))
        return 1
    except pyshark.capture.capture.TSharkCrashException as exc:
        emit("error", kind="tshark-failed", message=" ".join(str(exc).split()))
        return 1
    except Exception as exc:
        emit("error", kind="failed", message=f"{type(exc).__name__}: {exc}")
        return 1
    emit("done", packets=count)
    return 0


if __name__ == "__main__":
    sys.stdout = sys.stderr  # stray prints must not mix with the events
    try:
        sys.exit(main(sys.argv[1]))
    finally:
        _OUT.flush()
